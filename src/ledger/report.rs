//! Read-only queries for `orchestrator report`: everything one stack
//! recorded in a time range `[start, end)`, each query walking a time index
//! (cycles by stack and start, experiments by creation, noise floors by
//! stack and time, stages by creation) so a weekly report over a year-old
//! ledger of a fleet reads one week of one stack (experiments: of the fleet).
//!
//! Rows come back in index order and are aggregated by the caller: a
//! `GROUP BY` here would sort through a temporary b-tree for no gain.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::{FromRow, Row};

use super::Conn;
use super::codec::{int_col, ts};
use super::cycles::CycleRecord;
use super::error::Ctx;
use super::ids::{CycleId, ExperimentId, VerdictId};
use super::noise::NoiseFloor;
use super::runs::TokenParts;
use super::stages::Stage;
use super::{Interval, Ledger, Result};
use crate::menu::MenuId;
use crate::vocab::{Arm, Digest, Method, ProposerKind, VerdictKind};

/// A verdict of a cycle started in the range, with what it was about and who
/// proposed it (its experiment's proposal's proposer; `None` when no
/// proposer chose it).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReportVerdict {
    pub id: VerdictId,
    pub cycle_id: CycleId,
    pub experiment_id: Option<ExperimentId>,
    pub kind: VerdictKind,
    pub decided_at: DateTime<Utc>,
    pub effect: Option<f64>,
    pub interval: Option<Interval>,
    pub noise_floor: Option<f64>,
    /// `noise_floor` is the bound `max_noise_floor`, not a measured floor.
    pub floor_is_bound: bool,
    pub pairs: u32,
    pub reason: Option<String>,
    pub menu_id: Option<MenuId>,
    pub base_digest: Option<Digest>,
    pub confirmation_of: Option<ExperimentId>,
    pub proposer: Option<ProposerKind>,
}

from_row!(ReportVerdict, |row| {
    let low: Option<f64> = row.try_get("interval_low")?;
    let high: Option<f64> = row.try_get("interval_high")?;
    Ok(ReportVerdict {
        id: row.try_get("id")?,
        cycle_id: row.try_get("cycle_id")?,
        experiment_id: row.try_get("experiment_id")?,
        kind: row.try_get("kind")?,
        decided_at: row.try_get("decided_at")?,
        effect: row.try_get("effect")?,
        interval: low.zip(high).map(|(low, high)| Interval { low, high }),
        noise_floor: row.try_get("noise_floor")?,
        floor_is_bound: row.try_get("floor_is_bound")?,
        pairs: int_col(row, "pairs")?,
        reason: row.try_get("reason")?,
        menu_id: row.try_get("menu_id")?,
        base_digest: row.try_get("base_digest")?,
        confirmation_of: row.try_get("confirmation_of")?,
        proposer: row.try_get("proposer")?,
    })
});

/// One proposer attempt, without its prompt or answer text (which can be
/// long, and are not the report's business).
#[derive(Debug, Clone, PartialEq, Serialize, FromRow)]
pub struct ReportProposal {
    pub cycle_id: CycleId,
    pub proposer: ProposerKind,
    #[sqlx(try_from = "i64")]
    pub attempt: u32,
    pub parsed: bool,
    pub rejection_kind: Option<String>,
}

/// One measured (or refused) A/B run of an experiment created in the range.
#[derive(Debug, Clone, PartialEq, Serialize, FromRow)]
pub struct ReportRun {
    pub experiment_id: ExperimentId,
    pub created_at: DateTime<Utc>,
    pub menu_id: MenuId,
    pub base_digest: Digest,
    /// The live profile its cycle observed (none for a cycle without an
    /// observation): not `base_digest` when the cycle built on a win that
    /// waited for approval (`cycle/base.rs`).
    pub live_digest: Option<Digest>,
    pub arm: Arm,
    pub seconds_per_token: Option<f64>,
    pub refused: bool,
    /// The measured parts of a token, where the stack reported them.
    #[sqlx(flatten)]
    pub parts: TokenParts,
}

/// One valid A/B run of the experiment behind a lever's best measured
/// effect: its pair, its speed and its measured parts.
#[derive(Debug, Clone, PartialEq, Serialize, FromRow)]
pub struct LeverRun {
    pub arm: Arm,
    #[sqlx(try_from = "i64")]
    pub pair_index: u32,
    pub seconds_per_token: f64,
    #[sqlx(flatten)]
    pub parts: TokenParts,
}

/// A stage that was open at some point of the range: the stored stage
/// (mapped once, by [`Stage`]'s row mapping), with the entry it stages and
/// how its confirmation was judged, read through `Deref`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReportStage {
    pub stage: Stage,
    pub menu_id: MenuId,
    /// The confirmation was judged against the bound, not a measured floor.
    pub floor_is_bound: bool,
    /// For a composite: the staged wins it applies, best first; else empty.
    pub parts: Vec<super::StagePart>,
}

impl std::ops::Deref for ReportStage {
    type Target = Stage;
    fn deref(&self) -> &Stage {
        &self.stage
    }
}

from_row!(ReportStage, |row| {
    Ok(ReportStage {
        stage: Stage::from_row(row)?,
        menu_id: row.try_get("menu_id")?,
        floor_is_bound: row.try_get("floor_is_bound")?,
        parts: Vec::new(),
    })
});

/// Which stack's rows a report query reads. Each period query below comes
/// in two texts: one for the rows of the named stack (`$3`), walking the
/// stack's time index, and one for the rows that carry no stack (written
/// before stacks were recorded, migration 20261201210001), read only when
/// [`ReportStack::with_unowned`] says they are this stack's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ReportStack {
    /// `[stack] name`, as the cycles record it.
    pub name: String,
    /// Also read the rows with no stack: a ledger from before fleets held
    /// one stack's history, the config's own (the daemon adopts them at
    /// start; until one has, the report does the same).
    pub with_unowned: bool,
}

impl ReportStack {
    /// The stack keys to read, `None` for the rows with no stack.
    fn keys(&self) -> impl Iterator<Item = Option<&str>> {
        std::iter::once(Some(self.name.as_str())).chain(self.with_unowned.then_some(None))
    }
}

// The report is the loop's: the cycles of a manual comparison
// (`orchestrator compare`, proposer `human`) are left out of it, and
// `orchestrator ledger` lists them.

/// Both texts of a per-stack period query: `$col` is the stack column the
/// condition is on, between the query's `$before` and `$after` parts.
macro_rules! per_stack {
    ($named:ident, $unowned:ident, $col:literal, $before:expr, $after:literal) => {
        pub(crate) const $named: &str = concat!($before, $col, " = $3 AND ", $after);
        pub(crate) const $unowned: &str = concat!($before, $col, " IS NULL AND ", $after);
    };
}

per_stack!(
    SQL_REPORT_CYCLES,
    SQL_REPORT_UNOWNED_CYCLES,
    "stack",
    concat!("SELECT ", cycle_columns!(), " FROM cycles WHERE "),
    "started_at >= $1 AND started_at < $2 AND proposer <> 'human' ORDER BY started_at"
);

per_stack!(
    SQL_REPORT_VERDICTS,
    SQL_REPORT_UNOWNED_VERDICTS,
    "c.stack",
    "SELECT v.id, v.cycle_id, v.experiment_id, v.kind, v.decided_at, v.effect, \
            v.interval_low, v.interval_high, v.noise_floor, v.floor_is_bound, v.pairs, v.reason, \
            e.menu_id, e.base_digest, e.confirmation_of, p.proposer \
     FROM cycles c \
     JOIN verdicts v ON v.cycle_id = c.id \
     LEFT JOIN experiments e ON e.id = v.experiment_id \
     LEFT JOIN proposals p ON p.id = e.proposal_id \
     WHERE ",
    "c.started_at >= $1 AND c.started_at < $2 AND c.proposer <> 'human' ORDER BY c.started_at"
);

per_stack!(
    SQL_REPORT_PROPOSALS,
    SQL_REPORT_UNOWNED_PROPOSALS,
    "c.stack",
    "SELECT p.cycle_id, p.proposer, p.attempt, p.parsed IS NOT NULL AS parsed, \
            p.rejection_kind \
     FROM cycles c JOIN proposals p ON p.cycle_id = c.id \
     WHERE ",
    "c.started_at >= $1 AND c.started_at < $2 ORDER BY c.started_at"
);

// Experiments carry no stack: they are walked by time and their cycle (by
// primary key) says whose they are. CROSS JOIN keeps SQLite to that order
// (PostgreSQL reads it as a plain join), so the rows still come in
// experiment time order without a sort. The cycle's observation (by its
// unique cycle id) is looked up once per experiment, before its runs.
per_stack!(
    SQL_REPORT_RUNS,
    SQL_REPORT_UNOWNED_RUNS,
    "c.stack",
    "SELECT e.id AS experiment_id, e.created_at, e.menu_id, e.base_digest, \
            o.live_profile_digest AS live_digest, r.arm, \
            r.seconds_per_token, r.refused, r.trunk_seconds_per_token, \
            r.expert_seconds_per_token, r.far_hit_share, r.draft_acceptance \
     FROM experiments e CROSS JOIN cycles c \
     LEFT JOIN observations o ON o.cycle_id = c.id CROSS JOIN runs r \
     WHERE c.id = e.cycle_id AND r.experiment_id = e.id AND ",
    "e.created_at >= $1 AND e.created_at < $2 AND r.arm <> 'warmup' AND c.proposer <> 'human' \
     ORDER BY e.created_at"
);

/// One floor key's rows; [`Ledger::report_noise_floors`] asks it for each
/// key a stack's floors are stored under, so the index keeps them sorted.
pub(crate) const SQL_REPORT_NOISE_FLOORS: &str = "SELECT * FROM noise_floors \
     WHERE stack = $1 AND measured_at >= $2 AND measured_at < $3 ORDER BY measured_at";

per_stack!(
    SQL_REPORT_STAGES,
    SQL_REPORT_UNOWNED_STAGES,
    "s.stack",
    "SELECT s.*, e.menu_id, \
            coalesce((SELECT v.floor_is_bound FROM verdicts v WHERE v.experiment_id = s.confirmation_id), FALSE) \
            AS floor_is_bound \
     FROM stages s JOIN experiments e ON e.id = s.experiment_id \
     WHERE ",
    "s.created_at < $2 AND (s.decided_at IS NULL OR s.decided_at >= $1) \
     ORDER BY s.created_at"
);

/// The stacks that ran cycles, by name (rows with no stack are not one).
pub(crate) const SQL_REPORT_STACKS: &str =
    "SELECT DISTINCT stack FROM cycles WHERE stack IS NOT NULL ORDER BY stack";

/// A stack's latest cycle: where an empty period's cycles are, and the
/// class the stack last ran as.
pub(crate) const SQL_REPORT_LATEST_CYCLE: &str = concat!(
    "SELECT ",
    cycle_columns!(),
    " FROM cycles WHERE stack = $1 ORDER BY started_at DESC LIMIT 1"
);

pub(crate) const SQL_REPORT_LATEST_UNOWNED_CYCLE: &str = concat!(
    "SELECT ",
    cycle_columns!(),
    " FROM cycles WHERE stack IS NULL ORDER BY started_at DESC LIMIT 1"
);

/// Valid A/B runs of one experiment, in run order: warmups, failed and
/// refused runs never carry a figure the projection may multiply.
// Engine time per day and use: runs walked by their start
// (`runs_by_start`), their experiment and cycle by primary key.
macro_rules! report_engine_runs {
    ($stack:literal) => {
        concat!(
            "SELECT e.cycle_id, r.started_at, r.duration_s, ",
            super::engine_time::engine_use_sql!(),
            " FROM runs r CROSS JOIN experiments e CROSS JOIN cycles c \
              LEFT JOIN verdicts v ON v.experiment_id = e.id \
              WHERE e.id = r.experiment_id AND c.id = e.cycle_id AND ",
            $stack,
            " AND r.started_at >= $1 AND r.started_at < $2 ORDER BY r.started_at"
        )
    };
}
pub(crate) const SQL_REPORT_ENGINE_RUNS: &str = report_engine_runs!("c.stack = $3");
pub(crate) const SQL_REPORT_UNOWNED_ENGINE_RUNS: &str = report_engine_runs!("c.stack IS NULL");

pub(crate) const SQL_REPORT_LEVER_RUNS: &str = "SELECT arm, pair_index, seconds_per_token, \
            trunk_seconds_per_token, expert_seconds_per_token, far_hit_share, draft_acceptance \
     FROM runs \
     WHERE experiment_id = $1 AND arm <> 'warmup' AND NOT refused \
       AND seconds_per_token IS NOT NULL \
     ORDER BY order_index";

/// A row type both backends decode.
trait BothRows:
    for<'r> FromRow<'r, sqlx::sqlite::SqliteRow>
    + for<'r> FromRow<'r, sqlx::postgres::PgRow>
    + Send
    + Unpin
{
}

impl<T> BothRows for T where
    T: for<'r> FromRow<'r, sqlx::sqlite::SqliteRow>
        + for<'r> FromRow<'r, sqlx::postgres::PgRow>
        + Send
        + Unpin
{
}

/// One period query for `stack`: its named rows, then (when they are its)
/// the rows with no stack. Two parts are merged back into the queries'
/// order by `key`; one part is already in it.
#[expect(
    clippy::too_many_arguments,
    reason = "one query's two texts, its range and its order: bundling them would only rename them"
)]
async fn per_stack<T: BothRows, K: Ord>(
    mut c: Conn<'_>,
    cx: &Ctx,
    op: &'static str,
    (named, unowned): (&'static str, &'static str),
    stack: &ReportStack,
    start: &DateTime<Utc>,
    end: &DateTime<Utc>,
    key: impl Fn(&T) -> K,
) -> Result<Vec<T>> {
    let mut out: Vec<T> = Vec::new();
    let mut parts = 0;
    for name in stack.keys() {
        let sql = if name.is_some() { named } else { unowned };
        let rows: Vec<T> = on_db!(c.re(), |c| {
            let q = sqlx::query_as(sql).bind(ts(start)).bind(ts(end));
            let q = match name {
                Some(n) => q.bind(n),
                None => q,
            };
            q.fetch_all(c).await.map_err(cx.err(op))
        })?;
        parts += usize::from(!rows.is_empty());
        out.extend(rows);
    }
    if parts > 1 {
        out.sort_by_key(|r| key(r));
    }
    Ok(out)
}

impl Ledger {
    /// `stack`'s cycles started in `[start, end)`, oldest first.
    pub async fn report_cycles(
        &self,
        stack: &ReportStack,
        start: DateTime<Utc>,
        end: DateTime<Utc>,
    ) -> Result<Vec<CycleRecord>> {
        let op = "read the report's cycles";
        let mut c = self.conn(op).await?;
        let sql = (SQL_REPORT_CYCLES, SQL_REPORT_UNOWNED_CYCLES);
        per_stack(
            c.conn(),
            &self.ctx,
            op,
            sql,
            stack,
            &start,
            &end,
            |r: &CycleRecord| (r.started_at, r.id),
        )
        .await
    }

    /// Verdicts of `stack`'s cycles started in `[start, end)`.
    pub async fn report_verdicts(
        &self,
        stack: &ReportStack,
        start: DateTime<Utc>,
        end: DateTime<Utc>,
    ) -> Result<Vec<ReportVerdict>> {
        let op = "read the report's verdicts";
        let mut c = self.conn(op).await?;
        let sql = (SQL_REPORT_VERDICTS, SQL_REPORT_UNOWNED_VERDICTS);
        // Cycle ids grow with their start, the queries' order.
        per_stack(
            c.conn(),
            &self.ctx,
            op,
            sql,
            stack,
            &start,
            &end,
            |v: &ReportVerdict| (v.cycle_id, v.id),
        )
        .await
    }

    /// Proposer attempts of `stack`'s cycles started in `[start, end)`.
    pub async fn report_proposals(
        &self,
        stack: &ReportStack,
        start: DateTime<Utc>,
        end: DateTime<Utc>,
    ) -> Result<Vec<ReportProposal>> {
        let op = "read the report's proposals";
        let mut c = self.conn(op).await?;
        let sql = (SQL_REPORT_PROPOSALS, SQL_REPORT_UNOWNED_PROPOSALS);
        per_stack(
            c.conn(),
            &self.ctx,
            op,
            sql,
            stack,
            &start,
            &end,
            |p: &ReportProposal| (p.cycle_id, p.attempt),
        )
        .await
    }

    /// Baseline and candidate runs (no warmups) of `stack`'s experiments
    /// created in `[start, end)`, oldest experiment first.
    pub async fn report_runs(
        &self,
        stack: &ReportStack,
        start: DateTime<Utc>,
        end: DateTime<Utc>,
    ) -> Result<Vec<ReportRun>> {
        let op = "read the report's runs";
        let mut c = self.conn(op).await?;
        let sql = (SQL_REPORT_RUNS, SQL_REPORT_UNOWNED_RUNS);
        per_stack(
            c.conn(),
            &self.ctx,
            op,
            sql,
            stack,
            &start,
            &end,
            |r: &ReportRun| (r.created_at, r.experiment_id),
        )
        .await
    }

    /// `stack`'s engine runs started in `[start, end)`, oldest first, with
    /// what each bought.
    pub async fn report_engine_runs(
        &self,
        stack: &ReportStack,
        start: DateTime<Utc>,
        end: DateTime<Utc>,
    ) -> Result<Vec<super::EngineRun>> {
        let op = "read the report's engine time";
        let mut c = self.conn(op).await?;
        let sql = (SQL_REPORT_ENGINE_RUNS, SQL_REPORT_UNOWNED_ENGINE_RUNS);
        per_stack(
            c.conn(),
            &self.ctx,
            op,
            sql,
            stack,
            &start,
            &end,
            |r: &super::EngineRun| r.started_at,
        )
        .await
    }

    /// The stacks that ran cycles in this ledger, by name; cycles with no
    /// stack (from before stacks were recorded) are no stack of their own.
    pub async fn report_stacks(&self) -> Result<Vec<String>> {
        let op = "list the ledger's stacks";
        let mut c = self.conn(op).await?;
        on_db!(c.conn(), |c| sqlx::query_scalar(SQL_REPORT_STACKS)
            .fetch_all(c)
            .await
            .map_err(self.ctx.err(op)))
    }

    /// `stack`'s latest cycle, at any time (with its rows with no stack,
    /// when they are its).
    pub async fn report_latest_cycle(&self, stack: &ReportStack) -> Result<Option<CycleRecord>> {
        let op = "read a stack's latest cycle";
        let mut c = self.conn(op).await?;
        let mut latest: Option<CycleRecord> = None;
        for name in stack.keys() {
            let row: Option<CycleRecord> = on_db!(c.conn(), |c| {
                let q = match name {
                    Some(n) => sqlx::query_as(SQL_REPORT_LATEST_CYCLE).bind(n),
                    None => sqlx::query_as(SQL_REPORT_LATEST_UNOWNED_CYCLE),
                };
                q.fetch_optional(c).await.map_err(self.ctx.err(op))
            })?;
            if let Some(r) = row
                && latest
                    .as_ref()
                    .is_none_or(|l| (r.started_at, r.id) > (l.started_at, l.id))
            {
                latest = Some(r);
            }
        }
        Ok(latest)
    }

    /// Noise floors of `stack` measured in `[start, end)`, oldest first.
    pub async fn report_noise_floors(
        &self,
        stack: &str,
        start: DateTime<Utc>,
        end: DateTime<Utc>,
    ) -> Result<Vec<NoiseFloor>> {
        let op = "read the report's noise floors";
        let mut c = self.conn(op).await?;
        // Floors are stored per protocol, `STACK/PROTOCOL` (the daemon's
        // key); a bare `STACK` is what older ledgers hold.
        let keys = std::iter::once(stack.to_string())
            .chain(Method::ALL.iter().map(|m| format!("{stack}/{m}")));
        let mut floors: Vec<NoiseFloor> = Vec::new();
        for key in keys {
            let rows: Vec<NoiseFloor> =
                on_db!(c.conn(), |c| sqlx::query_as(SQL_REPORT_NOISE_FLOORS)
                    .bind(&key)
                    .bind(ts(&start))
                    .bind(ts(&end))
                    .fetch_all(c)
                    .await
                    .map_err(self.ctx.err(op))?);
            floors.extend(rows);
        }
        floors.sort_by_key(|f| (f.measured_at, f.id));
        Ok(floors)
    }

    /// `stack`'s stages open at some point of `[start, end)`: created
    /// before its end and not decided before its start.
    pub async fn report_stages(
        &self,
        stack: &ReportStack,
        start: DateTime<Utc>,
        end: DateTime<Utc>,
    ) -> Result<Vec<ReportStage>> {
        let op = "read the report's stages";
        let mut c = self.conn(op).await?;
        let sql = (SQL_REPORT_STAGES, SQL_REPORT_UNOWNED_STAGES);
        let mut stages = per_stack(
            c.conn(),
            &self.ctx,
            op,
            sql,
            stack,
            &start,
            &end,
            |s: &ReportStage| (s.created_at, s.id),
        )
        .await?;
        for s in &mut stages {
            s.parts =
                super::compositions::parts_of_experiment(c.conn(), &self.ctx, s.experiment_id)
                    .await?;
        }
        Ok(stages)
    }

    /// The valid A/B runs of experiment `id` (the evidence behind a
    /// lever's best measured effect), in run order.
    pub async fn report_lever_runs(&self, id: ExperimentId) -> Result<Vec<LeverRun>> {
        let op = "read a lever's runs";
        let mut c = self.conn(op).await?;
        on_db!(c.conn(), |c| sqlx::query_as(SQL_REPORT_LEVER_RUNS)
            .bind(id)
            .fetch_all(c)
            .await
            .map_err(self.ctx.err(op)))
    }
}
