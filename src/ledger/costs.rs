//! What each cycle cost, read back from the ledger for the soak benchmark
//! (`benches/soak.rs`): its wall time, the engine runs' own wall time inside
//! it (so the orchestrator's overhead is the difference), its verdicts; and
//! the ledger's stored size.
//!
//! These are whole-ledger reads for an offline benchmark, never run by the
//! daemon, so they are not [`super::NamedQuery`]s (whose test forbids table
//! scans).

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::Row;

use super::Conn;
use super::ids::CycleId;
use super::{Ledger, Result};
use crate::vocab::{CycleStatus, VerdictKind};

/// One cycle's cost.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CycleCost {
    pub id: CycleId,
    pub started_at: DateTime<Utc>,
    /// `None` while (or if left) running.
    pub ended_at: Option<DateTime<Utc>>,
    pub status: CycleStatus,
    /// Sum of the recorded wall time of every engine run of the cycle's
    /// experiments (warmups, refused and failed runs included): spawn to reap
    /// for bench runs, request to last byte for surface runs.
    pub engine_s: f64,
    pub runs: u32,
    /// Every verdict recorded in the cycle (a confirming cycle may have two).
    pub verdicts: Vec<VerdictKind>,
}

const SQL_CYCLE_COSTS: &str = "SELECT c.id, c.started_at, c.ended_at, c.status, \
     (SELECT coalesce(sum(r.duration_s), 0.0) FROM experiments e JOIN runs r ON r.experiment_id = e.id \
        WHERE e.cycle_id = c.id) AS engine_s, \
     (SELECT count(*) FROM experiments e JOIN runs r ON r.experiment_id = e.id \
        WHERE e.cycle_id = c.id) AS runs, \
     (SELECT group_concat(v.kind, ',') FROM verdicts v WHERE v.cycle_id = c.id) AS verdicts \
     FROM cycles c ORDER BY c.id";

const PG_CYCLE_COSTS: &str = "SELECT c.id, c.started_at, c.ended_at, c.status, \
     (SELECT coalesce(sum(r.duration_s), 0.0) FROM experiments e JOIN runs r ON r.experiment_id = e.id \
        WHERE e.cycle_id = c.id) AS engine_s, \
     (SELECT count(*) FROM experiments e JOIN runs r ON r.experiment_id = e.id \
        WHERE e.cycle_id = c.id) AS runs, \
     (SELECT string_agg(v.kind, ',') FROM verdicts v WHERE v.cycle_id = c.id) AS verdicts \
     FROM cycles c ORDER BY c.id";

impl Ledger {
    /// Every cycle with its cost, oldest first.
    pub async fn cycle_costs(&self) -> Result<Vec<CycleCost>> {
        let op = "read every cycle's cost";
        let mut c = self.conn(op).await?;
        on_db!(c.conn(), |c, d| {
            let rows = sqlx::query(d.pick(SQL_CYCLE_COSTS, PG_CYCLE_COSTS))
                .fetch_all(c)
                .await
                .map_err(self.ctx.err(op))?;
            let mut out = Vec::with_capacity(rows.len());
            for row in rows {
                let verdicts: Option<String> = row.try_get("verdicts").map_err(self.ctx.err(op))?;
                let verdicts = verdicts
                    .unwrap_or_default()
                    .split(',')
                    .filter(|s| !s.is_empty())
                    .map(|s| {
                        s.parse::<VerdictKind>()
                            .map_err(|e| self.ctx.err(op)(sqlx::Error::Decode(Box::new(e))))
                    })
                    .collect::<Result<Vec<_>>>()?;
                let runs: i64 = row.try_get("runs").map_err(self.ctx.err(op))?;
                out.push(CycleCost {
                    id: row.try_get("id").map_err(self.ctx.err(op))?,
                    started_at: row.try_get("started_at").map_err(self.ctx.err(op))?,
                    ended_at: row.try_get("ended_at").map_err(self.ctx.err(op))?,
                    status: row.try_get("status").map_err(self.ctx.err(op))?,
                    engine_s: row.try_get("engine_s").map_err(self.ctx.err(op))?,
                    runs: u32::try_from(runs).unwrap_or(u32::MAX),
                    verdicts,
                });
            }
            Ok(out)
        })
    }

    /// Bytes the ledger's pages take as of the latest commit, WAL included:
    /// the main file's size after a full checkpoint (on PostgreSQL, the
    /// database's size on the server).
    pub async fn stored_bytes(&self) -> Result<u64> {
        let op = "read the ledger's size";
        let mut c = self.conn(op).await?;
        let bytes: i64 = match c.conn() {
            Conn::Sqlite(c) => {
                let pages: i64 = sqlx::query_scalar("PRAGMA page_count")
                    .fetch_one(&mut *c)
                    .await
                    .map_err(self.ctx.err(op))?;
                let size: i64 = sqlx::query_scalar("PRAGMA page_size")
                    .fetch_one(&mut *c)
                    .await
                    .map_err(self.ctx.err(op))?;
                pages.saturating_mul(size)
            }
            Conn::Postgres(c) => sqlx::query_scalar("SELECT pg_database_size(current_database())")
                .fetch_one(c)
                .await
                .map_err(self.ctx.err(op))?,
        };
        Ok(u64::try_from(bytes).unwrap_or(0))
    }
}
