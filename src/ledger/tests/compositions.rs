//! Compositions: a composite's parts are recorded once, read back best
//! first by `stage list`, `stage show` and the report, and a part finds the
//! staged composites that apply it.

use super::*;

#[tokio::test]
async fn a_composite_stage_names_its_parts_and_a_part_its_composites() {
    for ledger in backends().await {
        let (a, _, _) = staged_win(&ledger, 1).await;
        let (b, _, _) = staged_win(&ledger, 1).await;
        // The composite, measured and confirmed like any win.
        let (composite, first, _) = staged_win(&ledger, 1).await;
        let cycle = ledger
            .open_cycle(t(400), ProposerKind::Bandit)
            .await
            .unwrap();
        ledger
            .insert_composition(&NewComposition {
                cycle_id: cycle,
                created_at: t(400),
                base_digest: digest(1),
                experiment_id: Some(first),
                refusal: None,
                parts: vec![b, a],
            })
            .await
            .unwrap();
        // A refused combination is remembered without an experiment.
        ledger
            .insert_composition(&NewComposition {
                cycle_id: cycle,
                created_at: t(400),
                base_digest: digest(1),
                experiment_id: None,
                refusal: Some("the pre-flight refused it".into()),
                parts: vec![a],
            })
            .await
            .unwrap();

        let on = ledger.compositions_on(&digest(1)).await.unwrap();
        assert_eq!(on.len(), 2);
        assert_eq!(on[0].parts, vec![b, a], "best first, as recorded");
        assert_eq!(on[1].experiment_id, None);
        assert!(ledger.compositions_on(&digest(2)).await.unwrap().is_empty());
        assert_eq!(
            ledger.composition_of(first).await.unwrap().unwrap().id,
            on[0].id
        );

        let list = ledger.stages(Some(StageState::Staged)).await.unwrap();
        let shown = list.iter().find(|s| s.id == composite).unwrap();
        let ids: Vec<StageId> = shown.parts.iter().map(|p| p.stage_id).collect();
        assert_eq!(ids, vec![b, a]);
        assert_eq!(shown.parts[0].menu_id, MenuId::StageSpeculative);
        assert!(
            list.iter()
                .filter(|s| s.id != composite)
                .all(|s| s.parts.is_empty())
        );
        let detail = ledger.stage_detail(composite).await.unwrap();
        assert_eq!(detail.parts, shown.parts);
        let report = ledger
            .report_stages(&super::report::unscoped(), t(0), t(10_000))
            .await
            .unwrap();
        let reported = report.iter().find(|s| s.id == composite).unwrap();
        assert_eq!(reported.parts, shown.parts);

        let mut tx = ledger.begin_write().await.unwrap();
        assert_eq!(tx.staged_composites_of(a).await.unwrap(), vec![composite]);
        assert_eq!(tx.parts_of(first).await.unwrap(), shown.parts);
        // Once the composite is decided, it is no part's open composite.
        tx.expire_stage(composite, "test", t(500)).await.unwrap();
        assert!(tx.staged_composites_of(a).await.unwrap().is_empty());
        tx.commit().await.unwrap();

        // Refusing after the A/B records why.
        ledger
            .refuse_composition(on[0].id, "did not beat")
            .await
            .unwrap();
        let c = ledger.composition_of(first).await.unwrap().unwrap();
        assert_eq!(c.refusal.as_deref(), Some("did not beat"));
    }
}
