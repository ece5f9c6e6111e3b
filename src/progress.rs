//! What the daemon is doing right now: which cycle, which phase, how many
//! runs of at most how many, and for how long. The cycle and the A/B runner
//! write it; a reporter shows it on stderr (a redrawn line on a terminal, a
//! log line per few runs otherwise, so a piped or journald log still shows
//! a long cycle moving) and the metrics endpoint exposes it.
//!
//! A cycle of a slow stack can take many minutes; before this, a newcomer
//! running the demo into a log saw nothing between the start and the first
//! verdict.

use std::io::Write as _;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A log line at the latest this long after the last one while runs go on.
const LOG_EVERY: Duration = Duration::from_secs(10);
/// ... and at least at every block of this many runs.
const LOG_EVERY_RUNS: usize = 4;
/// How often the terminal line is redrawn.
const REDRAW_EVERY: Duration = Duration::from_secs(1);

/// Shared progress state; clones share it. The default is idle.
#[derive(Debug, Clone, Default)]
pub struct Progress(Arc<Mutex<State>>);

#[derive(Debug, Default)]
struct State {
    now: Option<Snapshot>,
    /// Whether a terminal line is drawn (and must be cleared before other
    /// output).
    drawn: bool,
    /// The runs count and time of the last log line (non-terminal mode).
    logged: Option<(usize, Instant)>,
}

/// The current cycle's state.
#[derive(Debug, Clone, PartialEq)]
pub struct Snapshot {
    pub cycle: i64,
    pub phase: &'static str,
    /// What is measured, for people ("A/B of rebalance_trunk_cache").
    pub what: String,
    pub runs_done: usize,
    /// The most runs the measurement can take (its policy's bound; grows
    /// when discarded blocks are re-run).
    pub runs_max: usize,
    pub started: Instant,
}

impl Snapshot {
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// One line for people: "cycle 3 · measure (A/B of …) · run 5 of at most 36 · 62 s".
    pub fn line(&self) -> String {
        let mut s = format!("cycle {} · {}", self.cycle, self.phase);
        if !self.what.is_empty() {
            s.push_str(&format!(" ({})", self.what));
        }
        if self.runs_max > 0 {
            s.push_str(&format!(
                " · {} of at most {} runs done",
                self.runs_done, self.runs_max
            ));
        }
        s.push_str(&format!(" · {:.0} s", self.elapsed().as_secs_f64()));
        s
    }
}

/// The phases a cycle goes through, as the ledger's timeline names them.
pub mod phase {
    /// Waiting for the live server's users (`measure::stand_aside`).
    pub const STAND_ASIDE: &str = "stand aside";
    pub const OBSERVE: &str = "observe";
    pub const PROPOSE: &str = "propose";
    pub const PLAN: &str = "plan";
    pub const MEASURE_FLOOR: &str = "measure noise floor";
    pub const MEASURE: &str = "measure";
    pub const RECORD: &str = "record";
}

impl Progress {
    pub fn start_cycle(&self, cycle: i64) {
        let mut s = self.lock();
        s.now = Some(Snapshot {
            cycle,
            phase: phase::OBSERVE,
            what: String::new(),
            runs_done: 0,
            runs_max: 0,
            started: Instant::now(),
        });
        s.logged = None;
    }

    /// Enters `phase`; `what` says what it works on (may be empty).
    pub fn phase(&self, phase: &'static str, what: &str) {
        let mut s = self.lock();
        if let Some(now) = s.now.as_mut() {
            now.phase = phase;
            now.what = what.to_string();
            now.runs_done = 0;
            now.runs_max = 0;
        }
        s.logged = None;
    }

    /// Runs done so far of at most `max` in the current measurement.
    pub fn runs(&self, done: usize, max: usize) {
        let mut s = self.lock();
        if let Some(now) = s.now.as_mut() {
            now.runs_done = done;
            now.runs_max = max.max(done);
        }
    }

    /// The cycle ended: idle again, and a drawn line is cleared so the
    /// cycle's own line starts clean.
    pub fn end_cycle(&self) {
        let mut s = self.lock();
        s.now = None;
        if s.drawn {
            eprint!("\r\x1b[2K");
            let _ = std::io::stderr().flush();
            s.drawn = false;
        }
    }

    pub fn snapshot(&self) -> Option<Snapshot> {
        self.lock().now.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic elsewhere while holding it leaves plain data: keep going.
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Shows progress on stderr until the task is aborted: a redrawn line
    /// on a terminal, else a log line per block of runs or every
    /// [`LOG_EVERY`] while runs go on.
    pub fn spawn_reporter(&self, terminal: bool) -> tokio::task::JoinHandle<()> {
        let progress = self.clone();
        tokio::spawn(async move {
            let spinner = ['|', '/', '-', '\\'];
            for tick in 0usize.. {
                tokio::time::sleep(REDRAW_EVERY).await;
                let mut s = progress.lock();
                let Some(now) = s.now.clone() else { continue };
                if terminal {
                    eprint!("\r\x1b[2K  {} {}", spinner[tick % 4], now.line());
                    let _ = std::io::stderr().flush();
                    s.drawn = true;
                } else if should_log(s.logged, &now) {
                    s.logged = Some((now.runs_done, Instant::now()));
                    drop(s);
                    tracing::info!("progress: {}", now.line());
                }
            }
        })
    }
}

/// Non-terminal mode: a line when a measurement starts, after each block of
/// runs, and every [`LOG_EVERY`] while runs go on (never for an idle wait).
fn should_log(logged: Option<(usize, Instant)>, now: &Snapshot) -> bool {
    if now.runs_max == 0 {
        return false;
    }
    match logged {
        None => true,
        Some((runs, at)) => {
            now.runs_done != runs
                && (now.runs_done >= runs + LOG_EVERY_RUNS || at.elapsed() >= LOG_EVERY)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snap(done: usize, max: usize) -> Snapshot {
        Snapshot {
            cycle: 3,
            phase: phase::MEASURE,
            what: "A/B of stage_speculative".into(),
            runs_done: done,
            runs_max: max,
            started: Instant::now(),
        }
    }

    #[test]
    fn the_line_names_cycle_phase_runs_and_time() {
        let line = snap(5, 36).line();
        assert!(
            line.starts_with(
                "cycle 3 · measure (A/B of stage_speculative) · 5 of at most 36 runs done · "
            ),
            "{line}"
        );
    }

    #[test]
    fn log_lines_come_per_block_or_after_a_while_never_when_idle() {
        assert!(should_log(None, &snap(0, 36)), "the measurement's start");
        assert!(!should_log(None, &snap(0, 0)), "not measuring");
        let just = Some((4, Instant::now()));
        assert!(!should_log(just, &snap(4, 36)), "nothing new");
        assert!(!should_log(just, &snap(5, 36)), "too soon, same block");
        assert!(should_log(just, &snap(8, 36)), "a block later");
        let old = Some((4, Instant::now() - LOG_EVERY));
        assert!(should_log(old, &snap(5, 36)), "a while later");
        assert!(!should_log(old, &snap(4, 36)), "no run finished");
    }

    #[test]
    fn phases_reset_the_run_count_and_runs_never_exceed_max() {
        let p = Progress::default();
        assert_eq!(p.snapshot(), None);
        p.start_cycle(7);
        p.phase(phase::MEASURE, "A/B");
        p.runs(40, 36);
        let s = p.snapshot().unwrap();
        assert_eq!((s.cycle, s.runs_done, s.runs_max), (7, 40, 40));
        p.phase(phase::RECORD, "");
        assert_eq!(p.snapshot().unwrap().runs_max, 0);
        p.end_cycle();
        assert_eq!(p.snapshot(), None);
    }
}
