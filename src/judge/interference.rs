//! Which blocks were interfered with: a run contended markedly more than
//! the runs of the floor it is judged against.
//!
//! A run's contention is the mean number of runnable tasks per core during
//! it, at least 1 (`measure::pressure::contention`). The floor is measured
//! under whatever steady load the machine carries, so its spread already
//! holds that load's noise; what the floor does not hold is a *change* of
//! load during the A/B, a build starting beside it. So a run is interfered
//! with when its contention is above the floor's typical run's by more
//! than the policy's `max_contention_rise` (a fraction: 0.5 is half as many
//! tasks again per core), however busy the machine is: 16 busy loops
//! throughout the floor and the A/B discard nothing, 8 more during one run
//! discard its block. A rise is a ratio, so on a quiet machine the same
//! burst rises far more (from 1 to 5 per core) and is caught as surely.
//!
//! The rule is one-sided: a run that was contended *less* than the floor's
//! is not discarded, since a quieter run is no burst. It also does not look
//! at the run's own time: discarding slow runs for being slow would bias
//! every estimate toward the faster arm.
//!
//! The count includes the runs' own threads, the same in every run of one
//! profile; a candidate that ran more threads than the live profile would
//! read as more contended (no menu entry changes the thread count).

use super::noise;
use super::sequential::Timed;

/// A contention's rise over a reference, as a fraction: 0.5 is half again.
pub fn rise(contention: f64, reference: f64) -> f64 {
    contention / reference - 1.0
}

/// The largest rise of `runs` over `reference`, when one is above `limit`:
/// the block they make up is discarded. `None` when either is missing
/// (contention not judged, a floor without the reading) or no run rose
/// that far; runs without a reading are not judged.
pub fn interfered(runs: &[Timed], reference: Option<f64>, limit: Option<f64>) -> Option<f64> {
    let (reference, limit) = (reference?, limit?);
    if !(reference.is_finite() && reference > 0.0) {
        return None;
    }
    let worst = runs
        .iter()
        .filter_map(|r| r.contention)
        .map(|c| rise(c, reference))
        .fold(f64::NEG_INFINITY, f64::max);
    (worst > limit).then_some(worst)
}

/// The reference while a floor is being measured, when there is no floor
/// yet: the median contention of the runs before the block being judged
/// (its warmups included). `None` before any run has a reading.
pub fn running_reference(readings: &[f64]) -> Option<f64> {
    noise::median(readings)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(contention: f64) -> Timed {
        Timed {
            seconds_per_token: 1.0,
            contention: Some(contention),
        }
    }

    #[test]
    fn a_steady_high_load_passes_and_a_burst_above_it_is_caught() {
        // 16 busy loops plus the machine's own on 2 cores: about 12.5 tasks
        // a core, in the floor and in the A/B alike (measured, see
        // benches/traces/README.md). Not interference: the floor holds it.
        let floor = Some(12.5);
        let limit = Some(0.25);
        let steady = [run(12.4), run(12.9), run(12.6), run(12.2)];
        assert_eq!(interfered(&steady, floor, limit), None);
        // Eight more busy loops during one run: 16.5 a core, a 32% rise.
        let burst = [run(12.4), run(16.5), run(12.6), run(12.2)];
        let worst = interfered(&burst, floor, limit).expect("the burst is caught");
        assert!((worst - 0.32).abs() < 1e-9, "{worst}");
    }

    #[test]
    fn the_same_burst_on_a_quiet_machine_rises_further() {
        // Quiet: one task a core (the clamp); 8 busy loops: 5 a core.
        let worst = interfered(&[run(5.0)], Some(1.0), Some(0.25)).unwrap();
        assert!((worst - 4.0).abs() < 1e-12);
    }

    #[test]
    fn a_quieter_run_is_no_burst_and_missing_readings_judge_nothing() {
        assert_eq!(interfered(&[run(1.0)], Some(12.5), Some(0.25)), None);
        assert_eq!(interfered(&[run(40.0)], None, Some(0.25)), None);
        assert_eq!(interfered(&[run(40.0)], Some(1.0), None), None);
        assert_eq!(interfered(&[run(40.0)], Some(0.0), Some(0.25)), None);
        let unread = Timed::plain(1.0);
        assert_eq!(interfered(&[unread], Some(1.0), Some(0.25)), None);
        // At the limit exactly is not beyond it.
        assert_eq!(interfered(&[run(1.25)], Some(1.0), Some(0.25)), None);
    }

    #[test]
    fn the_running_reference_is_the_median_so_far() {
        assert_eq!(running_reference(&[]), None);
        assert_eq!(running_reference(&[3.0, 1.0, 2.0]), Some(2.0));
    }
}
