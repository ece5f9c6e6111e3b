//! Tests of the ledger through its typed API, against in-memory and tempfile
//! databases, and the fixtures they share. Raw SQL appears only where a test
//! must try what the typed API cannot express (an illegal state), to prove
//! the schema refuses it.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use serde_json::json;
use tokio::sync::Barrier;

mod check;
mod costs;
mod open;
mod rows;
mod stages;
mod verdicts;

pub(super) use super::*;
use crate::menu::MenuId;
use crate::vocab::{Arm, CycleStatus, Digest, Method, ProposerKind, StageState, VerdictKind};

pub(super) fn t(seconds: i64) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 29, 8, 0, 0).unwrap() + chrono::Duration::seconds(seconds)
}

pub(super) fn digest(n: u8) -> Digest {
    Digest::of(&[n])
}

pub(super) fn experiment(cycle_id: CycleId, base: u8, candidate: u8) -> NewExperiment {
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

pub(super) fn measured(kind: VerdictKind, effect: f64, low: f64, high: f64) -> NewVerdict {
    NewVerdict {
        kind,
        decided_at: t(100),
        effect: Some(effect),
        interval: Some(Interval { low, high }),
        noise_floor: Some(0.02),
        floor_is_bound: false,
        pairs: 6,
        method: Some("test confidence sequence".to_string()),
        reason: None,
    }
}

pub(super) fn refusal(kind: VerdictKind, reason: &str) -> NewVerdict {
    NewVerdict::refusal(kind, reason, t(100))
}

pub(super) fn run(experiment_id: ExperimentId, arm: Arm, order: u32, pair: Option<u32>) -> NewRun {
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
        parts: TokenParts {
            trunk_seconds_per_token: Some(0.4),
            expert_seconds_per_token: Some(1.0),
            far_hit_share: Some(0.2),
            draft_acceptance: None,
        },
        pressure: RunPressure {
            load1: Some(0.5),
            cpu_pressure: Some(0.02),
            memory_pressure: Some(0.0),
            io_pressure: None,
        },
    }
}

/// One ABBA pair of runs for an experiment.
pub(super) async fn abba(tx: &mut WriteTx, experiment_id: ExperimentId) {
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
pub(super) async fn staged_win(ledger: &Ledger, base: u8) -> (StageId, ExperimentId, ExperimentId) {
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
pub(super) async fn raw(ledger: &Ledger, sql: &str) -> Result<(), LedgerError> {
    sqlx::query(sql)
        .execute(&ledger.pool)
        .await
        .map(|_| ())
        .map_err(ledger.ctx.err("run a test statement"))
}

pub(super) fn assert_constraint(result: Result<impl std::fmt::Debug, LedgerError>, what: &str) {
    match result {
        Err(LedgerError::Constraint { .. }) => {}
        other => panic!("{what}: expected a schema refusal, got {other:?}"),
    }
}
