//! Children a dead daemon left behind, found and killed by the next one.
//!
//! A daemon killed with SIGKILL cannot stop its children: `tinyk3 serve`,
//! the expert server, a bench run or a shadow server in mid-measurement
//! would keep running, holding ports and memory. So every child the daemon
//! starts carries an environment variable naming the ledger it works for
//! ([`TAG_VAR`] = a digest of the ledger's path). The environment is set at
//! `exec` and inherited by every descendant, so the tag covers grandchildren
//! too and there is no window between starting a child and recording it; a
//! recycled pid is a different process with a different environment, so
//! there is no pid-reuse ambiguity either.
//!
//! At start, holding the ledger's daemon lock (so no live daemon owns
//! them), the daemon scans `/proc` for processes carrying its ledger's tag
//! and SIGKILLs each one's process group and the process itself, then waits
//! until they are gone (their ports free) before starting its own stack.
//!
//! Alternatives considered: a registry of (pid, pgid, start time) written
//! after each spawn leaves a window between fork and the write in which a
//! SIGKILL loses a child; `prctl(PR_SET_PDEATHSIG)` in the child fires when
//! the *thread* that forked exits (tokio's blocking threads come and go) and
//! reaches only direct children, not what they fork.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::{Pid, getpgrp};
use sha2::{Digest as _, Sha256};

/// The environment variable every child of a daemon carries.
pub const TAG_VAR: &str = "ORCHESTRATOR_LEDGER_TAG";

/// How long to wait for killed orphans to disappear.
const GRACE: Duration = Duration::from_secs(10);

/// The tag of the ledger at `path`: 16 hex digits of the sha256 of its
/// absolute path, so two daemons on two ledgers never touch each other's
/// children.
pub fn tag(ledger: &Path) -> String {
    let abs = std::path::absolute(ledger).unwrap_or_else(|_| ledger.to_path_buf());
    let abs = abs.canonicalize().unwrap_or(abs);
    let sum = Sha256::digest(abs.as_os_str().as_encoded_bytes());
    sum.iter().take(8).map(|b| format!("{b:02x}")).collect()
}

/// An orphan found in `/proc`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Orphan {
    pub pid: i32,
    pub pgid: i32,
    /// Its command line, for the log.
    pub cmdline: String,
}

/// Every live process (other than this one) whose environment carries
/// `TAG_VAR=tag`.
pub fn find(tag: &str) -> Vec<Orphan> {
    let needle = format!("{TAG_VAR}={tag}");
    let me = std::process::id() as i32;
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for entry in dir.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        if pid == me {
            continue;
        }
        // Unreadable (another user's, or gone meanwhile): not ours.
        let Ok(environ) = std::fs::read(entry.path().join("environ")) else {
            continue;
        };
        if !environ
            .split(|&b| b == 0)
            .any(|var| var == needle.as_bytes())
        {
            continue;
        }
        let Some((state, pgid)) = stat(pid) else {
            continue;
        };
        if state == 'Z' || state == 'X' {
            continue;
        }
        let cmdline = std::fs::read(entry.path().join("cmdline"))
            .map(|b| {
                String::from_utf8_lossy(&b)
                    .replace('\0', " ")
                    .trim()
                    .to_string()
            })
            .unwrap_or_default();
        out.push(Orphan { pid, pgid, cmdline });
    }
    out
}

/// State letter and process group of `pid`, from `/proc/<pid>/stat`.
fn stat(pid: i32) -> Option<(char, i32)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // pid (comm) state ppid pgrp ...; comm may hold spaces and parentheses.
    let rest = text.rsplit_once(')')?.1;
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let _ppid = fields.next()?;
    let pgid = fields.next()?.parse().ok()?;
    Some((state, pgid))
}

fn alive(pid: i32) -> bool {
    stat(pid).is_some_and(|(s, _)| s != 'Z' && s != 'X')
}

/// Kills every orphan of the ledger tagged `tag` (its whole process group,
/// and itself in case it left the group) and waits until they are gone.
/// Returns what was killed; the ones still alive after the grace period
/// are returned as the error.
pub fn reap(tag: &str) -> Result<Vec<Orphan>, Vec<Orphan>> {
    let own_group = getpgrp().as_raw();
    let mut killed: Vec<Orphan> = Vec::new();
    let deadline = Instant::now() + GRACE;
    loop {
        let found = find(tag);
        let fresh: Vec<Orphan> = found
            .iter()
            .filter(|o| !killed.iter().any(|k| k.pid == o.pid))
            .cloned()
            .collect();
        let groups: BTreeSet<i32> = found
            .iter()
            .map(|o| o.pgid)
            .filter(|&g| g > 1 && g != own_group)
            .collect();
        // Each group was read from a process carrying our ledger's tag a
        // moment ago; one gone since (ESRCH) is what we want.
        for g in groups {
            let _ = killpg(Pid::from_raw(g), Signal::SIGKILL);
        }
        for o in &found {
            let _ = kill(Pid::from_raw(o.pid), Signal::SIGKILL);
        }
        killed.extend(fresh);
        if found.is_empty() || (killed.iter().all(|o| !alive(o.pid)) && find(tag).is_empty()) {
            return Ok(killed);
        }
        if Instant::now() >= deadline {
            let left = find(tag);
            return if left.is_empty() {
                Ok(killed)
            } else {
                Err(left)
            };
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::process::CommandExt;

    use super::*;

    #[test]
    fn tagged_processes_and_their_children_are_found_and_killed() {
        let dir = tempfile::tempdir().unwrap();
        let tag = tag(&dir.path().join("ledger.db"));
        // A tagged shell in its own group that forks a grandchild, as an
        // engine wrapper would.
        let mut child = std::process::Command::new("sh")
            .args(["-c", "sleep 300 & sleep 300; wait"])
            .env(TAG_VAR, &tag)
            .process_group(0)
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        let deadline = Instant::now() + Duration::from_secs(5);
        while find(&tag).len() < 3 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let found = find(&tag);
        assert_eq!(found.len(), 3, "the shell and both sleeps: {found:?}");
        assert!(found.iter().all(|o| o.pgid == pid), "{found:?}");
        // Another ledger's tag finds nothing of ours.
        assert!(find("0000000000000000").iter().all(|o| o.pid != pid));
        let killed = reap(&tag).unwrap();
        assert_eq!(killed.len(), 3, "{killed:?}");
        child.wait().unwrap();
        assert!(find(&tag).is_empty());
    }

    #[test]
    fn the_tag_depends_on_the_ledger_path_only() {
        let a = tag(Path::new("/tmp/x/ledger.db"));
        assert_eq!(a, tag(Path::new("/tmp/x/ledger.db")));
        assert_ne!(a, tag(Path::new("/tmp/y/ledger.db")));
        assert_eq!(a.len(), 16);
    }
}
