//! Standing aside for the live server's users: the daemon starts no
//! measurement run while the live server serves more of its users'
//! requests than `[daemon] stand_aside_above`, nor until the load has
//! stayed at or below that for `stand_aside_quiet_s`; it waits between
//! runs, never mid-run, and a run during which users came is reported so
//! its block is discarded and re-run (`judge::AbSchedule::interrupt`). A
//! wait longer than `stand_aside_max_wait_s` defers the cycle.
//!
//! A monitor task reads the live load ([`crate::observe::live_load`]) every
//! [`POLL`] for the daemon's whole life, so the gate knows how long the
//! server has been quiet without waiting to find out. The daemon's own
//! requests to the live server (a `remeasure` of the live surface, the
//! served model answering the proposer) are not its users': while one may
//! be in the server the monitor subtracts it ([`StandAside::own_request`]),
//! and the request counter, which cannot tell them apart, is not read.
//! A live server whose load cannot be read is not waited for: the daemon
//! says so once and measures as if standing aside were off.
//!
//! A change of the live profile (an approval or a revert) is a restart of
//! the live server on it: the operator's `--restart`, or their own after
//! the daemon applied a stage. Loading the model is a burst of CPU the
//! loop's runs would share a core with, so for `stand_aside_quiet_s` after
//! the monitor sees the profile change no run starts, whether or not the
//! server can be read meanwhile, and a run it overlapped is interrupted
//! (its block is re-run). In the shoot-out at a9f8824 (2026-12-07), 9 of
//! its 12 tinyk3 loop runs started a noise floor within 2 s of the
//! auto-approver's restart; in 6 the floor lost three blocks to
//! interference and ended `inconclusive`, and so did the A/B that needed
//! it, whose value then stayed decided on that profile.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::config::StandAsideSettings;
use crate::observe::live_load::{LiveLoad, LoadError, LoadReading};
use crate::process::cancel::Cancel;

/// How often the live load is read. Short enough that a user's request
/// (a second or more on the stacks this tunes) is seen while it runs.
pub const POLL: Duration = Duration::from_millis(250);

/// Where readings of the live load come from: the live server's metrics,
/// or a script in tests.
pub trait LoadSource: Send + Sync + 'static {
    fn read(&self) -> impl Future<Output = Result<LoadReading, LoadError>> + Send;
}

impl LoadSource for LiveLoad {
    fn read(&self) -> impl Future<Output = Result<LoadReading, LoadError>> + Send {
        LiveLoad::read(self)
    }
}

/// What the gate decided.
#[derive(Debug, Clone, PartialEq)]
pub enum Gate {
    /// A run may start; it waited this long.
    Clear(Duration),
    /// The live server stayed busy for the whole bound.
    Deferred(Deferral),
    /// Shutdown while waiting.
    Cancelled,
}

/// Why a cycle was deferred: what the gate saw for how long.
#[derive(Debug, Clone, PartialEq)]
pub struct Deferral {
    pub waited: Duration,
    /// The live requests (the daemon's own excluded) at the last reading.
    pub live_requests: Option<f64>,
    pub reason: String,
}

/// The daemon's view of the live load, kept by its monitor task; dropping
/// it stops the task.
#[derive(Debug)]
pub struct StandAside {
    inner: Arc<Inner>,
    task: tokio::task::JoinHandle<()>,
}

#[derive(Debug)]
struct Inner {
    settings: StandAsideSettings,
    poll: Duration,
    /// The served model answers from the live server: its requests are
    /// the daemon's own.
    serves_model: bool,
    state: Mutex<State>,
    /// Bumped after every reading, so a waiting gate wakes.
    readings: watch::Sender<u64>,
}

#[derive(Debug, Default)]
struct State {
    /// The start of the current unbroken run of readings: before it the
    /// load is unknown, which counts as busy.
    watching_since: Option<Instant>,
    last_read_at: Option<Instant>,
    /// Live requests, the daemon's own excluded, at the last reading;
    /// `None` before the first and after a failed one.
    live: Option<f64>,
    /// The last reading above the threshold.
    last_busy_at: Option<Instant>,
    last_total: Option<f64>,
    /// The daemon's own requests that may be in the live server now.
    own: u32,
    /// One was, since the last reading: the counter's move may be ours.
    own_since_read: bool,
    /// The last reading that saw a user's request (in flight, or come and
    /// gone with none of ours since the reading before).
    last_user_at: Option<Instant>,
    /// A run is being watched.
    watching_run: bool,
    /// The highest live load read while it went on.
    run_peak: Option<f64>,
    /// The live profile changed while it went on.
    run_saw_change: bool,
    /// When the monitor last saw the live profile change.
    changed_at: Option<Instant>,
    /// The last reading failed, with this.
    read_error: Option<String>,
    warned: bool,
}

impl StandAside {
    /// Starts reading `source` every `poll` (see [`POLL`]), and looking
    /// at `live_profile` as often, when given: its change holds runs back
    /// for the quiet spell.
    pub fn spawn<L: LoadSource>(
        source: L,
        settings: StandAsideSettings,
        poll: Duration,
        serves_model: bool,
        live_profile: Option<PathBuf>,
    ) -> StandAside {
        let (readings, _) = watch::channel(0);
        let inner = Arc::new(Inner {
            settings,
            poll,
            serves_model,
            state: Mutex::new(State::default()),
            readings,
        });
        let task = tokio::spawn(monitor(source, live_profile, Arc::downgrade(&inner), poll));
        StandAside { inner, task }
    }

    /// Whether the proposer's requests reach the live server.
    pub fn serves_model(&self) -> bool {
        self.inner.serves_model
    }

    /// The settings it stands aside by.
    pub fn settings(&self) -> StandAsideSettings {
        self.inner.settings
    }

    /// Waits until a run may start: the live load at or below the
    /// threshold and quiet for long enough. [`Gate::Deferred`] after
    /// `max_wait`.
    pub async fn wait_clear(&self, cancel: &Cancel) -> Gate {
        let start = Instant::now();
        let deadline = start + self.inner.settings.max_wait;
        let mut readings = self.inner.readings.subscribe();
        let mut logged = false;
        // The longest the load stayed at or below the threshold, for the
        // reason of a deferral.
        let mut longest = Duration::ZERO;
        loop {
            let now = Instant::now();
            let wait = self
                .inner
                .lock()
                .wait(now, &self.inner.settings, self.inner.poll);
            let Some(wait) = wait else {
                let waited = now - start;
                if logged {
                    tracing::info!(
                        waited_s = waited.as_secs_f64(),
                        "the live server is quiet again; measuring"
                    );
                }
                return Gate::Clear(waited);
            };
            if let Wait::Quieting { since, .. } = wait {
                longest = longest.max(now - since.max(start));
            }
            if now >= deadline {
                let waited = now - start;
                return Gate::Deferred(Deferral {
                    waited,
                    live_requests: self.inner.lock().live,
                    reason: wait.deferred(&self.inner.settings, waited, longest),
                });
            }
            // Only users or a restart make this worth a line: the first
            // quiet spell of a watch that has seen none is the start-up's,
            // every time.
            let worth_a_line = match wait {
                Wait::FirstReading => false,
                Wait::Busy(_) | Wait::Settling { .. } => true,
                Wait::Quieting { users, .. } => users,
            };
            if !logged && worth_a_line {
                tracing::info!(
                    "standing aside: {}; waiting up to {:.0} s ([daemon] stand_aside_max_wait_s)",
                    wait.reason(&self.inner.settings),
                    self.inner.settings.max_wait.as_secs_f64()
                );
                logged = true;
            }
            let until = match wait {
                Wait::Quieting { clear_at, .. } | Wait::Settling { clear_at } => {
                    clear_at.min(deadline)
                }
                _ => deadline,
            };
            tokio::select! {
                biased;
                _ = cancel.cancelled() => return Gate::Cancelled,
                _ = readings.changed() => {}
                _ = tokio::time::sleep_until(until) => {}
            }
        }
    }

    /// Watches one run: [`RunWatch::finish`] says how many live requests
    /// were in the server at most while it ran, and whether the live
    /// profile changed meanwhile. `own`: the run sends its requests to the
    /// live server itself (a `remeasure` of the surface).
    pub fn watch_run(&self, own: bool) -> RunWatch<'_> {
        let guard = own.then(|| self.own_request());
        let mut s = self.inner.lock();
        s.watching_run = true;
        s.run_peak = None;
        s.run_saw_change = false;
        drop(s);
        RunWatch {
            stand_aside: self,
            _own: guard,
        }
    }

    /// Marks the daemon's own request(s) to the live server, one at a time,
    /// until the guard drops: the monitor does not count them as users'.
    pub fn own_request(&self) -> OwnRequest<'_> {
        let mut s = self.inner.lock();
        s.own += 1;
        s.own_since_read = true;
        OwnRequest { stand_aside: self }
    }

    /// Whether every request the live server served in the last `within`
    /// was the daemon's own: its load was read without a break all that
    /// time and showed no user. Then its metrics moved, if they did, by the
    /// daemon's doing (a served model's answers, its own A/As of the live
    /// server, which tinyk3's average over the last 16 requests keeps),
    /// which is no drift of the serving (#30: a shoot-out loop re-measured
    /// its floor every few cycles on the move its own A/As made).
    pub fn only_own_requests_within(&self, within: Duration) -> bool {
        let s = self.inner.lock();
        let now = Instant::now();
        let Some(since) = now.checked_sub(within) else {
            return false;
        };
        s.live.is_some()
            && s.watching_since.is_some_and(|t| t <= since)
            && s.last_user_at.is_none_or(|t| t < since)
    }

    /// Whether a run that saw this was interrupted: users beyond the
    /// threshold, or a restart of the live server on a changed profile.
    pub fn interrupted(&self, seen: &RunSeen) -> bool {
        seen.live_profile_changed
            || seen
                .peak
                .is_some_and(|p| p > f64::from(self.inner.settings.above))
    }
}

impl Drop for StandAside {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Inner {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding the lock leaves plain numbers; go on.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The monitor saw the live profile change at `now`.
    fn live_profile_changed(&self, now: Instant) {
        let mut s = self.lock();
        s.changed_at = Some(now);
        if s.watching_run {
            s.run_saw_change = true;
        }
        drop(s);
        tracing::info!(
            quiet_s = self.settings.quiet.as_secs_f64(),
            "the live profile changed: its server restarts on it, so no run starts for [daemon] stand_aside_quiet_s"
        );
        self.readings.send_modify(|n| *n += 1);
    }

    fn record(&self, reading: Result<LoadReading, LoadError>, now: Instant) {
        let above = f64::from(self.settings.above);
        let mut s = self.lock();
        match reading {
            Err(e) => {
                if !s.warned {
                    tracing::warn!(
                        "the live server's load cannot be read ({e}); measuring without standing aside until it can"
                    );
                    s.warned = true;
                }
                s.live = None;
                s.last_total = None;
                s.watching_since = None;
                s.read_error = Some(e.to_string());
            }
            Ok(r) => {
                let unbroken = s
                    .last_read_at
                    .is_some_and(|t| now - t <= 3 * self.poll && s.live.is_some());
                if !unbroken {
                    // A server whose request counter reads 0 has never
                    // served anyone: it has been quiet for as long as it
                    // exists, so the watch need not wait a quiet spell out
                    // first (the embedded stack, started by the daemon).
                    let never_served = r.total == Some(0.0) && r.requests == 0.0;
                    s.watching_since = Some(if never_served {
                        now.checked_sub(self.settings.quiet).unwrap_or(now)
                    } else {
                        now
                    });
                }
                let mut live = (r.requests - f64::from(s.own)).max(0.0);
                // A request that came and went between two readings moved
                // the counter; unless it may have been one of ours.
                if let (Some(total), Some(before)) = (r.total, s.last_total)
                    && total > before
                    && !s.own_since_read
                {
                    live = live.max(1.0);
                }
                s.last_total = r.total;
                s.own_since_read = s.own > 0;
                if live > above {
                    s.last_busy_at = Some(now);
                }
                if live > 0.0 {
                    s.last_user_at = Some(now);
                }
                if s.watching_run {
                    s.run_peak = Some(s.run_peak.map_or(live, |p| p.max(live)));
                }
                s.live = Some(live);
                s.last_read_at = Some(now);
                if s.read_error.take().is_some() {
                    tracing::info!("the live server's load can be read again; standing aside");
                    s.warned = false;
                }
            }
        }
        drop(s);
        self.readings.send_modify(|n| *n += 1);
    }
}

/// Why a run may not start yet.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Wait {
    /// Nothing read yet.
    FirstReading,
    /// The live profile changed less than the quiet spell ago: its server
    /// is restarting on it.
    Settling { clear_at: Instant },
    /// Beyond the threshold now.
    Busy(f64),
    /// At or below it since `since`, but not for `quiet` yet. `users` is
    /// whether a user was seen since the load was first read: without one
    /// the wait is only the start of the watch (nobody may have come and
    /// gone unseen before it), not users who kept coming.
    Quieting {
        since: Instant,
        clear_at: Instant,
        users: bool,
    },
}

impl State {
    /// `None` when a run may start now.
    fn wait(&self, now: Instant, settings: &StandAsideSettings, poll: Duration) -> Option<Wait> {
        // First: a restarting server may well be unreadable meanwhile.
        if let Some(changed) = self.changed_at {
            let clear_at = changed + settings.quiet;
            if now < clear_at {
                return Some(Wait::Settling { clear_at });
            }
        }
        if self.read_error.is_some() {
            return None;
        }
        let (Some(live), Some(read_at)) = (self.live, self.last_read_at) else {
            return Some(Wait::FirstReading);
        };
        if now - read_at > 3 * poll {
            return Some(Wait::FirstReading);
        }
        if live > f64::from(settings.above) {
            return Some(Wait::Busy(live));
        }
        let since = self.watching_since.max(self.last_busy_at)?;
        let clear_at = since + settings.quiet;
        let users = self
            .last_busy_at
            .zip(self.watching_since)
            .is_some_and(|(busy, watched)| busy >= watched);
        (now < clear_at).then_some(Wait::Quieting {
            since,
            clear_at,
            users,
        })
    }
}

impl Wait {
    fn reason(self, settings: &StandAsideSettings) -> String {
        match self {
            Wait::FirstReading => "the live server's load was never read".into(),
            Wait::Settling { .. } => format!(
                "the live profile changed (an approval or a revert), so the live server restarts on \
                 it: no run starts for [daemon] stand_aside_quiet_s = {:.0} s after the change",
                settings.quiet.as_secs_f64()
            ),
            Wait::Busy(live) => format!(
                "the live server was serving {live:.0} request(s) of its users, more than [daemon] stand_aside_above = {}",
                settings.above
            ),
            Wait::Quieting { users: true, .. } => format!(
                "the live server's users kept coming: it was never quiet for [daemon] stand_aside_quiet_s = {:.0} s",
                settings.quiet.as_secs_f64()
            ),
            Wait::Quieting { users: false, .. } => format!(
                "no user seen, but the live server's load has been read for less than the [daemon] \
                 stand_aside_quiet_s = {:.0} s it must be quiet before a run",
                settings.quiet.as_secs_f64()
            ),
        }
    }

    /// Why a wait of `waited` that ended here defers the cycle.
    fn deferred(
        self,
        settings: &StandAsideSettings,
        waited: Duration,
        longest: Duration,
    ) -> String {
        let quiet = settings.quiet.as_secs_f64();
        let spell = format!(
            "in the {:.0} s waited its longest quiet spell was {:.1} s",
            waited.as_secs_f64(),
            longest.as_secs_f64()
        );
        match self {
            Wait::Busy(_) if quiet > 0.0 => format!(
                "{}; {spell} of the {quiet:.0} s [daemon] stand_aside_quiet_s asks for",
                self.reason(settings)
            ),
            Wait::Quieting { .. } => format!("{}; {spell}", self.reason(settings)),
            _ => format!(
                "{} (waited {:.0} s)",
                self.reason(settings),
                waited.as_secs_f64()
            ),
        }
    }
}

/// One run being watched.
#[derive(Debug)]
pub struct RunWatch<'a> {
    stand_aside: &'a StandAside,
    _own: Option<OwnRequest<'a>>,
}

/// What the monitor saw while one run went on.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RunSeen {
    /// The most live requests (the daemon's own excluded); `None` when
    /// none was read.
    pub peak: Option<f64>,
    /// The live profile changed: its server restarted beside the run.
    pub live_profile_changed: bool,
}

impl RunWatch<'_> {
    /// What was seen while the run went on.
    pub fn finish(self) -> RunSeen {
        let mut s = self.stand_aside.inner.lock();
        RunSeen {
            peak: s.run_peak.take(),
            live_profile_changed: std::mem::take(&mut s.run_saw_change),
        }
    }
}

impl Drop for RunWatch<'_> {
    fn drop(&mut self) {
        let mut s = self.stand_aside.inner.lock();
        s.watching_run = false;
        s.run_peak = None;
        s.run_saw_change = false;
    }
}

/// The daemon's own request to the live server, until dropped.
#[derive(Debug)]
pub struct OwnRequest<'a> {
    stand_aside: &'a StandAside,
}

impl Drop for OwnRequest<'_> {
    fn drop(&mut self) {
        let mut s = self.stand_aside.inner.lock();
        s.own = s.own.saturating_sub(1);
    }
}

/// The blocks of one measurement the live server's users interrupted: each
/// is re-run, up to the policy's bound on discarded blocks, past which the
/// measurement is deferred (the users kept coming; the machine is not
/// noisy, so it does not end `inconclusive`).
#[derive(Debug, Default)]
pub struct Interruptions(usize);

impl Interruptions {
    /// Runs of the re-run blocks, on top of the measurement's own bound.
    pub fn extra_runs(&self) -> usize {
        4 * self.0
    }

    /// The judge's count of interrupted blocks so far, against `most`.
    pub fn note(&mut self, live: usize, most: usize) -> Result<(), Deferral> {
        self.0 = live;
        if live > most {
            return Err(Deferral {
                waited: Duration::ZERO,
                live_requests: None,
                reason: format!(
                    "the live server's users interrupted {live} block(s) of this measurement, \
                     more than [measure] max_discarded_blocks = {most}"
                ),
            });
        }
        Ok(())
    }
}

/// Reads `source`, and looks at `live_profile`, every `poll` until the
/// [`StandAside`] is gone.
async fn monitor<L: LoadSource>(
    source: L,
    live_profile: Option<PathBuf>,
    inner: Weak<Inner>,
    poll: Duration,
) {
    let mut tick = tokio::time::interval(poll);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut seen = live_profile.as_deref().and_then(Fingerprint::of);
    loop {
        tick.tick().await;
        let reading = source.read().await;
        let Some(inner) = inner.upgrade() else {
            return;
        };
        let now = Instant::now();
        // A profile that cannot be read now (being replaced, removed) is
        // no change yet: the one written in its place is.
        if let Some(now_seen) = live_profile.as_deref().and_then(Fingerprint::of) {
            if seen.is_some_and(|was| was != now_seen) {
                inner.live_profile_changed(now);
            }
            seen = Some(now_seen);
        }
        inner.record(reading, now);
    }
}

/// Which version of a file is there: an atomic replacement (a new inode)
/// or a write in place (a new modification time or length) changes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Fingerprint {
    inode: u64,
    modified: Option<std::time::SystemTime>,
    len: u64,
}

impl Fingerprint {
    fn of(path: &Path) -> Option<Fingerprint> {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(path).ok()?;
        Some(Fingerprint {
            inode: m.ino(),
            modified: m.modified().ok(),
            len: m.len(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A test double of the live server's metrics: the test sets what the
    /// next readings say.
    #[derive(Clone, Default)]
    struct ScriptedLoad(Arc<Mutex<Option<LoadReading>>>);

    impl ScriptedLoad {
        fn set(&self, requests: f64, total: Option<f64>) {
            *self.0.lock().unwrap() = Some(LoadReading { requests, total });
        }
        fn fail(&self) {
            *self.0.lock().unwrap() = None;
        }
    }

    impl LoadSource for ScriptedLoad {
        fn read(&self) -> impl Future<Output = Result<LoadReading, LoadError>> + Send {
            let r = *self.0.lock().unwrap();
            async move { r.ok_or_else(|| LoadError::Scrape("connection refused".into())) }
        }
    }

    fn settings(above: u32, quiet_s: u64, max_wait_s: u64) -> StandAsideSettings {
        StandAsideSettings {
            above,
            quiet: Duration::from_secs(quiet_s),
            max_wait: Duration::from_secs(max_wait_s),
        }
    }

    fn spawn(load: &ScriptedLoad, s: StandAsideSettings) -> StandAside {
        StandAside::spawn(load.clone(), s, POLL, true, None)
    }

    /// [`spawn`], watching the live profile at `profile` too.
    fn spawn_watching(load: &ScriptedLoad, s: StandAsideSettings, profile: &Path) -> StandAside {
        StandAside::spawn(load.clone(), s, POLL, false, Some(profile.to_path_buf()))
    }

    #[tokio::test(start_paused = true)]
    async fn a_busy_live_server_defers_the_run_after_the_bound() {
        let load = ScriptedLoad::default();
        load.set(1.0, None);
        let sa = spawn(&load, settings(0, 10, 60));
        let t0 = Instant::now();
        let gate = sa.wait_clear(&Cancel::never()).await;
        let Gate::Deferred(d) = gate else {
            panic!("{gate:?}")
        };
        assert_eq!(d.waited, Duration::from_secs(60));
        assert_eq!(t0.elapsed(), Duration::from_secs(60));
        assert_eq!(d.live_requests, Some(1.0));
        assert!(
            d.reason.contains("serving 1 request(s)")
                && d.reason.contains("stand_aside_above = 0")
                && d.reason
                    .contains("in the 60 s waited its longest quiet spell was 0.0 s"),
            "{}",
            d.reason
        );
        // At the threshold is not beyond it: one request is tolerated with
        // stand_aside_above = 1, once the server has been watched as long
        // as the quiet spell.
        let sa = spawn(&load, settings(1, 10, 60));
        assert_eq!(
            sa.wait_clear(&Cancel::never()).await,
            Gate::Clear(Duration::from_secs(10))
        );
    }

    /// The start of a watch waits out one quiet spell (a user may have
    /// come and gone before the first reading), and says so as that, not
    /// as users who kept coming (it did, with nobody there).
    #[tokio::test(start_paused = true)]
    async fn the_start_up_wait_with_no_user_seen_says_so() {
        let load = ScriptedLoad::default();
        load.set(0.0, Some(3.0));
        let sa = spawn(&load, settings(0, 30, 5));
        let Gate::Deferred(d) = sa.wait_clear(&Cancel::never()).await else {
            panic!("the 5 s bound ends a 30 s spell")
        };
        assert!(
            d.reason.contains("no user seen") && !d.reason.contains("kept coming"),
            "{}",
            d.reason
        );
        // Once a user is seen in the watch, it is the users.
        load.set(1.0, Some(4.0));
        tokio::time::sleep(POLL * 2).await;
        load.set(0.0, Some(4.0));
        let Gate::Deferred(d) = sa.wait_clear(&Cancel::never()).await else {
            panic!("still within the spell")
        };
        assert!(d.reason.contains("kept coming"), "{}", d.reason);
        // A server that never served a request has been quiet all along:
        // no spell to wait out.
        let fresh = ScriptedLoad::default();
        fresh.set(0.0, Some(0.0));
        let sa = spawn(&fresh, settings(0, 10, 60));
        let Gate::Clear(waited) = sa.wait_clear(&Cancel::never()).await else {
            panic!("clear")
        };
        assert!(waited <= POLL * 2, "{waited:?}");
        // With no user at all, a run starts once the spell is over.
        let sa = spawn(&load, settings(0, 10, 60));
        assert_eq!(
            sa.wait_clear(&Cancel::never()).await,
            Gate::Clear(Duration::from_secs(10))
        );
    }

    /// The daemon's own requests are no users: a live server that served
    /// only them since a time moved its metrics by the daemon's doing. A
    /// user seen, a reading lost, or a watch younger than the time says
    /// otherwise.
    #[tokio::test(start_paused = true)]
    async fn only_own_requests_since_a_time_when_no_user_was_seen_then() {
        let load = ScriptedLoad::default();
        load.set(0.0, Some(5.0));
        let sa = spawn(&load, settings(0, 10, 60));
        tokio::time::sleep(Duration::from_secs(30)).await;
        assert!(sa.only_own_requests_within(Duration::from_secs(20)));
        assert!(
            !sa.only_own_requests_within(Duration::from_secs(60)),
            "watched for 30 s only"
        );
        // The daemon's own request moves the counter: still nobody else.
        {
            let _own = sa.own_request();
            load.set(1.0, Some(6.0));
            tokio::time::sleep(POLL * 4).await;
        }
        load.set(0.0, Some(6.0));
        tokio::time::sleep(POLL * 4).await;
        assert!(sa.only_own_requests_within(Duration::from_secs(20)));
        // A user's request comes and goes between two readings.
        load.set(0.0, Some(7.0));
        tokio::time::sleep(POLL * 4).await;
        assert!(!sa.only_own_requests_within(Duration::from_secs(20)));
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert!(sa.only_own_requests_within(Duration::from_secs(4)));
        // A lost reading breaks the watch: nothing is known before it.
        load.fail();
        tokio::time::sleep(POLL * 2).await;
        load.set(0.0, Some(7.0));
        tokio::time::sleep(POLL * 4).await;
        assert!(!sa.only_own_requests_within(Duration::from_secs(4)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_run_starts_once_the_users_left_for_the_quiet_spell() {
        let load = ScriptedLoad::default();
        load.set(2.0, None);
        let sa = spawn(&load, settings(0, 10, 60));
        let users = load.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(5)).await;
            users.set(0.0, None);
        });
        let t0 = Instant::now();
        let Gate::Clear(waited) = sa.wait_clear(&Cancel::never()).await else {
            panic!("cleared")
        };
        // Busy until 5 s (the last busy reading at 4.75 s), then 10 s quiet.
        assert_eq!(waited, t0.elapsed());
        assert!(
            waited >= Duration::from_secs(14) && waited <= Duration::from_secs(15),
            "{waited:?}"
        );
        // Quiet since: the next run goes at once.
        assert_eq!(
            sa.wait_clear(&Cancel::never()).await,
            Gate::Clear(Duration::ZERO)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_steady_stream_of_users_with_gaps_shorter_than_the_quiet_spell_defers() {
        // A request of 1 s every 3 s: idle two thirds of the time, never
        // for the 10 s a run waits for.
        let load = ScriptedLoad::default();
        let users = load.clone();
        tokio::spawn(async move {
            loop {
                users.set(1.0, None);
                tokio::time::sleep(Duration::from_secs(1)).await;
                users.set(0.0, None);
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
        });
        let sa = spawn(&load, settings(0, 10, 30));
        let Gate::Deferred(d) = sa.wait_clear(&Cancel::never()).await else {
            panic!("deferred")
        };
        assert_eq!(d.waited, Duration::from_secs(30));
        assert!(
            d.reason
                .contains("never quiet for [daemon] stand_aside_quiet_s = 10 s")
                && d.reason
                    .contains("in the 30 s waited its longest quiet spell was 2."),
            "{}",
            d.reason
        );
        // Without the quiet spell a run goes in the first gap.
        let sa = spawn(&load, settings(0, 0, 30));
        let Gate::Clear(waited) = sa.wait_clear(&Cancel::never()).await else {
            panic!("cleared")
        };
        assert!(waited <= Duration::from_secs(3), "{waited:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn users_during_a_run_interrupt_it_and_the_daemons_own_requests_do_not() {
        let load = ScriptedLoad::default();
        load.set(0.0, Some(5.0));
        let sa = spawn(&load, settings(0, 0, 60));
        assert!(matches!(
            sa.wait_clear(&Cancel::never()).await,
            Gate::Clear(_)
        ));
        // A bench run: a user's request comes in during it.
        let run = sa.watch_run(false);
        tokio::time::sleep(Duration::from_secs(1)).await;
        load.set(1.0, Some(6.0));
        tokio::time::sleep(Duration::from_secs(1)).await;
        let seen = run.finish();
        assert_eq!(seen.peak, Some(1.0));
        assert!(sa.interrupted(&seen));
        // A request that came and went between two readings still shows:
        // the counter moved.
        load.set(0.0, Some(6.0));
        tokio::time::sleep(Duration::from_secs(1)).await;
        let run = sa.watch_run(false);
        load.set(0.0, Some(7.0));
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(sa.interrupted(&run.finish()));
        // A remeasure of the live surface: its own request is in the
        // server (and moves the counter), nobody else's.
        tokio::time::sleep(Duration::from_secs(1)).await;
        let run = sa.watch_run(true);
        load.set(1.0, Some(8.0));
        tokio::time::sleep(Duration::from_secs(1)).await;
        load.set(0.0, Some(9.0));
        tokio::time::sleep(Duration::from_secs(1)).await;
        let seen = run.finish();
        assert_eq!(seen.peak, Some(0.0));
        assert!(!sa.interrupted(&seen));
        // After it the counter is read afresh: its last move was ours.
        let run = sa.watch_run(false);
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(run.finish().peak, Some(0.0));
        // A user's request queued behind the daemon's own shows beside it.
        let run = sa.watch_run(true);
        load.set(2.0, Some(11.0));
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(sa.interrupted(&run.finish()));
    }

    /// Replaces `path` the way an approval writes the live profile: a new
    /// file renamed over it.
    fn replace(path: &Path, text: &str) {
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, path).unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn a_changed_live_profile_holds_runs_for_the_quiet_spell_and_interrupts_the_one_under_way()
     {
        let dir = tempfile::tempdir().unwrap();
        let profile = dir.path().join("live.toml");
        std::fs::write(&profile, "[speculative]\ndraft_len = 0\n").unwrap();
        let load = ScriptedLoad::default();
        // A server that never served anyone: no start-up wait.
        load.set(0.0, Some(0.0));
        let sa = spawn_watching(&load, settings(0, 10, 60), &profile);
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(
            sa.wait_clear(&Cancel::never()).await,
            Gate::Clear(Duration::ZERO)
        );
        // A run under way when an approval rewrites the profile.
        let run = sa.watch_run(false);
        replace(&profile, "[speculative]\ndraft_len = 8\n");
        tokio::time::sleep(Duration::from_secs(1)).await;
        let seen = run.finish();
        assert!(seen.live_profile_changed, "{seen:?}");
        assert_eq!(seen.peak, Some(0.0));
        assert!(sa.interrupted(&seen));
        // The restarting server cannot be read: the runs wait all the same,
        // until the quiet spell after the change is over.
        load.fail();
        let Gate::Clear(waited) = sa.wait_clear(&Cancel::never()).await else {
            panic!("cleared after the quiet spell")
        };
        assert!(
            waited > Duration::from_millis(8500) && waited <= Duration::from_secs(9),
            "{waited:?}"
        );
        // The next run sees no change.
        load.set(0.0, Some(0.0));
        let run = sa.watch_run(false);
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!sa.interrupted(&run.finish()));
        // A wait bound shorter than the quiet spell defers, saying why.
        let sa = spawn_watching(&load, settings(0, 10, 5), &profile);
        tokio::time::sleep(Duration::from_secs(1)).await;
        replace(&profile, "[speculative]\ndraft_len = 4\n");
        tokio::time::sleep(Duration::from_secs(1)).await;
        let Gate::Deferred(d) = sa.wait_clear(&Cancel::never()).await else {
            panic!("deferred")
        };
        assert!(
            d.reason.contains("the live profile changed"),
            "{}",
            d.reason
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_unreadable_load_is_not_waited_for_and_shutdown_ends_a_wait() {
        let load = ScriptedLoad::default();
        load.fail();
        let sa = spawn(&load, settings(0, 10, 60));
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(
            sa.wait_clear(&Cancel::never()).await,
            Gate::Clear(Duration::ZERO)
        );
        load.set(3.0, None);
        tokio::time::sleep(Duration::from_secs(1)).await;
        let (handle, cancel) = Cancel::new();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(2)).await;
            handle.cancel();
        });
        assert_eq!(sa.wait_clear(&cancel).await, Gate::Cancelled);
    }
}
