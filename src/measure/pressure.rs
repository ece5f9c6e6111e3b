//! What else the machine was doing during a run: Linux pressure stall
//! information and the load average.
//!
//! `/proc/pressure/{cpu,memory,io}` keep, per resource, the total time in
//! microseconds during which at least one runnable task was stalled on it
//! (`some total=`). The growth of that counter over a run, divided by the
//! run's wall time, is the share of the run during which something waited
//! for the CPU (or memory, or I/O): near 0 on a quiet machine, near 1 while
//! a parallel build keeps every core busy (Weiner 2018, "PSI - Pressure
//! Stall Information", Documentation/accounting/psi.rst). A run with a high
//! share was *interfered* with, whatever its own time says, so the
//! measurement can re-run its block instead of judging a burst.
//!
//! Kernels without PSI (before 4.20, or built without it, or with
//! `psi=0`) have no `/proc/pressure`: every share is then `None`, and the
//! caller says so once and goes on.
//!
//! The share saturates: once a steady load keeps a task waiting all the
//! time (a load of 4 on 2 cores is enough) every run reads 1.0, and a burst
//! on top of it reads 1.0 too. What the judge weighs instead is the run's
//! *contention* ([`Pressure::contention`]): the mean number of runnable
//! tasks during the run (sampled from `/proc/loadavg`, [`contention`]) per
//! core, at least 1: how many tasks each core was shared among, the
//! slowdown a CPU-bound thread suffers. It grows with every extra task, so
//! a burst on a loaded machine shows as a rise over the floor's runs
//! (`benches/traces/README.md` has the measurements that chose it).

use std::path::Path;
use std::time::Instant;

pub mod contention;

/// The stall counters at one instant.
#[derive(Debug, Clone, Copy)]
struct Counters {
    at: Instant,
    cpu_us: Option<u64>,
    memory_us: Option<u64>,
    io_us: Option<u64>,
}

/// A run being watched: the stall counters at its start, and the runnable
/// tasks sampled until [`Sample::until_now`].
#[derive(Debug)]
pub struct Sample {
    start: Counters,
    runnable: contention::Sampler,
}

/// Pressure over one run: each resource's `some` stall time as a share of
/// the run's wall time (0 to 1), the mean runnable tasks per core during it
/// (at least 1; see the module's doc), and the 1-minute load average at
/// its end.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Pressure {
    pub cpu: Option<f64>,
    pub memory: Option<f64>,
    pub io: Option<f64>,
    pub contention: Option<f64>,
    pub load1: Option<f64>,
}

impl Pressure {
    /// The largest of the three shares, if any was read.
    pub fn worst(&self) -> Option<(&'static str, f64)> {
        [("cpu", self.cpu), ("memory", self.memory), ("io", self.io)]
            .into_iter()
            .filter_map(|(name, v)| v.map(|v| (name, v)))
            .max_by(|a, b| a.1.total_cmp(&b.1))
    }

    /// True when PSI could be read at all.
    pub fn available(&self) -> bool {
        self.cpu.is_some() || self.memory.is_some() || self.io.is_some()
    }
}

/// Where the counters live; a seam so tests can point at fixture files.
const PROC_PRESSURE: &str = "/proc/pressure";
const PROC_LOADAVG: &str = "/proc/loadavg";

impl Sample {
    /// Reads the counters now and starts sampling the runnable tasks.
    pub fn now() -> Sample {
        Sample {
            start: Counters::read_from(Path::new(PROC_PRESSURE)),
            runnable: contention::Sampler::start(Path::new(PROC_LOADAVG)),
        }
    }

    /// The pressure between the run's start and now.
    pub fn until_now(self) -> Pressure {
        let end = Counters::read_from(Path::new(PROC_PRESSURE));
        let mut p = self.start.between(&end);
        p.contention = self.runnable.finish().map(contention::per_core);
        p.load1 = load1(Path::new(PROC_LOADAVG));
        p
    }
}

impl Counters {
    fn read_from(dir: &Path) -> Counters {
        let read = |name: &str| {
            std::fs::read_to_string(dir.join(name))
                .ok()
                .and_then(|s| some_total_us(&s))
        };
        Counters {
            at: Instant::now(),
            cpu_us: read("cpu"),
            memory_us: read("memory"),
            io_us: read("io"),
        }
    }

    fn between(&self, end: &Counters) -> Pressure {
        let wall_us = end.at.duration_since(self.at).as_secs_f64() * 1e6;
        let share = |a: Option<u64>, b: Option<u64>| -> Option<f64> {
            let (a, b) = (a?, b?);
            if wall_us <= 0.0 {
                return None;
            }
            // The kernel updates the counters lazily, so a share can read a
            // hair above 1 on a short run; it is a fraction of the run.
            Some((b.saturating_sub(a) as f64 / wall_us).clamp(0.0, 1.0))
        };
        Pressure {
            cpu: share(self.cpu_us, end.cpu_us),
            memory: share(self.memory_us, end.memory_us),
            io: share(self.io_us, end.io_us),
            contention: None,
            load1: None,
        }
    }
}

/// The `total=` of the `some` line of a pressure file.
fn some_total_us(text: &str) -> Option<u64> {
    let line = text.lines().find(|l| l.starts_with("some "))?;
    line.split_whitespace()
        .find_map(|f| f.strip_prefix("total="))?
        .parse()
        .ok()
}

/// The 1-minute load average.
fn load1(path: &Path) -> Option<f64> {
    std::fs::read_to_string(path)
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
        .filter(|v: &f64| v.is_finite() && *v >= 0.0)
}

/// Says once per process, at WARN, that this kernel reports no pressure, so
/// runs go unchecked for interference; silent after that and when it does.
pub fn warn_once_if_missing(p: &Pressure) {
    use std::sync::atomic::{AtomicBool, Ordering};
    static WARNED: AtomicBool = AtomicBool::new(false);
    if !p.available() && !WARNED.swap(true, Ordering::Relaxed) {
        tracing::warn!(
            "/proc/pressure is missing (a kernel without PSI): runs are not checked for interference; the judge goes on without it"
        );
    }
}

/// The pressure right now, for `orchestrator check`: the kernel's own
/// 10-second averages (`some avg10=`, a percentage) and the load average.
pub fn current() -> Pressure {
    let avg10 = |name: &str| -> Option<f64> {
        let text = std::fs::read_to_string(Path::new(PROC_PRESSURE).join(name)).ok()?;
        let line = text.lines().find(|l| l.starts_with("some "))?;
        let pct: f64 = line
            .split_whitespace()
            .find_map(|f| f.strip_prefix("avg10="))?
            .parse()
            .ok()?;
        Some((pct / 100.0).clamp(0.0, 1.0))
    };
    Pressure {
        cpu: avg10("cpu"),
        memory: avg10("memory"),
        io: avg10("io"),
        contention: contention::runnable_now(Path::new(PROC_LOADAVG)).map(contention::per_core),
        load1: load1(Path::new(PROC_LOADAVG)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn reads_the_some_total_and_ignores_full() {
        let cpu = "some avg10=6.36 avg60=5.19 avg300=1.87 total=7479224\n\
                   full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n";
        assert_eq!(some_total_us(cpu), Some(7_479_224));
        assert_eq!(some_total_us("full avg10=0 total=5\n"), None);
        assert_eq!(some_total_us("some avg10=x total=notanumber\n"), None);
    }

    #[test]
    fn shares_are_growth_over_wall_time_clamped_to_one() {
        let t0 = Instant::now();
        let start = Counters {
            at: t0,
            cpu_us: Some(1_000),
            memory_us: Some(0),
            io_us: None,
        };
        let end = Counters {
            at: t0 + Duration::from_secs(2),
            cpu_us: Some(1_001_000),
            memory_us: Some(9_000_000),
            io_us: Some(5),
        };
        let p = start.between(&end);
        assert!((p.cpu.unwrap() - 0.5).abs() < 1e-9, "{p:?}");
        assert_eq!(p.memory, Some(1.0));
        assert_eq!(p.io, None, "a counter missing at the start gives no share");
        assert_eq!(p.worst(), Some(("memory", 1.0)));
        assert!(p.available());
        assert!(!Pressure::default().available());
    }

    #[test]
    fn a_missing_pressure_directory_reads_as_unavailable() {
        let dir = tempfile::tempdir().unwrap();
        let s = Counters::read_from(&dir.path().join("nope"));
        let p = s.between(&Counters::read_from(&dir.path().join("nope")));
        assert!(!p.available());
        assert_eq!(p.worst(), None);
    }

    #[test]
    fn load_average_is_the_first_field() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("loadavg");
        std::fs::write(&f, "1.25 0.80 0.40 2/300 12345\n").unwrap();
        assert_eq!(load1(&f), Some(1.25));
        std::fs::write(&f, "garbage\n").unwrap();
        assert_eq!(load1(&f), None);
    }
}
