//! Tests of the ledger through its typed API, against in-memory and tempfile
//! databases. Raw SQL appears only where a test must try what the typed API
//! cannot express (an illegal state), to prove the schema refuses it.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use serde_json::json;
use tokio::sync::Barrier;

use super::*;
use crate::menu::MenuId;
use crate::vocab::{Arm, CycleStatus, Digest, Method, ProposerKind, StageState, VerdictKind};

fn t(seconds: i64) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 29, 8, 0, 0).unwrap() + chrono::Duration::seconds(seconds)
}

fn digest(n: u8) -> Digest {
    Digest::of(&[n])
}

fn experiment(cycle_id: CycleId, base: u8, candidate: u8) -> NewExperiment {
    NewExperiment {
        cycle_id,
        proposal_id: None,
        confirmation_of: None,
        created_at: t(10),
        menu_id: MenuId::StageSpeculative,
        parameters: json!({"draft_len": 4}),
        method: Method::Bench,
        base_profile: format!("# profile {base}\n"),
        base_digest: digest(base),
        candidate_profile: format!("# profile {candidate}\n"),
        candidate_digest: digest(candidate),
        planner_notes: None,
    }
}

fn measured(kind: VerdictKind, effect: f64, low: f64, high: f64) -> NewVerdict {
    NewVerdict {
        kind,
        decided_at: t(100),
        effect: Some(effect),
        interval: Some(Interval { low, high }),
        noise_floor: Some(0.02),
        pairs: 6,
        method: Some("test confidence sequence".to_string()),
        reason: None,
    }
}

fn refusal(kind: VerdictKind, reason: &str) -> NewVerdict {
    NewVerdict {
        kind,
        decided_at: t(100),
        effect: None,
        interval: None,
        noise_floor: None,
        pairs: 0,
        method: None,
        reason: Some(reason.to_string()),
    }
}

fn run(experiment_id: ExperimentId, arm: Arm, order: u32, pair: Option<u32>) -> NewRun {
    NewRun {
        experiment_id,
        arm,
        order_index: order,
        pair_index: pair,
        started_at: t(20 + i64::from(order)),
        seconds_per_token: Some(1.5 + f64::from(order) / 100.0),
        timing_source: Some(TimingSource::Engine),
        tokens: Some(32),
        output_hash: Some("9f86d081884c7d65".to_string()),
        exit_code: Some(0),
        duration_s: 48.0,
        stderr_tail: "done\n".to_string(),
        refused: false,
        error: None,
    }
}

/// One ABBA pair of runs for an experiment.
async fn abba(tx: &mut WriteTx, experiment_id: ExperimentId) {
    let arms = [Arm::Baseline, Arm::Candidate, Arm::Candidate, Arm::Baseline];
    for (i, arm) in arms.into_iter().enumerate() {
        let order = u32::try_from(i).unwrap();
        tx.insert_run(&run(experiment_id, arm, order, Some(order / 2)))
            .await
            .unwrap();
    }
}

/// A win, its confirmation, and their stage, written as the loop would: one
/// transaction for the whole change.
async fn staged_win(ledger: &Ledger, base: u8) -> (StageId, ExperimentId, ExperimentId) {
    let mut tx = ledger.begin_write().await.unwrap();
    let cycle = tx.open_cycle(t(0), ProposerKind::Model).await.unwrap();
    let first = tx
        .insert_experiment(&experiment(cycle, base, 200))
        .await
        .unwrap();
    abba(&mut tx, first).await;
    tx.insert_verdict(first, &measured(VerdictKind::Win, -0.2, -0.3, -0.1))
        .await
        .unwrap();
    let second = tx
        .insert_experiment(&NewExperiment {
            confirmation_of: Some(first),
            ..experiment(cycle, base, 200)
        })
        .await
        .unwrap();
    abba(&mut tx, second).await;
    tx.insert_verdict(second, &measured(VerdictKind::Win, -0.15, -0.25, -0.05))
        .await
        .unwrap();
    let stage = tx.insert_stage(first, second, t(200)).await.unwrap();
    tx.close_cycle(cycle, &CycleOutcome::Completed, t(300))
        .await
        .unwrap();
    tx.commit().await.unwrap();
    (stage, first, second)
}

/// Runs raw SQL that the typed API would never issue.
async fn raw(ledger: &Ledger, sql: &str) -> Result<(), LedgerError> {
    sqlx::query(sql)
        .execute(&ledger.pool)
        .await
        .map(|_| ())
        .map_err(ledger.ctx.err("run a test statement"))
}

fn assert_constraint(result: Result<impl std::fmt::Debug, LedgerError>, what: &str) {
    match result {
        Err(LedgerError::Constraint { .. }) => {}
        other => panic!("{what}: expected a schema refusal, got {other:?}"),
    }
}

#[tokio::test]
async fn file_ledger_sets_its_pragmas_and_reopens() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sub").join("orchestrator.db");
    let ledger = Ledger::open(&path).await.unwrap();
    let mut c = ledger.pool.acquire().await.unwrap();
    let mode: String = sqlx::query_scalar("PRAGMA journal_mode")
        .fetch_one(&mut *c)
        .await
        .unwrap();
    let fk: i64 = sqlx::query_scalar("PRAGMA foreign_keys")
        .fetch_one(&mut *c)
        .await
        .unwrap();
    let sync: i64 = sqlx::query_scalar("PRAGMA synchronous")
        .fetch_one(&mut *c)
        .await
        .unwrap();
    let busy: i64 = sqlx::query_scalar("PRAGMA busy_timeout")
        .fetch_one(&mut *c)
        .await
        .unwrap();
    drop(c);
    assert_eq!(mode, "wal");
    assert_eq!(fk, 1);
    assert_eq!(sync, 1, "synchronous=NORMAL");
    assert_eq!(busy, 10_000);
    let id = ledger.open_cycle(t(0), ProposerKind::Bandit).await.unwrap();
    ledger.close().await;

    // Reopening finds the schema applied and the data kept.
    let again = Ledger::open(&path).await.unwrap();
    assert_eq!(again.cycle(id).await.unwrap().proposer, ProposerKind::Bandit);
    assert_eq!(again.path(), path.as_path());
}

#[tokio::test]
async fn open_names_the_file_when_it_is_not_a_database() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("garbage.db");
    std::fs::write(&path, vec![b'x'; 8192]).unwrap();
    let err = Ledger::open(&path).await.unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains(&path.display().to_string()), "{msg}");
    assert!(matches!(err, LedgerError::Corrupt { .. }), "{err:?}");
}

#[tokio::test]
async fn cycle_round_trip_and_close_once() {
    let ledger = Ledger::open_in_memory().await.unwrap();
    let id = ledger.open_cycle(t(0), ProposerKind::Model).await.unwrap();
    let open = ledger.cycle(id).await.unwrap();
    assert_eq!(
        open,
        Cycle {
            id,
            started_at: t(0),
            ended_at: None,
            status: CycleStatus::Running,
            error: None,
            proposer: ProposerKind::Model,
        }
    );
    let outcome = CycleOutcome::Failed("model unreachable at http://127.0.0.1:9".into());
    ledger.close_cycle(id, &outcome, t(5)).await.unwrap();
    let closed = ledger.cycle(id).await.unwrap();
    assert_eq!(closed.status, CycleStatus::Failed);
    assert_eq!(closed.ended_at, Some(t(5)));
    assert_eq!(
        closed.error.as_deref(),
        Some("model unreachable at http://127.0.0.1:9")
    );

    let again = ledger
        .close_cycle(id, &CycleOutcome::Completed, t(6))
        .await
        .unwrap_err();
    assert!(
        matches!(again, LedgerError::CycleNotRunning { status: CycleStatus::Failed, .. }),
        "{again:?}"
    );
    let missing = ledger.cycle(CycleId(999)).await.unwrap_err();
    assert!(missing.to_string().contains("cycle 999"), "{missing}");
}

#[tokio::test]
async fn abort_running_cycles_closes_only_running_ones() {
    let ledger = Ledger::open_in_memory().await.unwrap();
    let a = ledger.open_cycle(t(0), ProposerKind::Model).await.unwrap();
    let b = ledger.open_cycle(t(1), ProposerKind::Model).await.unwrap();
    let done = ledger.open_cycle(t(2), ProposerKind::Model).await.unwrap();
    ledger
        .close_cycle(done, &CycleOutcome::Completed, t(3))
        .await
        .unwrap();

    let n = ledger
        .abort_running_cycles("found running at start: the daemon crashed", t(10))
        .await
        .unwrap();
    assert_eq!(n, 2);
    for id in [a, b] {
        let c = ledger.cycle(id).await.unwrap();
        assert_eq!(c.status, CycleStatus::Aborted);
        assert_eq!(c.ended_at, Some(t(10)));
        assert_eq!(
            c.error.as_deref(),
            Some("found running at start: the daemon crashed")
        );
    }
    assert_eq!(
        ledger.cycle(done).await.unwrap().status,
        CycleStatus::Completed
    );
    assert_eq!(ledger.abort_running_cycles("again", t(11)).await.unwrap(), 0);
}

#[tokio::test]
async fn observation_round_trip() {
    let ledger = Ledger::open_in_memory().await.unwrap();
    let cycle = ledger.open_cycle(t(0), ProposerKind::Model).await.unwrap();
    let new = NewObservation {
        cycle_id: cycle,
        observed_at: t(1),
        metrics: json!({"seconds_per_token": 1.7, "tier_hits": {"ram": 0.5}}),
        heat: Some(json!({"coverage": 0.9})),
        live_profile_digest: digest(1),
    };
    let id = ledger.insert_observation(&new).await.unwrap();
    let got = ledger.observation(cycle).await.unwrap().unwrap();
    assert_eq!(
        got,
        Observation {
            id,
            cycle_id: cycle,
            observed_at: t(1),
            metrics: new.metrics.clone(),
            heat: new.heat.clone(),
            live_profile_digest: digest(1),
        }
    );
    let bad = ledger
        .insert_observation(&NewObservation {
            metrics: json!([1, 2]),
            ..new
        })
        .await
        .unwrap_err();
    assert!(bad.to_string().contains("an array"), "{bad}");
}

#[tokio::test]
async fn proposal_round_trip_keeps_raw_answer_and_rejection() {
    let ledger = Ledger::open_in_memory().await.unwrap();
    let cycle = ledger.open_cycle(t(0), ProposerKind::Model).await.unwrap();
    let rejected = NewProposal {
        cycle_id: cycle,
        proposer: ProposerKind::Model,
        attempt: 1,
        created_at: t(1),
        prompt: Some("choose one experiment".into()),
        raw_answer: Some("{\"experiment\": \"rm -rf /\"}".into()),
        parsed: None,
        rejection: Some(ProposalRejection {
            kind: "off_menu".into(),
            reason: "the experiment id is not on the menu".into(),
        }),
    };
    let accepted = NewProposal {
        attempt: 2,
        created_at: t(2),
        raw_answer: Some("{\"experiment\":\"remeasure\",\"params\":{}}".into()),
        parsed: Some(json!({"experiment": "remeasure", "params": {}})),
        rejection: None,
        ..rejected.clone()
    };
    let r1 = ledger.insert_proposal(&rejected).await.unwrap();
    let r2 = ledger.insert_proposal(&accepted).await.unwrap();
    let got = ledger.proposals(cycle).await.unwrap();
    assert_eq!(got.len(), 2);
    assert_eq!(got[0].id, r1);
    assert_eq!(got[0].raw_answer, rejected.raw_answer);
    assert_eq!(got[0].rejection, rejected.rejection);
    assert_eq!(got[0].parsed, None);
    assert_eq!(got[1].id, r2);
    assert_eq!(got[1].attempt, 2);
    assert_eq!(got[1].parsed, accepted.parsed);
    assert_eq!(got[1].prompt.as_deref(), Some("choose one experiment"));

    // Neither parsed nor refused says nothing: the schema refuses it.
    let silent = NewProposal {
        attempt: 3,
        parsed: None,
        rejection: None,
        ..rejected.clone()
    };
    assert_constraint(ledger.insert_proposal(&silent).await, "silent proposal");
    // The same attempt twice.
    assert_constraint(ledger.insert_proposal(&rejected).await, "repeated attempt");
}

#[tokio::test]
async fn experiment_round_trip_with_canonical_parameters() {
    let ledger = Ledger::open_in_memory().await.unwrap();
    let cycle = ledger.open_cycle(t(0), ProposerKind::Model).await.unwrap();
    let proposal = ledger
        .insert_proposal(&NewProposal {
            cycle_id: cycle,
            proposer: ProposerKind::Model,
            attempt: 1,
            created_at: t(1),
            prompt: Some("p".into()),
            raw_answer: Some("a".into()),
            parsed: Some(json!({"experiment": "rerank_pins"})),
            rejection: None,
        })
        .await
        .unwrap();
    let new = NewExperiment {
        proposal_id: Some(proposal),
        menu_id: MenuId::RerankPins,
        parameters: serde_json::from_str(r#"{"pin_count": 64, "a": {"z": 1, "b": 2}}"#).unwrap(),
        planner_notes: Some(json!({"hit_rate": {"new": 0.61, "current": 0.55, "lru": 0.5, "belady": 0.7}})),
        ..experiment(cycle, 1, 2)
    };
    let id = ledger.insert_experiment(&new).await.unwrap();
    let got = ledger.experiment(id).await.unwrap();
    assert_eq!(
        got,
        Experiment {
            id,
            cycle_id: cycle,
            proposal_id: Some(proposal),
            confirmation_of: None,
            created_at: new.created_at,
            menu_id: MenuId::RerankPins,
            parameters: new.parameters.clone(),
            method: Method::Bench,
            base_profile: new.base_profile.clone(),
            base_digest: digest(1),
            candidate_profile: new.candidate_profile.clone(),
            candidate_digest: digest(2),
            planner_notes: new.planner_notes.clone(),
        }
    );
    let stored: String = sqlx::query_scalar("SELECT parameters FROM experiments WHERE id = ?1")
        .bind(id)
        .fetch_one(&ledger.pool)
        .await
        .unwrap();
    assert_eq!(stored, r#"{"a":{"b":2,"z":1},"pin_count":64}"#);

    let not_object = ledger
        .insert_experiment(&NewExperiment {
            parameters: json!(4),
            ..experiment(cycle, 1, 2)
        })
        .await
        .unwrap_err();
    assert!(matches!(not_object, LedgerError::NotAnObject { .. }), "{not_object:?}");
}

#[tokio::test]
async fn run_round_trip_and_run_rules() {
    let ledger = Ledger::open_in_memory().await.unwrap();
    let cycle = ledger.open_cycle(t(0), ProposerKind::Model).await.unwrap();
    let exp = ledger.insert_experiment(&experiment(cycle, 1, 2)).await.unwrap();
    let warmup = NewRun {
        seconds_per_token: None,
        timing_source: None,
        tokens: None,
        output_hash: None,
        exit_code: Some(4),
        error: Some("exit 4: an expert failed to load".into()),
        stderr_tail: "expert 3,17: short read\n".into(),
        ..run(exp, Arm::Warmup, 0, None)
    };
    let refused = NewRun {
        seconds_per_token: None,
        refused: true,
        output_hash: Some("0000000000000bad".into()),
        timing_source: Some(TimingSource::Client),
        ..run(exp, Arm::Candidate, 1, Some(0))
    };
    let good = run(exp, Arm::Baseline, 2, Some(0));
    let mut ids = Vec::new();
    for r in [&warmup, &refused, &good] {
        ids.push(ledger.insert_run(r).await.unwrap());
    }
    let got = ledger.runs(exp).await.unwrap();
    assert_eq!(got.len(), 3);
    for ((stored, new), id) in got.iter().zip([&warmup, &refused, &good]).zip(&ids) {
        assert_eq!(
            stored,
            &Run {
                id: *id,
                experiment_id: new.experiment_id,
                arm: new.arm,
                order_index: new.order_index,
                pair_index: new.pair_index,
                started_at: new.started_at,
                seconds_per_token: new.seconds_per_token,
                timing_source: new.timing_source,
                tokens: new.tokens,
                output_hash: new.output_hash.clone(),
                exit_code: new.exit_code,
                duration_s: new.duration_s,
                stderr_tail: new.stderr_tail.clone(),
                refused: new.refused,
                error: new.error.clone(),
            }
        );
    }

    // A refused run never carries a metric.
    let refused_with_metric = NewRun {
        refused: true,
        ..run(exp, Arm::Candidate, 3, Some(1))
    };
    assert_constraint(ledger.insert_run(&refused_with_metric).await, "refused metric");
    // Warmups belong to no pair, measured runs to one.
    assert_constraint(
        ledger.insert_run(&run(exp, Arm::Warmup, 4, Some(1))).await,
        "warmup in a pair",
    );
    assert_constraint(
        ledger.insert_run(&run(exp, Arm::Baseline, 5, None)).await,
        "pairless baseline",
    );
    // Two runs in the same slot.
    assert_constraint(ledger.insert_run(&good).await, "same order index");
}

#[tokio::test]
async fn foreign_keys_are_enforced() {
    let ledger = Ledger::open_in_memory().await.unwrap();
    assert_constraint(
        ledger.insert_run(&run(ExperimentId(42), Arm::Baseline, 0, Some(0))).await,
        "run of a missing experiment",
    );
    assert_constraint(
        ledger.insert_experiment(&experiment(CycleId(7), 1, 2)).await,
        "experiment of a missing cycle",
    );
    let err = ledger
        .insert_verdict(ExperimentId(42), &measured(VerdictKind::Loss, 0.1, 0.05, 0.2))
        .await
        .unwrap_err();
    assert!(
        matches!(err, LedgerError::NotFound { what: "experiment", id: 42, .. }),
        "{err:?}"
    );
}

#[tokio::test]
async fn exactly_one_verdict_per_experiment() {
    let ledger = Ledger::open_in_memory().await.unwrap();
    let cycle = ledger.open_cycle(t(0), ProposerKind::Model).await.unwrap();
    let exp = ledger.insert_experiment(&experiment(cycle, 1, 2)).await.unwrap();
    let new = measured(VerdictKind::WithinNoise, 0.004, -0.01, 0.015);
    let id = ledger.insert_verdict(exp, &new).await.unwrap();
    let got = ledger.verdict(exp).await.unwrap().unwrap();
    assert_eq!(
        got,
        Verdict {
            id,
            cycle_id: cycle,
            experiment_id: Some(exp),
            kind: VerdictKind::WithinNoise,
            decided_at: t(100),
            effect: Some(0.004),
            interval: Some(Interval {
                low: -0.01,
                high: 0.015
            }),
            noise_floor: Some(0.02),
            pairs: 6,
            method: Some("test confidence sequence".into()),
            reason: None,
        }
    );

    let second = ledger
        .insert_verdict(exp, &measured(VerdictKind::Win, -0.2, -0.3, -0.1))
        .await
        .unwrap_err();
    assert!(
        matches!(
            second,
            LedgerError::VerdictExists {
                existing: VerdictKind::WithinNoise,
                ..
            }
        ),
        "{second:?}"
    );
    assert!(second.to_string().contains("within_noise"), "{second}");
    assert_eq!(ledger.verdict(exp).await.unwrap().unwrap().id, id);
}

#[tokio::test]
async fn verdict_rules_are_enforced() {
    let ledger = Ledger::open_in_memory().await.unwrap();
    let cycle = ledger.open_cycle(t(0), ProposerKind::Model).await.unwrap();
    let exp = ledger.insert_experiment(&experiment(cycle, 1, 2)).await.unwrap();

    // A win without its statistics.
    assert_constraint(
        ledger.insert_verdict(exp, &refusal(VerdictKind::Win, "trust me")).await,
        "bare win",
    );
    // A hash mismatch never shows a delta.
    let with_delta = NewVerdict {
        reason: Some("candidate output differs".into()),
        ..measured(VerdictKind::HashMismatch, -0.3, -0.4, -0.2)
    };
    assert_constraint(ledger.insert_verdict(exp, &with_delta).await, "mismatch delta");
    // A failure says why.
    assert_constraint(
        ledger
            .insert_verdict(
                exp,
                &NewVerdict {
                    reason: None,
                    ..refusal(VerdictKind::Failed, "")
                },
            )
            .await,
        "silent failure",
    );
    ledger
        .insert_verdict(exp, &refusal(VerdictKind::HashMismatch, "run 3 hash differs"))
        .await
        .unwrap();

    // A cycle without an experiment gets one rejected/failed verdict.
    let other = ledger.open_cycle(t(1), ProposerKind::Model).await.unwrap();
    let v = ledger
        .insert_cycle_verdict(other, &refusal(VerdictKind::Rejected, "3 invalid answers"))
        .await
        .unwrap();
    assert_constraint(
        ledger
            .insert_cycle_verdict(other, &refusal(VerdictKind::Failed, "again"))
            .await,
        "second cycle verdict",
    );
    assert_constraint(
        ledger
            .insert_cycle_verdict(other, &measured(VerdictKind::Win, -0.2, -0.3, -0.1))
            .await,
        "win without an experiment",
    );
    let listed = ledger.recent_cycles(1).await.unwrap();
    assert_eq!(listed[0].cycle.id, other);
    assert_eq!(listed[0].verdicts[0].verdict.id, v);
    assert_eq!(listed[0].verdicts[0].menu_id, None);
}

#[tokio::test]
async fn check_constraints_refuse_illegal_states() {
    let ledger = Ledger::open_in_memory().await.unwrap();
    let cycle = ledger.open_cycle(t(0), ProposerKind::Model).await.unwrap();
    let (stage, _, _) = staged_win(&ledger, 1).await;

    assert_constraint(
        raw(&ledger, "UPDATE stages SET state = 'pending'").await,
        "unknown stage state",
    );
    assert_constraint(
        raw(&ledger, "UPDATE stages SET state = 'approved'").await,
        "approval without who and when",
    );
    assert_constraint(
        raw(&ledger, "UPDATE cycles SET status = 'paused'").await,
        "unknown cycle status",
    );
    assert_constraint(
        raw(
            &ledger,
            &format!("UPDATE cycles SET status = 'failed', ended_at = started_at WHERE id = {cycle}"),
        )
        .await,
        "failure without a cause",
    );
    assert_constraint(
        raw(&ledger, "UPDATE experiments SET menu_id = 'rewrite_engine'").await,
        "off-menu experiment",
    );
    assert_constraint(
        raw(&ledger, "UPDATE experiments SET base_digest = 'abc'").await,
        "short digest",
    );
    assert_constraint(
        raw(&ledger, "UPDATE verdicts SET kind = 'great'").await,
        "unknown verdict",
    );
    assert_constraint(
        raw(&ledger, "UPDATE runs SET arm = 'both'").await,
        "unknown arm",
    );
    assert_constraint(
        raw(&ledger, "UPDATE cycles SET started_at = '29/11/2026'").await,
        "malformed timestamp",
    );
    // Nothing changed.
    assert_eq!(ledger.stage(stage).await.unwrap().state, StageState::Staged);
}

#[tokio::test]
async fn noise_floor_latest_per_stack() {
    let ledger = Ledger::open_in_memory().await.unwrap();
    assert_eq!(ledger.latest_noise_floor("tinyk3").await.unwrap(), None);
    let older = NewNoiseFloor {
        stack: "tinyk3".into(),
        profile_digest: digest(1),
        value: 0.031,
        n: 8,
        method: "A/A log-ratio quantile".into(),
        measured_at: t(0),
        experiment_id: None,
    };
    let newer = NewNoiseFloor {
        value: 0.024,
        n: 12,
        measured_at: t(60),
        ..older.clone()
    };
    let other_stack = NewNoiseFloor {
        stack: "llama".into(),
        value: 0.5,
        measured_at: t(120),
        ..older.clone()
    };
    ledger.insert_noise_floor(&newer).await.unwrap();
    ledger.insert_noise_floor(&older).await.unwrap();
    ledger.insert_noise_floor(&other_stack).await.unwrap();
    let got = ledger.latest_noise_floor("tinyk3").await.unwrap().unwrap();
    assert_eq!(got.value, 0.024);
    assert_eq!(got.n, 12);
    assert_eq!(got.measured_at, t(60));
    assert_eq!(got.method, "A/A log-ratio quantile");
    assert_eq!(got.profile_digest, digest(1));
}

#[tokio::test]
async fn reference_hash_current_is_the_latest_pin() {
    let ledger = Ledger::open_in_memory().await.unwrap();
    let first = NewReferenceHash {
        stack: "tinyk3".into(),
        prompt_set: "greedy-8".into(),
        profile_digest: digest(1),
        output_hash: "aaaaaaaaaaaaaaaa".into(),
        pinned_at: t(0),
        pinned_by: "orchestrator".into(),
        reason: "first pin".into(),
    };
    let repin = NewReferenceHash {
        output_hash: "bbbbbbbbbbbbbbbb".into(),
        pinned_at: t(500),
        pinned_by: "alice".into(),
        reason: "engine rebuilt with the new kernels".into(),
        ..first.clone()
    };
    ledger.pin_reference_hash(&first).await.unwrap();
    let id = ledger.pin_reference_hash(&repin).await.unwrap();
    let got = ledger
        .current_reference_hash("tinyk3", "greedy-8")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        got,
        ReferenceHash {
            id,
            stack: "tinyk3".into(),
            prompt_set: "greedy-8".into(),
            profile_digest: digest(1),
            output_hash: "bbbbbbbbbbbbbbbb".into(),
            pinned_at: t(500),
            pinned_by: "alice".into(),
            reason: "engine rebuilt with the new kernels".into(),
        }
    );
    assert_eq!(
        ledger.current_reference_hash("tinyk3", "other").await.unwrap(),
        None
    );
}

#[tokio::test]
async fn duplicate_detection_matches_menu_parameters_and_base() {
    let ledger = Ledger::open_in_memory().await.unwrap();
    let cycle = ledger.open_cycle(t(0), ProposerKind::Model).await.unwrap();
    let params = json!({"warm_set": 128, "policy": "hot"});
    let decided = ledger
        .insert_experiment(&NewExperiment {
            menu_id: MenuId::DeepenWarmSet,
            parameters: params.clone(),
            ..experiment(cycle, 1, 2)
        })
        .await
        .unwrap();
    let same_key = |base| {
        let params: serde_json::Value =
            serde_json::from_str(r#"{"policy": "hot", "warm_set": 128}"#).unwrap();
        (MenuId::DeepenWarmSet, params, digest(base))
    };
    let (m, p, b) = same_key(1);
    assert_eq!(ledger.already_decided(m, &p, &b).await.unwrap(), None, "no verdict yet");

    ledger
        .insert_verdict(decided, &measured(VerdictKind::Loss, 0.1, 0.05, 0.15))
        .await
        .unwrap();
    let prior = ledger.already_decided(m, &p, &b).await.unwrap().unwrap();
    assert_eq!(prior.experiment_id, decided);
    assert_eq!(prior.verdict, VerdictKind::Loss);

    // Another base profile, other parameters, another entry: not duplicates.
    let (m2, p2, b2) = same_key(9);
    assert_eq!(ledger.already_decided(m2, &p2, &b2).await.unwrap(), None);
    let p3 = json!({"policy": "hot", "warm_set": 256});
    assert_eq!(ledger.already_decided(m, &p3, &b).await.unwrap(), None);
    assert_eq!(
        ledger
            .already_decided(MenuId::StageSpeculative, &p, &b)
            .await
            .unwrap(),
        None
    );

    // A failed experiment measured nothing, so repeating it is allowed.
    let failed = ledger
        .insert_experiment(&NewExperiment {
            menu_id: MenuId::DeepenWarmSet,
            parameters: p3.clone(),
            ..experiment(cycle, 1, 3)
        })
        .await
        .unwrap();
    ledger
        .insert_verdict(failed, &refusal(VerdictKind::Failed, "bench timed out"))
        .await
        .unwrap();
    assert_eq!(ledger.already_decided(m, &p3, &b).await.unwrap(), None);
}

#[tokio::test]
async fn recent_experiments_carry_verdicts_and_proposers() {
    let ledger = Ledger::open_in_memory().await.unwrap();
    let cycle = ledger.open_cycle(t(0), ProposerKind::Bandit).await.unwrap();
    let proposal = ledger
        .insert_proposal(&NewProposal {
            cycle_id: cycle,
            proposer: ProposerKind::Bandit,
            attempt: 1,
            created_at: t(1),
            prompt: None,
            raw_answer: None,
            parsed: Some(json!({"experiment": "stage_speculative"})),
            rejection: None,
        })
        .await
        .unwrap();
    let mut ids = Vec::new();
    for i in 0..4u8 {
        let id = ledger
            .insert_experiment(&NewExperiment {
                proposal_id: (i == 2).then_some(proposal),
                ..experiment(cycle, 1, 10 + i)
            })
            .await
            .unwrap();
        ids.push(id);
    }
    ledger
        .insert_verdict(ids[2], &measured(VerdictKind::Loss, 0.08, 0.04, 0.12))
        .await
        .unwrap();
    let recent = ledger.recent_experiments(3).await.unwrap();
    assert_eq!(
        recent.iter().map(|e| e.experiment_id).collect::<Vec<_>>(),
        vec![ids[3], ids[2], ids[1]]
    );
    assert_eq!(recent[0].verdict, None);
    assert_eq!(recent[1].verdict, Some(VerdictKind::Loss));
    assert_eq!(recent[1].effect, Some(0.08));
    assert_eq!(
        recent[1].interval,
        Some(Interval {
            low: 0.04,
            high: 0.12
        })
    );
    assert_eq!(recent[1].proposer, Some(ProposerKind::Bandit));
    assert_eq!(recent[1].pairs, Some(6));
    assert_eq!(recent[2].proposer, None);
}

#[tokio::test]
async fn recent_cycles_list_their_verdicts_newest_first() {
    let ledger = Ledger::open_in_memory().await.unwrap();
    let (_, first, second) = staged_win(&ledger, 1).await;
    let later = ledger.open_cycle(t(1000), ProposerKind::Model).await.unwrap();
    let listed = ledger.recent_cycles(10).await.unwrap();
    assert_eq!(listed.len(), 2);
    assert_eq!(listed[0].cycle.id, later);
    assert!(listed[0].verdicts.is_empty());
    let kinds: Vec<_> = listed[1]
        .verdicts
        .iter()
        .map(|v| (v.verdict.experiment_id, v.verdict.kind, v.menu_id))
        .collect();
    assert_eq!(
        kinds,
        vec![
            (Some(first), VerdictKind::Win, Some(MenuId::StageSpeculative)),
            (Some(second), VerdictKind::Win, Some(MenuId::StageSpeculative)),
        ]
    );
    assert_eq!(
        listed[1].verdicts[0].parameters,
        Some(json!({"draft_len": 4}))
    );
    assert_eq!(ledger.recent_cycles(1).await.unwrap().len(), 1);
    // The CLI prints it as JSON.
    let text = serde_json::to_string(&listed).unwrap();
    assert!(text.contains("\"kind\":\"win\""), "{text}");
}

#[tokio::test]
async fn stage_needs_a_confirmed_win() {
    let ledger = Ledger::open_in_memory().await.unwrap();
    let mut tx = ledger.begin_write().await.unwrap();
    let cycle = tx.open_cycle(t(0), ProposerKind::Model).await.unwrap();
    let first = tx.insert_experiment(&experiment(cycle, 1, 2)).await.unwrap();
    tx.insert_verdict(first, &measured(VerdictKind::Win, -0.2, -0.3, -0.1))
        .await
        .unwrap();
    let unrelated = tx.insert_experiment(&experiment(cycle, 1, 2)).await.unwrap();
    let err = tx.insert_stage(first, unrelated, t(5)).await.unwrap_err();
    assert!(matches!(err, LedgerError::NotStageable { .. }), "{err:?}");

    let confirmation = tx
        .insert_experiment(&NewExperiment {
            confirmation_of: Some(first),
            ..experiment(cycle, 1, 2)
        })
        .await
        .unwrap();
    let err = tx.insert_stage(first, confirmation, t(5)).await.unwrap_err();
    assert!(err.to_string().contains("no verdict yet"), "{err}");
    tx.insert_verdict(
        confirmation,
        &measured(VerdictKind::Inconclusive, -0.05, -0.12, 0.02),
    )
    .await
    .unwrap();
    let err = tx.insert_stage(first, confirmation, t(5)).await.unwrap_err();
    assert!(err.to_string().contains("not a win"), "{err}");
    tx.commit().await.unwrap();
    assert!(ledger.stages(None).await.unwrap().is_empty());
}

#[tokio::test]
async fn stage_round_trip_list_and_show() {
    let ledger = Ledger::open_in_memory().await.unwrap();
    let (id, first, second) = staged_win(&ledger, 1).await;
    let stage = ledger.stage(id).await.unwrap();
    assert_eq!(
        stage,
        Stage {
            id,
            experiment_id: first,
            confirmation_id: second,
            state: StageState::Staged,
            base_digest: digest(1),
            candidate_digest: digest(200),
            candidate_profile: "# profile 200\n".into(),
            // The confirmation's estimate, not the first win's.
            effect: -0.15,
            interval: Interval {
                low: -0.25,
                high: -0.05
            },
            noise_floor: 0.02,
            created_at: t(200),
            decided_at: None,
            decided_by: None,
            note: None,
        }
    );

    let staged = ledger.stages(Some(StageState::Staged)).await.unwrap();
    assert_eq!(staged.len(), 1);
    assert_eq!(staged[0].id, id);
    assert_eq!(staged[0].menu_id, MenuId::StageSpeculative);
    assert_eq!(staged[0].parameters, json!({"draft_len": 4}));
    assert_eq!(staged[0].base_digest, digest(1));
    assert_eq!(staged[0].age(t(260)), chrono::Duration::seconds(60));
    assert!(ledger.stages(Some(StageState::Approved)).await.unwrap().is_empty());

    let detail = ledger.stage_detail(id).await.unwrap();
    assert_eq!(detail.stage, stage);
    assert_eq!(detail.experiment.id, first);
    assert_eq!(detail.confirmation.id, second);
    assert_eq!(detail.confirmation.confirmation_of, Some(first));
    assert_eq!(detail.runs.len(), 4);
    assert_eq!(detail.confirmation_runs.len(), 4);
    assert!(detail.runs.iter().all(|r| r.experiment_id == first));
    assert_eq!(
        detail.runs.iter().map(|r| r.arm).collect::<Vec<_>>(),
        vec![Arm::Baseline, Arm::Candidate, Arm::Candidate, Arm::Baseline]
    );
    assert_eq!(detail.verdict.kind, VerdictKind::Win);
    assert_eq!(detail.confirmation_verdict.effect, Some(-0.15));
    assert_eq!(ledger.confirmations(first).await.unwrap()[0].id, second);
}

#[tokio::test]
async fn a_stage_is_decided_once_and_the_refusal_names_the_first_decider() {
    let ledger = Ledger::open_in_memory().await.unwrap();
    let (id, _, _) = staged_win(&ledger, 1).await;
    ledger
        .decide_stage(id, StageDecision::Approved, "alice", Some("looks right"), t(400))
        .await
        .unwrap();
    let err = ledger
        .decide_stage(id, StageDecision::Rejected, "bob", Some("no"), t(500))
        .await
        .unwrap_err();
    match &err {
        LedgerError::StageAlreadyDecided { id: got, state, by, at } => {
            assert_eq!(*got, id);
            assert_eq!(*state, StageState::Approved);
            assert_eq!(by, "alice");
            assert_eq!(*at, t(400));
        }
        other => panic!("expected StageAlreadyDecided, got {other:?}"),
    }
    let msg = err.to_string();
    assert!(msg.contains("approved by alice"), "{msg}");
    let stage = ledger.stage(id).await.unwrap();
    assert_eq!(stage.state, StageState::Approved);
    assert_eq!(stage.decided_by.as_deref(), Some("alice"));
    assert_eq!(stage.note.as_deref(), Some("looks right"));
    assert_eq!(stage.decided_at, Some(t(400)));

    let expire = ledger.begin_write().await.unwrap();
    let mut expire = expire;
    let err = expire.expire_stage(id, "base changed", t(600)).await.unwrap_err();
    assert!(matches!(err, LedgerError::StageAlreadyDecided { .. }), "{err:?}");

    let missing = ledger
        .decide_stage(StageId(77), StageDecision::Approved, "alice", None, t(1))
        .await
        .unwrap_err();
    assert!(missing.to_string().contains("stage 77 does not exist"), "{missing}");
}

#[tokio::test]
async fn stages_on_an_old_base_expire() {
    let ledger = Ledger::open_in_memory().await.unwrap();
    let (on_old, _, _) = staged_win(&ledger, 1).await;
    let (on_live, _, _) = staged_win(&ledger, 2).await;
    let expired = ledger
        .expire_stale_stages(&digest(2), "the live profile changed", t(900))
        .await
        .unwrap();
    assert_eq!(expired, vec![on_old]);
    let old = ledger.stage(on_old).await.unwrap();
    assert_eq!(old.state, StageState::Expired);
    assert_eq!(old.decided_by.as_deref(), Some("orchestrator"));
    assert_eq!(old.note.as_deref(), Some("the live profile changed"));
    assert_eq!(
        ledger.stage(on_live).await.unwrap().state,
        StageState::Staged
    );

    let mut tx = ledger.begin_write().await.unwrap();
    tx.expire_stage(on_live, "base is gone", t(950)).await.unwrap();
    tx.commit().await.unwrap();
    assert_eq!(
        ledger.stage(on_live).await.unwrap().state,
        StageState::Expired
    );
    assert_eq!(ledger.stages(Some(StageState::Expired)).await.unwrap().len(), 2);
}

#[tokio::test]
async fn dropping_a_write_transaction_rolls_it_back() {
    let ledger = Ledger::open_in_memory().await.unwrap();
    let mut tx = ledger.begin_write().await.unwrap();
    let id = tx.open_cycle(t(0), ProposerKind::Model).await.unwrap();
    assert_eq!(tx.cycle(id).await.unwrap().status, CycleStatus::Running);
    drop(tx);
    assert!(matches!(
        ledger.cycle(id).await.unwrap_err(),
        LedgerError::NotFound { .. }
    ));
}

/// Two processes' worth of `stage approve` racing: separate pools on one
/// file, each doing load → (write the profile) → decide → commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_decisions_on_a_file_ledger_exactly_one_wins() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("orchestrator.db");
    let setup = Ledger::open(&path).await.unwrap();
    let mut stages = Vec::new();
    for base in 1..=5 {
        stages.push(staged_win(&setup, base).await.0);
    }
    setup.close().await;

    let a = Ledger::open(&path).await.unwrap();
    let b = Ledger::open(&path).await.unwrap();
    for id in stages {
        let barrier = Arc::new(Barrier::new(2));
        let race = |ledger: Ledger, who: &'static str, decision| {
            let barrier = Arc::clone(&barrier);
            tokio::spawn(async move {
                barrier.wait().await;
                let mut tx = ledger.begin_write().await?;
                let stage = tx.stage(id).await?;
                // The approve command writes the live profile here; hold the
                // lock a while so the other side really has to wait.
                if stage.state == StageState::Staged {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                tx.decide_stage(id, decision, who, None, t(400)).await?;
                tx.commit().await
            })
        };
        let one = race(a.clone(), "alice", StageDecision::Approved);
        let two = race(b.clone(), "bob", StageDecision::Rejected);
        let results = [one.await.unwrap(), two.await.unwrap()];
        let winners = results.iter().filter(|r| r.is_ok()).count();
        assert_eq!(winners, 1, "{results:?}");
        let stage = a.stage(id).await.unwrap();
        for r in results {
            if let Err(e) = r {
                match e {
                    LedgerError::StageAlreadyDecided { by, state, .. } => {
                        assert_eq!(Some(by), stage.decided_by);
                        assert_eq!(state, stage.state);
                    }
                    other => panic!("the loser must get the typed refusal, got {other}"),
                }
            }
        }
    }
}

#[tokio::test]
async fn a_writer_stuck_past_the_timeout_gets_a_clear_message() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("orchestrator.db");
    let holder = Ledger::open(&path).await.unwrap();
    let waiter = Ledger::open_with(&path, Duration::from_millis(200)).await.unwrap();
    let held = holder.begin_write().await.unwrap();
    let err = waiter.begin_write().await.unwrap_err();
    drop(held);
    let msg = err.to_string();
    assert!(matches!(err, LedgerError::Locked { .. }), "{err:?}");
    assert!(msg.contains(&path.display().to_string()), "{msg}");
    assert!(msg.contains("another orchestrator process"), "{msg}");
    assert!(!msg.contains("database is locked"), "{msg}");
    // Once the holder is gone the waiter writes normally.
    waiter.begin_write().await.unwrap().commit().await.unwrap();
}

#[tokio::test]
async fn named_queries_use_indexes() {
    let ledger = Ledger::open_in_memory().await.unwrap();
    for &q in NamedQuery::ALL {
        let plan = ledger.query_plan(q).await.unwrap();
        for line in plan.lines() {
            let full_scan = line.starts_with("SCAN ")
                && !line.contains(" USING ")
                && !line.contains("VIRTUAL TABLE");
            // The newest K experiments walk the primary key backwards and stop
            // after K rows: bounded, not a full scan.
            let bounded = q == NamedQuery::RecentExperiments && line == "SCAN e";
            assert!(!full_scan || bounded, "{q:?} scans a table:\n{plan}");
        }
        assert!(
            plan.contains("USING") || q == NamedQuery::RecentExperiments,
            "{q:?} uses no index:\n{plan}"
        );
    }
    let dup = ledger.query_plan(NamedQuery::DuplicateDecided).await.unwrap();
    assert!(dup.contains("experiments_by_identity"), "{dup}");
    let floor = ledger.query_plan(NamedQuery::LatestNoiseFloor).await.unwrap();
    assert!(floor.contains("noise_floors_by_stack"), "{floor}");
}

#[test]
fn canonical_json_sorts_keys_at_every_level() {
    let v: serde_json::Value = serde_json::from_str(r#"{"b": [{"y": 1, "x": 2}], "a": null}"#).unwrap();
    assert_eq!(codec::canonical_json(&v), r#"{"a":null,"b":[{"x":2,"y":1}]}"#);
}

#[test]
fn timestamps_are_fixed_width_and_ordered() {
    let a = codec::ts(&t(0));
    let b = codec::ts(&(t(0) + chrono::Duration::microseconds(1)));
    assert_eq!(a, "2026-11-29T08:00:00.000000Z");
    assert_eq!(a.len(), 27);
    assert!(a < b);
}
