//! What every kind of cycle records and measures with: its experiment row
//! (built here, once, for the four kinds), the A/B runner over the chosen
//! scorer, and the A/B of a candidate with its recorded verdict.

use serde_json::{Value, json};

use chrono::{DateTime, Utc};

use super::outcome::{Judged, Tried};
use super::{CycleRunner, Stop, ab_stop, no_scorer};
use crate::brain;
use crate::clock::Clock;
use crate::judge::Floor;
use crate::ledger::{CycleId, Experiment, ExperimentId, LedgerError, NewExperiment, ProposalId};
use crate::measure::ab::{AbRunner, AbVerdict, BoundedAb};
use crate::measure::by_protocol::StackScorer;
use crate::measure::gate::HashGate;
use crate::measure::scorer::Scorer;
use crate::menu::{MenuId, Proposal};
use crate::profile::{Profile, ProfileFile};
use crate::progress::phase;
use crate::vocab::{Method, VerdictKind};

/// Which kind of cycle an experiment belongs to, with what that kind adds
/// to its row.
#[derive(Clone, Copy)]
pub(super) enum Origin<'o> {
    /// An A/A of the live profile: scheduled (no proposal) or proposed.
    FloorRefresh { proposal_id: Option<ProposalId> },
    /// The proposer's choice, with what the planner worked out.
    Proposal {
        proposal_id: Option<ProposalId>,
        proposal: &'o Proposal,
        notes: &'o Value,
    },
    /// The independent second A/B of the win `original`.
    Confirmation { original: &'o Experiment },
    /// The combined candidate of staged wins (`parts`, best first): filed
    /// under its best part's entry `lead`, its parameters the parts' ids.
    Composition {
        lead: MenuId,
        parts: &'o [crate::ledger::StageId],
        notes: &'o Value,
    },
}

impl<P, C: Clock> CycleRunner<'_, P, C> {
    /// The row of an experiment of cycle `id`: `candidate` against the live
    /// profile, measured with `method`'s protocol.
    pub(super) fn new_experiment(
        &self,
        id: CycleId,
        origin: Origin<'_>,
        method: Method,
        base: &Profile,
        candidate: &Profile,
    ) -> NewExperiment {
        let (proposal_id, confirmation_of, menu_id, parameters, planner_notes) = match origin {
            Origin::FloorRefresh { proposal_id } => {
                (proposal_id, None, MenuId::Remeasure, json!({}), None)
            }
            Origin::Proposal {
                proposal_id,
                proposal,
                notes,
            } => (
                proposal_id,
                None,
                proposal.experiment,
                brain::params_value(proposal),
                Some(notes.clone()),
            ),
            Origin::Confirmation { original } => (
                None,
                Some(original.id),
                original.menu_id,
                original.parameters.clone(),
                original.planner_notes.clone(),
            ),
            Origin::Composition { lead, parts, notes } => (
                None,
                None,
                lead,
                json!({ "parts": parts }),
                Some(notes.clone()),
            ),
        };
        NewExperiment {
            cycle_id: id,
            proposal_id,
            confirmation_of,
            created_at: self.clock.now(),
            menu_id,
            parameters,
            method,
            base_profile: base.canonical(),
            base_digest: base.digest(),
            candidate_profile: candidate.canonical(),
            candidate_digest: candidate.digest(),
            planner_notes,
        }
    }

    /// Runs the A/B of experiment `experiment_id` (of cycle `id`, doing
    /// `tried`), records its
    /// verdict and returns what it decided, for the caller to stage from.
    /// `not_before`: a confirmation's win, which a floor measured before it
    /// may not judge. A stop says what was tried, with the floor it was
    /// judged against.
    ///
    /// With no valid floor the A/B is judged against the bound first
    /// ([`crate::judge::AbSchedule::against_bound`]); when the bound cannot
    /// decide, the floor is measured then, in an A/A of this cycle (a
    /// `remeasure` experiment with its own verdict, stored as any floor),
    /// and the A/B goes on against it.
    #[expect(
        clippy::too_many_arguments,
        reason = "the cycle, the experiment, what the cycle tried, both profiles, the scorer and the floor's earliest time are separate inputs with no struct of their own"
    )]
    pub(super) async fn ab(
        &mut self,
        id: CycleId,
        experiment_id: ExperimentId,
        tried: &Tried,
        base: &ProfileFile,
        candidate: &ProfileFile,
        scorer: &StackScorer,
        not_before: Option<DateTime<Utc>>,
    ) -> Result<Judged, Stop> {
        let arms = (base, candidate, base);
        self.ab_judged_by(id, experiment_id, tried, arms, scorer, not_before)
            .await
    }

    /// [`Self::ab`] of `(base, candidate)` judged by the noise floor of the
    /// third profile, the one whose A/A measures it: the base for every A/B
    /// but a realization's, whose base (the profile an applied stage
    /// replaced) runs in a shadow and whose floor is the live server's, on
    /// the live profile (`cycle/realization.rs`).
    pub(super) async fn ab_judged_by(
        &mut self,
        id: CycleId,
        experiment_id: ExperimentId,
        tried: &Tried,
        (base, candidate, floor_of): (&ProfileFile, &ProfileFile, &ProfileFile),
        scorer: &StackScorer,
        not_before: Option<DateTime<Utc>>,
    ) -> Result<Judged, Stop> {
        let tried = &Tried {
            experiment_id: Some(experiment_id),
            ..tried.clone()
        };
        let with_floor = |floor: Option<Floor>| Tried {
            floor: floor.map(Floor::get),
            ..tried.clone()
        };
        let current = self.floor(scorer.method(), floor_of, not_before).await?;
        let valid = current
            .floor(self.policy.min_floor)
            .filter(|_| !current.stale);
        let (mut gate, runner) = self.measuring(scorer).await?;
        let measuring = tried.measuring();
        self.progress.phase(phase::MEASURE, &measuring);
        tracing::debug!(experiment = %experiment_id, "phase measure");
        let bounded = match valid {
            Some(_) => None,
            None => {
                runner
                    // No floor, so no floor's contention to compare runs
                    // with: only a verdict beyond every acceptable floor
                    // stands here, and the own spread (which a burst
                    // widens) carries the interval's coverage.
                    .run_ab_against_bound(
                        experiment_id,
                        base,
                        candidate,
                        &mut gate,
                        self.policy.against_floor(None),
                    )
                    .await
            }
        };
        // A reason of the cycle's own, over the verdict's.
        let mut reason = None;
        // The measured floor the A/B is judged against.
        let mut judged_by = None;
        let report = match (bounded, valid) {
            (Some(ran), _) => match ran.map_err(|e| ab_stop(e).during(&with_floor(None)))? {
                BoundedAb::Done(report) => report,
                BoundedAb::NeedsFloor(paused) => 'needs: {
                    // A floor too wide lately, on a machine that has not
                    // changed since: not measured again yet (`floor`).
                    if let Some(why) =
                        current.too_wide_holds(self.clock.now(), self.noisy_backoff())
                    {
                        tracing::info!(experiment = %experiment_id, "{why}");
                        let report = paused.without_floor(&why);
                        if let AbVerdict::Decided(_) = report.verdict {
                            reason = Some(why);
                        }
                        break 'needs report;
                    }
                    let live_scorer = self
                        .scorers
                        .for_live(scorer.method())
                        .ok_or_else(|| Stop::failed(no_scorer(scorer.method())).during(tried))?;
                    if let Some(why) = &current.why {
                        tracing::info!(
                            experiment = %experiment_id,
                            "the bound did not decide; measuring the noise floor: {why}"
                        );
                    }
                    let refreshed = self
                        .refresh_floor(id, None, floor_of, &live_scorer, |_| {})
                        .await
                        .map_err(|s| s.during(tried))?;
                    self.progress.phase(phase::MEASURE, &measuring);
                    match refreshed.usable() {
                        Some(floor) => {
                            judged_by = Some(floor);
                            runner
                                .resume_ab(
                                    experiment_id,
                                    base,
                                    candidate,
                                    &mut gate,
                                    // A run is interfered with when contended
                                    // beyond this floor's runs, not when the
                                    // machine is merely busy.
                                    self.policy.against_floor(refreshed.contention),
                                    paused,
                                    floor,
                                )
                                .await
                                .map_err(|e| ab_stop(e).during(&with_floor(judged_by)))?
                        }
                        None => {
                            let why = format!(
                                "the bound did not decide and no noise floor could be measured (experiment #{}: {}); nothing is staged from it",
                                refreshed.experiment_id,
                                refreshed.unusable.as_deref().unwrap_or("no floor")
                            );
                            let report = paused.without_floor(&why);
                            if let AbVerdict::Decided(_) = report.verdict {
                                reason = Some(why);
                            }
                            report
                        }
                    }
                }
            },
            (None, valid) => {
                // A valid floor, or, with no bound to judge against, only
                // a floor measured first.
                let floor = match valid {
                    Some(floor) => floor,
                    None => current.floor(self.policy.min_floor).ok_or_else(|| {
                        Stop::failed(format!(
                            "no noise floor has been measured for the {} protocol; the next cycle measures it",
                            scorer.method()
                        ))
                        .during(tried)
                    })?,
                };
                judged_by = Some(floor);
                runner
                    .run_ab(
                        experiment_id,
                        base,
                        candidate,
                        &mut gate,
                        self.policy.against_floor(current.contention()),
                        floor,
                    )
                    .await
                    .map_err(|e| ab_stop(e).during(&with_floor(judged_by)))?
            }
        };
        tracing::debug!(experiment = %experiment_id, "phase judge");
        let mut verdict = report.verdict.to_new_verdict(self.clock.now());
        if let Some(why) = reason {
            verdict.reason = Some(why);
        }
        self.ledger.insert_verdict(experiment_id, &verdict).await?;
        // A changed output is a broken engine: as loud as a failed run.
        if let VerdictKind::Failed | VerdictKind::HashMismatch = verdict.kind {
            tracing::error!(
                experiment = %experiment_id,
                verdict = verdict.kind.as_str(),
                "{}",
                verdict.reason.as_deref().unwrap_or("")
            );
        }
        // The bound is no measured floor; the reason says what it is.
        let floor = judged_by
            .filter(|_| !verdict.floor_is_bound)
            .map(Floor::get);
        Ok(Judged::recorded(
            experiment_id,
            &verdict,
            floor,
            &report.runs,
        ))
    }

    /// The hash gate of the scorer's prompt set and a runner over the scorer.
    pub(super) async fn measuring<'s>(
        &'s self,
        scorer: &'s StackScorer,
    ) -> Result<(HashGate, AbRunner<'s, StackScorer, C>), LedgerError> {
        let gate = HashGate::load(
            self.ledger,
            &self.config.stack.name,
            &scorer.prompt_set(self.config),
        )
        .await?;
        let runner = AbRunner {
            scorer,
            ledger: self.ledger,
            clock: self.clock,
            cancel: self.cancel.clone(),
            warmups_per_arm: self.config.measure.warmup_runs as usize,
            deadline_cap: Some(self.config.measure.run_timeout_s.duration()),
            progress: self.progress.clone(),
            stand_aside: self.stand_aside,
        };
        Ok((gate, runner))
    }
}
