//! The menu a proposer is handed on the cycle's base, and the look the
//! daemon takes before each cycle: would a cycle now tell the loop
//! anything new?
//!
//! The loop is **converged** when no kind of cycle but a proposal is due
//! (no floor that must come first, no realization of an applied stage the
//! live server runs, no win waiting for its confirmation, no composition
//! of staged wins) and, on the profile the cycle would build on, no arm is
//! worth measuring ([`crate::brain::convergence`]: every line of the search
//! done, every other value tried, and `remeasure` withheld from the
//! proposal menu, because its floor is fresh or because it is missing only
//! for want of a measurement on this profile, which no decision waits for:
//! `remeasure_idle`). The look reads the ledger and the live profile (and,
//! while an applied stage's realization is open, the live server's health
//! path): it opens no cycle and measures nothing.

use std::time::Duration;

use chrono::{DateTime, Utc};

use super::CycleRunner;
use super::realization::RealizationLook;
use crate::brain::inconclusive::{NextAttempt, Reopening};
use crate::brain::{LedgerDuplicates, Proposer, convergence, levers, line_search};
use crate::clock::Clock;
use crate::ledger::{ExperimentOutcome, LedgerError};
use crate::menu::{Menu, MenuId};
use crate::plan::{self, PinList};
use crate::profile::ProfileFile;
use crate::vocab::{Digest, VerdictKind};

/// A converged loop: why, and on which profiles.
#[derive(Debug, Clone, PartialEq)]
pub struct Converged {
    pub reason: String,
    /// The live profile.
    pub live: Digest,
    /// The profile the cycle would build on (the live one, or a waiting
    /// win's candidate).
    pub base: Digest,
    /// The smallest move of the live seconds per token that is a drift (a
    /// log ratio): the floor `remeasure` would measure, clamped below by
    /// `min_noise_floor`.
    pub drift_floor: f64,
    /// When something held back falls due whatever changes (a realization
    /// waiting out the back-off after an attempt that decided nothing, an
    /// inconclusive A/B's value open again): the wait looks again then at
    /// the latest.
    pub due_at: Option<DateTime<Utc>>,
}

impl<P, C: Clock> CycleRunner<'_, P, C> {
    /// How long a measurement the machine was too noisy to decide keeps
    /// its answer: `[cycle] max_wait_s` (the longest a converged loop waits
    /// before it looks again), or `[measure] noise_floor_max_age_s` when
    /// shorter (a config that wants floors every few seconds wants its
    /// A/As and its lines tried as often).
    pub(super) fn noisy_backoff(&self) -> Duration {
        self.config
            .cycle
            .max_wait_s
            .duration()
            .min(self.config.measure.noise_floor_max_age_s.duration())
    }
}

impl<P: Proposer, C: Clock> CycleRunner<'_, P, C> {
    /// The menu the proposer is handed on `base`: without the live values
    /// and what was decided or refused there, without the values the
    /// planner refuses on `base` whatever the heat ([`plan::infeasible`]),
    /// without the sides of a line the search is done with there (from `history`, the recent
    /// experiments, for their verdicts: [`line_search::done_ranges`]), and
    /// with `remeasure` withheld unless it has a reason
    /// ([`super::remeasure_offer`]: its floor is missing or stale, or the
    /// live metrics moved, and a floor missing on `base` is due only
    /// before the loop measured anything there or after a drift:
    /// `remeasure_idle`). `pins`: the base's pin list, read once
    /// by the caller, whose header gives top-k.
    pub(super) async fn proposal_menu(
        &self,
        base: &ProfileFile,
        built_on_staged: bool,
        history: &[ExperimentOutcome],
        pins: Option<&PinList>,
    ) -> Result<Menu, LedgerError> {
        let digest = base.profile.digest();
        let duplicates = LedgerDuplicates {
            ledger: self.ledger,
            base_digest: &digest,
            reopening: Some(self.reopening()),
        };
        let menu = self
            .menu
            .clone()
            .with_resolutions(plan::resolutions(&base.profile))
            .excluding(crate::menu::exclusions::base_values(plan::unchanged(
                &base.profile,
            )))
            .excluding(duplicates.refused(self.menu).await?);
        let declared = plan::checkpoint::declared_by(self.config);
        let sizes = plan::StackSizes {
            expert_bytes: self.config.stack.expert_bytes,
            cache_spare_slots: self.config.stack.cache_spare_slots,
            top_k: declared.top_k.map(|k| k.value).or(pins.map(|p| p.top_k)),
            experts: declared.experts.map(|e| e.value),
        };
        let infeasible = plan::infeasible(&base.profile, &sizes, &menu);
        let done = line_search::done_ranges(&menu, history, Some(&digest));
        let menu = menu.closing(infeasible).closing(done);
        Ok(
            match self
                .remeasure_offer(&menu, base, built_on_staged, history)
                .await?
            {
                Some(w) => menu.withholding(w),
                None => menu,
            },
        )
    }

    /// The recent experiments, newest first, that the proposers, the line
    /// search's closed ranges and the convergence look all read: one
    /// window, so the menu and the look agree. An A/B that came out
    /// `inconclusive` on a value open again is left out
    /// ([`without_stale_inconclusives`]).
    pub(super) async fn history(&self) -> Result<Vec<ExperimentOutcome>, LedgerError> {
        let recent = self
            .ledger
            .recent_experiments(self.config.cycle.history.max(64))
            .await?;
        Ok(without_stale_inconclusives(recent, self.reopening()))
    }

    /// When a value measured only `inconclusive` is measured again: now,
    /// by [`Self::noisy_backoff`].
    pub(super) fn reopening(&self) -> Reopening {
        Reopening {
            now: self.clock.now(),
            backoff: self.noisy_backoff(),
        }
    }

    /// Whether the loop is converged now, and why. Only a ledger failure
    /// is an error; a live profile that cannot be read is no convergence
    /// (the cycle then fails and says why).
    pub async fn converged(&self) -> Result<Option<Converged>, LedgerError> {
        let Ok(live) = ProfileFile::load(&self.config.stack.live_profile) else {
            return Ok(None);
        };
        let live_digest = live.profile.digest();
        // An applied stage the live server runs, not realized yet: the next
        // cycle measures it, whatever the proposers have left.
        let RealizationLook::NotNow {
            due_at: realization_due_at,
        } = self.realization_look(&live).await?
        else {
            return Ok(None);
        };
        let (base, built_on) = self.working_base(live).await?;
        if self.policy.max_floor.is_none() {
            for method in self.candidate_methods() {
                if self.floor(method, &base, None).await?.stale {
                    return Ok(None);
                }
            }
        }
        if self.pending_win(&base).await?.is_some() || self.composition_due(&base).await?.is_some()
        {
            return Ok(None);
        }
        let history = self.history().await?;
        let menu = self
            .proposal_menu(
                &base,
                built_on.is_some(),
                &history,
                super::proposal::base_pins(&base).as_ref(),
            )
            .await?;
        let base_digest = base.profile.digest();
        let drift_floor = self
            .remeasure_floor(&base, built_on.is_some())
            .await?
            .and_then(|(_, f)| f.floor(self.policy.min_floor))
            .unwrap_or(self.policy.min_floor)
            .get();
        let parts = self
            .ledger
            .recent_token_parts(&base_digest, levers::RUNS)
            .await?;
        let shares = levers::TokenShares::of_runs(&parts);
        let reopens = next_reopening(&history, &base_digest, self.reopening());
        Ok(
            convergence::converged(&menu, &history, Some(&base_digest), shares.as_ref()).map(
                |mut reason| {
                    if let Some(at) = realization_due_at {
                        reason += &format!(
                            "; the live stage's realization is measured again at {} UTC",
                            at.format("%H:%M:%S")
                        );
                    }
                    if let Some((at, e)) = reopens {
                        reason += &format!(
                            "; {}'s inconclusive value (experiment {}) is open again at {} UTC",
                            e.menu_id,
                            e.experiment_id.0,
                            at.format("%H:%M:%S")
                        );
                    }
                    Converged {
                        reason,
                        live: live_digest,
                        base: base_digest,
                        drift_floor,
                        due_at: [realization_due_at, reopens.map(|(at, _)| at)]
                            .into_iter()
                            .flatten()
                            .min(),
                    }
                },
            ),
        )
    }
}

/// `history` without the A/Bs (not floors' A/As, not confirmations) that
/// came out `inconclusive` on a value `reopening` opens again
/// ([`crate::brain::inconclusive`]: the back-off after its newest attempt
/// is over, and fewer than three attempts, none decisive). An inconclusive
/// A/B closes its side of the line ([`line_search::done_ranges`]) as a
/// within-noise one does, but it decided nothing: mostly the machine was
/// too noisy to measure a floor or to judge (CI, 2026-12-05: under CPU
/// hogs, two such A/Bs closed both sides of the only knob the proposer
/// named, and every later cycle was refused). When its value is open again
/// its side is too, on the same profile, so a loop that met a busy hour
/// tries again in a quiet one, the value first. An inconclusive
/// confirmation stays, since it is what keeps its win unrepeated, and a
/// floor's A/A has its own back-off ([`super::remeasure_offer`]).
fn without_stale_inconclusives(
    history: Vec<ExperimentOutcome>,
    reopening: Reopening,
) -> Vec<ExperimentOutcome> {
    let drop: Vec<bool> = history
        .iter()
        .map(|e| inconclusive_ab(e) && reopening.open(value_verdicts(&history, e)))
        .collect();
    history
        .into_iter()
        .zip(drop)
        .filter_map(|(e, drop)| (!drop).then_some(e))
        .collect()
}

/// The soonest an inconclusive A/B's value on `base` in `history` (as
/// [`without_stale_inconclusives`] left it) is open again, with that A/B:
/// what a converged loop's wait looks again at.
fn next_reopening<'h>(
    history: &'h [ExperimentOutcome],
    base: &Digest,
    reopening: Reopening,
) -> Option<(DateTime<Utc>, &'h ExperimentOutcome)> {
    history
        .iter()
        .filter(|e| inconclusive_ab(e) && e.base_digest == *base)
        .filter_map(
            |e| match reopening.next_attempt(value_verdicts(history, e)) {
                NextAttempt::At(at) => Some((at, e)),
                NextAttempt::Now | NextAttempt::Never => None,
            },
        )
        .min_by_key(|(at, _)| *at)
}

/// An A/B (not a floor's A/A, not a confirmation) that came out
/// `inconclusive`.
fn inconclusive_ab(e: &ExperimentOutcome) -> bool {
    e.verdict == Some(VerdictKind::Inconclusive)
        && e.menu_id != MenuId::Remeasure
        && e.confirmation_of.is_none()
}

/// The measured verdicts in `history` of `e`'s value on `e`'s base, with
/// when each A/B started.
fn value_verdicts<'h>(
    history: &'h [ExperimentOutcome],
    e: &'h ExperimentOutcome,
) -> impl Iterator<Item = (VerdictKind, DateTime<Utc>)> + 'h {
    history
        .iter()
        .filter(move |o| {
            o.menu_id == e.menu_id && o.parameters == e.parameters && o.base_digest == e.base_digest
        })
        .filter_map(|o| {
            o.verdict
                .filter(|k| k.is_measured())
                .map(|k| (k, o.created_at))
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::brain::bandit::remeasure;
    use crate::brain::double::{OnLive, live_digest, slow_start, split, warm};
    use crate::brain::line_search::done_ranges;
    use crate::ledger::ExperimentId;

    #[test]
    fn an_inconclusive_ab_closes_its_side_only_until_the_backoff_is_over() {
        let (live, base) = (slow_start(), live_digest());
        let on = OnLive::default().decided(&split(0.2), VerdictKind::Inconclusive);
        let made = on.history[0].created_at;
        let at = |m: i64| made + chrono::Duration::minutes(m);
        let hour = Duration::from_secs(3600);
        let closed = |history: &[ExperimentOutcome]| {
            done_ranges(&on.menu(&live), history, Some(&base))
                .iter()
                .filter(|c| c.experiment == MenuId::RebalanceTrunkCache)
                .count()
        };
        assert_eq!(
            closed(&on.history),
            1,
            "the side below the live split is closed"
        );
        let after = |m: i64| Reopening {
            now: at(m),
            backoff: hour,
        };
        let kept = without_stale_inconclusives(on.history.clone(), after(59));
        assert_eq!(closed(&kept), 1, "within the back-off it stays closed");
        let reopened = without_stale_inconclusives(on.history.clone(), after(60));
        assert_eq!(closed(&reopened), 0, "after it the side is open again");
        // What stays whatever its age: a decided A/B, an inconclusive
        // confirmation (it keeps its win unrepeated), a floor's A/A.
        let on = OnLive::default()
            .decided(&warm(512), VerdictKind::WithinNoise)
            .decided(&split(0.6), VerdictKind::Inconclusive)
            .decided(&remeasure(), VerdictKind::Inconclusive);
        let mut history = on.history;
        history[1].confirmation_of = Some(ExperimentId(9));
        let kept = without_stale_inconclusives(history, after(600));
        assert_eq!(kept.len(), 3, "{kept:#?}");
        // The third inconclusive attempt at one value closes its side for
        // good, as it keeps the value decided.
        let on = OnLive::default()
            .decided(&split(0.2), VerdictKind::Inconclusive)
            .decided(&split(0.2), VerdictKind::Inconclusive)
            .decided(&split(0.2), VerdictKind::Inconclusive);
        let kept = without_stale_inconclusives(on.history.clone(), after(6000));
        assert_eq!(closed(&kept), 1, "three attempts: closed for good");
        let two = on.history[1..].to_vec();
        let reopened = without_stale_inconclusives(two, after(6000));
        assert_eq!(
            closed(&reopened),
            0,
            "two attempts: open after the back-off"
        );
    }

    #[test]
    fn a_converged_wait_is_due_when_the_soonest_inconclusive_value_opens_again() {
        let base = live_digest();
        let hour = Duration::from_secs(3600);
        let on = OnLive::default()
            .decided(&split(0.2), VerdictKind::Inconclusive)
            .decided(&warm(512), VerdictKind::WithinNoise);
        let made = on.history[1].created_at;
        let at = |m: i64| Reopening {
            now: made + chrono::Duration::minutes(m),
            backoff: hour,
        };
        let due = next_reopening(&on.history, &base, at(10)).map(|(t, e)| (t, e.experiment_id));
        assert_eq!(
            due,
            Some((
                made + chrono::Duration::hours(1),
                on.history[1].experiment_id
            ))
        );
        assert_eq!(
            next_reopening(&on.history, &Digest::of(b"another base"), at(10)),
            None
        );
        // Once open, the history leaves the A/B out, and nothing is due.
        let kept = without_stale_inconclusives(on.history, at(60));
        assert_eq!(next_reopening(&kept, &base, at(60)), None);
        // A value at its third inconclusive attempt is never due.
        let on = OnLive::default()
            .decided(&split(0.2), VerdictKind::Inconclusive)
            .decided(&split(0.2), VerdictKind::Inconclusive)
            .decided(&split(0.2), VerdictKind::Inconclusive);
        assert_eq!(next_reopening(&on.history, &base, at(10)), None);
    }
}
