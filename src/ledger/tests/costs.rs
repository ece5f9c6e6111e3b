//! Each cycle's cost: wall time against the engine runs' own time.

use super::*;

#[tokio::test]
async fn a_cycle_costs_the_sum_of_its_runs_and_lists_its_verdicts() {
    for ledger in backends().await {
        let id = ledger.open_cycle(t(0), ProposerKind::Bandit).await.unwrap();
        let e = ledger
            .insert_experiment(&experiment(id, 1, 2))
            .await
            .unwrap();
        for (i, d) in [0.25, 0.5].into_iter().enumerate() {
            let order = u32::try_from(i).unwrap();
            ledger
                .insert_run(&NewRun {
                    duration_s: d,
                    ..run(e, Arm::Warmup, order, None)
                })
                .await
                .unwrap();
        }
        ledger
            .insert_verdict(e, &refusal(VerdictKind::Failed, "crashed"))
            .await
            .unwrap();
        ledger
            .close_cycle(id, &CycleOutcome::Failed("crashed".into()), t(200))
            .await
            .unwrap();
        let open = ledger
            .open_cycle(t(300), ProposerKind::Bandit)
            .await
            .unwrap();

        let costs = ledger.cycle_costs().await.unwrap();
        assert_eq!(costs.len(), 2);
        assert_eq!(costs[0].id, id);
        assert_eq!(costs[0].status, CycleStatus::Failed);
        assert_eq!(costs[0].ended_at, Some(t(200)));
        assert!((costs[0].engine_s - 0.75).abs() < 1e-12, "{costs:?}");
        assert_eq!(costs[0].runs, 2);
        assert_eq!(costs[0].verdicts, vec![VerdictKind::Failed]);
        assert_eq!(costs[1].id, open);
        assert_eq!(costs[1].ended_at, None);
        assert_eq!(costs[1].engine_s, 0.0);
        assert!(costs[1].verdicts.is_empty());
        assert!(ledger.stored_bytes().await.unwrap() >= 4096);
    }
}
