//! How many of a stack's stages stand in each state, and how many approved
//! ones were reverted: what the daemon's metrics endpoint shows after every
//! cycle. One aggregate query, so its cost does not grow with the stages'
//! evidence (the listing reads each composite's parts).

use super::{Ledger, Result};
use crate::vocab::StageState;

/// Stages by state; `reverted` counts approved stages whose replaced
/// profile was written back (a revert asked for but not written, or
/// refused, is not one).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StageCounts {
    pub staged: u64,
    pub approved: u64,
    pub rejected: u64,
    pub expired: u64,
    pub reverted: u64,
}

impl StageCounts {
    /// The count of stages in `state`.
    pub fn of(&self, state: StageState) -> u64 {
        match state {
            StageState::Staged => self.staged,
            StageState::Approved => self.approved,
            StageState::Rejected => self.rejected,
            StageState::Expired => self.expired,
        }
    }

    fn slot(&mut self, state: StageState) -> &mut u64 {
        match state {
            StageState::Staged => &mut self.staged,
            StageState::Approved => &mut self.approved,
            StageState::Rejected => &mut self.rejected,
            StageState::Expired => &mut self.expired,
        }
    }
}

const SQL_COUNTS: &str = "SELECT s.state, COUNT(*), COUNT(r.applied_at) \
     FROM stages s LEFT JOIN stage_reverts r ON r.stage_id = s.id \
     WHERE CAST($1 AS TEXT) IS NULL OR s.stack = $1 \
     GROUP BY s.state";

impl Ledger {
    /// This handle's stack's stages by state (every stack's on an unscoped
    /// handle).
    pub async fn stage_counts(&self) -> Result<StageCounts> {
        let op = "count the stages";
        let mut c = self.conn(op).await?;
        let rows: Vec<(StageState, i64, i64)> = on_db!(c.conn(), |c| {
            sqlx::query_as(SQL_COUNTS)
                .bind(self.ctx.stack())
                .fetch_all(c)
                .await
                .map_err(self.ctx.err(op))
        })?;
        let mut counts = StageCounts::default();
        for (state, n, reverted) in rows {
            *counts.slot(state) = n.unsigned_abs();
            counts.reverted += reverted.unsigned_abs();
        }
        Ok(counts)
    }
}
