//! Which daemon holds a ledger: an exclusive `flock(2)` on `<ledger>.daemon.lock`,
//! held for the daemon's whole life, with its pid written inside for people.
//!
//! The kernel drops the lock when the holder dies, however it dies (SIGKILL
//! included), so "is a daemon running on this ledger?" has a truthful answer
//! without trusting a pid that may have been reused. That answer decides
//! whether a `running` cycle is legal (`ledger --check`), and lets a starting
//! daemon close the cycles a dead one left open, and kill its children,
//! knowing that no live daemon owns them. The descriptor is close-on-exec,
//! so children never inherit the lock.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};

/// How long a starting daemon retries a lock that is briefly held by a
/// `ledger --check` probing it.
const ACQUIRE_PATIENCE: Duration = Duration::from_secs(2);

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error(
        "another orchestrator daemon (pid {pid}) is running on the ledger {}; stop it first, or point this one's `ledger.path` elsewhere",
        ledger.display()
    )]
    Held { ledger: PathBuf, pid: String },
    /// On a PostgreSQL ledger the file lock guards this host's children of
    /// the daemons started from one directory, not the ledger: its message
    /// names the directory, never `ledger.path` (refused beside `url`).
    #[error(
        "another orchestrator daemon (pid {pid}) is running from {} (it holds {}, this host's lock on the children of a daemon started there); stop it first, or start this one from a config in a directory of its own",
        dir.display(), lock.display()
    )]
    HeldHere {
        dir: PathBuf,
        lock: PathBuf,
        pid: String,
    },
    #[error(
        "cannot create the daemon lock {} next to the ledger: {source}; the ledger's directory must be writable",
        path.display()
    )]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl LockError {
    /// The refusal as a daemon on a PostgreSQL ledger says it: the lock
    /// file is beside `ledger.path`'s default place, which is not its ledger.
    pub fn on_postgres(self) -> LockError {
        match self {
            LockError::Held { ledger, pid } => LockError::HeldHere {
                dir: ledger
                    .parent()
                    .and_then(Path::parent)
                    .unwrap_or(Path::new("."))
                    .to_path_buf(),
                lock: lock_path(&ledger),
                pid,
            },
            other => other,
        }
    }
}

/// The lock file of a ledger.
pub fn lock_path(ledger: &Path) -> PathBuf {
    let mut name = ledger.file_name().unwrap_or_default().to_os_string();
    name.push(".daemon.lock");
    ledger.with_file_name(name)
}

/// A held daemon lock; dropping it (or dying) releases it.
#[derive(Debug)]
pub struct DaemonLock {
    _file: Flock<File>,
}

impl DaemonLock {
    /// Takes the ledger's daemon lock, or says which process holds it.
    pub fn acquire(ledger: &Path) -> Result<DaemonLock, LockError> {
        let path = lock_path(ledger);
        let io = |source| LockError::Io {
            path: path.clone(),
            source,
        };
        // On a read-only filesystem an existing lock file still locks (flock
        // needs no write access); the ledger then refuses the first write
        // with its own message naming the file.
        let (mut file, writable) = match OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
        {
            Ok(f) => (f, true),
            Err(e) if path.exists() => match File::open(&path) {
                Ok(f) => (f, false),
                Err(_) => return Err(io(e)),
            },
            Err(e) => return Err(io(e)),
        };
        let started = Instant::now();
        let mut file = loop {
            match try_flock(file, FlockArg::LockExclusiveNonblock)? {
                Ok(locked) => break locked,
                Err(mut back) => {
                    if started.elapsed() > ACQUIRE_PATIENCE {
                        return Err(LockError::Held {
                            ledger: ledger.to_path_buf(),
                            pid: read_holder(&mut back),
                        });
                    }
                    file = back;
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        if writable {
            file.set_len(0).map_err(io)?;
            file.rewind().map_err(io)?;
            writeln!(file, "{}", std::process::id()).map_err(io)?;
        }
        Ok(DaemonLock { _file: file })
    }
}

/// The pid of the daemon holding `ledger`, or `None` when none does. Takes
/// and drops a shared lock for an instant to find out; never creates files.
pub fn holder(ledger: &Path) -> Result<Option<String>, LockError> {
    let path = lock_path(ledger);
    let file = match File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => return Err(LockError::Io { path, source }),
    };
    match try_flock(file, FlockArg::LockSharedNonblock)? {
        // Dropping it unlocks at once.
        Ok(_shared) => Ok(None),
        Err(mut file) => Ok(Some(read_holder(&mut file))),
    }
}

fn read_holder(file: &mut File) -> String {
    let mut text = String::new();
    let _ = file.rewind().and_then(|_| file.read_to_string(&mut text));
    let pid = text.trim();
    if pid.is_empty() {
        "unknown".to_string()
    } else {
        pid.to_string()
    }
}

/// `flock(2)` without blocking: `Ok(Ok(lock))` when taken, `Ok(Err(file))`
/// when another process holds a conflicting lock.
fn try_flock(file: File, arg: FlockArg) -> Result<Result<Flock<File>, File>, LockError> {
    match Flock::lock(file, arg) {
        Ok(locked) => Ok(Ok(locked)),
        Err((file, Errno::EWOULDBLOCK)) => Ok(Err(file)),
        Err((_, errno)) => Err(LockError::Io {
            path: PathBuf::from("(daemon lock)"),
            source: errno.into(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_holder_at_a_time_and_released_on_drop() {
        let dir = tempfile::tempdir().unwrap();
        let ledger = dir.path().join("l.db");
        assert_eq!(holder(&ledger).unwrap(), None, "no lock file yet");
        let lock = DaemonLock::acquire(&ledger).unwrap();
        let here = LockError::Held {
            ledger: ledger.clone(),
            pid: "7".into(),
        }
        .on_postgres()
        .to_string();
        assert!(
            here.contains("running from") && !here.contains("ledger.path"),
            "{here}"
        );
        assert_eq!(
            holder(&ledger).unwrap(),
            Some(std::process::id().to_string())
        );
        // A second descriptor in the same process conflicts like another process.
        let err = DaemonLock::acquire(&ledger).unwrap_err();
        assert!(
            err.to_string().contains("another orchestrator daemon"),
            "{err}"
        );
        drop(lock);
        assert_eq!(holder(&ledger).unwrap(), None);
        let _again = DaemonLock::acquire(&ledger).unwrap();
    }
}
