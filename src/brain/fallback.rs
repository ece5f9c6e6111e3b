//! When the bandit chooses a cycle for the served model. Two reasons, each
//! with its bound in `[model]`:
//!
//! - `bandit_fallback_after`: every answer of the model was refused in that
//!   many cycles in a row (a model stuck on one refused choice would stall
//!   the loop);
//! - `bandit_after_no_win`: the model's own last experiments, that many in a
//!   row, were decided without a win. A model that answers validly but never
//!   picks a line (the demo's random-weights model never chose the draft in
//!   two 20-minute runs at 1e342c4, so nothing was staged) would otherwise
//!   leave that line untried for good; the bandit tries the line its lever
//!   favours ([`super::levers`]).
//!
//! The bandit's cycle is recorded as the bandit's, with a note saying why;
//! the model chooses again after it.

use crate::ledger::ExperimentOutcome;
use crate::vocab::{ProposerKind, VerdictKind};

use super::BanditProposer;

/// The bandit that stands in for the model, and when.
#[derive(Debug)]
pub(super) struct Fallback<R> {
    pub bandit: BanditProposer<R>,
    /// `[model] bandit_fallback_after` (at least 1).
    pub after_rejected: u32,
    /// The model's cycles in a row that ended with every answer refused,
    /// since the daemon started (a restart gives the model a fresh run).
    pub rejected_in_a_row: u32,
    /// `[model] bandit_after_no_win`; 0: never for this reason.
    pub after_no_win: u32,
    /// [`no_win_in_a_row`] of the history the cycle about to open reads
    /// (from [`super::Proposer::prepare`]).
    pub no_win_in_a_row: u32,
}

impl<R> Fallback<R> {
    pub fn new(bandit: BanditProposer<R>, after_rejected: u32, after_no_win: u32) -> Self {
        Fallback {
            bandit,
            after_rejected: after_rejected.max(1),
            rejected_in_a_row: 0,
            after_no_win,
            no_win_in_a_row: 0,
        }
    }

    /// Why the bandit chooses this cycle, if it does.
    pub fn due(&self) -> Option<String> {
        if self.rejected_in_a_row >= self.after_rejected {
            return Some(format!(
                "every answer of the served model was refused in {} cycles in a row ([model] bandit_fallback_after = {})",
                self.rejected_in_a_row, self.after_rejected
            ));
        }
        if self.after_no_win > 0 && self.no_win_in_a_row >= self.after_no_win {
            return Some(format!(
                "the served model's last {} experiments in a row found no win ([model] bandit_after_no_win = {})",
                self.no_win_in_a_row, self.after_no_win
            ));
        }
        None
    }

    /// The bandit took its cycle: both counts start again (the history's
    /// count is read again before the next cycle, from the ledger).
    pub fn taken(&mut self) {
        self.rejected_in_a_row = 0;
        self.no_win_in_a_row = 0;
    }
}

/// How many of the served model's own experiments, newest first, were
/// decided without a win (`within_noise` or `loss`, its `remeasure` A/As
/// included, and a win its confirmation did not repeat), before the first
/// of: a win of the model's that its confirmation repeated or is yet to
/// judge, an experiment the bandit chose (a fallback resets the count).
/// Confirmations and the orchestrator's scheduled A/As (no proposer) are
/// passed over, and so are experiments that decided nothing (failed,
/// inconclusive, hash mismatch): they say nothing of the model's choices.
///
/// A win that did not hold is no win found: it is never staged. Counted as
/// one, it put the bandit's turn off. In the newcomer's run beside two CPU
/// hogs at e17083c (2026-12-07), two of the model's pin counts won and were
/// not confirmed, and the bandit's cycle, which found the draft (-86%),
/// came after 1003 s instead of after about 510 s.
pub fn no_win_in_a_row(history: &[ExperimentOutcome]) -> u32 {
    let confirmed = |win: &ExperimentOutcome| {
        history
            .iter()
            .filter(|c| c.confirmation_of == Some(win.experiment_id))
            .find_map(|c| c.verdict.filter(|k| k.is_measured()))
            .is_none_or(|k| k == VerdictKind::Win)
    };
    let mut n = 0;
    for e in history {
        if e.confirmation_of.is_some() {
            continue;
        }
        match (e.proposer, e.verdict) {
            (Some(ProposerKind::Bandit), _) => break,
            (Some(ProposerKind::Model), Some(VerdictKind::Win)) if confirmed(e) => break,
            (
                Some(ProposerKind::Model),
                Some(VerdictKind::Win | VerdictKind::WithinNoise | VerdictKind::Loss),
            ) => n += 1,
            _ => {}
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::ExperimentId;
    use crate::menu::MenuId;
    use crate::vocab::Digest;

    fn e(proposer: Option<ProposerKind>, verdict: VerdictKind) -> ExperimentOutcome {
        let split = crate::menu::Proposal {
            experiment: MenuId::RebalanceTrunkCache,
            params: Default::default(),
        };
        ExperimentOutcome {
            proposer,
            ..crate::brain::double::measured_on(1, &split, verdict, Digest::of(b"base"))
        }
    }

    const M: Option<ProposerKind> = Some(ProposerKind::Model);
    const B: Option<ProposerKind> = Some(ProposerKind::Bandit);
    use VerdictKind::*;

    #[test]
    fn the_models_experiments_without_a_win_count_back_to_its_win_or_the_bandits_turn() {
        assert_eq!(no_win_in_a_row(&[]), 0);
        let streak = [
            e(M, WithinNoise),
            e(None, WithinNoise), // a scheduled floor: passed over
            e(M, Loss),
            e(M, Failed), // decided nothing: passed over
            e(M, Inconclusive),
            e(M, WithinNoise),
            e(M, Win),
            e(M, WithinNoise),
        ];
        assert_eq!(no_win_in_a_row(&streak), 3);
        let mut confirmation = e(None, Win);
        confirmation.confirmation_of = Some(ExperimentId(9));
        let after_bandit = [
            e(M, Loss),
            confirmation,
            e(B, WithinNoise),
            e(M, WithinNoise),
        ];
        assert_eq!(no_win_in_a_row(&after_bandit), 1);
        assert_eq!(no_win_in_a_row(&[e(M, Win), e(M, Loss)]), 0);
    }

    #[test]
    fn a_win_its_confirmation_did_not_repeat_counts_as_no_win() {
        let win = |id: i64| ExperimentOutcome {
            experiment_id: ExperimentId(id),
            ..e(M, Win)
        };
        let confirming = |id: i64, verdict: VerdictKind| ExperimentOutcome {
            confirmation_of: Some(ExperimentId(id)),
            ..e(None, verdict)
        };
        // Newest first: two wins that did not hold, between no-wins.
        let history = [
            e(M, WithinNoise),
            confirming(7, WithinNoise),
            win(7),
            e(M, Loss),
            confirming(5, Loss),
            win(5),
            e(M, WithinNoise),
        ];
        assert_eq!(no_win_in_a_row(&history), 5);
        // A confirmed win, and one whose confirmation is yet to come, stop
        // the count; a confirmation that failed to measure judged nothing.
        let held = [e(M, Loss), confirming(7, Win), win(7), e(M, Loss)];
        assert_eq!(no_win_in_a_row(&held), 1);
        let pending = [win(7), e(M, Loss)];
        assert_eq!(no_win_in_a_row(&pending), 0);
        let unmeasured = [confirming(7, Failed), win(7), e(M, Loss)];
        assert_eq!(no_win_in_a_row(&unmeasured), 0);
    }

    #[test]
    fn the_bandit_is_due_for_either_reason_and_never_for_no_wins_at_0() {
        let bandit = || {
            BanditProposer::new(
                super::super::BanditAlgorithm::Ucb1,
                <rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(1),
            )
        };
        let mut f = Fallback::new(bandit(), 3, 4);
        assert_eq!(f.due(), None);
        f.no_win_in_a_row = 3;
        assert_eq!(f.due(), None);
        f.no_win_in_a_row = 4;
        let why = f.due().unwrap();
        assert!(
            why.contains(
                "last 4 experiments in a row found no win ([model] bandit_after_no_win = 4)"
            ),
            "{why}"
        );
        f.taken();
        assert_eq!(f.due(), None);
        f.rejected_in_a_row = 3;
        assert!(f.due().unwrap().contains("bandit_fallback_after = 3"));
        let mut never = Fallback::new(bandit(), 3, 0);
        never.no_win_in_a_row = 1000;
        assert_eq!(never.due(), None);
    }
}
