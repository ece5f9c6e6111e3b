//! Cycles of the loop, the observation each one starts with, and the recent
//! cycles with their verdicts (`orchestrator ledger`).

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use sqlx::{FromRow, Row};

use super::Conn;
use super::codec::{canonical_json, json_col, opt_json_col, require_object, ts};
use super::error::Ctx;
use super::ids::{CycleId, ExperimentId, ObservationId, ProposalId, StageId};
use super::verdicts::Verdict;
use super::{Ledger, LedgerError, Result, WriteTx};
use crate::menu::MenuId;
use crate::vocab::{CycleStatus, Digest, ProposerKind, Scheduled};

/// The ledger's record of one cycle of the loop.
#[derive(Debug, Clone, PartialEq, Serialize, FromRow)]
pub struct CycleRecord {
    pub id: CycleId,
    pub started_at: DateTime<Utc>,
    pub ended_at: Option<DateTime<Utc>>,
    pub status: CycleStatus,
    /// Why it failed or was aborted; `None` for running and completed cycles.
    pub error: Option<String>,
    /// The proposer whose proposals this cycle recorded; `None` when it got
    /// none (the orchestrator scheduled its experiment, or it ended first).
    pub proposer: Option<ProposerKind>,
    /// The stack that ran it (`[stack] name`); `None` for a row written
    /// before stacks were recorded, or by an unscoped handle.
    pub stack: Option<String>,
    /// Its `[stack] class`, when named.
    pub class: Option<String>,
}

/// How a cycle ended. Failures and aborts always carry their cause.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CycleOutcome {
    Completed,
    Failed(String),
    Aborted(String),
}

impl CycleOutcome {
    fn status(&self) -> CycleStatus {
        match self {
            CycleOutcome::Completed => CycleStatus::Completed,
            CycleOutcome::Failed(_) => CycleStatus::Failed,
            CycleOutcome::Aborted(_) => CycleStatus::Aborted,
        }
    }

    fn error(&self) -> Option<&str> {
        match self {
            CycleOutcome::Completed => None,
            CycleOutcome::Failed(e) | CycleOutcome::Aborted(e) => Some(e),
        }
    }
}

/// What the cycle saw before proposing.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NewObservation {
    pub cycle_id: CycleId,
    pub observed_at: DateTime<Utc>,
    /// The metrics snapshot (a JSON object of metric name → value).
    pub metrics: Value,
    /// The heat summary, when the stack exposes one.
    pub heat: Option<Value>,
    pub live_profile_digest: Digest,
    /// The profile the cycle's experiments were measured against: the live
    /// profile, or the candidate of a win that waits for approval
    /// (`cycle/base.rs`). What the planner refused is filed under it.
    pub base_profile_digest: Digest,
}

// Hand-written for the JSON columns, as [`super::NewExperiment`]'s.
from_row!(NewObservation, |row| {
    Ok(NewObservation {
        cycle_id: row.try_get("cycle_id")?,
        observed_at: row.try_get("observed_at")?,
        metrics: json_col(row, "metrics")?,
        heat: opt_json_col(row, "heat")?,
        // Rows from before the column have none; they built on the live
        // profile (the migration fills them in, this is belt and braces).
        base_profile_digest: match row.try_get::<Option<Digest>, _>("base_profile_digest")? {
            Some(d) => d,
            None => row.try_get("live_profile_digest")?,
        },
        live_profile_digest: row.try_get("live_profile_digest")?,
    })
});

/// A stored observation: its id and the observation as recorded.
#[derive(Debug, Clone, PartialEq, Serialize, FromRow)]
pub struct Observation {
    pub id: ObservationId,
    #[sqlx(flatten)]
    #[serde(flatten)]
    pub recorded: NewObservation,
}

reads_as_recorded!(Observation => NewObservation);

/// A cycle with every verdict recorded in it (normally one; a cycle that
/// confirms a win has two), for `orchestrator ledger`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CycleSummary {
    pub cycle: CycleRecord,
    pub verdicts: Vec<CycleVerdict>,
    /// Set when the cycle stood aside for the live server's users too long.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deferral: Option<super::CycleDeferral>,
}

/// A verdict with what was tried, when there was an experiment.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CycleVerdict {
    pub verdict: Verdict,
    /// The menu entry tried; `None` for a manual comparison (`manual`) and
    /// when nothing was tried.
    pub menu_id: Option<MenuId>,
    /// A manual comparison's A/B (`orchestrator compare`): no menu entry
    /// planned its candidate.
    pub manual: bool,
    pub parameters: Option<Value>,
    /// The proposal that chose the experiment; `None` when the orchestrator
    /// scheduled it (a noise floor, a confirmation) or there is none.
    pub proposal_id: Option<ProposalId>,
    /// The win this experiment re-tests, when it is a confirmation.
    pub confirmation_of: Option<ExperimentId>,
    /// The applied stage whose realization this experiment measures.
    pub realizes: Option<StageId>,
}

impl CycleVerdict {
    /// Why the orchestrator ran this experiment itself, without asking the
    /// proposer; `None` when the proposer chose it (or nothing was tried).
    /// With no proposal, the rows tell the kinds apart: a manual
    /// comparison's experiments say so, a realization names its stage, a
    /// confirmation names the win it re-tests, a floor refresh is a `remeasure`, and the one other
    /// experiment the orchestrator records itself is a composition.
    pub fn scheduled(&self) -> Option<Scheduled> {
        if self.manual {
            return Some(match self.confirmation_of {
                Some(_) => Scheduled::ManualConfirmation,
                None => Scheduled::ManualComparison,
            });
        }
        if let Some(stage) = self.realizes {
            return Some(Scheduled::Realization(stage.0));
        }
        match (self.menu_id, self.proposal_id, self.confirmation_of) {
            (Some(_), None, Some(_)) => Some(Scheduled::Confirmation),
            (Some(MenuId::Remeasure), None, None) => Some(Scheduled::FloorRefresh),
            (Some(_), None, None) => Some(Scheduled::Composition),
            _ => None,
        }
    }
}

/// A scoped handle's recovery touches only its own stack's cycles (`$3`);
/// an unscoped one (NULL) every stack's.
pub(crate) const SQL_ABORT_RUNNING: &str = "UPDATE cycles SET status = 'aborted', ended_at = max($1, started_at), error = $2 \
     WHERE status = 'running' AND (CAST($3 AS TEXT) IS NULL OR stack = $3)";

const PG_ABORT_RUNNING: &str = "UPDATE cycles SET status = 'aborted', ended_at = GREATEST($1, started_at), error = $2 \
     WHERE status = 'running' AND (CAST($3 AS TEXT) IS NULL OR stack = $3)";

/// The newest observations first, by primary key (bounded by the limit), of
/// the handle's stack.
pub(crate) const SQL_RECENT_LIVE_METRIC: &str = "SELECT o.observed_at, o.metrics FROM observations o \
     JOIN cycles c ON c.id = o.cycle_id \
     WHERE CAST($2 AS TEXT) IS NULL OR c.stack = $2 \
     ORDER BY o.id DESC LIMIT $1";

/// A scoped handle (`orchestrator ledger --stack`) lists its stack's only.
pub(crate) const SQL_RECENT_CYCLES: &str = concat!(
    "SELECT ",
    cycle_columns!(),
    " FROM cycles WHERE CAST($2 AS TEXT) IS NULL OR stack = $2 \
     ORDER BY started_at DESC, id DESC LIMIT $1"
);

pub(crate) const SQL_CYCLE_VERDICTS: &str = "SELECT v.*, e.menu_id AS e_menu_id, e.parameters AS e_parameters, \
     e.proposal_id AS e_proposal_id, e.confirmation_of AS e_confirmation_of, z.stage_id AS e_realizes \
     FROM verdicts v LEFT JOIN experiments e ON e.id = v.experiment_id \
     LEFT JOIN realizations z ON z.experiment_id = v.experiment_id \
     WHERE v.cycle_id IN (SELECT value FROM json_each($1)) ORDER BY v.cycle_id, v.id";

const PG_CYCLE_VERDICTS: &str = "SELECT v.*, e.menu_id AS e_menu_id, e.parameters AS e_parameters, \
     e.proposal_id AS e_proposal_id, e.confirmation_of AS e_confirmation_of, z.stage_id AS e_realizes \
     FROM verdicts v LEFT JOIN experiments e ON e.id = v.experiment_id \
     LEFT JOIN realizations z ON z.experiment_id = v.experiment_id \
     WHERE v.cycle_id IN (SELECT value::bigint FROM json_array_elements_text($1::json)) \
     ORDER BY v.cycle_id, v.id";

async fn open_cycle(
    c: Conn<'_>,
    cx: &Ctx,
    started_at: DateTime<Utc>,
    proposer: ProposerKind,
) -> Result<CycleId> {
    on_db!(c, |c| {
        sqlx::query_scalar(
            "INSERT INTO cycles (started_at, status, proposer, stack, class) \
             VALUES ($1, 'running', $2, $3, $4) RETURNING id",
        )
        .bind(ts(&started_at))
        .bind(proposer)
        .bind(cx.stack())
        .bind(cx.class())
        .fetch_one(c)
        .await
        .map_err(cx.err("open a cycle"))
    })
}

async fn get_cycle(c: Conn<'_>, cx: &Ctx, id: CycleId) -> Result<CycleRecord> {
    on_db!(c, |c| {
        sqlx::query_as(concat!(
            "SELECT ",
            cycle_columns!(),
            " FROM cycles WHERE id = $1"
        ))
        .bind(id)
        .fetch_optional(c)
        .await
        .map_err(cx.err("read a cycle"))?
        .ok_or_else(|| cx.not_found(CycleId::WHAT, id.0))
    })
}

async fn close_cycle(
    c: Conn<'_>,
    cx: &Ctx,
    id: CycleId,
    outcome: &CycleOutcome,
    ended_at: DateTime<Utc>,
) -> Result<()> {
    on_db!(c, |c| {
        let done = sqlx::query(
            "UPDATE cycles SET status = $2, error = $3, ended_at = $4 WHERE id = $1 AND status = 'running'",
        )
        .bind(id)
        .bind(outcome.status())
        .bind(outcome.error())
        .bind(ts(&ended_at))
        .execute(&mut *c)
        .await
        .map_err(cx.err("close a cycle"))?;
        if done.rows_affected() == 1 {
            return Ok(());
        }
        let cycle = get_cycle((&mut *c).into(), cx, id).await?;
        Err(LedgerError::CycleNotRunning {
            id,
            status: cycle.status,
        })
    })
}

/// A `failed` verdict for each experiment of a running cycle that has none
/// (a measurement the process died in) ...
const SQL_FAIL_OPEN_EXPERIMENTS: &str = "INSERT INTO verdicts (cycle_id, experiment_id, kind, decided_at, reason) \
     SELECT e.cycle_id, e.id, 'failed', max($1, e.created_at), $2 FROM experiments e \
     JOIN cycles c ON c.id = e.cycle_id \
     WHERE c.status = 'running' AND (CAST($3 AS TEXT) IS NULL OR c.stack = $3) \
       AND NOT EXISTS (SELECT 1 FROM verdicts v WHERE v.experiment_id = e.id)";

/// ... and one for a running cycle that got no verdict at all (it died
/// before any experiment existed), so every cycle ends in one.
const SQL_FAIL_OPEN_CYCLES: &str = "INSERT INTO verdicts (cycle_id, experiment_id, kind, decided_at, reason) \
     SELECT c.id, NULL, 'failed', max($1, c.started_at), $2 FROM cycles c \
     WHERE c.status = 'running' AND (CAST($3 AS TEXT) IS NULL OR c.stack = $3) \
       AND NOT EXISTS (SELECT 1 FROM verdicts v WHERE v.cycle_id = c.id)";

const PG_FAIL_OPEN_EXPERIMENTS: &str = "INSERT INTO verdicts (cycle_id, experiment_id, kind, decided_at, reason) \
     SELECT e.cycle_id, e.id, 'failed', GREATEST($1, e.created_at), $2 FROM experiments e \
     JOIN cycles c ON c.id = e.cycle_id \
     WHERE c.status = 'running' AND (CAST($3 AS TEXT) IS NULL OR c.stack = $3) \
       AND NOT EXISTS (SELECT 1 FROM verdicts v WHERE v.experiment_id = e.id)";

const PG_FAIL_OPEN_CYCLES: &str = "INSERT INTO verdicts (cycle_id, experiment_id, kind, decided_at, reason) \
     SELECT c.id, NULL, 'failed', GREATEST($1, c.started_at), $2 FROM cycles c \
     WHERE c.status = 'running' AND (CAST($3 AS TEXT) IS NULL OR c.stack = $3) \
       AND NOT EXISTS (SELECT 1 FROM verdicts v WHERE v.cycle_id = c.id)";

/// Closes every running cycle as aborted, first giving each experiment and
/// cycle left without a verdict a `failed` one. The caller runs it in one
/// transaction, so a crash during recovery leaves the cycles running for the
/// next attempt rather than half-closed.
async fn abort_running(c: Conn<'_>, cx: &Ctx, reason: &str, at: DateTime<Utc>) -> Result<u64> {
    on_db!(c, |c, d| {
        let fail_open = [
            d.pick(SQL_FAIL_OPEN_EXPERIMENTS, PG_FAIL_OPEN_EXPERIMENTS),
            d.pick(SQL_FAIL_OPEN_CYCLES, PG_FAIL_OPEN_CYCLES),
        ];
        for sql in fail_open {
            sqlx::query(sql)
                .bind(ts(&at))
                .bind(format!("aborted: {reason}"))
                .bind(cx.stack())
                .execute(&mut *c)
                .await
                .map_err(cx.err("record failed verdicts for the running cycles"))?;
        }
        let done = sqlx::query(d.pick(SQL_ABORT_RUNNING, PG_ABORT_RUNNING))
            .bind(ts(&at))
            .bind(reason)
            .bind(cx.stack())
            .execute(c)
            .await
            .map_err(cx.err("abort the running cycles"))?;
        Ok(done.rows_affected())
    })
}

async fn insert_observation(c: Conn<'_>, cx: &Ctx, o: &NewObservation) -> Result<ObservationId> {
    on_db!(c, |c| {
        require_object("an observation's metrics", &o.metrics)?;
        sqlx::query_scalar(
            "INSERT INTO observations \
             (cycle_id, observed_at, metrics, heat, live_profile_digest, base_profile_digest) \
         VALUES ($1, $2, $3, $4, $5, $6) RETURNING id",
        )
        .bind(o.cycle_id)
        .bind(ts(&o.observed_at))
        .bind(canonical_json(&o.metrics))
        .bind(o.heat.as_ref().map(canonical_json))
        .bind(&o.live_profile_digest)
        .bind(&o.base_profile_digest)
        .fetch_one(c)
        .await
        .map_err(cx.err("record an observation"))
    })
}

async fn observation(c: Conn<'_>, cx: &Ctx, cycle_id: CycleId) -> Result<Option<Observation>> {
    on_db!(c, |c| {
        sqlx::query_as("SELECT * FROM observations WHERE cycle_id = $1")
            .bind(cycle_id)
            .fetch_optional(c)
            .await
            .map_err(cx.err("read an observation"))
    })
}

async fn recent_cycles(c: Conn<'_>, cx: &Ctx, limit: u32) -> Result<Vec<CycleSummary>> {
    on_db!(c, |c, d| {
        let op = "list recent cycles";
        let cycles: Vec<CycleRecord> = sqlx::query_as(SQL_RECENT_CYCLES)
            .bind(i64::from(limit))
            .bind(cx.stack())
            .fetch_all(&mut *c)
            .await
            .map_err(cx.err(op))?;
        let ids = serde_json::to_string(&cycles.iter().map(|c| c.id).collect::<Vec<_>>())
            .expect("a list of integers serialises");
        let deferrals = super::deferrals::of_cycles((&mut *c).into(), cx, &ids).await?;
        let rows = sqlx::query(d.pick(SQL_CYCLE_VERDICTS, PG_CYCLE_VERDICTS))
            .bind(ids)
            .fetch_all(&mut *c)
            .await
            .map_err(cx.err(op))?;
        let mut out: Vec<CycleSummary> = cycles
            .into_iter()
            .map(|cycle| CycleSummary {
                cycle,
                verdicts: Vec::new(),
                deferral: None,
            })
            .collect();
        for deferral in deferrals {
            if let Some(s) = out.iter_mut().find(|s| s.cycle.id == deferral.cycle_id) {
                s.deferral = Some(deferral);
            }
        }
        for row in rows {
            let verdict = Verdict::from_row(&row).map_err(cx.err(op))?;
            let entry: Option<String> = row.try_get("e_menu_id").map_err(cx.err(op))?;
            let manual = entry.as_deref() == Some(super::manual::MANUAL);
            let menu_id = match entry.filter(|_| !manual) {
                Some(m) => Some(m.parse::<MenuId>().map_err(|()| {
                    cx.err(op)(sqlx::Error::Decode(
                        format!("`{m}` is not a menu id").into(),
                    ))
                })?),
                None => None,
            };
            let parameters = opt_json_col(&row, "e_parameters").map_err(cx.err(op))?;
            let proposal_id: Option<ProposalId> =
                row.try_get("e_proposal_id").map_err(cx.err(op))?;
            let confirmation_of: Option<ExperimentId> =
                row.try_get("e_confirmation_of").map_err(cx.err(op))?;
            let realizes: Option<StageId> = row.try_get("e_realizes").map_err(cx.err(op))?;
            if let Some(s) = out.iter_mut().find(|s| s.cycle.id == verdict.cycle_id) {
                s.verdicts.push(CycleVerdict {
                    verdict,
                    menu_id,
                    manual,
                    parameters,
                    proposal_id,
                    confirmation_of,
                    realizes,
                });
            }
        }
        Ok(out)
    })
}

impl WriteTx {
    /// Starts a cycle as `running`.
    pub async fn open_cycle(
        &mut self,
        started_at: DateTime<Utc>,
        proposer: ProposerKind,
    ) -> Result<CycleId> {
        let (c, cx) = self.parts();
        open_cycle(c, cx, started_at, proposer).await
    }

    /// Ends a running cycle; refuses ([`LedgerError::CycleNotRunning`]) a
    /// cycle that already ended.
    pub async fn close_cycle(
        &mut self,
        id: CycleId,
        outcome: &CycleOutcome,
        ended_at: DateTime<Utc>,
    ) -> Result<()> {
        let (c, cx) = self.parts();
        close_cycle(c, cx, id, outcome, ended_at).await
    }

    /// Closes every `running` cycle as `aborted` with `reason` (at start, for
    /// cycles a crash left open), after giving each of their experiments
    /// without a verdict, and each such cycle without any, a `failed` one.
    /// Returns how many cycles there were.
    pub async fn abort_running_cycles(&mut self, reason: &str, at: DateTime<Utc>) -> Result<u64> {
        let (c, cx) = self.parts();
        abort_running(c, cx, reason, at).await
    }

    pub async fn insert_observation(&mut self, o: &NewObservation) -> Result<ObservationId> {
        let (c, cx) = self.parts();
        insert_observation(c, cx, o).await
    }

    pub async fn cycle(&mut self, id: CycleId) -> Result<CycleRecord> {
        let (c, cx) = self.parts();
        get_cycle(c, cx, id).await
    }
}

impl Ledger {
    /// [`WriteTx::open_cycle`] as its own transaction.
    pub async fn open_cycle(
        &self,
        started_at: DateTime<Utc>,
        proposer: ProposerKind,
    ) -> Result<CycleId> {
        let mut c = self.conn("open a cycle").await?;
        open_cycle(c.conn(), &self.ctx, started_at, proposer).await
    }

    /// [`WriteTx::close_cycle`] as its own transaction.
    pub async fn close_cycle(
        &self,
        id: CycleId,
        outcome: &CycleOutcome,
        ended_at: DateTime<Utc>,
    ) -> Result<()> {
        let mut tx = self.begin_write().await?;
        tx.close_cycle(id, outcome, ended_at).await?;
        tx.commit().await
    }

    /// [`WriteTx::abort_running_cycles`] as its own transaction.
    pub async fn abort_running_cycles(&self, reason: &str, at: DateTime<Utc>) -> Result<u64> {
        let mut tx = self.begin_write().await?;
        let n = tx.abort_running_cycles(reason, at).await?;
        tx.commit().await?;
        Ok(n)
    }

    /// [`WriteTx::insert_observation`] as its own transaction.
    pub async fn insert_observation(&self, o: &NewObservation) -> Result<ObservationId> {
        let mut c = self.conn("record an observation").await?;
        insert_observation(c.conn(), &self.ctx, o).await
    }

    pub async fn cycle(&self, id: CycleId) -> Result<CycleRecord> {
        let mut c = self.conn("read a cycle").await?;
        get_cycle(c.conn(), &self.ctx, id).await
    }

    /// The stacks that have a `running` cycle (for `ledger --check` on a
    /// shared ledger, which asks whether each one's daemon is alive).
    pub async fn running_stacks(&self) -> Result<Vec<String>> {
        let mut c = self.conn("list the stacks with a running cycle").await?;
        let cx = &self.ctx;
        on_db!(c.conn(), |c| {
            sqlx::query_scalar(
                "SELECT DISTINCT stack FROM cycles WHERE status = 'running' AND stack IS NOT NULL \
                 ORDER BY stack",
            )
            .fetch_all(c)
            .await
            .map_err(cx.err("list the stacks with a running cycle"))
        })
    }

    /// The observation of a cycle, if it got that far.
    pub async fn observation(&self, cycle_id: CycleId) -> Result<Option<Observation>> {
        let mut c = self.conn("read an observation").await?;
        observation(c.conn(), &self.ctx, cycle_id).await
    }

    /// The metrics snapshots of the last `limit` observations of this
    /// handle's stack, oldest first, with when: the live series a floor and
    /// a waiting loop watch for a drift.
    pub async fn recent_observed_metrics(&self, limit: u32) -> Result<Vec<(DateTime<Utc>, Value)>> {
        let op = "read the recent live metrics";
        let mut c = self.conn(op).await?;
        let rows: Vec<(DateTime<Utc>, String)> =
            on_db!(c.conn(), |c| sqlx::query_as(SQL_RECENT_LIVE_METRIC)
                .bind(i64::from(limit))
                .bind(self.ctx.stack())
                .fetch_all(c)
                .await
                .map_err(self.ctx.err(op)))?;
        let mut out = Vec::with_capacity(rows.len());
        for (at, text) in rows.into_iter().rev() {
            let v: Value = serde_json::from_str(&text)
                .map_err(|e| self.ctx.err(op)(sqlx::Error::Decode(Box::new(e))))?;
            out.push((at, v));
        }
        Ok(out)
    }

    /// The `limit` most recent cycles, newest first, each with its verdicts.
    pub async fn recent_cycles(&self, limit: u32) -> Result<Vec<CycleSummary>> {
        let mut c = self.conn("list recent cycles").await?;
        recent_cycles(c.conn(), &self.ctx, limit).await
    }
}
