//! The daemon standing aside for the live server's users, end to end: the
//! real `orchestrator run` against a real `tinyk3 serve` that a real client
//! keeps busy defers its cycle, records it deferred with the reason (cycle
//! line, `orchestrator ledger`, its JSON), and measures once the users are
//! gone. (A block a user interrupts mid-measurement is re-run:
//! `measure_ab::a_block_a_live_user_interrupted_is_discarded_for_both_arms_and_rerun`.)

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::common;
use crate::live_server::{BusyUser, Serve};

/// A config measuring the tiny checkpoint with the bench, whose live
/// server is `addr` with its load mapped, standing aside for up to 4 s.
fn config(dir: &Path, model: &Path, addr: &str) -> PathBuf {
    let text = format!(
        r#"
[stack]
name = "tinyk3-test"
live_profile = "live.toml"
work_dir = "work"
unsupported = ["rerank_pins", "deepen_warm_set", "stage_speculative"]

[stack.bench]
argv = [{argv}]

[stack.surface]
base_url = "http://{addr}"
prompts = ["Which experts should stay pinned?"]
max_tokens = 8

[stack.metrics]
url = "http://{addr}/metrics"

[stack.metrics.names]
live_requests_processing = "tinyk3_requests_in_flight"
live_requests_waiting = "tinyk3_requests_queued"
live_requests_total = "tinyk3_requests_total"

[menu]
dir = {menu:?}

[cycle]
proposer = "bandit"
interval_s = 0.01

[measure]
run_timeout_s = 60
memory_headroom_gb = 0.0
min_pairs = 4
max_pairs = 4
floor_pairs = 10

[daemon]
metrics_listen = "127.0.0.1:{port}"
stand_aside_quiet_s = 1
stand_aside_max_wait_s = 4
"#,
        argv = common::tinyk3_argv(model),
        menu = Path::new(env!("CARGO_MANIFEST_DIR")).join("experiments"),
        port = common::free_port(),
    );
    let path = dir.join("config.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn newest_cycle(config: &Path) -> Value {
    let out = common::orchestrator(config, &["ledger", "--limit", "1", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let cycles: Value = serde_json::from_slice(&out.stdout).unwrap();
    cycles[0].clone()
}

#[test]
fn a_live_server_kept_busy_by_its_users_defers_the_cycle_and_it_is_recorded_so() {
    let _heavy = common::heavy();
    let (dir, model) = common::tiny_model(5);
    let live = common::profile_file(dir.path(), "live.toml");
    let serve = Serve::start(&model, &live.path);
    let config = config(dir.path(), &model, &serve.addr);

    let user = BusyUser::start(&serve.addr, 200);
    let out = common::orchestrator(&config, &["run", "--cycles", "1"]);
    let served = user.served.load(std::sync::atomic::Ordering::SeqCst);
    drop(user);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(served > 0, "the user was served meanwhile: {stderr}");
    // A deferral is no failure of the run.
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    let line = stdout
        .lines()
        .find(|l| l.starts_with("cycle"))
        .unwrap_or_else(|| panic!("a cycle line:\n{stdout}\n{stderr}"));
    assert!(line.contains("  deferred "), "{line}");
    assert!(
        line.contains("(deferred: the live server was serving")
            && line.contains("stand_aside_above = 0"),
        "the line says why: {line}"
    );

    // Recorded deferred, at its start, with the reason; nothing measured.
    let cycle = newest_cycle(&config);
    assert_eq!(cycle["cycle"]["status"], "aborted", "{cycle:#}");
    let deferral = &cycle["deferral"];
    assert_eq!(deferral["during"], "start", "{cycle:#}");
    assert!(
        deferral["reason"]
            .as_str()
            .unwrap()
            .contains("stand_aside_above = 0"),
        "{cycle:#}"
    );
    assert!(deferral["waited_s"].as_f64().unwrap() >= 4.0, "{cycle:#}");
    assert!(
        deferral["live_requests"].as_f64().unwrap() >= 1.0,
        "{cycle:#}"
    );
    let verdicts = cycle["verdicts"].as_array().unwrap();
    assert_eq!(verdicts.len(), 1, "{cycle:#}");
    assert_eq!(
        verdicts[0]["menu_id"],
        Value::Null,
        "no experiment: {cycle:#}"
    );
    assert_eq!(verdicts[0]["verdict"]["kind"], "failed");
    let listing = common::orchestrator(&config, &["ledger"]);
    let listing = String::from_utf8_lossy(&listing.stdout);
    let row = listing.lines().find(|l| l.starts_with("cycle")).unwrap();
    assert!(
        row.contains(" deferred ") && row.contains("deferred at start after waiting 4 s"),
        "{listing}"
    );

    // The users gone, the next cycle measures.
    let out = common::orchestrator(&config, &["run", "--cycles", "1"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stdout.contains("deferred"),
        "nobody to stand aside for:\n{stdout}\n{stderr}"
    );
    let cycle = newest_cycle(&config);
    assert_eq!(cycle.get("deferral"), None, "{cycle:#}");
    assert_ne!(cycle["cycle"]["status"], "aborted", "{cycle:#}");
}
