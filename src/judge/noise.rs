//! The noise floor: how far apart two runs of the very same profile land.
//!
//! Estimated from A/A pairs of the live profile, measured under the same ABBA
//! protocol as a real experiment, so whatever the protocol lets through
//! (drift, interference spikes) is in the floor.

use super::policy::Floor;

/// Stable name of the estimator, stored in the ledger next to the floor.
/// v1 was the scaled MAD ("mad-sigma-v1").
pub const METHOD: &str = "qn-sigma-v1";

/// Fewest A/A pairs from which a floor is estimated. The scaled MAD has a
/// standard error of about 1.17 σ/√n under normality, so below ten pairs the
/// floor would be off by more than a third one time in three.
pub const MIN_PAIRS: usize = 10;

/// Consistency constant making the MAD estimate σ at the normal distribution.
pub(crate) const MAD_TO_SIGMA: f64 = 1.482_602_218_505_602;

/// Why no floor could be estimated; the cycle records it and measures again.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum NoiseError {
    #[error("{n} A/A pairs is too few to estimate a noise floor; measure at least {need}")]
    TooFew { n: usize, need: usize },
    #[error("A/A log ratio #{index} is {value}, not a finite number")]
    NonFinite { index: usize, value: f64 },
    #[error(
        "the A/A log ratios have zero spread (more than half are identical); the \
         timer is too coarse or the runs are not real measurements"
    )]
    ZeroSpread,
}

/// A measured noise floor, ready for the ledger.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NoiseFloor {
    /// The floor used for judging: the measurement, clamped below by the
    /// configured minimum.
    pub value: Floor,
    /// The measurement itself, before the clamp.
    pub measured: f64,
    /// A/A pairs it was estimated from.
    pub n: usize,
    /// [`METHOD`].
    pub method: &'static str,
}

impl NoiseFloor {
    /// True when the configured minimum, not the measurement, set the value.
    pub fn clamped(&self) -> bool {
        self.value.get() > self.measured
    }
}

/// Estimates the noise floor from A/A log ratios `ln(second / first)`.
///
/// The floor is Rousseeuw & Croux's `Qn` (1993, "Alternatives to the median
/// absolute deviation", JASA 88; small-sample factors from Croux &
/// Rousseeuw 1992, "Time-efficient algorithms for two highly robust
/// estimators of scale"): the first quartile of the pairwise distances
/// `|x_i − x_j|`, scaled to σ at the normal. Robust, because interference
/// spikes would otherwise set the floor and one background download must
/// not make every real 10% win look like noise (50% breakdown point, like
/// the MAD). But 82% efficient at the normal where the MAD is 37%: from the
/// same twenty A/A pairs its relative standard error is about 20% instead of
/// 25% (`qn_is_unbiased_and_tighter_than_the_mad_from_twenty_pairs`), and an
/// underestimated floor is what lets noise through as a win.
///
/// `min_floor` only clamps the result from below.
pub fn estimate(aa_log_ratios: &[f64], min_floor: Floor) -> Result<NoiseFloor, NoiseError> {
    let n = aa_log_ratios.len();
    if n < MIN_PAIRS {
        return Err(NoiseError::TooFew { n, need: MIN_PAIRS });
    }
    if let Some((index, &value)) = aa_log_ratios
        .iter()
        .enumerate()
        .find(|(_, v)| !v.is_finite())
    {
        return Err(NoiseError::NonFinite { index, value });
    }
    let measured = qn(aa_log_ratios);
    if measured <= 0.0 {
        return Err(NoiseError::ZeroSpread);
    }
    // A measured floor of a whole e-fold is no longer a floor; cap just below
    // 1 so it stays a valid `Floor` and every effect reads as within noise.
    let value =
        Floor::try_from(measured.max(min_floor.get()).min(0.999)).expect("clamped into (0, 1)");
    Ok(NoiseFloor {
        value,
        measured,
        n,
        method: METHOD,
    })
}

/// Fewest blocks whose arm gaps may speak for a profile's noise
/// ([`of_arm_gaps`]). Four gaps give `Qn` a relative standard error near
/// a half: enough to see a profile twice as noisy as a floor says, which
/// is all [`of_arm_gaps`] is asked (it can only raise a floor).
pub const MIN_ARM_GAPS: usize = 4;

/// The noise floor one arm's own gaps in A/B blocks imply: each ABBA block
/// runs each arm twice, and the log gap between the two runs is an A/A
/// pair of that arm's profile ([`super::interval::arm_gaps`]), so their
/// `Qn` is on the floor's scale, whatever the effect. `None` below
/// [`MIN_ARM_GAPS`] gaps, or when one is not finite.
pub fn of_arm_gaps(gaps: &[f64]) -> Option<f64> {
    (gaps.len() >= MIN_ARM_GAPS && gaps.iter().all(|g| g.is_finite())).then(|| qn(gaps))
}

/// `Qn`, scaled to estimate σ at the normal; 0 for fewer than two values.
/// O(n²), which is nothing for the few dozen pairs of a floor.
pub(crate) fn qn(x: &[f64]) -> f64 {
    let n = x.len();
    if n < 2 {
        return 0.0;
    }
    let mut d: Vec<f64> = Vec::with_capacity(n * (n - 1) / 2);
    for (i, a) in x.iter().enumerate() {
        d.extend(x[i + 1..].iter().map(|b| (a - b).abs()));
    }
    let h = n / 2 + 1;
    let k = h * (h - 1) / 2;
    let (_, kth, _) = d.select_nth_unstable_by(k - 1, f64::total_cmp);
    // 1 / (√2 Φ⁻¹(5/8)), and the finite-sample correction d_n.
    const QN_TO_SIGMA: f64 = 2.219_144_465_985_076;
    let small = [0.399, 0.994, 0.512, 0.844, 0.611, 0.857, 0.669, 0.872];
    let nf = n as f64;
    let dn = match n {
        2..=9 => small[n - 2],
        _ if n % 2 == 1 => nf / (nf + 1.4),
        _ => nf / (nf + 3.8),
    };
    QN_TO_SIGMA * dn * *kth
}

/// Median of finite values; `None` when empty.
pub fn median(values: &[f64]) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    Some(if v.len() % 2 == 1 {
        v[m]
    } else {
        0.5 * (v[m - 1] + v[m])
    })
}

/// Median absolute deviation from the median (unscaled); 0 when empty.
pub fn mad(values: &[f64]) -> f64 {
    let Some(m) = median(values) else { return 0.0 };
    let dev: Vec<f64> = values.iter().map(|x| (x - m).abs()).collect();
    median(&dev).unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{SeedableRng, rngs::StdRng};
    use rand_distr::{Distribution, Normal};

    fn floor(v: f64) -> Floor {
        Floor::try_from(v).unwrap()
    }

    #[test]
    fn arm_gaps_speak_for_a_profile_from_four_on() {
        assert_eq!(of_arm_gaps(&[0.1, -0.1, 0.2]), None);
        assert_eq!(of_arm_gaps(&[0.1, -0.1, 0.2, f64::NAN]), None);
        let gaps = [0.1, -0.1, 0.2, 0.0];
        assert_eq!(of_arm_gaps(&gaps), Some(qn(&gaps)));
        assert!(qn(&gaps) > 0.0);
    }

    #[test]
    fn median_and_mad_of_small_sets() {
        assert_eq!(median(&[]), None);
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        // deviations from 2: 1, 0, 1, 98 → median 1
        assert_eq!(mad(&[1.0, 2.0, 3.0, 100.0, 2.0]), 1.0);
    }

    #[test]
    fn too_few_pairs_is_a_typed_reason() {
        let err = estimate(&[0.01; 9], floor(0.01)).unwrap_err();
        assert_eq!(err, NoiseError::TooFew { n: 9, need: 10 });
        assert!(err.to_string().contains("at least 10"));
    }

    #[test]
    fn zero_spread_and_non_finite_are_refused() {
        assert_eq!(
            estimate(&[0.02; 12], floor(0.01)),
            Err(NoiseError::ZeroSpread)
        );
        let mut v = vec![0.01, -0.01, 0.02, -0.02, 0.0, 0.01, -0.01, 0.02, -0.02, 0.0];
        v[4] = f64::NAN;
        assert!(matches!(
            estimate(&v, floor(0.01)),
            Err(NoiseError::NonFinite { index: 4, .. })
        ));
    }

    #[test]
    fn estimates_sigma_of_normal_pairs_and_ignores_spikes() {
        let mut rng = StdRng::seed_from_u64(7);
        let normal = Normal::new(0.0, 0.03).unwrap();
        let mut x: Vec<f64> = (0..4000).map(|_| normal.sample(&mut rng)).collect();
        let clean = estimate(&x[..1000], floor(0.001)).unwrap();
        assert!((clean.measured - 0.03).abs() < 0.0015, "{clean:?}");
        // One pair in ten hit by a 25% spike, in either direction.
        for (i, v) in x.iter_mut().enumerate() {
            if i % 10 == 0 {
                *v += if i % 20 == 0 { 0.22 } else { -0.22 };
            }
        }
        let spiky = estimate(&x[..1000], floor(0.001)).unwrap();
        // The standard deviation would read about 0.076 here.
        assert!(spiky.measured < 0.04, "spikes set the floor: {spiky:?}");
        assert_eq!((spiky.n, spiky.method), (1000, METHOD));
    }

    #[test]
    fn qn_is_unbiased_and_tighter_than_the_mad_from_twenty_pairs() {
        // The reason for Qn: from the twenty pairs of a floor, the spread
        // of the estimate around σ is much smaller than the MAD's.
        let mut rng = StdRng::seed_from_u64(11);
        let normal = Normal::new(0.0, 1.0).unwrap();
        let (mut q, mut m) = (Vec::new(), Vec::new());
        for _ in 0..4000 {
            let x: Vec<f64> = (0..20).map(|_| normal.sample(&mut rng)).collect();
            q.push(qn(&x));
            m.push(MAD_TO_SIGMA * mad(&x));
        }
        let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
        let sd = |v: &[f64]| {
            let mu = mean(v);
            (v.iter().map(|x| (x - mu).powi(2)).sum::<f64>() / v.len() as f64).sqrt()
        };
        assert!((mean(&q) - 1.0).abs() < 0.03, "Qn mean {}", mean(&q));
        assert!(
            sd(&q) < 0.21 && sd(&q) < 0.85 * sd(&m),
            "{} vs {}",
            sd(&q),
            sd(&m)
        );
    }

    #[test]
    fn configured_minimum_only_clamps_from_below() {
        let x = [
            0.001, -0.001, 0.002, -0.002, 0.0, 0.001, -0.001, 0.002, -0.002, 0.0005,
        ];
        let low = estimate(&x, floor(0.02)).unwrap();
        assert_eq!(low.value.get(), 0.02);
        assert!(low.clamped());
        let wide: Vec<f64> = x.iter().map(|v| v * 40.0).collect();
        let high = estimate(&wide, floor(0.02)).unwrap();
        assert!(!high.clamped());
        assert_eq!(high.value.get(), high.measured);
        assert!(high.measured > 0.02);
    }
}
