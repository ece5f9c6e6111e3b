//! `orchestrator run` end to end on the embedded default: the real daemon
//! preparing and starting the real tinyk3 stack (serve + expert server) as
//! its children, the served model choosing, the bench measuring, the ledger
//! recording, and a person approving.

mod common;

use std::path::{Path, PathBuf};
use std::time::Duration;

use assert_cmd::Command;
use serde_json::Value;

/// A free loopback port (bound, then released).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

struct Demo {
    dir: tempfile::TempDir,
    serve: u16,
    far: u16,
}

impl Demo {
    /// The repository's default config, pointed at temp paths, free ports,
    /// a small checkpoint and a quick measurement protocol.
    fn new(proposer: &str, start_profile: &str, init_args: &str, expert_bytes: u64) -> Demo {
        let dir = tempfile::tempdir().unwrap();
        let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
        let tinyk3 = common::tinyk3_bin();
        let (serve, far, metrics) = (free_port(), free_port(), free_port());
        let text = std::fs::read_to_string(repo.join("config.toml"))
            .unwrap()
            .replace("\"target/release/tinyk3\"", &format!("{:?}", tinyk3))
            .replace(
                "dir = \"experiments\"",
                &format!("dir = {:?}", repo.join("experiments")),
            )
            .replace("127.0.0.1:8181", &format!("127.0.0.1:{serve}"))
            .replace("127.0.0.1:7070", &format!("127.0.0.1:{far}"))
            .replace("127.0.0.1:9464", &format!("127.0.0.1:{metrics}"))
            .replace(
                "init_args = [\"--seed\", \"1\"]",
                &format!("init_args = [{init_args}]"),
            )
            .replace(
                "starting_profile = \"tinyk3/profiles/slow-start.toml\"",
                "starting_profile = \"start.toml\"",
            )
            .replace(
                "expert_bytes = 1572864",
                &format!("expert_bytes = {expert_bytes}"),
            )
            .replace("\"--gen\", \"24\"", "\"--gen\", \"8\"")
            .replace("interval_s = 30", "interval_s = 0.01")
            .replace("proposer = \"model\"", &format!("proposer = {proposer:?}"))
            .replace("min_pairs = 6", "min_pairs = 4")
            .replace("max_pairs = 50", "max_pairs = 8")
            .replace("run_timeout_s = 120", "run_timeout_s = 60")
            .replace("memory_headroom_gb = 1.0", "memory_headroom_gb = 0.1");
        std::fs::write(dir.path().join("config.toml"), text).unwrap();
        std::fs::write(
            dir.path().join("start.toml"),
            start_profile.replace("FAR", &format!("127.0.0.1:{far}")),
        )
        .unwrap();
        Demo { dir, serve, far }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    fn cmd(&self) -> Command {
        let mut c = Command::cargo_bin("orchestrator").unwrap();
        c.arg("--config").arg(self.path("config.toml"));
        c.timeout(Duration::from_secs(900));
        c
    }

    fn ledger(&self) -> Vec<Value> {
        let out = self
            .cmd()
            .args(["ledger", "--limit", "100", "--json"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<Value>(&out.stdout)
            .unwrap()
            .as_array()
            .unwrap()
            .clone()
    }

    /// Nothing listens on the stack's ports any more: the children are gone.
    fn assert_children_gone(&self) {
        for port in [self.serve, self.far] {
            assert!(
                std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
                "something still listens on {port} after the daemon exited"
            );
        }
    }
}

const TINY_INIT: &str = r#""--seed", "1", "--layers", "4", "--experts", "16", "--top-k", "2", "--d-model", "64", "--d-expert", "128", "--d-dense", "256", "--heads", "2", "--vocab", "512""#;

const TINY_START: &str = "[memory]\nbudget_gb = 0.01\ntrunk_gb = 0.001\ncache_gb = 0.004\n[far]\naddr = \"FAR\"\nwarm_set = 0\n";

#[test]
fn ten_cycles_on_the_default_config_each_with_one_verdict() {
    let demo = Demo::new("model", TINY_START, TINY_INIT, 3 * 64 * 128 * 4);
    let out = demo.cmd().args(["run", "--cycles", "10"]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "stdout:\n{stdout}\nstderr:\n{stderr}");
    let lines: Vec<&str> = stdout.lines().filter(|l| l.starts_with("cycle")).collect();
    assert_eq!(lines.len(), 10, "one line per cycle:\n{stdout}");
    assert!(
        lines[0].contains("remeasure"),
        "the first cycle measures the floor: {}",
        lines[0]
    );
    assert!(
        lines
            .iter()
            .all(|l| l.contains("live ") && l.contains("s/token")),
        "{stdout}"
    );

    let cycles = demo.ledger();
    assert_eq!(cycles.len(), 10);
    for c in &cycles {
        let verdicts = c["verdicts"].as_array().unwrap();
        assert_eq!(verdicts.len(), 1, "exactly one verdict per cycle: {c}");
        let status = c["cycle"]["status"].as_str().unwrap();
        assert!(["completed", "failed"].contains(&status), "{c}");
        assert!(
            c["cycle"]["ended_at"].is_string(),
            "every cycle is closed: {c}"
        );
    }
    // The model chose at least once (proposal rows exist, raw answers kept).
    assert!(
        cycles.iter().any(|c| c["cycle"]["proposer"] == "model"),
        "{cycles:?}"
    );
    demo.assert_children_gone();
}

#[test]
fn from_a_slow_profile_the_loop_stages_a_win_and_approve_applies_it() {
    // Big enough that tiers matter (experts of 384 KiB, cold reads from
    // disk), small enough to measure in a fraction of a second.
    let init = r#""--seed", "2", "--layers", "8", "--experts", "32", "--top-k", "4", "--d-model", "128", "--d-expert", "256", "--d-dense", "512", "--heads", "4", "--vocab", "512""#;
    let start = "[memory]\nbudget_gb = 0.05\ntrunk_gb = 0.002\ncache_gb = 0.002\n[far]\naddr = \"FAR\"\nwarm_set = 0\n";
    let demo = Demo::new("bandit", start, init, 3 * 128 * 256 * 4);
    let mut staged = None;
    for _ in 0..20 {
        let out = demo.cmd().args(["run", "--once"]).output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        if let Some(at) = stdout.find("STAGED #") {
            let id: String = stdout[at + 8..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            staged = Some(id);
            break;
        }
    }
    let id = staged.expect("no win was staged within 20 cycles");
    let before = std::fs::read_to_string(demo.path("ledger/profiles/live.toml")).unwrap();
    let out = demo
        .cmd()
        .args(["stage", "approve", &id, "--by", "test"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let after = std::fs::read_to_string(demo.path("ledger/profiles/live.toml")).unwrap();
    assert_ne!(before, after, "the live profile was rewritten");
    assert!(after.contains(&format!("stage approve {id}")), "{after}");
    demo.assert_children_gone();
}
