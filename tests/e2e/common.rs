//! Helpers shared by the end-to-end tests: the real tinyk3 binary, tiny
//! checkpoints, configs and profiles in temp dirs, process liveness checks.

use std::path::{Path, PathBuf};
use std::process::Command;

use orchestrator::config::Config;
use orchestrator::profile::{Profile, ProfileFile};

/// The tinyk3 binary: `TINYK3_BIN`, else the newest of
/// `$CARGO_TARGET_DIR` or `<workspace>/target`, `release` or `debug`.
pub fn tinyk3_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("TINYK3_BIN") {
        let p = PathBuf::from(p);
        assert!(p.is_file(), "TINYK3_BIN={} is not a file", p.display());
        return p;
    }
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut roots = vec![workspace.join("target")];
    if let Some(t) = std::env::var_os("CARGO_TARGET_DIR") {
        roots.insert(0, workspace.join(t));
    }
    roots
        .iter()
        .flat_map(|r| [r.join("release/tinyk3"), r.join("debug/tinyk3")])
        .filter_map(|p| {
            let modified = std::fs::metadata(&p).ok()?.modified().ok()?;
            Some((modified, p))
        })
        .max()
        .map(|(_, p)| p)
        .unwrap_or_else(|| {
            panic!(
                "no tinyk3 binary under {:?}; build it: cargo build -p tinyk3 (or set TINYK3_BIN)",
                roots
            )
        })
}

/// Writes a tiny checkpoint (a few hundred KB) into `dir`.
pub fn init_tiny(dir: &Path, seed: u64) {
    let seed = seed.to_string();
    init_model(
        dir,
        &[
            "--layers",
            "4",
            "--experts",
            "8",
            "--top-k",
            "2",
            "--d-model",
            "32",
            "--d-expert",
            "64",
            "--d-dense",
            "64",
            "--heads",
            "2",
            "--vocab",
            "256",
            "--seed",
            &seed,
        ],
    );
}

/// Writes a checkpoint into `dir` with `tinyk3 init` and its `args`.
pub fn init_model(dir: &Path, args: &[&str]) {
    let out = Command::new(tinyk3_bin())
        .args(["init", "--out"])
        .arg(dir)
        .args(args)
        .output()
        .expect("run tinyk3 init");
    assert!(
        out.status.success(),
        "tinyk3 init failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A temp dir with a tiny checkpoint `model-<seed>` in it.
pub fn tiny_model(seed: u64) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join(format!("model-{seed}"));
    init_tiny(&model, seed);
    (dir, model)
}

/// A config in `dir` whose bench is `argv` (TOML array items, already
/// quoted), with the given run timeout and memory headroom.
/// A free loopback port (bound, then released): nothing answers on it
/// until a test starts something there.
pub fn free_port() -> u16 {
    use std::collections::HashSet;
    use std::sync::Mutex;
    // A port is free only until someone binds it: the kernel may hand the
    // same one to two calls in a row (seen: a test's metrics port equal to
    // its far tier's), so no port goes out twice in this process.
    static GIVEN: Mutex<Option<HashSet<u16>>> = Mutex::new(None);
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    let given = given.get_or_insert_with(HashSet::new);
    loop {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        if given.insert(port) {
            return port;
        }
    }
}

pub fn config_with_bench(
    dir: &Path,
    argv: &str,
    extra_bench: &str,
    timeout_s: f64,
    headroom_gb: f64,
) -> Config {
    let text = format!(
        r#"
[stack]
name = "tinyk3-test"
live_profile = "live.toml"
work_dir = "work"

[stack.bench]
argv = [{argv}]
{extra_bench}

[cycle]
proposer = "bandit"

[measure]
run_timeout_s = {timeout_s}
memory_headroom_gb = {headroom_gb}
min_pairs = 4
max_pairs = 6
"#
    );
    let path = dir.join("config.toml");
    std::fs::write(&path, &text).unwrap();
    Config::load(&path).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

/// The bench argv for tinyk3 on `model`, as TOML array items.
pub fn tinyk3_argv(model: &Path) -> String {
    format!(
        r#""{}", "bench", "{}", "--prompt", "tiers", "--gen", "6",
           "--cache-gb", "{{memory.cache_gb}}", "--trunk-gb", "{{memory.trunk_gb}}",
           "--threads", "{{compute.threads}}", "--out", "{{out}}""#,
        tinyk3_bin().display(),
        model.display()
    )
}

/// `orchestrator --config CONFIG ARGS...`, run to its end (at most 10 min).
pub fn orchestrator(config: &Path, args: &[&str]) -> std::process::Output {
    assert_cmd::Command::cargo_bin("orchestrator")
        .unwrap()
        .arg("--config")
        .arg(config)
        .args(args)
        .timeout(std::time::Duration::from_secs(600))
        .output()
        .unwrap()
}

/// A small valid profile written to `dir/name`.
pub fn profile_file(dir: &Path, name: &str) -> ProfileFile {
    let profile = Profile::parse(
        "[memory]\nbudget_gb = 0.01\ntrunk_gb = 0.002\ncache_gb = 0.002\n[compute]\nthreads = 1\n",
        Path::new(name),
    )
    .unwrap();
    ProfileFile::write(&dir.join(name), profile).unwrap()
}

/// Whether `pid` is still a live process (a zombie waiting for its parent
/// to reap it counts as gone: it runs nothing and holds no memory).
pub fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => false,
        Ok(stat) => {
            // pid (comm) STATE ...; comm may contain spaces, so split after ')'.
            let state = stat
                .rsplit_once(')')
                .map(|(_, r)| r.trim_start())
                .unwrap_or("");
            !(state.starts_with('Z') || state.starts_with('X'))
        }
    }
}

/// An executable script in `dir`; its name must say it is a test double.
pub fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// The one lock of the tests that load the machine or measure time: CPU
/// hogs, real engine servers (llama.cpp, kimi-k3-in-c, `tinyk3 serve`
/// shadows, Chromium), the daemon's measured cycles, many processes racing
/// one ledger, and assertions on how long something took (a kill within
/// 5 s, a deadline derived from recorded runs, a verdict against a noise
/// floor). As separate programs these never ran beside a test of another
/// file; in one program, on 2 cores, they would (two llama.cpp cycles at
/// once pushed one past its 600 s timeout). A heavy test holds the guard
/// for its whole body; light tests (the CLI, reports, the ledger API, single
/// runs without a time bound) take nothing and run beside anything.
///
/// A tokio mutex, so async tests can hold it across their awaits
/// ([`heavy_async`]). It has no poisoning: a heavy test that fails releases
/// it while unwinding, and the next one runs as if nothing happened.
static HEAVY: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The guard of [`HEAVY`] for a plain test.
pub fn heavy() -> tokio::sync::MutexGuard<'static, ()> {
    HEAVY.blocking_lock()
}

/// The guard of [`HEAVY`] for an async test, whose runtime a blocking
/// wait would stall.
pub async fn heavy_async() -> tokio::sync::MutexGuard<'static, ()> {
    HEAVY.lock().await
}

#[test]
fn a_heavy_test_that_fails_leaves_the_lock_to_the_next() {
    let failed = std::thread::spawn(|| {
        let _heavy = heavy();
        panic!("a heavy test failing while it holds the lock");
    })
    .join();
    assert!(failed.is_err());
    // A poisoning lock would fail every later heavy test here.
    drop(heavy());
}
