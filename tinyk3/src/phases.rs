//! Wall-clock seconds spent in each part of the forward pass, measured with
//! `Instant` around the real work on the engine's thread.
//!
//! The parts are disjoint intervals of that thread, so they never add up to
//! more than the wall time around them; what they leave out (picking the
//! token, KV bookkeeping, combining outputs) is the residual a bench
//! reports next to them.

use std::ops::Sub;
use std::time::Instant;

use serde::Serialize;

/// Accumulated seconds per part, since the engine was opened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct PhaseSeconds {
    /// The full model's dense trunk: embedding rows, attention, dense blocks,
    /// routers and the head, including re-reads of non-resident segments.
    pub trunk: f64,
    /// The routed experts of the full model: resolving tiers, fetching and
    /// computing experts, combining outputs (the whole routed-experts step).
    pub expert: f64,
    /// Of `expert`: computing the experts held in RAM (pinned or cached).
    pub expert_local: f64,
    /// Of `expert`: sending to the far tier and waiting for its answer
    /// (including cold reads raced locally meanwhile).
    pub expert_far: f64,
    /// Of `expert`: reading cold experts from disk and computing them.
    pub expert_cold: f64,
    /// The speculative draft's passes (embedding, its attention blocks, head).
    pub draft: f64,
}

impl PhaseSeconds {
    /// Each part divided by `n` (e.g. per decode token); zero when `n` is 0.
    pub fn per(&self, n: usize) -> PhaseSeconds {
        let k = if n == 0 { 0.0 } else { 1.0 / n as f64 };
        PhaseSeconds {
            trunk: self.trunk * k,
            expert: self.expert * k,
            expert_local: self.expert_local * k,
            expert_far: self.expert_far * k,
            expert_cold: self.expert_cold * k,
            draft: self.draft * k,
        }
    }
}

impl Sub for PhaseSeconds {
    type Output = PhaseSeconds;

    fn sub(self, o: PhaseSeconds) -> PhaseSeconds {
        PhaseSeconds {
            trunk: self.trunk - o.trunk,
            expert: self.expert - o.expert,
            expert_local: self.expert_local - o.expert_local,
            expert_far: self.expert_far - o.expert_far,
            expert_cold: self.expert_cold - o.expert_cold,
            draft: self.draft - o.draft,
        }
    }
}

/// Runs `f`, adding its wall time to `*acc`.
pub fn timed<T>(acc: &mut f64, f: impl FnOnce() -> T) -> T {
    let t = Instant::now();
    let out = f();
    *acc += t.elapsed().as_secs_f64();
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timed_adds_the_wall_time_of_the_work() {
        let mut acc = 0.0;
        let v = timed(&mut acc, || {
            std::thread::sleep(std::time::Duration::from_millis(20));
            7
        });
        assert_eq!(v, 7);
        assert!((0.019..1.0).contains(&acc), "{acc}");
        let before = acc;
        timed(&mut acc, || ());
        assert!(acc >= before);
    }

    #[test]
    fn per_token_and_differences() {
        let a = PhaseSeconds {
            trunk: 4.0,
            expert: 8.0,
            ..PhaseSeconds::default()
        };
        let b = PhaseSeconds {
            trunk: 1.0,
            expert: 2.0,
            ..PhaseSeconds::default()
        };
        let d = (a - b).per(3);
        assert_eq!((d.trunk, d.expert), (1.0, 2.0));
        assert_eq!(a.per(0).trunk, 0.0);
    }
}
