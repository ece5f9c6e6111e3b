//! Manual experiments: the A/Bs `orchestrator compare` records, of a
//! profile a person or a tuner made against a base. Stored as experiments
//! with `menu_id = 'manual'` (no menu entry planned the candidate) in
//! cycles whose proposer is `human`; the loop's own reads leave them out
//! (see `SQL_RECENT_EXPERIMENTS`, `SQL_CLASSMATE_WINS` and the report).

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;

use super::Conn;
use super::codec::{canonical_json, ts};
use super::error::Ctx;
use super::ids::{CycleId, ExperimentId};
use super::{Ledger, Result};
use crate::vocab::{Digest, Method};

/// The stored `menu_id` of a manual experiment.
pub const MANUAL: &str = "manual";

/// A manual experiment about to be measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NewManualExperiment {
    pub cycle_id: CycleId,
    /// For the independent second A/B of a manual win: the A/B it confirms.
    pub confirmation_of: Option<ExperimentId>,
    pub created_at: DateTime<Utc>,
    pub method: Method,
    pub base_profile: String,
    pub base_digest: Digest,
    pub candidate_profile: String,
    pub candidate_digest: Digest,
    /// Where the profiles came from (their files), stored as the
    /// experiment's notes.
    pub notes: Value,
}

async fn insert(c: Conn<'_>, cx: &Ctx, e: &NewManualExperiment) -> Result<ExperimentId> {
    on_db!(c, |c| {
        sqlx::query_scalar(
            "INSERT INTO experiments (cycle_id, proposal_id, confirmation_of, created_at, menu_id, \
         parameters, method, base_profile, base_digest, candidate_profile, candidate_digest, \
         planner_notes) VALUES ($1, NULL, $2, $3, $4, '{}', $5, $6, $7, $8, $9, $10) RETURNING id",
        )
        .bind(e.cycle_id)
        .bind(e.confirmation_of)
        .bind(ts(&e.created_at))
        .bind(MANUAL)
        .bind(e.method)
        .bind(&e.base_profile)
        .bind(&e.base_digest)
        .bind(&e.candidate_profile)
        .bind(&e.candidate_digest)
        .bind(canonical_json(&e.notes))
        .fetch_one(c)
        .await
        .map_err(cx.err("record a manual experiment"))
    })
}

/// The experiments of one cycle, oldest first, through `experiments_by_cycle`.
const SQL_CYCLE_EXPERIMENTS: &str = "SELECT id FROM experiments WHERE cycle_id = $1 ORDER BY id";

impl Ledger {
    /// The experiments recorded in cycle `cycle`, oldest first: a manual
    /// comparison's A/B and the floor's A/A its cycle measured, if any.
    pub async fn cycle_experiments(&self, cycle: CycleId) -> Result<Vec<ExperimentId>> {
        let op = "list a cycle's experiments";
        let mut c = self.conn(op).await?;
        on_db!(c.conn(), |c| sqlx::query_scalar(SQL_CYCLE_EXPERIMENTS)
            .bind(cycle)
            .fetch_all(c)
            .await
            .map_err(self.ctx.err(op)))
    }

    /// Records a manual experiment (its own autocommit statement).
    pub async fn insert_manual_experiment(&self, e: &NewManualExperiment) -> Result<ExperimentId> {
        let mut c = self.conn("record a manual experiment").await?;
        insert(c.conn(), &self.ctx, e).await
    }
}
