//! Each run's deadline, from this profile's own measured run times.
//!
//! A fixed `run_timeout_s` is wrong both ways: on a loaded 2-core machine
//! one run of the demo's slow starting profile took 118 s against 120 s and
//! every cycle failed, while a generous fixed value lets a hung engine hold
//! a cycle for half an hour. So the configured value is the cap, and a run
//! of a profile with a few measured runs behind it gets [`FACTOR`] times the
//! [`QUANTILE`] of its recent durations (never under [`FLOOR`]). That leaves
//! room for the machine to become several times slower mid-measurement
//! while a hang is still caught in minutes. The first run of a measurement
//! (a cold engine: its model read, caches empty) gets [`FIRST_RUN`] times
//! that, and a profile without enough history gets the cap.

use std::time::Duration;

/// The deadline is this many times the profile's typical run time...
pub const FACTOR: f64 = 10.0;
/// ...taken as this quantile of its recent valid runs...
pub const QUANTILE: f64 = 0.9;
/// ...once it has at least this many.
pub const MIN_RUNS: usize = 3;
/// Recent runs considered.
pub const HISTORY: u32 = 20;
/// No derived deadline is shorter than this.
pub const FLOOR: Duration = Duration::from_secs(30);
/// The first run of a measurement gets this many times the derived deadline.
pub const FIRST_RUN: f64 = 2.0;

/// One run's deadline and where it came from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Deadline {
    /// `[measure] run_timeout_s`: no history yet, or the derived one is larger.
    Cap(Duration),
    /// Derived from the profile's recent runs (`typical` is their quantile).
    Derived { after: Duration, typical: Duration },
}

impl Deadline {
    /// The deadline for a run of a profile whose recent valid runs took
    /// `durations_s` seconds (any order), under `cap`.
    pub fn for_run(cap: Duration, durations_s: &[f64], first_of_measurement: bool) -> Deadline {
        let mut d: Vec<f64> = durations_s
            .iter()
            .copied()
            .filter(|x| x.is_finite() && *x >= 0.0)
            .collect();
        if d.len() < MIN_RUNS {
            return Deadline::Cap(cap);
        }
        d.sort_by(f64::total_cmp);
        // Nearest rank: with few runs this is the slowest, as it should be.
        let rank = ((QUANTILE * d.len() as f64).ceil() as usize).clamp(1, d.len());
        let typical = Duration::from_secs_f64(d[rank - 1]);
        let mut after = typical.mul_f64(FACTOR).max(FLOOR);
        if first_of_measurement {
            after = after.mul_f64(FIRST_RUN);
        }
        if after >= cap {
            Deadline::Cap(cap)
        } else {
            Deadline::Derived { after, typical }
        }
    }

    pub fn duration(&self) -> Duration {
        match *self {
            Deadline::Cap(d) => d,
            Deadline::Derived { after, .. } => after,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CAP: Duration = Duration::from_secs(1800);

    #[test]
    fn without_history_the_cap_applies() {
        assert_eq!(Deadline::for_run(CAP, &[], false), Deadline::Cap(CAP));
        assert_eq!(
            Deadline::for_run(CAP, &[5.0, 6.0], false),
            Deadline::Cap(CAP)
        );
    }

    #[test]
    fn with_history_it_is_a_multiple_of_the_slow_end() {
        let d = Deadline::for_run(CAP, &[10.0, 12.0, 11.0, 30.0], false);
        assert_eq!(
            d,
            Deadline::Derived {
                after: Duration::from_secs(300),
                typical: Duration::from_secs(30)
            }
        );
        // The first run of a measurement gets twice that.
        let first = Deadline::for_run(CAP, &[10.0, 12.0, 11.0, 30.0], true);
        assert_eq!(first.duration(), Duration::from_secs(600));
    }

    #[test]
    fn it_never_exceeds_the_cap_nor_falls_under_the_floor() {
        assert_eq!(
            Deadline::for_run(Duration::from_secs(120), &[20.0, 20.0, 20.0], false),
            Deadline::Cap(Duration::from_secs(120))
        );
        assert_eq!(
            Deadline::for_run(CAP, &[0.1, 0.1, 0.1], false).duration(),
            FLOOR
        );
    }

    /// The failure seen under load: the demo's starting profile ran in about
    /// 15 s quiet and 118 s at load 15-19; a deadline from its quiet runs
    /// still lets the loaded run finish.
    #[test]
    fn a_run_eight_times_slower_than_its_history_still_fits() {
        let d = Deadline::for_run(CAP, &[14.0, 15.0, 15.5, 14.8], false);
        assert!(d.duration() > Duration::from_secs(118), "{d:?}");
    }
}
