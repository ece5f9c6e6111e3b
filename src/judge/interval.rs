//! The interval behind every A/B decision: one robust statistic per ABBA
//! block, and a repeated confidence interval over the looks.
//!
//! Per block (runs `B C C B`) each arm's two runs are combined into one log
//! time, and the block's statistic is candidate minus baseline. Interference
//! on a shared machine only ever slows a run down (a background download,
//! a page-cache eviction, another process on the core); it never makes one
//! faster. So when an arm's two runs disagree by far more than the noise
//! floor allows, the faster one is the measurement and the slower one the
//! interference: the minimum is the robust estimator for noise that is
//! strictly additive (Chen & Revels 2016, "Robust benchmarking in noisy
//! environments", arXiv:1608.04295). Otherwise the two are averaged, which
//! keeps the ABBA block's cancellation of linear drift.

use super::policy::Floor;

/// When an arm's two runs of a block differ in log time by more than this
/// many floors, the slower is taken as interference and only the faster one
/// counts. The floor is the σ of a pair's log ratio (two runs), exactly the
/// σ of this difference, so 3 floors is a 3σ event on clean runs (0.3%);
/// with 2% noise (a floor near 3%) a slowdown of 15% or more is caught
/// nearly always and one of 10% about half the time.
pub const DISCORDANT_FLOORS: f64 = 3.0;

/// Degrees of freedom of the floor as a prior for the block variance.
/// Pooling it means one block can already give an interval, and a run of
/// lucky, tight blocks cannot shrink it by accident. The floor comes from
/// ten to twenty A/A pairs through the MAD (37% efficient at the normal), so
/// it is itself uncertain, and an underestimated floor narrows every
/// interval: with floors estimated from 20 A/A pairs, simultaneous coverage
/// held its nominal level at 2 degrees of freedom and fell below it from 4
/// on (0.39 at a nominal 0.40, 0.77 at 0.80 with 8), so 2.
pub const PRIOR_DF: f64 = 2.0;

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
/// `(baseline, candidate)` each: the candidate's log time minus the
/// baseline's, each arm's two runs combined as the module doc says.
/// Swapping the arms negates it exactly.
pub(crate) fn block_statistic(first: (f64, f64), second: (f64, f64), floor: Floor) -> f64 {
    let arm = |a: f64, b: f64| {
        let (a, b) = (a.ln(), b.ln());
        if (a - b).abs() > DISCORDANT_FLOORS * floor.get() {
            a.min(b)
        } else {
            0.5 * (a + b)
        }
    };
    arm(first.1, second.1) - arm(first.0, second.0)
}

/// Block statistics so far, with running moments (Welford's update: stable
/// for the tiny spreads of near-identical runs).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Blocks {
    /// The first pair of the block in progress.
    pending: Option<(f64, f64)>,
    pub(crate) n: usize,
    mean: f64,
    m2: f64,
}

impl Blocks {
    /// Adds one pair `(baseline, candidate)`; true when it completed a block.
    pub(crate) fn push_pair(&mut self, pair: (f64, f64), floor: Floor) -> bool {
        let Some(first) = self.pending.take() else {
            self.pending = Some(pair);
            return false;
        };
        let x = block_statistic(first, pair, floor);
        self.n += 1;
        let delta = x - self.mean;
        self.mean += delta / self.n as f64;
        self.m2 += delta * (x - self.mean);
        true
    }

    /// The repeated confidence interval after the blocks so far; `None`
    /// before the first block.
    ///
    /// `mean ± q · sqrt(v / m)` over `m` blocks, where `v` pools the blocks'
    /// own variance with the floor's (`floor² / 2` is a block's variance on
    /// clean runs: each arm's mean of two halves a run's variance, and a
    /// run's is half a pair's) at [`PRIOR_DF`] degrees of freedom, and `q`
    /// is Pocock's constant of the policy ([`super::Policy::boundary`]) widened to
    /// the Student quantile of the pooled degrees of freedom.
    pub(crate) fn estimate(&self, floor: Floor, boundary: f64) -> Option<Estimate> {
        if self.n == 0 {
            return None;
        }
        let m = self.n as f64;
        let df = m - 1.0 + PRIOR_DF;
        let var = (self.m2 + PRIOR_DF * floor.get().powi(2) / 2.0) / df;
        let half = student_quantile(boundary, df) * (var / m).sqrt();
        Some(Estimate {
            log_ratio: self.mean,
            interval: (self.mean - half, self.mean + half),
        })
    }
}

/// The Student-t quantile at the tail probability of the normal quantile
/// `z`, for `nu` degrees of freedom: the Cornish-Fisher expansion of
/// Abramowitz & Stegun (1964, "Handbook of Mathematical Functions", 26.7.5),
/// within 1% for `nu >= 5` and `z <= 2.8` (the looks we decide at), slightly
/// low beyond.
///
/// Pocock's boundary assumes a known variance; ours is estimated from the
/// blocks so far and the floor's prior, so each look is widened as Student
/// (1908) would, which fades to nothing as blocks accumulate.
fn student_quantile(z: f64, nu: f64) -> f64 {
    let (z3, z5, z7) = (z.powi(3), z.powi(5), z.powi(7));
    z + (z3 + z) / (4.0 * nu)
        + (5.0 * z5 + 16.0 * z3 + 3.0 * z) / (96.0 * nu * nu)
        + (3.0 * z7 + 19.0 * z5 + 17.0 * z3 - 15.0 * z) / (384.0 * nu.powi(3))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::judge::policy::{Confidence, Policy};
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};
    use rand_distr::{Distribution, Normal};

    fn floor(v: f64) -> Floor {
        Floor::try_from(v).unwrap()
    }

    #[test]
    fn student_quantile_matches_statrs() {
        use statrs::distribution::{ContinuousCDF, Normal as StatNormal, StudentsT};
        let n01 = StatNormal::new(0.0, 1.0).unwrap();
        for nu in [5.0, 7.0, 12.0, 40.0] {
            let t = StudentsT::new(0.0, 1.0, nu).unwrap();
            for z in [0.3, 0.6, 1.0, 2.0, 2.5, 2.8] {
                let exact = t.inverse_cdf(n01.cdf(z));
                let approx = student_quantile(z, nu);
                assert!(
                    (approx / exact - 1.0).abs() < 0.01,
                    "nu {nu} z {z}: {approx} vs {exact}"
                );
            }
        }
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
    fn a_slowed_run_gives_way_to_its_arm_mate_and_clean_runs_average() {
        let f = floor(0.03);
        // Clean: the arms' means, 10% apart.
        let x = block_statistic((10.0, 9.0), (10.0, 9.0), f);
        assert!((x - 0.9f64.ln()).abs() < 1e-12);
        // A 25% interference spike on one baseline run is ignored ...
        let spiked = block_statistic((12.5, 9.0), (10.0, 9.0), f);
        assert!((spiked - x).abs() < 1e-12, "{spiked}");
        // ... and on a candidate run too.
        assert!((block_statistic((10.0, 11.25), (10.0, 9.0), f) - x).abs() < 1e-12);
        // Small disagreements are averaged, so linear drift cancels.
        let d = block_statistic((10.0, 10.1), (10.3, 10.2), f);
        let expect = 0.5 * (10.1f64.ln() + 10.2f64.ln()) - 0.5 * (10.0f64.ln() + 10.3f64.ln());
        assert!((d - expect).abs() < 1e-12);
        // Swapping the arms negates it exactly.
        let (a, b) = ((10.0, 9.7), (12.9, 9.9));
        let swapped = block_statistic((a.1, a.0), (b.1, b.0), f);
        assert_eq!(swapped, -block_statistic(a, b, f));
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
        mut run: impl FnMut(&mut StdRng) -> f64,
    ) -> f64 {
        let p = Policy::new(
            Confidence::try_from(conf).unwrap(),
            2,
            2 * blocks,
            floor(0.001),
        )
        .unwrap();
        let mut rng = StdRng::seed_from_u64(42);
        let mut covered = 0;
        for _ in 0..reps {
            let mut w = Blocks::default();
            let mut ok = true;
            for _ in 0..2 * blocks {
                let b = run(&mut rng).exp();
                let c = (theta + run(&mut rng)).exp();
                if w.push_pair((b, c), f) {
                    let e = w.estimate(f, p.boundary()).unwrap();
                    ok &= e.interval.0 <= theta && theta <= e.interval.1;
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
    fn covers_with_interference_spikes_and_an_estimated_floor() {
        // The benchmark's noise: 2% body, a 10-30% slowdown in 5% of runs,
        // and, as in a real cycle, a floor estimated from 20 A/A pairs of
        // the same noise (so sometimes well below or above the truth).
        let body: Normal<f64> = Normal::new(0.0, 0.02).unwrap();
        let spiky = move |r: &mut StdRng| {
            let x: f64 = body.sample(r);
            if r.random::<f64>() < 0.05 {
                x + (1.0 + r.random_range(0.10..0.30f64)).ln()
            } else {
                x
            }
        };
        for conf in [0.2, 0.4, 0.8] {
            let p = Policy::new(Confidence::try_from(conf).unwrap(), 2, 12, floor(0.005)).unwrap();
            let mut rng = StdRng::seed_from_u64(7);
            let reps = 4000;
            let mut covered = 0;
            for _ in 0..reps {
                let aa: Vec<f64> = (0..20).map(|_| spiky(&mut rng) - spiky(&mut rng)).collect();
                let f = crate::judge::noise::estimate(&aa, p.min_floor)
                    .unwrap()
                    .value;
                let mut w = Blocks::default();
                let mut ok = true;
                for _ in 0..12 {
                    let b = spiky(&mut rng).exp();
                    let c = (0.02 + spiky(&mut rng)).exp();
                    if w.push_pair((b, c), f) {
                        let e = w.estimate(f, p.boundary()).unwrap();
                        ok &= e.interval.0 <= 0.02 && 0.02 <= e.interval.1;
                    }
                }
                covered += usize::from(ok);
            }
            let c = covered as f64 / reps as f64;
            assert!(c >= conf - 0.024, "coverage {c} at {conf}");
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
            for _ in 0..24 {
                let pair: (f64, f64) = (n.sample(&mut rng).exp(), n.sample(&mut rng).exp());
                if w.push_pair(pair, f) {
                    let e = w.estimate(f, single_look).unwrap();
                    ok &= e.interval.0 <= 0.0 && 0.0 <= e.interval.1;
                }
            }
            covered += usize::from(ok);
        }
        assert!(covered < 2000 / 5, "pointwise coverage {covered}/2000");
    }
}
