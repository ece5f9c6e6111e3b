//! A manual comparison (`orchestrator compare`): a profile a person or a
//! tuner made, judged against a base (the live profile, or another) by the
//! very A/B a proposed candidate gets ([`super::experiment`]): the same
//! floor rules, the bound first, the floor measured when the bound cannot
//! decide. Each A/B is a cycle of its own (proposer `human`) with one
//! `manual` experiment, and a win's confirmation is a second such cycle,
//! judged by the floors the loop's confirmation may use
//! (`[measure] confirmation_new_floor`).
//! Nothing is staged: the caller reads the verdicts.

use serde_json::Value;

use super::outcome::{Done, Tried};
use super::{CycleRunner, CycleSummary, Stop, no_scorer};
use crate::clock::Clock;
use crate::ledger::{CycleId, ExperimentId, LedgerError, NewManualExperiment};
use crate::measure::scorer::Scorer;
use crate::profile::ProfileFile;
use crate::vocab::Scheduled;
use crate::vocab::{Method, ProposerKind};

impl<P, C: Clock> CycleRunner<'_, P, C> {
    /// Runs one judged A/B of `candidate` against `base` in a cycle of its
    /// own and records it; `confirms`: the manual win this A/B re-tests.
    /// `notes`: where the profiles came from, stored with the experiment.
    /// Only a ledger failure is an error; a measurement that could not run
    /// is the cycle's recorded `failed` verdict.
    pub async fn run_manual(
        &mut self,
        base: &ProfileFile,
        candidate: &ProfileFile,
        confirms: Option<ExperimentId>,
        notes: &Value,
    ) -> Result<CycleSummary, LedgerError> {
        let started = self.clock.now();
        let id = self.ledger.open_cycle(started, ProposerKind::Human).await?;
        self.progress.start_cycle(id.get());
        let ended = self.manual_ab(id, base, candidate, confirms, notes).await;
        self.finish(id, started, ended, None, None).await
    }

    async fn manual_ab(
        &mut self,
        id: CycleId,
        base: &ProfileFile,
        candidate: &ProfileFile,
        confirms: Option<ExperimentId>,
        notes: &Value,
    ) -> Result<Done, Stop> {
        // The bench when the stack has one, else a shadow through the
        // serving surface: what measures any candidate of this stack.
        let scorer = self
            .scorers
            .for_candidate(Method::Bench)
            .ok_or_else(|| Stop::failed(no_scorer(Method::Bench)))?;
        let experiment_id = self
            .ledger
            .insert_manual_experiment(&NewManualExperiment {
                cycle_id: id,
                confirmation_of: confirms,
                created_at: self.clock.now(),
                method: scorer.method(),
                base_profile: base.profile.canonical(),
                base_digest: base.profile.digest(),
                candidate_profile: candidate.profile.canonical(),
                candidate_digest: candidate.profile.digest(),
                notes: notes.clone(),
            })
            .await?;
        // No menu entry: a person chose it, or, for its confirmation, the
        // win it re-tests.
        let tried = Tried {
            scheduled: confirms.map(|_| Scheduled::Confirmation),
            experiment_id: Some(experiment_id),
            ..Tried::default()
        };
        // A confirmation's win: with `[measure] confirmation_new_floor`, no
        // floor measured before it judges the confirmation (`Cycle::floor`).
        let not_before = match confirms {
            Some(win) => self.ledger.verdict(win).await?.map(|v| v.decided_at),
            None => None,
        };
        let judged = self
            .ab(
                id,
                experiment_id,
                &tried,
                base,
                candidate,
                &scorer,
                not_before,
            )
            .await
            .map_err(|stop| stop.during(&tried))?;
        Ok(Done::new(tried, judged))
    }
}
