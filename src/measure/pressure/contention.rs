//! How many tasks competed for the CPU during a run: the mean of the
//! kernel's runnable count, sampled while the run lasts.
//!
//! `/proc/loadavg`'s fourth field is `running/total`: the tasks runnable
//! right now (on a CPU or waiting for one, `nr_running`) over all tasks.
//! Its mean over a run, divided by the cores, is how many tasks each core
//! was shared among. Unlike the PSI share it does not saturate, so a
//! burst of competing work shows even on a machine that is already busy.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

/// How often the runnable count is read during a run. A run of 0.1 s still
/// gets ten readings; each is one small read of a proc file.
pub const EVERY: Duration = Duration::from_millis(10);

/// Samples the runnable count on its own thread until [`Sampler::finish`].
#[derive(Debug)]
pub struct Sampler {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Option<f64>>>,
}

impl Sampler {
    /// Starts sampling `loadavg` (a `/proc/loadavg`); the first reading is
    /// taken at once, so even an instant run has one.
    pub fn start(loadavg: &Path) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let path: PathBuf = loadavg.to_path_buf();
        let flag = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("runnable-sampler".into())
            .spawn(move || {
                let (mut sum, mut n) = (0.0, 0u32);
                loop {
                    if let Some(r) = runnable_now(&path) {
                        sum += r;
                        n += 1;
                    }
                    if flag.load(Ordering::Relaxed) {
                        break;
                    }
                    std::thread::park_timeout(EVERY);
                }
                (n > 0).then(|| sum / f64::from(n))
            })
            // A machine that cannot start a thread gets no reading, as a
            // kernel without the file would; the run itself goes on.
            .ok();
        Sampler { stop, thread }
    }

    /// Stops sampling: the mean runnable count over the run, `None` when
    /// the file could not be read.
    pub fn finish(mut self) -> Option<f64> {
        self.stop.store(true, Ordering::Relaxed);
        let thread = self.thread.take()?;
        thread.thread().unpark();
        thread.join().ok().flatten()
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = &self.thread {
            t.thread().unpark();
        }
    }
}

/// The runnable tasks now, other than the reader itself (which is running
/// while it reads, so the kernel always counts it).
pub fn runnable_now(loadavg: &Path) -> Option<f64> {
    let text = std::fs::read_to_string(loadavg).ok()?;
    let running: u32 = text
        .split_whitespace()
        .nth(3)?
        .split('/')
        .next()?
        .parse()
        .ok()?;
    Some(f64::from(running.saturating_sub(1)))
}

/// Runnable tasks as tasks per core, at least 1: below one task a core
/// nothing waits, so an idle machine and one busy with fewer tasks than
/// cores read the same.
pub fn per_core(runnable: f64) -> f64 {
    (runnable / cores()).max(1.0)
}

/// The cores this process may run on.
fn cores() -> f64 {
    std::thread::available_parallelism().map_or(1.0, |n| n.get() as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_running_count_without_the_reader() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("loadavg");
        std::fs::write(&f, "14.10 12.00 9.50 17/612 40321\n").unwrap();
        assert_eq!(runnable_now(&f), Some(16.0));
        std::fs::write(&f, "0.00 0.00 0.00 1/80 1\n").unwrap();
        assert_eq!(runnable_now(&f), Some(0.0));
        std::fs::write(&f, "garbage\n").unwrap();
        assert_eq!(runnable_now(&f), None);
        assert_eq!(runnable_now(&dir.path().join("nope")), None);
    }

    #[test]
    fn the_sampler_averages_what_it_read_and_stops() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("loadavg");
        std::fs::write(&f, "1 1 1 9/100 1\n").unwrap();
        let s = Sampler::start(&f);
        std::thread::sleep(5 * EVERY);
        assert_eq!(s.finish(), Some(8.0));
        assert_eq!(Sampler::start(&dir.path().join("nope")).finish(), None);
    }

    #[test]
    fn per_core_is_at_least_one_and_grows_with_every_task() {
        let c = cores();
        assert_eq!(per_core(0.0), 1.0);
        assert_eq!(per_core(c), 1.0);
        assert!((per_core(8.0 * c) - 8.0).abs() < 1e-12);
        assert!(per_core(9.0 * c) > per_core(8.0 * c));
    }

    #[test]
    fn busy_loops_raise_the_real_machine_s_contention() {
        // The real /proc/loadavg: busy loops, four per core, are runnable
        // the whole time, so the mean count rises by about that many.
        let path = Path::new("/proc/loadavg");
        if runnable_now(path).is_none() {
            return crate::ledger::tests::skip::skip(
                "/proc/loadavg has no runnable count (not Linux, or /proc not mounted)",
                "run the tests on Linux with /proc mounted",
            );
        }
        let before = Sampler::start(path);
        std::thread::sleep(Duration::from_millis(200));
        let before = before.finish().unwrap();
        let n = 4 * cores() as usize;
        let mut hogs: Vec<std::process::Child> = (0..n)
            .map(|_| {
                std::process::Command::new("sh")
                    .args(["-c", "while :; do :; done"])
                    .spawn()
                    .unwrap()
            })
            .collect();
        std::thread::sleep(Duration::from_millis(100));
        let during = Sampler::start(path);
        std::thread::sleep(Duration::from_millis(300));
        let during = during.finish().unwrap();
        for h in &mut hogs {
            let _ = h.kill();
            let _ = h.wait();
        }
        assert!(
            during >= before + n as f64 / 2.0,
            "{n} busy loops: runnable {before:.1} before, {during:.1} during"
        );
    }
}
