//! A cgroup v2 memory limit around each run, where the machine allows one:
//! exceeding it kills the run (a failed run) instead of swapping the machine.
//!
//! The orchestrator creates a child cgroup under its own (from
//! `/proc/self/cgroup` and the cgroup2 mount in `/proc/self/mountinfo`), sets
//! `memory.max` (and `memory.swap.max = 0`), moves the child into it before it
//! executes, and after the run reads `oom_kill` from `memory.events`. Where
//! that is impossible (no cgroup v2, the memory controller bound to v1, no
//! permission, the parent not delegating `memory`) the run goes ahead
//! without a limit, and the daemon says why once (at WARN) rather than in
//! every run's stderr tail, which is the engine's.

use std::fmt;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Whether a run ran under a memory limit.
#[derive(Debug, Clone, PartialEq)]
pub enum MemoryLimit {
    Applied { bytes: u64, cgroup: PathBuf },
    NotApplied { reason: String },
}

impl fmt::Display for MemoryLimit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MemoryLimit::Applied { bytes, cgroup } => write!(
                f,
                "memory limit {:.3} GB (cgroup {})",
                *bytes as f64 / 1e9,
                cgroup.display()
            ),
            MemoryLimit::NotApplied { reason } => write!(f, "no memory limit applied: {reason}"),
        }
    }
}

/// A cgroup made for one run; remove it with [`RunCgroup::remove`].
#[derive(Debug)]
pub struct RunCgroup {
    dir: PathBuf,
    bytes: u64,
}

static SERIAL: AtomicU64 = AtomicU64::new(0);

impl RunCgroup {
    /// Creates a cgroup limited to `limit_bytes`, or says why it cannot.
    pub fn create(limit_bytes: u64) -> Result<RunCgroup, String> {
        let parent = own_cgroup_dir()?;
        let controllers =
            std::fs::read_to_string(parent.join("cgroup.controllers")).map_err(|e| {
                format!(
                    "cannot read {}: {e}",
                    parent.join("cgroup.controllers").display()
                )
            })?;
        if !controllers.split_whitespace().any(|c| c == "memory") {
            return Err(format!(
                "the cgroup v2 memory controller is not available in {} (controllers: {}); \
                 on a hybrid cgroup v1/v2 machine it is bound to v1. Boot with \
                 systemd.unified_cgroup_hierarchy=1, or run the orchestrator under \
                 `systemd-run --scope -p Delegate=yes`",
                parent.display(),
                if controllers.trim().is_empty() {
                    "none"
                } else {
                    controllers.trim()
                }
            ));
        }
        let subtree = parent.join("cgroup.subtree_control");
        let enabled = std::fs::read_to_string(&subtree).unwrap_or_default();
        if !enabled.split_whitespace().any(|c| c == "memory") {
            std::fs::write(&subtree, "+memory").map_err(|e| {
                format!(
                    "cannot enable the memory controller for child cgroups of {} ({e}); \
                     a cgroup that holds processes cannot delegate controllers: run the \
                     orchestrator in a delegated cgroup, e.g. \
                     `systemd-run --scope -p Delegate=yes orchestrator run`",
                    parent.display()
                )
            })?;
        }
        let n = SERIAL.fetch_add(1, Ordering::Relaxed);
        let dir = parent.join(format!("orchestrator-run-{}-{n}", std::process::id()));
        std::fs::create_dir(&dir)
            .map_err(|e| format!("cannot create the cgroup {}: {e}", dir.display()))?;
        let cg = RunCgroup {
            dir,
            bytes: limit_bytes,
        };
        if let Err(e) = std::fs::write(cg.dir.join("memory.max"), limit_bytes.to_string()) {
            let reason = format!("cannot set memory.max in {}: {e}", cg.dir.display());
            let _ = std::fs::remove_dir(&cg.dir);
            return Err(reason);
        }
        // Without swap.max a limited run would swap rather than fail; where
        // swap accounting is off the file is absent and there is no swap to use.
        let _ = std::fs::write(cg.dir.join("memory.swap.max"), "0");
        Ok(cg)
    }

    /// The file a process writes its pid into to join.
    pub fn procs(&self) -> PathBuf {
        self.dir.join("cgroup.procs")
    }

    pub fn limit(&self) -> MemoryLimit {
        MemoryLimit::Applied {
            bytes: self.bytes,
            cgroup: self.dir.clone(),
        }
    }

    /// How many processes the kernel's OOM killer ended in this cgroup.
    pub fn oom_kills(&self) -> u64 {
        std::fs::read_to_string(self.dir.join("memory.events"))
            .map(|t| oom_kills(&t))
            .unwrap_or(0)
    }

    /// Kills anything left inside and removes the cgroup.
    pub async fn remove(self) {
        // cgroup.kill (Linux 5.14+) also reaches processes that left the
        // run's process group.
        let _ = std::fs::write(self.dir.join("cgroup.kill"), "1");
        for _ in 0..50 {
            if std::fs::remove_dir(&self.dir).is_ok() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        tracing::warn!(cgroup = %self.dir.display(), "could not remove a run's cgroup; remove it by hand with rmdir");
    }
}

/// This process's cgroup v2 directory: the cgroup2 mount joined with the
/// `0::` path, found once per process. Neither changes under a running
/// daemon, and re-reading `/proc/self/mountinfo` before every run was the
/// largest per-run cost in the soak benchmark's profile.
fn own_cgroup_dir() -> Result<PathBuf, String> {
    static DIR: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    DIR.get_or_init(|| {
        let read =
            |p: &str| std::fs::read_to_string(p).map_err(|e| format!("cannot read {p}: {e}"));
        let mount = cgroup2_mount(&read("/proc/self/mountinfo")?).ok_or_else(|| {
            "no cgroup v2 filesystem is mounted (this machine uses cgroup v1 only)".to_string()
        })?;
        let own = own_cgroup(&read("/proc/self/cgroup")?).ok_or_else(|| {
            "this process has no cgroup v2 membership in /proc/self/cgroup".to_string()
        })?;
        Ok(mount.join(own.trim_start_matches('/')))
    })
    .clone()
}

/// The mount point of the cgroup2 filesystem, from `/proc/self/mountinfo`.
fn cgroup2_mount(mountinfo: &str) -> Option<PathBuf> {
    mountinfo.lines().find_map(|l| {
        // ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS [OPTIONAL...] - FSTYPE SOURCE SUPER
        let (left, right) = l.split_once(" - ")?;
        if right.split_whitespace().next()? != "cgroup2" {
            return None;
        }
        left.split_whitespace().nth(4).map(PathBuf::from)
    })
}

/// This process's cgroup v2 path (the `0::` line of `/proc/self/cgroup`).
fn own_cgroup(proc_cgroup: &str) -> Option<String> {
    proc_cgroup
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .map(|p| p.trim().to_string())
}

/// `oom_kill` from a `memory.events` file.
fn oom_kills(events: &str) -> u64 {
    events
        .lines()
        .find_map(|l| l.strip_prefix("oom_kill "))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

/// The limit for a run: the budget plus half the headroom. The other half
/// always stays free for the rest of the machine; the first half is the
/// engine's allowance beyond its weights (code, buffers, activations).
pub fn limit_bytes(budget_gb: f64, headroom_gb: f64) -> u64 {
    ((budget_gb + headroom_gb / 2.0) * 1e9) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_cgroup2_mount_and_own_path() {
        let mi = "25 30 0:22 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n\
                  41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";
        assert_eq!(
            cgroup2_mount(mi),
            Some(PathBuf::from("/sys/fs/cgroup/unified"))
        );
        assert_eq!(cgroup2_mount("1 2 0:1 / / rw - ext4 /dev/sda rw\n"), None);
        assert_eq!(
            own_cgroup("4:memory:/x\n0::/user.slice/a.scope\n"),
            Some("/user.slice/a.scope".into())
        );
        assert_eq!(own_cgroup("4:memory:/x\n"), None);
    }

    #[test]
    fn reads_oom_kills_and_sizes_the_limit() {
        assert_eq!(oom_kills("low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n"), 1);
        assert_eq!(oom_kills(""), 0);
        assert_eq!(limit_bytes(1.0, 1.0), 1_500_000_000);
    }

    #[test]
    fn on_this_machine_it_either_applies_or_says_why() {
        match RunCgroup::create(limit_bytes(0.1, 0.2)) {
            Ok(cg) => {
                assert!(cg.procs().exists());
                assert_eq!(cg.oom_kills(), 0);
                tokio::runtime::Runtime::new()
                    .unwrap()
                    .block_on(cg.remove());
            }
            Err(reason) => assert!(!reason.is_empty()),
        }
    }
}
