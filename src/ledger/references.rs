//! Reference output hashes for the hash gate, pinned per (stack, prompt set).
//! Append-only: a re-pin adds a row with who and why; the latest one rules.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::FromRow;

use super::Conn;
use super::codec::ts;
use super::error::Ctx;
use super::ids::ReferenceHashId;
use super::{Ledger, Result, WriteTx};
use crate::vocab::Digest;

/// A reference hash about to be pinned.
#[derive(Debug, Clone, PartialEq, Serialize, FromRow)]
pub struct NewReferenceHash {
    pub stack: String,
    pub prompt_set: String,
    /// The profile whose output it is.
    pub profile_digest: Digest,
    pub output_hash: String,
    pub pinned_at: DateTime<Utc>,
    /// Who pinned it (a person's name, or `orchestrator` for the first pin).
    pub pinned_by: String,
    pub reason: String,
}

/// A stored reference hash: its id and the pin as recorded.
#[derive(Debug, Clone, PartialEq, Serialize, FromRow)]
pub struct ReferenceHash {
    pub id: ReferenceHashId,
    #[sqlx(flatten)]
    #[serde(flatten)]
    pub recorded: NewReferenceHash,
}

reads_as_recorded!(ReferenceHash => NewReferenceHash);

pub(crate) const SQL_CURRENT_REFERENCE: &str = "SELECT * FROM reference_hashes \
     WHERE stack = $1 AND prompt_set = $2 ORDER BY pinned_at DESC, id DESC LIMIT 1";

async fn insert(c: Conn<'_>, cx: &Ctx, r: &NewReferenceHash) -> Result<ReferenceHashId> {
    on_db!(c, |c| {
        sqlx::query_scalar(
            "INSERT INTO reference_hashes (stack, prompt_set, profile_digest, output_hash, pinned_at, \
             pinned_by, reason) VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id",
        )
        .bind(&r.stack)
        .bind(&r.prompt_set)
        .bind(&r.profile_digest)
        .bind(&r.output_hash)
        .bind(ts(&r.pinned_at))
        .bind(&r.pinned_by)
        .bind(&r.reason)
        .fetch_one(c)
        .await
        .map_err(cx.err("pin a reference hash"))
    })
}

async fn current(
    c: Conn<'_>,
    cx: &Ctx,
    stack: &str,
    prompt_set: &str,
) -> Result<Option<ReferenceHash>> {
    on_db!(c, |c| {
        sqlx::query_as(SQL_CURRENT_REFERENCE)
            .bind(stack)
            .bind(prompt_set)
            .fetch_optional(c)
            .await
            .map_err(cx.err("read the reference hash"))
    })
}

impl WriteTx {
    pub async fn pin_reference_hash(&mut self, r: &NewReferenceHash) -> Result<ReferenceHashId> {
        let (c, cx) = self.parts();
        insert(c, cx, r).await
    }

    /// [`Ledger::current_reference_hash`] inside this transaction.
    pub async fn current_reference_hash(
        &mut self,
        stack: &str,
        prompt_set: &str,
    ) -> Result<Option<ReferenceHash>> {
        let (c, cx) = self.parts();
        current(c, cx, stack, prompt_set).await
    }
}

impl Ledger {
    /// [`WriteTx::pin_reference_hash`] as its own transaction.
    pub async fn pin_reference_hash(&self, r: &NewReferenceHash) -> Result<ReferenceHashId> {
        let mut c = self.conn("pin a reference hash").await?;
        insert(c.conn(), &self.ctx, r).await
    }

    /// The reference hash in force for (stack, prompt set): the latest pinned.
    pub async fn current_reference_hash(
        &self,
        stack: &str,
        prompt_set: &str,
    ) -> Result<Option<ReferenceHash>> {
        let mut c = self.conn("read the reference hash").await?;
        current(c.conn(), &self.ctx, stack, prompt_set).await
    }
}
