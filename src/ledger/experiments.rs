//! Experiments (one candidate profile against one base profile), the recent
//! history the proposers read, and the duplicate check. A stage's
//! realization A/B (`realizations`) is no proposal: neither reads it.

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use sqlx::{FromRow, Row};

use super::Conn;
use super::codec::{canonical_json, json_col, opt_int_col, opt_json_col, require_object, ts};
use super::error::Ctx;
use super::ids::{CycleId, ExperimentId, ProposalId};
use super::{Interval, Ledger, Result, WriteTx};
use crate::menu::MenuId;
use crate::vocab::{Digest, Method, ProposerKind, VerdictKind};

/// An experiment about to be measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NewExperiment {
    pub cycle_id: CycleId,
    /// The proposal that chose it; `None` when no proposer did (a scheduled
    /// noise-floor refresh).
    pub proposal_id: Option<ProposalId>,
    /// For the independent second A/B of a win: the experiment it confirms.
    pub confirmation_of: Option<ExperimentId>,
    pub created_at: DateTime<Utc>,
    pub menu_id: MenuId,
    /// The validated parameters, a JSON object (stored with sorted keys).
    pub parameters: Value,
    pub method: Method,
    pub base_profile: String,
    pub base_digest: Digest,
    pub candidate_profile: String,
    pub candidate_digest: Digest,
    /// What the planner worked out, e.g. the predicted hit rates of
    /// `rerank_pins` (new pins, current pins, LRU, Belady's MIN).
    pub planner_notes: Option<Value>,
}

// Hand-written for the JSON columns: `json_col` keeps the column's name in
// a decoding error and reads a stored `null` as `Some(Null)`.
from_row!(NewExperiment, |row| {
    Ok(NewExperiment {
        cycle_id: row.try_get("cycle_id")?,
        proposal_id: row.try_get("proposal_id")?,
        confirmation_of: row.try_get("confirmation_of")?,
        created_at: row.try_get("created_at")?,
        menu_id: row.try_get("menu_id")?,
        parameters: json_col(row, "parameters")?,
        method: row.try_get("method")?,
        base_profile: row.try_get("base_profile")?,
        base_digest: row.try_get("base_digest")?,
        candidate_profile: row.try_get("candidate_profile")?,
        candidate_digest: row.try_get("candidate_digest")?,
        planner_notes: opt_json_col(row, "planner_notes")?,
    })
});

/// A stored experiment: its id and the experiment as recorded, whose
/// fields it reads as its own.
#[derive(Debug, Clone, PartialEq, Serialize, FromRow)]
pub struct Experiment {
    pub id: ExperimentId,
    #[sqlx(flatten)]
    #[serde(flatten)]
    pub recorded: NewExperiment,
}

reads_as_recorded!(Experiment => NewExperiment);

/// An experiment as the proposers see it: what was tried, by whom, and what
/// came of it (`verdict` is `None` while it is being measured).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ExperimentOutcome {
    pub experiment_id: ExperimentId,
    pub cycle_id: CycleId,
    pub created_at: DateTime<Utc>,
    pub menu_id: MenuId,
    pub parameters: Value,
    pub base_digest: Digest,
    pub proposer: Option<ProposerKind>,
    pub confirmation_of: Option<ExperimentId>,
    pub verdict: Option<VerdictKind>,
    pub effect: Option<f64>,
    pub interval: Option<Interval>,
    pub noise_floor: Option<f64>,
    pub pairs: Option<u32>,
}

from_row!(ExperimentOutcome, |row| {
    let low: Option<f64> = row.try_get("interval_low")?;
    let high: Option<f64> = row.try_get("interval_high")?;
    Ok(ExperimentOutcome {
        experiment_id: row.try_get("id")?,
        cycle_id: row.try_get("cycle_id")?,
        created_at: row.try_get("created_at")?,
        menu_id: row.try_get("menu_id")?,
        parameters: json_col(row, "parameters")?,
        base_digest: row.try_get("base_digest")?,
        proposer: row.try_get("proposer")?,
        confirmation_of: row.try_get("confirmation_of")?,
        verdict: row.try_get("kind")?,
        effect: row.try_get("effect")?,
        interval: low.zip(high).map(|(low, high)| Interval { low, high }),
        noise_floor: row.try_get("noise_floor")?,
        pairs: opt_int_col(row, "pairs")?,
    })
});

/// An earlier experiment identical to a new proposal, and how it ended.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PriorDecision {
    pub experiment_id: ExperimentId,
    pub verdict: VerdictKind,
    /// When its A/B started: what an `inconclusive` one's back-off counts
    /// from ([`crate::brain::inconclusive`]), as the history's does.
    pub created_at: DateTime<Utc>,
    pub decided_at: DateTime<Utc>,
}

/// One experiment measured on a base profile ([`Ledger::decided_on`]).
#[derive(Debug, Clone, PartialEq)]
pub struct DecidedOn {
    pub experiment_id: ExperimentId,
    /// When its A/B started.
    pub created_at: DateTime<Utc>,
    pub menu_id: MenuId,
    /// As stored.
    pub parameters: Value,
    pub verdict: VerdictKind,
}

from_row!(DecidedOn, |row| {
    Ok(DecidedOn {
        experiment_id: row.try_get("id")?,
        created_at: row.try_get("created_at")?,
        menu_id: row.try_get("menu_id")?,
        parameters: json_col(row, "parameters")?,
        verdict: row.try_get("kind")?,
    })
});

from_row!(PriorDecision, |row| {
    Ok(PriorDecision {
        experiment_id: row.try_get("id")?,
        verdict: row.try_get("kind")?,
        created_at: row.try_get("created_at")?,
        decided_at: row.try_get("decided_at")?,
    })
});

/// The loop's own experiments, newest first: a manual comparison's
/// experiments (`menu_id = 'manual'`, `orchestrator compare`) are no part
/// of the history the proposers learn from, nor a win the loop confirms
/// and stages. (Filtered on the experiment, not on its cycle's proposer:
/// a win recorded by hand in a `human` cycle is still the loop's to confirm.)
pub(crate) const SQL_RECENT_EXPERIMENTS: &str = "SELECT e.id, e.cycle_id, e.created_at, e.menu_id, e.parameters, e.base_digest, \
            e.confirmation_of, p.proposer, v.kind, v.effect, v.interval_low, v.interval_high, \
            v.noise_floor, v.pairs \
     FROM experiments e \
     JOIN cycles c ON c.id = e.cycle_id \
     LEFT JOIN proposals p ON p.id = e.proposal_id \
     LEFT JOIN verdicts v ON v.experiment_id = e.id \
     WHERE (CAST($2 AS TEXT) IS NULL OR c.stack = $2) AND e.menu_id <> 'manual' \
       AND NOT EXISTS (SELECT 1 FROM realizations z WHERE z.experiment_id = e.id) \
     ORDER BY e.id DESC LIMIT $1";

/// Only verdicts that measured something count as "decided": a `failed` or
/// `rejected` experiment never measured, so trying it again is not a repeat.
/// Every such experiment of the value, newest first: whether `inconclusive`
/// ones still decide it depends on how many and how old
/// ([`crate::brain::inconclusive`]).
pub(crate) const SQL_DUPLICATE_DECIDED: &str = "SELECT e.id, e.created_at, v.kind, v.decided_at FROM experiments e \
     JOIN verdicts v ON v.experiment_id = e.id \
     JOIN cycles c ON c.id = e.cycle_id \
     WHERE e.menu_id = $1 AND e.base_digest = $2 AND e.parameters = $3 \
       AND v.kind IN ('win', 'loss', 'within_noise', 'inconclusive', 'hash_mismatch') \
       AND (CAST($4 AS TEXT) IS NULL OR c.stack = $4) \
       AND NOT EXISTS (SELECT 1 FROM realizations z WHERE z.experiment_id = e.id) \
     ORDER BY e.id DESC";

/// Every experiment measured on a base profile (the duplicate check's
/// list): what the proposer is told it need not propose again. Through
/// `experiments_by_identity`, one menu id after the other; callers order.
pub(crate) const SQL_DECIDED_ON: &str = "SELECT e.id, e.created_at, e.menu_id, e.parameters, v.kind FROM experiments e \
     JOIN verdicts v ON v.experiment_id = e.id \
     JOIN cycles c ON c.id = e.cycle_id \
     WHERE e.menu_id IN ('rerank_pins', 'deepen_warm_set', 'stage_speculative', 'rebalance_trunk_cache') \
       AND e.base_digest = $1 \
       AND v.kind IN ('win', 'loss', 'within_noise', 'inconclusive', 'hash_mismatch') \
       AND (CAST($2 AS TEXT) IS NULL OR c.stack = $2) \
       AND NOT EXISTS (SELECT 1 FROM realizations z WHERE z.experiment_id = e.id)";

/// A scoped handle sees its own stack's confirmations only: a daemon never
/// takes another stack's A/B for the confirmation of a win.
pub(crate) const SQL_CONFIRMATIONS: &str = "SELECT e.* FROM experiments e \
     JOIN cycles c ON c.id = e.cycle_id \
     WHERE e.confirmation_of = $1 AND (CAST($2 AS TEXT) IS NULL OR c.stack = $2) \
     ORDER BY e.id";

async fn insert(c: Conn<'_>, cx: &Ctx, e: &NewExperiment) -> Result<ExperimentId> {
    on_db!(c, |c| {
        require_object("an experiment's parameters", &e.parameters)?;
        sqlx::query_scalar(
            "INSERT INTO experiments (cycle_id, proposal_id, confirmation_of, created_at, menu_id, \
         parameters, method, base_profile, base_digest, candidate_profile, candidate_digest, \
         planner_notes) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) RETURNING id",
        )
        .bind(e.cycle_id)
        .bind(e.proposal_id)
        .bind(e.confirmation_of)
        .bind(ts(&e.created_at))
        .bind(e.menu_id)
        .bind(canonical_json(&e.parameters))
        .bind(e.method)
        .bind(&e.base_profile)
        .bind(&e.base_digest)
        .bind(&e.candidate_profile)
        .bind(&e.candidate_digest)
        .bind(e.planner_notes.as_ref().map(canonical_json))
        .fetch_one(c)
        .await
        .map_err(cx.err("record an experiment"))
    })
}

pub(crate) async fn get(c: Conn<'_>, cx: &Ctx, id: ExperimentId) -> Result<Experiment> {
    on_db!(c, |c| {
        sqlx::query_as("SELECT * FROM experiments WHERE id = $1")
            .bind(id)
            .fetch_optional(c)
            .await
            .map_err(cx.err("read an experiment"))?
            .ok_or_else(|| cx.not_found(ExperimentId::WHAT, id.0))
    })
}

pub(crate) async fn confirmations(
    c: Conn<'_>,
    cx: &Ctx,
    id: ExperimentId,
) -> Result<Vec<Experiment>> {
    on_db!(c, |c| {
        sqlx::query_as(SQL_CONFIRMATIONS)
            .bind(id)
            .bind(cx.stack())
            .fetch_all(c)
            .await
            .map_err(cx.err("read an experiment's confirmations"))
    })
}

async fn recent(c: Conn<'_>, cx: &Ctx, k: u32) -> Result<Vec<ExperimentOutcome>> {
    on_db!(c, |c| {
        sqlx::query_as(SQL_RECENT_EXPERIMENTS)
            .bind(i64::from(k))
            .bind(cx.stack())
            .fetch_all(c)
            .await
            .map_err(cx.err("read the recent experiments"))
    })
}

async fn decided(
    c: Conn<'_>,
    cx: &Ctx,
    menu_id: MenuId,
    parameters: &Value,
    base_digest: &Digest,
) -> Result<Vec<PriorDecision>> {
    on_db!(c, |c| {
        sqlx::query_as(SQL_DUPLICATE_DECIDED)
            .bind(menu_id)
            .bind(base_digest)
            .bind(canonical_json(parameters))
            .bind(cx.stack())
            .fetch_all(c)
            .await
            .map_err(cx.err("look for an identical decided experiment"))
    })
}

impl WriteTx {
    pub async fn insert_experiment(&mut self, e: &NewExperiment) -> Result<ExperimentId> {
        let (c, cx) = self.parts();
        insert(c, cx, e).await
    }

    pub async fn experiment(&mut self, id: ExperimentId) -> Result<Experiment> {
        let (c, cx) = self.parts();
        get(c, cx, id).await
    }
}

impl Ledger {
    /// [`WriteTx::insert_experiment`] as its own transaction.
    pub async fn insert_experiment(&self, e: &NewExperiment) -> Result<ExperimentId> {
        let mut c = self.conn("record an experiment").await?;
        insert(c.conn(), &self.ctx, e).await
    }

    pub async fn experiment(&self, id: ExperimentId) -> Result<Experiment> {
        let mut c = self.conn("read an experiment").await?;
        get(c.conn(), &self.ctx, id).await
    }

    /// The experiments that confirm (or tried to confirm) `id`, oldest first.
    pub async fn confirmations(&self, id: ExperimentId) -> Result<Vec<Experiment>> {
        let mut c = self.conn("read an experiment's confirmations").await?;
        confirmations(c.conn(), &self.ctx, id).await
    }

    /// The `k` most recent experiments, newest first, with their verdicts and
    /// effects: what the proposer prompt and the bandit learn from.
    pub async fn recent_experiments(&self, k: u32) -> Result<Vec<ExperimentOutcome>> {
        let mut c = self.conn("read the recent experiments").await?;
        recent(c.conn(), &self.ctx, k).await
    }

    /// Every experiment (but `remeasure`) measured on `base_digest`, newest
    /// first, with its verdict.
    pub async fn decided_on(&self, base_digest: &Digest) -> Result<Vec<DecidedOn>> {
        let op = "list the experiments decided on a profile";
        let mut c = self.conn(op).await?;
        let mut out: Vec<DecidedOn> = on_db!(c.conn(), |c| sqlx::query_as(SQL_DECIDED_ON)
            .bind(base_digest)
            .bind(self.ctx.stack())
            .fetch_all(c)
            .await
            .map_err(self.ctx.err(op))?);
        out.sort_by_key(|row| std::cmp::Reverse(row.experiment_id));
        Ok(out)
    }

    /// The duplicate check: the latest experiment with the same menu id,
    /// parameters and base profile whose verdict measured something (`win`,
    /// `loss`, `within_noise`, `inconclusive`, `hash_mismatch`). `remeasure`
    /// repeats on purpose; callers should not apply this check to it. The
    /// daemon reads every such experiment ([`Self::decisions_of`]); the
    /// latest alone is what the ledger's tests look at.
    #[cfg(test)]
    pub async fn already_decided(
        &self,
        menu_id: MenuId,
        parameters: &Value,
        base_digest: &Digest,
    ) -> Result<Option<PriorDecision>> {
        Ok(self
            .decisions_of(menu_id, parameters, base_digest)
            .await?
            .into_iter()
            .next())
    }

    /// Every experiment [`Self::already_decided`] looks at, newest first.
    pub async fn decisions_of(
        &self,
        menu_id: MenuId,
        parameters: &Value,
        base_digest: &Digest,
    ) -> Result<Vec<PriorDecision>> {
        let mut c = self
            .conn("look for an identical decided experiment")
            .await?;
        decided(c.conn(), &self.ctx, menu_id, parameters, base_digest).await
    }
}
