//! A cycle of the proposer's choice: the situation it is shown, its answer
//! recorded, and the chosen experiment planned and measured (or refused).

use super::duplicate_check::{self, PlanningDuplicateCheck};
use super::experiment::Origin;
use super::outcome::{Done, Judged, Tried};
use super::{CurrentFloor, CycleRunner, Seen, Stop, no_scorer, profiles_dir};
use crate::brain::{self, LedgerDuplicates, NoiseFloorState, Proposer, Situation};
use crate::clock::Clock;
use crate::ledger::{CycleId, LedgerError, NewVerdict, ProposalId};
use crate::measure::scorer::Scorer;
use crate::menu::{Menu, MenuId, Proposal};
use crate::observe;
use crate::plan::{self, PinList, Plan, PlanContext, PlanRefusal};
use crate::profile::Profile;
use crate::profile::ProfileFile;
use crate::progress::phase;
use crate::vocab::{Method, ProposerKind, VerdictKind};

impl<P: Proposer, C: Clock> CycleRunner<'_, P, C> {
    /// The third kind of cycle: no floor is due and no win waits, so the
    /// proposer chooses (a remeasure it chooses is a floor refresh).
    pub(super) async fn propose(
        &mut self,
        id: CycleId,
        seen: &Seen,
        methods: &[Method],
    ) -> Result<Done, Stop> {
        let (base, obs, now) = (&seen.base, &seen.obs, seen.now);
        let cfg = self.config;
        let base_digest = base.profile.digest();
        let bench_floor = match methods.first() {
            Some(m) => self.floor(*m, base, None).await?,
            None => CurrentFloor {
                row: None,
                stale: true,
                why: None,
                only_too_wide: false,
            },
        };
        let history = self.history().await?;
        // With a bound, a missing or stale floor is not due first: the A/B
        // judges against the bound and measures one only when it must.
        let floor_state = match self.policy.max_floor {
            Some(bound) if bench_floor.stale => NoiseFloorState::Bound { bound: bound.get() },
            _ => bench_floor.state(self.policy.min_floor, now),
        };
        let duplicates = LedgerDuplicates {
            ledger: self.ledger,
            base_digest: &base_digest,
            reopening: Some(self.reopening()),
        };
        // The live profile's own values, what was decided or refused on it
        // and the sides of a line the search is done with leave the schema,
        // the validator and the bandit's grid, and so does `remeasure`
        // while its floor is fresh.
        let current_pins = base_pins(base);
        let menu = self
            .proposal_menu(
                base,
                seen.built_on.is_some(),
                &history,
                current_pins.as_ref(),
            )
            .await?;
        let stack = brain::StackDescription::of(cfg, self.menu);
        let base_knobs = knob_values(self.menu, &base.profile);
        let measured = self
            .ledger
            .recent_token_parts(&base_digest, brain::levers::RUNS)
            .await?;
        let situation = Situation {
            token_shares: brain::levers::TokenShares::of_runs(&measured),
            live_digest: Some(&base_digest),
            menu: &menu,
            stack: &stack,
            live_knobs: &base_knobs,
            target_seconds_per_token: cfg.objective.target_seconds_per_token.get(),
            metrics: &obs.metrics,
            noise_floor: &floor_state,
            history: &history,
        };
        let profiles_dir = profiles_dir(&cfg.stack.live_profile);
        let top_k = self.declared_top_k();
        let ctx = PlanContext {
            live: &base.profile,
            live_path: &base.path,
            profiles_dir: &profiles_dir,
            expert_bytes: cfg.stack.expert_bytes,
            cache_spare_slots: cfg.stack.cache_spare_slots,
            heat: obs.heat.as_ref(),
            trace: obs.trace.as_ref(),
            current_pins: current_pins.as_ref(),
            top_k: top_k.as_ref().map(|(k, from)| (*k, from.as_str())),
            menu: Some(self.menu),
        };
        let check = PlanningDuplicateCheck::new(duplicates, &ctx);
        tracing::debug!(cycle = %id, "phase propose");
        self.progress
            .phase(phase::PROPOSE, self.proposer.kind().as_str());
        // The served model's answers are the daemon's own requests when the
        // live server serves it, not its users'.
        let own = self
            .stand_aside
            .filter(|sa| sa.serves_model() && self.proposer.kind() == ProposerKind::Model)
            .map(|sa| sa.own_request());
        // The proposer's HTTP call is abandoned on shutdown (dropping the
        // future closes the connection); nothing of it is half-recorded.
        let outcome = tokio::select! {
            biased;
            _ = self.cancel.cancelled() => {
                return Err(Stop::aborted("shutdown while the proposer was choosing"));
            }
            outcome = self.proposer.propose(&situation, &check) => outcome,
        };
        drop(own);
        // The metrics above were read before the model was asked; the
        // window its decoding fell in is closed now, so the next cycle's
        // live speed is the stack's serving, not the model's answers.
        if outcome.proposer == ProposerKind::Model {
            observe::end_window(cfg.stack.metrics.as_ref(), self.http).await;
        }
        let mut last_proposal: Option<ProposalId> = None;
        for p in outcome.new_proposals(id, self.clock.now()) {
            last_proposal = Some(self.ledger.insert_proposal(&p).await?);
        }
        let proposal = match outcome.decision {
            brain::Decision::Chosen(p) => p,
            brain::Decision::Rejected => {
                let last = outcome
                    .attempts
                    .last()
                    .and_then(|a| a.rejection.as_ref())
                    .map(|r| r.to_string())
                    .unwrap_or_else(|| "no attempt".into());
                let why = format!(
                    "every answer of the proposer was refused ({} attempts; last: {last})",
                    outcome.attempts.len()
                );
                let judged = self.refuse(id, &why).await?;
                return Ok(Done::new(Tried::default(), judged));
            }
            brain::Decision::Failed(e) => return Err(Stop::failed(format!("proposer: {e}"))),
        };
        let tried = Tried::experiment(None, proposal.experiment, brain::params_value(&proposal));

        if proposal.experiment == MenuId::Remeasure {
            let method = self
                .menu
                .entry(MenuId::Remeasure)
                .map_err(|e| Stop::failed(e.to_string()).during(&tried))?
                .method;
            let scorer = self
                .floor_scorer(method, seen.built_on.is_some())
                .ok_or_else(|| Stop::failed(no_scorer(method)).during(&tried))?;
            return self.remeasure(id, last_proposal, None, base, &scorer).await;
        }
        tracing::debug!(cycle = %id, "phase plan");
        self.progress
            .phase(phase::PLAN, proposal.experiment.as_str());
        let plan = check.plan(&proposal);
        self.experiment(id, last_proposal, &proposal, plan, base, tried)
            .await
    }

    /// Records the cycle's `rejected` verdict: nothing is measured, `why`.
    async fn refuse(&self, id: CycleId, why: &str) -> Result<Judged, LedgerError> {
        let v = NewVerdict::refusal(VerdictKind::Rejected, why, self.clock.now());
        self.ledger.insert_cycle_verdict(id, &v).await?;
        Ok(Judged::refusal(VerdictKind::Rejected, why))
    }

    /// Plans, records and measures one proposed experiment.
    async fn experiment(
        &mut self,
        id: CycleId,
        proposal_id: Option<ProposalId>,
        proposal: &Proposal,
        plan: Result<Plan, PlanRefusal>,
        base: &ProfileFile,
        tried: Tried,
    ) -> Result<Done, Stop> {
        // The proposers' choices were screened by the planner already;
        // what is refused here is a bandit's choice past its screening
        // bound (`brain::bandit::MAX_SCREENED`).
        let plan = match plan {
            Ok(plan) => plan,
            Err(refusal) => {
                let why = format!(
                    "not measured: {}",
                    duplicate_check::refusal_text(proposal, &refusal)
                );
                let judged = self.refuse(id, &why).await?;
                return Ok(Done::new(tried, judged));
            }
        };
        plan::write_plan(&plan).map_err(|e| {
            Stop::failed(format!(
                "writing the candidate profile {}: {e}",
                plan.candidate_path.display()
            ))
            .during(&tried)
        })?;
        let candidate = ProfileFile {
            path: plan.candidate_path.clone(),
            profile: plan.candidate.clone(),
        };
        let entry = self
            .menu
            .entry(proposal.experiment)
            .map_err(|e| Stop::failed(e.to_string()).during(&tried))?;
        let scorer = self
            .scorers
            .for_candidate(entry.method)
            .ok_or_else(|| Stop::failed(no_scorer(entry.method)).during(&tried))?;
        let experiment_id = self
            .ledger
            .insert_experiment(&self.new_experiment(
                id,
                Origin::Proposal {
                    proposal_id,
                    proposal,
                    notes: &plan.notes,
                },
                scorer.method(),
                &base.profile,
                &plan.candidate,
            ))
            .await?;
        let tried = Tried {
            experiment_id: Some(experiment_id),
            ..tried
        };
        let judged = self
            .ab(id, experiment_id, &tried, base, &candidate, &scorer, None)
            .await?;
        Ok(Done::new(tried, judged))
    }
}

/// The base's pin list, when the base profile names one that can be read.
pub(super) fn base_pins(base: &ProfileFile) -> Option<PinList> {
    let path = base.profile.pins_path(&base.path)?;
    match PinList::load(&path) {
        Ok(list) => Some(list),
        Err(e) => {
            tracing::warn!("the live pin list cannot be read: {e}");
            None
        }
    }
}

/// The base's value of every knob the menu's entries touch, in knob order.
fn knob_values(
    menu: &Menu,
    base: &Profile,
) -> Vec<(crate::profile::Knob, crate::profile::KnobValue)> {
    let mut knobs: Vec<crate::profile::Knob> = menu
        .entries()
        .iter()
        .flat_map(|e| e.touches.iter().copied())
        .collect();
    knobs.sort();
    knobs.dedup();
    knobs.into_iter().map(|k| (k, base.get(k))).collect()
}
