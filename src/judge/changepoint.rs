//! Change points in a series (the noise floor, the live profile's baseline
//! seconds per token, the live metrics): a drifting machine makes every
//! comparison suspect, so the report flags where the level moved, a floor
//! measured before a move of the live metrics is re-measured, and a waiting
//! loop wakes on one.
//!
//! Method: PELT, *Pruned Exact Linear Time* (R. Killick, P. Fearnhead and
//! I. A. Eckley, "Optimal detection of changepoints with a linear
//! computational cost", JASA 107(500):1590-1598, 2012), minimising
//! `Σ segment cost + β · (number of change points)` exactly, with
//!
//! - the cost of a segment: the Gaussian change-in-mean cost
//!   `Σ (xᵢ − x̄)² / σ²` (twice the negative log-likelihood up to a constant);
//! - σ estimated robustly from first differences,
//!   `σ̂ = MAD(xᵢ₊₁ − xᵢ) / (0.6745 · √2)`, which a level shift barely moves
//!   (as in Fryzlewicz's wild binary segmentation, Ann. Stat. 2014);
//! - the penalty `β = 2 ln n` (the Schwarz information criterion, SIC/BIC,
//!   the default of the `changepoint` R package that accompanies the paper);
//! - a minimum segment length of [`MIN_SEGMENT`] points.

/// The fewest points a segment may hold; one point is not a level.
pub const MIN_SEGMENT: usize = 2;

/// Where a series changed level: `index` is the first point of the new
/// segment; `before` and `after` are the means of the segments around it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ChangePoint {
    pub index: usize,
    pub before: f64,
    pub after: f64,
}

/// Prefix sums so a segment's cost is O(1).
struct Sums {
    s1: Vec<f64>,
    s2: Vec<f64>,
}

impl Sums {
    fn new(x: &[f64]) -> Sums {
        let mut s1 = Vec::with_capacity(x.len() + 1);
        let mut s2 = Vec::with_capacity(x.len() + 1);
        s1.push(0.0);
        s2.push(0.0);
        for &v in x {
            s1.push(s1.last().copied().unwrap_or(0.0) + v);
            s2.push(s2.last().copied().unwrap_or(0.0) + v * v);
        }
        Sums { s1, s2 }
    }

    /// Sum of squared deviations from the mean of `x[a..b]`.
    fn sse(&self, a: usize, b: usize) -> f64 {
        let n = (b - a) as f64;
        let s = self.s1[b] - self.s1[a];
        // Rounding can make it a hair negative for a constant segment.
        ((self.s2[b] - self.s2[a]) - s * s / n).max(0.0)
    }

    fn mean(&self, a: usize, b: usize) -> f64 {
        (self.s1[b] - self.s1[a]) / (b - a) as f64
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// The robust noise scale of a series from its first differences; `None`
/// when the series never moves.
pub fn noise_scale(x: &[f64]) -> Option<f64> {
    let mut d: Vec<f64> = x.windows(2).map(|w| w[1] - w[0]).collect();
    if d.is_empty() {
        return None;
    }
    let m = median(&mut d.clone());
    let mut dev: Vec<f64> = d.iter().map(|v| (v - m).abs()).collect();
    let mad = median(&mut dev) / 0.6745 / std::f64::consts::SQRT_2;
    if mad > 0.0 {
        return Some(mad);
    }
    // A series that is flat except for a few clean steps has a zero MAD of
    // differences; fall back to their standard deviation.
    let n = d.len() as f64;
    let mean = d.iter().sum::<f64>() / n;
    let sd = (d.iter_mut().map(|v| (*v - mean) * (*v - mean)).sum::<f64>() / n).sqrt()
        / std::f64::consts::SQRT_2;
    (sd > 0.0).then_some(sd)
}

/// The change points of `x` by PELT with the SIC penalty; `None` when there
/// are too few points (fewer than two segments' worth) or no variation.
pub fn pelt(x: &[f64]) -> Option<Vec<ChangePoint>> {
    let n = x.len();
    if n < 2 * MIN_SEGMENT || x.iter().any(|v| !v.is_finite()) {
        return None;
    }
    let sigma = noise_scale(x)?;
    let var = sigma * sigma;
    let beta = 2.0 * (n as f64).ln();
    let sums = Sums::new(x);
    let cost = |a: usize, b: usize| sums.sse(a, b) / var;

    // f[t]: the optimal penalised cost of x[..t]; last[t]: its last change.
    let mut f = vec![f64::INFINITY; n + 1];
    let mut last = vec![0usize; n + 1];
    f[0] = -beta;
    let mut candidates: Vec<usize> = vec![0];
    for t in MIN_SEGMENT..=n {
        let mut best = f64::INFINITY;
        let mut arg = 0;
        for &tau in &candidates {
            if t - tau >= MIN_SEGMENT {
                let v = f[tau] + cost(tau, t) + beta;
                if v < best {
                    best = v;
                    arg = tau;
                }
            }
        }
        f[t] = best;
        last[t] = arg;
        // The pruning rule of Killick et al. (their K = 0 for this cost): a
        // split point that cannot beat the optimum now never will later.
        candidates.retain(|&tau| t - tau < MIN_SEGMENT || f[tau] + cost(tau, t) <= f[t]);
        candidates.push(t);
    }

    let mut splits = Vec::new();
    let mut t = n;
    while t > 0 {
        let tau = last[t];
        if tau > 0 {
            splits.push(tau);
        }
        t = tau;
    }
    splits.reverse();
    let mut bounds = vec![0];
    bounds.extend(&splits);
    bounds.push(n);
    Some(
        bounds
            .windows(3)
            .map(|w| ChangePoint {
                index: w[1],
                before: sums.mean(w[0], w[1]),
                after: sums.mean(w[1], w[2]),
            })
            .collect(),
    )
}

/// Where a positive series (seconds per token) last moved for good: the
/// last PELT change point of its logs at or after index `from`, whose new
/// level held for [`DRIFT_POINTS`] points or more and moved by more than
/// `min_log_ratio` either way (a relative change as a
/// log ratio: moves inside the noise floor are no drift). `before` and
/// `after` are the levels as values of the series (geometric means).
/// `None` when there is none, or too few points to tell.
pub fn drift_since(x: &[f64], from: usize, min_log_ratio: f64) -> Option<ChangePoint> {
    if x.iter().any(|v| !(v.is_finite() && *v > 0.0)) {
        return None;
    }
    let logs: Vec<f64> = x.iter().map(|v| v.ln()).collect();
    let cps = pelt(&logs)?;
    let ends: Vec<usize> = cps
        .iter()
        .skip(1)
        .map(|c| c.index)
        .chain([x.len()])
        .collect();
    cps.iter()
        .zip(ends)
        .rev()
        // A level is what lasts: one or two odd points are no drift.
        .filter(|(c, end)| end - c.index >= DRIFT_POINTS)
        .find(|(c, _)| c.index >= from && (c.after - c.before).abs() > min_log_ratio)
        .map(|(c, _)| ChangePoint {
            index: c.index,
            before: c.before.exp(),
            after: c.after.exp(),
        })
}

/// The fewest points the new level of a drift holds.
pub const DRIFT_POINTS: usize = 3;

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic noise: xorshift64, the sum of four uniforms (roughly
    /// normal, mean 0, sd 0.58), so the tests need no RNG crate or seed file.
    fn noise(n: usize) -> Vec<f64> {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut uniform = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 11) as f64 / (1u64 << 53) as f64
        };
        (0..n)
            .map(|_| (0..4).map(|_| uniform()).sum::<f64>() - 2.0)
            .collect()
    }

    #[test]
    fn finds_one_clear_level_shift() {
        let x: Vec<f64> = noise(60)
            .iter()
            .enumerate()
            .map(|(i, e)| if i < 35 { 1.0 } else { 1.5 } + 0.05 * e)
            .collect();
        let cps = pelt(&x).unwrap();
        assert_eq!(cps.len(), 1, "{cps:?}");
        assert!((34..=36).contains(&cps[0].index), "{cps:?}");
        assert!(cps[0].after > cps[0].before);
    }

    #[test]
    fn stationary_noise_has_no_change_point() {
        let x: Vec<f64> = noise(200).iter().map(|e| 2.0 + 0.1 * e).collect();
        assert_eq!(pelt(&x).unwrap(), vec![]);
    }

    #[test]
    fn too_short_or_flat_is_none() {
        assert!(pelt(&[1.0, 2.0, 3.0]).is_none());
        assert!(pelt(&[1.0; 10]).is_none());
        assert!(pelt(&[1.0, f64::NAN, 1.0, 1.0]).is_none());
    }

    #[test]
    fn clean_steps_are_found_without_noise() {
        let x = [1.0, 1.0, 1.0, 1.0, 3.0, 3.0, 3.0, 3.0, 1.0, 1.0, 1.0, 1.0];
        let idx: Vec<usize> = pelt(&x).unwrap().iter().map(|c| c.index).collect();
        assert_eq!(idx, vec![4, 8]);
    }

    #[test]
    fn a_drift_is_a_lasting_move_beyond_the_floor_after_the_mark() {
        let level = |split: usize, a: f64, b: f64| -> Vec<f64> {
            noise(40)
                .iter()
                .enumerate()
                .map(|(i, e)| if i < split { a } else { b } * (1.0 + 0.01 * e))
                .collect()
        };
        // 0.10 → 0.13 s/token at point 25: a 26% move.
        let x = level(25, 0.10, 0.13);
        let d = drift_since(&x, 10, 0.05).expect("a drift");
        assert!((24..=26).contains(&d.index), "{d:?}");
        assert!(
            (d.before - 0.10).abs() < 0.005 && (d.after - 0.13).abs() < 0.005,
            "{d:?}"
        );
        // Before the mark (the floor was measured after it): no drift since.
        assert_eq!(drift_since(&x, 30, 0.05), None);
        // Within the floor: no drift.
        assert_eq!(drift_since(&x, 10, 0.3), None);
        // One or two odd points at the end are no level yet.
        let mut blip = level(40, 0.1, 0.1);
        blip.extend([0.2, 0.2]);
        assert_eq!(drift_since(&blip, 10, 0.05), None);
        blip.push(0.2);
        assert!(drift_since(&blip, 10, 0.05).is_some());
        // Steady: none; a bad value: none.
        assert_eq!(drift_since(&level(40, 0.1, 0.1), 0, 0.01), None);
        assert_eq!(drift_since(&[0.1, 0.0, 0.1, 0.1], 0, 0.01), None);
    }
}
