//! `orchestrator stage revert` and `stage approve|revert --restart` driven
//! as real processes: a real `tinyk3 serve` as the live server, restarted
//! by a test double of `systemctl restart` (a script that stops the server
//! it started last and starts a new one in a session of its own, as a
//! supervisor would), and a SQLite ledger filled through the ledger API.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::{common, staged};
use assert_cmd::Command;
use orchestrator::ledger::StageId;
use orchestrator::profile::Profile;
use serde_json::Value;

const BASE: &str = "[memory]\nbudget_gb = 1.0\ntrunk_gb = 0.25\ncache_gb = 0.5\n";

struct Fixture {
    dir: tempfile::TempDir,
    port: u16,
}

impl Fixture {
    /// The repository's config without `[embedded]` (a stack run by
    /// someone else), its live server on a free port, with `restart` as
    /// `[stack] restart` when given.
    fn new(restart: Option<&str>) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
        let port = common::free_port();
        let text = std::fs::read_to_string(repo.join("config.toml")).unwrap();
        let mut text = text.split("\n[embedded]").next().unwrap().to_string();
        for (from, to) in [
            (
                "dir = \"experiments\"".to_string(),
                format!("dir = {:?}", repo.join("experiments")),
            ),
            ("127.0.0.1:8181".into(), format!("127.0.0.1:{port}")),
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
        std::fs::write(dir.path().join("ledger/profiles/live.toml"), BASE).unwrap();
        Fixture { dir, port }
    }

    /// A fixture whose `[stack] restart` is a test double of `systemctl
    /// restart`: it stops the `tinyk3 serve` it started last and starts
    /// one on the live profile, outside its own process group.
    fn with_live_server() -> Fixture {
        let f = Fixture::new(Some("\"./restart-test-double.sh\""));
        let model = f.path("model");
        common::init_tiny(&model, 7);
        common::script(
            f.dir.path(),
            "restart-test-double.sh",
            &format!(
                "old=$(cat serve.pid 2>/dev/null)\n\
                 if [ -n \"$old\" ]; then kill \"$old\"; while kill -0 \"$old\" 2>/dev/null; do sleep 0.1; done; fi\n\
                 : > serve.log\n\
                 setsid {tinyk3} serve {model} --profile ledger/profiles/live.toml --listen 127.0.0.1:{port} \
                 >>serve.log 2>&1 </dev/null &\n\
                 echo $! > serve.pid\n\
                 # As `systemctl restart` does, return once the server is up: the\n\
                 # orchestrator kills this script's process group when it exits,\n\
                 # which would reach the server before its setsid.\n\
                 i=0; while ! grep -q listening serve.log 2>/dev/null && [ $i -lt 300 ]; do sleep 0.1; i=$((i+1)); done",
                tinyk3 = common::tinyk3_bin().display(),
                model = model.display(),
                port = f.port,
            ),
        );
        f
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    fn cmd(&self) -> Command {
        let mut c = Command::cargo_bin("orchestrator").unwrap();
        c.arg("--config").arg(self.path("config.toml"));
        c.timeout(Duration::from_secs(300));
        c
    }

    fn base(&self) -> Profile {
        Profile::parse(BASE, Path::new("base")).unwrap()
    }

    fn live(&self) -> Profile {
        Profile::load(&self.path("ledger/profiles/live.toml")).unwrap()
    }

    fn stage(&self, base: &Profile, cache_gb: f64) -> (StageId, Profile) {
        let candidate = staged::variant(base, cache_gb);
        let id = staged::stage_win(&self.path("ledger/orchestrator.db"), base, &candidate);
        (id, candidate)
    }

    fn server_pid(&self) -> Option<i32> {
        std::fs::read_to_string(self.path("serve.pid"))
            .ok()
            .and_then(|p| p.trim().parse().ok())
    }

    fn list(&self) -> Vec<Value> {
        let out = self
            .cmd()
            .args(["stage", "list", "--all", "--json"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", text(&out.stderr));
        serde_json::from_slice::<Vec<Value>>(&out.stdout).unwrap()
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        if let Some(pid) = self.server_pid() {
            // SAFETY: a plain kill(2) of the server this fixture started.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn id(s: StageId) -> String {
    s.0.to_string()
}

/// Whether the live server answers `/health` on `port`.
fn healthy(port: u16) -> bool {
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

#[test]
fn approve_and_revert_with_restart_restart_the_live_server_and_revert_expires_what_was_built_on_it()
{
    let _heavy = common::heavy();
    let f = Fixture::with_live_server();
    let (first, candidate) = f.stage(&f.base(), 0.75);

    let out = f
        .cmd()
        .args(["stage", "approve", &id(first), "--by", "ada", "--restart"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    let said = text(&out.stdout);
    assert!(
        said.contains("Restarted the stack with `./restart-test-double.sh`"),
        "{said}"
    );
    assert!(
        said.contains(&format!("127.0.0.1:{}/health answered", f.port)),
        "{said}"
    );
    assert_eq!(f.live().digest(), candidate.digest());
    let approved_server = f.server_pid().expect("the restart started a server");
    assert!(common::alive(approved_server) && healthy(f.port));
    let shown = f
        .cmd()
        .args(["stage", "show", &id(first), "--json"])
        .output()
        .unwrap();
    let shown: Value = serde_json::from_slice(&shown.stdout).unwrap();
    assert!(
        shown["detail"]["stage"]["restarted_at"].is_string(),
        "{shown:#}"
    );

    // A win measured on top of the approved profile waits; the revert
    // takes its base away.
    let (on_top, _) = f.stage(&candidate, 0.9);
    let out = f
        .cmd()
        .args([
            "stage",
            "revert",
            &id(first),
            "--reason",
            "slower live",
            "--by",
            "bob",
            "--restart",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    let said = text(&out.stdout);
    assert!(
        said.contains(&format!("stage {first} reverted by bob (slower live)")),
        "{said}"
    );
    assert!(said.contains("memory.cache_gb: 0.75 -> 0.5"), "{said}");
    assert!(
        said.contains(&format!(
            "Expired 1 staged win(s) measured on top of the reverted profile: {on_top}"
        )),
        "{said}"
    );
    assert!(said.contains("Restarted the stack with"), "{said}");
    assert_eq!(
        f.live().digest(),
        f.base().digest(),
        "the replaced profile is back"
    );
    let reverted_server = f.server_pid().unwrap();
    assert_ne!(
        reverted_server, approved_server,
        "a new server runs the reverted profile"
    );
    assert!(!common::alive(approved_server));
    assert!(healthy(f.port));

    let list = f.list();
    let row = |s: StageId| list.iter().find(|v| v["id"] == s.0).unwrap().clone();
    assert_eq!(row(first)["revert"]["requested_by"], "bob");
    assert_eq!(row(first)["revert"]["reason"], "slower live");
    assert!(row(first)["revert"]["applied_at"].is_string());
    assert!(row(first)["revert"]["restarted_at"].is_string());
    assert_eq!(row(on_top)["state"], "expired");
    let out = f.cmd().args(["stage", "list", "--all"]).output().unwrap();
    let table = text(&out.stdout);
    assert!(table.contains("reverted by bob at"), "{table}");
    let out = f
        .cmd()
        .args(["stage", "show", &id(first)])
        .output()
        .unwrap();
    assert!(
        text(&out.stdout).contains("revert   reverted by bob"),
        "{}",
        text(&out.stdout)
    );

    // Once reverted is once.
    let out = f
        .cmd()
        .args(["stage", "revert", &id(first), "--reason", "again"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("is reverted already"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn a_revert_is_refused_when_the_live_profile_changed_since_the_stage_was_applied() {
    let f = Fixture::new(None);
    let (first, _) = f.stage(&f.base(), 0.75);
    let out = f
        .cmd()
        .args(["stage", "approve", &id(first), "--by", "ada"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    // Someone edits the live profile by hand after the approval.
    let by_hand = staged::variant(&f.base(), 0.6);
    std::fs::write(f.path("ledger/profiles/live.toml"), by_hand.canonical()).unwrap();

    let out = f
        .cmd()
        .args([
            "stage",
            "revert",
            &id(first),
            "--reason",
            "slower",
            "--by",
            "bob",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(
        err.contains(&format!("stage {first} was NOT reverted")),
        "{err}"
    );
    assert!(
        err.contains("the live profile changed since the stage's profile was written"),
        "{err}"
    );
    assert!(err.contains(by_hand.digest().short()), "{err}");
    assert_eq!(f.live().digest(), by_hand.digest(), "nothing was written");
    let row = f.list().into_iter().find(|v| v["id"] == first.0).unwrap();
    assert!(row["revert"].is_null(), "nothing was recorded: {row:#}");

    // A stage that was never applied has nothing to revert.
    let (staged_only, _) = f.stage(&by_hand, 0.7);
    let out = f
        .cmd()
        .args(["stage", "revert", &id(staged_only), "--reason", "no"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("only an approved stage"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn a_failed_restart_exits_1_naming_the_command_and_leaves_the_profile_written() {
    let f = Fixture::new(Some("\"./restart-test-double.sh\", \"tinyk3.service\""));
    common::script(
        f.dir.path(),
        "restart-test-double.sh",
        "echo \"Failed to restart $1: Unit $1 not found.\" >&2\nexit 5",
    );
    let (first, candidate) = f.stage(&f.base(), 0.75);
    let out = f
        .cmd()
        .args(["stage", "approve", &id(first), "--by", "ada", "--restart"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(
        err.contains("the restart command `./restart-test-double.sh tinyk3.service` exited 5"),
        "{err}"
    );
    assert!(err.contains("Unit tinyk3.service not found"), "{err}");
    assert!(err.contains("IS written"), "{err}");
    assert_eq!(
        f.live().digest(),
        candidate.digest(),
        "the profile stays written"
    );
    let row = f.list().into_iter().find(|v| v["id"] == first.0).unwrap();
    assert_eq!(row["state"], "approved");

    // A restart that comes back but whose server never answers is one too.
    let f = Fixture::new(Some("\"true\""));
    let (first, _) = f.stage(&f.base(), 0.75);
    std::fs::write(
        f.path("config.toml"),
        std::fs::read_to_string(f.path("config.toml"))
            .unwrap()
            .replace("restart_timeout_s = 60", "restart_timeout_s = 1"),
    )
    .unwrap();
    let started = Instant::now();
    let out = f
        .cmd()
        .args(["stage", "approve", &id(first), "--by", "ada", "--restart"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(
        err.contains("the restart command `true` ran, but the live server's"),
        "{err}"
    );
    assert!(
        err.contains("did not answer 200 on the live profile within 1s"),
        "{err}"
    );
    assert!(started.elapsed() < Duration::from_secs(30));
}

#[test]
fn restart_without_a_configured_command_is_refused_before_anything_is_written() {
    let f = Fixture::new(None);
    let (first, _) = f.stage(&f.base(), 0.75);
    let out = f
        .cmd()
        .args(["stage", "approve", &id(first), "--by", "ada", "--restart"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(err.contains("has no [stack] restart"), "{err}");
    assert!(err.contains("Nothing was written"), "{err}");
    assert_eq!(f.live().digest(), f.base().digest());
    let row = f.list().into_iter().find(|v| v["id"] == first.0).unwrap();
    assert_eq!(row["state"], "staged");
}
