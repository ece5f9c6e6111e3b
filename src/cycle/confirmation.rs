//! A confirmation cycle: which win waits for its independent second A/B
//! (a win on the live profile, or one whose confirmation was cut short;
//! this stack's own, or a classmate's, see [`super::classmate`]), and that
//! A/B, which stages the win when it wins again. Whoever confirms a win
//! claims it first ([`Ledger::claim_confirmation`]): of a win's own daemon
//! and its classmates, exactly one measures its confirmation.
//!
//! [`Ledger::claim_confirmation`]: crate::ledger::Ledger::claim_confirmation

use std::path::Path;

use chrono::{DateTime, Utc};

use super::experiment::Origin;
use super::outcome::{Done, Tried};
use super::{CycleRunner, Stop, no_scorer, profiles_dir};
use crate::brain::Proposer;
use crate::clock::Clock;
use crate::ledger::{CycleId, ExperimentId, ExperimentOutcome, LedgerError, RecordedWin};
use crate::measure::scorer::Scorer;
use crate::menu::MenuId;
use crate::profile::Profile;
use crate::profile::ProfileFile;
use crate::vocab::{Digest, Scheduled, VerdictKind};

/// The win a cycle's confirmation step found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Pending {
    /// This stack's own win: this cycle confirms it.
    Own(ExperimentId),
    /// A classmate's win on this live profile: this cycle confirms it if
    /// it wins the claim.
    Classmate(ExperimentId),
    /// This stack's win, left to its classmates until `until`
    /// (`[stack] class_confirm_wait_s`).
    Waiting {
        win: ExperimentId,
        until: DateTime<Utc>,
    },
}

impl Pending {
    pub(super) fn win(self) -> ExperimentId {
        match self {
            Pending::Own(w) | Pending::Classmate(w) | Pending::Waiting { win: w, .. } => w,
        }
    }
}

impl<P: Proposer, C: Clock> CycleRunner<'_, P, C> {
    /// The win this cycle confirms or waits on: this stack's own (see
    /// [`Self::own_pending_win`]) unless a classmate has claimed it, else a
    /// classmate's unconfirmed win on this live profile.
    pub(super) async fn pending_win(
        &self,
        base: &ProfileFile,
    ) -> Result<Option<Pending>, LedgerError> {
        let Some(first) = self.own_pending_win(base).await? else {
            return Ok(self.classmate_win(base).await?.map(Pending::Classmate));
        };
        match self.ledger.confirmation_claim(first).await? {
            Some(claim)
                if !claim.interrupted
                    && claim.stack.as_deref() != self.ledger.scope().map(|s| s.name.as_str()) =>
            {
                tracing::debug!(
                    win = %first,
                    by = claim.stack.as_deref().unwrap_or_default(),
                    "a classmate confirms this stack's win"
                );
                Ok(self.classmate_win(base).await?.map(Pending::Classmate))
            }
            // Not claimed yet: it may be left to the classmates a while.
            None if !self.config.stack.class_confirm_wait.is_zero() => {
                let wait = chrono::Duration::from_std(self.config.stack.class_confirm_wait)
                    .unwrap_or(chrono::Duration::MAX);
                let decided = self.ledger.verdict(first).await?.map(|v| v.decided_at);
                match decided.and_then(|d| d.checked_add_signed(wait)) {
                    Some(until) if self.clock.now() < until => {
                        Ok(Some(Pending::Waiting { win: first, until }))
                    }
                    _ => Ok(Some(Pending::Own(first))),
                }
            }
            _ => Ok(Some(Pending::Own(first))),
        }
    }

    /// The last experiment, when it is a win on the live profile that no
    /// experiment of this stack has confirmed yet.
    ///
    /// A confirmation cut short by a shutdown or a crash (its cycle
    /// `aborted`, its verdict `failed`) did not judge the win, so the win is
    /// confirmed again, up to [`MAX_INTERRUPTED_CONFIRMATIONS`] times; else
    /// a daemon stopped at the wrong moment would silently drop a win.
    async fn own_pending_win(
        &self,
        base: &ProfileFile,
    ) -> Result<Option<ExperimentId>, LedgerError> {
        // The floor refreshes scheduled between a win and its confirmation
        // (a fresh floor comes first) do not hide the win.
        let recent = self
            .ledger
            .recent_experiments(MAX_REFRESHES_BEFORE_CONFIRMATION)
            .await?;
        let Some(last) = recent
            .into_iter()
            .find(|e| !(e.menu_id == MenuId::Remeasure && e.proposer.is_none()))
        else {
            return Ok(None);
        };
        let Some(first) = win_to_confirm(&last, &base.profile.digest()) else {
            return Ok(None);
        };
        // A composite that won but did not beat its best part goes no further.
        if self.refused_composite(first).await? {
            return Ok(None);
        }
        let confirmations = self.ledger.confirmations(first).await?;
        if confirmations.len() >= MAX_INTERRUPTED_CONFIRMATIONS {
            return Ok(None);
        }
        for c in &confirmations {
            let cycle = self.ledger.cycle(c.cycle_id).await?;
            let verdict = self.ledger.verdict(c.id).await?.map(|v| v.kind);
            let interrupted = cycle.status == crate::vocab::CycleStatus::Aborted
                && verdict == Some(VerdictKind::Failed);
            if !interrupted {
                return Ok(None);
            }
        }
        if first != last.experiment_id {
            let original = self.ledger.verdict(first).await?.map(|v| v.kind);
            if original != Some(VerdictKind::Win) {
                return Ok(None);
            }
            tracing::info!(
                experiment = %first,
                "the confirmation of this win was interrupted; confirming it again"
            );
        }
        Ok(Some(first))
    }

    /// While this stack's win `win` is left to its classmates, the cycle
    /// refreshes the noise floor (a scheduled A/A, which the confirmation
    /// needs after its win anyway and which leaves the win the last
    /// experiment to confirm).
    pub(super) async fn wait_for_classmates(
        &mut self,
        id: CycleId,
        win: ExperimentId,
        until: DateTime<Utc>,
        base: &ProfileFile,
    ) -> Result<Done, Stop> {
        let method = self.ledger.experiment(win).await?.method;
        let scorer = self
            .scorers
            .for_live(method)
            .ok_or_else(|| Stop::failed(no_scorer(method)))?;
        tracing::info!(
            cycle = %id,
            %win,
            class = self.config.stack.class.as_deref().unwrap_or_default(),
            "win #{win} is left to this stack's classmates to confirm until {until}; refreshing the noise floor meanwhile"
        );
        self.remeasure(id, None, Some(Scheduled::FloorRefresh), base, &scorer)
            .await
    }

    /// The independent second A/B of a win (this stack's or a classmate's);
    /// stages it when it wins again. `None` when another stack claimed the
    /// win first: nothing was recorded, and the cycle does something else.
    pub(super) async fn confirm(
        &mut self,
        id: CycleId,
        first: ExperimentId,
        base: &ProfileFile,
    ) -> Result<Option<Done>, Stop> {
        let original = self.ledger.experiment(first).await?;
        let tried = Tried::experiment(
            Some(Scheduled::Confirmation),
            original.menu_id,
            original.parameters.clone(),
        );
        let fail = |why: String| Stop::failed(why).during(&tried);
        // The win as its own cycle recorded it: what the stage is built
        // from, beside the confirmation's, and the time no floor measured
        // before may judge the confirmation.
        let recorded = self.ledger.verdict(first).await?;
        let Some((win, not_before)) = recorded
            .as_ref()
            .and_then(|v| Some((RecordedWin::of(first, v)?, v.decided_at)))
        else {
            return Err(fail(format!(
                "experiment #{first} is no recorded win; there is nothing to confirm"
            )));
        };
        let candidate = Profile::parse(
            &original.candidate_profile,
            Path::new("the staged candidate"),
        )
        .map_err(|e| fail(e.to_string()))?;
        let path = profiles_dir(&self.config.stack.live_profile)
            .join(format!("candidate-{}.toml", candidate.digest().short()));
        let candidate = ProfileFile::write(&path, candidate)
            .map_err(|e| fail(format!("rewriting the candidate for its confirmation: {e}")))?;
        let scorer = self
            .scorers
            .for_candidate(original.method)
            .ok_or_else(|| fail(no_scorer(original.method)))?;
        let confirmation = self.new_experiment(
            id,
            Origin::Confirmation {
                original: &original,
            },
            scorer.method(),
            &base.profile,
            &candidate.profile,
        );
        let Some(experiment_id) = self
            .ledger
            .claim_confirmation(first, &confirmation, self.clock.now())
            .await?
        else {
            tracing::info!(
                cycle = %id,
                win = %first,
                "another stack of the class claimed this win's confirmation first; this cycle does something else"
            );
            return Ok(None);
        };
        let win_cycle = self.ledger.cycle(original.cycle_id).await?;
        if win_cycle.stack.as_deref() != self.ledger.scope().map(|s| s.name.as_str()) {
            tracing::info!(
                cycle = %id,
                win = %first,
                "confirming stack {}'s win #{first} (class {}) on this host",
                win_cycle.stack.as_deref().unwrap_or("(unnamed)"),
                win_cycle.class.as_deref().unwrap_or_default(),
            );
        }
        let tried = Tried {
            experiment_id: Some(experiment_id),
            ..tried
        };
        // Failed once it is recorded, so the next cycle does not retry it.
        if let Err(e) = self.menu.entry(original.menu_id) {
            return Err(Stop::failed(unconfirmable(first, &e)).during(&tried));
        }
        let judged = self
            .ab(
                id,
                experiment_id,
                &tried,
                base,
                &candidate,
                &scorer,
                Some(not_before),
            )
            .await?;
        let confirmed = match (judged.win, self.ledger.composition_of(first).await?) {
            (Some(confirmed), Some(c)) => self
                .composite_stageable(&c, confirmed.interval())
                .await?
                .then_some(confirmed),
            (confirmed, _) => confirmed,
        };
        let mut done = Done::new(tried, judged);
        if let Some(confirmed) = confirmed {
            tracing::debug!(experiment = %experiment_id, "phase stage");
            let stage = self
                .ledger
                .insert_stage(&win, &confirmed, self.clock.now())
                .await?;
            tracing::info!(%stage, "a confirmed win is staged: `orchestrator stage show {stage}`");
            done.staged = Some(stage);
        }
        Ok(Some(done))
    }
}

/// How many scheduled floor refreshes may stand between a win and its
/// confirmation before the win is given up on (a machine that stays too
/// noisy to measure a usable floor).
const MAX_REFRESHES_BEFORE_CONFIRMATION: u32 = 8;

/// How many confirmations of one win may be cut short (shutdown, crash)
/// before the win is given up on.
const MAX_INTERRUPTED_CONFIRMATIONS: usize = 3;

/// The win the last experiment asks to confirm, if any: its own win, or the
/// win its interrupted (`failed`) confirmation was judging, on the profile
/// that is still live. A remeasure never asks: it is an A/A of the live
/// profile, so its "win" is noise that crossed the floor, with no candidate
/// to confirm or stage.
fn win_to_confirm(last: &ExperimentOutcome, base: &Digest) -> Option<ExperimentId> {
    if last.menu_id == MenuId::Remeasure || &last.base_digest != base {
        return None;
    }
    match last.confirmation_of {
        None if last.verdict == Some(VerdictKind::Win) => Some(last.experiment_id),
        Some(first) if last.verdict == Some(VerdictKind::Failed) => Some(first),
        _ => None,
    }
}

/// Why the win `first` of an entry the stack has since declared
/// unsupported is not confirmed, and the fix.
fn unconfirmable(first: ExperimentId, e: &crate::menu::UnsupportedEntry) -> String {
    format!(
        "experiment #{first}'s entry `{id}` is unsupported by the stack {stack} ([stack] unsupported); its confirmation cannot run. Remove \"{id}\" from [stack] unsupported to confirm it",
        id = e.id,
        stack = e.stack,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{TimeZone, Utc};

    fn last(
        menu_id: MenuId,
        verdict: VerdictKind,
        confirmation_of: Option<i64>,
    ) -> ExperimentOutcome {
        ExperimentOutcome {
            experiment_id: ExperimentId(7),
            cycle_id: CycleId(7),
            created_at: Utc.with_ymd_and_hms(2026, 11, 29, 8, 0, 0).unwrap(),
            menu_id,
            parameters: serde_json::json!({}),
            base_digest: Digest::of(b"live"),
            proposer: None,
            confirmation_of: confirmation_of.map(ExperimentId),
            verdict: Some(verdict),
            effect: None,
            interval: None,
            noise_floor: None,
            pairs: None,
        }
    }

    #[test]
    fn a_win_is_confirmed_but_never_a_remeasure_s() {
        let live = Digest::of(b"live");
        use VerdictKind::*;
        let split = MenuId::RebalanceTrunkCache;
        assert_eq!(
            win_to_confirm(&last(split, Win, None), &live),
            Some(ExperimentId(7))
        );
        // An interrupted confirmation asks again for the win it judged.
        assert_eq!(
            win_to_confirm(&last(split, Failed, Some(3)), &live),
            Some(ExperimentId(3))
        );
        assert_eq!(win_to_confirm(&last(split, Win, Some(3)), &live), None);
        assert_eq!(win_to_confirm(&last(split, Loss, None), &live), None);
        // Another live profile: the win is out of date.
        assert_eq!(
            win_to_confirm(&last(split, Win, None), &Digest::of(b"other")),
            None
        );
        // An A/A that crossed the floor by chance has nothing to confirm.
        assert_eq!(
            win_to_confirm(&last(MenuId::Remeasure, Win, None), &live),
            None
        );
    }
}
