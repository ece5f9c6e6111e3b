//! Reverts (issue #32): an approved stage whose profile reached the live
//! profile is undone by putting back the profile it replaced, its
//! experiment's base profile, recorded with who asked and why; and the
//! restarts `--restart` ran after writing a profile.
//!
//! On SQLite `stage revert` writes the file and settles its row in one
//! write transaction held across the write; on PostgreSQL it records the
//! request and the stack's daemon settles it on its host, as it settles an
//! apply ([`super::applies`]): an `UPDATE ... WHERE` unsettled guard in the
//! transaction held across the write, so two daemons never both write it.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::Row;

use super::applies::ApplyOutcome;
use super::codec::ts;
use super::ids::StageId;
use super::stages::Stage;
use super::{Ledger, Result, WriteTx};

/// One stage's revert: asked for, and written or refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StageRevert {
    pub stage_id: StageId,
    pub requested_at: DateTime<Utc>,
    pub requested_by: String,
    pub reason: String,
    /// When the replaced profile was written back (or found already back).
    pub applied_at: Option<DateTime<Utc>>,
    /// Why it was not written.
    pub refusal: Option<String>,
    pub refused_at: Option<DateTime<Utc>>,
    /// What wrote it or refused to, on which host.
    pub applied_by: Option<String>,
    pub applied_to: Option<String>,
    /// When `--restart` restarted the stack on the restored profile.
    pub restarted_at: Option<DateTime<Utc>>,
}

from_row!(StageRevert, |row| {
    Ok(StageRevert {
        stage_id: row.try_get("stage_id")?,
        requested_at: row.try_get("requested_at")?,
        requested_by: row.try_get("requested_by")?,
        reason: row.try_get("reason")?,
        applied_at: row.try_get("applied_at")?,
        refusal: row.try_get("refusal")?,
        refused_at: row.try_get("refused_at")?,
        applied_by: row.try_get("applied_by")?,
        applied_to: row.try_get("applied_to")?,
        restarted_at: row.try_get("restarted_at")?,
    })
});

/// Where a revert stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RevertStatus {
    /// Asked for; the stack's daemon has not written it yet (PostgreSQL).
    Waiting,
    /// The replaced profile is the live profile again.
    Reverted,
    /// Not written, because the live profile was no longer the stage's.
    Refused,
}

impl RevertStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            RevertStatus::Waiting => "reverting",
            RevertStatus::Reverted => "reverted",
            RevertStatus::Refused => "revert refused",
        }
    }
}

impl StageRevert {
    pub fn status(&self) -> RevertStatus {
        match (self.applied_at, &self.refusal) {
            (Some(_), _) => RevertStatus::Reverted,
            (None, Some(_)) => RevertStatus::Refused,
            (None, None) => RevertStatus::Waiting,
        }
    }
}

/// Which written profile a restart was run for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Restarted {
    /// The stage's own profile, after `stage approve --restart`.
    Approval,
    /// The profile it replaced, after `stage revert --restart`.
    Revert,
}

/// Asks for a revert; a refused one is asked for again (its row replaced).
/// No row changes when one is waiting or done.
const SQL_REQUEST: &str = "INSERT INTO stage_reverts (stage_id, requested_at, requested_by, reason) \
     VALUES ($1, $2, $3, $4) \
     ON CONFLICT (stage_id) DO UPDATE SET requested_at = excluded.requested_at, \
     requested_by = excluded.requested_by, reason = excluded.reason, refusal = NULL, \
     refused_at = NULL, applied_by = NULL, applied_to = NULL \
     WHERE stage_reverts.refusal IS NOT NULL";

const SQL_SETTLE_WRITTEN: &str = "UPDATE stage_reverts SET applied_at = $2, applied_by = $3, applied_to = $4 \
     WHERE stage_id = $1 AND applied_at IS NULL AND refusal IS NULL";
const SQL_SETTLE_REFUSED: &str = "UPDATE stage_reverts SET refused_at = $2, applied_by = $3, applied_to = $4, refusal = $5 \
     WHERE stage_id = $1 AND applied_at IS NULL AND refusal IS NULL";

/// Reverts of this handle's stack's stages (every stack's, unscoped) that
/// no daemon settled yet, oldest request first.
const SQL_TO_APPLY: &str = "SELECT r.* FROM stage_reverts r JOIN stages s ON s.id = r.stage_id \
     WHERE r.applied_at IS NULL AND r.refusal IS NULL \
     AND (CAST($1 AS TEXT) IS NULL OR s.stack = $1) ORDER BY r.requested_at, r.stage_id";

impl WriteTx {
    /// Records that `by` asks for stage `id` to be reverted, because
    /// `reason`; `false` when a revert of it is waiting or done already.
    pub async fn request_revert(
        &mut self,
        id: StageId,
        by: &str,
        reason: &str,
        at: DateTime<Utc>,
    ) -> Result<bool> {
        let (c, cx) = self.parts();
        on_db!(c, |c| {
            let done = sqlx::query(SQL_REQUEST)
                .bind(id)
                .bind(ts(&at))
                .bind(by)
                .bind(reason)
                .execute(c)
                .await
                .map_err(cx.err("record a revert"))?;
            Ok(done.rows_affected() == 1)
        })
    }

    /// Settles stage `id`'s revert once, before the file is written (commit
    /// after); `false` when it is not waiting (settled by another process).
    pub async fn settle_revert(
        &mut self,
        id: StageId,
        outcome: ApplyOutcome<'_>,
        by: &str,
        to: &str,
        at: DateTime<Utc>,
    ) -> Result<bool> {
        let (c, cx) = self.parts();
        on_db!(c, |c| {
            let query = match outcome {
                ApplyOutcome::Applied => sqlx::query(SQL_SETTLE_WRITTEN),
                ApplyOutcome::Refused(_) => sqlx::query(SQL_SETTLE_REFUSED),
            };
            let query = query.bind(id).bind(ts(&at)).bind(by).bind(to);
            let query = match outcome {
                ApplyOutcome::Applied => query,
                ApplyOutcome::Refused(why) => query.bind(why),
            };
            let done = query
                .execute(c)
                .await
                .map_err(cx.err("record whether a revert was written"))?;
            Ok(done.rows_affected() == 1)
        })
    }

    /// Stage `id`'s revert, read under the write lock.
    pub async fn stage_revert(&mut self, id: StageId) -> Result<Option<StageRevert>> {
        let (c, cx) = self.parts();
        on_db!(c, |c| {
            sqlx::query_as("SELECT * FROM stage_reverts WHERE stage_id = $1")
                .bind(id)
                .fetch_optional(c)
                .await
                .map_err(cx.err("read a revert"))
        })
    }
}

impl Ledger {
    /// Stage `id`'s revert, if one was asked for.
    pub async fn stage_revert(&self, id: StageId) -> Result<Option<StageRevert>> {
        let op = "read a revert";
        let mut c = self.conn(op).await?;
        on_db!(c.conn(), |c| {
            sqlx::query_as("SELECT * FROM stage_reverts WHERE stage_id = $1")
                .bind(id)
                .fetch_optional(c)
                .await
                .map_err(self.ctx.err(op))
        })
    }

    /// Every revert, for `stage list` (a short table: one row per revert).
    pub async fn stage_reverts(&self) -> Result<Vec<StageRevert>> {
        let op = "list the reverts";
        let mut c = self.conn(op).await?;
        on_db!(c.conn(), |c| {
            sqlx::query_as("SELECT * FROM stage_reverts ORDER BY stage_id")
                .fetch_all(c)
                .await
                .map_err(self.ctx.err(op))
        })
    }

    /// The reverts this handle's stack's daemon writes: asked for, not
    /// settled, oldest first.
    pub async fn reverts_to_apply(&self) -> Result<Vec<StageRevert>> {
        let op = "list the reverts waiting to be written";
        let mut c = self.conn(op).await?;
        on_db!(c.conn(), |c| {
            sqlx::query_as(SQL_TO_APPLY)
                .bind(self.ctx.stack())
                .fetch_all(c)
                .await
                .map_err(self.ctx.err(op))
        })
    }

    /// Records that `--restart` restarted the stack on the profile written
    /// for stage `id` (its own, or the one it replaced) at `at`.
    pub async fn record_restart(
        &self,
        id: StageId,
        what: Restarted,
        at: DateTime<Utc>,
    ) -> Result<()> {
        let op = "record a restart";
        let sql = match what {
            Restarted::Approval => {
                "UPDATE stages SET restarted_at = $2 WHERE id = $1 AND applied_at IS NOT NULL"
            }
            Restarted::Revert => {
                "UPDATE stage_reverts SET restarted_at = $2 WHERE stage_id = $1 AND applied_at IS NOT NULL"
            }
        };
        let mut c = self.conn(op).await?;
        on_db!(c.conn(), |c| {
            sqlx::query(sql)
                .bind(id)
                .bind(ts(&at))
                .execute(c)
                .await
                .map_err(self.ctx.err(op))?;
            Ok(())
        })
    }
}

impl Stage {
    /// Whether its profile is (or was) live: approved and written.
    pub fn is_applied(&self) -> bool {
        self.applied_at.is_some()
    }
}
