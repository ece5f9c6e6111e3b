//! Child processes (bench runs, shadow servers, the embedded stack): argv
//! only (never a shell), each in its own process group, bounded by a timeout
//! and by the shutdown signal, and on any ending the whole group killed and
//! the leader reaped, so no orphan engine outlives its run. Keeps the tail
//! of stderr as evidence.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::{OFlag, open};
use nix::sys::signal::{Signal, killpg};
use nix::sys::stat::Mode;
use nix::unistd::{Pid, write};
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::{Child, Command};
use tokio::task::JoinHandle;

use super::cancel::Cancel;

/// Bytes of stderr kept (the end of it).
pub const STDERR_TAIL_BYTES: usize = 8 * 1024;
/// Lines of stderr kept for the ledger.
pub const STDERR_TAIL_LINES: usize = 30;
/// Bytes of stdout kept (the end of it): the JSON line is the last one.
const STDOUT_KEEP_BYTES: usize = 1 << 20;
/// How long to wait for the pipes to close after the group is dead. A
/// process that left the group (`setsid`) could hold them open forever.
const PIPE_GRACE: Duration = Duration::from_secs(2);

/// An environment variable every child gets, set once by the daemon
/// ([`tag_children`]): it names the ledger the child works for, so a daemon
/// started after a crash can find and kill what the dead one started
/// ([`super::orphans`]). A process-wide setting because every spawn site
/// (embedded stack, bench, shadow server) must carry it and none may forget.
static CHILD_TAG: std::sync::RwLock<Option<(String, String)>> = std::sync::RwLock::new(None);

/// Tags every child spawned from now on with `name=value`.
pub fn tag_children(name: &str, value: &str) {
    *CHILD_TAG.write().expect("child tag lock") = Some((name.to_string(), value.to_string()));
}

/// One command to run.
#[derive(Debug, Clone)]
pub struct Spec {
    /// `argv[0]`, resolved against `cwd` when relative with a `/`.
    pub program: String,
    pub args: Vec<String>,
    /// Added to the inherited environment.
    pub env: BTreeMap<String, String>,
    pub cwd: PathBuf,
    pub timeout: Duration,
    /// Keep stdout (else it is discarded).
    pub capture_stdout: bool,
    /// A cgroup's `cgroup.procs` the child joins before it executes, so
    /// every byte it allocates is under the limit.
    pub cgroup_procs: Option<PathBuf>,
}

/// How a child ended on its own.
#[derive(Debug, Clone)]
pub struct Exit {
    /// The exit code, `None` when a signal ended it.
    pub code: Option<i32>,
    pub signal: Option<i32>,
    pub duration: Duration,
    /// The end of stdout (empty unless captured).
    pub stdout: Vec<u8>,
    pub stderr_tail: String,
}

/// Why a child did not end on its own.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    #[error(
        "cannot start `{program}` (in {}): {source}; check that the command exists and is executable (a relative path is relative to that directory)",
        cwd.display()
    )]
    Spawn {
        program: String,
        cwd: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("still running after {}s, so its whole process group was killed", after.as_secs_f64())]
    Timeout {
        after: Duration,
        duration: Duration,
        stderr_tail: String,
    },
    #[error("cancelled by shutdown; its whole process group was killed")]
    Cancelled {
        duration: Duration,
        stderr_tail: String,
    },
    #[error("lost track of the child process: {source}")]
    Wait {
        #[source]
        source: std::io::Error,
    },
}

impl ProcessError {
    /// The evidence gathered before it ended, for the ledger.
    pub fn evidence(&self) -> (Option<Duration>, &str) {
        match self {
            ProcessError::Timeout {
                duration,
                stderr_tail,
                ..
            }
            | ProcessError::Cancelled {
                duration,
                stderr_tail,
            } => (Some(*duration), stderr_tail),
            _ => (None, ""),
        }
    }
}

/// A running child that leads its own process group. Dropping it kills the
/// whole group (the runtime reaps the leader in the background).
#[derive(Debug)]
pub struct Group {
    child: Child,
    pgid: i32,
    started: Instant,
    stdout: Option<Reader>,
    stderr: Option<Reader>,
    reaped: bool,
}

#[derive(Debug)]
struct Reader {
    buf: Arc<Mutex<Vec<u8>>>,
    task: JoinHandle<()>,
}

impl Reader {
    fn start(pipe: impl AsyncRead + Unpin + Send + 'static, keep: usize) -> Reader {
        let buf = Arc::new(Mutex::new(Vec::new()));
        let shared = Arc::clone(&buf);
        let task = tokio::spawn(async move {
            let mut pipe = pipe;
            let mut chunk = vec![0u8; 8192];
            while let Ok(n) = pipe.read(&mut chunk).await {
                if n == 0 {
                    break;
                }
                let mut b = shared.lock().expect("reader lock");
                b.extend_from_slice(&chunk[..n]);
                // Keep only the end; trimming in halves keeps this linear.
                if b.len() > 2 * keep {
                    let cut = b.len() - keep;
                    b.drain(..cut);
                }
            }
        });
        Reader { buf, task }
    }

    async fn finish(self, keep: usize) -> Vec<u8> {
        let Reader { buf, mut task } = self;
        if tokio::time::timeout(PIPE_GRACE, &mut task).await.is_err() {
            task.abort();
        }
        let mut b = std::mem::take(&mut *buf.lock().expect("reader lock"));
        if b.len() > keep {
            b.drain(..b.len() - keep);
        }
        b
    }
}

impl Group {
    /// Starts `spec` in a new process group.
    pub fn spawn(spec: &Spec) -> Result<Group, ProcessError> {
        let spawn_err = |source| ProcessError::Spawn {
            program: spec.program.clone(),
            cwd: spec.cwd.clone(),
            source,
        };
        // A relative path like `target/release/tinyk3` means the one under
        // `cwd`; std leaves it unspecified which directory it resolves against.
        let program = if spec.program.contains('/') {
            spec.cwd.join(&spec.program)
        } else {
            PathBuf::from(&spec.program)
        };
        let mut cmd = Command::new(program);
        cmd.args(&spec.args)
            .envs(&spec.env)
            .current_dir(&spec.cwd)
            .stdin(Stdio::null())
            .stdout(if spec.capture_stdout {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stderr(Stdio::piped())
            // The leader's own pid becomes the group id: killing -pgid then
            // reaches everything it forks (an OpenMP pool, a `sh` wrapper's
            // children) unless one deliberately leaves the group.
            .process_group(0)
            .kill_on_drop(true);
        if let Some((name, value)) = CHILD_TAG.read().expect("child tag lock").as_ref() {
            cmd.env(name, value);
        }
        // After `envs`: a secret is withheld even where a template passes it on.
        for name in super::secrets::withheld() {
            cmd.env_remove(name);
        }
        if let Some(procs) = &spec.cgroup_procs {
            let path = CString::new(procs.as_os_str().as_bytes()).map_err(|_| {
                spawn_err(std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    "cgroup path contains a NUL byte",
                ))
            })?;
            // SAFETY: between fork and exec only async-signal-safe calls are
            // allowed; `join_cgroup` makes only those (open, write, close,
            // nothing allocated) and `path` was allocated before the fork.
            // Kept unsafe: `pre_exec` is, and std has no safe way to join a
            // cgroup at spawn (`process_group` covers only the group).
            unsafe {
                cmd.pre_exec(move || join_cgroup(&path));
            }
        }
        let mut child = cmd.spawn().map_err(spawn_err)?;
        let pid = child.id().expect("a just-spawned child has a pid");
        let pgid = i32::try_from(pid).expect("pids fit in i32");
        let stdout = child
            .stdout
            .take()
            .map(|p| Reader::start(p, STDOUT_KEEP_BYTES));
        let stderr = child
            .stderr
            .take()
            .map(|p| Reader::start(p, STDERR_TAIL_BYTES));
        Ok(Group {
            child,
            pgid,
            started: Instant::now(),
            stdout,
            stderr,
            reaped: false,
        })
    }

    /// The leader's pid (also the group id).
    pub fn pid(&self) -> i32 {
        self.pgid
    }

    /// The end of what the group has written to stderr so far (a long-lived
    /// child's evidence, read without stopping it).
    pub fn stderr_so_far(&self) -> String {
        match &self.stderr {
            Some(r) => {
                let b = r.buf.lock().expect("reader lock");
                tail(&b[b.len().saturating_sub(STDERR_TAIL_BYTES)..])
            }
            None => String::new(),
        }
    }

    /// Whether the leader has exited (reaping it if so).
    pub fn try_exited(&mut self) -> Option<ExitStatus> {
        match self.child.try_wait() {
            Ok(Some(status)) => {
                self.reaped = true;
                Some(status)
            }
            _ => None,
        }
    }

    /// SIGKILL to every process of the group. Harmless when it is empty.
    fn kill_group(&self) {
        // While any member lives the id cannot be reused, and the leader is
        // not reaped before its first call here. ESRCH (none left) is fine.
        let _ = killpg(Pid::from_raw(self.pgid), Signal::SIGKILL);
    }

    /// Waits for the leader, the timeout or cancellation; kills the whole
    /// group in every case, reaps the leader and collects the output.
    pub async fn wait(mut self, timeout: Duration, cancel: &Cancel) -> Result<Exit, ProcessError> {
        enum End {
            Exited(std::io::Result<ExitStatus>),
            Timeout,
            Cancelled,
        }
        let end = tokio::select! {
            biased;
            status = self.child.wait() => End::Exited(status),
            () = cancel.cancelled() => End::Cancelled,
            () = tokio::time::sleep(timeout) => End::Timeout,
        };
        // Even after a clean exit: whatever the leader left behind in its
        // group must not outlive the run.
        self.kill_group();
        // `Some(true)`: cancelled, `Some(false)`: timed out.
        let (status, stopped) = match end {
            End::Exited(s) => (s, None),
            End::Timeout => (self.child.wait().await, Some(false)),
            End::Cancelled => (self.child.wait().await, Some(true)),
        };
        self.reaped = true;
        let duration = self.started.elapsed();
        let stdout = match self.stdout.take() {
            Some(r) => r.finish(STDOUT_KEEP_BYTES).await,
            None => Vec::new(),
        };
        let stderr_tail = match self.stderr.take() {
            Some(r) => tail(&r.finish(STDERR_TAIL_BYTES).await),
            None => String::new(),
        };
        match stopped {
            Some(false) => Err(ProcessError::Timeout {
                after: timeout,
                duration,
                stderr_tail,
            }),
            Some(true) => Err(ProcessError::Cancelled {
                duration,
                stderr_tail,
            }),
            None => {
                let status = status.map_err(|source| ProcessError::Wait { source })?;
                Ok(Exit {
                    code: status.code(),
                    signal: status.signal(),
                    duration,
                    stdout,
                    stderr_tail,
                })
            }
        }
    }

    /// Kills the whole group now and reaps the leader; returns the stderr tail.
    pub async fn stop(self) -> String {
        match self.wait(Duration::ZERO, &Cancel::never()).await {
            Ok(exit) => exit.stderr_tail,
            Err(e) => e.evidence().1.to_string(),
        }
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        if !self.reaped {
            self.kill_group();
        }
    }
}

/// Runs `spec` to its end (see [`Group::wait`]).
pub async fn run(spec: &Spec, cancel: &Cancel) -> Result<Exit, ProcessError> {
    if cancel.is_cancelled() {
        return Err(ProcessError::Cancelled {
            duration: Duration::ZERO,
            stderr_tail: String::new(),
        });
    }
    Group::spawn(spec)?.wait(spec.timeout, cancel).await
}

/// In the forked child: move this process into the cgroup (`0` = self).
/// Only async-signal-safe calls: `open` of a `CStr` allocates nothing,
/// `write` and the `close` of the dropped descriptor are raw syscalls, and
/// an error becomes an `io::Error` by its code, without allocating.
fn join_cgroup(procs: &CString) -> std::io::Result<()> {
    let fd = open(
        procs.as_c_str(),
        OFlag::O_WRONLY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?;
    let n = write(&fd, b"0\n")?;
    if n != 2 {
        return Err(std::io::Error::from(Errno::EIO));
    }
    Ok(())
}

/// The last [`STDERR_TAIL_LINES`] lines of `bytes`, as text.
pub fn tail(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let text = text.trim_end();
    let lines: Vec<&str> = text.lines().collect();
    let start = lines.len().saturating_sub(STDERR_TAIL_LINES);
    lines[start..].join("\n")
}

/// The last non-empty line of a stderr tail: the engine's own error message.
pub fn last_line(stderr_tail: &str) -> &str {
    stderr_tail
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("(no stderr)")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(program: &str, args: &[&str]) -> Spec {
        Spec {
            program: program.into(),
            args: args.iter().map(|s| s.to_string()).collect(),
            env: BTreeMap::from([("MEASURE_TEST".into(), "yes".into())]),
            cwd: std::env::temp_dir(),
            timeout: Duration::from_secs(10),
            capture_stdout: true,
            cgroup_procs: None,
        }
    }

    #[tokio::test]
    async fn captures_exit_code_stdout_env_and_stderr_tail() {
        let exit = run(&spec("env", &[]), &Cancel::never()).await.unwrap();
        assert_eq!(exit.code, Some(0));
        assert!(String::from_utf8_lossy(&exit.stdout).contains("MEASURE_TEST=yes"));
        let exit = run(&spec("ls", &["/definitely/not/here"]), &Cancel::never())
            .await
            .unwrap();
        assert_eq!(exit.code, Some(2));
        assert!(
            exit.stderr_tail.contains("/definitely/not/here"),
            "{}",
            exit.stderr_tail
        );
    }

    #[tokio::test]
    async fn a_missing_program_is_a_spawn_error_naming_it() {
        let err = run(&spec("./no-such-engine", &[]), &Cancel::never())
            .await
            .unwrap_err();
        assert!(matches!(err, ProcessError::Spawn { .. }));
        assert!(err.to_string().contains("no-such-engine"), "{err}");
    }

    #[tokio::test]
    async fn cancellation_kills_promptly() {
        let (handle, cancel) = Cancel::new();
        let t0 = Instant::now();
        let task = tokio::spawn(async move { run(&spec("sleep", &["30"]), &cancel).await });
        tokio::time::sleep(Duration::from_millis(100)).await;
        handle.cancel();
        let err = task.await.unwrap().unwrap_err();
        assert!(matches!(err, ProcessError::Cancelled { .. }), "{err}");
        assert!(t0.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn tail_keeps_the_last_lines() {
        let text: String = (0..100).map(|i| format!("line {i}\n")).collect();
        let t = tail(text.as_bytes());
        assert_eq!(t.lines().count(), STDERR_TAIL_LINES);
        assert!(t.ends_with("line 99"));
        assert_eq!(last_line("a\nboom\n\n"), "boom");
    }
}
