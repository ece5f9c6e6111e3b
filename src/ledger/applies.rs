//! Whether an approved stage's profile reached its stack's live profile
//! (issue #18: approval from anywhere). On a PostgreSQL ledger a person
//! approves from any machine and the stack's own daemon, on its host,
//! writes the file and records it here; on SQLite `stage approve` writes it
//! and records the same.
//!
//! Settling an apply (written, or refused with the reason) is an
//! `UPDATE ... WHERE applied_at IS NULL AND apply_refusal IS NULL` in the
//! caller's write transaction, made before the file is written and held
//! across the write: of two daemons that both see an approval, one settles
//! it and the other changes no row, so it writes nothing.

use chrono::{DateTime, Utc};

use super::Conn;
use super::codec::ts;
use super::error::Ctx;
use super::ids::StageId;
use super::stages::Stage;
use super::{Ledger, Result, WriteTx};
use crate::vocab::StageState;

/// Where an approved stage's profile stands, read from its row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StageApply<'a> {
    /// Not approved: there is nothing to apply.
    NotApproved,
    /// Approved; its stack's daemon has not seen it yet.
    Waiting,
    /// Written to `to` by `by` at `at`.
    Applied {
        at: DateTime<Utc>,
        by: &'a str,
        to: &'a str,
    },
    /// Not written, because `why`.
    Refused {
        at: DateTime<Utc>,
        by: &'a str,
        to: &'a str,
        why: &'a str,
    },
}

impl StageApply<'_> {
    /// Its name in JSON: `waiting`, `applied`, `refused`; `None` when not
    /// approved.
    pub fn status(&self) -> Option<&'static str> {
        match self {
            StageApply::NotApproved => None,
            StageApply::Waiting => Some("waiting"),
            StageApply::Applied { .. } => Some("applied"),
            StageApply::Refused { .. } => Some("refused"),
        }
    }
}

impl Stage {
    /// Whether its approval has reached the live profile (the schema's
    /// CHECKs make every other combination impossible).
    pub fn apply(&self) -> StageApply<'_> {
        let by = self.applied_by.as_deref().unwrap_or_default();
        let to = self.applied_to.as_deref().unwrap_or_default();
        match (self.state, self.applied_at, &self.apply_refusal) {
            (StageState::Approved, Some(at), _) => StageApply::Applied { at, by, to },
            (StageState::Approved, None, Some(why)) => StageApply::Refused {
                at: self.apply_refused_at.unwrap_or(self.created_at),
                by,
                to,
                why,
            },
            (StageState::Approved, None, None) => StageApply::Waiting,
            _ => StageApply::NotApproved,
        }
    }
}

/// Approved stages whose apply is not settled, oldest approval first: what
/// a daemon applies, for its own stack (`$1`; NULL on an unscoped handle).
pub(crate) const SQL_STAGES_TO_APPLY: &str = "SELECT * FROM stages \
     WHERE state = 'approved' AND applied_at IS NULL AND apply_refusal IS NULL \
     AND (CAST($1 AS TEXT) IS NULL OR stack = $1) \
     ORDER BY decided_at, id";

/// How an apply was settled.
#[derive(Debug, Clone, Copy)]
pub enum ApplyOutcome<'a> {
    /// The live profile holds the stage's profile.
    Applied,
    /// The live profile was not written, because of this.
    Refused(&'a str),
}

const SQL_APPLIED: &str = "UPDATE stages \
     SET applied_at = max($2, decided_at), applied_by = $3, applied_to = $4 \
     WHERE id = $1 AND state = 'approved' AND applied_at IS NULL AND apply_refusal IS NULL";
const PG_APPLIED: &str = "UPDATE stages \
     SET applied_at = GREATEST($2, decided_at), applied_by = $3, applied_to = $4 \
     WHERE id = $1 AND state = 'approved' AND applied_at IS NULL AND apply_refusal IS NULL";
const SQL_REFUSED: &str = "UPDATE stages \
     SET apply_refused_at = max($2, decided_at), applied_by = $3, applied_to = $4, apply_refusal = $5 \
     WHERE id = $1 AND state = 'approved' AND applied_at IS NULL AND apply_refusal IS NULL";
const PG_REFUSED: &str = "UPDATE stages \
     SET apply_refused_at = GREATEST($2, decided_at), applied_by = $3, applied_to = $4, apply_refusal = $5 \
     WHERE id = $1 AND state = 'approved' AND applied_at IS NULL AND apply_refusal IS NULL";

/// Settles stage `id`'s apply once; `false` when it is not an approved
/// stage waiting to be applied (another process settled it first).
async fn settle(
    c: Conn<'_>,
    cx: &Ctx,
    id: StageId,
    outcome: ApplyOutcome<'_>,
    by: &str,
    to: &str,
    at: DateTime<Utc>,
) -> Result<bool> {
    on_db!(c, |c, d| {
        let query = match outcome {
            ApplyOutcome::Applied => sqlx::query(d.pick(SQL_APPLIED, PG_APPLIED)),
            ApplyOutcome::Refused(_) => sqlx::query(d.pick(SQL_REFUSED, PG_REFUSED)),
        };
        let query = query.bind(id).bind(ts(&at)).bind(by).bind(to);
        let query = match outcome {
            ApplyOutcome::Applied => query,
            ApplyOutcome::Refused(why) => query.bind(why),
        };
        let done = query
            .execute(c)
            .await
            .map_err(cx.err("record whether an approved stage was applied"))?;
        Ok(done.rows_affected() == 1)
    })
}

async fn to_apply(c: Conn<'_>, cx: &Ctx) -> Result<Vec<Stage>> {
    on_db!(c, |c| {
        sqlx::query_as(SQL_STAGES_TO_APPLY)
            .bind(cx.stack())
            .fetch_all(c)
            .await
            .map_err(cx.err("list the approved stages waiting to be applied"))
    })
}

impl WriteTx {
    /// Records that stage `id`'s profile was written to `to` by `by` (or,
    /// with [`ApplyOutcome::Refused`], why it was not). Call it before
    /// writing the file and commit after: `false` means the stage is not
    /// waiting to be applied (another process settled it), so write nothing.
    pub async fn settle_apply(
        &mut self,
        id: StageId,
        outcome: ApplyOutcome<'_>,
        by: &str,
        to: &str,
        at: DateTime<Utc>,
    ) -> Result<bool> {
        let (c, cx) = self.parts();
        settle(c, cx, id, outcome, by, to, at).await
    }
}

impl Ledger {
    /// Approved stages of this handle's stack (every stack's, unscoped)
    /// whose profile is neither written nor refused yet, oldest approval
    /// first.
    pub async fn stages_to_apply(&self) -> Result<Vec<Stage>> {
        let mut c = self
            .conn("list the approved stages waiting to be applied")
            .await?;
        to_apply(c.conn(), &self.ctx).await
    }
}
