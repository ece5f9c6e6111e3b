//! Secrets stay with the daemon: the variables the config names as secrets
//! (`[model] api_key_env`, and on PostgreSQL `[ledger] password_env`) are in
//! the real daemon's environment, and absent from its children's. The child
//! is the daemon's own bench run, a test double that records its pid and
//! waits; the test reads that live process's `/proc/PID/environ`.

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use crate::common;
use crate::postgres_stack_lock::{PG_PASSWORD_VAR, fresh_database, host_config, orchestrator};

const KEY_VAR: &str = "ORCH_TEST_CHILD_ENV_MODEL_KEY";
const KEY: &str = "sk-child-env-test-7f3a";

/// A bench double that writes its pid, waits while the test reads its
/// environment, then reports a valid run.
fn bench_double(dir: &Path) -> (PathBuf, PathBuf) {
    let pids = dir.join("bench-pids");
    let bench = common::script(
        dir,
        "bench-double-that-waits.sh",
        &format!(
            r#"echo $$ >> {pids}
sleep 2
while [ "$1" != "--out" ]; do shift; done
printf '{{"seconds_per_token": 0.05, "output_hash": "00000000deadbeef"}}' > "$2""#,
            pids = pids.display()
        ),
    );
    (bench, pids)
}

/// A served-model table whose key variable holds a secret; the bandit
/// proposes, so the model is never asked.
const MODEL: &str = "\n[model]\nbase_url = \"http://127.0.0.1:9/v1\"\nname = \"unused\"\napi_key_env = \"ORCH_TEST_CHILD_ENV_MODEL_KEY\"\n";

/// Starts the daemon on `config` with the key set, waits for its first bench
/// child and returns that child's environment, then stops the daemon.
fn first_child_environment(config: &Path, pids: &Path, log: &Path) -> Vec<String> {
    let mut daemon: Child = orchestrator(config)
        .arg("run")
        .env(KEY_VAR, KEY)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let environ = loop {
        let pid = std::fs::read_to_string(pids)
            .ok()
            .and_then(|s| s.lines().next().and_then(|l| l.trim().parse::<i32>().ok()));
        if let Some(pid) = pid
            && let Ok(bytes) = std::fs::read(format!("/proc/{pid}/environ"))
        {
            break bytes;
        }
        if let Some(status) = daemon.try_wait().unwrap() {
            panic!(
                "the daemon exited ({status}) before its first bench run: {}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
        assert!(
            Instant::now() < deadline,
            "no bench run within 60 s: {}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let daemon_env = std::fs::read(format!("/proc/{}/environ", daemon.id())).unwrap();
    // SAFETY: SIGINT to our own child; it stops its run and exits.
    unsafe { libc::kill(daemon.id() as i32, libc::SIGINT) };
    daemon.wait().unwrap();
    // The premise: the daemon itself had the secret to withhold.
    let daemon_env = String::from_utf8_lossy(&daemon_env).to_string();
    assert!(
        daemon_env.contains(&format!("{KEY_VAR}={KEY}")),
        "premise: the daemon has the key in its environment"
    );
    String::from_utf8_lossy(&environ)
        .split('\0')
        .map(str::to_string)
        .collect()
}

fn assert_none_of(environ: &[String], names: &[&str], values: &[&str]) {
    // The environment read is the daemon's child's: it carries the tag.
    assert!(
        environ
            .iter()
            .any(|v| v.starts_with("ORCHESTRATOR_LEDGER_TAG=")),
        "not a child of the daemon: {environ:?}"
    );
    for name in names {
        assert!(
            !environ.iter().any(|v| v.starts_with(&format!("{name}="))),
            "{name} reached the child"
        );
    }
    for value in values {
        assert!(
            !environ.iter().any(|v| v.contains(value)),
            "a secret's value reached the child"
        );
    }
}

#[test]
fn on_sqlite_the_model_key_reaches_no_child() {
    let _heavy = common::heavy();
    let dir = tempfile::tempdir().unwrap();
    let (bench, pids) = bench_double(dir.path());
    std::fs::write(
        dir.path().join("live.toml"),
        "[memory]\nbudget_gb = 0.01\ntrunk_gb = 0.002\ncache_gb = 0.002\n[compute]\nthreads = 1\n",
    )
    .unwrap();
    let config = dir.path().join("config.toml");
    std::fs::write(
        &config,
        format!(
            r#"
[stack]
name = "child-env"
live_profile = "live.toml"
work_dir = "work"
unsupported = ["rerank_pins", "deepen_warm_set", "stage_speculative", "rebalance_trunk_cache"]

[stack.bench]
argv = [{bench:?}, "--out", "{{out}}"]

[menu]
dir = {menu:?}

[cycle]
proposer = "bandit"
interval_s = 0.01

[measure]
memory_headroom_gb = 0.0

[daemon]
metrics_listen = "127.0.0.1:{port}"
{MODEL}"#,
            menu = Path::new(env!("CARGO_MANIFEST_DIR")).join("experiments"),
            port = common::free_port(),
        ),
    )
    .unwrap();
    let environ = first_child_environment(&config, &pids, &dir.path().join("daemon.log"));
    assert_none_of(&environ, &[KEY_VAR], &[KEY]);
}

#[test]
fn on_postgres_neither_the_password_nor_the_model_key_reaches_a_child() {
    let _heavy = common::heavy();
    let url = fresh_database("child_env");
    let password = std::env::var(PG_PASSWORD_VAR)
        .unwrap_or_else(|_| panic!("{PG_PASSWORD_VAR} is not set: run through scripts/test.sh"));
    let dir = tempfile::tempdir().unwrap();
    let (bench, pids) = bench_double(dir.path());
    let config = host_config(dir.path(), &url, "child-env-pg", &bench);
    let mut text = std::fs::read_to_string(&config).unwrap();
    text.push_str(MODEL);
    std::fs::write(&config, text).unwrap();
    let environ = first_child_environment(&config, &pids, &dir.path().join("daemon.log"));
    assert_none_of(&environ, &[KEY_VAR, PG_PASSWORD_VAR], &[KEY, &password]);
}
