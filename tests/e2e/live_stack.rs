//! A stack run by someone else, for the tests of approving, reverting and
//! realizing: the repository's config without `[embedded]`, its commands
//! pointed at the built tinyk3 and a checkpoint of the test's own, its live
//! server on a free port, restarted by a test double of `systemctl restart`
//! (a script that stops the `tinyk3 serve` it started last and starts one
//! on the live profile in a session of its own, as a supervisor would).

use std::path::{Path, PathBuf};
use std::time::Duration;

use assert_cmd::Command;
use orchestrator::ledger::StageId;
use orchestrator::profile::Profile;
use serde_json::Value;

use crate::{common, staged};

pub struct LiveStack {
    pub dir: tempfile::TempDir,
    pub port: u16,
    /// The live profile it starts with.
    base: String,
}

impl LiveStack {
    /// The config with `restart` as `[stack] restart` when given, and
    /// `base` as the live profile.
    pub fn new(restart: Option<&str>, base: &str) -> LiveStack {
        let dir = tempfile::tempdir().unwrap();
        let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
        let port = common::free_port();
        let text = std::fs::read_to_string(repo.join("config.toml")).unwrap();
        // The live server: the surface, its metrics and the served model.
        let mut text = text
            .split("\n[embedded]")
            .next()
            .unwrap()
            .replace("127.0.0.1:8181", &format!("127.0.0.1:{port}"));
        for (from, to) in [
            (
                "dir = \"experiments\"".to_string(),
                format!("dir = {:?}", repo.join("experiments")),
            ),
            (
                "name = \"tinyk3\"\n".into(),
                match restart {
                    Some(argv) => {
                        format!("name = \"tinyk3\"\nrestart = [{argv}]\nrestart_timeout_s = 60\n")
                    }
                    None => "name = \"tinyk3\"\n".into(),
                },
            ),
        ] {
            assert!(text.contains(&from), "config.toml no longer has {from:?}");
            text = text.replacen(&from, &to, 1);
        }
        std::fs::write(dir.path().join("config.toml"), text).unwrap();
        std::fs::create_dir_all(dir.path().join("ledger/profiles")).unwrap();
        std::fs::write(dir.path().join("ledger/profiles/live.toml"), base).unwrap();
        LiveStack {
            dir,
            port,
            base: base.to_string(),
        }
    }

    /// A stack whose `[stack] restart` is the test double: it starts
    /// `tinyk3 serve` on the live profile over a checkpoint made with
    /// `init` (`tinyk3 init` arguments; `None`: the tiny one of
    /// [`common::init_tiny`]), with `serve_flags` after its own.
    pub fn with_live_server(base: &str, init: Option<&[&str]>, serve_flags: &str) -> LiveStack {
        let s = LiveStack::new(Some("\"./restart-test-double.sh\""), base);
        let model = s.path("model");
        match init {
            None => common::init_tiny(&model, 7),
            Some(args) => common::init_model(&model, args),
        }
        common::script(
            s.dir.path(),
            "restart-test-double.sh",
            &format!(
                "old=$(cat serve.pid 2>/dev/null)\n\
                 if [ -n \"$old\" ]; then kill \"$old\"; while kill -0 \"$old\" 2>/dev/null; do sleep 0.1; done; fi\n\
                 : > serve.log\n\
                 setsid {tinyk3} serve {model} --profile ledger/profiles/live.toml --listen 127.0.0.1:{port} \
                 {serve_flags} >>serve.log 2>&1 </dev/null &\n\
                 echo $! > serve.pid\n\
                 # As `systemctl restart` does, return once the server is up: the\n\
                 # orchestrator kills this script's process group when it exits,\n\
                 # which would reach the server before its setsid.\n\
                 i=0; while ! grep -q listening serve.log 2>/dev/null && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done",
                tinyk3 = common::tinyk3_bin().display(),
                model = model.display(),
                port = s.port,
            ),
        );
        s
    }

    /// Points the config's commands (bench, shadow) at the built tinyk3
    /// and this stack's checkpoint, and applies `edits` (from, to) to it.
    pub fn edit_config(&self, edits: &[(&str, &str)]) {
        let path = self.path("config.toml");
        let mut text = std::fs::read_to_string(&path).unwrap();
        let tinyk3 = format!("{:?}", common::tinyk3_bin().display().to_string());
        let model = format!("{:?}", self.path("model").display().to_string());
        text = text
            .replace("\"target/release/tinyk3\"", &tinyk3)
            .replace("\"ledger/tinyk3-demo\"", &model);
        for (from, to) in edits {
            assert!(text.contains(from), "the config has no {from:?}");
            text = text.replace(from, to);
        }
        std::fs::write(&path, text).unwrap();
    }

    pub fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    pub fn cmd(&self) -> Command {
        let mut c = Command::cargo_bin("orchestrator").unwrap();
        c.arg("--config").arg(self.path("config.toml"));
        c.timeout(Duration::from_secs(900));
        c
    }

    pub fn base(&self) -> Profile {
        Profile::parse(&self.base, Path::new("base")).unwrap()
    }

    pub fn live(&self) -> Profile {
        Profile::load(&self.path("ledger/profiles/live.toml")).unwrap()
    }

    /// A confirmed win from `base` to `base` with `cache_gb`, staged.
    pub fn stage(&self, base: &Profile, cache_gb: f64) -> (StageId, Profile) {
        self.stage_to(base, &staged::variant(base, cache_gb))
    }

    /// A confirmed win from `base` to `candidate`, staged.
    pub fn stage_to(&self, base: &Profile, candidate: &Profile) -> (StageId, Profile) {
        let id = staged::stage_win(&self.path("ledger/orchestrator.db"), base, candidate);
        (id, candidate.clone())
    }

    pub fn server_pid(&self) -> Option<i32> {
        std::fs::read_to_string(self.path("serve.pid"))
            .ok()
            .and_then(|p| p.trim().parse().ok())
    }

    /// `orchestrator ARGS` on this stack, which must succeed: its stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        let out = self.cmd().args(args).output().unwrap();
        assert!(
            out.status.success(),
            "orchestrator {}:\n{}{}",
            args.join(" "),
            text(&out.stdout),
            text(&out.stderr)
        );
        text(&out.stdout)
    }

    /// `stage list --all --json`.
    pub fn list(&self) -> Vec<Value> {
        serde_json::from_str(&self.ok(&["stage", "list", "--all", "--json"])).unwrap()
    }

    /// `stage show ID --json`.
    pub fn show(&self, id: StageId) -> Value {
        serde_json::from_str(&self.ok(&["stage", "show", &id.0.to_string(), "--json"])).unwrap()
    }
}

impl Drop for LiveStack {
    fn drop(&mut self) {
        if let Some(pid) = self.server_pid() {
            // SAFETY: a plain kill(2) of the server this fixture started.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Whether the live server answers `/health` on `port`.
pub fn healthy(port: u16) -> bool {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let req = "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    if s.write_all(req.as_bytes()).is_err() {
        return false;
    }
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out.starts_with("HTTP/1.1 200")
}
