//! The engine-time budget (`[cycle] max_engine_share` over a sliding
//! `[cycle] engine_window_s`): every second the daemon's engine runs take
//! is taken from the people the stack serves, so their share of the
//! window's wall-clock time is capped.
//!
//! The rule, checked before each cycle: a cycle starts only when the engine
//! time of the runs started in the window ending now (`(now - window, now]`), plus what a cycle
//! costs (the median engine time of the window's last five cycles), fits
//! in `max_engine_share × engine_window_s`. Otherwise the daemon waits
//! (recorded, `daemon::wait`) until enough of the window's runs have aged
//! out of it. A cycle is never cut short for the budget: one that costs
//! more than the recent ones passes the cap by its excess, and the next
//! cycle waits that much longer.

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::config::CycleSettings;
use crate::display;
use crate::ledger::{EngineRun, EngineSeconds, Ledger, LedgerError};

/// How many of the window's latest cycles the next cycle's cost is read
/// from: enough to see past one long floor, few enough to follow a change.
const RECENT_CYCLES: usize = 5;

/// The cap and its window.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Budget {
    pub max_share: f64,
    pub window: Duration,
}

/// The window's engine time.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Spent {
    pub engine: EngineSeconds,
    pub budget: Budget,
    /// What the next cycle is expected to cost, seconds.
    pub next_cycle_s: f64,
}

impl Spent {
    /// The share of the window's wall-clock time taken.
    pub fn share(&self) -> f64 {
        self.engine.total() / self.budget.window.as_secs_f64()
    }
}

impl std::fmt::Display for Spent {
    /// `engine 42% of 1 h (max 50%)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "engine {:.1}% of {} (max {:.0}%)",
            100.0 * self.share(),
            display::age(self.budget.window()),
            100.0 * self.budget.max_share
        )
    }
}

/// Whether a cycle may start now.
#[derive(Debug, Clone, PartialEq)]
pub enum Look {
    Open(Spent),
    /// Over budget: no cycle before `until`.
    Over {
        spent: Spent,
        until: DateTime<Utc>,
        reason: String,
    },
}

impl Look {
    pub fn spent(&self) -> &Spent {
        match self {
            Look::Open(s) | Look::Over { spent: s, .. } => s,
        }
    }
}

impl Budget {
    pub fn of(cycle: &CycleSettings) -> Budget {
        Budget {
            max_share: cycle.max_engine_share.get(),
            window: cycle.engine_window_s.duration(),
        }
    }

    fn window(&self) -> chrono::Duration {
        chrono::Duration::from_std(self.window).unwrap_or(chrono::Duration::MAX)
    }

    /// Reads the window ending `now` from the ledger (this handle's stack).
    pub async fn read(&self, ledger: &Ledger, now: DateTime<Utc>) -> Result<Look, LedgerError> {
        let since = now.checked_sub_signed(self.window()).unwrap_or(now);
        let runs = ledger.engine_runs(since, now).await?;
        Ok(self.look(&runs, now))
    }

    /// The rule, on the runs started in the window ending `now` (oldest
    /// first, as [`Ledger::engine_runs`] returns them).
    pub fn look(&self, runs: &[EngineRun], now: DateTime<Utc>) -> Look {
        let since = now.checked_sub_signed(self.window()).unwrap_or(now);
        let runs: Vec<&EngineRun> = runs
            .iter()
            .filter(|r| r.started_at > since && r.started_at <= now)
            .collect();
        let engine = runs.iter().fold(EngineSeconds::default(), |mut e, r| {
            e.add(r.engine_use, r.seconds);
            e
        });
        let cap = self.max_share * self.window.as_secs_f64();
        // A cycle costlier than the whole budget still runs in an empty window.
        let next_cycle_s = next_cycle_cost(&runs).min(cap);
        let spent = Spent {
            engine,
            budget: *self,
            next_cycle_s,
        };
        if self.max_share >= 1.0 || engine.total() + next_cycle_s <= cap {
            return Look::Open(spent);
        }
        // Runs leave the window oldest first; the cycle may start once what
        // is left and the next cycle fit.
        let mut left = engine.total();
        let mut until = now;
        for r in &runs {
            left -= r.seconds;
            until = r.started_at + self.window();
            if left + next_cycle_s <= cap {
                break;
            }
        }
        let until = until.max(now);
        let reason = format!(
            "the engine ran {:.0} s of the last {} ({:.0}%, [cycle] max_engine_share {:.0}%) and a cycle takes about {:.0} s: no cycle until {} UTC, when enough of the window's runs have aged out",
            engine.total(),
            display::age(self.window()),
            100.0 * spent.share(),
            100.0 * self.max_share,
            next_cycle_s,
            until.format("%H:%M:%S")
        );
        Look::Over {
            spent,
            until,
            reason,
        }
    }
}

/// The median engine time of the last [`RECENT_CYCLES`] cycles among
/// `runs`; 0 without any.
fn next_cycle_cost(runs: &[&EngineRun]) -> f64 {
    let mut order: Vec<crate::ledger::CycleId> = Vec::new();
    let mut sums: std::collections::HashMap<crate::ledger::CycleId, f64> = Default::default();
    for r in runs {
        if !sums.contains_key(&r.cycle_id) {
            order.push(r.cycle_id);
        }
        *sums.entry(r.cycle_id).or_default() += r.seconds;
    }
    let recent: Vec<f64> = order
        .iter()
        .rev()
        .take(RECENT_CYCLES)
        .map(|c| sums[c])
        .collect();
    crate::judge::noise::median(&recent).unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;
    use crate::ledger::CycleId;
    use crate::vocab::EngineUse;

    fn run(cycle: i64, at: DateTime<Utc>, seconds: f64) -> EngineRun {
        EngineRun {
            cycle_id: CycleId(cycle),
            started_at: at,
            seconds,
            engine_use: EngineUse::Ab,
        }
    }

    fn budget(share: f64, window_s: u64) -> Budget {
        Budget {
            max_share: share,
            window: Duration::from_secs(window_s),
        }
    }

    /// Simulates a daemon whose every cycle runs `cycle_s` of engine time
    /// in runs of 10 s back to back, under the rule, for `hours`; returns
    /// every run.
    fn simulate(b: Budget, cycle_s: f64, idle_s: i64, hours: i64) -> Vec<EngineRun> {
        let t0 = Utc.with_ymd_and_hms(2026, 12, 4, 0, 0, 0).unwrap();
        let end = t0 + chrono::Duration::hours(hours);
        let mut now = t0;
        let mut runs: Vec<EngineRun> = Vec::new();
        let mut cycle = 0;
        while now < end {
            match b.look(&runs, now) {
                Look::Over { until, .. } => {
                    assert!(until > now, "a wait moves time on");
                    now = until;
                }
                Look::Open(_) => {
                    cycle += 1;
                    let mut left = cycle_s;
                    while left > 0.0 {
                        let s = left.min(10.0);
                        runs.push(run(cycle, now, s));
                        now += chrono::Duration::milliseconds((s * 1000.0) as i64);
                        left -= s;
                    }
                    now += chrono::Duration::seconds(idle_s);
                }
            }
        }
        runs
    }

    /// Over every window, the engine time stays within the share: sliding
    /// the window along a simulated day of back-to-back cycles (each start
    /// of a run a window end), it never holds more than the cap.
    #[test]
    fn the_budget_holds_over_every_window() {
        for (share, cycle_s) in [(0.5, 120.0), (0.1, 45.0), (0.25, 300.0), (0.02, 10.0)] {
            let b = budget(share, 3600);
            let runs = simulate(b, cycle_s, 1, 24);
            let cap = share * 3600.0;
            let mut worst: f64 = 0.0;
            for end in runs
                .iter()
                .map(|r| r.started_at + chrono::Duration::seconds(10))
            {
                let start = end - chrono::Duration::seconds(3600);
                let inside: f64 = runs
                    .iter()
                    .filter(|r| r.started_at >= start && r.started_at < end)
                    .map(|r| r.seconds)
                    .sum();
                worst = worst.max(inside);
            }
            assert!(
                worst <= cap + 1e-6,
                "share {share}, cycles of {cycle_s} s: {worst} s in one window, cap {cap}"
            );
            // And the cap is used, not wasted: over the day the engine ran
            // at least 90% of it (the rest is rounding to whole cycles).
            let total: f64 = runs.iter().map(|r| r.seconds).sum();
            assert!(
                total >= 0.9 * share * 24.0 * 3600.0 - cycle_s,
                "share {share}: {total} s in a day"
            );
        }
    }

    #[test]
    fn without_a_cap_nothing_waits_and_an_empty_window_always_opens() {
        let runs = simulate(budget(1.0, 60), 30.0, 0, 1);
        let total: f64 = runs.iter().map(|r| r.seconds).sum();
        assert!(total > 3500.0, "{total}");
        let now = Utc.with_ymd_and_hms(2026, 12, 4, 0, 0, 0).unwrap();
        assert!(matches!(budget(0.01, 60).look(&[], now), Look::Open(_)));
    }

    #[test]
    fn over_budget_it_says_how_much_and_until_when() {
        let t0 = Utc.with_ymd_and_hms(2026, 12, 4, 12, 0, 0).unwrap();
        let b = budget(0.5, 3600);
        // 1500 s an hour ago, 300 s since: a cycle of 300 s more would
        // pass 1800 s until the oldest has aged out.
        let runs = vec![
            run(1, t0 - chrono::Duration::seconds(3000), 1500.0),
            run(2, t0 - chrono::Duration::seconds(400), 300.0),
        ];
        let Look::Over {
            spent,
            until,
            reason,
        } = b.look(&runs, t0)
        else {
            panic!("over budget")
        };
        assert_eq!(until, t0 + chrono::Duration::seconds(600));
        assert!((spent.share() - 0.5).abs() < 1e-9);
        assert!(reason.contains("ran 1800 s of the last 1h"), "{reason}");
        assert!(reason.contains("max_engine_share 50%"), "{reason}");
        assert!(reason.contains("12:10:00 UTC"), "{reason}");
        assert_eq!(spent.to_string(), "engine 50.0% of 1h (max 50%)");
        // Once that run has aged out, a cycle may start.
        let later = until + chrono::Duration::seconds(1);
        assert!(matches!(b.look(&runs, later), Look::Open(_)));
    }

    /// The window slides: a run counts while it started less than a
    /// window ago, and no longer once it started a window ago or more.
    #[test]
    fn a_run_counts_exactly_while_it_started_within_the_window() {
        let now = Utc.with_ymd_and_hms(2026, 12, 4, 12, 0, 0).unwrap();
        let b = budget(0.5, 3600);
        let at = |ago_s: i64| vec![run(1, now - chrono::Duration::seconds(ago_s), 1800.0)];
        for ago in [1, 600, 3000, 3599] {
            assert!(
                matches!(b.look(&at(ago), now), Look::Over { .. }),
                "a run {ago} s ago counts"
            );
        }
        for ago in [3600, 3601, 7200] {
            let look = b.look(&at(ago), now);
            assert!(
                matches!(look, Look::Open(_)),
                "a run {ago} s ago is out: {look:?}"
            );
            assert_eq!(look.spent().engine.total(), 0.0);
        }
    }
}
