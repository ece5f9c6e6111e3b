//! Stacks sharing one ledger (issue #18): a scoped handle writes its stack
//! on every cycle and stage, and recovers, lists and expires its own only.

use super::*;

fn scope(name: &str, class: Option<&str>) -> StackScope {
    StackScope {
        name: name.into(),
        class: class.map(Into::into),
    }
}

#[tokio::test]
async fn each_stack_recovers_lists_and_expires_only_its_own_rows() {
    for ledger in backends().await {
        let a = ledger.clone().scoped(scope("box-a", Some("spark")));
        let b = ledger.clone().scoped(scope("box-b", Some("spark")));
        let (stage_a, _, _) = staged_win(&a, 1).await;
        let (stage_b, _, _) = staged_win(&b, 1).await;
        assert_eq!(
            a.stage(stage_a).await.unwrap().stack.as_deref(),
            Some("box-a")
        );
        assert_eq!(
            b.stage(stage_b).await.unwrap().stack.as_deref(),
            Some("box-b")
        );

        let running_a = a.open_cycle(t(400), ProposerKind::Bandit).await.unwrap();
        let running_b = b.open_cycle(t(400), ProposerKind::Bandit).await.unwrap();
        let rec = a.cycle(running_a).await.unwrap();
        assert_eq!(
            (rec.stack.as_deref(), rec.class.as_deref()),
            (Some("box-a"), Some("spark"))
        );
        // box-a restarting after a crash must not abort box-b's live cycle.
        assert_eq!(a.abort_running_cycles("crashed", t(500)).await.unwrap(), 1);
        assert_eq!(
            a.cycle(running_a).await.unwrap().status,
            CycleStatus::Aborted
        );
        assert_eq!(
            b.cycle(running_b).await.unwrap().status,
            CycleStatus::Running
        );

        // Each lists its own stages; the unscoped handle (the CLI) sees both.
        let ids = |l: Vec<StageSummary>| l.iter().map(|s| s.id).collect::<Vec<_>>();
        assert_eq!(
            ids(a.stages(Some(StageState::Staged)).await.unwrap()),
            vec![stage_a]
        );
        assert_eq!(ids(b.stages(None).await.unwrap()), vec![stage_b]);
        assert_eq!(ledger.stages(None).await.unwrap().len(), 2);

        // box-a's live profile moving on expires box-a's stage, not box-b's.
        let mut tx = a.begin_write().await.unwrap();
        let expired = tx
            .expire_stale_stages(&digest(9), "the live profile changed", t(600))
            .await
            .unwrap();
        tx.commit().await.unwrap();
        assert_eq!(expired, vec![stage_a]);
        assert_eq!(b.stage(stage_b).await.unwrap().state, StageState::Staged);
    }
}

#[tokio::test]
async fn rows_from_before_stacks_were_recorded_go_to_the_first_scoped_daemon() {
    for ledger in backends().await {
        let (old_stage, _, _) = staged_win(&ledger, 1).await;
        let old_cycle = ledger
            .open_cycle(t(400), ProposerKind::Model)
            .await
            .unwrap();
        // An unscoped handle adopts nothing.
        assert_eq!(ledger.adopt_unowned().await.unwrap(), Adopted::default());
        let a = ledger.clone().scoped(scope("desk", None));
        assert_eq!(
            a.adopt_unowned().await.unwrap(),
            Adopted {
                cycles: 2,
                stages: 1
            }
        );
        assert_eq!(
            a.cycle(old_cycle).await.unwrap().stack.as_deref(),
            Some("desk")
        );
        assert_eq!(
            a.stage(old_stage).await.unwrap().stack.as_deref(),
            Some("desk")
        );
        // A second daemon finds nothing left to adopt.
        let b = ledger.clone().scoped(scope("other", None));
        assert_eq!(b.adopt_unowned().await.unwrap(), Adopted::default());
        assert!(b.stages(None).await.unwrap().is_empty());
    }
}
