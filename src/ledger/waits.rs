//! The daemon's waits: stretches in which it ran no cycle on purpose, one
//! row each (`waits`), with why, what wakes it, when it looks again and
//! what ended it. Written by `daemon::wait`, listed by `orchestrator
//! ledger` beside the cycles.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::Row;

use super::Conn;
use super::codec::{canonical_json, json_col, ts};
use super::error::Ctx;
use super::ids::{CycleId, WaitId};
use super::{Ledger, Result};
use crate::vocab::WaitKind;

/// A wait about to be recorded.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NewWait {
    pub kind: WaitKind,
    pub started_at: DateTime<Utc>,
    /// The last cycle before it, when there was one.
    pub after_cycle: Option<CycleId>,
    /// Why it waits, in words.
    pub reason: String,
    /// What wakes it, in words, one item each.
    pub wakes_on: Vec<String>,
    /// When it looks again at the latest.
    pub next_look_at: DateTime<Utc>,
    /// The wait before that look, seconds.
    pub backoff_s: f64,
}

/// A recorded wait.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Wait {
    pub id: WaitId,
    pub stack: Option<String>,
    #[serde(flatten)]
    pub recorded: NewWait,
    /// Looks that found it still waiting.
    pub looks: u32,
    pub ended_at: Option<DateTime<Utc>>,
    /// What ended it.
    pub woken_by: Option<String>,
}

reads_as_recorded!(Wait => NewWait);

from_row!(Wait, |row| {
    let wakes_on: Vec<String> = serde_json::from_value(json_col(row, "wakes_on")?)
        .map_err(|e| sqlx::Error::Decode(Box::new(e)))?;
    let looks: i64 = row.try_get("looks")?;
    Ok(Wait {
        id: row.try_get("id")?,
        stack: row.try_get("stack")?,
        recorded: NewWait {
            kind: row.try_get("kind")?,
            started_at: row.try_get("started_at")?,
            after_cycle: row.try_get("after_cycle")?,
            reason: row.try_get("reason")?,
            wakes_on,
            next_look_at: row.try_get("next_look_at")?,
            backoff_s: row.try_get("backoff_s")?,
        },
        looks: u32::try_from(looks).unwrap_or(u32::MAX),
        ended_at: row.try_get("ended_at")?,
        woken_by: row.try_get("woken_by")?,
    })
});

pub(crate) const SQL_RECENT_WAITS: &str = "SELECT * FROM waits \
     WHERE (CAST($2 AS TEXT) IS NULL OR stack = $2) \
     ORDER BY started_at DESC, id DESC LIMIT $1";

const SQL_OPEN_WAITS: &str = "SELECT id FROM waits WHERE ended_at IS NULL \
     AND (CAST($1 AS TEXT) IS NULL OR stack = $1)";

async fn insert(c: Conn<'_>, cx: &Ctx, w: &NewWait) -> Result<WaitId> {
    let wakes_on = canonical_json(&serde_json::json!(w.wakes_on));
    on_db!(c, |c| {
        sqlx::query_scalar(
            "INSERT INTO waits (stack, kind, started_at, after_cycle, reason, wakes_on, \
             next_look_at, backoff_s) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) RETURNING id",
        )
        .bind(cx.stack())
        .bind(w.kind)
        .bind(ts(&w.started_at))
        .bind(w.after_cycle)
        .bind(&w.reason)
        .bind(&wakes_on)
        .bind(ts(&w.next_look_at))
        .bind(w.backoff_s)
        .fetch_one(c)
        .await
        .map_err(cx.err("record a wait"))
    })
}

impl Ledger {
    /// Records the start of a wait.
    pub async fn insert_wait(&self, w: &NewWait) -> Result<WaitId> {
        let mut c = self.conn("record a wait").await?;
        insert(c.conn(), &self.ctx, w).await
    }

    /// A look that found the wait still due: its reason (it may read
    /// differently now), its next look and the wait before it.
    pub async fn wait_looked(
        &self,
        id: WaitId,
        reason: &str,
        next_look_at: DateTime<Utc>,
        backoff_s: f64,
    ) -> Result<()> {
        let op = "record a look of a wait";
        let mut c = self.conn(op).await?;
        on_db!(c.conn(), |c| {
            sqlx::query(
                "UPDATE waits SET looks = looks + 1, reason = $2, next_look_at = $3, \
                 backoff_s = $4 WHERE id = $1 AND ended_at IS NULL",
            )
            .bind(id)
            .bind(reason)
            .bind(ts(&next_look_at))
            .bind(backoff_s)
            .execute(c)
            .await
            .map(|_| ())
            .map_err(self.ctx.err(op))
        })
    }

    /// Ends a wait with what ended it. Ending one already ended changes
    /// nothing.
    pub async fn end_wait(&self, id: WaitId, at: DateTime<Utc>, woken_by: &str) -> Result<()> {
        let op = "end a wait";
        let mut c = self.conn(op).await?;
        on_db!(c.conn(), |c| {
            sqlx::query(
                "UPDATE waits SET ended_at = $2, woken_by = $3 WHERE id = $1 AND ended_at IS NULL",
            )
            .bind(id)
            .bind(ts(&at))
            .bind(woken_by)
            .execute(c)
            .await
            .map(|_| ())
            .map_err(self.ctx.err(op))
        })
    }

    /// Ends the waits of this handle's stack a dead daemon left open, with
    /// `why` and the time it is found (at start). Returns how many.
    pub async fn end_open_waits(&self, why: &str, at: DateTime<Utc>) -> Result<u64> {
        let op = "end the waits left open";
        let ids: Vec<WaitId> = {
            let mut c = self.conn(op).await?;
            on_db!(c.conn(), |c| sqlx::query_scalar(SQL_OPEN_WAITS)
                .bind(self.ctx.stack())
                .fetch_all(c)
                .await
                .map_err(self.ctx.err(op)))?
        };
        for &id in &ids {
            // A wait ends no earlier than it began: one backdated by a
            // skewed clock ends when it began.
            self.end_wait_not_before(id, at, why).await?;
        }
        Ok(ids.len() as u64)
    }

    async fn end_wait_not_before(&self, id: WaitId, at: DateTime<Utc>, why: &str) -> Result<()> {
        let op = "end a wait";
        let started: DateTime<Utc> = {
            let mut c = self.conn(op).await?;
            on_db!(c.conn(), |c| sqlx::query_scalar(
                "SELECT started_at FROM waits WHERE id = $1"
            )
            .bind(id)
            .fetch_one(c)
            .await
            .map_err(self.ctx.err(op)))?
        };
        self.end_wait(id, at.max(started), why).await
    }

    /// The newest `limit` waits of this handle's stack (all stacks on an
    /// unscoped handle), newest first.
    pub async fn recent_waits(&self, limit: u32) -> Result<Vec<Wait>> {
        let op = "read the recent waits";
        let mut c = self.conn(op).await?;
        on_db!(c.conn(), |c| sqlx::query_as(SQL_RECENT_WAITS)
            .bind(i64::from(limit))
            .bind(self.ctx.stack())
            .fetch_all(c)
            .await
            .map_err(self.ctx.err(op)))
    }
}
