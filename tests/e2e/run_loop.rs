//! `orchestrator run` end to end on the embedded default: the real daemon
//! preparing and starting the real tinyk3 stack (serve + expert server) as
//! its children, the served model choosing, the bench measuring, the ledger
//! recording, and a person approving.

use crate::common;
use crate::demo::Demo;

const TINY_INIT: &str = r#""--seed", "1", "--layers", "4", "--experts", "16", "--top-k", "2", "--d-model", "64", "--d-expert", "128", "--d-dense", "256", "--heads", "2", "--vocab", "512""#;

const TINY_START: &str = "[memory]\nbudget_gb = 0.01\ntrunk_gb = 0.001\ncache_gb = 0.004\n[far]\naddr = \"FAR\"\nwarm_set = 0\n";

#[test]
fn ten_cycles_on_the_default_config_each_with_one_verdict() {
    let _heavy = crate::common::heavy();
    let demo = Demo::new("model", TINY_START, TINY_INIT, 3 * 64 * 128 * 4, 8);
    let out = demo.cmd().args(["run", "--cycles", "10"]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stdout.lines().filter(|l| l.starts_with("cycle")).collect();
    assert_eq!(
        lines.len(),
        10,
        "one line per cycle:\n{stdout}\nstderr:\n{stderr}"
    );
    // stderr is a pipe here, not a terminal: progress comes as log lines
    // (a newcomer's piped demo showed nothing until the first verdict).
    // (A cycle shorter than the progress tick, 1 s, prints none: the
    // first one, a floor of the tiny live server, sometimes is.)
    assert!(stderr.contains("progress: cycle "), "{stderr}");
    assert!(!stderr.contains('\r'), "no redrawn terminal line in a log");
    // Each line gives the speed of the profile it measured against: the
    // live one, or (`[on top of #N]`) the staged win it builds on.
    assert!(
        lines.iter().all(|l| {
            let against = if l.contains("[on top of #") {
                "base "
            } else {
                "live "
            };
            l.contains(against) && l.contains("s/token")
        }),
        "{stdout}"
    );

    let cycles = demo.ledger();
    assert_eq!(cycles.len(), 10);
    // The exit rule: 1 only when the last cycle (the newest) failed, since
    // on the default stack they cannot all fail without the last one.
    let last_failed = cycles[0]["cycle"]["status"] == "failed";
    assert_eq!(
        out.status.code(),
        Some(i32::from(last_failed)),
        "stdout:\n{stdout}\nstderr:\n{stderr}"
    );
    // The first cycle has no floor: its A/B is judged against the bound,
    // or measures the floor itself (its A/A's verdict beside the A/B's),
    // or it is the proposer's own remeasure.
    let first = cycles.last().unwrap()["verdicts"].as_array().unwrap();
    assert!(
        first.iter().any(|v| v["menu_id"] == "remeasure"
            || v["verdict"]["floor_is_bound"] == true
            || v["verdict"]["kind"] == "rejected"),
        "the first cycle judges without a floor or measures one: {first:?}"
    );
    for c in &cycles {
        let verdicts = c["verdicts"].as_array().unwrap();
        // One verdict, or an A/B's and the A/A of the floor it measured.
        let own = verdicts
            .iter()
            .filter(|v| v["menu_id"] != "remeasure")
            .count();
        assert!(
            verdicts.len() == 1 || (verdicts.len() == 2 && own == 1),
            "exactly one verdict per cycle (and its floor's): {c}"
        );
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

/// A config in `dir` whose bench is `program` (and nothing else), with the
/// bandit proposer and a quick tick, and a live profile beside it.
fn failing_bench_config(dir: &std::path::Path, program: &std::path::Path) -> std::path::PathBuf {
    let text = format!(
        r#"
[stack]
name = "tinyk3-test"
live_profile = "live.toml"
work_dir = "work"
unsupported = ["rerank_pins", "deepen_warm_set", "stage_speculative"]

[stack.bench]
argv = [{program:?}, "--out", "{{out}}", "--cache-gb", "{{memory.cache_gb}}", "--trunk-gb", "{{memory.trunk_gb}}"]

[menu]
dir = {menu:?}

[cycle]
proposer = "bandit"
interval_s = 0.01
max_consecutive_failures = 100

[measure]
run_timeout_s = 10
memory_headroom_gb = 0.0
min_pairs = 4
max_pairs = 6

[daemon]
metrics_listen = "127.0.0.1:{port}"
"#,
        port = common::free_port(),
        menu = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("experiments"),
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

#[test]
fn a_run_whose_every_cycle_failed_exits_1() {
    let dir = tempfile::tempdir().unwrap();
    // A test double of a bench that always fails the way a broken engine does.
    let bench = common::script(
        dir.path(),
        "bench-double-that-always-exits-3.sh",
        "echo 'cannot load the model' >&2; exit 3",
    );
    let config = failing_bench_config(dir.path(), &bench);
    // Only `remeasure` on the menu, so every cycle runs the bench: the
    // bandit's rebalance choices on this tiny profile may round to the live
    // one and be refused unmeasured (`rejected`, not `failed`).
    let text = std::fs::read_to_string(&config).unwrap();
    let narrowed = text.replace(
        r#"unsupported = ["rerank_pins", "deepen_warm_set", "stage_speculative"]"#,
        r#"unsupported = ["rerank_pins", "deepen_warm_set", "stage_speculative", "rebalance_trunk_cache"]"#,
    );
    assert_ne!(narrowed, text, "the menu is narrowed");
    std::fs::write(&config, narrowed).unwrap();
    let out = assert_cmd::Command::cargo_bin("orchestrator")
        .unwrap()
        .arg("--config")
        .arg(&config)
        .args(["run", "--cycles", "2"])
        .timeout(std::time::Duration::from_secs(300))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stdout.lines().filter(|l| l.starts_with("cycle")).collect();
    assert_eq!(lines.len(), 2, "two cycles ran:\n{stdout}\n{stderr}");
    assert!(
        lines.iter().all(|l| l.contains("failed")),
        "both cycles failed:\n{stdout}"
    );
    assert_eq!(
        out.status.code(),
        Some(1),
        "every cycle failed, so the run failed:\n{stdout}\n{stderr}"
    );
    assert!(
        stderr.contains("2 of 2 cycle(s) failed"),
        "the error says how many failed: {stderr}"
    );
    // The first run of an A/B is a warmup, stored `arm = warmup`: the
    // message calls it that, not `baseline`.
    assert!(
        lines[0].contains("run #0 (warmup of the baseline) could not be measured"),
        "{}",
        lines[0]
    );
    // No floor is scheduled first: with the bound `max_noise_floor` an
    // A/B without a floor is judged against it, so the proposer chose each
    // cycle's A/B (issue #16).
    let out = assert_cmd::Command::cargo_bin("orchestrator")
        .unwrap()
        .arg("--config")
        .arg(&config)
        .arg("ledger")
        .output()
        .unwrap();
    let listing = String::from_utf8_lossy(&out.stdout);
    let cycles: Vec<&str> = listing.lines().filter(|l| l.starts_with("cycle")).collect();
    assert_eq!(cycles.len(), 2, "{listing}");
    assert!(
        cycles
            .iter()
            .all(|l| l.contains("proposer bandit") && !l.contains("scheduled")),
        "{listing}"
    );
}

#[test]
fn a_run_stopped_by_sigint_mid_cycle_calls_that_cycle_aborted_everywhere() {
    let dir = tempfile::tempdir().unwrap();
    let started = dir.path().join("bench-started");
    // A test double of a slow engine: says it started, then takes a minute.
    let bench = common::script(
        dir.path(),
        "bench-double-that-sleeps.sh",
        &format!("touch {}; sleep 60", started.display()),
    );
    let config = failing_bench_config(dir.path(), &bench);
    let bin = assert_cmd::cargo::cargo_bin("orchestrator");
    let child = std::process::Command::new(bin)
        .arg("--config")
        .arg(&config)
        .args(["run", "--cycles", "3"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !started.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the bench never started"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // SAFETY: kill(2) on our own child's pid.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGINT) }, 0);
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = stdout.lines().filter(|l| l.starts_with("cycle")).collect();
    // The cycle the bench ran in is the last; before it, the proposer's
    // choices the planner refused close at once (no floor is measured
    // first: an A/B is judged against the bound until it needs one).
    let last = lines
        .last()
        .unwrap_or_else(|| panic!("no cycle line: {stdout}\n{stderr}"));
    assert!(
        last.contains("  aborted ") && lines.iter().all(|l| !l.contains("  failed ")),
        "{stdout}"
    );
    assert!(
        lines[..lines.len() - 1]
            .iter()
            .all(|l| l.contains("  rejected ")),
        "{stdout}"
    );
    assert!(
        stderr.contains(&format!(
            "stopped after {} cycle(s) (0 failed, 1 aborted)",
            lines.len()
        )),
        "{stderr}"
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "an interrupted cycle is not a failed one: {stderr}"
    );
}

#[test]
fn run_help_states_the_exit_rule() {
    let out = assert_cmd::Command::cargo_bin("orchestrator")
        .unwrap()
        .args(["run", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(
        help.contains("Exit status: with --cycles or --once, 1 when the last cycle failed")
            && help.contains("every cycle that ran to its end failed"),
        "{help}"
    );
}
