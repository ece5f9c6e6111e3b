//! The embedded demo set up in a temp dir for end-to-end tests of
//! `orchestrator run`: the repository's default config pointed at temp
//! paths, free ports, a small checkpoint and a quick protocol.

use std::path::{Path, PathBuf};
use std::time::Duration;

use assert_cmd::Command;
use orchestrator::ledger::Ledger;
use serde_json::Value;

use super::common;

pub struct Demo {
    pub dir: tempfile::TempDir,
    pub serve: u16,
    pub far: u16,
    /// The orchestrator's own metrics endpoint (`[daemon] metrics_listen`).
    pub metrics: u16,
    /// Extra environment of every command [`Demo::cmd`] runs (a ledger
    /// password's variable).
    pub env: Vec<(String, String)>,
}

impl Demo {
    /// The repository's default config, pointed at temp paths, free ports,
    /// a small checkpoint and a quick measurement protocol.
    pub fn new(
        proposer: &str,
        start_profile: &str,
        init_args: &str,
        expert_bytes: u64,
        max_pairs: u32,
    ) -> Demo {
        let dir = tempfile::tempdir().unwrap();
        let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
        let tinyk3 = common::tinyk3_bin();
        let (serve, far, metrics) = (
            common::free_port(),
            common::free_port(),
            common::free_port(),
        );
        let mut text = std::fs::read_to_string(repo.join("config.toml")).unwrap();
        // Every substitution must find its text: a config.toml edit that
        // silently stops one from matching would test another protocol.
        let demo_init = text
            .lines()
            .find(|l| l.starts_with("init_args = "))
            .expect("config.toml has [embedded] init_args")
            .to_string();
        for (from, to) in [
            (
                "\"target/release/tinyk3\"".to_string(),
                format!("{:?}", tinyk3),
            ),
            (
                "dir = \"experiments\"".into(),
                format!("dir = {:?}", repo.join("experiments")),
            ),
            ("127.0.0.1:8181".into(), format!("127.0.0.1:{serve}")),
            ("127.0.0.1:7070".into(), format!("127.0.0.1:{far}")),
            ("127.0.0.1:9464".into(), format!("127.0.0.1:{metrics}")),
            (demo_init, format!("init_args = [{init_args}]")),
            (
                "starting_profile = \"tinyk3/profiles/slow-start.toml\"".into(),
                "starting_profile = \"start.toml\"".into(),
            ),
            (
                "expert_bytes = 1572864".into(),
                format!("expert_bytes = {expert_bytes}"),
            ),
            ("\"--gen\", \"8\"".into(), "\"--gen\", \"8\"".into()),
            ("interval_s = 30".into(), "interval_s = 0.01".into()),
            (
                "proposer = \"model\"".into(),
                format!("proposer = {proposer:?}"),
            ),
            ("max_pairs = 16".into(), format!("max_pairs = {max_pairs}")),
            ("floor_pairs = 20".into(), "floor_pairs = 10".into()),
            ("run_timeout_s = 1800".into(), "run_timeout_s = 60".into()),
            (
                "memory_headroom_gb = 1.0".into(),
                "memory_headroom_gb = 0.1".into(),
            ),
        ] {
            assert!(text.contains(&from), "config.toml no longer has {from:?}");
            text = text.replace(&from, &to);
        }
        std::fs::write(dir.path().join("config.toml"), text).unwrap();
        std::fs::write(
            dir.path().join("start.toml"),
            start_profile.replace("FAR", &format!("127.0.0.1:{far}")),
        )
        .unwrap();
        Demo {
            dir,
            serve,
            far,
            metrics,
            env: Vec::new(),
        }
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    pub fn cmd(&self) -> Command {
        let mut c = Command::cargo_bin("orchestrator").unwrap();
        c.arg("--config").arg(self.path("config.toml"));
        c.envs(self.env.iter().map(|(k, v)| (k, v)));
        c.timeout(Duration::from_secs(900));
        c
    }

    /// Runs `orchestrator ARGS` on the demo, asserts it exited 0 and
    /// returns its stdout and stderr, one after the other (the log a
    /// failed assertion prints).
    pub fn run_ok(&self, args: &[&str]) -> String {
        let out = self.cmd().args(args).output().unwrap();
        let log = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "orchestrator {args:?}:\n{log}");
        log
    }

    /// `read` on the demo's SQLite ledger, opened through the crate's own
    /// [`Ledger`] API (never a shell, whose absence would read as nothing).
    pub fn read_ledger<T>(&self, read: impl AsyncFnOnce(&Ledger) -> T) -> T {
        let rt = tokio::runtime::Runtime::new().unwrap();
        rt.block_on(async {
            let ledger = Ledger::open_existing(self.path("ledger/orchestrator.db"))
                .await
                .unwrap();
            let out = read(&ledger).await;
            ledger.close().await;
            out
        })
    }

    pub fn ledger(&self) -> Vec<Value> {
        self.json_list(&["ledger", "--limit", "100", "--json"])
    }

    /// Runs a command that prints a JSON array and returns its elements.
    pub fn json_list(&self, args: &[&str]) -> Vec<Value> {
        let out = self.cmd().args(args).output().unwrap();
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
    pub fn assert_children_gone(&self) {
        for port in [self.serve, self.far] {
            assert!(
                std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
                "something still listens on {port} after the daemon exited"
            );
        }
    }
}
