//! Manual experiments (`orchestrator compare`): recorded beside the loop's,
//! left out of everything the loop decides from, listed by `ledger`.

use super::*;

fn manual(cycle_id: CycleId, confirmation_of: Option<ExperimentId>) -> NewManualExperiment {
    NewManualExperiment {
        cycle_id,
        confirmation_of,
        created_at: t(10),
        method: Method::Bench,
        base_profile: "# profile 1\n".into(),
        base_digest: digest(1),
        candidate_profile: "# profile 9\n".into(),
        candidate_digest: digest(9),
        notes: json!({"candidate_file": "/tmp/tuned.toml", "base_is_live": true}),
    }
}

/// A manual win on the live profile, unconfirmed (its comparison was
/// stopped before the confirmation), as the newest experiment: the loop's
/// history must not see it, or the daemon would confirm and stage it.
#[tokio::test]
async fn the_loops_history_leaves_manual_experiments_out() {
    for ledger in backends().await {
        let loops = ledger.open_cycle(t(0), ProposerKind::Bandit).await.unwrap();
        let own = ledger
            .insert_experiment(&experiment(loops, 1, 2))
            .await
            .unwrap();
        ledger
            .insert_verdict(own, &measured(VerdictKind::Loss, 0.2, 0.1, 0.3))
            .await
            .unwrap();
        // On a stack of class `k`: a classmate must not take it for a win
        // of this stack's to confirm.
        let mine = ledger.clone().scoped(StackScope {
            name: "mine".into(),
            class: Some("k".into()),
        });
        let human = mine.open_cycle(t(50), ProposerKind::Human).await.unwrap();
        let win = ledger
            .insert_manual_experiment(&manual(human, None))
            .await
            .unwrap();
        ledger
            .insert_verdict(win, &measured(VerdictKind::Win, -0.5, -0.6, -0.4))
            .await
            .unwrap();

        let recent = ledger.recent_experiments(8).await.unwrap();
        assert_eq!(
            recent.iter().map(|e| e.experiment_id).collect::<Vec<_>>(),
            vec![own]
        );
        assert_eq!(ledger.cycle_experiments(human).await.unwrap(), vec![win]);
        let classmate = ledger.clone().scoped(StackScope {
            name: "other".into(),
            class: Some("k".into()),
        });
        assert!(
            classmate
                .classmate_wins(&digest(1), 8)
                .await
                .unwrap()
                .is_empty()
        );

        // `orchestrator ledger` lists it, as manual.
        let listed = ledger.recent_cycles(10).await.unwrap();
        let v = &listed[0].verdicts[0];
        assert!(v.manual);
        assert_eq!(v.menu_id, None);
        assert_eq!(
            v.scheduled(),
            Some(crate::vocab::Scheduled::ManualComparison)
        );
        let again = ledger
            .insert_manual_experiment(&manual(human, Some(win)))
            .await
            .unwrap();
        ledger
            .insert_verdict(again, &measured(VerdictKind::Win, -0.4, -0.5, -0.3))
            .await
            .unwrap();
        let listed = ledger.recent_cycles(10).await.unwrap();
        let v = listed[0]
            .verdicts
            .iter()
            .find(|v| v.verdict.experiment_id == Some(again));
        assert_eq!(
            v.unwrap().scheduled(),
            Some(crate::vocab::Scheduled::ManualConfirmation)
        );
        assert!(!listed[1].verdicts[0].manual, "the loop's own");
        assert_eq!(
            listed[1].verdicts[0].menu_id,
            Some(MenuId::StageSpeculative)
        );
    }
}

/// The schema keeps a manual experiment unproposed.
#[tokio::test]
async fn a_manual_experiment_has_no_proposal() {
    for ledger in backends().await {
        let cycle = ledger.open_cycle(t(0), ProposerKind::Human).await.unwrap();
        let at = "2026-11-29T08:00:00.000000Z";
        raw(
            &ledger,
            &format!(
                "INSERT INTO proposals (cycle_id, proposer, attempt, created_at, parsed) \
                 VALUES ({cycle}, 'human', 1, '{at}', '{{}}')"
            ),
        )
        .await
        .unwrap();
        let d = digest(1);
        let insert = |proposal: &str| {
            format!(
                "INSERT INTO experiments (cycle_id, proposal_id, created_at, menu_id, parameters, \
                 method, base_profile, base_digest, candidate_profile, candidate_digest) VALUES \
                 ({cycle}, {proposal}, '{at}', 'manual', '{{}}', 'bench', '', '{d}', '', '{d}')"
            )
        };
        assert_constraint(
            raw(&ledger, &insert("1")).await,
            "a proposed manual experiment",
        );
        raw(&ledger, &insert("NULL")).await.unwrap();
    }
}

/// A ledger written before manual experiments keeps every experiment and
/// every row that refers to one when its table is rebuilt.
#[tokio::test]
async fn the_rebuilt_experiments_table_keeps_its_rows_and_references() {
    let dir = tempfile::tempdir().unwrap();
    let (path, pool) = sqlite_before(dir.path(), "20261204153001").await;
    let ts = "2026-12-01T00:00:00.000000Z";
    let d = digest(1);
    for sql in [
        format!(
            "INSERT INTO cycles (id, started_at, ended_at, status, proposer) VALUES (1, '{ts}', '{ts}', 'completed', 'bandit')"
        ),
        format!(
            "INSERT INTO experiments (id, cycle_id, created_at, menu_id, parameters, method, base_profile, base_digest, candidate_profile, candidate_digest) VALUES (7, 1, '{ts}', 'stage_speculative', '{{\"draft_len\":4}}', 'bench', 'a', '{d}', 'b', '{d}')"
        ),
        format!(
            "INSERT INTO experiments (id, cycle_id, confirmation_of, created_at, menu_id, parameters, method, base_profile, base_digest, candidate_profile, candidate_digest) VALUES (8, 1, 7, '{ts}', 'stage_speculative', '{{\"draft_len\":4}}', 'bench', 'a', '{d}', 'b', '{d}')"
        ),
        format!(
            "INSERT INTO runs (experiment_id, arm, order_index, started_at, duration_s) VALUES (7, 'warmup', 0, '{ts}', 1.5)"
        ),
        format!(
            "INSERT INTO verdicts (cycle_id, experiment_id, kind, decided_at, reason) VALUES (1, 7, 'failed', '{ts}', 'x')"
        ),
    ] {
        sqlx::query(&sql).execute(&pool).await.unwrap();
    }
    pool.close().await;

    let ledger = Ledger::open(&path).await.unwrap();
    assert_eq!(
        ledger
            .experiment(ExperimentId(8))
            .await
            .unwrap()
            .confirmation_of,
        Some(ExperimentId(7))
    );
    assert_eq!(ledger.runs(ExperimentId(7)).await.unwrap().len(), 1);
    assert_eq!(
        ledger.verdict(ExperimentId(7)).await.unwrap().unwrap().kind,
        VerdictKind::Failed
    );
    // The rebuilt table takes manual experiments, and foreign keys are on again.
    let human = ledger.open_cycle(t(0), ProposerKind::Human).await.unwrap();
    let id = ledger
        .insert_manual_experiment(&manual(human, None))
        .await
        .unwrap();
    assert!(id.0 > 8);
    let dangling = ledger
        .insert_manual_experiment(&manual(CycleId(999), None))
        .await;
    assert!(
        dangling.is_err(),
        "a manual experiment of no cycle: {dangling:?}"
    );
    let found = ledger.check(&CheckContext::default()).await.unwrap();
    assert!(
        !found.iter().any(|v| v.rule == Rule::ForeignKey),
        "{found:#?}"
    );
}
