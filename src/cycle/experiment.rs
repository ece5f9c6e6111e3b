//! What every kind of cycle records and measures with: its experiment row
//! (built here, once, for the four kinds), the A/B runner over the chosen
//! scorer, and the A/B of a candidate with its recorded verdict.

use serde_json::{Value, json};

use super::{CycleReport, CycleRunner, Stop, ab_stop};
use crate::brain::{self, Proposer};
use crate::clock::Clock;
use crate::ledger::{CycleId, Experiment, ExperimentId, LedgerError, NewExperiment, ProposalId};
use crate::measure::ab::AbRunner;
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

impl<P: Proposer, C: Clock> CycleRunner<'_, P, C> {
    /// The row of an experiment of cycle `id`: `candidate` against the live
    /// profile, measured with `method`'s protocol.
    pub(super) fn new_experiment(
        &self,
        id: CycleId,
        origin: Origin<'_>,
        method: Method,
        live: &Profile,
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
            base_profile: live.canonical(),
            base_digest: live.digest(),
            candidate_profile: candidate.canonical(),
            candidate_digest: candidate.digest(),
            planner_notes,
        }
    }

    /// Runs the A/B and records its verdict.
    pub(super) async fn ab(
        &mut self,
        experiment_id: ExperimentId,
        live: &ProfileFile,
        candidate: &ProfileFile,
        scorer: &StackScorer,
        r: &mut CycleReport,
    ) -> Result<(), Stop> {
        let current = self.floor(scorer.method(), live, None).await?;
        let floor = current.floor(self.policy.min_floor).ok_or_else(|| {
            Stop::Failed(format!(
                "no noise floor has been measured for the {} protocol; the next cycle measures it",
                scorer.method()
            ))
        })?;
        let (mut gate, runner) = self.measuring(scorer).await?;
        let measuring = match (r.scheduled, r.menu_id) {
            (Some("confirmation"), Some(m)) => format!("confirmation A/B of {}", m.as_str()),
            (Some("composition"), _) => "A/B of a composition of staged wins".into(),
            (_, Some(m)) => format!("A/B of {}", m.as_str()),
            _ => "A/B".into(),
        };
        self.progress.phase(phase::MEASURE, &measuring);
        tracing::debug!(experiment = %experiment_id, "phase measure");
        let result = runner
            .run_ab(
                experiment_id,
                live,
                candidate,
                &mut gate,
                // A run is interfered with when contended beyond this
                // floor's runs, not when the machine is merely busy.
                self.policy.against_floor(current.contention()),
                floor,
            )
            .await;
        tracing::debug!(experiment = %experiment_id, "phase judge");
        let report = result.map_err(ab_stop)?;
        r.note_runs(&report.runs);
        let verdict = report.verdict.to_new_verdict(self.clock.now());
        self.ledger.insert_verdict(experiment_id, &verdict).await?;
        r.verdict = Some(verdict.kind);
        r.floor = Some(floor.get());
        if let (Some(e), Some(i)) = (verdict.effect, verdict.interval) {
            r.effect = Some((e, i));
        }
        // Failures, hash mismatches and a machine too noisy to decide say why.
        if verdict.reason.is_some() {
            r.reason = verdict.reason.clone();
        }
        // A changed output is a broken engine: as loud as a failed run.
        if let VerdictKind::Failed | VerdictKind::HashMismatch = verdict.kind {
            tracing::error!(
                experiment = %experiment_id,
                verdict = verdict.kind.as_str(),
                "{}",
                verdict.reason.as_deref().unwrap_or("")
            );
        }
        Ok(())
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
        };
        Ok((gate, runner))
    }
}
