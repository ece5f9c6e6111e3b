//! `orchestrator run` end to end on the embedded default: the real daemon
//! preparing and starting the real tinyk3 stack (serve + expert server) as
//! its children, the served model choosing, the bench measuring, the ledger
//! recording, and a person approving.

mod common;
mod demo;

use demo::Demo;

const TINY_INIT: &str = r#""--seed", "1", "--layers", "4", "--experts", "16", "--top-k", "2", "--d-model", "64", "--d-expert", "128", "--d-dense", "256", "--heads", "2", "--vocab", "512""#;

const TINY_START: &str = "[memory]\nbudget_gb = 0.01\ntrunk_gb = 0.001\ncache_gb = 0.004\n[far]\naddr = \"FAR\"\nwarm_set = 0\n";

#[test]
fn ten_cycles_on_the_default_config_each_with_one_verdict() {
    let demo = Demo::new("model", TINY_START, TINY_INIT, 3 * 64 * 128 * 4, 8);
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
