//! Helpers of the fault-matrix and security tests: the real daemon running
//! in the background with its logs in a file, the ledger read as it grows,
//! the fault wrapper spliced into the bench argv, and `/proc` scans for
//! processes that outlived their run.

pub mod ledger;
pub mod server;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::demo::Demo;

/// A checkpoint small enough that one bench run takes a fraction of a second.
pub const TINY_INIT: &str = r#""--seed", "1", "--layers", "4", "--experts", "8", "--top-k", "2", "--d-model", "32", "--d-expert", "64", "--d-dense", "64", "--heads", "2", "--vocab", "256""#;
pub const TINY_START: &str = "[memory]\nbudget_gb = 0.01\ntrunk_gb = 0.001\ncache_gb = 0.004\n[far]\naddr = \"FAR\"\nwarm_set = 0\n";
pub const TINY_EXPERT_BYTES: u64 = 3 * 32 * 64 * 4;

/// The fault-wrapper binary: `FAULT_WRAPPER_BIN`, else next to tinyk3.
pub fn fault_wrapper_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("FAULT_WRAPPER_BIN") {
        return PathBuf::from(p);
    }
    let dir = super::common::tinyk3_bin();
    let dir = dir.parent().unwrap();
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut candidates = vec![dir.join("fault-wrapper")];
    for root in [
        std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from),
        Some(workspace.join("target")),
    ]
    .into_iter()
    .flatten()
    {
        let root = workspace.join(root);
        candidates.push(root.join("debug/fault-wrapper"));
        candidates.push(root.join("release/fault-wrapper"));
    }
    candidates
        .iter()
        .find(|p| p.is_file())
        .cloned()
        .unwrap_or_else(|| {
            panic!(
                "no fault-wrapper binary among {candidates:?}; build it: cargo build -p fault-wrapper (or set FAULT_WRAPPER_BIN)"
            )
        })
}

/// A config text with the live load's names left out, so the daemon does not
/// stand aside: no monitor polls the live metrics between runs, and no quiet
/// spell is awaited before the first run. For tests whose live server no
/// user calls, and which count scrapes or time a burst.
pub fn not_standing_aside(config: String) -> String {
    const NAMES: [&str; 3] = [
        "live_requests_processing = \"tinyk3_requests_in_flight\"\n",
        "live_requests_waiting = \"tinyk3_requests_queued\"\n",
        "live_requests_total = \"tinyk3_requests_total\"\n",
    ];
    NAMES.iter().fold(config, |t, name| t.replace(name, ""))
}

/// Edits the demo's config text.
pub fn edit_config(demo: &Demo, edit: impl FnOnce(String) -> String) {
    let path = demo.path("config.toml");
    let text = std::fs::read_to_string(&path).unwrap();
    let new = edit(text.clone());
    assert_ne!(new, text, "the config edit changed nothing");
    std::fs::write(&path, new).unwrap();
}

/// Gives the demo a copy of the repository's menu whose `remeasure` is an
/// A/A through the bench, the protocol its experiments are measured with,
/// so its floor judges them and a fresh ledger's first cycle is offered it
/// (the shipped `remeasure` measures the live server, whose floor judges
/// none of them: withheld until something drifts, `cycle::remeasure_offer`).
/// For tests that need a choice every cycle may make, `remeasure` repeated.
pub fn bench_remeasure_menu(demo: &Demo) {
    let menu = own_menu(demo, |file, text| {
        if file != "remeasure.toml" {
            return text;
        }
        let t = text.replace("method = \"surface\"", "method = \"bench\"");
        assert_ne!(t, text, "remeasure.toml no longer measures the surface");
        t
    });
    let experiments = format!("dir = {:?}", repo_menu());
    edit_config(demo, |t| {
        assert!(t.contains(&experiments), "the demo's menu dir moved:\n{t}");
        t.replace(&experiments, &format!("dir = {menu:?}"))
    });
}

/// Writes a copy of the repository's menu to the demo's `menu/`, each file
/// `(name, text)` through `edit`; returns that directory (the config still
/// names the repository's: the caller points it there).
pub fn own_menu(demo: &Demo, edit: impl Fn(&str, String) -> String) -> std::path::PathBuf {
    let menu = demo.path("menu");
    std::fs::create_dir_all(&menu).unwrap();
    for entry in std::fs::read_dir(repo_menu()).unwrap() {
        let p = entry.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(&p).unwrap();
        std::fs::write(menu.join(&name), edit(&name, text)).unwrap();
    }
    menu
}

/// The repository's menu, `experiments/`, which a demo's config names.
fn repo_menu() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("experiments")
}

/// Points the demo's `[model]` at a scripted model double on `port`. The
/// demo asks tinyk3's random weights for an empty rationale; a scripted
/// model writes real ones, so the default bound of 400 characters is back.
pub fn use_model_double(demo: &Demo, port: u16) {
    let serve = demo.serve;
    edit_config(demo, |t| {
        t.replace(
            &format!("base_url = \"http://127.0.0.1:{serve}/v1\""),
            &format!("base_url = \"http://127.0.0.1:{port}/v1\""),
        )
        .replace("rationale_max_chars = 0", "rationale_max_chars = 400")
    });
}

/// Puts the fault wrapper in front of the bench command, fed from the queue
/// file `faults.queue` and logging every invocation to `faults.log`.
pub fn wrap_bench(demo: &Demo) {
    let tinyk3 = format!("{:?}", super::common::tinyk3_bin());
    let wrapper = fault_wrapper_bin();
    let queue = demo.path("faults.queue");
    std::fs::write(&queue, "").unwrap();
    let log = demo.path("faults.log");
    edit_config(demo, |t| {
        t.replacen(
            &format!("argv = [\n  {tinyk3}, \"bench\""),
            &format!(
                "argv = [\n  {:?}, \"--queue\", {:?}, \"--log\", {:?}, \"--\", {tinyk3}, \"bench\"",
                wrapper, queue, log
            ),
            1,
        )
    });
}

/// Queues one fault for the next bench invocation.
pub fn queue_fault(demo: &Demo, kind: &str) {
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(demo.path("faults.queue"))
        .unwrap();
    writeln!(f, "{kind}").unwrap();
}

/// Every invocation the wrapper logged: (fault, pid, argv).
pub fn wrapper_log(demo: &Demo) -> Vec<(String, i32, Vec<String>)> {
    let text = std::fs::read_to_string(demo.path("faults.log")).unwrap_or_default();
    text.lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            (
                v["fault"].as_str().unwrap().to_string(),
                v["pid"].as_i64().unwrap() as i32,
                v["argv"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|a| a.as_str().unwrap().to_string())
                    .collect(),
            )
        })
        .collect()
}

/// `orchestrator run` in the background, its stdout and stderr in files.
pub struct Daemon {
    child: Child,
    pub stderr_path: PathBuf,
    pub stdout_path: PathBuf,
}

impl Daemon {
    pub fn start(demo: &Demo, args: &[&str], env: &[(&str, &str)]) -> Daemon {
        let mut cmd = Command::new(assert_cmd::cargo::cargo_bin("orchestrator"));
        cmd.arg("--config").arg(demo.path("config.toml"));
        Daemon::spawn(demo, cmd, args, env)
    }

    /// As the systemd unit starts it: `orchestrator run` with the config
    /// named by `ORCHESTRATOR_CONFIG`, no `--config`.
    pub fn start_as_service(demo: &Demo, env: &[(&str, &str)]) -> Daemon {
        let mut cmd = Command::new(assert_cmd::cargo::cargo_bin("orchestrator"));
        cmd.env("ORCHESTRATOR_CONFIG", demo.path("config.toml"));
        Daemon::spawn(demo, cmd, &[], env)
    }

    fn spawn(demo: &Demo, mut cmd: Command, args: &[&str], env: &[(&str, &str)]) -> Daemon {
        let stderr_path = demo.path("daemon.stderr");
        let stdout_path = demo.path("daemon.stdout");
        let child = cmd
            .arg("run")
            .args(args)
            .envs(env.iter().copied())
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&stdout_path).unwrap())
            .stderr(std::fs::File::create(&stderr_path).unwrap())
            .spawn()
            .unwrap();
        Daemon {
            child,
            stderr_path,
            stdout_path,
        }
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// The log so far, ANSI colours stripped.
    pub fn stderr(&self) -> String {
        strip_ansi(&std::fs::read_to_string(&self.stderr_path).unwrap_or_default())
    }

    pub fn stdout(&self) -> String {
        std::fs::read_to_string(&self.stdout_path).unwrap_or_default()
    }

    /// Whether it is still running.
    pub fn running(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }

    /// SIGTERM, then waits for it to stop (SIGKILL after `timeout`).
    pub fn stop(&mut self, timeout: Duration) -> ExitStatus {
        // SAFETY: kill(2) on our own child's pid.
        unsafe {
            libc::kill(self.pid(), libc::SIGTERM);
        }
        self.wait(timeout)
    }

    /// Waits for it to exit on its own (SIGKILL and panic after `timeout`).
    pub fn wait(&mut self, timeout: Duration) -> ExitStatus {
        let t0 = Instant::now();
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                return s;
            }
            if t0.elapsed() > timeout {
                panic!(
                    "the daemon did not exit within {timeout:?}; log:\n{}",
                    self.stderr()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Daemon {
    /// A failed assertion must not orphan the stack: SIGTERM lets the daemon
    /// stop its children; SIGKILL only if it does not stop in time.
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            // SAFETY: kill(2) on our own child's pid.
            unsafe {
                libc::kill(self.pid(), libc::SIGTERM);
            }
            let t0 = Instant::now();
            while t0.elapsed() < Duration::from_secs(20) {
                if self.child.try_wait().ok().flatten().is_some() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

pub fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\x1b' && chars.peek() == Some(&'[') {
            for d in chars.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The ledger's cycles, oldest first.
pub fn cycles(demo: &Demo) -> Vec<Value> {
    // Polled from the daemon's start on: until it has created its ledger
    // there are no cycles (and `ledger` refuses a missing one).
    if !demo.path("ledger/orchestrator.db").exists() {
        return Vec::new();
    }
    let mut c = demo.ledger();
    c.sort_by_key(|c| c["cycle"]["id"].as_i64().unwrap());
    c
}

/// The closed cycles after `after` (a cycle id), oldest first.
pub fn closed_after(demo: &Demo, after: i64) -> Vec<Value> {
    cycles(demo)
        .into_iter()
        .filter(|c| {
            c["cycle"]["id"].as_i64().unwrap() > after && c["cycle"]["ended_at"].is_string()
        })
        .collect()
}

/// Polls `f` every 100 ms until it returns `Some`; panics with `what` after `timeout`.
pub fn wait_for<T>(
    timeout: Duration,
    what: &str,
    daemon: &mut Daemon,
    mut f: impl FnMut() -> Option<T>,
) -> T {
    let t0 = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            daemon.running(),
            "the daemon exited while waiting for {what}; log:\n{}",
            daemon.stderr()
        );
        assert!(
            t0.elapsed() < timeout,
            "timed out after {timeout:?} waiting for {what}; log:\n{}",
            daemon.stderr()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The one verdict of a cycle: (kind, reason). A cycle whose A/B had to
/// measure its noise floor also holds that floor's A/A (a `remeasure`);
/// the cycle's verdict is then the A/B's.
pub fn only_verdict(cycle: &Value) -> (String, String) {
    let all = cycle["verdicts"].as_array().unwrap();
    let v: Vec<&Value> = match all.len() {
        2 => all.iter().filter(|v| v["menu_id"] != "remeasure").collect(),
        _ => all.iter().collect(),
    };
    assert_eq!(v.len(), 1, "exactly one verdict per cycle: {cycle:#}");
    kind_and_reason(&v[0]["verdict"])
}

/// The verdict of experiment `experiment` in `cycle`: (kind, reason).
pub fn verdict_of(cycle: &Value, experiment: i64) -> (String, String) {
    let v = cycle["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| &v["verdict"])
        .find(|v| v["experiment_id"] == experiment)
        .unwrap_or_else(|| panic!("no verdict of experiment #{experiment}: {cycle:#}"));
    kind_and_reason(v)
}

/// A verdict's kind and reason ("" when it has none).
fn kind_and_reason(verdict: &Value) -> (String, String) {
    (
        verdict["kind"].as_str().unwrap().to_string(),
        verdict["reason"].as_str().unwrap_or("").to_string(),
    )
}

/// Live (non-zombie) processes whose process group is `pgid`.
pub fn group_members(pgid: i32) -> Vec<i32> {
    procs()
        .into_iter()
        .filter(|&(_, pgrp, _)| pgrp == pgid)
        .map(|(pid, _, _)| pid)
        .collect()
}

/// Live processes whose command line mentions `needle`: (pid, cmdline).
pub fn processes_mentioning(needle: &str) -> Vec<(i32, String)> {
    procs()
        .into_iter()
        .filter(|(_, _, cmd)| cmd.contains(needle))
        .map(|(pid, _, cmd)| (pid, cmd))
        .collect()
}

/// (pid, pgrp, cmdline) of every live process.
fn procs() -> Vec<(i32, i32, String)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        // state ppid pgrp ...
        if fields.is_empty() || fields[0] == "Z" || fields[0] == "X" {
            continue;
        }
        let pgrp = fields.get(2).and_then(|p| p.parse().ok()).unwrap_or(0);
        let cmd = std::fs::read(e.path().join("cmdline"))
            .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
            .unwrap_or_default();
        out.push((pid, pgrp, cmd));
    }
    out
}

/// Lines of the log at level ERROR.
pub fn error_lines(log: &str) -> Vec<&str> {
    log.lines().filter(|l| l.contains(" ERROR ")).collect()
}
