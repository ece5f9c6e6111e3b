//! Verdicts: exactly one per experiment, plus one for a cycle that ended
//! before it had an experiment (a refused proposal, an unreachable model).

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::{FromRow, Row};

use super::Conn;
use super::codec::{int_col, ts};
use super::error::{Ctx, is_unique_violation};
use super::ids::{CycleId, ExperimentId, VerdictId};
use super::{Interval, Ledger, LedgerError, Result, WriteTx};
use crate::vocab::VerdictKind;

/// A verdict about to be recorded. The schema insists that a measured
/// verdict (`win`, `loss`, `within_noise`, `inconclusive`) carries `effect`,
/// `interval`, `noise_floor`, `method` and `pairs > 0`; that `hash_mismatch`
/// carries no effect; and that refusals carry a `reason`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NewVerdict {
    pub kind: VerdictKind,
    pub decided_at: DateTime<Utc>,
    /// Log ratio candidate/baseline of seconds per token; negative is faster.
    pub effect: Option<f64>,
    pub interval: Option<Interval>,
    /// The noise floor the decision used (after the configured clamp).
    pub noise_floor: Option<f64>,
    /// `noise_floor` is the bound `max_noise_floor`, not a measured floor:
    /// the verdict held against every smaller one, so none was measured.
    pub floor_is_bound: bool,
    pub pairs: u32,
    /// The statistical method, cited (e.g. the confidence sequence used).
    pub method: Option<String>,
    /// Why it was refused or failed.
    pub reason: Option<String>,
}

impl NewVerdict {
    /// A verdict that measured nothing (`rejected`, `failed`, or a
    /// `hash_mismatch`): no effect, no interval, no pairs, only why.
    pub fn refusal(kind: VerdictKind, reason: &str, at: DateTime<Utc>) -> NewVerdict {
        NewVerdict {
            kind,
            decided_at: at,
            effect: None,
            interval: None,
            noise_floor: None,
            floor_is_bound: false,
            pairs: 0,
            method: None,
            reason: Some(reason.to_string()),
        }
    }
}

// Hand-written for the interval, two columns in one.
from_row!(NewVerdict, |row| {
    let low: Option<f64> = row.try_get("interval_low")?;
    let high: Option<f64> = row.try_get("interval_high")?;
    Ok(NewVerdict {
        kind: row.try_get("kind")?,
        decided_at: row.try_get("decided_at")?,
        effect: row.try_get("effect")?,
        interval: low.zip(high).map(|(low, high)| Interval { low, high }),
        noise_floor: row.try_get("noise_floor")?,
        floor_is_bound: row.try_get("floor_is_bound")?,
        pairs: int_col(row, "pairs")?,
        method: row.try_get("method")?,
        reason: row.try_get("reason")?,
    })
});

/// A stored verdict: its id, where the store put it (the cycle, and the
/// experiment when there was one), and the verdict as recorded.
#[derive(Debug, Clone, PartialEq, Serialize, FromRow)]
pub struct Verdict {
    pub id: VerdictId,
    pub cycle_id: CycleId,
    pub experiment_id: Option<ExperimentId>,
    #[sqlx(flatten)]
    #[serde(flatten)]
    pub recorded: NewVerdict,
}

reads_as_recorded!(Verdict => NewVerdict);

pub(crate) const SQL_EXPERIMENT_VERDICT: &str = "SELECT * FROM verdicts WHERE experiment_id = $1";

/// Inserts with the cycle taken from the experiment itself, so a verdict can
/// never land in another cycle than its experiment.
async fn insert_for_experiment(
    c: Conn<'_>,
    cx: &Ctx,
    experiment_id: ExperimentId,
    v: &NewVerdict,
) -> Result<VerdictId> {
    on_db!(c, |c| {
        let op = "record a verdict";
        // Looked for first: on PostgreSQL a failed INSERT aborts the whole
        // transaction, so the UNIQUE violation below could not be followed by
        // this read. Both backends take the write lock first, so nothing can
        // slip in between.
        if let Some(existing) = of_experiment((&mut *c).into(), cx, experiment_id).await? {
            return Err(LedgerError::VerdictExists {
                experiment_id,
                existing: existing.kind,
            });
        }
        let inserted: Result<Option<VerdictId>, sqlx::Error> = sqlx::query_scalar(
            "INSERT INTO verdicts (cycle_id, experiment_id, kind, decided_at, effect, interval_low, \
             interval_high, noise_floor, pairs, method, reason, floor_is_bound) \
             SELECT cycle_id, id, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11 FROM experiments WHERE id = $1 \
             RETURNING id",
        )
        .bind(experiment_id)
        .bind(v.kind)
        .bind(ts(&v.decided_at))
        .bind(v.effect)
        .bind(v.interval.map(|i| i.low))
        .bind(v.interval.map(|i| i.high))
        .bind(v.noise_floor)
        .bind(i64::from(v.pairs))
        .bind(v.method.as_deref())
        .bind(v.reason.as_deref())
        .bind(v.floor_is_bound)
        .fetch_optional(&mut *c)
        .await;
        match inserted {
            Ok(Some(id)) => Ok(id),
            Ok(None) => Err(cx.not_found(ExperimentId::WHAT, experiment_id.0)),
            Err(e) if is_unique_violation(&e) => {
                let existing = of_experiment((&mut *c).into(), cx, experiment_id)
                    .await?
                    .map(|v| v.kind)
                    .ok_or_else(|| cx.classify(op, e))?;
                Err(LedgerError::VerdictExists {
                    experiment_id,
                    existing,
                })
            }
            Err(e) => Err(cx.classify(op, e)),
        }
    })
}

async fn insert_for_cycle(
    c: Conn<'_>,
    cx: &Ctx,
    cycle_id: CycleId,
    v: &NewVerdict,
) -> Result<VerdictId> {
    on_db!(c, |c| {
        sqlx::query_scalar(
            "INSERT INTO verdicts (cycle_id, kind, decided_at, effect, interval_low, interval_high, \
             noise_floor, pairs, method, reason, floor_is_bound) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) RETURNING id",
        )
        .bind(cycle_id)
        .bind(v.kind)
        .bind(ts(&v.decided_at))
        .bind(v.effect)
        .bind(v.interval.map(|i| i.low))
        .bind(v.interval.map(|i| i.high))
        .bind(v.noise_floor)
        .bind(i64::from(v.pairs))
        .bind(v.method.as_deref())
        .bind(v.reason.as_deref())
        .bind(v.floor_is_bound)
        .fetch_one(c)
        .await
        .map_err(cx.err("record a cycle's verdict"))
    })
}

pub(crate) async fn of_experiment(
    c: Conn<'_>,
    cx: &Ctx,
    experiment_id: ExperimentId,
) -> Result<Option<Verdict>> {
    on_db!(c, |c| {
        sqlx::query_as(SQL_EXPERIMENT_VERDICT)
            .bind(experiment_id)
            .fetch_optional(c)
            .await
            .map_err(cx.err("read a verdict"))
    })
}

impl WriteTx {
    /// Records the one verdict of an experiment; a second one is refused
    /// with [`LedgerError::VerdictExists`].
    pub async fn insert_verdict(
        &mut self,
        experiment_id: ExperimentId,
        v: &NewVerdict,
    ) -> Result<VerdictId> {
        let (c, cx) = self.parts();
        insert_for_experiment(c, cx, experiment_id, v).await
    }

    /// Records the verdict of a cycle that ended before any experiment
    /// existed; only `rejected` or `failed` are allowed, once per cycle.
    pub async fn insert_cycle_verdict(
        &mut self,
        cycle_id: CycleId,
        v: &NewVerdict,
    ) -> Result<VerdictId> {
        let (c, cx) = self.parts();
        insert_for_cycle(c, cx, cycle_id, v).await
    }

    pub async fn verdict(&mut self, experiment_id: ExperimentId) -> Result<Option<Verdict>> {
        let (c, cx) = self.parts();
        of_experiment(c, cx, experiment_id).await
    }
}

impl Ledger {
    /// [`WriteTx::insert_verdict`] as its own transaction.
    pub async fn insert_verdict(
        &self,
        experiment_id: ExperimentId,
        v: &NewVerdict,
    ) -> Result<VerdictId> {
        let mut tx = self.begin_write().await?;
        let id = tx.insert_verdict(experiment_id, v).await?;
        tx.commit().await?;
        Ok(id)
    }

    /// [`WriteTx::insert_cycle_verdict`] as its own transaction.
    pub async fn insert_cycle_verdict(
        &self,
        cycle_id: CycleId,
        v: &NewVerdict,
    ) -> Result<VerdictId> {
        let mut c = self.conn("record a cycle's verdict").await?;
        insert_for_cycle(c.conn(), &self.ctx, cycle_id, v).await
    }

    /// The verdict of an experiment, if it has one yet.
    pub async fn verdict(&self, experiment_id: ExperimentId) -> Result<Option<Verdict>> {
        let mut c = self.conn("read a verdict").await?;
        of_experiment(c.conn(), &self.ctx, experiment_id).await
    }
}
