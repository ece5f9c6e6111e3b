//! When a value whose A/Bs on a profile came out only `inconclusive` may be
//! measured again.
//!
//! An `inconclusive` A/B decided nothing: mostly the machine was too noisy
//! to measure a floor or to judge. Kept decided for good, one busy hour
//! would shut a value out of its profile for the weeks the daemon runs on
//! it. Reopened at once, the next cycle would spend the same engine time
//! under the same noise. So a value is measured again after the back-off
//! every undecided measurement keeps (`CycleRunner::noisy_backoff`, one
//! hour by default), and at most [`MAX_ATTEMPTS`] times in all, as a stage's
//! realization is ([`crate::ledger::MAX_REALIZATION_ATTEMPTS`]): an
//! effect that sits on the floor (B's trunk split in the shoot-out of
//! 2026-12-07, -17.4% [-26.5%, -7.3%] against a ±23.1% floor) stays
//! undecided however often it is measured, and is not worth an A/B every
//! hour. A `win`, `loss`, `within_noise` or `hash_mismatch` decides it for
//! good, as before.

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::vocab::VerdictKind;

/// A/Bs of one value on one profile that may end `inconclusive` before the
/// value stays decided.
pub const MAX_ATTEMPTS: usize = 3;

/// The clock and back-off the reopening is judged by.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Reopening {
    pub now: DateTime<Utc>,
    pub backoff: Duration,
}

impl Reopening {
    /// Whether a value whose measured verdicts on a profile are
    /// `verdicts` (kind and when its A/B started, any order) may be
    /// measured again: every one is `inconclusive`, fewer than
    /// [`MAX_ATTEMPTS`] of them, and the newest started `backoff` ago or
    /// more. No verdict at all is open too (nothing decided it).
    pub fn open(&self, verdicts: impl IntoIterator<Item = (VerdictKind, DateTime<Utc>)>) -> bool {
        match self.next_attempt(verdicts) {
            NextAttempt::Never => false,
            NextAttempt::Now => true,
            NextAttempt::At(at) => self.now >= at,
        }
    }

    /// When a value whose measured verdicts on a profile are `verdicts`
    /// may be measured again.
    pub fn next_attempt(
        &self,
        verdicts: impl IntoIterator<Item = (VerdictKind, DateTime<Utc>)>,
    ) -> NextAttempt {
        let mut attempts = 0;
        let mut newest: Option<DateTime<Utc>> = None;
        for (kind, at) in verdicts {
            if kind != VerdictKind::Inconclusive {
                return NextAttempt::Never;
            }
            attempts += 1;
            newest = newest.max(Some(at));
        }
        match newest {
            None => NextAttempt::Now,
            Some(_) if attempts >= MAX_ATTEMPTS => NextAttempt::Never,
            // A back-off too long to add is one that never ends.
            Some(newest) => chrono::Duration::from_std(self.backoff)
                .ok()
                .and_then(|b| newest.checked_add_signed(b))
                .map_or(NextAttempt::Never, NextAttempt::At),
        }
    }
}

/// When a value may be measured again ([`Reopening::next_attempt`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NextAttempt {
    /// Nothing measured it.
    Now,
    /// Its inconclusive attempts' back-off ends then.
    At(DateTime<Utc>),
    /// Decided for good.
    Never,
}

#[cfg(test)]
mod tests {
    use super::*;
    use VerdictKind::{Inconclusive, WithinNoise};

    fn at(minute: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + minute * 60, 0).unwrap()
    }

    fn after(minute: i64) -> Reopening {
        Reopening {
            now: at(minute),
            backoff: Duration::from_secs(3600),
        }
    }

    #[test]
    fn an_inconclusive_value_reopens_once_the_backoff_after_its_newest_attempt_is_over() {
        let once = [(Inconclusive, at(0))];
        assert!(!after(59).open(once));
        assert!(after(60).open(once));
        let twice = [(Inconclusive, at(0)), (Inconclusive, at(100))];
        assert!(!after(159).open(twice));
        assert!(after(160).open(twice));
        // A clock that went back is no reason to measure again.
        assert!(!after(-5).open(once));
    }

    #[test]
    fn the_third_inconclusive_attempt_or_any_decisive_verdict_decides_it_for_good() {
        let thrice = [
            (Inconclusive, at(0)),
            (Inconclusive, at(100)),
            (Inconclusive, at(200)),
        ];
        assert!(!after(100_000).open(thrice));
        let decided = [(Inconclusive, at(0)), (WithinNoise, at(100))];
        assert!(!after(100_000).open(decided));
        for kind in [
            VerdictKind::Win,
            VerdictKind::Loss,
            WithinNoise,
            VerdictKind::HashMismatch,
        ] {
            assert!(!after(100_000).open([(kind, at(0))]), "{kind:?}");
        }
        assert!(after(0).open([]));
        assert_eq!(after(0).next_attempt([]), NextAttempt::Now);
        assert_eq!(after(0).next_attempt(thrice), NextAttempt::Never);
        assert_eq!(
            after(0).next_attempt([(Inconclusive, at(0)), (Inconclusive, at(100))]),
            NextAttempt::At(at(160))
        );
    }
}
