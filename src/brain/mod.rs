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
//! `error` (why a proposer could not answer), `convergence` (the arms worth
//! measuring on a base, and when there is none), `inconclusive` (when a
//! value measured only `inconclusive` is measured again),
//! `model` (the model proposer: validate, retry, back off), `fallback` (when
//! the bandit chooses a cycle for the model), `bandit` (the non-model
//! proposer).

pub mod bandit;
pub mod client;
pub mod convergence;
pub mod error;
mod fallback;
pub mod inconclusive;
pub mod levers;
pub mod line_search;
pub mod model;
pub mod prompt;

#[cfg(test)]
pub(crate) mod double;
#[cfg(test)]
mod model_tests;

use std::future::Future;

use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::ledger::{
    CycleId, DecidedOn, ExperimentId, ExperimentOutcome, Ledger, LedgerError, NewProposal,
    ProposalRejection,
};
use crate::menu::{Excluded, Menu, MenuId, Proposal, Rejection, exclusions};
use crate::observe::LiveMetrics;
use crate::profile::{Knob, KnobValue};
use crate::vocab::{Digest, ProposerKind, VerdictKind};

pub use bandit::{BanditAlgorithm, BanditProposer};
pub use client::{ChatClient, Message, Role};
pub use error::BrainError;
pub use model::{Backoff, ModelProposer};
pub use prompt::{NoiseFloorState, StackDescription};

/// What a proposer knows when it chooses: all of it is the orchestrator's
/// own data (config, metrics, the ledger), none of it the model's words.
#[derive(Debug, Clone, Copy)]
pub struct Situation<'a> {
    /// The menu with the values excluded on the base profile (see
    /// [`exclusions`]): the schema, the validator and the bandit's grid
    /// come from it.
    pub menu: &'a Menu,
    /// What the stack is, as config tells it.
    pub stack: &'a StackDescription,
    /// The live profile's value of every knob the menu's entries touch.
    pub live_knobs: &'a [(Knob, KnobValue)],
    /// The objective from config, seconds per token.
    pub target_seconds_per_token: f64,
    pub metrics: &'a LiveMetrics,
    pub noise_floor: &'a NoiseFloorState,
    /// Recent experiments, newest first, as [`Ledger::recent_experiments`]
    /// returns them. The model sees these; the bandit learns from them, so
    /// give it a longer window than the prompt's `history`.
    pub history: &'a [ExperimentOutcome],
    /// The live profile's token in measured parts ([`levers`]), when the
    /// stack reports them: the bandit tries the lever on the largest first.
    pub token_shares: Option<levers::TokenShares>,
    /// The live profile's digest, when known: the bandit's line search reads
    /// which of the history's experiments were on the live profile.
    pub live_digest: Option<&'a Digest>,
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

    /// The cycle in which the planner refused this very proposal on the same
    /// base profile, if it did: decided without a measurement, so proposing
    /// it again would only waste a cycle. Checks that keep no such record
    /// (the test doubles) find none.
    fn refused_by_planner(
        &self,
        _proposal: &Proposal,
    ) -> impl Future<Output = Result<Option<CycleId>, LedgerError>> + Send {
        async { Ok(None) }
    }

    /// Why the planner would measure nothing of this valid, new proposal
    /// (the candidate equals the live profile, it is predicted not to help,
    /// an input is missing), in the planner's own words, or `None` when it
    /// plans. The model proposer asks before it settles on an answer, so a
    /// refusal is told to the model and asked again within the cycle; the
    /// bandit asks too, and chooses again. The
    /// cycle implements it by planning; checks without a planner (the test
    /// doubles) refuse nothing.
    fn planner_refusal(&self, _proposal: &Proposal) -> Option<String> {
        None
    }
}

/// [`DuplicateCheck`] over [`Ledger::decisions_of`] for one base profile.
#[derive(Debug, Clone, Copy)]
pub struct LedgerDuplicates<'a> {
    pub ledger: &'a Ledger,
    pub base_digest: &'a Digest,
    /// When a value measured only `inconclusive` is open again
    /// ([`inconclusive::Reopening`]); `None`: it stays decided.
    pub reopening: Option<inconclusive::Reopening>,
}

impl LedgerDuplicates<'_> {
    /// Whether the verdicts of one value still decide it.
    fn decides(&self, verdicts: impl IntoIterator<Item = (VerdictKind, DateTime<Utc>)>) -> bool {
        let mut verdicts = verdicts.into_iter().peekable();
        match self.reopening {
            Some(r) => !r.open(verdicts),
            None => verdicts.peek().is_some(),
        }
    }
}

impl DuplicateCheck for LedgerDuplicates<'_> {
    async fn previous(&self, proposal: &Proposal) -> Result<Option<ExperimentId>, LedgerError> {
        let prior = self
            .ledger
            .decisions_of(
                proposal.experiment,
                &params_value(proposal),
                self.base_digest,
            )
            .await?;
        let decided = self.decides(prior.iter().map(|p| (p.verdict, p.created_at)));
        Ok(prior.first().filter(|_| decided).map(|p| p.experiment_id))
    }

    async fn refused_by_planner(
        &self,
        proposal: &Proposal,
    ) -> Result<Option<CycleId>, LedgerError> {
        self.ledger
            .planner_refused(&proposal_value(proposal), self.base_digest)
            .await
    }
}

impl LedgerDuplicates<'_> {
    /// What the ledger shows decided or refused by the planner on this base
    /// profile, as the values `menu` (the menu before any exclusion) leaves
    /// out ([`exclusions::from_ledger`]).
    pub async fn refused(&self, menu: &Menu) -> Result<Vec<Excluded>, LedgerError> {
        let decided = self.ledger.decided_on(self.base_digest).await?;
        let refused = self.ledger.planner_refusals_on(self.base_digest).await?;
        // One value's verdicts decide it together.
        let verdicts_of = |d: &DecidedOn| -> Vec<_> {
            decided
                .iter()
                .filter(|o| o.menu_id == d.menu_id && o.parameters == d.parameters)
                .map(|o| (o.verdict, o.created_at))
                .collect()
        };
        let still_decided = decided
            .iter()
            .filter(|d| self.decides(verdicts_of(d)))
            .map(|d| (d.experiment_id.0, d.menu_id, d.parameters.clone()))
            .collect();
        Ok(exclusions::from_ledger(
            menu,
            still_decided,
            refused.into_iter().map(|(c, p)| (c.0, p)).collect(),
        ))
    }
}

/// The planner's screening both proposers apply to a valid, new choice:
/// when the planner would not measure it, the rejection its attempt
/// records (`not_measured`) and the values the menu then leaves out for
/// the rest of the cycle; `None` when it plans.
pub(crate) fn planner_screen(
    check: &impl DuplicateCheck,
    proposal: &Proposal,
) -> Option<(Rejection, Vec<Excluded>)> {
    let reason = check.planner_refusal(proposal)?;
    let why = crate::menu::Why::RefusedByPlanner { cycle: None };
    Some((
        Rejection::NotMeasured { reason },
        exclusions::of_proposal(proposal, &why),
    ))
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
    if let Some(prev) = check.previous(proposal).await? {
        return Ok(Some(Rejection::Duplicate {
            what: proposal.describe(),
            previous: prev.0,
        }));
    }
    Ok(check
        .refused_by_planner(proposal)
        .await?
        .map(|cycle| Rejection::RefusedByPlanner {
            what: proposal.describe(),
            cycle: cycle.0,
        }))
}

/// A proposer: the served model or the bandit.
pub trait Proposer {
    /// Which proposer this is, for the ledger.
    fn kind(&self) -> ProposerKind;

    /// Reads the recent experiments (newest first) before a cycle opens, so
    /// [`Proposer::kind`] names the proposer that will choose in it (the
    /// model's [`fallback`] reads the model's recent record). Most
    /// proposers need nothing.
    fn prepare(&mut self, _history: &[ExperimentOutcome]) {}

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
        self.to_new_proposal_noted(cycle_id, proposer, created_at, None)
    }

    /// [`Attempt::to_new_proposal`] with the outcome's note.
    fn to_new_proposal_noted(
        &self,
        cycle_id: CycleId,
        proposer: ProposerKind,
        created_at: DateTime<Utc>,
        note: Option<&str>,
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
            note: note.map(str::to_string),
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
    /// Why this proposer answered when it is not the configured one (the
    /// bandit standing in for the model); stored with every attempt.
    pub note: Option<String>,
}

impl Outcome {
    /// The ledger rows, one per attempt, in order.
    pub fn new_proposals(&self, cycle_id: CycleId, created_at: DateTime<Utc>) -> Vec<NewProposal> {
        self.attempts
            .iter()
            .map(|a| {
                a.to_new_proposal_noted(cycle_id, self.proposer, created_at, self.note.as_deref())
            })
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

    /// A proposal the planner refused on the live profile is a duplicate on
    /// that profile (both proposers skip it), and only on that profile.
    #[tokio::test]
    async fn a_planner_refusal_on_the_same_live_profile_is_a_duplicate() {
        use crate::ledger::NewObservation;
        let ledger = Ledger::open_in_memory().await.unwrap();
        let at = Utc.with_ymd_and_hms(2026, 11, 29, 8, 0, 0).unwrap();
        let menu = repo_menu();
        let pins = menu
            .validate(r#"{"experiment":"rerank_pins","params":{"pin_count":64},"rationale":""}"#)
            .unwrap();
        let live = Digest::of(b"live");
        let check = LedgerDuplicates {
            ledger: &ledger,
            base_digest: &live,
            reopening: None,
        };
        // One cycle per case: (observed live profile, proposal, how it ended).
        let record = |digest: Digest, refusal: Option<Rejection>, verdict: VerdictKind| {
            let (ledger, pins) = (&ledger, pins.clone());
            async move {
                let cycle = ledger.open_cycle(at, ProposerKind::Bandit).await.unwrap();
                ledger
                    .insert_observation(&NewObservation {
                        cycle_id: cycle,
                        observed_at: at,
                        metrics: serde_json::json!({}),
                        heat: None,
                        live_profile_digest: digest.clone(),
                        base_profile_digest: digest,
                    })
                    .await
                    .unwrap();
                let attempt = Attempt {
                    number: 1,
                    prompt: None,
                    raw_answer: None,
                    parsed: Some(proposal_value(&pins)),
                    rejection: refusal,
                };
                let outcome = Outcome {
                    proposer: ProposerKind::Bandit,
                    attempts: vec![attempt],
                    decision: Decision::Chosen(pins.clone()),
                    note: None,
                };
                for row in outcome.new_proposals(cycle, at) {
                    ledger.insert_proposal(&row).await.unwrap();
                }
                let v = NewVerdict::refusal(verdict, "not measured: the pins would not fit", at);
                ledger.insert_cycle_verdict(cycle, &v).await.unwrap();
                cycle
            }
        };
        // Refused on another profile, refused as a duplicate (not by the
        // planner), failed for another reason: none of these counts.
        record(Digest::of(b"old live"), None, VerdictKind::Rejected).await;
        record(
            live.clone(),
            Some(Rejection::Duplicate {
                what: "rerank_pins pin_count 64".into(),
                previous: 1,
            }),
            VerdictKind::Rejected,
        )
        .await;
        record(live.clone(), None, VerdictKind::Failed).await;
        assert_eq!(check.refused_by_planner(&pins).await.unwrap(), None);
        assert_eq!(duplicate_of(&check, &pins).await.unwrap(), None);
        // Refused by the planner on this live profile.
        let refused = record(live.clone(), None, VerdictKind::Rejected).await;
        assert_eq!(
            check.refused_by_planner(&pins).await.unwrap(),
            Some(refused)
        );
        // The prompt and the schema learn of it too, with the cycle.
        let refused_values = check.refused(&menu).await.unwrap();
        assert_eq!(
            refused_values,
            vec![crate::menu::Excluded {
                experiment: MenuId::RerankPins,
                param: "pin_count".into(),
                value: crate::menu::ParamValue::Integer(64),
                why: crate::menu::Why::RefusedByPlanner {
                    cycle: Some(refused.0)
                },
            }]
        );
        let rejection = duplicate_of(&check, &pins).await.unwrap().unwrap();
        assert_eq!(
            rejection,
            Rejection::RefusedByPlanner {
                what: "rerank_pins pin_count 64".into(),
                cycle: refused.0
            }
        );
        assert_eq!(rejection.kind(), "duplicate");
        assert!(
            rejection.to_string().contains("planner already refused"),
            "{rejection}"
        );
        // Other parameters are another arm.
        let other = menu
            .validate(r#"{"experiment":"rerank_pins","params":{"pin_count":32},"rationale":""}"#)
            .unwrap();
        assert_eq!(duplicate_of(&check, &other).await.unwrap(), None);
        // The bandit moves on to an arm the planner has not refused. Every
        // arm but these two counts as decided, so it has exactly two to
        // choose from, and it must take the other one every time.
        struct OnlyTwo<'a> {
            ledger: LedgerDuplicates<'a>,
            open: [Proposal; 2],
        }
        impl DuplicateCheck for OnlyTwo<'_> {
            async fn previous(&self, p: &Proposal) -> Result<Option<ExperimentId>, LedgerError> {
                Ok((!self.open.contains(p)).then_some(ExperimentId(1)))
            }
            async fn refused_by_planner(
                &self,
                p: &Proposal,
            ) -> Result<Option<CycleId>, LedgerError> {
                self.ledger.refused_by_planner(p).await
            }
        }
        let arms = bandit::arms(&menu);
        assert!(
            arms.contains(&pins) && arms.contains(&other),
            "both are bandit arms"
        );
        let only = OnlyTwo {
            ledger: check,
            open: [pins.clone(), other.clone()],
        };
        let history = ledger.recent_experiments(10).await.unwrap();
        let floor = NoiseFloorState::Current {
            value: 0.02,
            pairs: 20,
            age: std::time::Duration::from_secs(1),
            stale: false,
        };
        let metrics = LiveMetrics::default();
        let situation = Situation {
            live_digest: None,
            token_shares: None,
            menu: &menu,
            stack: &crate::brain::double::MOE_STACK,
            live_knobs: &[],
            target_seconds_per_token: 1.0,
            metrics: &metrics,
            noise_floor: &floor,
            history: &history,
        };
        let mut bandit = bandit::BanditProposer::new(
            bandit::BanditAlgorithm::Ucb1,
            <rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(1),
        );
        for _ in 0..10 {
            let out = bandit.propose(&situation, &only).await;
            match out.decision {
                Decision::Chosen(p) => assert_eq!(p, other),
                d => panic!("the bandit chose nothing: {d:?}"),
            }
        }
    }

    /// A cycle opened and observed on `live`, building on `base`.
    async fn observed_cycle(
        ledger: &Ledger,
        at: DateTime<Utc>,
        proposer: ProposerKind,
        live: &Digest,
        base: &Digest,
    ) -> crate::ledger::CycleId {
        let cycle = ledger.open_cycle(at, proposer).await.unwrap();
        ledger
            .insert_observation(&crate::ledger::NewObservation {
                cycle_id: cycle,
                observed_at: at,
                metrics: serde_json::json!({}),
                heat: None,
                live_profile_digest: live.clone(),
                base_profile_digest: base.clone(),
            })
            .await
            .unwrap();
        cycle
    }

    /// An answer the planner refused inside the proposer's loop (stored
    /// `not_measured`) is excluded on that live profile in later cycles,
    /// and only there.
    #[tokio::test]
    async fn a_refusal_inside_the_loop_is_excluded_on_that_live_profile() {
        let ledger = Ledger::open_in_memory().await.unwrap();
        let at = Utc.with_ymd_and_hms(2026, 11, 29, 8, 0, 0).unwrap();
        let menu = repo_menu();
        let live = Digest::of(b"live");
        let zero = menu
            .validate(
                r#"{"experiment":"stage_speculative","params":{"draft_len":0},"rationale":""}"#,
            )
            .unwrap();
        let cycle = observed_cycle(&ledger, at, ProposerKind::Model, &live, &live).await;
        let attempt = Attempt {
            number: 1,
            prompt: Some("[user]\nchoose\n".into()),
            raw_answer: Some("{}".into()),
            parsed: Some(proposal_value(&zero)),
            rejection: Some(Rejection::NotMeasured {
                reason: "stage_speculative draft_len 0: the candidate equals the live profile"
                    .into(),
            }),
        };
        let row = attempt.to_new_proposal(cycle, ProposerKind::Model, at);
        assert_eq!(row.rejection.as_ref().unwrap().kind, "not_measured");
        ledger.insert_proposal(&row).await.unwrap();
        let check = LedgerDuplicates {
            ledger: &ledger,
            base_digest: &live,
            reopening: None,
        };
        let refused = check.refused(&menu).await.unwrap();
        assert_eq!(refused.len(), 1, "{refused:?}");
        assert_eq!(
            refused[0].why,
            crate::menu::Why::RefusedByPlanner {
                cycle: Some(cycle.0)
            }
        );
        let excluded = menu.clone().excluding(refused);
        let err = excluded
            .validate(
                r#"{"experiment":"stage_speculative","params":{"draft_len":0},"rationale":""}"#,
            )
            .unwrap_err();
        assert!(
            err.to_string()
                .contains("draft_len 0 was already refused by the planner on this live profile"),
            "{err}"
        );
        let other = Digest::of(b"another live");
        let elsewhere = LedgerDuplicates {
            ledger: &ledger,
            base_digest: &other,
            reopening: None,
        };
        assert!(elsewhere.refused(&menu).await.unwrap().is_empty());
    }

    /// A cycle that built on a win waiting for approval files what the
    /// planner refused under that win's candidate: the next cycle on the
    /// same base finds it (so the line search steps inwards instead of
    /// proposing it again every cycle while the win waits), and the live
    /// profile the cycle observed does not inherit it.
    #[tokio::test]
    async fn a_refusal_on_a_waiting_wins_candidate_is_filed_under_that_base() {
        let ledger = Ledger::open_in_memory().await.unwrap();
        let at = Utc.with_ymd_and_hms(2026, 11, 29, 8, 0, 0).unwrap();
        let menu = repo_menu();
        let (live, waiting) = (
            Digest::of(b"live"),
            Digest::of(b"a waiting win's candidate"),
        );
        let split = menu
            .validate(
                r#"{"experiment":"rebalance_trunk_cache","params":{"trunk_fraction":0.9},"rationale":""}"#,
            )
            .unwrap();
        let cycle = observed_cycle(&ledger, at, ProposerKind::Bandit, &live, &waiting).await;
        let outcome = Outcome {
            proposer: ProposerKind::Bandit,
            attempts: vec![Attempt {
                number: 1,
                prompt: None,
                raw_answer: None,
                parsed: Some(proposal_value(&split)),
                rejection: None,
            }],
            decision: Decision::Chosen(split.clone()),
            note: None,
        };
        for row in outcome.new_proposals(cycle, at) {
            ledger.insert_proposal(&row).await.unwrap();
        }
        let v = NewVerdict::refusal(VerdictKind::Rejected, "not measured: too few slots", at);
        ledger.insert_cycle_verdict(cycle, &v).await.unwrap();

        let on_base = LedgerDuplicates {
            ledger: &ledger,
            base_digest: &waiting,
            reopening: None,
        };
        assert_eq!(
            on_base.refused_by_planner(&split).await.unwrap(),
            Some(cycle)
        );
        assert_eq!(on_base.refused(&menu).await.unwrap().len(), 1);
        let on_live = LedgerDuplicates {
            ledger: &ledger,
            base_digest: &live,
            reopening: None,
        };
        assert_eq!(on_live.refused_by_planner(&split).await.unwrap(), None);
        assert!(on_live.refused(&menu).await.unwrap().is_empty());
    }

    /// A bench experiment of `proposal` on `base`, started `at`.
    fn experiment_on(
        base: &Digest,
        proposal: &Proposal,
        cycle: CycleId,
        proposal_id: Option<crate::ledger::ProposalId>,
        at: DateTime<Utc>,
    ) -> NewExperiment {
        NewExperiment {
            cycle_id: cycle,
            proposal_id,
            confirmation_of: None,
            created_at: at,
            menu_id: proposal.experiment,
            parameters: params_value(proposal),
            method: Method::Bench,
            base_profile: "base.toml".into(),
            base_digest: base.clone(),
            candidate_profile: "candidate.toml".into(),
            candidate_digest: Digest::of(b"candidate"),
            planner_notes: None,
        }
    }

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
                    rejection: Some(Rejection::Duplicate {
                        what: "rerank_pins pin_count 64".into(),
                        previous: 1,
                    }),
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
            note: None,
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
            .insert_experiment(&experiment_on(&base, &proposal, cycle, last, at))
            .await
            .unwrap();
        let check = LedgerDuplicates {
            ledger: &ledger,
            base_digest: &base,
            reopening: None,
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
                    floor_is_bound: false,
                    pairs: 6,
                    method: Some("test".into()),
                    reason: None,
                },
            )
            .await
            .unwrap();
        assert_eq!(check.previous(&proposal).await.unwrap(), Some(experiment));
        let refused = check.refused(&menu).await.unwrap();
        assert_eq!(refused.len(), 1, "{refused:?}");
        assert_eq!(
            refused[0].why,
            crate::menu::Why::Decided {
                experiment: experiment.0
            }
        );
        assert_eq!(refused[0].value, crate::menu::ParamValue::Number(0.35));
        let other = Digest::of(b"another base");
        let elsewhere = LedgerDuplicates {
            ledger: &ledger,
            base_digest: &other,
            reopening: None,
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

    /// On the ledger: an `inconclusive` value is decided within the
    /// back-off after its newest attempt, open after it, and decided for
    /// good at its third attempt; without a reopening it stays decided.
    #[tokio::test]
    async fn an_inconclusive_value_is_open_again_after_the_backoff_up_to_three_attempts() {
        let ledger = Ledger::open_in_memory().await.unwrap();
        let t0 = Utc.with_ymd_and_hms(2026, 12, 7, 8, 0, 0).unwrap();
        let hour = chrono::Duration::hours(1);
        let menu = repo_menu();
        let proposal = menu
            .validate(r#"{"experiment":"rebalance_trunk_cache","params":{"trunk_fraction":0.35},"rationale":""}"#)
            .unwrap();
        let base = Digest::of(b"base");
        let attempt = |at: DateTime<Utc>| {
            let (ledger, proposal, base) = (&ledger, &proposal, &base);
            async move {
                let cycle = ledger.open_cycle(at, ProposerKind::Bandit).await.unwrap();
                let id = ledger
                    .insert_experiment(&experiment_on(base, proposal, cycle, None, at))
                    .await
                    .unwrap();
                let v = NewVerdict {
                    kind: VerdictKind::Inconclusive,
                    decided_at: at + chrono::Duration::minutes(2),
                    effect: Some(-0.19),
                    interval: Some(Interval {
                        low: -0.31,
                        high: -0.08,
                    }),
                    noise_floor: Some(0.21),
                    floor_is_bound: false,
                    pairs: 16,
                    method: Some("test".into()),
                    reason: None,
                };
                ledger.insert_verdict(id, &v).await.unwrap();
                id
            }
        };
        let check = |now: DateTime<Utc>| LedgerDuplicates {
            ledger: &ledger,
            base_digest: &base,
            reopening: Some(inconclusive::Reopening {
                now,
                backoff: hour.to_std().unwrap(),
            }),
        };
        let first = attempt(t0).await;
        let soon = check(t0 + hour - chrono::Duration::seconds(1));
        assert_eq!(soon.previous(&proposal).await.unwrap(), Some(first));
        assert_eq!(soon.refused(&menu).await.unwrap().len(), 1);
        let later = check(t0 + hour);
        assert_eq!(later.previous(&proposal).await.unwrap(), None);
        assert!(later.refused(&menu).await.unwrap().is_empty());
        let kept = LedgerDuplicates {
            reopening: None,
            ..later
        };
        assert_eq!(kept.previous(&proposal).await.unwrap(), Some(first));

        let second = attempt(t0 + hour).await;
        let third_due = t0 + hour * 2;
        assert_eq!(
            check(third_due - chrono::Duration::seconds(1))
                .previous(&proposal)
                .await
                .unwrap(),
            Some(second)
        );
        assert_eq!(check(third_due).previous(&proposal).await.unwrap(), None);
        let third = attempt(third_due).await;
        let long_after = check(third_due + hour * 1000);
        assert_eq!(long_after.previous(&proposal).await.unwrap(), Some(third));
        let refused = long_after.refused(&menu).await.unwrap();
        assert_eq!(
            refused.len(),
            3,
            "each attempt names the value: {refused:?}"
        );
    }
}
