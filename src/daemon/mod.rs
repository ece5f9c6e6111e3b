//! The long-running service around the cycle (`orchestrator run`): one loop,
//! an interval tick with missed ticks skipped, cycles that never overlap, a
//! clean shutdown on SIGINT/SIGTERM (the current measurement's process group
//! is killed and the cycle recorded `aborted`), exponential backoff with
//! jitter after repeated failures, and the daemon's own metrics endpoint.
//!
//! At start the daemon takes the ledger's lock ([`lock`]), kills whatever a
//! dead predecessor left running ([`orphans`]), and closes the cycles it left
//! open as `aborted` (each with a `failed` verdict). A ledger write failure
//! (full disk, size cap, read-only file) stops it with exit 1 after a last
//! attempt to close the open cycle the same way; a PostgreSQL ledger that
//! went away (a server restart) is waited out instead ([`outage`]).
//!
//! Before each cycle it checks the engine-time budget ([`budget`]) and
//! takes a look ([`crate::cycle::CycleRunner::converged`]): over budget, or
//! with nothing expected to tell the loop anything new, it waits instead
//! of measuring ([`wait`]), recorded in the ledger and said on stdout.
//!
//! - [`applier`]: writes approved stages of its stack to its live profile.
//! - [`budget`]: the engine-time budget over its sliding window.
//! - [`lock`]: which daemon holds a ledger (`flock`).
//! - [`metrics`]: the daemon's Prometheus endpoint.
//! - [`notify`]: systemd's notify protocol (READY, WATCHDOG, STOPPING).
//! - [`outage`]: riding out a lost PostgreSQL ledger.
//! - [`proposer`]: the configured proposer as one type.
//! - [`realized`]: the applied stages by what they realized, for the metrics.
//! - `stand_aside`: the live-load monitor the cycles stand aside by.
//! - [`wait`]: the converged loop's back-off and what wakes it, and the
//!   over-budget wait.

pub mod applier;
mod before;
pub mod budget;
pub mod lock;
pub mod metrics;
mod notify;
mod outage;
pub mod proposer;
mod realized;
mod retry;
mod reverter;
mod signals;
mod stand_aside;
pub mod wait;

use std::time::Duration;

use anyhow::Context;
use chrono::Utc;
use tokio::time::MissedTickBehavior;

use crate::clock::SystemClock;
use crate::config::Config;
use crate::cycle::CycleRunner;
use crate::embedded;
use crate::judge::Policy;
use crate::ledger::{Ledger, LedgerError, StackLock};
use crate::measure::by_protocol::Scorers;
use crate::menu::Menu;
use crate::process::cancel::Cancel;
use crate::process::orphans;
use crate::progress::Progress;
use crate::vocab::CycleStatus;

use before::{Before, before_cycle, engine_accounts};
use metrics::DaemonMetrics;
use proposer::AnyProposer;
pub use retry::backoff;
pub(crate) use signals::watch_signals;

/// How long to run.
#[derive(Debug, Clone, Copy, Default)]
pub struct RunOptions {
    /// Stop after this many cycles (forever when `None`).
    pub cycles: Option<u64>,
    /// One cycle; a failed cycle makes the command fail.
    pub once: bool,
    /// stderr is a terminal: progress is a redrawn line there, else a log
    /// line per few runs (see [`crate::progress`]).
    pub progress: bool,
}

impl RunOptions {
    /// A bounded run (`--once`, `--cycles N`) never waits: converged or
    /// over budget, it says why and ends. Only the daemon waits.
    pub fn bounded(&self) -> bool {
        self.once || self.cycles.is_some()
    }
}

/// How the loop ended.
#[derive(Debug, Clone, Default)]
pub struct RunSummary {
    /// Cycles recorded, whatever their status.
    pub cycles: u64,
    pub failed: u64,
    /// Cycles cut short by SIGINT/SIGTERM or by a lost PostgreSQL ledger
    /// (recorded `aborted`).
    pub aborted: u64,
    pub interrupted: bool,
    /// The last cycle failed (an aborted one did not).
    pub last_failed: bool,
    /// Cycles that stood aside for the live server's users too long
    /// (recorded `aborted`, neither failed nor interrupted).
    pub deferred: u64,
}

impl RunSummary {
    /// The exit rule of `orchestrator run`: the run failed when its last
    /// cycle failed, or when every cycle that ran to its end failed (a run
    /// interrupted after failing throughout is still a failure). An
    /// interrupted cycle is neither failed nor a success. `None` is exit 0.
    pub fn failure(&self) -> Option<String> {
        let finished = self.cycles - self.aborted - self.deferred;
        if self.last_failed {
            Some(format!(
                "the last cycle failed ({} of {} cycle(s) failed)",
                self.failed, self.cycles
            ))
        } else if finished > 0 && self.failed == finished {
            Some(format!(
                "{} of {} cycle(s) failed",
                self.failed, self.cycles
            ))
        } else {
            None
        }
    }
}

/// The daemon refuses to start: a part of the config it builds at start
/// (the proposer) is unusable. A configuration problem,
/// so `orchestrator run` exits 2 (`commands::exit_code` says so); its own
/// type because the daemon sits below `commands` and imports nothing from it.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct StartRefused(pub String);

/// Runs the loop until done or interrupted.
pub async fn run(config: Config, opts: RunOptions) -> anyhow::Result<RunSummary> {
    // Before any child is started: none inherits the protocol's variables.
    let watchdog = notify::Watchdog::from_env();
    let menu = crate::stack_support::stack_menu(&config, &Menu::load(&config.menu_dir)?)?;
    let mut proposer =
        AnyProposer::from_config(&config).map_err(|e| StartRefused(e.to_string()))?;
    if let Some(dir) = config.ledger_path.parent() {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("creating the ledger's directory {}", dir.display()))?;
    }
    // Held until this function returns (or the process dies).
    let _lock = lock::DaemonLock::acquire(&config.ledger_path).map_err(|e| {
        if config.ledger_postgres.is_some() {
            e.on_postgres()
        } else {
            e
        }
    })?;
    reap_orphans(&config.ledger_path)?;
    let ledger = match &config.ledger_postgres {
        Some(pg) => pg.open(crate::ledger::DEFAULT_BUSY_TIMEOUT).await?,
        None => {
            Ledger::open_capped(
                &config.ledger_path,
                crate::ledger::DEFAULT_BUSY_TIMEOUT,
                config.ledger_max_size.map(|m| m.bytes()),
            )
            .await?
        }
    };
    // On a shared PostgreSQL ledger the one-daemon-per-stack lock is the
    // server's (held until this function returns or the process dies); the
    // file lock above still guards this host's orphan reaping. The loop
    // takes it again after a server restart ([`outage`]).
    let mut stack_lock = match &config.ledger_postgres {
        Some(_) => Some(ledger.lock_stack(&config.stack.name).await?),
        None => None,
    };
    // From here on the daemon writes, recovers and expires for its own stack
    // only: other daemons share a PostgreSQL ledger.
    let ledger = ledger.scoped(config.stack.scope());
    let adopted = ledger.adopt_unowned().await?;
    if adopted.cycles + adopted.stages > 0 {
        tracing::info!(
            cycles = adopted.cycles,
            stages = adopted.stages,
            stack = %config.stack.name,
            "rows written before stacks were recorded now belong to this stack"
        );
    }
    let aborted = ledger
        .abort_running_cycles(
            "found `running` at start: the previous orchestrator process ended mid-cycle",
            Utc::now(),
        )
        .await?;
    if aborted > 0 {
        tracing::warn!(
            aborted,
            "closed cycles a previous process left running as aborted"
        );
    }
    ledger
        .end_open_waits(
            "the daemon stopped while waiting (found open at the next start)",
            Utc::now(),
        )
        .await?;
    crate::atomic_file::remove_stale_temps(&crate::cycle::profiles_dir(&config.stack.live_profile));
    applier::apply_approved(&config, &ledger).await;
    reverter::revert_requested(&config, &ledger).await;

    let (handle, cancel) = Cancel::new();
    let signals = tokio::spawn(watch_signals(handle));

    let mut stack = None;
    if let Some(e) = &config.embedded {
        embedded::prepare(&config, e, &cancel).await?;
        stack = Some(embedded::start(&config, e, &cancel).await?);
    }

    let progress = Progress::default();
    let reporter = progress.spawn_reporter(opts.progress);
    let daemon_metrics = DaemonMetrics::new(
        config.objective.target_seconds_per_token.get(),
        progress.clone(),
    );
    let listener = metrics::bind(config.daemon.metrics_listen)
        .await
        .with_context(|| {
            format!(
                "binding the orchestrator's metrics endpoint {} ([daemon] metrics_listen): is another orchestrator running?",
                config.daemon.metrics_listen
            )
        })?;
    let metrics_task = tokio::spawn(metrics::serve(listener, daemon_metrics.clone()));
    daemon_metrics.refresh_stages(&ledger).await;
    notify::ready();

    // A converged loop woken by a changed config or menu loads them again
    // (what it cannot take without a restart is refused, and it goes on
    // with what it had).
    let result = watchdog
        .keep_alive(async {
            let mut summary = RunSummary::default();
            let (mut running, mut menu) = (config.clone(), menu);
            let mut glances = Vec::new();
            loop {
                let end = run_loop(
                    &running,
                    &menu,
                    running.policy,
                    &ledger,
                    &mut stack_lock,
                    &mut proposer,
                    &cancel,
                    &daemon_metrics,
                    &progress,
                    opts,
                    &mut summary,
                    std::mem::take(&mut glances),
                )
                .await;
                match end {
                    Ok(LoopEnd::Reload(seen)) => {
                        glances = seen;
                        match reload(&running) {
                            Ok((c, m, p)) => {
                                tracing::info!("loaded the changed config and menu");
                                (running, menu, proposer) = (c, m, p);
                            }
                            Err(why) => tracing::error!("{why}"),
                        }
                    }
                    Ok(LoopEnd::Done) => break Ok(std::mem::take(&mut summary)),
                    Err(e) => break Err(e),
                }
            }
        })
        .await;
    notify::stopping("stopping: the loop ended");

    reporter.abort();
    metrics_task.abort();
    signals.abort();
    if let Some(stack) = stack {
        stack.stop().await;
    }
    ledger.close().await;
    // Not when another daemon took the stack during an outage: the cycle
    // left open may be its own now.
    if result.as_ref().is_err_and(|e| !lost_the_stack(e)) {
        close_open_cycle(&config).await;
    }
    drop(stack_lock);
    result
}

/// Whether the loop stopped because another daemon holds the stack.
fn lost_the_stack(e: &anyhow::Error) -> bool {
    e.chain().any(|e| {
        matches!(
            e.downcast_ref::<LedgerError>(),
            Some(LedgerError::StackLocked { .. })
        )
    })
}

/// Kills what a dead daemon of this ledger left running, then tags this
/// daemon's own children with the ledger (see [`orphans`]).
pub(crate) fn reap_orphans(ledger: &std::path::Path) -> anyhow::Result<()> {
    let tag = orphans::tag(ledger);
    match orphans::reap(&tag) {
        Ok(killed) if killed.is_empty() => {}
        Ok(killed) => {
            for o in &killed {
                tracing::warn!(
                    pid = o.pid,
                    pgid = o.pgid,
                    "killed an orphan of a previous daemon: {}",
                    o.cmdline
                );
            }
            tracing::warn!(
                killed = killed.len(),
                "killed what a previous daemon of this ledger left running"
            );
        }
        Err(left) => anyhow::bail!(
            "processes a previous daemon of {} left running survive SIGKILL: {:?}; stop them by hand",
            ledger.display(),
            left.iter().map(|o| o.pid).collect::<Vec<_>>()
        ),
    }
    crate::process::group::tag_children(orphans::TAG_VAR, &tag);
    Ok(())
}

/// After a fatal error: one more attempt, on a fresh connection without the
/// size cap (so a capped ledger keeps room to close), to close the open
/// cycle as aborted with a `failed` verdict. When even that fails (a truly
/// full disk), the next start does it.
async fn close_open_cycle(config: &Config) {
    let why = "the daemon stopped: the ledger or a file could not be written";
    let opened = match &config.ledger_postgres {
        Some(pg) => pg.open(crate::ledger::DEFAULT_BUSY_TIMEOUT).await,
        None => Ledger::open(&config.ledger_path).await,
    };
    let closed = match opened.map(|l| l.scoped(config.stack.scope())) {
        Ok(ledger) => {
            let r = ledger.abort_running_cycles(why, Utc::now()).await;
            ledger.close().await;
            r
        }
        Err(e) => Err(e),
    };
    match closed {
        Ok(0) => {}
        Ok(n) => tracing::warn!(n, "closed the open cycle as aborted before stopping"),
        Err(e) => tracing::error!(
            "the open cycle stays `running` ({e}); the next `orchestrator run` closes it as aborted"
        ),
    }
}

/// Why the loop returned without an error.
enum LoopEnd {
    /// Done: the cycles asked for ran, or a shutdown.
    Done,
    /// A converged wait saw the config or the menu change: load them again
    /// (with the live metrics glanced at so far).
    Reload(Vec<(chrono::DateTime<Utc>, f64)>),
}

/// The changed config and menu, and the proposer they make, when the
/// running daemon can take them: its ledger, stack, embedded stack and
/// endpoint stay as they started (a change there takes a restart).
fn reload(running: &Config) -> Result<(Config, Menu, AnyProposer), String> {
    let keep = "going on with the config and menu loaded before";
    let new = Config::load(&running.path)
        .map_err(|e| format!("the config changed but does not load: {e}; {keep}"))?;
    let fixed = |c: &Config| {
        [
            (
                "[ledger]",
                format!(
                    "{:?} {:?} {:?}",
                    c.ledger_path, c.ledger_postgres, c.ledger_max_size
                ),
            ),
            (
                "[stack] name or class",
                format!("{} {:?}", c.stack.name, c.stack.class),
            ),
            ("[embedded]", format!("{:?}", c.embedded)),
            ("[daemon]", format!("{:?}", c.daemon)),
        ]
    };
    for ((table, was), (_, now)) in fixed(running).iter().zip(fixed(&new).iter()) {
        if was != now {
            return Err(format!(
                "the config's {table} changed, which takes a restart of `orchestrator run`; {keep}"
            ));
        }
    }
    let menu = Menu::load(&new.menu_dir)
        .map_err(|e| e.to_string())
        .and_then(|m| crate::stack_support::stack_menu(&new, &m).map_err(|e| e.to_string()))
        .map_err(|e| format!("the menu changed but does not load: {e}; {keep}"))?;
    let proposer = AnyProposer::from_config(&new)
        .map_err(|e| format!("the changed config's proposer cannot start: {e}; {keep}"))?;
    Ok((new, menu, proposer))
}

#[expect(
    clippy::too_many_arguments,
    reason = "the loop's whole context, built once in run()"
)]
async fn run_loop(
    config: &Config,
    menu: &Menu,
    policy: Policy,
    ledger: &Ledger,
    stack_lock: &mut Option<StackLock>,
    proposer: &mut AnyProposer,
    cancel: &Cancel,
    daemon_metrics: &DaemonMetrics,
    progress: &Progress,
    opts: RunOptions,
    summary: &mut RunSummary,
    glances: Vec<(chrono::DateTime<Utc>, f64)>,
) -> anyhow::Result<LoopEnd> {
    let scorers = Scorers::from_config(config);
    let http = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(30))
        .build()
        .context("building the HTTP client")?;
    let clock = SystemClock;
    let stand_aside = stand_aside::start(config, &http);
    let limit = if opts.once { Some(1) } else { opts.cycles };
    let mut tick = tokio::time::interval(config.cycle.interval_s.duration());
    tick.set_missed_tick_behavior(MissedTickBehavior::Skip);
    let budget = budget::Budget::of(&config.cycle);
    let mut waits = wait::Waits::new(config, ledger, &http, cancel.clone(), glances)
        .standing_aside_by(stand_aside.as_ref());
    let mut last_cycle = None;
    let mut consecutive_failures = 0u32;
    loop {
        if limit.is_some_and(|n| summary.cycles >= n) {
            break;
        }
        // Biased: a shutdown wins over a tick that is also ready.
        tokio::select! {
            biased;
            _ = cancel.cancelled() => { summary.interrupted = true; break; }
            _ = tick.tick() => {}
        }
        if consecutive_failures >= config.cycle.max_consecutive_failures {
            let wait = backoff(
                consecutive_failures - config.cycle.max_consecutive_failures,
                config.cycle.interval_s.duration(),
                config.cycle.backoff_max_s.duration(),
            );
            tracing::warn!(
                consecutive_failures,
                "{consecutive_failures} cycles failed in a row; backing off {:.0} s before the next",
                wait.as_secs_f64()
            );
            tokio::select! {
                biased;
                _ = cancel.cancelled() => { summary.interrupted = true; break; }
                _ = tokio::time::sleep(wait) => {}
            }
        }
        // The database may have restarted between two writes: hold the
        // stack again before measuring anything.
        if let Err(e) = outage::check_lock(stack_lock, ledger).await {
            let outage = outage::ride_out(e, ledger, stack_lock, config, cancel).await?;
            if outage.go_on(summary) {
                continue;
            }
            break;
        }
        // An approval recorded from anywhere reaches the live profile
        // before the cycle observes it (and only while this daemon holds
        // its stack, checked just above).
        applier::apply_approved(config, ledger).await;
        reverter::revert_requested(config, ledger).await;
        let glances = waits.glances().to_vec();
        let mut cycle = CycleRunner {
            config,
            policy,
            menu,
            ledger,
            proposer: &mut *proposer,
            scorers: &scorers,
            clock: &clock,
            cancel: cancel.clone(),
            http: &http,
            progress: progress.clone(),
            stand_aside: stand_aside.as_ref(),
            glances: &glances,
        };
        // The budget first, then the look: over budget, or with nothing
        // worth measuring, the daemon waits instead of running a cycle.
        match before_cycle(
            &budget,
            &cycle,
            &mut waits,
            daemon_metrics,
            last_cycle,
            opts,
        )
        .await
        {
            Ok(Before::Run) => {}
            Ok(Before::Again) => continue,
            Ok(Before::Reload) => return Ok(LoopEnd::Reload(waits.into_glances())),
            Ok(Before::Stop) => {
                summary.interrupted = !opts.bounded();
                break;
            }
            Err(e) => {
                let outage = outage::ride_out(e, ledger, stack_lock, config, cancel).await?;
                if outage.go_on(summary) {
                    continue;
                }
                break;
            }
        }
        let mut report = match cycle.run().await {
            Ok(report) => report,
            Err(e) => {
                progress.end_cycle();
                let outage = outage::ride_out(e, ledger, stack_lock, config, cancel).await?;
                if outage.go_on(summary) {
                    continue;
                }
                break;
            }
        };
        report.target = config.objective.target_seconds_per_token.get();
        last_cycle = Some(report.cycle_id);
        waits.cycle_ran();
        // The engine time it spent, and the window's share, on its line.
        let line = match engine_accounts(&budget, ledger, daemon_metrics).await {
            Ok(spent) => format!("{report}  {spent}"),
            Err(e) => {
                tracing::warn!("reading the engine time: {e}");
                report.to_string()
            }
        };
        println!("{line}");
        notify::status(&line);
        summary.cycles += 1;
        let failed = report.status == Some(CycleStatus::Failed);
        summary.last_failed = failed;
        summary.deferred += u64::from(report.deferred.is_some());
        if failed {
            summary.failed += 1;
            consecutive_failures += 1;
        } else {
            consecutive_failures = 0;
        }
        if let Some(v) = report.verdict.filter(|_| report.deferred.is_none()) {
            daemon_metrics.cycle_finished(v, report.seconds, failed);
        }
        if let Some(live) = report.live() {
            daemon_metrics.observe_seconds_per_token(live);
        }
        daemon_metrics.set_noise_floor(report.floor);
        daemon_metrics.refresh_stages(ledger).await;
        // A deferred cycle is recorded `aborted` but the daemon goes on.
        if report.status == Some(CycleStatus::Aborted) && report.deferred.is_none() {
            summary.aborted += 1;
            summary.interrupted = true;
            break;
        }
    }
    if waits.waiting().is_some() {
        let why = if summary.interrupted {
            "shutdown"
        } else {
            "the run ended"
        };
        waits.end(why).await?;
    }
    Ok(LoopEnd::Done)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn summary(statuses: &[CycleStatus]) -> RunSummary {
        let mut s = RunSummary::default();
        for st in statuses {
            s.cycles += 1;
            s.last_failed = *st == CycleStatus::Failed;
            match st {
                CycleStatus::Failed => s.failed += 1,
                CycleStatus::Aborted => s.aborted += 1,
                _ => {}
            }
        }
        s
    }

    #[test]
    fn a_run_fails_when_its_last_cycle_or_every_cycle_failed() {
        use CycleStatus::{Aborted, Completed, Failed};
        assert!(summary(&[]).failure().is_none());
        assert!(summary(&[Completed, Completed]).failure().is_none());
        assert!(summary(&[Failed, Completed]).failure().is_none());
        assert!(summary(&[Failed, Completed, Aborted]).failure().is_none());
        assert!(summary(&[Completed, Aborted]).failure().is_none());
        assert!(summary(&[Aborted]).failure().is_none());
        let last = summary(&[Completed, Failed]).failure().unwrap();
        assert!(
            last.contains("last cycle failed") && last.contains("1 of 2"),
            "{last}"
        );
        let all = summary(&[Failed, Failed, Aborted]).failure().unwrap();
        assert!(all.contains("2 of 3 cycle(s) failed"), "{all}");
        assert!(summary(&[Failed]).failure().is_some());
    }

    #[test]
    fn backoff_grows_and_is_capped() {
        let base = Duration::from_secs(10);
        let cap = Duration::from_secs(60);
        for _ in 0..50 {
            let b0 = backoff(0, base, cap);
            assert!(b0 >= Duration::from_secs(5) && b0 <= base, "{b0:?}");
            let b2 = backoff(2, base, cap);
            assert!(
                b2 >= Duration::from_secs(20) && b2 <= Duration::from_secs(40),
                "{b2:?}"
            );
            let b9 = backoff(9, base, cap);
            assert!(b9 >= Duration::from_secs(30) && b9 <= cap, "{b9:?}");
        }
        assert!(backoff(u32::MAX, base, cap) <= cap);
    }
}
