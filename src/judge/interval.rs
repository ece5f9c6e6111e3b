//! The interval behind every A/B decision: one statistic per ABBA block,
//! and a repeated confidence interval over the looks whose width comes from
//! the experiment's own spread.
//!
//! Per block (runs `B C C B` or `C B B C`) each arm's two runs are averaged
//! in log time, and the block's statistic is candidate minus baseline: the
//! ABBA block's cancellation of linear drift (Cochran & Cox 1957). Both arms
//! are treated alike, always. Real interference is not "slowdowns only": on
//! this machine bursts last several runs and hit either arm, so a rule that
//! keeps an arm's faster run (Chen & Revels 2016) is asymmetric exactly when
//! a burst hits one arm, and it staged a false win on a real engine (a
//! discordant candidate pair lost its slow run while the baseline's two were
//! averaged). A block whose arms disagree within themselves is instead
//! discarded whole and re-run ([`discordant`]), which cannot favour either
//! arm: the gap between an arm's own two runs does not depend on the effect.

use super::policy::Floor;

/// When either arm's two runs of a block differ in log time by more than
/// this many floors, the block is discarded and re-run. The floor is the σ
/// of a pair's log ratio (two runs), exactly the σ of this gap, so on clean
/// runs this is a 4σ event (6 in 100,000); what it catches is a burst that
/// covered part of the block.
pub const DISCORDANT_FLOORS: f64 = 4.0;

/// The level of the interval every verdict reports (stage list and show, the
/// report, the projection): a 90% repeated confidence interval. The test
/// decides on a narrower interval at the policy's `confidence` (a wrong
/// verdict needs that one to miss the truth by a whole floor), but people
/// read a printed interval as "the effect lies here, at 90%", so the one
/// shown is computed over the same blocks at this level, with Pocock's
/// constant for the same looks: it covers the effect at every look at
/// once, so also at the look where the test stopped.
pub const REPORTED_CONFIDENCE: f64 = 0.90;

/// A point estimate and interval on the log-ratio scale.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Estimate {
    /// Mean of the block statistics.
    pub log_ratio: f64,
    /// `(lo, hi)`, covering the effect at the policy's confidence at every
    /// look at once.
    pub interval: (f64, f64),
}

impl Estimate {
    /// The effect as a relative change of s/token, `exp(estimate) - 1`.
    pub fn relative(&self) -> f64 {
        self.log_ratio.exp_m1()
    }

    /// The interval as relative changes.
    pub fn relative_interval(&self) -> (f64, f64) {
        (self.interval.0.exp_m1(), self.interval.1.exp_m1())
    }
}

/// The statistic of one ABBA block from its two pairs of seconds per token,
/// `(baseline, candidate)` each: the mean log time of the candidate's two
/// runs minus the baseline's. Swapping the arms negates it exactly.
pub(crate) fn block_statistic(first: (f64, f64), second: (f64, f64)) -> f64 {
    0.5 * (first.1.ln() + second.1.ln()) - 0.5 * (first.0.ln() + second.0.ln())
}

/// The larger log gap between an arm's own two runs in a block, when it
/// exceeds [`DISCORDANT_FLOORS`] floors: the block says more about the
/// machine than about the profiles.
pub(crate) fn discordant(first: (f64, f64), second: (f64, f64), floor: Floor) -> Option<f64> {
    let gap = |a: f64, b: f64| (a.ln() - b.ln()).abs();
    let worst = gap(first.0, second.0).max(gap(first.1, second.1));
    (worst > DISCORDANT_FLOORS * floor.get()).then_some(worst)
}

/// The log gaps between each arm's own two runs of a block, `(baseline,
/// candidate)`: what the block says about the noise, whatever the effect.
pub fn arm_gaps(first: (f64, f64), second: (f64, f64)) -> (f64, f64) {
    (first.0.ln() - second.0.ln(), first.1.ln() - second.1.ln())
}

/// Block statistics so far, with running moments (Welford's update: stable
/// for the tiny spreads of near-identical runs), and the first block's arm
/// gaps, its only spread.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Blocks {
    pub(crate) n: usize,
    mean: f64,
    m2: f64,
    /// The sum of every block's two squared arm gaps ([`arm_gaps`]).
    gaps: f64,
}

impl Blocks {
    /// Adds one block: its statistic and its arms' own gaps.
    pub(crate) fn push(&mut self, x: f64, gaps: (f64, f64)) {
        self.gaps += gaps.0 * gaps.0 + gaps.1 * gaps.1;
        self.n += 1;
        let delta = x - self.mean;
        self.mean += delta / self.n as f64;
        self.m2 += delta * (x - self.mean);
    }

    /// The spread of one block's statistic as its own runs estimate it,
    /// with its degrees of freedom: from two blocks on, the blocks' sample
    /// standard deviation (`m − 1`); of a single block, its arm gaps (2).
    ///
    /// Why the gaps: a block's statistic is `½(c₁ + c₂) − ½(b₁ + b₂)` in
    /// log time, and each arm's gap `b₁ − b₂`, `c₁ − c₂`, is uncorrelated
    /// with it when the runs are exchangeable (the same runs, added and
    /// subtracted), with variance twice a run's, while the statistic's is
    /// one run's. So `(g_b² + g_c²) / 4` estimates the statistic's variance
    /// on two degrees of freedom, independent of the effect. Under drift or
    /// runs that correlate with their neighbours it reads high, never low
    /// (with lag-1 correlation `ρ`, by `ρ²(1 − ρ)` run variances), which
    /// only widens the interval. What it cannot see is a burst on exactly
    /// the two middle runs of a block; that is why the first look has the
    /// Student quantile of 2 degrees of freedom and every look's constant
    /// accounts for it (see [`Self::interval`]).
    ///
    /// From two blocks on, the larger of the two estimates of the same
    /// variance, each with its own degrees of freedom: the blocks' sample
    /// spread (`m − 1`), and the arm gaps of all `m` blocks pooled (`2m`).
    /// The blocks' spread alone had one degree of freedom at two blocks,
    /// fewer than the one block before it, and its Student quantile at the
    /// reported 90% (tens of spreads) kept a verdict's interval from
    /// agreeing with it ([`super::sequential::agrees`]) for blocks after
    /// the effect was plain. The pooled gaps read high, never low, under
    /// drift and correlated runs (above); what they miss, a level shift
    /// between blocks that the ABBA order does not cancel, the blocks'
    /// own spread still sees, and then it is the larger and is used.
    pub(crate) fn own_spread(&self) -> Option<(f64, f64)> {
        match self.n {
            0 => None,
            1 => Some(((self.gaps / 4.0).sqrt(), 2.0)),
            n => {
                let m = n as f64;
                let blocks = (self.m2 / (m - 1.0)).sqrt();
                let gaps = (self.gaps / (4.0 * m)).sqrt();
                Some(if blocks >= gaps {
                    (blocks, m - 1.0)
                } else {
                    (gaps, 2.0 * m)
                })
            }
        }
    }

    /// The spread the reported interval is computed from, with its degrees
    /// of freedom: the blocks' spread and their arm gaps pooled into one
    /// estimate of the same variance, `(Σ(x − x̄)² + Σg²/2) / (3m − 1)` on
    /// `3m − 1` degrees of freedom (of a single block, its gaps on 2, as
    /// [`Self::own_spread`]).
    ///
    /// Why not the larger of the two, as the decision takes: the larger of
    /// two estimates with its own few degrees of freedom is a decision's
    /// guard against a level shift the ABBA order does not cancel (the
    /// blocks' spread sees it, the gaps do not), and the decision's narrow
    /// interval needs the guard. The reported one is read as "the effect
    /// lies here, at 90%", and at two blocks the blocks' spread has one
    /// degree of freedom: its Student quantile at the reported level is
    /// about 24, so a `within_noise` verdict against a floor of ±9.2% once
    /// showed `+1.1% [-83.3%, +510.4%]`, and a plain win waited blocks for
    /// its reported interval to agree ([`super::sequential::agrees`]). The
    /// pooled estimate uses every degree of freedom the blocks carry; a
    /// level shift still enlarges it through the blocks' term, and the
    /// floor still bounds the width from below. Its coverage on the real
    /// traces is `judge_replay`'s first table.
    pub(crate) fn pooled_spread(&self) -> Option<(f64, f64)> {
        match self.n {
            0 => None,
            n => {
                let df = 3.0 * n as f64 - 1.0;
                Some((((self.m2 + self.gaps / 2.0) / df).sqrt(), df))
            }
        }
    }

    /// The interval a verdict reports, at `boundary` (the reported level's
    /// constant): [`Self::interval`]'s shape, from [`Self::pooled_spread`].
    pub(crate) fn reported_interval(&self, floor: Floor, boundary: f64) -> Option<(f64, f64)> {
        Some(self.interval_from(self.pooled_spread()?, floor, boundary))
    }

    /// The repeated confidence interval after the blocks so far; `None`
    /// before the first block.
    ///
    /// `mean ± max(t · s, z · floor/√2) / √m` over `m` blocks. `z` is
    /// Pocock's constant of the policy ([`super::Policy::boundary`]) and `t`
    /// the Student quantile at the same per-look tail with the own spread's
    /// degrees of freedom (the significance-level approach to an unknown
    /// variance, Jennison & Turnbull 2000, "Group Sequential Methods",
    /// §3.8), so the width comes from the experiment's own spread `s`
    /// ([`Self::own_spread`]: the blocks', or the first block's arm gaps).
    /// The floor only widens it: `floor² / 2` is a block's variance on
    /// clean runs (each arm's mean of two halves a run's variance, and a
    /// run's is half a pair's), so a few blocks that agree by luck cannot
    /// make the interval narrower than the machine's measured noise allows.
    pub(crate) fn estimate(&self, floor: Floor, boundary: f64) -> Option<Estimate> {
        let interval = self.interval(floor, boundary)?;
        Some(Estimate {
            log_ratio: self.mean,
            interval,
        })
    }

    /// The interval of [`Self::estimate`] alone, at `boundary`.
    pub(crate) fn interval(&self, floor: Floor, boundary: f64) -> Option<(f64, f64)> {
        Some(self.interval_from(self.own_spread()?, floor, boundary))
    }

    /// `mean ± max(t · s, z · floor/√2) / √m` for a spread `(s, df)`; the
    /// caller has a block, so there is always one.
    fn interval_from(&self, (s, df): (f64, f64), floor: Floor, boundary: f64) -> (f64, f64) {
        let m = self.n as f64;
        let by_floor = boundary * floor.get() / std::f64::consts::SQRT_2;
        let own = student_quantile(boundary, df) * s;
        let half = own.max(by_floor) / m.sqrt();
        (self.mean - half, self.mean + half)
    }
}

/// The Student-t quantile with `nu` degrees of freedom at the upper tail
/// probability of the standard normal quantile `z`.
/// Cached per thread: a policy asks for the same few `(z, nu)` at every look,
/// and the replay benchmark asks millions of times.
pub(crate) fn student_quantile(z: f64, nu: f64) -> f64 {
    use statrs::distribution::{ContinuousCDF, Normal, StudentsT};
    use std::cell::RefCell;
    use std::collections::HashMap;
    thread_local! {
        static CACHE: RefCell<HashMap<(u64, u64), f64>> = RefCell::new(HashMap::new());
    }
    let key = (z.to_bits(), nu.to_bits());
    if let Some(q) = CACHE.with(|c| c.borrow().get(&key).copied()) {
        return q;
    }
    let tail = Normal::standard().sf(z);
    let q = StudentsT::new(0.0, 1.0, nu)
        .map(|t| t.inverse_cdf(1.0 - tail))
        .unwrap_or(f64::INFINITY);
    CACHE.with(|c| c.borrow_mut().insert(key, q));
    q
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::judge::policy::{Confidence, Policy};
    use rand::SeedableRng;
    use rand::rngs::StdRng;
    use rand_distr::{Distribution, Normal};

    /// From two blocks on the spread is the larger of the blocks' own
    /// (m − 1 degrees of freedom) and their arm gaps pooled (2m).
    #[test]
    fn two_blocks_take_the_larger_spread_with_its_own_degrees_of_freedom() {
        // Blocks that agree exactly, whose arms' runs differ by 0.1 and 0.2.
        let mut b = Blocks::default();
        b.push(-0.3, (0.1, 0.2));
        b.push(-0.3, (0.2, 0.1));
        let (s, df) = b.own_spread().unwrap();
        assert!((s - (0.1f64 / 8.0).sqrt()).abs() < 1e-12, "{s}");
        assert_eq!(df, 4.0);
        // Blocks 0.4 apart whose arms' runs agree: the blocks' spread.
        let mut b = Blocks::default();
        b.push(-0.1, (0.0, 0.0));
        b.push(-0.5, (0.0, 0.0));
        let (s, df) = b.own_spread().unwrap();
        assert!((s - 0.08f64.sqrt()).abs() < 1e-12, "{s}");
        assert_eq!(df, 1.0);
    }

    /// The reported interval's spread pools the blocks' (m − 1 degrees of
    /// freedom) and their arm gaps' (2m) into one on 3m − 1; of one block
    /// it is the gaps', as the decision's.
    #[test]
    fn the_reported_spread_pools_the_blocks_and_their_gaps() {
        let mut one = Blocks::default();
        one.push(-0.3, (0.1, 0.2));
        assert_eq!(one.pooled_spread(), one.own_spread());
        // Blocks that agree exactly: (0 + 0.1 / 2) / 5.
        let mut b = one;
        b.push(-0.3, (0.2, 0.1));
        let (s, df) = b.pooled_spread().unwrap();
        assert!((s - 0.1).abs() < 1e-12, "{s}");
        assert_eq!(df, 5.0);
        // Blocks 0.4 apart whose arms' runs agree: (0.08 + 0) / 5.
        let mut b = Blocks::default();
        b.push(-0.1, (0.0, 0.0));
        b.push(-0.5, (0.0, 0.0));
        let (s, df) = b.pooled_spread().unwrap();
        assert!((s - 0.016f64.sqrt()).abs() < 1e-12, "{s}");
        assert_eq!(df, 5.0);
    }

    fn floor(v: f64) -> Floor {
        Floor::try_from(v).unwrap()
    }

    #[test]
    fn student_quantile_matches_the_normal_for_many_degrees_and_widens_for_few() {
        for z in [0.3, 0.6, 1.0, 2.0] {
            let big = student_quantile(z, 1e4);
            assert!((big - z).abs() < 2e-3 * z.max(1.0), "{z}: {big}");
            assert!(student_quantile(z, 1.0) > student_quantile(z, 3.0));
            assert!(student_quantile(z, 3.0) > z);
        }
        // t with 1 degree of freedom is Cauchy: tan(π (p − 1/2)).
        let p = 1.0 - 0.308_537_538_725_986_9; // Φ(0.5)
        let cauchy = (std::f64::consts::PI * (p - 0.5)).tan();
        assert!((student_quantile(0.5, 1.0) - cauchy).abs() < 1e-6);
    }

    #[test]
    fn relative_effect_is_exp_minus_one() {
        let e = Estimate {
            log_ratio: (0.9f64).ln(),
            interval: ((0.8f64).ln(), 0.0),
        };
        assert!((e.relative() + 0.1).abs() < 1e-12);
        let (lo, hi) = e.relative_interval();
        assert!((lo + 0.2).abs() < 1e-12 && hi == 0.0);
    }

    #[test]
    fn both_arms_are_averaged_alike_and_swapping_negates() {
        let x = block_statistic((10.0, 9.0), (10.0, 9.0));
        assert!((x - 0.9f64.ln()).abs() < 1e-12);
        // A slow run counts the same on either arm: no per-arm rule.
        let slow_base = block_statistic((12.5, 9.0), (10.0, 9.0));
        let slow_cand = block_statistic((10.0, 9.0), (10.0, 11.25));
        assert!((slow_base - x + 0.5 * 1.25f64.ln()).abs() < 1e-12);
        assert!((slow_cand - x - 0.5 * 1.25f64.ln()).abs() < 1e-12);
        let (a, b) = ((10.0, 9.7), (12.9, 9.9));
        let swapped = block_statistic((a.1, a.0), (b.1, b.0));
        assert_eq!(swapped, -block_statistic(a, b));
    }

    #[test]
    fn discordance_looks_at_both_arms_and_not_at_the_effect() {
        let f = floor(0.03);
        assert_eq!(discordant((10.0, 9.0), (10.1, 9.05), f), None);
        // 13% apart within the baseline, or within the candidate.
        assert!(discordant((11.3, 9.0), (10.0, 9.0), f).is_some());
        assert!(discordant((10.0, 10.2), (10.0, 9.0), f).is_some());
        // A large effect with agreeing arms is not discordant.
        assert_eq!(discordant((10.0, 5.0), (10.0, 5.0), f), None);
    }

    #[test]
    fn the_floor_only_widens_the_interval() {
        let f = floor(0.03);
        let z = 1.0;
        // Identical blocks: the own spread is 0, the floor sets the width.
        let mut tight = Blocks::default();
        for _ in 0..3 {
            tight.push(-0.1, (0.0, 0.0));
        }
        let e = tight.estimate(f, z).unwrap();
        let by_floor = z * 0.03 / std::f64::consts::SQRT_2 / 3f64.sqrt();
        assert!((e.interval.1 - e.interval.0 - 2.0 * by_floor).abs() < 1e-12);
        // Blocks spread far beyond the floor: their own spread sets it.
        let mut wide = Blocks::default();
        for x in [-0.3, 0.1, -0.1] {
            wide.push(x, (0.0, 0.0));
        }
        let e = wide.estimate(f, z).unwrap();
        let s = 0.2f64; // sample sd of -0.3, 0.1, -0.1
        let own = student_quantile(z, 2.0) * s / 3f64.sqrt();
        assert!(
            (e.interval.1 - e.interval.0 - 2.0 * own).abs() < 1e-9,
            "{e:?}"
        );
        assert!(own > by_floor);
    }

    /// Fraction of `reps` A/Bs of `blocks` blocks, with per-run log noise
    /// from `run`, whose interval covers the effect `theta` at every look
    /// at once: the simultaneous guarantee that makes stopping at any
    /// decisive look safe.
    fn simultaneous_coverage(
        reps: usize,
        blocks: usize,
        theta: f64,
        f: Floor,
        conf: f64,
        run: impl FnMut(&mut StdRng) -> f64,
    ) -> f64 {
        coverage_of(reps, blocks, theta, f, conf, run, |w, f, z| {
            w.estimate(f, z).unwrap().interval
        })
    }

    /// [`simultaneous_coverage`] of the interval `interval` computes.
    fn coverage_of(
        reps: usize,
        blocks: usize,
        theta: f64,
        f: Floor,
        conf: f64,
        mut run: impl FnMut(&mut StdRng) -> f64,
        interval: impl Fn(&Blocks, Floor, f64) -> (f64, f64),
    ) -> f64 {
        let p = Policy::new(
            Confidence::try_from(conf).unwrap(),
            4,
            2 * blocks,
            floor(0.001),
        )
        .unwrap();
        let mut rng = StdRng::seed_from_u64(42);
        let mut covered = 0;
        for _ in 0..reps {
            let mut w = Blocks::default();
            let mut ok = true;
            for k in 0..blocks {
                let mut pair = || ((run(&mut rng)).exp(), (theta + run(&mut rng)).exp());
                let (a, b) = (pair(), pair());
                w.push(block_statistic(a, b), arm_gaps(a, b));
                if k >= 1 {
                    let (lo, hi) = interval(&w, f, p.boundary());
                    ok &= lo <= theta && theta <= hi;
                }
            }
            covered += usize::from(ok);
        }
        covered as f64 / reps as f64
    }

    #[test]
    fn covers_at_every_look_at_once_on_normal_runs() {
        // Runs with a 2% log-normal body: a pair's σ, the floor, is 2.83%.
        let n: Normal<f64> = Normal::new(0.0, 0.02).unwrap();
        for (conf, blocks) in [(0.2, 5), (0.4, 6), (0.8, 6), (0.4, 12)] {
            let c =
                simultaneous_coverage(4000, blocks, -0.05, floor(0.0283), conf, |r| n.sample(r));
            // 4000 reps: 3 standard errors are at most 2.4 points.
            assert!(c >= conf - 0.024, "{blocks} blocks: coverage {c} at {conf}");
        }
    }

    #[test]
    fn covers_when_the_floor_is_far_below_the_real_noise() {
        // The failure the old pooled variance had: a floor estimated at a
        // third of the real noise. The own spread still carries the width.
        let n: Normal<f64> = Normal::new(0.0, 0.06).unwrap();
        for conf in [0.2, 0.4, 0.8] {
            let c = simultaneous_coverage(4000, 6, 0.0, floor(0.028), conf, |r| n.sample(r));
            assert!(c >= conf - 0.03, "coverage {c} at {conf}");
        }
    }

    /// The reported interval (the pooled spread) at its own level: on
    /// clean runs, and where the floor is a third of the real noise, so
    /// the spread alone carries the width.
    #[test]
    fn the_reported_interval_covers_at_every_look_at_once() {
        let reported = |w: &Blocks, f: Floor, z: f64| w.reported_interval(f, z).unwrap();
        for (sd, f) in [(0.02, 0.0283), (0.06, 0.028)] {
            let n: Normal<f64> = Normal::new(0.0, sd).unwrap();
            for (conf, blocks) in [(0.9, 6), (0.9, 8), (0.4, 6)] {
                let c = coverage_of(
                    4000,
                    blocks,
                    -0.05,
                    floor(f),
                    conf,
                    |r| n.sample(r),
                    reported,
                );
                assert!(
                    c >= conf - 0.024,
                    "σ {sd}, {blocks} blocks: coverage {c} at {conf}"
                );
            }
        }
    }

    #[test]
    fn a_pointwise_interval_at_every_look_would_fail_this_test() {
        // The control: a 40% interval at each of 12 looks (Pocock's constant
        // replaced by the single-look normal quantile) misses the truth
        // somewhere far more often than 60% of the time.
        let n: Normal<f64> = Normal::new(0.0, 0.02).unwrap();
        let mut rng = StdRng::seed_from_u64(3);
        let f = floor(0.0283);
        let single_look = 0.524_4; // two-sided 40% normal quantile
        let mut covered = 0;
        for _ in 0..2000 {
            let mut w = Blocks::default();
            let mut ok = true;
            for _ in 0..12 {
                let mut pair = || (n.sample(&mut rng).exp(), n.sample(&mut rng).exp());
                let (a, b) = (pair(), pair());
                w.push(block_statistic(a, b), arm_gaps(a, b));
                let e = w.estimate(f, single_look).unwrap();
                ok &= e.interval.0 <= 0.0 && 0.0 <= e.interval.1;
            }
            covered += usize::from(ok);
        }
        assert!(covered < 2000 / 5, "pointwise coverage {covered}/2000");
    }
}
