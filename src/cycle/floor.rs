//! The noise floor a cycle judges with: stored per (stack, protocol), since
//! a floor is only meaningful for the protocol that measured it; stale when
//! older than `noise_floor_max_age_s`, measured on another live profile,
//! wider than `max_noise_floor`, measured under other machine conditions
//! than now (`floor_pressure_shift`; or a contention that moved by more than
//! `max_contention_rise`, which the PSI share, saturated on a busy machine,
//! cannot see), or, with `[measure] confirmation_new_floor`, older than a
//! win waiting for its confirmation.

use chrono::{DateTime, Utc};

use crate::brain::NoiseFloorState;
use crate::judge::Floor;
use crate::ledger::{Ledger, LedgerError, NoiseFloor};
use crate::measure::pressure::Pressure;
use crate::vocab::{Digest, Method};

/// When a stored floor no longer describes the machine.
#[derive(Debug, Clone, Copy)]
pub struct Freshness {
    pub max_age: std::time::Duration,
    pub max_floor: Option<Floor>,
    /// The machine now: the median pressure of the latest runs.
    pub now: Pressure,
    /// How far the CPU pressure share (0..1) may move from the floor's.
    pub pressure_shift: f64,
    /// How far the contention (runnable tasks per core) may move from the
    /// floor's, as a ratio either way (`max_contention_rise`): beyond it,
    /// every A/B block would be discarded against this floor (a load that
    /// rose for good) or judged against a floor wider than the machine
    /// now is (a load that went away).
    pub contention_rise: Option<f64>,
    /// A win decided at this time waits for its confirmation, and a floor
    /// measured before it is not used for that confirmation (set only with
    /// `[measure] confirmation_new_floor`).
    pub not_before: Option<DateTime<Utc>>,
}

/// The ledger key of a floor: the stack and the protocol that measured it.
pub fn key(stack: &str, method: Method) -> String {
    format!("{stack}/{method}")
}

/// The latest floor for a protocol, and whether it may still be used.
#[derive(Debug, Clone)]
pub struct CurrentFloor {
    pub row: Option<NoiseFloor>,
    pub stale: bool,
    /// Why it is stale, for the cycle line and the log.
    pub why: Option<String>,
}

impl CurrentFloor {
    pub async fn load(
        ledger: &Ledger,
        stack: &str,
        method: Method,
        live: &Digest,
        rules: &Freshness,
        now: DateTime<Utc>,
    ) -> Result<CurrentFloor, LedgerError> {
        let row = ledger.latest_noise_floor(&key(stack, method)).await?;
        let why = match &row {
            None => Some("no noise floor measured yet".to_string()),
            Some(f) => stale_because(f, live, rules, now),
        };
        Ok(CurrentFloor {
            row,
            stale: why.is_some(),
            why,
        })
    }

    /// `latest`, the floor measured on the profile an approval replaced,
    /// carried over to `live` as `value` (see `floor_carry`): judged by the
    /// rules every floor is, but for the profile it was measured on.
    pub fn carried(
        latest: &NoiseFloor,
        live: &Digest,
        value: f64,
        method: String,
        rules: &Freshness,
        now: DateTime<Utc>,
    ) -> CurrentFloor {
        let mut row = latest.clone();
        row.recorded.profile_digest = live.clone();
        row.recorded.value = value;
        row.recorded.method = method;
        let why = stale_because(&row, live, rules, now);
        CurrentFloor {
            row: Some(row),
            stale: why.is_some(),
            why,
        }
    }

    /// Whether the floor was measured on another live profile than `live`
    /// (one an approval may have replaced).
    pub fn measured_on_another_profile(&self, live: &Digest) -> bool {
        self.row.as_ref().is_some_and(|r| &r.profile_digest != live)
    }

    /// The floor to judge with: the measurement clamped below by `min`.
    pub fn floor(&self, min: Floor) -> Option<Floor> {
        let row = self.row.as_ref()?;
        let v = row.value.max(min.get());
        Floor::try_from(v).ok()
    }

    /// The typical contention of the floor's runs (runnable tasks per
    /// core): the reference of the judge's interference rule.
    pub fn contention(&self) -> Option<f64> {
        self.row.as_ref().and_then(|r| r.contention)
    }

    /// The proposer's view.
    pub fn state(&self, min: Floor, now: DateTime<Utc>) -> NoiseFloorState {
        match (&self.row, self.floor(min)) {
            (Some(row), Some(f)) => NoiseFloorState::Current {
                value: f.get(),
                pairs: row.n,
                age: (now - row.measured_at).to_std().unwrap_or_default(),
                stale: self.stale,
            },
            _ => NoiseFloorState::Missing,
        }
    }
}

/// Why `f` may not be used now, if it may not.
fn stale_because(
    f: &NoiseFloor,
    live: &Digest,
    rules: &Freshness,
    now: DateTime<Utc>,
) -> Option<String> {
    let age = (now - f.measured_at).to_std().unwrap_or_default();
    if age > rules.max_age {
        return Some(format!("the noise floor is {}s old", age.as_secs()));
    }
    if &f.profile_digest != live {
        return Some("the live profile changed since the noise floor was measured".into());
    }
    if let Some(max) = rules.max_floor
        && f.value > max.get()
    {
        return Some(format!(
            "the last noise floor ({:.1}%) was above max_noise_floor ({max})",
            100.0 * f.value.exp_m1()
        ));
    }
    if let (Some(then), Some(cpu)) = (f.cpu_pressure, rules.now.cpu)
        && (cpu - then).abs() > rules.pressure_shift
    {
        return Some(format!(
            "CPU pressure moved from {:.0}% to {:.0}% since the noise floor was measured",
            100.0 * then,
            100.0 * cpu
        ));
    }
    if let (Some(then), Some(now), Some(rise)) =
        (f.contention, rules.now.contention, rules.contention_rise)
        && (now / then).ln().abs() > rise.ln_1p()
    {
        return Some(format!(
            "the CPU's contention moved from {then:.1} to {now:.1} runnable tasks per core since the noise floor was measured"
        ));
    }
    if let Some(win) = rules.not_before
        && f.measured_at < win
    {
        return Some(
            "a win waits for its confirmation, which needs a floor measured after it".into(),
        );
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::{NewNoiseFloor, NoiseFloorId};

    fn floor_row(measured_at: DateTime<Utc>, cpu: Option<f64>) -> NoiseFloor {
        NoiseFloor {
            id: NoiseFloorId(1),
            recorded: NewNoiseFloor {
                stack: "s/bench".into(),
                profile_digest: Digest::of(b"live"),
                value: 0.03,
                n: 20,
                method: "qn-sigma-v1".into(),
                measured_at,
                experiment_id: None,
                load1: Some(0.5),
                cpu_pressure: cpu,
                contention: Some(6.0),
            },
        }
    }

    fn rules(now_cpu: Option<f64>, not_before: Option<DateTime<Utc>>) -> Freshness {
        Freshness {
            max_age: std::time::Duration::from_secs(3600),
            max_floor: Some(Floor::try_from(0.1).unwrap()),
            now: Pressure {
                cpu: now_cpu,
                ..Pressure::default()
            },
            pressure_shift: 0.25,
            contention_rise: Some(0.25),
            not_before,
        }
    }

    #[test]
    fn a_floor_follows_the_machine_not_only_the_clock() {
        let t0 = Utc::now();
        let live = Digest::of(b"live");
        let f = floor_row(t0, Some(0.05));
        assert_eq!(stale_because(&f, &live, &rules(Some(0.1), None), t0), None);
        let why = stale_because(&f, &live, &rules(Some(0.9), None), t0).unwrap();
        assert!(why.contains("CPU pressure moved from 5% to 90%"), "{why}");
        // No reading on either side: only the other rules apply.
        assert_eq!(stale_because(&f, &live, &rules(None, None), t0), None);
        let old = t0 + chrono::Duration::seconds(7200);
        assert!(
            stale_because(&f, &live, &rules(None, None), old)
                .unwrap()
                .contains("old")
        );
        let other = Digest::of(b"other");
        assert!(stale_because(&f, &other, &rules(None, None), t0).is_some());
    }

    #[test]
    fn a_floor_follows_the_contention_where_the_pressure_share_is_saturated() {
        let t0 = Utc::now();
        let live = Digest::of(b"live");
        // Measured at 6 runnable tasks a core, PSI saturated then and now.
        let f = floor_row(t0, Some(1.0));
        let at = |contention: f64| {
            let mut r = rules(Some(1.0), None);
            r.now.contention = Some(contention);
            stale_because(&f, &live, &r, t0)
        };
        assert_eq!(at(6.5), None, "a steady load's wobble");
        assert_eq!(at(5.0), None);
        let why = at(9.0).expect("a load that rose for good");
        assert!(
            why.contains("contention moved from 6.0 to 9.0 runnable tasks per core"),
            "{why}"
        );
        assert!(at(3.0).is_some(), "a load that went away");
        let mut off = rules(Some(1.0), None);
        off.now.contention = Some(60.0);
        off.contention_rise = None;
        assert_eq!(stale_because(&f, &live, &off, t0), None);
    }

    #[test]
    fn a_confirmation_needs_a_floor_measured_after_its_win() {
        let t0 = Utc::now();
        let live = Digest::of(b"live");
        let f = floor_row(t0, None);
        let later = t0 + chrono::Duration::seconds(5);
        let why = stale_because(&f, &live, &rules(None, Some(later)), t0).unwrap();
        assert!(why.contains("confirmation"), "{why}");
        let earlier = t0 - chrono::Duration::seconds(5);
        assert_eq!(
            stale_because(&f, &live, &rules(None, Some(earlier)), t0),
            None
        );
    }

    #[test]
    fn a_floor_above_the_limit_is_never_used() {
        let t0 = Utc::now();
        let mut f = floor_row(t0, None);
        f.recorded.value = 0.13;
        let why = stale_because(&f, &Digest::of(b"live"), &rules(None, None), t0).unwrap();
        assert!(why.contains("above max_noise_floor"), "{why}");
    }
}
