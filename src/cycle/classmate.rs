//! A classmate's win to confirm (issue #18: hosts of one class confirm
//! each other). A stack of `[stack] class` K whose own history has no win
//! waiting confirms the unconfirmed win of another stack of class K when
//! its live profile is that win's base: identical hosts on identical
//! profiles, so its A/B is the independent second measurement the win
//! needs, taken on other hardware of the same model.

use std::path::Path;

use super::CycleRunner;
use crate::brain::Proposer;
use crate::clock::Clock;
use crate::ledger::{ExperimentId, LedgerError};
use crate::profile::{Profile, ProfileFile};

/// How many of the classmates' newest wins on this profile are looked at.
const CLASSMATE_WINS: u32 = 16;

impl<P: Proposer, C: Clock> CycleRunner<'_, P, C> {
    /// The newest unconfirmed win of a classmate on this live profile that
    /// this host can measure, if any.
    pub(super) async fn classmate_win(
        &self,
        base: &ProfileFile,
    ) -> Result<Option<ExperimentId>, LedgerError> {
        let wins = self
            .ledger
            .classmate_wins(&base.profile.digest(), CLASSMATE_WINS)
            .await?;
        for win in wins {
            let Ok(candidate) =
                Profile::parse(&win.candidate_profile, Path::new("a classmate's win"))
            else {
                continue;
            };
            // A pin list is a file on the win's host, named by a path beside
            // its live profile, and no digest covers its rows: this host
            // would read its own file by that name (or none) and measure
            // another candidate than the win's. Such a win is its own
            // stack's to confirm.
            if candidate.pins_path(&base.path).is_some() {
                continue;
            }
            // An entry this stack cannot carry out, or a protocol it cannot
            // measure with, is left to the win's own stack rather than
            // claimed and failed (a failed confirmation decides the win).
            if self.menu.entry(win.menu_id).is_err()
                || self.scorers.for_candidate(win.method).is_none()
            {
                continue;
            }
            return Ok(Some(win.id));
        }
        Ok(None)
    }
}
