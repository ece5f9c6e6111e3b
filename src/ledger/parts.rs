//! The measured parts of a profile's token from its recent runs: what the
//! bandit reads to try first the lever acting on the largest part
//! (`brain::levers`).

use sqlx::Row;

use super::Ledger;
use super::Result;
use super::runs::TokenParts;
use crate::vocab::Digest;

/// One valid run's seconds per token and the parts the stack reported.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MeasuredToken {
    pub seconds_per_token: f64,
    pub parts: TokenParts,
}

/// Either arm of any experiment of this handle's stack that ran the
/// profile, newest first; runs without a measurement or without any part
/// are left out (warmups belong to no arm).
const SQL_RECENT_PARTS: &str = "SELECT r.seconds_per_token, r.trunk_seconds_per_token, \
     r.expert_seconds_per_token, r.far_hit_share, r.draft_acceptance \
     FROM runs r JOIN experiments e ON e.id = r.experiment_id \
     JOIN cycles c ON c.id = e.cycle_id \
     WHERE r.seconds_per_token IS NOT NULL \
       AND (r.trunk_seconds_per_token IS NOT NULL OR r.expert_seconds_per_token IS NOT NULL) \
       AND ((r.arm = 'baseline' AND e.base_digest = $1) \
         OR (r.arm = 'candidate' AND e.candidate_digest = $1)) \
       AND (CAST($3 AS TEXT) IS NULL OR c.stack = $3) \
     ORDER BY r.id DESC LIMIT $2";

impl Ledger {
    /// The last `limit` runs of the profile `digest` that reported parts of
    /// a token, newest first.
    pub async fn recent_token_parts(
        &self,
        digest: &Digest,
        limit: u32,
    ) -> Result<Vec<MeasuredToken>> {
        let op = "read a profile's measured parts of a token";
        let mut c = self.conn(op).await?;
        let cx = &self.ctx;
        let rows = on_db!(c.conn(), |c| {
            sqlx::query(SQL_RECENT_PARTS)
                .bind(digest)
                .bind(i64::from(limit))
                .bind(cx.stack())
                .fetch_all(c)
                .await
                .map_err(cx.err(op))?
                .iter()
                .map(|row| {
                    Ok(MeasuredToken {
                        seconds_per_token: row.try_get(0)?,
                        parts: TokenParts {
                            trunk_seconds_per_token: row.try_get(1)?,
                            expert_seconds_per_token: row.try_get(2)?,
                            far_hit_share: row.try_get(3)?,
                            draft_acceptance: row.try_get(4)?,
                        },
                    })
                })
                .collect::<std::result::Result<Vec<_>, sqlx::Error>>()
                .map_err(cx.err(op))
        })?;
        Ok(rows)
    }
}
