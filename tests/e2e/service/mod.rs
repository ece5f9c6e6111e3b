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
use std::path::Path;
use std::time::Duration;

use crate::demo::Demo;
use crate::faults::{Daemon, wait_for};

const TINY_INIT: &str = r#""--seed", "1", "--layers", "4", "--experts", "16", "--top-k", "2", "--d-model", "64", "--d-expert", "128", "--d-dense", "256", "--heads", "2", "--vocab", "512""#;

const TINY_START: &str = "[memory]\nbudget_gb = 0.01\ntrunk_gb = 0.001\ncache_gb = 0.004\n[far]\naddr = \"FAR\"\nwarm_set = 0\n";

/// The embedded default on a tiny checkpoint, with the bandit proposer
/// (no model call per cycle: these tests are about the service around the
/// loop, not its choices).
fn tiny_demo() -> Demo {
    Demo::new("bandit", TINY_START, TINY_INIT, 3 * 64 * 128 * 4, 8)
}

/// The cycle lines the daemon printed so far.
fn cycle_lines(daemon_stdout: &Path) -> Vec<String> {
    std::fs::read_to_string(daemon_stdout)
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with("cycle"))
        .map(str::to_string)
        .collect()
}

/// What the daemon printed, for a failing assertion.
fn output(daemon: &Daemon) -> String {
    format!("stdout:\n{}\nstderr:\n{}", daemon.stdout(), daemon.stderr())
}

/// One `GET /metrics` of `demo`'s daemon: the body of a 200, else `None`.
fn scrape(demo: &Demo) -> Option<String> {
    http_get(demo.metrics, "/metrics", Duration::from_secs(5))
}

/// Waits for the first cycle's line, then scrapes: the exposition of a
/// daemon that has run a cycle (verdict counts, floor, live speed), not
/// only its declarations.
fn scrape_after_first_cycle(demo: &Demo, daemon: &mut Daemon) -> String {
    let stdout = daemon.stdout_path.clone();
    wait_for(Duration::from_secs(900), "a finished cycle", daemon, || {
        (!cycle_lines(&stdout).is_empty()).then_some(())
    });
    wait_for(Duration::from_secs(30), "a scrape", daemon, || scrape(demo))
}

/// A plain HTTP/1.1 GET on loopback: the body of a 200 answer, else `None`
/// (refused, timed out, another status).
fn http_get(port: u16, path: &str, timeout: Duration) -> Option<String> {
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
