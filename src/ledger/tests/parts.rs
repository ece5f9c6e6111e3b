//! The live profile's measured parts of a token (the bandit's lead).

use super::*;

#[tokio::test]
async fn a_profiles_parts_come_from_either_arm_that_ran_it_on_this_stack_only() {
    for ledger in backends().await {
        let mine = ledger.clone().scoped(StackScope {
            name: "box-a".into(),
            class: None,
        });
        let theirs = ledger.clone().scoped(StackScope {
            name: "box-b".into(),
            class: None,
        });
        // On box-a: profile 1 is the base (baseline arm), then the
        // candidate of a second experiment on base 2 (candidate arm).
        for (handle, base, candidate) in [(&mine, 1, 3), (&mine, 2, 1), (&theirs, 1, 4)] {
            let mut tx = handle.begin_write().await.unwrap();
            let cycle = tx.open_cycle(t(0), ProposerKind::Bandit).await.unwrap();
            let e = tx
                .insert_experiment(&experiment(cycle, base, candidate))
                .await
                .unwrap();
            abba(&mut tx, e).await;
            // A run that reports no part.
            let mut bare = run(e, Arm::Baseline, 4, Some(2));
            bare.parts = TokenParts::default();
            tx.insert_run(&bare).await.unwrap();
            tx.commit().await.unwrap();
        }
        let got = mine.recent_token_parts(&digest(1), 24).await.unwrap();
        // Two baseline runs of the first experiment, two candidate runs of
        // the second; none of box-b's, none without parts.
        assert_eq!(got.len(), 4, "{got:?}");
        assert!(
            got.iter()
                .all(|m| m.parts.trunk_seconds_per_token == Some(0.4))
        );
        // Newest first (the fixture's runs take 1.5 + order/100 s/token):
        // the second experiment's candidate runs, then the first's baselines.
        let spt: Vec<f64> = got.iter().map(|m| m.seconds_per_token).collect();
        assert_eq!(spt, vec![1.52, 1.51, 1.53, 1.50]);
        assert_eq!(
            mine.recent_token_parts(&digest(1), 2).await.unwrap().len(),
            2
        );
        assert!(
            mine.recent_token_parts(&digest(9), 24)
                .await
                .unwrap()
                .is_empty()
        );
        // The unscoped handle sees both stacks' runs of profile 1.
        assert_eq!(
            ledger
                .recent_token_parts(&digest(1), 24)
                .await
                .unwrap()
                .len(),
            6
        );
    }
}
