//! The report's queries per stack (issue #18: one report per stack of a
//! fleet): each reads its own stack's rows, and the rows with no stack
//! only when asked to (they belong to the config's own stack).

use super::*;

fn scope(name: &str, class: Option<&str>) -> StackScope {
    StackScope {
        name: name.into(),
        class: class.map(Into::into),
    }
}

fn stack(name: &str, with_unowned: bool) -> ReportStack {
    ReportStack {
        name: name.into(),
        with_unowned,
    }
}

/// A stack no row names, reading the rows with no stack: what a
/// pre-fleet ledger's report reads.
pub(super) fn unscoped() -> ReportStack {
    stack("no-such-stack", true)
}

/// One failed cycle of `ledger`'s stack at `at` (a cycle, its proposal, a
/// verdict): a row for every per-cycle query.
async fn failed_cycle(ledger: &Ledger, at: DateTime<Utc>) -> CycleId {
    let mut tx = ledger.begin_write().await.unwrap();
    let c = tx.open_cycle(at, ProposerKind::Bandit).await.unwrap();
    tx.insert_proposal(&NewProposal {
        cycle_id: c,
        proposer: ProposerKind::Bandit,
        attempt: 1,
        created_at: at,
        prompt: None,
        raw_answer: None,
        parsed: None,
        rejection: Some(ProposalRejection {
            kind: "unparseable".into(),
            reason: "not JSON".into(),
        }),
        note: None,
    })
    .await
    .unwrap();
    tx.close_cycle(c, &CycleOutcome::Failed("no model".into()), at)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    c
}

#[tokio::test]
async fn each_stack_reads_its_own_rows_and_the_unowned_only_when_asked() {
    for ledger in backends().await {
        let a = ledger.clone().scoped(scope("box-a", Some("spark")));
        let b = ledger.clone().scoped(scope("box-b", Some("spark")));
        // A row from before stacks were recorded, then one win per stack.
        let (old_stage, old_win, _) = staged_win(&ledger, 1).await;
        let (stage_a, win_a, _) = staged_win(&a, 2).await;
        let (stage_b, win_b, _) = staged_win(&b, 3).await;
        let late_b = failed_cycle(&b, t(5_000)).await;
        let (from, to) = (t(0), t(10_000));

        let with_old = stack("box-a", true);
        let only_a = stack("box-a", false);
        let only_b = stack("box-b", false);

        let cycles = |l: Vec<CycleRecord>| l.iter().map(|c| c.stack.clone()).collect::<Vec<_>>();
        assert_eq!(
            cycles(ledger.report_cycles(&with_old, from, to).await.unwrap()),
            vec![None, Some("box-a".into())]
        );
        assert_eq!(
            cycles(ledger.report_cycles(&only_a, from, to).await.unwrap()),
            vec![Some("box-a".into())]
        );
        assert_eq!(
            ledger.report_cycles(&only_b, from, to).await.unwrap().len(),
            2
        );

        let stages = |l: Vec<ReportStage>| l.iter().map(|s| s.id).collect::<Vec<_>>();
        assert_eq!(
            stages(ledger.report_stages(&with_old, from, to).await.unwrap()),
            vec![old_stage, stage_a]
        );
        assert_eq!(
            stages(ledger.report_stages(&only_b, from, to).await.unwrap()),
            vec![stage_b]
        );

        // Verdicts and runs follow their experiment's cycle.
        let verdicts = ledger.report_verdicts(&only_a, from, to).await.unwrap();
        assert_eq!(verdicts.len(), 2, "{verdicts:?}");
        assert!(verdicts.iter().all(|v| v.experiment_id >= Some(win_a)));
        assert!(verdicts.iter().all(|v| v.experiment_id < Some(win_b)));
        // No proposal chose the win or its confirmation: no proposer, though
        // the cycle's daemon was configured with the model.
        assert!(
            verdicts.iter().all(|v| v.proposer.is_none()),
            "{verdicts:?}"
        );
        let b_cycles = ledger.report_cycles(&only_b, from, to).await.unwrap();
        let proposers: Vec<_> = b_cycles.iter().map(|c| (c.id, c.proposer)).collect();
        assert_eq!(proposers[1], (late_b, Some(ProposerKind::Bandit)));
        assert_eq!(proposers[0].1, None, "{proposers:?}");
        let runs = ledger.report_runs(&with_old, from, to).await.unwrap();
        let mut exps: Vec<_> = runs.iter().map(|r| r.experiment_id).collect();
        exps.dedup();
        assert_eq!(
            exps.len(),
            4,
            "two experiments each of the old and box-a's win"
        );
        assert_eq!(exps[0], old_win);
        assert!(runs.iter().all(|r| r.experiment_id < win_b));
        let proposals = ledger.report_proposals(&only_b, from, to).await.unwrap();
        assert_eq!(
            proposals.iter().map(|p| p.cycle_id).collect::<Vec<_>>(),
            vec![late_b]
        );
        assert!(
            ledger
                .report_proposals(&with_old, from, to)
                .await
                .unwrap()
                .is_empty()
        );

        // Where each stack's cycles are, and which stacks there are.
        let latest = ledger.report_latest_cycle(&only_b).await.unwrap().unwrap();
        assert_eq!(latest.id, late_b);
        assert_eq!(latest.class.as_deref(), Some("spark"));
        assert!(
            ledger
                .report_latest_cycle(&stack("box-c", false))
                .await
                .unwrap()
                .is_none()
        );
        let old = ledger
            .report_latest_cycle(&stack("box-c", true))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(old.stack, None);
        assert_eq!(
            ledger.report_stacks().await.unwrap(),
            vec!["box-a".to_string(), "box-b".to_string()]
        );
    }
}
