//! The daemon as a service runs it: `orchestrator run` on the embedded
//! default, left running, its config named by `ORCHESTRATOR_CONFIG` (as the
//! systemd unit names it), its output in files. The modules check the
//! notify protocol, the Grafana dashboard against a live scrape, and the
//! metrics endpoint when the daemon runs out of file descriptors.

mod dashboard;
mod fd_exhaustion;
mod notify;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::demo::Demo;

const TINY_INIT: &str = r#""--seed", "1", "--layers", "4", "--experts", "16", "--top-k", "2", "--d-model", "64", "--d-expert", "128", "--d-dense", "256", "--heads", "2", "--vocab", "512""#;

const TINY_START: &str = "[memory]\nbudget_gb = 0.01\ntrunk_gb = 0.001\ncache_gb = 0.004\n[far]\naddr = \"FAR\"\nwarm_set = 0\n";

/// The embedded default on a tiny checkpoint, with the bandit proposer
/// (no model call per cycle: these tests are about the service around the
/// loop, not its choices).
fn tiny_demo() -> Demo {
    Demo::new("bandit", TINY_START, TINY_INIT, 3 * 64 * 128 * 4, 8)
}

/// A running `orchestrator run`, killed when dropped.
pub struct Service {
    pub child: Child,
    stdout: PathBuf,
    stderr: PathBuf,
    pub metrics: u16,
}

impl Service {
    /// Starts `orchestrator run` on `demo`'s config through
    /// `ORCHESTRATOR_CONFIG`, with `env` added to its environment.
    pub fn start(demo: &Demo, env: &[(&str, &str)]) -> Service {
        let stdout = demo.path("daemon.stdout");
        let stderr = demo.path("daemon.stderr");
        let child = Command::new(assert_cmd::cargo::cargo_bin("orchestrator"))
            .arg("run")
            .env("ORCHESTRATOR_CONFIG", demo.path("config.toml"))
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&stdout).unwrap())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .spawn()
            .unwrap();
        Service {
            child,
            stdout,
            stderr,
            metrics: demo.metrics,
        }
    }

    pub fn pid(&self) -> i32 {
        i32::try_from(self.child.id()).unwrap()
    }

    /// The cycle lines printed so far.
    pub fn cycle_lines(&self) -> Vec<String> {
        std::fs::read_to_string(&self.stdout)
            .unwrap_or_default()
            .lines()
            .filter(|l| l.starts_with("cycle"))
            .map(str::to_string)
            .collect()
    }

    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// What the daemon printed, for a failing assertion.
    pub fn output(&self) -> String {
        format!(
            "stdout:\n{}\nstderr:\n{}",
            std::fs::read_to_string(&self.stdout).unwrap_or_default(),
            self.stderr()
        )
    }

    /// Waits until `done` holds, failing with the daemon's output after
    /// `limit` or when the daemon exits.
    pub fn wait_until(&mut self, what: &str, limit: Duration, mut done: impl FnMut(&Self) -> bool) {
        let deadline = Instant::now() + limit;
        loop {
            if done(self) {
                return;
            }
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!(
                    "the daemon exited ({status}) before {what}:\n{}",
                    self.output()
                );
            }
            assert!(
                Instant::now() < deadline,
                "no {what} within {limit:?}:\n{}",
                self.output()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// One `GET /metrics`: the body of a 200 answer, else `None`.
    pub fn scrape(&self) -> Option<String> {
        http_get(self.metrics, "/metrics", Duration::from_secs(5))
    }

    /// SIGTERM, then the exit status (within `limit`).
    pub fn terminate(&mut self, limit: Duration) -> ExitStatus {
        // SAFETY: kill(2) on our own child's pid.
        assert_eq!(unsafe { libc::kill(self.pid(), libc::SIGTERM) }, 0);
        self.wait_exit(limit)
    }

    /// The exit status, waited for at most `limit`.
    pub fn wait_exit(&mut self, limit: Duration) -> ExitStatus {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "the daemon did not stop within {limit:?}:\n{}",
                self.output()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            // SAFETY: kill(2) on our own child's pid; SIGTERM lets it stop
            // its stack's children too.
            unsafe { libc::kill(self.pid(), libc::SIGTERM) };
            let deadline = Instant::now() + Duration::from_secs(30);
            while self.child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A plain HTTP/1.1 GET on loopback: the body of a 200 answer, else `None`
/// (refused, timed out, another status).
pub fn http_get(port: u16, path: &str, timeout: Duration) -> Option<String> {
    let mut s = TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), timeout).ok()?;
    s.set_read_timeout(Some(timeout)).ok()?;
    s.set_write_timeout(Some(timeout)).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    )
    .ok()?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).ok()?;
    let text = String::from_utf8(raw).ok()?;
    let (head, body) = text.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200").then(|| body.to_string())
}

/// The repository's file `rel`.
pub fn repo_file(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}
