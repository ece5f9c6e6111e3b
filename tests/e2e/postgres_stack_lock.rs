//! The one-daemon-per-stack lock on a shared PostgreSQL ledger, with the
//! real daemon on the test cluster of `scripts/postgres.sh`: a second
//! daemon of the same stack on another "host" (another config directory, so
//! no file lock is shared) is refused with exit 2, and once the first is
//! SIGKILLed its lock is gone and a successor starts.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use sqlx::Connection;
use sqlx::postgres::{PgConnectOptions, PgConnection};

use crate::common;

const PG_URL_VAR: &str = "ORCH_TEST_PG_URL";
pub const PG_PASSWORD_VAR: &str = "ORCH_TEST_PG_PASSWORD";

/// A new database on the test cluster, named `prefix` and this process;
/// its URL (no password).
pub fn fresh_database(prefix: &str) -> String {
    let url = std::env::var(PG_URL_VAR).unwrap_or_else(|_| {
        panic!(
            "{PG_URL_VAR} is not set: run through scripts/test.sh, or first \
             `eval \"$(bash scripts/postgres.sh start)\"`"
        )
    });
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let name = format!("{prefix}_{}", std::process::id());
    rt.block_on(async {
        let mut options: PgConnectOptions = url.parse().unwrap();
        if let Ok(p) = std::env::var(PG_PASSWORD_VAR) {
            options = options.password(&p);
        }
        let mut admin = PgConnection::connect_with(&options).await.unwrap();
        sqlx::query(&format!("CREATE DATABASE {name}"))
            .execute(&mut admin)
            .await
            .unwrap();
    });
    let (server, _) = url.rsplit_once('/').unwrap();
    format!("{server}/{name}")
}

/// One host's config: its own directory, the shared database, the stack
/// `name`, and a bench double (`bench`) as the engine.
pub fn host_config(dir: &Path, url: &str, stack: &str, bench: &Path) -> PathBuf {
    let text = format!(
        r#"
[ledger]
url = "{url}"
password_env = "{PG_PASSWORD_VAR}"

[stack]
name = "{stack}"
live_profile = "live.toml"
work_dir = "work"
# Only remeasure: the bandit's rebalance choices can be refused by the
# planner unmeasured (a rejected cycle, not the failed one counted below).
unsupported = ["rerank_pins", "deepen_warm_set", "stage_speculative", "rebalance_trunk_cache"]

[stack.bench]
argv = [{bench:?}, "--out", "{{out}}", "--cache-gb", "{{memory.cache_gb}}", "--trunk-gb", "{{memory.trunk_gb}}"]

[menu]
dir = {menu:?}

[cycle]
proposer = "bandit"
interval_s = 0.01

[measure]
run_timeout_s = 120
memory_headroom_gb = 0.0
min_pairs = 4
max_pairs = 6

[daemon]
metrics_listen = "127.0.0.1:{port}"
"#,
        port = common::free_port(),
        menu = Path::new(env!("CARGO_MANIFEST_DIR")).join("experiments"),
    );
    std::fs::write(
        dir.join("live.toml"),
        "[memory]\nbudget_gb = 0.01\ntrunk_gb = 0.002\ncache_gb = 0.002\n[compute]\nthreads = 1\n",
    )
    .unwrap();
    let path = dir.join("config.toml");
    std::fs::write(&path, text).unwrap();
    path
}

pub fn orchestrator(config: &Path) -> Command {
    let mut cmd = Command::new(assert_cmd::cargo::cargo_bin("orchestrator"));
    cmd.arg("--config").arg(config);
    cmd
}

#[test]
fn a_second_daemon_of_the_stack_is_refused_and_a_killed_ones_lock_is_released() {
    let _heavy = common::heavy();
    let url = fresh_database("stack_lock");
    let stack = format!("spark-{}", std::process::id());

    // Host A: a daemon whose engine (a test double) starts and then hangs.
    let a = tempfile::tempdir().unwrap();
    let started = a.path().join("bench-started");
    let hang = common::script(
        a.path(),
        "bench-double-that-hangs.sh",
        &format!("echo $$ > {}; exec sleep 60", started.display()),
    );
    // Logging everything, sqlx's statements included, to look for the password.
    let first_log = a.path().join("first-daemon.log");
    let mut first = orchestrator(&host_config(a.path(), &url, &stack, &hang))
        .args(["--log", "debug", "run"])
        .stdout(Stdio::null())
        // A file, not a pipe: a full pipe would stall the daemon mid-log.
        .stderr(std::fs::File::create(&first_log).unwrap())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::fs::read_to_string(&started).map_or(true, |s| s.trim().is_empty()) {
        assert!(
            Instant::now() < deadline,
            "the first daemon never measured: {}",
            std::fs::read_to_string(&first_log)
                .unwrap_or_default()
                .lines()
                .filter(|l| !l.contains("sqlx"))
                .take(40)
                .collect::<Vec<_>>()
                .join("\n")
        );
        if first.try_wait().unwrap().is_some() {
            let err = std::fs::read_to_string(&first_log).unwrap();
            panic!("the first daemon exited: {err}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }

    // Host B, same stack: refused by the database's lock, exit 2.
    let b = tempfile::tempdir().unwrap();
    let fail = common::script(
        b.path(),
        "bench-double-that-fails.sh",
        "echo 'cannot load the model' >&2; exit 3",
    );
    let b_config = host_config(b.path(), &url, &stack, &fail);
    let out = orchestrator(&b_config)
        .args(["run", "--cycles", "1"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "another orchestrator daemon is running the stack \"{stack}\""
        )) && stderr.contains(&format!("orchestrator pid {}", first.id())),
        "{stderr}"
    );

    // SIGKILL the first daemon (and its hanging engine): the server ends its
    // session, and a successor on host B starts and runs its cycle.
    // SAFETY: kill(2) on our own child and on the engine pid it wrote.
    unsafe {
        assert_eq!(libc::kill(first.id() as i32, libc::SIGKILL), 0);
        let engine: i32 = std::fs::read_to_string(&started)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        libc::kill(engine, libc::SIGKILL);
    }
    first.wait().unwrap();
    let logged = std::fs::read_to_string(&first_log).unwrap();
    let password = std::env::var(PG_PASSWORD_VAR).unwrap();
    assert!(logged.contains("DEBUG"), "debug logging was on: {logged}");
    assert!(
        !logged.contains(&password),
        "the daemon logged the password"
    );
    assert!(
        !stderr.contains(&password),
        "the refusal shows the password"
    );
    let out = orchestrator(&b_config)
        .args(["run", "--cycles", "1"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("another orchestrator daemon"), "{stderr}");
    // Its one cycle ran (and failed on the failing engine double): exit 1.
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("1 of 1 cycle(s) failed"), "{stderr}");
    // The dead daemon's cycle was closed by the successor.
    let check = orchestrator(&b_config)
        .args(["ledger", "--check"])
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "{}{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );
}
