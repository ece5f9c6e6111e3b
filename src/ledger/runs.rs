//! Engine runs: every run of every arm, kept as evidence, including the
//! refused and failed ones.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sqlx::{FromRow, Row};

use super::Conn;
use super::codec::{int_col, opt_int_col, ts};
use super::error::Ctx;
use super::ids::{ExperimentId, RunId};
use super::{Ledger, Result, WriteTx};
use crate::vocab::{Arm, Digest};

/// Where a run's seconds per token came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TimingSource {
    /// The bench command's own JSON.
    Engine,
    /// The server's `timings` in its answer.
    Server,
    /// Measured client-side from streamed token arrival.
    Client,
}

impl TimingSource {
    /// The stored spelling (the migration's CHECK lists the same).
    pub fn as_str(self) -> &'static str {
        match self {
            TimingSource::Engine => "engine",
            TimingSource::Server => "server",
            TimingSource::Client => "client",
        }
    }
}

impl std::str::FromStr for TimingSource {
    type Err = crate::vocab::UnknownValue;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "engine" => Ok(TimingSource::Engine),
            "server" => Ok(TimingSource::Server),
            "client" => Ok(TimingSource::Client),
            _ => Err(crate::vocab::UnknownValue {
                what: "timing source",
                value: s.to_string(),
                expected: "engine, server, client".to_string(),
            }),
        }
    }
}

/// The measured parts of a token a stack may report beside its speed; each
/// `None` when the stack does not report it (and on every run that is not a
/// valid measurement). Bench JSON fields of the same names.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, FromRow)]
pub struct TokenParts {
    /// Seconds of a token in the dense trunk (compute and re-reads).
    pub trunk_seconds_per_token: Option<f64>,
    /// Seconds of a token fetching and computing routed experts.
    pub expert_seconds_per_token: Option<f64>,
    /// Share (0..1) of expert lookups the far tier served.
    pub far_hit_share: Option<f64>,
    /// Share (0..1) of speculative draft tokens the full model accepted.
    pub draft_acceptance: Option<f64>,
}

impl TokenParts {
    /// Whether the stack reported any part.
    pub fn any(&self) -> bool {
        *self != TokenParts::default()
    }
}

/// What else the machine was doing during a run (`measure::pressure`): each
/// resource's stall share of the run's wall time (0..1), the mean runnable
/// tasks per core (at least 1, what the judge weighs) and the 1-minute
/// load average; `None` where the kernel does not report it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, FromRow)]
pub struct RunPressure {
    pub load1: Option<f64>,
    pub cpu_pressure: Option<f64>,
    pub memory_pressure: Option<f64>,
    pub io_pressure: Option<f64>,
    pub contention: Option<f64>,
    /// The most requests of the live server's users (the daemon's own
    /// excluded) read during the run (`measure::stand_aside`).
    pub live_requests: Option<f64>,
}

/// One run about to be recorded.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NewRun {
    pub experiment_id: ExperimentId,
    pub arm: Arm,
    /// Position in the experiment's whole run sequence (warmups included).
    pub order_index: u32,
    /// The A/B pair it belongs to; `None` exactly for warmups.
    pub pair_index: Option<u32>,
    pub started_at: DateTime<Utc>,
    /// `None` when the run failed or was refused (never a metric then).
    pub seconds_per_token: Option<f64>,
    pub timing_source: Option<TimingSource>,
    pub tokens: Option<u64>,
    pub output_hash: Option<String>,
    pub exit_code: Option<i32>,
    pub duration_s: f64,
    pub stderr_tail: String,
    /// Kept as evidence but not used (e.g. its output hash differed).
    pub refused: bool,
    /// Why the run is invalid, when it is.
    pub error: Option<String>,
    /// Measured parts of a token; all `None` unless the run is valid.
    pub parts: TokenParts,
    /// The machine's pressure during the run.
    pub pressure: RunPressure,
}

// Hand-written for `tokens`, stored as a signed integer.
from_row!(NewRun, |row| {
    let tokens: Option<i64> = row.try_get("tokens")?;
    Ok(NewRun {
        experiment_id: row.try_get("experiment_id")?,
        arm: row.try_get("arm")?,
        order_index: int_col(row, "order_index")?,
        pair_index: opt_int_col(row, "pair_index")?,
        started_at: row.try_get("started_at")?,
        seconds_per_token: row.try_get("seconds_per_token")?,
        timing_source: row.try_get("timing_source")?,
        // The schema's CHECK keeps it non-negative.
        tokens: tokens.map(i64::unsigned_abs),
        output_hash: row.try_get("output_hash")?,
        exit_code: row.try_get("exit_code")?,
        duration_s: row.try_get("duration_s")?,
        stderr_tail: row.try_get("stderr_tail")?,
        refused: row.try_get("refused")?,
        error: row.try_get("error")?,
        parts: TokenParts::from_row(row)?,
        pressure: RunPressure::from_row(row)?,
    })
});

/// A stored run: its id, the run as recorded, and what the judge later
/// made of it.
#[derive(Debug, Clone, PartialEq, Serialize, FromRow)]
pub struct Run {
    pub id: RunId,
    #[sqlx(flatten)]
    #[serde(flatten)]
    pub recorded: NewRun,
    /// Its block was discarded by the judge (pressure or discordance).
    pub discarded: bool,
}

reads_as_recorded!(Run => NewRun);

/// The newest runs' pressure and contention, of the handle's stack (`$2`).
const SQL_RECENT_CPU_PRESSURE: &str = "SELECT r.cpu_pressure FROM runs r \
     JOIN experiments e ON e.id = r.experiment_id JOIN cycles c ON c.id = e.cycle_id \
     WHERE r.cpu_pressure IS NOT NULL AND (CAST($2 AS TEXT) IS NULL OR c.stack = $2) \
     ORDER BY r.id DESC LIMIT $1";

const SQL_RECENT_CONTENTION: &str = "SELECT r.contention FROM runs r \
     JOIN experiments e ON e.id = r.experiment_id JOIN cycles c ON c.id = e.cycle_id \
     WHERE r.contention IS NOT NULL AND (CAST($2 AS TEXT) IS NULL OR c.stack = $2) \
     ORDER BY r.id DESC LIMIT $1";

pub(crate) const SQL_EXPERIMENT_RUNS: &str =
    "SELECT * FROM runs WHERE experiment_id = $1 ORDER BY order_index";

async fn insert(c: Conn<'_>, cx: &Ctx, r: &NewRun) -> Result<RunId> {
    on_db!(c, |c| {
        // Beyond i64::MAX tokens is not a run; saturate rather than wrap.
        let tokens = r.tokens.map(|t| i64::try_from(t).unwrap_or(i64::MAX));
        sqlx::query_scalar(
            "INSERT INTO runs (experiment_id, arm, order_index, pair_index, started_at, \
         seconds_per_token, timing_source, tokens, output_hash, exit_code, duration_s, \
         stderr_tail, refused, error, trunk_seconds_per_token, expert_seconds_per_token, \
         far_hit_share, draft_acceptance, load1, cpu_pressure, memory_pressure, io_pressure, \
         contention, live_requests) \
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, \
         $19, $20, $21, $22, $23, $24) \
         RETURNING id",
        )
        .bind(r.experiment_id)
        .bind(r.arm)
        .bind(i64::from(r.order_index))
        .bind(r.pair_index.map(i64::from))
        .bind(ts(&r.started_at))
        .bind(r.seconds_per_token)
        .bind(r.timing_source)
        .bind(tokens)
        .bind(r.output_hash.as_deref())
        .bind(r.exit_code)
        .bind(r.duration_s)
        .bind(&r.stderr_tail)
        .bind(r.refused)
        .bind(r.error.as_deref())
        .bind(r.parts.trunk_seconds_per_token)
        .bind(r.parts.expert_seconds_per_token)
        .bind(r.parts.far_hit_share)
        .bind(r.parts.draft_acceptance)
        .bind(r.pressure.load1)
        .bind(r.pressure.cpu_pressure)
        .bind(r.pressure.memory_pressure)
        .bind(r.pressure.io_pressure)
        .bind(r.pressure.contention)
        .bind(r.pressure.live_requests)
        .fetch_one(c)
        .await
        .map_err(cx.err("record a run"))
    })
}

pub(crate) async fn of_experiment(c: Conn<'_>, cx: &Ctx, id: ExperimentId) -> Result<Vec<Run>> {
    on_db!(c, |c| {
        sqlx::query_as(SQL_EXPERIMENT_RUNS)
            .bind(id)
            .fetch_all(c)
            .await
            .map_err(cx.err("read an experiment's runs"))
    })
}

impl WriteTx {
    pub async fn insert_run(&mut self, r: &NewRun) -> Result<RunId> {
        let (c, cx) = self.parts();
        insert(c, cx, r).await
    }
}

impl Ledger {
    /// [`WriteTx::insert_run`] as its own transaction.
    pub async fn insert_run(&self, r: &NewRun) -> Result<RunId> {
        let mut c = self.conn("record a run").await?;
        insert(c.conn(), &self.ctx, r).await
    }

    /// Marks runs whose block the judge discarded (kept as evidence).
    pub async fn mark_discarded(&self, ids: &[RunId]) -> Result<()> {
        let mut c = self.conn("mark discarded runs").await?;
        for id in ids {
            on_db!(c.conn(), |c| sqlx::query(
                "UPDATE runs SET discarded = TRUE WHERE id = $1"
            )
            .bind(*id)
            .execute(c)
            .await
            .map(|_| ())
            .map_err(self.ctx.err("mark discarded runs"))?);
        }
        Ok(())
    }

    /// The CPU pressure shares of the last `limit` runs that recorded one,
    /// newest first: the machine as the stack's own runs last felt it (a
    /// scoped handle's own stack's runs: another host's load is not this one's).
    pub async fn recent_cpu_pressure(&self, limit: u32) -> Result<Vec<f64>> {
        self.recent_of_runs(
            SQL_RECENT_CPU_PRESSURE,
            "read the recent runs' pressure",
            limit,
        )
        .await
    }

    /// The contention (runnable tasks per core) of the last `limit` runs
    /// that recorded one, newest first: how busy the machine is now, on the
    /// scale the judge compares with a floor's.
    pub async fn recent_contention(&self, limit: u32) -> Result<Vec<f64>> {
        self.recent_of_runs(
            SQL_RECENT_CONTENTION,
            "read the recent runs' contention",
            limit,
        )
        .await
    }

    async fn recent_of_runs(
        &self,
        sql: &'static str,
        op: &'static str,
        limit: u32,
    ) -> Result<Vec<f64>> {
        let mut c = self.conn(op).await?;
        on_db!(c.conn(), |c| sqlx::query_scalar(sql)
            .bind(i64::from(limit))
            .bind(self.ctx.stack())
            .fetch_all(c)
            .await
            .map_err(self.ctx.err(op)))
    }

    /// Wall times (seconds) of the last `limit` valid runs of the profile
    /// `digest`, in either arm of any experiment: what a run of it takes.
    /// Discarded blocks count (their runs were slow for a reason the next
    /// run may share); warmups, which belong to no arm, do not.
    pub async fn recent_run_durations(&self, digest: &Digest, limit: u32) -> Result<Vec<f64>> {
        let op = "read a profile's recent run times";
        let mut c = self.conn(op).await?;
        on_db!(c.conn(), |c| sqlx::query_scalar(
            "SELECT r.duration_s FROM runs r JOIN experiments e ON e.id = r.experiment_id \
             JOIN cycles c ON c.id = e.cycle_id \
             WHERE r.seconds_per_token IS NOT NULL \
               AND ((r.arm = 'baseline' AND e.base_digest = $1) \
                 OR (r.arm = 'candidate' AND e.candidate_digest = $1)) \
               AND (CAST($3 AS TEXT) IS NULL OR c.stack = $3) \
             ORDER BY r.id DESC LIMIT $2",
        )
        .bind(digest)
        .bind(i64::from(limit))
        .bind(self.ctx.stack())
        .fetch_all(c)
        .await
        .map_err(self.ctx.err(op)))
    }

    /// Every run of an experiment, in run order.
    pub async fn runs(&self, experiment_id: ExperimentId) -> Result<Vec<Run>> {
        let mut c = self.conn("read an experiment's runs").await?;
        of_experiment(c.conn(), &self.ctx, experiment_id).await
    }
}
