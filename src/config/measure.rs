//! The measurement's keys of `[measure]` (warm-up, timeouts, memory
//! headroom, when a floor is stale); its judge's keys become the
//! [`crate::judge::Policy`] in [`super::judge`].

use super::Seconds;
use super::raw::RawMeasure;

/// How runs are made and when a noise floor is measured again.
#[derive(Debug, Clone)]
pub struct Measure {
    pub warmup_runs: u32,
    pub noise_floor_max_age_s: Seconds,
    pub run_timeout_s: Seconds,
    pub memory_headroom_gb: f64,
    /// A floor measured under a CPU stall share more than this away from
    /// now is measured again.
    pub floor_pressure_shift: f64,
}

impl TryFrom<&RawMeasure> for Measure {
    type Error = String;
    fn try_from(m: &RawMeasure) -> Result<Measure, String> {
        if !(m.floor_pressure_shift.is_finite()
            && m.floor_pressure_shift > 0.0
            && m.floor_pressure_shift <= 1.0)
        {
            return Err(format!(
                "[measure] floor_pressure_shift must be in (0, 1], a change of the CPU stall share (got {})",
                m.floor_pressure_shift
            ));
        }
        if !(m.memory_headroom_gb.is_finite() && m.memory_headroom_gb >= 0.0) {
            return Err(format!(
                "[measure] memory_headroom_gb must be a number >= 0 (got {})",
                m.memory_headroom_gb
            ));
        }
        Ok(Measure {
            warmup_runs: m.warmup_runs,
            noise_floor_max_age_s: m.noise_floor_max_age_s,
            run_timeout_s: m.run_timeout_s,
            memory_headroom_gb: m.memory_headroom_gb,
            floor_pressure_shift: m.floor_pressure_shift,
        })
    }
}
