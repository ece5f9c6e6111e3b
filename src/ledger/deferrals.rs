//! Deferred cycles: a cycle that stood aside for the live server's users
//! longer than `[daemon] stand_aside_max_wait_s` (`measure::stand_aside`).
//! The cycle itself is closed `aborted` with a `failed` verdict, as a cycle
//! a shutdown cut short (it judged nothing); its row here says it was
//! deferred, when, why, and after how long a wait.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::FromRow;

use super::Conn;
use super::codec::ts;
use super::error::Ctx;
use super::ids::CycleId;
use super::{Ledger, Result};
use crate::vocab::DeferredAt;

/// A cycle's deferral.
#[derive(Debug, Clone, PartialEq, Serialize, FromRow)]
pub struct CycleDeferral {
    pub cycle_id: CycleId,
    pub deferred_at: DateTime<Utc>,
    /// At its start, or between two runs of its measurement.
    pub during: DeferredAt,
    pub reason: String,
    /// How long it waited for the live server before giving up.
    pub waited_s: f64,
    /// The users' requests the live server held at the last reading.
    pub live_requests: Option<f64>,
}

const SQL_OF_CYCLES: &str = "SELECT * FROM cycle_deferrals \
     WHERE cycle_id IN (SELECT value FROM json_each($1)) ORDER BY cycle_id";

const PG_OF_CYCLES: &str = "SELECT * FROM cycle_deferrals \
     WHERE cycle_id IN (SELECT value::bigint FROM json_array_elements_text($1::json)) \
     ORDER BY cycle_id";

async fn insert(c: Conn<'_>, cx: &Ctx, d: &CycleDeferral) -> Result<()> {
    on_db!(c, |c| {
        sqlx::query(
            "INSERT INTO cycle_deferrals (cycle_id, deferred_at, during, reason, waited_s, \
             live_requests) VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(d.cycle_id)
        .bind(ts(&d.deferred_at))
        .bind(d.during)
        .bind(&d.reason)
        .bind(d.waited_s)
        .bind(d.live_requests)
        .execute(c)
        .await
        .map(|_| ())
        .map_err(cx.err("record a deferred cycle"))
    })
}

/// The deferrals of these cycles (those that have one).
pub(super) async fn of_cycles(c: Conn<'_>, cx: &Ctx, ids: &str) -> Result<Vec<CycleDeferral>> {
    on_db!(c, |c, d| {
        sqlx::query_as(d.pick(SQL_OF_CYCLES, PG_OF_CYCLES))
            .bind(ids)
            .fetch_all(c)
            .await
            .map_err(cx.err("read deferred cycles"))
    })
}

impl Ledger {
    /// Records that cycle `d.cycle_id` was deferred (before it is closed).
    pub async fn insert_deferral(&self, d: &CycleDeferral) -> Result<()> {
        let mut c = self.conn("record a deferred cycle").await?;
        insert(c.conn(), &self.ctx, d).await
    }
}
