//! Approval for the class (issue #18: hosts of one class confirm each
//! other): `stage approve ID --class` records the class in
//! `stages.approved_for_class`, and every daemon of that class but the
//! stage's own stack applies it to its own live profile when that profile
//! is the stage's base, or records why not, in `stage_applies` (one row
//! per stage and stack). The stage's own stack keeps its apply in the
//! stages columns ([`super::applies`]): one stage, one own apply, and one
//! row per classmate.
//!
//! A classmate settles its apply by inserting its row in the write
//! transaction it holds across the file write; the primary key makes a
//! second insert for the same stage and stack change nothing, so a host
//! writes a stage at most once.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::Row;

use super::applies::ApplyOutcome;
use super::codec::ts;
use super::ids::StageId;
use super::stages::Stage;
use super::{Ledger, LedgerError, Result, WriteTx};

/// One classmate's apply of a stage approved for its class.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HostApply {
    pub stage_id: StageId,
    pub stack: String,
    /// When its live profile was written (or found already written).
    pub applied_at: Option<DateTime<Utc>>,
    pub applied_to: String,
    pub applied_by: String,
    /// Why it was not written.
    pub refusal: Option<String>,
    pub refused_at: Option<DateTime<Utc>>,
}

from_row!(HostApply, |row| {
    Ok(HostApply {
        stage_id: row.try_get("stage_id")?,
        stack: row.try_get("stack")?,
        applied_at: row.try_get("applied_at")?,
        applied_to: row.try_get("applied_to")?,
        applied_by: row.try_get("applied_by")?,
        refusal: row.try_get("refusal")?,
        refused_at: row.try_get("refused_at")?,
    })
});

/// Stages approved for the handle's class (`$1`) of another stack than its
/// own (`$2`) that it has not settled yet, oldest approval first.
const SQL_CLASS_STAGES_TO_APPLY: &str = "SELECT * FROM stages s \
     WHERE s.state = 'approved' AND s.approved_for_class = $1 AND s.stack IS DISTINCT FROM $2 \
       AND NOT EXISTS (SELECT 1 FROM stage_applies a WHERE a.stage_id = s.id AND a.stack = $2) \
     ORDER BY s.decided_at, s.id";

impl WriteTx {
    /// Marks the approved stage `id` as approved for `class` too.
    pub async fn approve_for_class(&mut self, id: StageId, class: &str) -> Result<()> {
        let (c, cx) = self.parts();
        on_db!(c, |c| {
            sqlx::query(
                "UPDATE stages SET approved_for_class = $2 WHERE id = $1 AND state = 'approved'",
            )
            .bind(id)
            .bind(class)
            .execute(c)
            .await
            .map_err(cx.err("approve a stage for its class"))?;
            Ok(())
        })
    }

    /// Records this handle's stack's apply of a stage approved for its
    /// class (call before writing the file, commit after); `false` when
    /// this stack settled it already, so write nothing.
    pub async fn settle_class_apply(
        &mut self,
        id: StageId,
        outcome: ApplyOutcome<'_>,
        by: &str,
        to: &str,
        at: DateTime<Utc>,
    ) -> Result<bool> {
        let (c, cx) = self.parts();
        let Some(stack) = cx.stack() else {
            return Err(LedgerError::Unscoped {
                what: "a classmate's apply of a stage approved for its class",
            });
        };
        let (applied_at, refusal) = match outcome {
            ApplyOutcome::Applied => (Some(ts(&at)), None),
            ApplyOutcome::Refused(why) => (None, Some(why)),
        };
        let refused_at = refusal.map(|_| ts(&at));
        on_db!(c, |c| {
            let done = sqlx::query(
                "INSERT INTO stage_applies (stage_id, stack, applied_at, applied_to, applied_by, \
                 refusal, refused_at) VALUES ($1, $2, $3, $4, $5, $6, $7) \
                 ON CONFLICT (stage_id, stack) DO NOTHING",
            )
            .bind(id)
            .bind(stack)
            .bind(applied_at)
            .bind(to)
            .bind(by)
            .bind(refusal)
            .bind(refused_at)
            .execute(c)
            .await
            .map_err(cx.err("record a class apply of an approved stage"))?;
            Ok(done.rows_affected() == 1)
        })
    }
}

impl Ledger {
    /// Stages approved for this handle's class, of other stacks, that this
    /// stack has not applied or refused yet. Empty without a class.
    pub async fn class_stages_to_apply(&self) -> Result<Vec<Stage>> {
        let Some(class) = self.ctx.class() else {
            return Ok(Vec::new());
        };
        let op = "list the stages approved for this stack's class";
        let mut c = self.conn(op).await?;
        on_db!(c.conn(), |c| {
            sqlx::query_as(SQL_CLASS_STAGES_TO_APPLY)
                .bind(class)
                .bind(self.ctx.stack())
                .fetch_all(c)
                .await
                .map_err(self.ctx.err(op))
        })
    }

    /// Each classmate's apply of stage `id`, by stack name.
    pub async fn class_applies(&self, id: StageId) -> Result<Vec<HostApply>> {
        let op = "read a stage's class applies";
        let mut c = self.conn(op).await?;
        on_db!(c.conn(), |c| {
            sqlx::query_as("SELECT * FROM stage_applies WHERE stage_id = $1 ORDER BY stack")
                .bind(id)
                .fetch_all(c)
                .await
                .map_err(self.ctx.err(op))
        })
    }

    /// The stacks that have run a cycle in `class`, by name.
    pub async fn class_stacks(&self, class: &str) -> Result<Vec<String>> {
        let op = "list the stacks of a class";
        let mut c = self.conn(op).await?;
        on_db!(c.conn(), |c| {
            sqlx::query_scalar(
                "SELECT DISTINCT stack FROM cycles WHERE class = $1 AND stack IS NOT NULL ORDER BY stack",
            )
            .bind(class)
            .fetch_all(c)
            .await
            .map_err(self.ctx.err(op))
        })
    }
}
