//! The menu a proposer is handed on the cycle's base, and the look the
//! daemon takes before each cycle: would a cycle now tell the loop
//! anything new?
//!
//! The loop is **converged** when no kind of cycle but a proposal is due
//! (no floor that must come first, no realization of an applied stage the
//! live server runs, no win waiting for its confirmation, no composition
//! of staged wins) and, on the profile the cycle would build on,
//! no arm is worth measuring ([`crate::brain::convergence`]: every line of
//! the search done, every other value tried, `remeasure` withheld because
//! its floor is fresh). The look reads the ledger and the live profile
//! (and, while an applied stage's realization is open, the live server's
//! health path): it opens no cycle and measures nothing.

use super::CycleRunner;
use crate::brain::{LedgerDuplicates, Proposer, convergence, levers, line_search};
use crate::clock::Clock;
use crate::ledger::{ExperimentOutcome, LedgerError};
use crate::menu::Menu;
use crate::plan;
use crate::profile::ProfileFile;
use crate::vocab::Digest;

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
}

impl<P: Proposer, C: Clock> CycleRunner<'_, P, C> {
    /// The menu the proposer is handed on `base`: without the live values
    /// and what was decided or refused there, without the sides of a line
    /// the search is done with there (from `history`, the recent
    /// experiments, for their verdicts: [`line_search::done_ranges`]), and
    /// with `remeasure` withheld unless it has a reason
    /// ([`super::remeasure_offer`]).
    pub(super) async fn proposal_menu(
        &self,
        base: &ProfileFile,
        built_on_staged: bool,
        history: &[ExperimentOutcome],
    ) -> Result<Menu, LedgerError> {
        let digest = base.profile.digest();
        let duplicates = LedgerDuplicates {
            ledger: self.ledger,
            base_digest: &digest,
        };
        let menu = self
            .menu
            .clone()
            .with_resolutions(plan::resolutions(&base.profile))
            .excluding(crate::menu::exclusions::base_values(plan::unchanged(
                &base.profile,
            )))
            .excluding(duplicates.refused(self.menu).await?);
        let done = line_search::done_ranges(&menu, history, Some(&digest));
        let menu = menu.closing(done);
        Ok(
            match self
                .remeasure_withheld(base, built_on_staged, history)
                .await?
            {
                Some(w) => menu.withholding(w),
                None => menu,
            },
        )
    }

    /// The recent experiments, newest first, that the proposers, the line
    /// search's closed ranges and the convergence look all read: one
    /// window, so the menu and the look agree.
    pub(super) async fn history(&self) -> Result<Vec<ExperimentOutcome>, LedgerError> {
        self.ledger
            .recent_experiments(self.config.cycle.history.max(64))
            .await
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
        if self.realization_measurable(&live).await? {
            return Ok(None);
        }
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
            .proposal_menu(&base, built_on.is_some(), &history)
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
        Ok(
            convergence::converged(&menu, &history, Some(&base_digest), shares.as_ref()).map(
                |reason| Converged {
                    reason,
                    live: live_digest,
                    base: base_digest,
                    drift_floor,
                },
            ),
        )
    }
}
