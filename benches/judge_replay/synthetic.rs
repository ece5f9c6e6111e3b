//! The second line: a parametric trace with the features the real ones
//! showed, replayed exactly like them. Never the evidence, only a check
//! that the judge does not depend on the few traces this machine gave.
//!
//! Per run, log s/token is the sum of
//! - an AR(1) body, ρ = 0.5, with symmetric heavy-tailed innovations
//!   (Student t, 3 degrees of freedom), 2% marginal σ;
//! - interference bursts: a burst starts at a run with probability 3%, goes
//!   on to the next run with probability 0.75 (mean length 4 runs, so it
//!   hits either arm of a block), and slows its runs by 10-40%;
//! - load changes: every 150 runs on average the level moves to a new
//!   one, normal with σ 10% around the base (another job started or ended).

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, StudentT};

use super::trace::{Run, Trace};

pub fn trace(seed: u64, runs: usize) -> Trace {
    let mut rng = StdRng::seed_from_u64(seed);
    let t3 = StudentT::new(3.0).expect("valid df");
    let rho: f64 = 0.5;
    // A t3 has variance 3; scale the innovations so the AR(1)'s marginal σ
    // is 2%: σ_e = 0.02 √(1 − ρ²) / √3.
    let sigma_e = 0.02 * (1.0 - rho * rho).sqrt() / 3f64.sqrt();
    let base = 0.12f64.ln();
    let (mut ar, mut level, mut burst) = (0.0f64, base, 0.0f64);
    let mut out = Vec::with_capacity(runs);
    for _ in 0..runs {
        ar = rho * ar + sigma_e * t3.sample(&mut rng);
        if rng.random::<f64>() < 1.0 / 150.0 {
            let step: f64 = rand_distr::Normal::new(0.0, 0.10)
                .expect("valid")
                .sample(&mut rng);
            level = base + step;
        }
        burst = if burst > 0.0 && rng.random::<f64>() < 0.75 {
            burst
        } else if rng.random::<f64>() < 0.03 {
            (1.0 + rng.random_range(0.10..0.40f64)).ln()
        } else {
            0.0
        };
        out.push(Run {
            seconds_per_token: (level + ar + burst).exp(),
            pressure: None,
            contention: None,
        });
    }
    Trace {
        name: "simulated (AR(1) 0.5, t3 tails, bursts, load shifts)".into(),
        runs: out,
    }
}
