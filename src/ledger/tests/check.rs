//! `Ledger::check`: a consistent ledger passes, and each way of breaking it
//! (by raw SQL with the schema's guards switched off, or by damaging the
//! file) is flagged with the right rule and row id.

use super::*;
use crate::ledger::{CheckContext, Rule, Violation};

fn idle() -> CheckContext {
    CheckContext::default()
}

/// Lets a test write what the schema refuses, as a bug or a hand edit would.
async fn unguarded(ledger: &Ledger) {
    raw(ledger, "PRAGMA foreign_keys = OFF").await.unwrap();
    raw(ledger, "PRAGMA ignore_check_constraints = ON")
        .await
        .unwrap();
}

fn rules(found: &[Violation]) -> Vec<(Rule, Option<i64>)> {
    found.iter().map(|v| (v.rule, v.id)).collect()
}

/// A closed cycle whose experiment was measured and judged.
async fn measured_cycle(ledger: &Ledger, base: u8) -> (CycleId, ExperimentId) {
    let mut tx = ledger.begin_write().await.unwrap();
    let cycle = tx.open_cycle(t(0), ProposerKind::Bandit).await.unwrap();
    let e = tx
        .insert_experiment(&experiment(cycle, base, base + 1))
        .await
        .unwrap();
    abba(&mut tx, e).await;
    tx.insert_verdict(e, &measured(VerdictKind::Loss, 0.2, 0.1, 0.3))
        .await
        .unwrap();
    tx.close_cycle(cycle, &CycleOutcome::Completed, t(300))
        .await
        .unwrap();
    tx.commit().await.unwrap();
    (cycle, e)
}

#[tokio::test]
async fn a_consistent_ledger_passes() {
    for ledger in backends().await {
        assert!(
            ledger.check(&idle()).await.unwrap().is_empty(),
            "empty ledger"
        );
        staged_win(&ledger, 1).await;
        measured_cycle(&ledger, 3).await;
        // A cycle refused before any experiment existed: a verdict without runs
        // is legal for `rejected`.
        let c = ledger
            .open_cycle(t(400), ProposerKind::Model)
            .await
            .unwrap();
        ledger
            .insert_cycle_verdict(c, &refusal(VerdictKind::Rejected, "off the menu"))
            .await
            .unwrap();
        ledger
            .close_cycle(c, &CycleOutcome::Completed, t(401))
            .await
            .unwrap();
        let ctx = CheckContext {
            daemon_running: false,
            daemon_stacks: None,
            live_digest: Some(digest(1)),
        };
        let found = ledger.check(&ctx).await.unwrap();
        assert!(found.is_empty(), "{found:#?}");
    }
}

#[tokio::test]
async fn a_running_cycle_is_legal_only_while_a_daemon_holds_the_ledger() {
    for ledger in backends().await {
        measured_cycle(&ledger, 1).await;
        let running = ledger
            .open_cycle(t(500), ProposerKind::Bandit)
            .await
            .unwrap();
        let found = ledger.check(&idle()).await.unwrap();
        assert_eq!(rules(&found), vec![(Rule::UnclosedCycle, Some(running.0))]);
        assert!(found[0].message.contains("no daemon"), "{}", found[0]);
        let daemon = CheckContext {
            daemon_running: true,
            daemon_stacks: None,
            live_digest: None,
        };
        assert!(ledger.check(&daemon).await.unwrap().is_empty());
        // Another writer's closed cycle (a stage recorded by hand) after it is
        // no sign of a dead process.
        measured_cycle(&ledger, 7).await;
        assert!(ledger.check(&daemon).await.unwrap().is_empty());
        // A newer running cycle beside it: the old one was left open by a dead process.
        let newer = ledger
            .open_cycle(t(600), ProposerKind::Bandit)
            .await
            .unwrap();
        let found = ledger.check(&daemon).await.unwrap();
        assert_eq!(rules(&found), vec![(Rule::UnclosedCycle, Some(running.0))]);
        // Recovery at start closes both, each with a `failed` verdict.
        let n = ledger
            .abort_running_cycles("the process died", t(700))
            .await
            .unwrap();
        assert_eq!(n, 2);
        let found = ledger.check(&idle()).await.unwrap();
        assert!(found.is_empty(), "{found:#?}");
        let newer = ledger.cycle(newer).await.unwrap();
        assert_eq!(newer.status, CycleStatus::Aborted);
    }
}

#[tokio::test]
async fn recovery_gives_an_interrupted_measurement_a_failed_verdict() {
    for ledger in backends().await {
        let mut tx = ledger.begin_write().await.unwrap();
        let cycle = tx.open_cycle(t(0), ProposerKind::Bandit).await.unwrap();
        let e = tx
            .insert_experiment(&experiment(cycle, 1, 2))
            .await
            .unwrap();
        tx.insert_run(&run(e, Arm::Warmup, 0, None)).await.unwrap();
        tx.commit().await.unwrap();
        ledger.abort_running_cycles("killed", t(50)).await.unwrap();
        let found = ledger.check(&idle()).await.unwrap();
        assert!(found.is_empty(), "{found:#?}");
        let v = ledger.verdict(e).await.unwrap().unwrap();
        assert_eq!(v.kind, VerdictKind::Failed);
        assert!(v.recorded.reason.unwrap().contains("killed"));
    }
}

#[tokio::test]
async fn closed_cycles_and_experiments_without_verdicts_are_flagged() {
    for ledger in backends().await {
        let empty = ledger.open_cycle(t(0), ProposerKind::Bandit).await.unwrap();
        ledger
            .close_cycle(empty, &CycleOutcome::Completed, t(1))
            .await
            .unwrap();
        let mut tx = ledger.begin_write().await.unwrap();
        let cycle = tx.open_cycle(t(2), ProposerKind::Bandit).await.unwrap();
        let judged = tx
            .insert_experiment(&experiment(cycle, 1, 2))
            .await
            .unwrap();
        abba(&mut tx, judged).await;
        tx.insert_verdict(judged, &measured(VerdictKind::Loss, 0.2, 0.1, 0.3))
            .await
            .unwrap();
        let unjudged = tx
            .insert_experiment(&experiment(cycle, 3, 4))
            .await
            .unwrap();
        tx.close_cycle(cycle, &CycleOutcome::Completed, t(3))
            .await
            .unwrap();
        tx.commit().await.unwrap();
        let found = ledger.check(&idle()).await.unwrap();
        assert_eq!(
            rules(&found),
            vec![
                (Rule::MissingVerdict, Some(empty.0)),
                (Rule::MissingVerdict, Some(unjudged.0)),
            ]
        );
    }
}

#[tokio::test]
async fn a_run_without_its_experiment_is_flagged() {
    let ledger = Ledger::open_in_memory().await.unwrap();
    let (_, e) = measured_cycle(&ledger, 1).await;
    unguarded(&ledger).await;
    raw(
        &ledger,
        &format!(
            "UPDATE runs SET experiment_id = 999 WHERE experiment_id = {} AND order_index = 0",
            e.0
        ),
    )
    .await
    .unwrap();
    let found = ledger.check(&idle()).await.unwrap();
    assert_eq!(found.len(), 1, "{found:#?}");
    assert_eq!(found[0].rule, Rule::RunWithoutExperiment);
    assert!(found[0].message.contains("experiment 999"), "{}", found[0]);
}

#[tokio::test]
async fn a_measured_verdict_without_runs_is_flagged_a_refusal_is_not() {
    for ledger in backends().await {
        let mut tx = ledger.begin_write().await.unwrap();
        let cycle = tx.open_cycle(t(0), ProposerKind::Bandit).await.unwrap();
        let e = tx
            .insert_experiment(&experiment(cycle, 1, 2))
            .await
            .unwrap();
        let v = tx
            .insert_verdict(e, &measured(VerdictKind::Win, -0.2, -0.3, -0.1))
            .await
            .unwrap();
        let failed = tx
            .insert_experiment(&experiment(cycle, 3, 4))
            .await
            .unwrap();
        tx.insert_verdict(failed, &refusal(VerdictKind::Failed, "engine exited 4"))
            .await
            .unwrap();
        tx.close_cycle(cycle, &CycleOutcome::Completed, t(3))
            .await
            .unwrap();
        tx.commit().await.unwrap();
        let found = ledger.check(&idle()).await.unwrap();
        assert_eq!(rules(&found), vec![(Rule::VerdictWithoutRuns, Some(v.0))]);
    }
}

#[tokio::test]
async fn illegal_cycle_and_stage_states_are_flagged() {
    let ledger = Ledger::open_in_memory().await.unwrap();
    let (stage, _, _) = staged_win(&ledger, 1).await;
    let (cycle, _) = measured_cycle(&ledger, 3).await;
    unguarded(&ledger).await;
    raw(
        &ledger,
        &format!("UPDATE cycles SET status = 'paused' WHERE id = {}", cycle.0),
    )
    .await
    .unwrap();
    // Approved, but by nobody at no time.
    raw(
        &ledger,
        &format!(
            "UPDATE stages SET state = 'approved' WHERE id = {}",
            stage.0
        ),
    )
    .await
    .unwrap();
    let found = ledger.check(&idle()).await.unwrap();
    assert_eq!(
        rules(&found),
        vec![
            (Rule::CycleStatus, Some(cycle.0)),
            (Rule::StageState, Some(stage.0)),
        ]
    );
    raw(
        &ledger,
        &format!("UPDATE stages SET state = 'pending' WHERE id = {}", stage.0),
    )
    .await
    .unwrap();
    let found = ledger.check(&idle()).await.unwrap();
    assert!(
        found
            .iter()
            .any(|v| v.rule == Rule::StageState && v.message.contains("pending"))
    );
}

#[tokio::test]
async fn a_stage_without_its_winning_evidence_is_flagged() {
    let ledger = Ledger::open_in_memory().await.unwrap();
    let (stage, _, second) = staged_win(&ledger, 1).await;
    unguarded(&ledger).await;
    raw(
        &ledger,
        &format!(
            "UPDATE verdicts SET kind = 'loss' WHERE experiment_id = {}",
            second.0
        ),
    )
    .await
    .unwrap();
    let found = ledger.check(&idle()).await.unwrap();
    assert_eq!(rules(&found), vec![(Rule::StageEvidence, Some(stage.0))]);
    assert!(found[0].message.contains("loss"), "{}", found[0]);
}

#[tokio::test]
async fn a_staged_stage_already_live_is_an_interrupted_approval() {
    for ledger in backends().await {
        let (stage, _, _) = staged_win(&ledger, 1).await;
        // The fixture's candidate digest is digest(200).
        let ctx = CheckContext {
            daemon_running: false,
            daemon_stacks: None,
            live_digest: Some(digest(200)),
        };
        let found = ledger.check(&ctx).await.unwrap();
        assert_eq!(rules(&found), vec![(Rule::StageLive, Some(stage.0))]);
        assert!(
            found[0]
                .message
                .contains(&format!("stage approve {}", stage.0))
        );
    }
}

#[tokio::test]
async fn a_second_win_for_a_profile_already_approved_is_no_interrupted_approval() {
    for ledger in backends().await {
        // Two wins reach the same candidate (digest(200)) from two bases; the
        // first is approved, so its candidate is live.
        let (approved, _, _) = staged_win(&ledger, 1).await;
        let (second, _, _) = staged_win(&ledger, 2).await;
        ledger
            .decide_stage(approved, StageDecision::Approved, "alice", None, t(400))
            .await
            .unwrap();
        let ctx = CheckContext {
            daemon_running: false,
            daemon_stacks: None,
            live_digest: Some(digest(200)),
        };
        let found = ledger.check(&ctx).await.unwrap();
        assert!(
            found.is_empty(),
            "stage {second:?} is only out of date: {found:?}"
        );
    }
}

#[tokio::test]
async fn a_damaged_file_fails_the_integrity_check() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ledger.db");
    let ledger = Ledger::open(&path).await.unwrap();
    for base in [1, 3, 5] {
        measured_cycle(&ledger, base).await;
    }
    let root: i64 =
        sqlx::query_scalar("SELECT rootpage FROM sqlite_master WHERE name = 'cycles_by_start'")
            .fetch_one(sqlite_pool(&ledger))
            .await
            .unwrap();
    let page: i64 = sqlx::query_scalar("PRAGMA page_size")
        .fetch_one(sqlite_pool(&ledger))
        .await
        .unwrap();
    // Every page in the main file (not left in the WAL) before editing it.
    sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
        .execute(sqlite_pool(&ledger))
        .await
        .unwrap();
    ledger.close().await;
    // Change one indexed timestamp inside the index page only: the table
    // and its index now disagree, as after a torn write on a bad disk.
    let mut bytes = std::fs::read(&path).unwrap();
    let start = usize::try_from((root - 1) * page).unwrap();
    let end = start + usize::try_from(page).unwrap();
    let at = bytes[start..end]
        .windows(4)
        .position(|w| w == b"2026")
        .expect("an indexed timestamp in the index page")
        + start;
    bytes[at..at + 4].copy_from_slice(b"1999");
    std::fs::write(&path, bytes).unwrap();
    let ledger = Ledger::open(&path).await.unwrap();
    let found = ledger.check(&idle()).await.unwrap();
    assert!(!found.is_empty());
    assert!(
        found.iter().all(|v| v.rule == Rule::Integrity),
        "{found:#?}"
    );
    assert!(found[0].message.contains("cycles_by_start"), "{found:#?}");
}

#[tokio::test]
async fn on_a_shared_ledger_each_stack_may_have_one_running_cycle_while_its_daemon_lives() {
    for ledger in backends().await {
        let scoped = |name: &str| {
            ledger.clone().scoped(StackScope {
                name: name.into(),
                class: None,
            })
        };
        let (a, b) = (scoped("box-a"), scoped("box-b"));
        let old_a = a.open_cycle(t(0), ProposerKind::Bandit).await.unwrap();
        let new_a = a.open_cycle(t(10), ProposerKind::Bandit).await.unwrap();
        let only_b = b.open_cycle(t(5), ProposerKind::Bandit).await.unwrap();
        assert_eq!(
            ledger.running_stacks().await.unwrap(),
            vec!["box-a".to_string(), "box-b".to_string()]
        );
        // box-a's daemon is alive, box-b's is not.
        let ctx = CheckContext {
            daemon_running: false,
            daemon_stacks: Some(vec!["box-a".into()]),
            live_digest: None,
        };
        let found = ledger.check(&ctx).await.unwrap();
        let flagged: Vec<Option<i64>> = found
            .iter()
            .filter(|v| v.rule == Rule::UnclosedCycle)
            .map(|v| v.id)
            .collect();
        // b's lone cycle has no daemon; a's older one was left by a dead
        // process; a's newest is its daemon's current cycle. (Closed cycles
        // without verdicts are other rules.)
        assert_eq!(flagged, vec![Some(old_a.0), Some(only_b.0)], "{found:#?}");
        assert!(
            found.iter().any(|v| v.message.contains("\"box-b\"")),
            "{found:#?}"
        );
        let _ = new_a;
    }
}

#[tokio::test]
async fn a_claim_on_the_wrong_win_and_a_class_apply_without_a_class_approval_are_found() {
    for ledger in backends().await {
        let (stage, win, confirmation) = staged_win(&ledger, 1).await;
        let (_, other) = measured_cycle(&ledger, 3).await;
        // A claim naming an experiment that confirms another win, and an
        // apply by a classmate of a stage approved for no class.
        raw(
            &ledger,
            &format!(
                "INSERT INTO confirmation_claims (win_experiment_id, stack, claimed_at, confirmation_id) \
                 VALUES ({other}, 'box-b', '2026-11-29T08:00:00.000000Z', {confirmation})"
            ),
        )
        .await
        .unwrap();
        let mut tx = ledger.begin_write().await.unwrap();
        tx.decide_stage(stage, StageDecision::Approved, "alice", None, t(300))
            .await
            .unwrap();
        tx.commit().await.unwrap();
        raw(
            &ledger,
            &format!(
                "INSERT INTO stage_applies (stage_id, stack, applied_at, applied_to, applied_by) \
                 VALUES ({stage}, 'box-b', '2026-11-29T08:10:00.000000Z', '/b/live.toml', 'box-b')"
            ),
        )
        .await
        .unwrap();
        let found = ledger.check(&idle()).await.unwrap();
        assert_eq!(
            rules(&found),
            vec![
                (Rule::ConfirmationClaim, Some(other.0)),
                (Rule::ClassApply, Some(stage.0))
            ],
            "{found:#?}"
        );
        assert!(
            found[0]
                .message
                .contains(&format!("which confirms {win}, not that win")),
            "{}",
            found[0].message
        );
        // Approved for the class, the classmate's apply is legal.
        let mut tx = ledger.begin_write().await.unwrap();
        tx.approve_for_class(stage, "spark").await.unwrap();
        tx.commit().await.unwrap();
        assert_eq!(
            rules(&ledger.check(&idle()).await.unwrap()),
            vec![(Rule::ConfirmationClaim, Some(other.0))]
        );
    }
}
