//! Reverts: asked for once (again only after a refusal), settled once
//! (written or refused), listed for the stage's own stack's daemon only,
//! and restarts recorded only on a written profile; on both backends.

use super::*;

fn scope(name: &str) -> StackScope {
    StackScope {
        name: name.into(),
        class: None,
    }
}

/// A stage of `ledger`'s stack, approved at t(300) and applied at t(310).
async fn applied(ledger: &Ledger, base: u8) -> StageId {
    let (id, _, _) = staged_win(ledger, base).await;
    let mut tx = ledger.begin_write().await.unwrap();
    tx.decide_stage(id, StageDecision::Approved, "alice", None, t(300))
        .await
        .unwrap();
    assert!(
        tx.settle_apply(
            id,
            ApplyOutcome::Applied,
            "stage approve",
            "/srv/live.toml",
            t(310)
        )
        .await
        .unwrap()
    );
    tx.commit().await.unwrap();
    id
}

async fn request(ledger: &Ledger, id: StageId, by: &str, at: i64) -> bool {
    let mut tx = ledger.begin_write().await.unwrap();
    let done = tx
        .request_revert(id, by, "slower live", t(at))
        .await
        .unwrap();
    tx.commit().await.unwrap();
    done
}

async fn settle(ledger: &Ledger, id: StageId, outcome: ApplyOutcome<'_>, at: i64) -> bool {
    let mut tx = ledger.begin_write().await.unwrap();
    let done = tx
        .settle_revert(
            id,
            outcome,
            "the daemon of stack box-a",
            "/srv/live.toml",
            t(at),
        )
        .await
        .unwrap();
    tx.commit().await.unwrap();
    done
}

#[tokio::test]
async fn a_revert_is_asked_for_once_settled_once_and_seen_by_its_own_stack_only() {
    for ledger in backends().await {
        let a = ledger.clone().scoped(scope("box-a"));
        let b = ledger.clone().scoped(scope("box-b"));
        let id = applied(&a, 1).await;
        assert!(a.stage_revert(id).await.unwrap().is_none());
        // A restart is recorded on a written profile only.
        a.record_restart(id, Restarted::Revert, t(390))
            .await
            .unwrap();
        assert!(a.stage_revert(id).await.unwrap().is_none());

        assert!(request(&a, id, "bob", 400).await);
        assert!(
            !request(&a, id, "carol", 401).await,
            "one waiting revert at a time"
        );
        let r = a.stage_revert(id).await.unwrap().unwrap();
        assert_eq!(
            (r.status(), r.requested_by.as_str()),
            (RevertStatus::Waiting, "bob")
        );
        let ids = |v: Vec<StageRevert>| v.iter().map(|r| r.stage_id).collect::<Vec<_>>();
        assert_eq!(ids(a.reverts_to_apply().await.unwrap()), vec![id]);
        assert!(b.reverts_to_apply().await.unwrap().is_empty());

        // Refused (the live profile moved): asked for again, it waits anew.
        assert!(
            settle(
                &a,
                id,
                ApplyOutcome::Refused("the live profile changed"),
                410
            )
            .await
        );
        assert!(
            !settle(&a, id, ApplyOutcome::Applied, 411).await,
            "settled once"
        );
        assert_eq!(
            a.stage_revert(id).await.unwrap().unwrap().status(),
            RevertStatus::Refused
        );
        assert!(a.reverts_to_apply().await.unwrap().is_empty());
        assert!(request(&a, id, "carol", 420).await);
        let r = a.stage_revert(id).await.unwrap().unwrap();
        assert_eq!(
            (r.status(), r.requested_by.as_str()),
            (RevertStatus::Waiting, "carol")
        );
        assert_eq!(r.refusal, None);

        assert!(settle(&a, id, ApplyOutcome::Applied, 430).await);
        a.record_restart(id, Restarted::Revert, t(440))
            .await
            .unwrap();
        let r = a.stage_revert(id).await.unwrap().unwrap();
        assert_eq!(r.status(), RevertStatus::Reverted);
        assert_eq!((r.applied_at, r.restarted_at), (Some(t(430)), Some(t(440))));
        assert!(
            !request(&a, id, "dan", 450).await,
            "a done revert is not asked for again"
        );
        assert_eq!(ids(a.stage_reverts().await.unwrap()), vec![id]);

        a.record_restart(id, Restarted::Approval, t(460))
            .await
            .unwrap();
        assert_eq!(a.stage(id).await.unwrap().restarted_at, Some(t(460)));
    }
}

/// The metrics endpoint's stage counts: by state, per stack, and the
/// approved stages whose revert was written (not one asked for or refused).
#[tokio::test]
async fn stage_counts_are_by_state_per_stack_and_count_written_reverts_only() {
    for ledger in backends().await {
        let a = ledger.clone().scoped(scope("box-a"));
        let b = ledger.clone().scoped(scope("box-b"));
        assert_eq!(a.stage_counts().await.unwrap(), StageCounts::default());
        let reverted = applied(&a, 1).await;
        let refused = applied(&a, 2).await;
        let asked = applied(&a, 3).await;
        staged_win(&a, 4).await;
        let (rejected, _, _) = staged_win(&a, 5).await;
        a.decide_stage(
            rejected,
            StageDecision::Rejected,
            "bob",
            Some("slower"),
            t(320),
        )
        .await
        .unwrap();
        staged_win(&b, 6).await;
        for id in [reverted, refused, asked] {
            assert!(request(&a, id, "bob", 400).await);
        }
        assert!(settle(&a, reverted, ApplyOutcome::Applied, 410).await);
        assert!(settle(&a, refused, ApplyOutcome::Refused("moved on"), 410).await);

        let counts = a.stage_counts().await.unwrap();
        assert_eq!(
            counts,
            StageCounts {
                staged: 1,
                approved: 3,
                rejected: 1,
                expired: 0,
                reverted: 1,
            }
        );
        assert_eq!(counts.of(StageState::Approved), 3);
        assert_eq!(b.stage_counts().await.unwrap().staged, 1);
        let all = ledger.stage_counts().await.unwrap();
        assert_eq!((all.staged, all.approved), (2, 3), "unscoped: every stack");
    }
}
