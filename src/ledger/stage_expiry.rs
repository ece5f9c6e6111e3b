//! Which staged wins expire when a profile moves: each staged win is an
//! edge from the profile it was measured on (its base) to its candidate,
//! and a win measured on top of a waiting win (`[cycle] build_on_staged`)
//! extends a chain. The walks over those edges are pure functions, tested
//! without a database; the expiry writes go through [`super::stages`]'s
//! one decision, `settle`.

use chrono::{DateTime, Utc};

use super::Conn;
use super::Result;
use super::error::Ctx;
use super::ids::StageId;
use super::stages::settle;
use crate::vocab::{Digest, StageState};

/// Of the staged wins `(id, base, candidate)`, those measured on top of
/// `candidate` (the candidate of a win whose base was `base`, just
/// rejected), directly or through other staged wins. The walk never comes
/// back through `base`: a win measured there is not built on the rejected
/// one.
pub(crate) fn built_on(
    base: &Digest,
    candidate: &Digest,
    staged: &[(StageId, Digest, Digest)],
) -> Vec<StageId> {
    let reached = reached(candidate, Some(base), staged);
    staged
        .iter()
        .filter(|(_, from, _)| reached.contains(&from))
        .map(|(id, _, _)| *id)
        .collect()
}

/// The profiles reached from `start` through the candidates of staged wins
/// `(id, base, candidate)`, `start` included, never stepping onto `avoid`.
fn reached<'a>(
    start: &'a Digest,
    avoid: Option<&Digest>,
    staged: &'a [(StageId, Digest, Digest)],
) -> Vec<&'a Digest> {
    let mut reached = vec![start];
    let mut grew = true;
    while grew {
        grew = false;
        for (_, from, to) in staged {
            if reached.contains(&from) && Some(to) != avoid && !reached.contains(&to) {
                reached.push(to);
                grew = true;
            }
        }
    }
    reached
}

/// Of the staged wins `(id, base, candidate)`, those whose base is not
/// reached from `live` through the candidates of other staged wins.
pub(crate) fn stale_stages(live: &Digest, staged: &[(StageId, Digest, Digest)]) -> Vec<StageId> {
    let reached = reached(live, None, staged);
    staged
        .iter()
        .filter(|(_, base, _)| !reached.contains(&base))
        .map(|(id, _, _)| *id)
        .collect()
}

/// Expires every staged win whose base is neither `live` nor, through a
/// chain of staged wins, built on it (`[cycle] build_on_staged`): a win
/// measured on top of a waiting win stays while that one waits, and goes
/// when it goes.
pub(super) async fn expire_stale(
    mut c: Conn<'_>,
    cx: &Ctx,
    live: &Digest,
    reason: &str,
    at: DateTime<Utc>,
) -> Result<Vec<StageId>> {
    let staged = staged_edges(c.re(), cx).await?;
    let stale = stale_stages(live, &staged);
    settle_all(c, cx, &stale, reason, at).await?;
    Ok(stale)
}

/// This stack's staged wins as `(id, base, candidate)`, oldest first.
pub(super) async fn staged_edges(c: Conn<'_>, cx: &Ctx) -> Result<Vec<(StageId, Digest, Digest)>> {
    on_db!(c, |c| {
        sqlx::query_as(
            "SELECT id, base_digest, candidate_digest FROM stages WHERE state = 'staged' \
             AND (CAST($1 AS TEXT) IS NULL OR stack = $1) ORDER BY id",
        )
        // Another stack's live profile says nothing about this one's stages.
        .bind(cx.stack())
        .fetch_all(c)
        .await
        .map_err(cx.err("read the staged wins"))
    })
}

/// Expires each of `ids` with `reason`, decided by `orchestrator`.
pub(super) async fn settle_all(
    mut c: Conn<'_>,
    cx: &Ctx,
    ids: &[StageId],
    reason: &str,
    at: DateTime<Utc>,
) -> Result<()> {
    for &id in ids {
        settle(
            c.re(),
            cx,
            id,
            StageState::Expired,
            "orchestrator",
            Some(reason),
            at,
        )
        .await?;
    }
    Ok(())
}
