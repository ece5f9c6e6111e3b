//! Stages: confirmed wins waiting for a person, and their one decision.
//!
//! A decision is an `UPDATE ... WHERE state = 'staged'` inside the caller's
//! `IMMEDIATE` transaction, so of two racing deciders exactly one changes the
//! row; the other waits for the write lock, then sees the first decision and
//! gets [`LedgerError::StageAlreadyDecided`] naming who decided and when.

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use sqlx::Row;

use super::Conn;
use super::codec::{json_col, ts};
use super::compositions::{self, StagePart};
use super::error::Ctx;
use super::experiments::{self, Experiment};
use super::ids::{ExperimentId, StageId};
use super::runs::{self, Run};
use super::stage_expiry::{built_on, expire_stale, settle_all, staged_edges};
use super::verdicts::{self, Verdict};
use super::{Interval, Ledger, LedgerError, Result, WriteTx};
use crate::menu::MenuId;
use crate::vocab::{Digest, StageState};

/// What a person decides about a staged win.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StageDecision {
    Approved,
    Rejected,
}

impl StageDecision {
    fn state(self) -> StageState {
        match self {
            StageDecision::Approved => StageState::Approved,
            StageDecision::Rejected => StageState::Rejected,
        }
    }
}

/// A stored stage. Effect, interval and floor are the confirmation's: the
/// first win's estimate was selected for being good, so it is biased
/// upwards (the winner's curse); the independent second A/B is not.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Stage {
    pub id: StageId,
    pub experiment_id: ExperimentId,
    pub confirmation_id: ExperimentId,
    pub state: StageState,
    pub base_digest: Digest,
    pub candidate_digest: Digest,
    pub candidate_profile: String,
    pub effect: f64,
    pub interval: Interval,
    pub noise_floor: f64,
    pub created_at: DateTime<Utc>,
    pub decided_at: Option<DateTime<Utc>>,
    pub decided_by: Option<String>,
    pub note: Option<String>,
    /// The stack whose cycle staged it; `None` for a row from before stacks
    /// were recorded.
    pub stack: Option<String>,
    /// When its profile was written to its stack's live profile (an
    /// approved stage only; see [`Stage::apply`]).
    pub applied_at: Option<DateTime<Utc>>,
    /// What wrote the live profile, or refused to: "the daemon of stack S
    /// on host H", or "`orchestrator stage approve` on host H".
    pub applied_by: Option<String>,
    /// The live profile path it was (or would have been) written to, on
    /// that host.
    pub applied_to: Option<String>,
    /// Why an approved stage's profile was not written.
    pub apply_refusal: Option<String>,
    pub apply_refused_at: Option<DateTime<Utc>>,
    /// The stack whose cycle ran the confirmation: its own `stack`, or a
    /// classmate's (`[stack] class`); `None` for a stage from before
    /// classmates confirmed each other (migration 20261201230001).
    pub confirmed_by_stack: Option<String>,
    /// The class it was approved for (`stage approve --class`): each of the
    /// class's daemons applies it to its own live profile.
    pub approved_for_class: Option<String>,
    /// When `stage approve --restart` restarted the stack on its profile
    /// and the live server answered again.
    pub restarted_at: Option<DateTime<Utc>>,
}

impl Stage {
    /// The classmate that confirmed it, when not its own stack.
    pub fn confirmed_elsewhere(&self) -> Option<&str> {
        confirmed_elsewhere(self.stack.as_deref(), self.confirmed_by_stack.as_deref())
    }
}

/// `by` when it names another stack than `stack`.
fn confirmed_elsewhere<'a>(stack: Option<&str>, by: Option<&'a str>) -> Option<&'a str> {
    by.filter(|b| Some(*b) != stack)
}

from_row!(Stage, |row| {
    Ok(Stage {
        id: row.try_get("id")?,
        experiment_id: row.try_get("experiment_id")?,
        confirmation_id: row.try_get("confirmation_id")?,
        state: row.try_get("state")?,
        base_digest: row.try_get("base_digest")?,
        candidate_digest: row.try_get("candidate_digest")?,
        candidate_profile: row.try_get("candidate_profile")?,
        effect: row.try_get("effect")?,
        interval: Interval {
            low: row.try_get("interval_low")?,
            high: row.try_get("interval_high")?,
        },
        noise_floor: row.try_get("noise_floor")?,
        created_at: row.try_get("created_at")?,
        decided_at: row.try_get("decided_at")?,
        decided_by: row.try_get("decided_by")?,
        note: row.try_get("note")?,
        stack: row.try_get("stack")?,
        applied_at: row.try_get("applied_at")?,
        applied_by: row.try_get("applied_by")?,
        applied_to: row.try_get("applied_to")?,
        apply_refusal: row.try_get("apply_refusal")?,
        apply_refused_at: row.try_get("apply_refused_at")?,
        confirmed_by_stack: row.try_get("confirmed_by_stack")?,
        approved_for_class: row.try_get("approved_for_class")?,
        restarted_at: row.try_get("restarted_at")?,
    })
});

/// One line of `orchestrator stage list`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StageSummary {
    pub id: StageId,
    pub state: StageState,
    pub menu_id: MenuId,
    pub parameters: Value,
    pub effect: f64,
    pub interval: Interval,
    pub noise_floor: f64,
    /// The confirmation was judged against the bound `max_noise_floor`,
    /// which `noise_floor` then holds: no floor was measured.
    pub floor_is_bound: bool,
    pub created_at: DateTime<Utc>,
    pub base_digest: Digest,
    pub decided_at: Option<DateTime<Utc>>,
    pub decided_by: Option<String>,
    /// For a composite: the staged wins it applies, best first; else empty.
    pub parts: Vec<StagePart>,
    /// The stack whose cycle staged it.
    pub stack: Option<String>,
    /// When an approved stage's profile was written to its live profile.
    pub applied_at: Option<DateTime<Utc>>,
    /// Why an approved stage's profile was not written.
    pub apply_refusal: Option<String>,
    /// The stack whose cycle ran the confirmation (see [`Stage`]).
    pub confirmed_by_stack: Option<String>,
    /// That cycle's class.
    pub confirmed_in_class: Option<String>,
}

impl StageSummary {
    /// How long it has been waiting (or waited) since it was staged.
    pub fn age(&self, now: DateTime<Utc>) -> chrono::Duration {
        now - self.created_at
    }

    /// The classmate that confirmed it, when not its own stack.
    pub fn confirmed_elsewhere(&self) -> Option<&str> {
        confirmed_elsewhere(self.stack.as_deref(), self.confirmed_by_stack.as_deref())
    }
}

from_row!(StageSummary, |row| {
    Ok(StageSummary {
        id: row.try_get("id")?,
        state: row.try_get("state")?,
        menu_id: row.try_get("menu_id")?,
        parameters: json_col(row, "parameters")?,
        effect: row.try_get("effect")?,
        interval: Interval {
            low: row.try_get("interval_low")?,
            high: row.try_get("interval_high")?,
        },
        noise_floor: row.try_get("noise_floor")?,
        floor_is_bound: row.try_get("floor_is_bound")?,
        created_at: row.try_get("created_at")?,
        base_digest: row.try_get("base_digest")?,
        decided_at: row.try_get("decided_at")?,
        decided_by: row.try_get("decided_by")?,
        parts: Vec::new(),
        stack: row.try_get("stack")?,
        applied_at: row.try_get("applied_at")?,
        apply_refusal: row.try_get("apply_refusal")?,
        confirmed_by_stack: row.try_get("confirmed_by_stack")?,
        confirmed_in_class: row.try_get("confirmed_in_class")?,
    })
});

/// Everything `orchestrator stage show` prints: the stage and the evidence.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StageDetail {
    pub stage: Stage,
    pub experiment: Experiment,
    /// Every run of both arms (and warmups), in run order.
    pub runs: Vec<Run>,
    pub verdict: Verdict,
    pub confirmation: Experiment,
    pub confirmation_runs: Vec<Run>,
    pub confirmation_verdict: Verdict,
    /// For a composite: the staged wins it applies, best first; else empty.
    pub parts: Vec<StagePart>,
    /// The class of the cycle that ran the confirmation.
    pub confirmed_in_class: Option<String>,
}

pub(crate) const SQL_STAGES_BY_STATE: &str = "SELECT s.id, s.experiment_id, s.state, e.menu_id, e.parameters, \
     s.effect, s.interval_low, s.interval_high, s.noise_floor, s.created_at, s.base_digest, \
     s.decided_at, s.decided_by, s.stack, s.applied_at, s.apply_refusal, s.confirmed_by_stack, \
     (SELECT kc.class FROM experiments k JOIN cycles kc ON kc.id = k.cycle_id WHERE k.id = s.confirmation_id) \
     AS confirmed_in_class, \
     coalesce((SELECT v.floor_is_bound FROM verdicts v WHERE v.experiment_id = s.confirmation_id), FALSE) \
     AS floor_is_bound \
     FROM stages s JOIN experiments e ON e.id = s.experiment_id \
     WHERE s.state = $1 AND (CAST($2 AS TEXT) IS NULL OR s.stack = $2) \
     ORDER BY s.created_at DESC, s.id DESC";

pub(crate) const SQL_ALL_STAGES: &str = "SELECT s.id, s.experiment_id, s.state, e.menu_id, e.parameters, \
     s.effect, s.interval_low, s.interval_high, s.noise_floor, s.created_at, s.base_digest, \
     s.decided_at, s.decided_by, s.stack, s.applied_at, s.apply_refusal, s.confirmed_by_stack, \
     (SELECT kc.class FROM experiments k JOIN cycles kc ON kc.id = k.cycle_id WHERE k.id = s.confirmation_id) \
     AS confirmed_in_class, \
     coalesce((SELECT v.floor_is_bound FROM verdicts v WHERE v.experiment_id = s.confirmation_id), FALSE) \
     AS floor_is_bound \
     FROM stages s JOIN experiments e ON e.id = s.experiment_id \
     WHERE CAST($1 AS TEXT) IS NULL OR s.stack = $1 \
     ORDER BY s.created_at DESC, s.id DESC";

async fn get(c: Conn<'_>, cx: &Ctx, id: StageId) -> Result<Stage> {
    on_db!(c, |c| {
        sqlx::query_as("SELECT * FROM stages WHERE id = $1")
            .bind(id)
            .fetch_optional(c)
            .await
            .map_err(cx.err("read a stage"))?
            .ok_or_else(|| cx.not_found(StageId::WHAT, id.0))
    })
}

/// A stage's summary row and the experiment it stages (to read its parts).
struct SummaryRow {
    summary: StageSummary,
    experiment_id: ExperimentId,
}

from_row!(SummaryRow, |row| {
    Ok(SummaryRow {
        summary: StageSummary::from_row(row)?,
        experiment_id: row.try_get("experiment_id")?,
    })
});

async fn list(mut c: Conn<'_>, cx: &Ctx, state: Option<StageState>) -> Result<Vec<StageSummary>> {
    let rows: Vec<SummaryRow> = on_db!(c.re(), |c| {
        let query = match state {
            Some(state) => sqlx::query_as(SQL_STAGES_BY_STATE)
                .bind(state)
                .bind(cx.stack()),
            None => sqlx::query_as(SQL_ALL_STAGES).bind(cx.stack()),
        };
        query.fetch_all(c).await.map_err(cx.err("list the stages"))
    })?;
    let mut out = Vec::with_capacity(rows.len());
    for row in rows {
        let mut s = row.summary;
        s.parts = compositions::parts_of_experiment(c.re(), cx, row.experiment_id).await?;
        out.push(s);
    }
    Ok(out)
}

async fn detail(c: Conn<'_>, cx: &Ctx, id: StageId) -> Result<StageDetail> {
    on_db!(c, |c| {
        let stage = get((&mut *c).into(), cx, id).await?;
        let experiment = experiments::get((&mut *c).into(), cx, stage.experiment_id).await?;
        let confirmation = experiments::get((&mut *c).into(), cx, stage.confirmation_id).await?;
        let runs = runs::of_experiment((&mut *c).into(), cx, experiment.id).await?;
        let confirmation_runs = runs::of_experiment((&mut *c).into(), cx, confirmation.id).await?;
        // A stage is inserted only beside both verdicts (`staging`), and
        // verdicts are never deleted.
        let verdict = verdicts::of_experiment((&mut *c).into(), cx, experiment.id)
            .await?
            .ok_or_else(|| cx.not_found("verdict of experiment", experiment.id.0))?;
        let confirmation_verdict = verdicts::of_experiment((&mut *c).into(), cx, confirmation.id)
            .await?
            .ok_or_else(|| cx.not_found("verdict of experiment", confirmation.id.0))?;
        let parts = compositions::parts_of_experiment((&mut *c).into(), cx, experiment.id).await?;
        let confirmed_in_class = sqlx::query_scalar(
            "SELECT c.class FROM experiments e JOIN cycles c ON c.id = e.cycle_id WHERE e.id = $1",
        )
        .bind(confirmation.id)
        .fetch_one(&mut *c)
        .await
        .map_err(cx.err("read a stage"))?;
        Ok(StageDetail {
            stage,
            experiment,
            runs,
            verdict,
            confirmation,
            confirmation_runs,
            confirmation_verdict,
            parts,
            confirmed_in_class,
        })
    })
}

/// Moves a `staged` stage to `state`; refuses any other starting state.
pub(super) async fn settle(
    c: Conn<'_>,
    cx: &Ctx,
    id: StageId,
    state: StageState,
    by: &str,
    note: Option<&str>,
    at: DateTime<Utc>,
) -> Result<()> {
    on_db!(c, |c, d| {
        let done = sqlx::query(d.pick(
            "UPDATE stages SET state = $2, decided_by = $3, note = $4, decided_at = max($5, created_at) \
             WHERE id = $1 AND state = 'staged'",
            "UPDATE stages SET state = $2, decided_by = $3, note = $4, decided_at = GREATEST($5, created_at) \
             WHERE id = $1 AND state = 'staged'",
        ))
        .bind(id)
        .bind(state)
        .bind(by)
        .bind(note)
        .bind(ts(&at))
        .execute(&mut *c)
        .await
        .map_err(cx.err("record a stage decision"))?;
        if done.rows_affected() == 1 {
            return Ok(());
        }
        let stage = get((&mut *c).into(), cx, id).await?;
        Err(LedgerError::StageAlreadyDecided {
            id,
            state: stage.state,
            by: stage.decided_by.unwrap_or_default(),
            at: stage.decided_at.unwrap_or(stage.created_at),
        })
    })
}

impl WriteTx {
    /// Reads a stage under the write lock (the first step of `stage approve`).
    pub async fn stage(&mut self, id: StageId) -> Result<Stage> {
        let (c, cx) = self.parts();
        get(c, cx, id).await
    }

    /// Records a person's decision. Refuses, with
    /// [`LedgerError::StageAlreadyDecided`], a stage that is not `staged`,
    /// and a rejection without a reason in `note`.
    pub async fn decide_stage(
        &mut self,
        id: StageId,
        decision: StageDecision,
        by: &str,
        note: Option<&str>,
        at: DateTime<Utc>,
    ) -> Result<()> {
        if decision == StageDecision::Rejected && note.is_none_or(|n| n.trim().is_empty()) {
            return Err(LedgerError::RejectionNeedsReason { id });
        }
        let (c, cx) = self.parts();
        settle(c, cx, id, decision.state(), by, note, at).await
    }

    /// Marks a stage `expired` (its base is no longer the live profile),
    /// recorded as decided by `orchestrator` with `reason` as the note.
    pub async fn expire_stage(
        &mut self,
        id: StageId,
        reason: &str,
        at: DateTime<Utc>,
    ) -> Result<()> {
        let (c, cx) = self.parts();
        settle(
            c,
            cx,
            id,
            StageState::Expired,
            "orchestrator",
            Some(reason),
            at,
        )
        .await
    }

    /// Expires every staged win measured on top of stage `id` (decided
    /// already), directly or through other waiting wins ([`built_on`]), with
    /// `reason`; returns their ids. Used when `id` is rejected: what was
    /// measured on its candidate can never be approved.
    pub async fn expire_built_on(
        &mut self,
        id: StageId,
        reason: &str,
        at: DateTime<Utc>,
    ) -> Result<Vec<StageId>> {
        let (mut c, cx) = self.parts();
        let under = get(c.re(), cx, id).await?;
        let staged = staged_edges(c.re(), cx).await?;
        let on_top = built_on(&under.base_digest, &under.candidate_digest, &staged);
        settle_all(c, cx, &on_top, reason, at).await?;
        Ok(on_top)
    }

    /// Expires every staged win whose base is not `live` (nor built on it
    /// through waiting wins, see [`stale_stages`]); returns their ids.
    pub async fn expire_stale_stages(
        &mut self,
        live: &Digest,
        reason: &str,
        at: DateTime<Utc>,
    ) -> Result<Vec<StageId>> {
        let (c, cx) = self.parts();
        expire_stale(c, cx, live, reason, at).await
    }
}

impl Ledger {
    pub async fn stage(&self, id: StageId) -> Result<Stage> {
        let mut c = self.conn("read a stage").await?;
        get(c.conn(), &self.ctx, id).await
    }

    /// Stages in one state (`Some(Staged)` for `stage list`), or all of them,
    /// newest first.
    pub async fn stages(&self, state: Option<StageState>) -> Result<Vec<StageSummary>> {
        let mut c = self.conn("list the stages").await?;
        list(c.conn(), &self.ctx, state).await
    }

    /// A stage with its full evidence, for `stage show`.
    pub async fn stage_detail(&self, id: StageId) -> Result<StageDetail> {
        let mut c = self.conn("read a stage").await?;
        detail(c.conn(), &self.ctx, id).await
    }

    /// [`WriteTx::decide_stage`] as its own transaction.
    pub async fn decide_stage(
        &self,
        id: StageId,
        decision: StageDecision,
        by: &str,
        note: Option<&str>,
        at: DateTime<Utc>,
    ) -> Result<()> {
        let mut tx = self.begin_write().await?;
        tx.decide_stage(id, decision, by, note, at).await?;
        tx.commit().await
    }

    /// [`WriteTx::expire_stale_stages`] as its own transaction.
    pub async fn expire_stale_stages(
        &self,
        live: &Digest,
        reason: &str,
        at: DateTime<Utc>,
    ) -> Result<Vec<StageId>> {
        let mut tx = self.begin_write().await?;
        let ids = tx.expire_stale_stages(live, reason, at).await?;
        tx.commit().await?;
        Ok(ids)
    }
}
