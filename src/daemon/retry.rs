//! The back-off between failed cycles.

use std::time::Duration;

use rand::Rng;

/// Exponential backoff with "equal jitter" (half fixed, half random), capped:
/// the k-th wait after the failure threshold lies in [d/2, d] with
/// d = min(cap, base · 2^k) (AWS Architecture Blog, "Exponential Backoff
/// and Jitter", 2015).
pub fn backoff(k: u32, base: Duration, cap: Duration) -> Duration {
    let d = base
        .saturating_mul(1u32.checked_shl(k.min(20)).unwrap_or(u32::MAX))
        .min(cap);
    let half = d / 2;
    half + half.mul_f64(rand::rng().random::<f64>())
}
