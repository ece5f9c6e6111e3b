//! The proposer ("brain"): chooses ONE bounded experiment from the menu each
//! cycle, either by asking the served model or with a bandit over the menu.
//!
//! Both proposers implement [`Proposer`] and return an [`Outcome`] that
//! carries every attempt (prompt sent, raw answer, parsed proposal or the
//! [`Rejection`]), so the cycle writes one ledger row per attempt whatever
//! happened, and the [`Decision`] it acts on.
//!
//! The served model's words are data. Its answer goes through
//! [`Menu::validate`] and only the validated [`Proposal`] (menu ids and
//! bounded numbers or menu-owned enum strings) travels on; the raw text is
//! kept in [`Attempt::raw_answer`] and nowhere else: not in the follow-up
//! prompt, not in errors, not in logs.
//!
//! Files: `prompt` (the text the model sees), `client` (the chat API),
//! `error` (why a proposer could not answer),
//! `model` (the model proposer: validate, retry, back off), `bandit` (the
//! non-model proposer).

pub mod bandit;
pub mod client;
pub mod error;
pub mod model;
pub mod prompt;

#[cfg(test)]
mod double;
#[cfg(test)]
mod model_tests;

use std::future::Future;

use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::ledger::{
    CycleId, ExperimentId, ExperimentOutcome, Ledger, LedgerError, NewProposal, ProposalRejection,
};
use crate::menu::{Menu, MenuId, Proposal, Rejection};
use crate::vocab::{Digest, ProposerKind};

pub use bandit::{BanditAlgorithm, BanditProposer};
pub use client::{ChatClient, Message, Role};
pub use error::BrainError;
pub use model::{Backoff, ModelProposer};
pub use prompt::{LiveMetrics, NoiseFloorState};

/// What a proposer knows when it chooses: all of it is the orchestrator's
/// own data (config, metrics, the ledger), none of it the model's words.
#[derive(Debug, Clone, Copy)]
pub struct Situation<'a> {
    pub menu: &'a Menu,
    /// The objective from config, seconds per token.
    pub target_seconds_per_token: f64,
    pub metrics: &'a LiveMetrics,
    pub noise_floor: &'a NoiseFloorState,
    /// Recent experiments, newest first, as [`Ledger::recent_experiments`]
    /// returns them. The model sees these; the bandit learns from them, so
    /// give it a longer window than the prompt's `history`.
    pub history: &'a [ExperimentOutcome],
}

/// Looks for an identical experiment already decided on the current base
/// profile. The cycle implements it over the ledger (see
/// [`LedgerDuplicates`]); tests use a map.
pub trait DuplicateCheck {
    /// The id of an earlier decided experiment with the same menu id and
    /// parameters on the same base profile, if there is one.
    fn previous(
        &self,
        proposal: &Proposal,
    ) -> impl Future<Output = Result<Option<ExperimentId>, LedgerError>> + Send;
}

/// [`DuplicateCheck`] over [`Ledger::already_decided`] for one base profile.
#[derive(Debug, Clone, Copy)]
pub struct LedgerDuplicates<'a> {
    pub ledger: &'a Ledger,
    pub base_digest: &'a Digest,
}

impl DuplicateCheck for LedgerDuplicates<'_> {
    async fn previous(&self, proposal: &Proposal) -> Result<Option<ExperimentId>, LedgerError> {
        let prior = self
            .ledger
            .already_decided(
                proposal.experiment,
                &params_value(proposal),
                self.base_digest,
            )
            .await?;
        Ok(prior.map(|p| p.experiment_id))
    }
}

/// The duplicate rule both proposers apply: `remeasure` repeats on purpose
/// (it is how the noise floor is refreshed), everything else may be decided
/// only once per base profile.
pub(crate) async fn duplicate_of(
    check: &impl DuplicateCheck,
    proposal: &Proposal,
) -> Result<Option<Rejection>, LedgerError> {
    if proposal.experiment == MenuId::Remeasure {
        return Ok(None);
    }
    Ok(check
        .previous(proposal)
        .await?
        .map(|prev| Rejection::Duplicate { previous: prev.0 }))
}

/// A proposer: the served model or the bandit.
pub trait Proposer {
    /// Which proposer this is, for the ledger.
    fn kind(&self) -> ProposerKind;

    /// Chooses one experiment. Never loses an attempt: even a failure
    /// carries the attempts made before it.
    fn propose<D: DuplicateCheck + Sync>(
        &mut self,
        situation: &Situation<'_>,
        duplicates: &D,
    ) -> impl Future<Output = Outcome> + Send;
}

/// One answer of a proposer: one ledger row.
#[derive(Debug, Clone, PartialEq)]
pub struct Attempt {
    /// 1-based number of the request in this cycle. A request that got no
    /// answer (a transient HTTP failure, retried) has no attempt, so numbers
    /// may skip; they never repeat.
    pub number: u32,
    /// The prompt sent, all messages rendered (`None` for the bandit).
    pub prompt: Option<String>,
    /// The answer exactly as received; the only place the model's words are kept.
    pub raw_answer: Option<String>,
    /// The validated proposal as JSON (`{"experiment":..,"params":{..}}`),
    /// also set for a valid proposal refused as a duplicate.
    pub parsed: Option<Value>,
    pub rejection: Option<Rejection>,
}

impl Attempt {
    /// The ledger row for this attempt.
    pub fn to_new_proposal(
        &self,
        cycle_id: CycleId,
        proposer: ProposerKind,
        created_at: DateTime<Utc>,
    ) -> NewProposal {
        NewProposal {
            cycle_id,
            proposer,
            attempt: self.number,
            created_at,
            prompt: self.prompt.clone(),
            raw_answer: self.raw_answer.clone(),
            parsed: self.parsed.clone(),
            rejection: self.rejection.as_ref().map(|r| ProposalRejection {
                kind: r.kind().to_string(),
                reason: r.to_string(),
            }),
        }
    }
}

/// What the cycle does next.
#[derive(Debug)]
pub enum Decision {
    /// A valid, non-duplicate proposal: the last attempt.
    Chosen(Proposal),
    /// Every attempt was refused: the cycle's verdict is `rejected`.
    Rejected,
    /// The proposer could not answer (unreachable, too slow, HTTP error):
    /// the cycle's verdict is `failed`.
    Failed(BrainError),
}

/// Everything one proposer did in one cycle.
#[derive(Debug)]
pub struct Outcome {
    pub proposer: ProposerKind,
    pub attempts: Vec<Attempt>,
    pub decision: Decision,
}

impl Outcome {
    /// The ledger rows, one per attempt, in order.
    pub fn new_proposals(&self, cycle_id: CycleId, created_at: DateTime<Utc>) -> Vec<NewProposal> {
        self.attempts
            .iter()
            .map(|a| a.to_new_proposal(cycle_id, self.proposer, created_at))
            .collect()
    }
}

/// A proposal's parameters as the JSON object the ledger stores and
/// compares (sorted keys).
pub fn params_value(proposal: &Proposal) -> Value {
    serde_json::to_value(&proposal.params).expect("params always serialise")
}

/// A proposal as the JSON stored in the ledger's `parsed` column.
pub fn proposal_value(proposal: &Proposal) -> Value {
    serde_json::to_value(proposal).expect("proposals always serialise")
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::double::repo_menu;
    use super::*;
    use crate::ledger::{Interval, NewExperiment, NewVerdict};
    use crate::vocab::{Method, VerdictKind};

    /// The rows an outcome produces satisfy the ledger's schema, and the
    /// ledger-backed duplicate check finds what was decided on the same base.
    #[tokio::test]
    async fn outcomes_fit_the_ledger_and_duplicates_are_found_there() {
        let ledger = Ledger::open_in_memory().await.unwrap();
        let at = Utc.with_ymd_and_hms(2026, 11, 29, 8, 0, 0).unwrap();
        let menu = repo_menu();
        let split = r#"{"experiment":"rebalance_trunk_cache","params":{"trunk_fraction":0.35},"rationale":"r"}"#;
        let proposal = menu.validate(split).unwrap();
        let outcome = Outcome {
            proposer: ProposerKind::Model,
            attempts: vec![
                Attempt {
                    number: 1,
                    prompt: Some("[user]\nchoose\n".into()),
                    raw_answer: Some("nonsense".into()),
                    parsed: None,
                    rejection: Some(Rejection::Unparseable {
                        detail: "invalid JSON at line 1 column 1".into(),
                    }),
                },
                Attempt {
                    number: 2,
                    prompt: Some("[user]\nchoose\n".into()),
                    raw_answer: Some(split.into()),
                    parsed: Some(proposal_value(&proposal)),
                    rejection: Some(Rejection::Duplicate { previous: 1 }),
                },
                Attempt {
                    number: 3,
                    prompt: Some("[user]\nchoose\n".into()),
                    raw_answer: Some(split.into()),
                    parsed: Some(proposal_value(&proposal)),
                    rejection: None,
                },
            ],
            decision: Decision::Chosen(proposal.clone()),
        };
        let cycle = ledger.open_cycle(at, ProposerKind::Model).await.unwrap();
        let mut last = None;
        for row in outcome.new_proposals(cycle, at) {
            last = Some(ledger.insert_proposal(&row).await.unwrap());
        }
        let stored = ledger.proposals(cycle).await.unwrap();
        assert_eq!(stored.len(), 3);
        assert_eq!(stored[1].rejection.as_ref().unwrap().kind, "duplicate");
        assert_eq!(stored[2].raw_answer.as_deref(), Some(split));

        let base = Digest::of(b"base");
        let experiment = ledger
            .insert_experiment(&NewExperiment {
                cycle_id: cycle,
                proposal_id: last,
                confirmation_of: None,
                created_at: at,
                menu_id: proposal.experiment,
                parameters: params_value(&proposal),
                method: Method::Bench,
                base_profile: "base.toml".into(),
                base_digest: base.clone(),
                candidate_profile: "candidate.toml".into(),
                candidate_digest: Digest::of(b"candidate"),
                planner_notes: None,
            })
            .await
            .unwrap();
        let check = LedgerDuplicates {
            ledger: &ledger,
            base_digest: &base,
        };
        assert_eq!(
            check.previous(&proposal).await.unwrap(),
            None,
            "not decided yet"
        );
        ledger
            .insert_verdict(
                experiment,
                &NewVerdict {
                    kind: VerdictKind::WithinNoise,
                    decided_at: at,
                    effect: Some(0.001),
                    interval: Some(Interval {
                        low: -0.01,
                        high: 0.012,
                    }),
                    noise_floor: Some(0.015),
                    pairs: 6,
                    method: Some("test".into()),
                    reason: None,
                },
            )
            .await
            .unwrap();
        assert_eq!(check.previous(&proposal).await.unwrap(), Some(experiment));
        let other = Digest::of(b"another base");
        let elsewhere = LedgerDuplicates {
            ledger: &ledger,
            base_digest: &other,
        };
        assert_eq!(elsewhere.previous(&proposal).await.unwrap(), None);
        let near = menu.validate(&split.replace("0.35", "0.4")).unwrap();
        assert_eq!(check.previous(&near).await.unwrap(), None);
        let bandit_history = ledger.recent_experiments(10).await.unwrap();
        assert!(bandit::is_arm(&proposal, &bandit_history[0]));
        assert_eq!(
            bandit::stats(&[proposal], &bandit_history)[0].pulls,
            1,
            "the bandit reads the ledger's history"
        );
    }
}
