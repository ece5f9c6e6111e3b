//! A realization cycle: what an applied stage realized on the live server.
//!
//! Once the live profile is an applied stage's profile and the live server
//! runs it (it reports that profile file's sha256, `[stack.surface]
//! health_profile_sha256`; or, where the stack reports nothing, a restart
//! on it is recorded by `stage approve --restart` or `stage restarted`),
//! the cycle measures the live server (the candidate arm) against a shadow
//! of the profile the stage replaced (the baseline arm): an ordinary paired A/B through
//! [`crate::measure::ab`] and [`crate::judge::schedule`], judged as every
//! A/B (`CycleRunner::ab_judged_by`) but by the live server's own noise
//! floor, on the live profile: against the bound first, then, when the
//! bound cannot decide, against that floor, measured in this cycle by an
//! A/A of the live server when the current one is stale. Its verdict is the
//! stage's realized effect. A realized loss is an error line naming `stage
//! revert`. A stack that cannot run both arms, or a live server that does
//! not run the stage's profile, gets a note on the stage saying why, and
//! no verdict. An attempt that decided nothing (too noisy, failed, the
//! output changed) is tried again only after the back-off every
//! undecided measurement keeps (`[cycle] max_wait_s`, or
//! `noise_floor_max_age_s` when shorter): an attempt at once meets the
//! same noise at the full price of a floor and an A/B (the shoot-out,
//! 2026-12-06: three attempts in 20 s, 14.6 engine s, all `inconclusive`),
//! and three of them in a minute would give the stage up.

use std::path::Path;

use chrono::{DateTime, Utc};

use super::outcome::{Done, Judged, Tried};
use super::{CycleRunner, Stop, profiles_dir};
use crate::apply::running::{self, Running};
use crate::brain::Proposer;
use crate::clock::Clock;
use crate::ledger::{
    CycleId, Experiment, ExperimentId, LedgerError, NewExperiment, RealizationAttempt, Stage,
    StageRealization,
};
use crate::measure::by_protocol::StackScorer;
use crate::profile::ProfileFile;
use crate::vocab::{Arm, Method, Scheduled, VerdictKind};

/// A realization this cycle owes: the stage, its experiment (what it
/// changed), both arms' profiles and the scorer that runs them.
#[derive(Debug)]
pub(super) struct Due {
    stage: Stage,
    original: Experiment,
    replaced: ProfileFile,
    live: ProfileFile,
    scorer: StackScorer,
}

/// A realization that can be measured now, before its replaced profile is
/// written for the shadow.
#[derive(Debug)]
struct Ready {
    stage: Stage,
    original: Experiment,
    replaced: crate::profile::Profile,
    scorer: StackScorer,
}

/// An open realization that cannot be measured now: the stage, and the
/// note that says why.
#[derive(Debug)]
struct NotNow {
    stage: Stage,
    why: String,
    /// The stage's replaced profile is damaged: logged at ERROR too.
    damaged: Option<String>,
    /// Held back after an attempt that decided nothing: when it falls due.
    due_at: Option<DateTime<Utc>>,
}

impl NotNow {
    fn new(stage: Stage, why: String) -> NotNow {
        NotNow {
            stage,
            why,
            damaged: None,
            due_at: None,
        }
    }

    /// The stage's replaced profile is damaged (`why`): it cannot be
    /// measured until someone mends or reverts it.
    fn damaged(stage: Stage, why: String) -> NotNow {
        NotNow {
            stage,
            why: format!("cannot be measured: {why}"),
            damaged: Some(why),
            due_at: None,
        }
    }
}

/// The daemon's read-only look at the live stage's realization before a
/// cycle.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum RealizationLook {
    /// One can be measured now: the loop is not converged.
    MeasurableNow,
    /// None can be measured now; `due_at` is when one held back after an
    /// attempt that decided nothing falls due, if one is.
    NotNow { due_at: Option<DateTime<Utc>> },
}

impl<P: Proposer, C: Clock> CycleRunner<'_, P, C> {
    /// The realization due on `live` (the live profile), if any. When the
    /// live profile is an applied stage's whose realization is open but
    /// cannot be measured now, the stage gets a note saying why (logged
    /// when it changes), and the cycle does something else.
    pub(super) async fn realization_due(&self, live: &ProfileFile) -> Result<Option<Due>, Stop> {
        let not_now = match self.realization_state(live).await? {
            None => return Ok(None),
            Some(Ok(ready)) => {
                match write_replaced(
                    &ready.stage,
                    ready.replaced,
                    &self.config.stack.live_profile,
                ) {
                    Ok(replaced) => {
                        return Ok(Some(Due {
                            stage: ready.stage,
                            original: ready.original,
                            replaced,
                            live: live.clone(),
                            scorer: ready.scorer,
                        }));
                    }
                    Err(why) => NotNow::damaged(ready.stage, why),
                }
            }
            Some(Err(not_now)) => not_now,
        };
        if let Some(why) = &not_now.damaged {
            let id = not_now.stage.id;
            tracing::error!(stage = %id, "stage #{id} cannot be realized: {why}");
        }
        self.note(&not_now.stage, &not_now.why).await?;
        Ok(None)
    }

    /// Whether a realization is due on `live` that can be measured now
    /// (the daemon's read-only look before a cycle: not converged then),
    /// or else when one held back after an attempt that decided nothing
    /// falls due (the converged wait looks again by then).
    pub(super) async fn realization_look(
        &self,
        live: &ProfileFile,
    ) -> Result<RealizationLook, LedgerError> {
        Ok(match self.realization_state(live).await? {
            Some(Ok(_)) => RealizationLook::MeasurableNow,
            Some(Err(not_now)) => RealizationLook::NotNow {
                due_at: not_now.due_at,
            },
            None => RealizationLook::NotNow { due_at: None },
        })
    }

    /// Whether an open realization on `live` can be measured now, without
    /// writing anything (the note and the replaced profile's file are the
    /// cycle's to write).
    async fn realization_state(
        &self,
        live: &ProfileFile,
    ) -> Result<Option<Result<Ready, NotNow>>, LedgerError> {
        let digest = live.profile.digest();
        let Some(stage) = self.ledger.live_stage(&digest).await? else {
            return Ok(None);
        };
        let realization = self.ledger.stage_realization(stage.id).await?;
        if !realization.open() {
            return Ok(None);
        }
        let not_now = |stage: Stage, why: String| Ok(Some(Err(NotNow::new(stage, why))));
        if let Some((at, last)) = self.realization_retry(&realization)
            && at > self.clock.now()
        {
            let why = format!(
                "its last attempt (experiment #{}) decided nothing ({}: {}); the next is due at \
                 {} UTC ([cycle] max_wait_s after it, or noise_floor_max_age_s if shorter), \
                 when what spoiled it may have passed",
                last.experiment_id,
                last.verdict
                    .map(VerdictKind::as_str)
                    .unwrap_or("no verdict"),
                last.reason.as_deref().unwrap_or("no reason recorded"),
                at.format("%Y-%m-%d %H:%M:%S")
            );
            return Ok(Some(Err(NotNow {
                due_at: Some(at),
                ..NotNow::new(stage, why)
            })));
        }
        let scorer = match self.scorers.for_realization(digest) {
            Ok(s) => s,
            Err(why) => return not_now(stage, why.to_string()),
        };
        match running::running(self.config, &running::probe_client()).await {
            Running::LiveProfile => {}
            Running::Unreported if stage.restarted_at.is_some() => {}
            Running::Unreported => {
                let why = format!(
                    "the live server does not report the profile it runs ([stack.surface] \
                     health_profile_sha256 is not set) and no restart on this one is recorded, \
                     so the daemon cannot tell when it runs it: set health_profile_sha256 where \
                     the server reports its profile, restart with `stage approve --restart` \
                     (SQLite ledgers), or once you restarted the stack yourself, say so with \
                     `orchestrator stage restarted {}`",
                    stage.id
                );
                return not_now(stage, why);
            }
            other => {
                let why = other.why_not().unwrap_or_default();
                return not_now(
                    stage,
                    format!("waiting for the live server to run it: {why}"),
                );
            }
        }
        let original = self.ledger.experiment(stage.experiment_id).await?;
        let replaced = match crate::apply::revert::replaced_profile(&stage, &original.base_profile)
            .map_err(|e| format!("stage #{}: {e}", stage.id))
        {
            Ok(p) => p,
            // Not this cycle's failure: the stage cannot be realized, and
            // says why; the cycle does something else.
            Err(why) => {
                return Ok(Some(Err(NotNow::damaged(stage, why))));
            }
        };
        Ok(Some(Ok(Ready {
            stage,
            original,
            replaced,
            scorer,
        })))
    }

    /// When `realization`'s next attempt is due, if its latest one decided
    /// nothing: [`Self::noisy_backoff`] after it, the wait every
    /// measurement the machine was too noisy to decide keeps.
    fn realization_retry<'r>(
        &self,
        realization: &'r StageRealization,
    ) -> Option<(DateTime<Utc>, &'r RealizationAttempt)> {
        let backoff =
            chrono::Duration::from_std(self.noisy_backoff()).unwrap_or(chrono::Duration::MAX);
        realization.retry_at(backoff)
    }

    /// Notes on `stage` why it is not realized now; says so once per change.
    async fn note(&self, stage: &Stage, why: &str) -> Result<(), LedgerError> {
        if self
            .ledger
            .note_realization(stage.id, why, self.clock.now())
            .await?
        {
            tracing::info!(stage = %stage.id, "stage #{} is not realized yet: {why}", stage.id);
        }
        Ok(())
    }

    /// Measures what `due`'s stage realized and records it.
    pub(super) async fn realize(&mut self, id: CycleId, due: &Due) -> Result<Done, Stop> {
        let Due {
            stage,
            original,
            replaced,
            live,
            scorer,
        } = due;
        let mut tried = Tried::experiment(
            Some(Scheduled::Realization(stage.id.0)),
            original.menu_id,
            original.parameters.clone(),
        );
        let experiment = NewExperiment {
            cycle_id: id,
            proposal_id: None,
            confirmation_of: None,
            created_at: self.clock.now(),
            menu_id: original.menu_id,
            parameters: original.parameters.clone(),
            method: Method::Surface,
            base_profile: replaced.profile.canonical(),
            base_digest: replaced.profile.digest(),
            candidate_profile: live.profile.canonical(),
            candidate_digest: live.profile.digest(),
            planner_notes: None,
        };
        let experiment_id = self.ledger.insert_realization(stage, &experiment).await?;
        tried.experiment_id = Some(experiment_id);
        tracing::info!(
            cycle = %id,
            stage = %stage.id,
            "measuring what stage #{} realized: the live server against a shadow of the profile it replaced",
            stage.id
        );
        // The live server's own floor, on the live profile, as for any A/B:
        // against the bound first, measured in this cycle when needed.
        let arms = (replaced, live, live);
        let mut judged = self
            .ab_judged_by(id, experiment_id, &tried, arms, scorer, None)
            .await?;
        // The live server is the candidate arm here.
        judged.base_measured = self.live_median(experiment_id).await?;
        say(stage, experiment_id, &judged);
        Ok(Done::new(tried, judged))
    }

    /// The median seconds per token of the live server's valid runs (the
    /// candidate arm) of realization `experiment_id`.
    async fn live_median(&self, experiment_id: ExperimentId) -> Result<Option<f64>, LedgerError> {
        let runs = self.ledger.runs(experiment_id).await?;
        let times: Vec<f64> = runs
            .iter()
            .filter(|r| r.arm == Arm::Candidate && !r.refused)
            .filter_map(|r| r.seconds_per_token)
            .collect();
        Ok(crate::judge::noise::median(&times))
    }
}

/// Says what the stage realized: a loss at ERROR naming `stage revert`.
fn say(stage: &Stage, experiment_id: ExperimentId, judged: &Judged) {
    let effect = judged
        .effect
        .map(|(e, i)| crate::display::effect(e, i.low, i.high))
        .unwrap_or_default();
    let claimed = crate::display::effect(stage.effect, stage.interval.low, stage.interval.high);
    match judged.verdict {
        VerdictKind::Loss => tracing::error!(
            stage = %stage.id,
            experiment = %experiment_id,
            "stage #{} realized a LOSS on the live server: {effect} against a shadow of the \
             profile it replaced (claimed {claimed}); put that profile back with \
             `orchestrator stage revert {} --reason \"realized a loss\"`",
            stage.id,
            stage.id
        ),
        VerdictKind::Win | VerdictKind::WithinNoise => tracing::info!(
            stage = %stage.id,
            experiment = %experiment_id,
            "stage #{} realized {} {effect} on the live server (claimed {claimed})",
            stage.id,
            judged.verdict
        ),
        _ => tracing::error!(
            stage = %stage.id,
            experiment = %experiment_id,
            verdict = judged.verdict.as_str(),
            "the realization of stage #{} decided nothing: {}; it is measured again after a \
             back-off ([cycle] max_wait_s), unless that was its last attempt",
            stage.id,
            judged.reason.as_deref().unwrap_or("")
        ),
    }
}

/// The profile `stage` replaced (its experiment's base, checked as a
/// revert checks it), written next to the live profile for its shadow.
fn write_replaced(
    stage: &Stage,
    profile: crate::profile::Profile,
    live_path: &Path,
) -> Result<ProfileFile, String> {
    let path = profiles_dir(live_path).join(format!("replaced-{}.toml", profile.digest().short()));
    ProfileFile::write(&path, profile).map_err(|e| {
        format!(
            "writing stage #{}'s replaced profile for its shadow: {e}",
            stage.id
        )
    })
}
