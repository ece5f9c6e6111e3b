//! The daemon's waits: a converged loop backs off, and an over-budget one
//! waits for its window to clear, each recorded in the ledger (`waits`,
//! one row per stretch), said on stdout and on the metrics endpoint.
//!
//! **Converged** ([`crate::cycle::Converged`]): the daemon looks again after
//! `interval_s × 2^(k+1)` (k the looks so far that found it still
//! converged; `interval_s` taken as at least [`MIN_POLL`]), at most
//! `[cycle] max_wait_s`, and wakes at once, resetting the back-off, on any
//! of [`WAKES_ON`], which it checks every `interval_s` (at least
//! [`MIN_POLL`]) without running the engine ([`Watch`]):
//!
//! - a stage of its stack approved or rejected;
//! - the config file, a menu file or the live profile (its canonical
//!   digest) changed; a changed config or menu is loaded again (`run`);
//! - the heat moved: a quarter or more of the hottest tenth of the experts
//!   (at least 8) is no longer among them;
//! - the live seconds per token drifted: a PELT change point since the
//!   wait began, beyond the noise floor
//!   ([`crate::judge::changepoint::drift_since`]).
//!
//! **Budget** ([`super::budget`]): it waits until the time the budget
//! names, or a shutdown.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::config::Config;
use crate::cycle::Converged;
use crate::heat::{Expert, Heat};
use crate::judge::changepoint::drift_since;
use crate::ledger::{CycleId, Ledger, LedgerError, NewWait, WaitId};
use crate::measure::stand_aside::StandAside;
use crate::process::cancel::Cancel;
use crate::profile::Profile;
use crate::vocab::{Digest, StageState, WaitKind};

/// What wakes a converged loop, in the words the ledger and stdout use.
pub const WAKES_ON: &[&str] = &[
    "a stage approved or rejected",
    "the config, a menu file or the live profile changing",
    "the heat moving (a quarter of the hottest experts replaced)",
    "the live seconds per token drifting beyond the noise floor",
];

/// The share of the hottest experts that must leave the hottest set for
/// the heat to have moved: a pin list planned from the old heat then
/// misses that much of the traffic it was planned for.
const HEAT_MOVED: f64 = 0.25;

/// How many observations before the wait the drift test sees the level
/// from.
const OBSERVATIONS: u32 = 48;

/// The shortest poll of a waiting daemon: each reads the config, menu and
/// profile files, the ledger, the heat and the metrics endpoint, so a
/// test's `interval_s` of 10 ms must not make it a busy loop.
pub const MIN_POLL: Duration = Duration::from_secs(1);

/// What changed, woken by.
#[derive(Debug, Clone, PartialEq)]
pub enum Wake {
    StageDecided,
    ConfigChanged,
    MenuChanged,
    LiveProfileChanged,
    HeatMoved(String),
    MetricsDrifted(String),
}

impl Wake {
    /// The config or the menu must be loaded again before the next look.
    pub fn reloads(&self) -> bool {
        matches!(self, Wake::ConfigChanged | Wake::MenuChanged)
    }
}

impl std::fmt::Display for Wake {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Wake::StageDecided => f.write_str("a stage was approved or rejected"),
            Wake::ConfigChanged => f.write_str("the config file changed"),
            Wake::MenuChanged => f.write_str("a menu file changed"),
            Wake::LiveProfileChanged => f.write_str("the live profile changed"),
            Wake::HeatMoved(how) => write!(f, "the heat moved ({how})"),
            Wake::MetricsDrifted(how) => write!(f, "the live metrics drifted ({how})"),
        }
    }
}

/// What a converged loop watches, as of one glance: digests and counts
/// that change exactly when one of [`WAKES_ON`] happens.
#[derive(Debug, Clone, PartialEq)]
pub struct Watch {
    pub config: Option<Digest>,
    pub menu: Option<Digest>,
    pub live: Option<Digest>,
    /// Stages of this stack approved or rejected, so far.
    pub decided: usize,
    /// The hottest experts, when the heat could be read.
    pub hottest: Option<BTreeSet<Expert>>,
}

impl Watch {
    /// Takes the watch now; `heat` is the glance's.
    pub async fn take(
        config: &Config,
        ledger: &Ledger,
        heat: Option<&Heat>,
    ) -> Result<Watch, LedgerError> {
        let decided = ledger.stages(Some(StageState::Approved)).await?.len()
            + ledger.stages(Some(StageState::Rejected)).await?.len();
        Ok(Watch {
            config: file_digest(&config.path),
            menu: dir_digest(&config.menu_dir),
            live: Profile::load(&config.stack.live_profile)
                .ok()
                .map(|p| p.digest()),
            decided,
            hottest: heat.map(hottest),
        })
    }

    /// What changed from `self` to `now`, the first of [`WAKES_ON`] that
    /// did. What could not be read on either side is no change.
    pub fn changed(&self, now: &Watch) -> Option<Wake> {
        if now.decided != self.decided {
            return Some(Wake::StageDecided);
        }
        let moved = |a: &Option<Digest>, b: &Option<Digest>| a.is_some() && b.is_some() && a != b;
        if moved(&self.config, &now.config) {
            return Some(Wake::ConfigChanged);
        }
        if moved(&self.menu, &now.menu) {
            return Some(Wake::MenuChanged);
        }
        if moved(&self.live, &now.live) {
            return Some(Wake::LiveProfileChanged);
        }
        match (&self.hottest, &now.hottest) {
            (Some(a), Some(b)) => heat_moved(a, b).map(Wake::HeatMoved),
            _ => None,
        }
    }
}

/// The hottest tenth of the experts (at least 8, at most all that had a
/// request).
pub fn hottest(heat: &Heat) -> BTreeSet<Expert> {
    let k = (heat.shape().total() / 10).max(8);
    heat.ranked().into_iter().take(k).map(|(e, _)| e).collect()
}

/// How the hottest set moved, when a quarter or more of it left.
pub fn heat_moved(before: &BTreeSet<Expert>, now: &BTreeSet<Expert>) -> Option<String> {
    if before.is_empty() {
        return (!now.is_empty()).then(|| "the first requests were recorded".to_string());
    }
    let left = before.difference(now).count();
    (left as f64 >= HEAT_MOVED * before.len() as f64).then(|| {
        format!(
            "{left} of the {} hottest experts are no longer among them",
            before.len()
        )
    })
}

/// The sha256 of a file's bytes; `None` when it cannot be read.
fn file_digest(path: &Path) -> Option<Digest> {
    std::fs::read(path).ok().map(|b| Digest::of(&b))
}

/// The sha256 of a directory's `*.toml` files, names and contents in name
/// order; `None` when it cannot be read.
fn dir_digest(dir: &Path) -> Option<Digest> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    files.sort();
    let mut all = Vec::new();
    for f in files {
        all.extend(f.file_name()?.as_encoded_bytes());
        all.push(0);
        all.extend(std::fs::read(&f).ok()?);
        all.push(0);
    }
    Some(Digest::of(&all))
}

/// How a wait ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Woke {
    /// Something it watches changed.
    Changed(Wake),
    /// Its time is up: look again.
    LookAgain,
    /// SIGINT or SIGTERM.
    Shutdown,
}

/// The open wait, across the looks that find it still due.
#[derive(Debug, Clone)]
struct Open {
    id: WaitId,
    kind: WaitKind,
    started: DateTime<Utc>,
    /// Looks so far that found it still due.
    looks: u32,
}

/// The daemon's waits: records them, waits, watches.
pub struct Waits<'a> {
    pub config: &'a Config,
    pub ledger: &'a Ledger,
    pub http: &'a reqwest::Client,
    pub cancel: Cancel,
    open: Option<Open>,
    /// The live seconds per token glanced at since the last cycle: the
    /// look and the next cycle count them as observations.
    glances: Vec<(DateTime<Utc>, f64)>,
    /// What a converged wait compares against: taken before the look that
    /// began it and kept across the looks that continue it, so a change
    /// made while it looks is still a change.
    baseline: Option<Baseline>,
    /// The live-load monitor, which tells a move of the live metrics the
    /// daemon's own requests made from one the serving made.
    stand_aside: Option<&'a StandAside>,
}

/// The state a converged wait wakes on changes from.
#[derive(Debug, Clone)]
struct Baseline {
    watch: Watch,
    /// The live seconds per token: the observations before, then glances.
    series: Vec<f64>,
    /// Where the glances begin in `series`: a drift is a move from there on.
    from: usize,
    /// When the newest observation in `series` was made (the last cycle's,
    /// before its runs).
    observed_at: Option<DateTime<Utc>>,
}

impl<'a> Waits<'a> {
    /// `glances`: those of the loop before a reload of the config (a
    /// drift is a move from the level seen before it too).
    pub fn new(
        config: &'a Config,
        ledger: &'a Ledger,
        http: &'a reqwest::Client,
        cancel: Cancel,
        glances: Vec<(DateTime<Utc>, f64)>,
    ) -> Waits<'a> {
        Waits {
            config,
            ledger,
            http,
            cancel,
            open: None,
            glances,
            baseline: None,
            stand_aside: None,
        }
    }

    /// The same, with the live-load monitor: a drift the daemon's own
    /// requests made (its last cycle's A/A of the live server, its served
    /// model's answers) wakes no converged wait.
    pub fn standing_aside_by(mut self, stand_aside: Option<&'a StandAside>) -> Waits<'a> {
        self.stand_aside = stand_aside;
        self
    }

    /// The glances, for the loop after a reload.
    pub fn into_glances(self) -> Vec<(DateTime<Utc>, f64)> {
        self.glances
    }

    /// The live seconds per token glanced at since the last cycle.
    pub fn glances(&self) -> &[(DateTime<Utc>, f64)] {
        &self.glances
    }

    /// A cycle ran: its observation is in the ledger, the glances before
    /// it are history, and the next wait compares with what is then.
    pub fn cycle_ran(&mut self) {
        self.glances.clear();
        self.baseline = None;
    }

    /// Takes the baseline a converged wait compares with, unless a wait
    /// holds one: call it before the look, so that what changes while the
    /// daemon looks wakes it.
    pub async fn before_look(&mut self) -> Result<(), LedgerError> {
        if self.baseline.is_some() {
            return Ok(());
        }
        let metrics = self.config.stack.metrics.as_ref();
        let heat = crate::observe::glance_heat(metrics, self.http).await;
        let watch = Watch::take(self.config, self.ledger, heat.as_ref()).await?;
        let observed = self.ledger.recent_observed_metrics(OBSERVATIONS).await?;
        let observed_at = observed.last().map(|(at, _)| *at);
        let series: Vec<f64> = observed
            .into_iter()
            .filter_map(|(_, m)| m.get(crate::observe::SECONDS_PER_TOKEN)?.as_f64())
            .filter(|v| v.is_finite() && *v > 0.0)
            .chain(self.glances.iter().map(|(_, v)| *v))
            .collect();
        let from = series.len();
        self.baseline = Some(Baseline {
            watch,
            series,
            from,
            observed_at,
        });
        Ok(())
    }

    /// Whether a wait is open, and of which kind.
    pub fn waiting(&self) -> Option<WaitKind> {
        self.open.as_ref().map(|o| o.kind)
    }

    /// The back-off of the `looks`-th look of a converged wait:
    /// `interval × 2^(looks+1)`, at most `max_wait_s`.
    pub fn backoff(interval: Duration, max: Duration, looks: u32) -> Duration {
        interval
            .saturating_mul(
                1u32.checked_shl(looks.saturating_add(1).min(20))
                    .unwrap_or(u32::MAX),
            )
            .min(max)
    }

    /// When a converged wait looks again at the latest: `backoff` from
    /// `now`, or sooner, when something held back (`due_at`, a realization
    /// waiting out the back-off after an attempt that decided nothing)
    /// falls due before then; a time already past looks at once.
    pub fn look_again_at(
        now: DateTime<Utc>,
        backoff: Duration,
        due_at: Option<DateTime<Utc>>,
    ) -> DateTime<Utc> {
        let until = now + chrono::Duration::from_std(backoff).unwrap_or_default();
        due_at.map_or(until, |due| until.min(due.max(now)))
    }

    /// Records (or continues) a wait of `kind`, until `until` at the
    /// latest, and says it on stdout.
    async fn record(
        &mut self,
        kind: WaitKind,
        reason: &str,
        wakes_on: &[&str],
        until: DateTime<Utc>,
        after: Option<CycleId>,
    ) -> Result<(), LedgerError> {
        let now = Utc::now();
        let backoff_s = (until - now).as_seconds_f64().max(0.0);
        match &mut self.open {
            Some(o) if o.kind == kind => {
                o.looks += 1;
                self.ledger
                    .wait_looked(o.id, reason, until, backoff_s)
                    .await?;
                println!(
                    "wait        still {kind} (look {}): next look at {} UTC at the latest",
                    o.looks,
                    until.format("%H:%M:%S")
                );
            }
            _ => {
                self.end(&format!("the daemon began to wait ({kind})"))
                    .await?;
                let id = self
                    .ledger
                    .insert_wait(&NewWait {
                        kind,
                        started_at: now,
                        after_cycle: after,
                        reason: reason.to_string(),
                        wakes_on: wakes_on.iter().map(|s| s.to_string()).collect(),
                        next_look_at: until.max(now),
                        backoff_s,
                    })
                    .await?;
                self.open = Some(Open {
                    id,
                    kind,
                    started: now,
                    looks: 0,
                });
                let wakes = if wakes_on.is_empty() {
                    String::new()
                } else {
                    format!("; wakes on: {}", wakes_on.join("; "))
                };
                println!(
                    "wait        {kind}: {reason}; next look at {} UTC at the latest{wakes}",
                    until.format("%H:%M:%S")
                );
            }
        }
        Ok(())
    }

    /// Ends the open wait, if any, with what ended it.
    pub async fn end(&mut self, woken_by: &str) -> Result<(), LedgerError> {
        if let Some(o) = self.open.take() {
            let now = Utc::now();
            self.ledger.end_wait(o.id, now, woken_by).await?;
            let took = crate::display::age(now - o.started);
            println!("wake        after {took} of {}: {woken_by}", o.kind);
        }
        Ok(())
    }

    /// A converged loop's wait: until its back-off has passed, a watched
    /// change, or a shutdown.
    pub async fn converged(
        &mut self,
        c: &Converged,
        after: Option<CycleId>,
    ) -> Result<Woke, LedgerError> {
        let looks = match &self.open {
            Some(o) if o.kind == WaitKind::Converged => o.looks + 1,
            _ => 0,
        };
        let interval = self.config.cycle.interval_s.duration().max(MIN_POLL);
        let backoff = Self::backoff(interval, self.config.cycle.max_wait_s.duration(), looks);
        let until = Self::look_again_at(Utc::now(), backoff, c.due_at);
        self.record(WaitKind::Converged, &c.reason, WAKES_ON, until, after)
            .await?;
        self.before_look().await?;
        let metrics = self.config.stack.metrics.as_ref();
        loop {
            let left = (until - Utc::now()).to_std().unwrap_or_default();
            if left.is_zero() {
                return Ok(Woke::LookAgain);
            }
            tokio::select! {
                biased;
                _ = self.cancel.cancelled() => return Ok(Woke::Shutdown),
                _ = tokio::time::sleep(interval.min(left)) => {}
            }
            let (live, heat) = crate::observe::glance(metrics, self.http).await;
            let now = Watch::take(self.config, self.ledger, heat.as_ref()).await?;
            let Some(base) = self.baseline.as_mut() else {
                return Ok(Woke::LookAgain);
            };
            // Every glance is an observation of the live metrics, whatever
            // else woke the daemon: the level a later drift moves from.
            if let Some(spt) = live.seconds_per_token.filter(|v| v.is_finite() && *v > 0.0) {
                self.glances.push((Utc::now(), spt));
                base.series.push(spt);
            }
            // Since the last observation, before the last cycle's runs,
            // the live server may have served only the daemon: its own
            // A/A's requests then moved the metrics, not the serving.
            let only_ours = base.observed_at.is_some_and(|at| {
                let since = (Utc::now() - at).to_std().unwrap_or_default();
                self.stand_aside
                    .is_some_and(|sa| sa.only_own_requests_within(since))
            });
            let woke = base.watch.changed(&now).or_else(|| {
                drift_since(&base.series, base.from, c.drift_floor)
                    .filter(|_| !only_ours)
                    .map(|d| {
                        Wake::MetricsDrifted(format!("{:.4} to {:.4} s/token", d.before, d.after))
                    })
            });
            if let Some(wake) = woke {
                // The next wait compares with what is then.
                self.baseline = None;
                return Ok(Woke::Changed(wake));
            }
        }
    }

    /// An over-budget wait: until `until`, or a shutdown.
    pub async fn budget(
        &mut self,
        reason: &str,
        until: DateTime<Utc>,
        after: Option<CycleId>,
    ) -> Result<Woke, LedgerError> {
        self.record(WaitKind::Budget, reason, &[], until, after)
            .await?;
        let left = (until - Utc::now()).to_std().unwrap_or_default();
        tokio::select! {
            biased;
            _ = self.cancel.cancelled() => Ok(Woke::Shutdown),
            _ = tokio::time::sleep(left) => Ok(Woke::LookAgain),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(pairs: &[(u32, u32)]) -> BTreeSet<Expert> {
        pairs
            .iter()
            .map(|&(layer, expert)| Expert { layer, expert })
            .collect()
    }

    #[test]
    fn the_back_off_doubles_up_to_its_bound() {
        let i = Duration::from_secs(30);
        let max = Duration::from_secs(3600);
        let waits: Vec<u64> = (0..10)
            .map(|k| Waits::backoff(i, max, k).as_secs())
            .collect();
        assert_eq!(
            waits,
            [60, 120, 240, 480, 960, 1920, 3600, 3600, 3600, 3600]
        );
        assert_eq!(Waits::backoff(i, max, u32::MAX), max);
    }

    #[test]
    fn a_converged_wait_looks_again_when_a_held_back_realization_falls_due() {
        let now = Utc::now();
        let hour = Duration::from_secs(3600);
        let at = |s: i64| now + chrono::Duration::seconds(s);
        assert_eq!(Waits::look_again_at(now, hour, None), at(3600));
        assert_eq!(Waits::look_again_at(now, hour, Some(at(600))), at(600));
        assert_eq!(Waits::look_again_at(now, hour, Some(at(7200))), at(3600));
        assert_eq!(Waits::look_again_at(now, hour, Some(at(-5))), now);
    }

    #[test]
    fn the_heat_moves_when_a_quarter_of_the_hottest_leave() {
        let before = set(&[
            (0, 1),
            (0, 2),
            (1, 3),
            (1, 4),
            (2, 5),
            (2, 6),
            (3, 7),
            (3, 8),
        ]);
        let one = set(&[
            (0, 1),
            (0, 2),
            (1, 3),
            (1, 4),
            (2, 5),
            (2, 6),
            (3, 7),
            (4, 4),
        ]);
        assert_eq!(heat_moved(&before, &one), None, "one of eight is churn");
        let two = set(&[
            (0, 1),
            (0, 2),
            (1, 3),
            (1, 4),
            (2, 5),
            (2, 6),
            (4, 4),
            (4, 5),
        ]);
        let how = heat_moved(&before, &two).expect("two of eight");
        assert_eq!(how, "2 of the 8 hottest experts are no longer among them");
        assert!(heat_moved(&BTreeSet::new(), &before).is_some());
        assert!(heat_moved(&BTreeSet::new(), &BTreeSet::new()).is_none());
    }

    fn watch() -> Watch {
        Watch {
            config: Some(Digest::of(b"config")),
            menu: Some(Digest::of(b"menu")),
            live: Some(Digest::of(b"live")),
            decided: 2,
            hottest: Some(set(&[(0, 1), (0, 2), (0, 3), (0, 4)])),
        }
    }

    #[test]
    fn each_watched_change_wakes_and_an_unreadable_side_does_not() {
        let w = watch();
        assert_eq!(w.changed(&w.clone()), None);
        let cases: Vec<(Watch, Wake)> = vec![
            (
                Watch {
                    decided: 3,
                    ..watch()
                },
                Wake::StageDecided,
            ),
            (
                Watch {
                    config: Some(Digest::of(b"config 2")),
                    ..watch()
                },
                Wake::ConfigChanged,
            ),
            (
                Watch {
                    menu: Some(Digest::of(b"menu 2")),
                    ..watch()
                },
                Wake::MenuChanged,
            ),
            (
                Watch {
                    live: Some(Digest::of(b"live 2")),
                    ..watch()
                },
                Wake::LiveProfileChanged,
            ),
        ];
        for (now, wake) in cases {
            assert_eq!(w.changed(&now), Some(wake));
        }
        let hot = Watch {
            hottest: Some(set(&[(0, 1), (0, 2), (0, 3), (1, 1)])),
            ..watch()
        };
        assert!(matches!(w.changed(&hot), Some(Wake::HeatMoved(_))));
        // A file being rewritten (unreadable for an instant) is no change.
        let gone = Watch {
            config: None,
            live: None,
            hottest: None,
            ..watch()
        };
        assert_eq!(w.changed(&gone), None);
        assert!(Wake::ConfigChanged.reloads() && Wake::MenuChanged.reloads());
        assert!(!Wake::LiveProfileChanged.reloads());
    }

    #[test]
    fn a_menu_digest_covers_every_file_and_its_name() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.toml"), "x = 1").unwrap();
        std::fs::write(dir.path().join("notes.txt"), "ignored").unwrap();
        let d1 = dir_digest(dir.path()).unwrap();
        std::fs::write(dir.path().join("notes.txt"), "still ignored").unwrap();
        assert_eq!(dir_digest(dir.path()).unwrap(), d1);
        std::fs::write(dir.path().join("a.toml"), "x = 2").unwrap();
        assert_ne!(dir_digest(dir.path()).unwrap(), d1);
        assert!(dir_digest(&dir.path().join("missing")).is_none());
    }
}
