//! Proposer answers: the prompt sent, the raw answer, and either the parsed
//! proposal or why it was refused. One row per attempt.

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use sqlx::{FromRow, Row};

use super::Conn;
use super::codec::{canonical_json, int_col, json_col, opt_json_col, ts};
use super::error::Ctx;
use super::ids::{CycleId, ProposalId};
use super::{Ledger, Result, WriteTx};
use crate::vocab::ProposerKind;

/// Why an answer was refused: a short snake_case code for counting (e.g.
/// `menu::Rejection::kind()`: `out_of_bounds`, `duplicate`) and the message
/// that was shown back to the model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ProposalRejection {
    pub kind: String,
    pub reason: String,
}

/// One attempt of a proposer. At least one of `parsed` and `rejection` is
/// set; both are for a valid proposal refused as a duplicate.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NewProposal {
    pub cycle_id: CycleId,
    pub proposer: ProposerKind,
    /// 1 for the first answer of the cycle, 2 for the first retry, ...
    pub attempt: u32,
    pub created_at: DateTime<Utc>,
    /// The prompt sent (`None` for a proposer without one, the bandit).
    pub prompt: Option<String>,
    /// The answer exactly as received. The only place the model's words are kept.
    pub raw_answer: Option<String>,
    pub parsed: Option<Value>,
    pub rejection: Option<ProposalRejection>,
    /// Why this proposer answered when it is not the configured one (the
    /// bandit as the model's fallback); `None` otherwise.
    pub note: Option<String>,
}

// Hand-written for the JSON column and the rejection, two columns in one.
from_row!(NewProposal, |row| {
    let kind: Option<String> = row.try_get("rejection_kind")?;
    let reason: Option<String> = row.try_get("rejection")?;
    Ok(NewProposal {
        cycle_id: row.try_get("cycle_id")?,
        proposer: row.try_get("proposer")?,
        attempt: int_col(row, "attempt")?,
        created_at: row.try_get("created_at")?,
        prompt: row.try_get("prompt")?,
        raw_answer: row.try_get("raw_answer")?,
        parsed: opt_json_col(row, "parsed")?,
        rejection: kind
            .zip(reason)
            .map(|(kind, reason)| ProposalRejection { kind, reason }),
        note: row.try_get("note")?,
    })
});

/// A stored proposal: its id and the attempt as recorded.
#[derive(Debug, Clone, PartialEq, Serialize, FromRow)]
pub struct Proposal {
    pub id: ProposalId,
    #[sqlx(flatten)]
    #[serde(flatten)]
    pub recorded: NewProposal,
}

reads_as_recorded!(Proposal => NewProposal);

async fn insert(c: Conn<'_>, cx: &Ctx, p: &NewProposal) -> Result<ProposalId> {
    on_db!(c, |c| {
        sqlx::query_scalar(
            "INSERT INTO proposals \
             (cycle_id, proposer, attempt, created_at, prompt, raw_answer, parsed, rejection_kind, rejection, note) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) RETURNING id",
        )
        .bind(p.cycle_id)
        .bind(p.proposer)
        .bind(i64::from(p.attempt))
        .bind(ts(&p.created_at))
        .bind(p.prompt.as_deref())
        .bind(p.raw_answer.as_deref())
        .bind(p.parsed.as_ref().map(canonical_json))
        .bind(p.rejection.as_ref().map(|r| r.kind.as_str()))
        .bind(p.rejection.as_ref().map(|r| r.reason.as_str()))
        .bind(p.note.as_deref())
        .fetch_one(c)
        .await
        .map_err(cx.err("record a proposal"))
    })
}

async fn of_cycle(c: Conn<'_>, cx: &Ctx, cycle_id: CycleId) -> Result<Vec<Proposal>> {
    on_db!(c, |c| {
        sqlx::query_as("SELECT * FROM proposals WHERE cycle_id = $1 ORDER BY attempt")
            .bind(cycle_id)
            .fetch_all(c)
            .await
            .map_err(cx.err("read a cycle's proposals"))
    })
}

/// The latest cycle whose valid proposal was exactly `parsed` and which the
/// planner refused before any experiment existed (a `rejected` verdict with
/// no experiment, on a proposal nobody refused), while the cycle built on
/// `live_digest` (its base: the live profile, or a waiting win's candidate).
///
/// The proposal comes first (`CROSS JOIN` fixes the order) through its
/// partial index, newest first: left to itself SQLite starts from every
/// experiment-less verdict, which grows with every refusal and failure.
pub(crate) const SQL_PLANNER_REFUSED: &str = "SELECT p.cycle_id \
     FROM proposals p INDEXED BY proposals_valid_by_parsed \
     CROSS JOIN verdicts v ON v.cycle_id = p.cycle_id \
     CROSS JOIN observations o ON o.cycle_id = p.cycle_id \
     CROSS JOIN cycles c ON c.id = p.cycle_id \
     WHERE p.parsed = $1 AND p.rejection IS NULL \
       AND v.experiment_id IS NULL AND v.kind = 'rejected' \
       AND o.base_profile_digest = $2 \
       AND (CAST($3 AS TEXT) IS NULL OR c.stack = $3) \
     ORDER BY p.id DESC LIMIT 1";

/// [`SQL_PLANNER_REFUSED`] for PostgreSQL, which has neither `INDEXED BY`
/// nor a `CROSS JOIN … ON`; its planner picks the partial index itself.
pub(crate) const SQL_PLANNER_REFUSED_PG: &str = "SELECT p.cycle_id \
     FROM proposals p \
     JOIN verdicts v ON v.cycle_id = p.cycle_id \
     JOIN observations o ON o.cycle_id = p.cycle_id \
     JOIN cycles c ON c.id = p.cycle_id \
     WHERE p.parsed = $1 AND p.rejection IS NULL \
       AND v.experiment_id IS NULL AND v.kind = 'rejected' \
       AND o.base_profile_digest = $2 \
       AND (CAST($3 AS TEXT) IS NULL OR c.stack = $3) \
     ORDER BY p.id DESC LIMIT 1";

/// Every valid proposal the planner refused while the cycle's base (the live
/// profile, or a waiting win's candidate) was `$1`: refused in the proposer's own loop (`not_measured`), or, before
/// that loop asked the planner, accepted and then refused (a `rejected`
/// verdict with no experiment). From the cycles that built on that profile.
pub(crate) const SQL_PLANNER_REFUSALS_ON: &str = "SELECT p.cycle_id, p.parsed \
     FROM observations o \
     JOIN cycles c ON c.id = o.cycle_id \
     JOIN proposals p ON p.cycle_id = o.cycle_id \
     LEFT JOIN verdicts v ON v.cycle_id = o.cycle_id AND v.experiment_id IS NULL \
     WHERE o.base_profile_digest = $1 AND p.parsed IS NOT NULL \
       AND (p.rejection_kind = 'not_measured' OR (p.rejection IS NULL AND v.kind = 'rejected')) \
       AND (CAST($2 AS TEXT) IS NULL OR c.stack = $2)";

impl WriteTx {
    pub async fn insert_proposal(&mut self, p: &NewProposal) -> Result<ProposalId> {
        let (c, cx) = self.parts();
        insert(c, cx, p).await
    }
}

impl Ledger {
    /// [`WriteTx::insert_proposal`] as its own transaction.
    pub async fn insert_proposal(&self, p: &NewProposal) -> Result<ProposalId> {
        let mut c = self.conn("record a proposal").await?;
        insert(c.conn(), &self.ctx, p).await
    }

    /// The duplicate check's second half: the latest cycle in which the
    /// planner refused exactly this proposal (`parsed`, as stored) while the
    /// cycle built on `base_digest` (the live profile, or the candidate of a
    /// win that waits for approval). Such a proposal was decided without a
    /// measurement ("not predicted to help", "does not fit"), and proposing
    /// it again on the same profile only wastes a cycle.
    pub async fn planner_refused(
        &self,
        parsed: &Value,
        base_digest: &crate::vocab::Digest,
    ) -> Result<Option<CycleId>> {
        let mut c = self.conn("look for an identical refused proposal").await?;
        on_db!(c.conn(), |c, db| sqlx::query_scalar(
            db.pick(SQL_PLANNER_REFUSED, SQL_PLANNER_REFUSED_PG)
        )
        .bind(canonical_json(parsed))
        .bind(base_digest)
        .bind(self.ctx.stack())
        .fetch_optional(c)
        .await
        .map_err(self.ctx.err("look for an identical refused proposal")))
    }

    /// Every proposal the planner refused on `base_digest` (a cycle's base),
    /// newest first: (cycle, parsed proposal as stored).
    pub async fn planner_refusals_on(
        &self,
        base_digest: &crate::vocab::Digest,
    ) -> Result<Vec<(CycleId, Value)>> {
        let op = "list the proposals the planner refused on a profile";
        let mut c = self.conn(op).await?;
        let mut out = on_db!(c.conn(), |c| sqlx::query(SQL_PLANNER_REFUSALS_ON)
            .bind(base_digest)
            .bind(self.ctx.stack())
            .fetch_all(c)
            .await
            .map_err(self.ctx.err(op))?
            .iter()
            .map(|row| -> Result<(CycleId, Value), sqlx::Error> {
                Ok((row.try_get("cycle_id")?, json_col(row, "parsed")?))
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(self.ctx.err(op))?);
        out.sort_by_key(|row| std::cmp::Reverse(row.0));
        Ok(out)
    }

    /// Every attempt of a cycle, in order.
    pub async fn proposals(&self, cycle_id: CycleId) -> Result<Vec<Proposal>> {
        let mut c = self.conn("read a cycle's proposals").await?;
        of_cycle(c.conn(), &self.ctx, cycle_id).await
    }
}
