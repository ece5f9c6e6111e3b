//! A stage approved for its class (issue #18 item 4): every classmate
//! finds it to apply once, records its own apply, and no other stack does.

use super::*;

fn scope(name: &str, class: Option<&str>) -> StackScope {
    StackScope {
        name: name.into(),
        class: class.map(Into::into),
    }
}

#[tokio::test]
async fn a_stage_approved_for_its_class_is_applied_once_by_each_classmate() {
    for ledger in backends().await {
        let a = ledger.clone().scoped(scope("box-a", Some("spark")));
        let b = ledger.clone().scoped(scope("box-b", Some("spark")));
        let c = ledger.clone().scoped(scope("box-c", Some("spark")));
        let other = ledger.clone().scoped(scope("box-x", Some("dgx")));
        let (id, _, _) = staged_win(&a, 1).await;
        let ids = |l: Vec<Stage>| l.iter().map(|s| s.id).collect::<Vec<_>>();

        // Approved for its stack only: no classmate applies it.
        let mut tx = a.begin_write().await.unwrap();
        tx.decide_stage(id, StageDecision::Approved, "alice", None, t(300))
            .await
            .unwrap();
        tx.commit().await.unwrap();
        assert!(b.class_stages_to_apply().await.unwrap().is_empty());

        let mut tx = a.begin_write().await.unwrap();
        tx.approve_for_class(id, "spark").await.unwrap();
        tx.commit().await.unwrap();
        assert_eq!(
            ledger
                .stage(id)
                .await
                .unwrap()
                .approved_for_class
                .as_deref(),
            Some("spark")
        );
        // Each classmate finds it; its own stack applies it through the
        // stages columns, another class never.
        assert_eq!(ids(b.class_stages_to_apply().await.unwrap()), vec![id]);
        assert_eq!(ids(c.class_stages_to_apply().await.unwrap()), vec![id]);
        assert!(a.class_stages_to_apply().await.unwrap().is_empty());
        assert!(other.class_stages_to_apply().await.unwrap().is_empty());
        assert_eq!(ids(a.stages_to_apply().await.unwrap()), vec![id]);

        // box-b applies it once; a second settle changes nothing.
        for (expected, at) in [(true, t(400)), (false, t(500))] {
            let mut tx = b.begin_write().await.unwrap();
            let settled = tx
                .settle_class_apply(
                    id,
                    ApplyOutcome::Applied,
                    "the daemon of box-b",
                    "/b/live.toml",
                    at,
                )
                .await
                .unwrap();
            tx.commit().await.unwrap();
            assert_eq!(settled, expected);
        }
        // box-c's live profile moved on: it records why it wrote nothing.
        let mut tx = c.begin_write().await.unwrap();
        assert!(
            tx.settle_class_apply(
                id,
                ApplyOutcome::Refused("the live profile changed"),
                "the daemon of box-c",
                "/c/live.toml",
                t(450)
            )
            .await
            .unwrap()
        );
        tx.commit().await.unwrap();
        assert!(b.class_stages_to_apply().await.unwrap().is_empty());
        assert!(c.class_stages_to_apply().await.unwrap().is_empty());

        let applies = ledger.class_applies(id).await.unwrap();
        assert_eq!(applies.len(), 2, "{applies:?}");
        assert_eq!(
            (
                applies[0].stack.as_str(),
                applies[0].applied_at,
                applies[0].refusal.as_deref()
            ),
            ("box-b", Some(t(400)), None)
        );
        assert_eq!(
            (
                applies[1].stack.as_str(),
                applies[1].applied_at,
                applies[1].refusal.as_deref()
            ),
            ("box-c", None, Some("the live profile changed"))
        );
        // The stage's own apply is untouched by its classmates'.
        assert_eq!(ledger.stage(id).await.unwrap().apply(), StageApply::Waiting);
        // An unscoped handle records no host's apply.
        let mut tx = ledger.begin_write().await.unwrap();
        let err = tx
            .settle_class_apply(id, ApplyOutcome::Applied, "someone", "/x", t(600))
            .await
            .unwrap_err();
        assert!(matches!(err, LedgerError::Unscoped { .. }), "{err}");
        drop(tx);
        assert_eq!(
            ledger.class_stacks("spark").await.unwrap(),
            vec!["box-a".to_string()]
        );
    }
}
