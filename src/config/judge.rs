//! The judge's keys of `[measure]` → the judge's [`Policy`], built and
//! checked once at load: the config states the floor's clamp and limit as
//! relative changes, the judge takes log ratios.

use super::raw::RawMeasure;
use crate::judge::{Confidence, Floor, Policy};

/// Confidence, pair budget, the floor's lower clamp and upper limit, the
/// floor's pairs and the pressure rules; refused with the key named when
/// the judge's own rules (even pair counts, whole ABBA blocks) or the
/// config's bounds do not hold.
impl TryFrom<&RawMeasure> for Policy {
    type Error = String;
    fn try_from(m: &RawMeasure) -> Result<Policy, String> {
        if m.min_pairs == 0 || m.min_pairs > m.max_pairs {
            return Err(format!(
                "[measure] min_pairs ({}) must be at least 1 and at most max_pairs ({})",
                m.min_pairs, m.max_pairs
            ));
        }
        let judges = |e| format!("[measure] {e}");
        let mut p = Policy::new(
            Confidence::try_from(m.confidence.get()).map_err(judges)?,
            m.min_pairs as usize,
            m.max_pairs as usize,
            Floor::try_from(m.min_noise_floor.get().ln_1p()).map_err(judges)?,
        )
        .map_err(judges)?;
        p.floor_pairs = m.floor_pairs as usize;
        p.max_floor = Some(Floor::try_from(m.max_noise_floor.get().ln_1p()).map_err(judges)?);
        if m.max_pressure.is_some() {
            return Err(
                "[measure] max_pressure is retired: it was an absolute ceiling on the share of a run stalled on the CPU, which any steady load of a few tasks a core holds at 1.0, so nothing was ever measured on a busy machine. Remove it; a run is now interfered with when it was contended markedly more than its noise floor's runs, set by max_contention_rise (default 0.25: a quarter more runnable tasks per core than the floor's typical run; see config.toml)".to_string(),
            );
        }
        if !(m.max_contention_rise.is_finite()
            && m.max_contention_rise > 0.0
            && m.max_contention_rise <= 10.0)
        {
            return Err(format!(
                "[measure] max_contention_rise must be a fraction in (0, 10], the rise of runnable tasks per core over the noise floor's runs beyond which a run's block is re-run (0.25 is a quarter more; got {})",
                m.max_contention_rise
            ));
        }
        p.max_contention_rise = Some(m.max_contention_rise);
        p.max_discarded_blocks = m.max_discarded_blocks as usize;
        p.confirmation_new_floor = m.confirmation_new_floor;
        if (m.floor_pairs as usize) < crate::judge::noise::MIN_PAIRS || m.floor_pairs > 200 {
            return Err(format!(
                "[measure] floor_pairs must be between {} and 200 (got {}); each pair is two runs of the live profile",
                crate::judge::noise::MIN_PAIRS,
                m.floor_pairs
            ));
        }
        if m.max_noise_floor.get() <= m.min_noise_floor.get() {
            return Err(format!(
                "[measure] max_noise_floor ({}) must be above min_noise_floor ({})",
                m.max_noise_floor.get(),
                m.min_noise_floor.get()
            ));
        }
        Ok(p)
    }
}
