//! Who confirms a win (issue #18: hosts of one class confirm each other).
//! A win on one stack may be confirmed by its own daemon or by a classmate
//! (a stack of the same `[stack] class` whose live profile is the win's
//! base); a claim, taken in the write transaction that records the
//! confirmation experiment and before anything is measured, makes sure
//! only one of them does. The claim's primary key is the win: of two
//! daemons claiming one win in racing transactions (serialised by the
//! ledger's write lock), the second finds the row and changes nothing.
//!
//! A claim whose confirmation was interrupted (its cycle `aborted`, its
//! verdict `failed`: a shutdown or a crash cut it short, so it judged
//! nothing) may be taken over, by its own stack or another one; any other
//! claim is the holder's for good: its confirmation decided the win.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::Row;

use super::Conn;
use super::codec::ts;
use super::error::Ctx;
use super::experiments::{Experiment, NewExperiment};
use super::ids::ExperimentId;
use super::{Ledger, Result, WriteTx};
use crate::vocab::Digest;

/// A win's claim: the stack confirming it, with which experiment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ConfirmationClaim {
    pub win_experiment_id: ExperimentId,
    /// The claiming stack; `None` for an unscoped handle (tests, benches).
    pub stack: Option<String>,
    pub claimed_at: DateTime<Utc>,
    pub confirmation_id: ExperimentId,
    /// Its confirmation was cut short (cycle `aborted`, verdict `failed`):
    /// the claim may be taken over.
    pub interrupted: bool,
}

from_row!(ConfirmationClaim, |row| {
    Ok(ConfirmationClaim {
        win_experiment_id: row.try_get("win_experiment_id")?,
        stack: row.try_get("stack")?,
        claimed_at: row.try_get("claimed_at")?,
        confirmation_id: row.try_get("confirmation_id")?,
        interrupted: row.try_get("interrupted")?,
    })
});

/// Whether the claim's confirmation was interrupted, as a boolean column.
const SQL_INTERRUPTED: &str = "EXISTS (SELECT 1 FROM experiments x \
       JOIN cycles xc ON xc.id = x.cycle_id JOIN verdicts xv ON xv.experiment_id = x.id \
       WHERE x.id = confirmation_claims.confirmation_id \
         AND xc.status = 'aborted' AND xv.kind = 'failed')";

/// A classmate's unconfirmed wins on one base profile, newest first: wins
/// (not remeasures, not manual comparisons, not confirmations, not composites) of cycles of class
/// `$1` but another stack than `$2`, on base `$3`, that no experiment
/// confirms or tried to (claims came with migration 20261201230001; older
/// confirmations have none), and that no stage holds.
pub(crate) const SQL_CLASSMATE_WINS: &str = "SELECT e.* FROM experiments e \
     JOIN cycles c ON c.id = e.cycle_id \
     JOIN verdicts v ON v.experiment_id = e.id \
     WHERE e.base_digest = $3 AND c.class = $1 AND c.stack IS DISTINCT FROM $2 \
       AND v.kind = 'win' AND e.menu_id NOT IN ('remeasure', 'manual') AND e.confirmation_of IS NULL \
       AND NOT EXISTS (SELECT 1 FROM experiments k WHERE k.confirmation_of = e.id) \
       AND NOT EXISTS (SELECT 1 FROM confirmation_claims k WHERE k.win_experiment_id = e.id) \
       AND NOT EXISTS (SELECT 1 FROM stages s WHERE s.experiment_id = e.id) \
       AND NOT EXISTS (SELECT 1 FROM compositions m WHERE m.experiment_id = e.id) \
     ORDER BY e.id DESC LIMIT $4";

async fn get(c: Conn<'_>, cx: &Ctx, win: ExperimentId) -> Result<Option<ConfirmationClaim>> {
    on_db!(c, |c| {
        sqlx::query_as(&format!(
            "SELECT win_experiment_id, stack, claimed_at, confirmation_id, {SQL_INTERRUPTED} \
             AS interrupted FROM confirmation_claims WHERE win_experiment_id = $1"
        ))
        .bind(win)
        .fetch_optional(c)
        .await
        .map_err(cx.err("read a win's confirmation claim"))
    })
}

/// Takes the claim on `win` for this handle's stack with `confirmation`:
/// a new claim, this stack's own, or one whose confirmation was
/// interrupted. `false` when another stack holds it.
async fn claim(
    c: Conn<'_>,
    cx: &Ctx,
    win: ExperimentId,
    confirmation: ExperimentId,
    at: DateTime<Utc>,
) -> Result<bool> {
    on_db!(c, |c| {
        let op = "claim a win's confirmation";
        let inserted = sqlx::query(
            "INSERT INTO confirmation_claims (win_experiment_id, stack, claimed_at, confirmation_id) \
             VALUES ($1, $2, $3, $4) ON CONFLICT (win_experiment_id) DO NOTHING",
        )
        .bind(win)
        .bind(cx.stack())
        .bind(ts(&at))
        .bind(confirmation)
        .execute(&mut *c)
        .await
        .map_err(cx.err(op))?
        .rows_affected();
        if inserted == 1 {
            return Ok(true);
        }
        let taken = sqlx::query(&format!(
            "UPDATE confirmation_claims SET stack = $2, claimed_at = $3, confirmation_id = $4 \
             WHERE win_experiment_id = $1 AND (stack = $2 \
               OR (stack IS NULL AND CAST($2 AS TEXT) IS NULL) OR {SQL_INTERRUPTED})"
        ))
        .bind(win)
        .bind(cx.stack())
        .bind(ts(&at))
        .bind(confirmation)
        .execute(&mut *c)
        .await
        .map_err(cx.err(op))?
        .rows_affected();
        Ok(taken == 1)
    })
}

impl WriteTx {
    /// [`Ledger::claim_confirmation`]'s claim, for a confirmation already
    /// recorded in this transaction.
    pub async fn claim_confirmation(
        &mut self,
        win: ExperimentId,
        confirmation: ExperimentId,
        at: DateTime<Utc>,
    ) -> Result<bool> {
        let (c, cx) = self.parts();
        claim(c, cx, win, confirmation, at).await
    }
}

impl Ledger {
    /// Records the confirmation experiment `e` of the win `win` and claims
    /// the win for this handle's stack, in one write transaction: `None`
    /// (and nothing recorded) when another stack holds the claim.
    pub async fn claim_confirmation(
        &self,
        win: ExperimentId,
        e: &NewExperiment,
        at: DateTime<Utc>,
    ) -> Result<Option<ExperimentId>> {
        if e.confirmation_of != Some(win) {
            return Err(super::LedgerError::NotItsConfirmation {
                win,
                names: e
                    .confirmation_of
                    .map_or_else(|| "no experiment".into(), |c| format!("experiment {c}")),
            });
        }
        let mut tx = self.begin_write().await?;
        let id = tx.insert_experiment(e).await?;
        if !tx.claim_confirmation(win, id, at).await? {
            // Dropping the transaction rolls the experiment back.
            return Ok(None);
        }
        tx.commit().await?;
        Ok(Some(id))
    }

    /// The claim on a win, if any stack has taken one.
    pub async fn confirmation_claim(&self, win: ExperimentId) -> Result<Option<ConfirmationClaim>> {
        let mut c = self.conn("read a win's confirmation claim").await?;
        get(c.conn(), &self.ctx, win).await
    }

    /// Up to `limit` unconfirmed wins of this handle's classmates (stacks of
    /// its class but not itself) measured on `base`, newest first. Empty on
    /// a handle with no class: a stack names its class to take part.
    pub async fn classmate_wins(&self, base: &Digest, limit: u32) -> Result<Vec<Experiment>> {
        let Some(class) = self.ctx.class() else {
            return Ok(Vec::new());
        };
        let op = "look for a classmate's unconfirmed win";
        let mut c = self.conn(op).await?;
        on_db!(c.conn(), |c| {
            sqlx::query_as(SQL_CLASSMATE_WINS)
                .bind(class)
                .bind(self.ctx.stack())
                .bind(base)
                .bind(i64::from(limit))
                .fetch_all(c)
                .await
                .map_err(self.ctx.err(op))
        })
    }
}
