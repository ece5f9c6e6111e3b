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
    /// Stale for its width alone (`max_noise_floor`): measured on this
    /// profile, lately, under the machine's conditions now. What it says,
    /// that this machine is too noisy to decide, still holds.
    pub only_too_wide: bool,
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
        Ok(match row {
            None => CurrentFloor {
                row: None,
                stale: true,
                why: Some("no noise floor measured yet".to_string()),
                only_too_wide: false,
            },
            Some(f) => CurrentFloor::judged(f, live, rules, now),
        })
    }

    /// `f` under the freshness `rules`.
    fn judged(f: NoiseFloor, live: &Digest, rules: &Freshness, now: DateTime<Utc>) -> CurrentFloor {
        let changed = changed_since(&f, live, rules, now);
        let wide = too_wide(&f, rules);
        let only_too_wide = changed.is_none() && wide.is_some();
        let why = changed.or(wide);
        CurrentFloor {
            row: Some(f),
            stale: why.is_some(),
            why,
            only_too_wide,
        }
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
        // Carried, it was never measured on `live` alone: when too wide,
        // `live` gets a floor of its own rather than holding this one.
        CurrentFloor {
            only_too_wide: false,
            ..CurrentFloor::judged(row, live, rules, now)
        }
    }

    /// Why an A/B the bound did not decide measures no floor now, if it
    /// does not: this floor is stale for its width alone and was measured
    /// less than `backoff` before `now` (`[cycle] max_wait_s`, at most
    /// `[measure] noise_floor_max_age_s`, the wait `remeasure` keeps after
    /// an A/A too noisy to give a floor). A floor measured again at once
    /// meets the same machine: on the real engine a loop's second floor
    /// followed its first, 52% wide against a limit of 50%, within 4 s,
    /// 18 engine s for each (the shoot-out's C, seed 3, 2026-12-07). A
    /// floor measured until one came out under the limit would also be the
    /// narrowest of several draws, not the machine's. Once the load moves,
    /// the profile changes or the back-off is over, the floor is stale for
    /// that reason and the next A/B measures one.
    pub fn too_wide_holds(
        &self,
        now: DateTime<Utc>,
        backoff: std::time::Duration,
    ) -> Option<String> {
        let row = self.row.as_ref().filter(|_| self.only_too_wide)?;
        let age = (now - row.measured_at).to_std().unwrap_or_default();
        if age >= backoff {
            return None;
        }
        let measured_by = row
            .experiment_id
            .map(|e| format!(" (experiment {e})"))
            .unwrap_or_default();
        Some(format!(
            "the bound did not decide, and the noise floor was measured {} ago{measured_by} on \
             this profile under the same load: {}, so the machine is too noisy to decide. \
             Another floor is measured once that one is {} old ([cycle] max_wait_s, at most \
             [measure] noise_floor_max_age_s) or the load moves; nothing is staged from it",
            crate::display::age(chrono::Duration::from_std(age).unwrap_or_default()),
            self.why.as_deref().unwrap_or("too wide"),
            crate::display::age(chrono::Duration::from_std(backoff).unwrap_or_default()),
        ))
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
#[cfg(test)]
fn stale_because(
    f: &NoiseFloor,
    live: &Digest,
    rules: &Freshness,
    now: DateTime<Utc>,
) -> Option<String> {
    changed_since(f, live, rules, now).or_else(|| too_wide(f, rules))
}

/// Why `f` no longer describes the machine, if it does not: too old,
/// another profile, another CPU pressure or contention, or older than a
/// win whose confirmation needs a floor measured after it.
fn changed_since(
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

/// Why `f` judges nothing, if it does not: wider than `max_noise_floor`.
fn too_wide(f: &NoiseFloor, rules: &Freshness) -> Option<String> {
    let max = rules.max_floor?;
    (f.value > max.get()).then(|| {
        format!(
            "the last noise floor ({:.1}%) was above max_noise_floor ({max})",
            100.0 * f.value.exp_m1()
        )
    })
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

    /// A floor too wide to judge with holds, so that an A/B the bound did
    /// not decide measures no other at once, only while nothing else about
    /// it changed and for the back-off; a floor stale for another reason,
    /// or not too wide, never holds.
    #[test]
    fn a_too_wide_floor_holds_for_the_backoff_under_the_same_machine() {
        let t0 = Utc::now();
        let live = Digest::of(b"live");
        let mut f = floor_row(t0, Some(0.5));
        f.recorded.value = 0.42;
        f.recorded.experiment_id = Some(crate::ledger::ExperimentId(7));
        let f = f;
        let minute = std::time::Duration::from_secs(60);
        let judged = |f: &NoiseFloor, cpu: f64, profile: &Digest| {
            CurrentFloor::judged(f.clone(), profile, &rules(Some(cpu), None), t0)
        };
        let at = |cpu: f64, profile: &Digest| judged(&f, cpu, profile);
        let held = at(0.5, &live);
        assert!(held.stale && held.only_too_wide, "{held:?}");
        let why = held
            .too_wide_holds(t0 + chrono::Duration::seconds(4), minute)
            .unwrap();
        assert!(
            why.starts_with(
                "the bound did not decide, and the noise floor was measured 4s ago (experiment 7) \
                 on this profile under the same load: the last noise floor (52.2%) was above \
                 max_noise_floor"
            ) && why.contains("so the machine is too noisy to decide")
                && why.contains("once that one is 1m old"),
            "{why}"
        );
        // The back-off is over.
        assert_eq!(
            held.too_wide_holds(t0 + chrono::Duration::seconds(60), minute),
            None
        );
        // The load moved, or the profile changed: measured again at once.
        let moved = at(0.95, &live);
        assert!(moved.stale && !moved.only_too_wide, "{moved:?}");
        assert_eq!(moved.too_wide_holds(t0, minute), None);
        assert_eq!(
            at(0.5, &Digest::of(b"other")).too_wide_holds(t0, minute),
            None
        );
        // Carried over from the profile an approval replaced: the new
        // profile gets a floor of its own.
        let other = Digest::of(b"replaced");
        let carried = CurrentFloor::carried(
            &f,
            &other,
            0.42,
            "carried".into(),
            &rules(Some(0.5), None),
            t0,
        );
        assert!(carried.stale && !carried.only_too_wide, "{carried:?}");
        assert_eq!(carried.too_wide_holds(t0, minute), None);
        // A floor narrow enough is no reason to wait.
        let mut narrow = f.clone();
        narrow.recorded.value = 0.05;
        let fine = judged(&narrow, 0.5, &live);
        assert!(!fine.stale && !fine.only_too_wide);
        assert_eq!(fine.too_wide_holds(t0, minute), None);
    }
}
