//! Engine time: the recorded wall time of every engine run (spawn to reap
//! for bench runs, request to last byte for surface runs), with what it
//! bought ([`EngineUse`]). The daemon's budget sums a window of it
//! (`daemon::budget`); `check`, the cycle line, the metrics endpoint and
//! the report show it per day and use.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::FromRow;

use super::codec::ts;
use super::ids::CycleId;
use super::{Ledger, Result};
use crate::vocab::EngineUse;

/// One engine run's time and what it bought.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, FromRow)]
pub struct EngineRun {
    pub cycle_id: CycleId,
    pub started_at: DateTime<Utc>,
    /// Its wall time, seconds.
    #[sqlx(rename = "duration_s")]
    pub seconds: f64,
    pub engine_use: EngineUse,
}

/// What an experiment's runs bought: a `failed` verdict first (engine time
/// that bought nothing), then the A/A of a floor, a confirmation, else a
/// first A/B. An experiment still measuring has no verdict yet and counts
/// by its kind.
macro_rules! engine_use_sql {
    () => {
        "CASE WHEN v.kind = 'failed' THEN 'failed' \
              WHEN e.menu_id = 'remeasure' THEN 'floor' \
              WHEN e.confirmation_of IS NOT NULL THEN 'confirmation' \
              ELSE 'ab' END AS engine_use"
    };
}
pub(crate) use engine_use_sql;

/// The runs of this handle's stack started in `[$1, $2)`, by their start
/// (`runs_by_start`).
pub(crate) const SQL_ENGINE_RUNS: &str = concat!(
    "SELECT e.cycle_id, r.started_at, r.duration_s, ",
    engine_use_sql!(),
    " FROM runs r JOIN experiments e ON e.id = r.experiment_id \
      JOIN cycles c ON c.id = e.cycle_id \
      LEFT JOIN verdicts v ON v.experiment_id = e.id \
      WHERE r.started_at >= $1 AND r.started_at < $2 \
      AND (CAST($3 AS TEXT) IS NULL OR c.stack = $3) ORDER BY r.started_at"
);

impl Ledger {
    /// This handle's stack's engine runs started in `[since, until)`,
    /// oldest first (every stack's on an unscoped handle).
    pub async fn engine_runs(
        &self,
        since: DateTime<Utc>,
        until: DateTime<Utc>,
    ) -> Result<Vec<EngineRun>> {
        let op = "read the engine time";
        let mut c = self.conn(op).await?;
        on_db!(c.conn(), |c| sqlx::query_as(SQL_ENGINE_RUNS)
            .bind(ts(&since))
            .bind(ts(&until))
            .bind(self.ctx.stack())
            .fetch_all(c)
            .await
            .map_err(self.ctx.err(op)))
    }
}

/// Engine seconds by what they bought.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct EngineSeconds {
    pub floor: f64,
    pub ab: f64,
    pub confirmation: f64,
    pub failed: f64,
}

impl EngineSeconds {
    /// The sum of `runs`.
    pub fn of(runs: &[EngineRun]) -> EngineSeconds {
        let mut out = EngineSeconds::default();
        for r in runs {
            out.add(r.engine_use, r.seconds);
        }
        out
    }

    pub fn add(&mut self, u: EngineUse, seconds: f64) {
        *self.get_mut(u) += seconds;
    }

    pub fn get(&self, u: EngineUse) -> f64 {
        match u {
            EngineUse::Floor => self.floor,
            EngineUse::Ab => self.ab,
            EngineUse::Confirmation => self.confirmation,
            EngineUse::Failed => self.failed,
        }
    }

    fn get_mut(&mut self, u: EngineUse) -> &mut f64 {
        match u {
            EngineUse::Floor => &mut self.floor,
            EngineUse::Ab => &mut self.ab,
            EngineUse::Confirmation => &mut self.confirmation,
            EngineUse::Failed => &mut self.failed,
        }
    }

    /// Engine seconds per UTC day (runs by their start), oldest day first;
    /// days without a run are left out.
    pub fn per_day(runs: &[EngineRun]) -> Vec<(chrono::NaiveDate, EngineSeconds)> {
        let mut days: std::collections::BTreeMap<chrono::NaiveDate, EngineSeconds> =
            std::collections::BTreeMap::new();
        for r in runs {
            days.entry(r.started_at.date_naive())
                .or_default()
                .add(r.engine_use, r.seconds);
        }
        days.into_iter().collect()
    }

    pub fn total(&self) -> f64 {
        self.floor + self.ab + self.confirmation + self.failed
    }
}

impl std::fmt::Display for EngineSeconds {
    /// `812 s (floor 300, A/B 400, confirmation 100, failed 12)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:.0} s (floor {:.0}, A/B {:.0}, confirmation {:.0}, failed {:.0})",
            self.total(),
            self.floor,
            self.ab,
            self.confirmation,
            self.failed
        )
    }
}
