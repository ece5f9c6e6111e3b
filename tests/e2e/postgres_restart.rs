//! The PostgreSQL ledger restarted under a running daemon: the real daemon
//! on the embedded tinyk3, its ledger on a cluster of its own (started and
//! stopped here through `scripts/postgres.sh`, so the cluster other tests
//! share is never restarted). The server goes down mid-cycle
//! (`pg_ctl stop -m fast`) for longer than the pool waits for a connection;
//! the daemon must say so, back off and stay up, then take its stack's
//! lock again, close the interrupted cycle as `aborted` and run on. After a
//! SIGINT: exit 0 as for any SIGINT, no cycle left `running`, the aborted
//! one saying why, cycles closed after the restart, and the daemon's own
//! count of cycles equal to the ledger's.
//!
//! Departures from the shipped config: `noise_floor_max_age_s = 0.001`, so
//! the loop never converges and waits before the outage, and runs of 128
//! tokens, so a cycle outlasts the start of the outage (see `demo_on`).

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::demo::Demo;

const TINY_INIT: &str = r#""--seed", "1", "--layers", "4", "--experts", "16", "--top-k", "2", "--d-model", "64", "--d-expert", "128", "--d-dense", "256", "--heads", "2", "--vocab", "512""#;
const START: &str = "[memory]\nbudget_gb = 0.05\ntrunk_gb = 0.03\ncache_gb = 0.002\n[far]\naddr = \"FAR\"\nwarm_set = 0\n";

/// The variable the daemon's config names for the password.
const PASSWORD_VAR: &str = "ORCH_RESTART_PG_PASSWORD";

/// How long the server stays down: longer than the pool waits for a
/// connection (the busy timeout plus 1 s), so a write fails instead of
/// waiting the outage out.
const OUTAGE: Duration = Duration::from_secs(15);

/// A throw-away cluster of this test only; stopped and removed on drop.
struct Cluster {
    url: String,
    password: String,
    dir: String,
}

fn script(args: &[&str]) -> std::process::Output {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/postgres.sh");
    let out = Command::new("bash")
        .arg(script)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "scripts/postgres.sh {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

impl Cluster {
    fn start() -> Cluster {
        let out = script(&["start"]);
        let env = String::from_utf8(out.stdout).unwrap();
        let var = |name: &str| {
            env.lines()
                .find_map(|l| l.strip_prefix(&format!("export {name}=")))
                .unwrap_or_else(|| panic!("scripts/postgres.sh printed no {name}"))
                .to_string()
        };
        Cluster {
            url: var("ORCH_TEST_PG_URL"),
            password: var("ORCH_TEST_PG_PASSWORD"),
            dir: var("ORCH_TEST_PG_DIR"),
        }
    }

    /// `pg_ctl stop -m fast`: every session is ended, as in a restart.
    fn pause(&self) {
        script(&["pause", &self.dir]);
    }

    fn resume(&self) {
        script(&["resume", &self.dir]);
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/postgres.sh");
        let _ = Command::new("bash")
            .arg(script)
            .args(["stop", &self.dir])
            .output();
    }
}

/// The embedded demo with its ledger on `cluster`, its commands given the
/// password.
fn demo_on(cluster: &Cluster) -> Demo {
    let mut demo = Demo::new("bandit", START, TINY_INIT, 3 * 64 * 128 * 4, 8);
    let config = demo.path("config.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    let sqlite = "path = \"ledger/orchestrator.db\"\n";
    assert!(
        text.contains(sqlite),
        "config.toml no longer has {sqlite:?}"
    );
    let text = text.replace(
        sqlite,
        &format!(
            "url = {:?}\npassword_env = \"{PASSWORD_VAR}\"\n",
            cluster.url
        ),
    );
    // Departs from the shipped config: a floor stale by the next cycle keeps
    // `remeasure` offered, so the loop never converges and waits (the tiny
    // checkpoint's lines are done in seconds) before the outage hits a
    // measuring cycle.
    // And runs of 128 tokens, not 8: a cycle of 8-token runs closed in under
    // a second, before the outage the test starts on seeing it measure.
    let text = [
        "noise_floor_max_age_s = 86400",
        "\"--gen\", \"8\"",
        "max_tokens = 8",
    ]
    .into_iter()
    .zip([
        "noise_floor_max_age_s = 0.001",
        "\"--gen\", \"128\"",
        "max_tokens = 128",
    ])
    .fold(text, |t, (from, to)| {
        assert!(t.contains(from), "config.toml no longer has {from:?}");
        t.replace(from, to)
    });
    std::fs::write(&config, text).unwrap();
    demo.env
        .push((PASSWORD_VAR.to_string(), cluster.password.clone()));
    demo
}

/// Every cycle of the ledger, oldest first.
fn cycles(demo: &Demo) -> Vec<Value> {
    let mut list = demo.ledger();
    list.sort_by_key(|c| c["cycle"]["id"].as_i64().unwrap());
    list
}

fn status(c: &Value) -> &str {
    c["cycle"]["status"].as_str().unwrap()
}

/// `ledger --check`: its exit code and report.
fn check(demo: &Demo) -> (Option<i32>, Value) {
    let out = demo
        .cmd()
        .args(["ledger", "--check", "--json"])
        .output()
        .unwrap();
    let report = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "ledger --check printed no JSON ({e}): {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code(), report)
}

/// The daemon's log so far.
fn log(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// Waits until `ready` holds, failing with the log when the daemon exits
/// or `limit` passes.
fn wait_until(
    daemon: &mut Child,
    log_path: &Path,
    what: &str,
    limit: Duration,
    mut ready: impl FnMut() -> bool,
) {
    let deadline = Instant::now() + limit;
    while !ready() {
        if let Some(code) = daemon.try_wait().unwrap() {
            panic!(
                "the daemon exited ({code}) while waiting until {what}:\n{}",
                log(log_path)
            );
        }
        assert!(
            Instant::now() < deadline,
            "not within {limit:?}: {what}\n{}",
            log(log_path)
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

#[test]
fn a_database_restart_mid_cycle_is_ridden_out_without_losing_a_cycle() {
    let _heavy = crate::common::heavy();
    let cluster = Cluster::start();
    let demo = demo_on(&cluster);
    let pw = cluster.password.clone();
    let log_path = demo.path("daemon.log");
    let mut daemon = Command::new(assert_cmd::cargo::cargo_bin("orchestrator"))
        .arg("--config")
        .arg(demo.path("config.toml"))
        .env(PASSWORD_VAR, &pw)
        .arg("run")
        .stdin(Stdio::null())
        // Files, not pipes: nobody reads a pipe while the test waits.
        .stdout(std::fs::File::create(demo.path("daemon.out")).unwrap())
        .stderr(std::fs::File::create(&log_path).unwrap())
        .spawn()
        .unwrap();

    // One cycle closed and the next one measuring (its progress line says a
    // block of runs is done, so more are to come): the outage hits a cycle.
    let mut before = Vec::new();
    wait_until(
        &mut daemon,
        &log_path,
        "a cycle closed and the next is measuring",
        Duration::from_secs(600),
        || {
            before = cycles(&demo);
            let Some(last) = before.last().filter(|c| status(c) == "running") else {
                return false;
            };
            let measuring = format!("progress: cycle {} · measure", last["cycle"]["id"]);
            before.iter().any(|c| status(c) != "running") && log(&log_path).contains(&measuring)
        },
    );
    let interrupted = before.last().unwrap()["cycle"]["id"].as_i64().unwrap();

    cluster.pause();
    let down = Instant::now();
    // The loss is logged while the server is down, and the daemon stays up.
    wait_until(
        &mut daemon,
        &log_path,
        "the daemon logged the lost database",
        Duration::from_secs(60),
        || log(&log_path).contains("lost the PostgreSQL ledger"),
    );
    let left = OUTAGE.saturating_sub(down.elapsed());
    std::thread::sleep(left.max(Duration::from_secs(3)));
    assert!(
        daemon.try_wait().unwrap().is_none(),
        "the daemon exited on the outage:\n{}",
        log(&log_path)
    );
    cluster.resume();

    // Two more cycles closed after the restart.
    wait_until(
        &mut daemon,
        &log_path,
        "two cycles after the restart closed",
        Duration::from_secs(900),
        || {
            cycles(&demo)
                .iter()
                .filter(|c| c["cycle"]["id"].as_i64().unwrap() > interrupted)
                .filter(|c| status(c) != "running")
                .count()
                >= 2
        },
    );
    // SAFETY: kill(2) on our own child's pid.
    assert_eq!(unsafe { libc::kill(daemon.id() as i32, libc::SIGINT) }, 0);
    let code = daemon.wait().unwrap().code();
    let logged = log(&log_path);
    assert_eq!(code, Some(0), "exit as for any SIGINT:\n{logged}");
    // What the daemon said about the outage, for whoever reads the output.
    for line in logged
        .lines()
        .filter(|l| l.contains("PostgreSQL") || l.contains("stopped after"))
    {
        eprintln!("daemon: {line}");
    }

    let after = cycles(&demo);
    for c in &after {
        let s = status(c);
        assert!(["completed", "failed", "aborted"].contains(&s), "{c}");
        assert!(c["cycle"]["ended_at"].is_string(), "closed: {c}");
        if s == "aborted" {
            assert!(
                c["cycle"]["error"].as_str().is_some_and(|e| !e.is_empty()),
                "an aborted cycle says why: {c}"
            );
        }
    }
    // The cycle the outage cut short is closed as aborted, naming it.
    let cut = after
        .iter()
        .find(|c| c["cycle"]["id"].as_i64() == Some(interrupted))
        .expect("the interrupted cycle's row is kept");
    assert_eq!(status(cut), "aborted", "{cut}");
    assert!(
        cut["cycle"]["error"]
            .as_str()
            .unwrap()
            .contains("PostgreSQL ledger"),
        "{cut}"
    );
    // Its stdout line, as every closed cycle has one, reads aborted and why.
    let stdout = log(&demo.path("daemon.out"));
    let line = stdout
        .lines()
        .find(|l| {
            l.strip_prefix("cycle")
                .and_then(|r| r.split_whitespace().next())
                .is_some_and(|id| id == interrupted.to_string())
        })
        .unwrap_or_else(|| panic!("no stdout line for cycle {interrupted}:\n{stdout}"));
    assert!(
        line.contains("  aborted ") && line.contains("PostgreSQL ledger"),
        "{line}"
    );
    // Nothing committed before the outage was lost.
    for b in before.iter().filter(|c| status(c) != "running") {
        let id = &b["cycle"]["id"];
        let a = after.iter().find(|c| &c["cycle"]["id"] == id).unwrap();
        assert_eq!(a["cycle"], b["cycle"], "a closed cycle changed");
        assert_eq!(a["verdicts"], b["verdicts"], "a verdict changed");
    }
    // The daemon counted every cycle it opened, the aborted one included.
    let aborted = after.iter().filter(|c| status(c) == "aborted").count();
    let failed = after.iter().filter(|c| status(c) == "failed").count();
    assert!(
        logged.contains(&format!(
            "stopped after {} cycle(s) ({failed} failed, {aborted} aborted)",
            after.len()
        )),
        "{} cycles in the ledger, {aborted} aborted:\n{logged}",
        after.len()
    );
    // The outage was loud, named the database and never the password.
    let server = cluster.url.rsplit_once('@').unwrap().1;
    assert!(
        logged.lines().any(|l| l.contains("ERROR")
            && l.contains("lost the PostgreSQL ledger")
            && l.contains(server)),
        "{logged}"
    );
    assert!(logged.contains("backing off"), "{logged}");
    assert!(logged.contains("is back"), "{logged}");
    assert!(!logged.contains(&pw), "the daemon logged the password");
    let (code, report) = check(&demo);
    assert_eq!(code, Some(0), "{report:#}");
    demo.assert_children_gone();
}
