//! A win waiting for its confirmation whose menu entry the stack has since
//! declared unsupported (`[stack] unsupported`): the real daemon does not
//! measure it, fails the cycle with a reason naming the experiment, the
//! entry and the fix, and does not retry it on the next cycle.

use crate::demo::Demo;
use crate::staged;
use orchestrator::profile::Profile;
use serde_json::Value;

const INIT: &str = r#""--seed", "1", "--layers", "4", "--experts", "8", "--top-k", "2", "--d-model", "32", "--d-expert", "64", "--d-dense", "64", "--heads", "2", "--vocab", "256""#;
const START: &str = "[memory]\nbudget_gb = 0.01\ntrunk_gb = 0.001\ncache_gb = 0.004\n[far]\naddr = \"FAR\"\nwarm_set = 0\n";

/// Every entry but `remeasure` unsupported: no candidate protocol needs a
/// floor first, so the first cycle is the confirmation of the pending win.
const UNSUPPORTED: &str = "\n[stack]\nunsupported = [\"rerank_pins\", \"deepen_warm_set\", \"stage_speculative\", \"rebalance_trunk_cache\"]\n";

fn run_one_cycle(demo: &Demo) -> (Option<i32>, String, String) {
    let out = demo.cmd().args(["run", "--cycles", "1"]).output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Every experiment (with its verdict) of the ledger's cycles.
fn experiments(cycles: &[Value]) -> Vec<&Value> {
    cycles
        .iter()
        .flat_map(|c| c["verdicts"].as_array().into_iter().flatten())
        .collect()
}

#[test]
fn a_win_of_an_entry_declared_unsupported_since_is_not_confirmed_and_the_cycle_says_why() {
    let demo = Demo::new("bandit", START, INIT, 3 * 32 * 64 * 4, 4);
    let config = demo.path("config.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    assert!(text.contains("\n[stack]\n"), "config.toml has [stack]");
    std::fs::write(&config, text.replacen("\n[stack]\n", UNSUPPORTED, 1)).unwrap();

    // The live profile as the embedded stack would first write it, and a
    // win of rebalance_trunk_cache on it that no experiment confirmed yet
    // (measured before the entry was declared unsupported).
    let live_path = demo.path("ledger/profiles/live.toml");
    std::fs::create_dir_all(live_path.parent().unwrap()).unwrap();
    std::fs::copy(demo.path("start.toml"), &live_path).unwrap();
    let live = Profile::load(&live_path).unwrap();
    let db = demo.path("ledger/orchestrator.db");
    staged::unconfirmed_win(&db, &live, &staged::variant(&live, 0.008));

    let (code, stdout, stderr) = run_one_cycle(&demo);
    let log = format!("stdout:\n{stdout}\nstderr:\n{stderr}");
    assert_ne!(code, Some(101), "the daemon panicked:\n{log}");
    assert_eq!(
        code,
        Some(1),
        "the one cycle failed, so the run did:\n{log}"
    );
    let cycles = demo.ledger();
    assert_eq!(
        cycles.len(),
        2,
        "the seeded cycle and this one: {cycles:#?}"
    );
    let cycle = &cycles[0];
    assert_eq!(cycle["cycle"]["status"], "failed", "{cycle:#}");
    let reason = cycle["cycle"]["error"].as_str().unwrap_or_default();
    for needed in [
        "experiment #1",
        "rebalance_trunk_cache",
        "[stack] unsupported",
        "its confirmation cannot run",
    ] {
        assert!(reason.contains(needed), "{needed:?} missing in {reason:?}");
    }
    assert!(
        stdout.contains("its confirmation cannot run"),
        "the cycle line says why:\n{log}"
    );
    // The confirmation is recorded failed with the same reason, nothing of
    // the unsupported entry was measured, and nothing is staged.
    let confirmation = &cycle["verdicts"][0];
    assert_eq!(confirmation["confirmation_of"], 1, "{cycle:#}");
    assert_eq!(confirmation["verdict"]["kind"], "failed", "{cycle:#}");
    assert_eq!(confirmation["verdict"]["reason"], reason, "{cycle:#}");
    assert_eq!(confirmation["verdict"]["pairs"], 0, "{cycle:#}");
    assert!(staged::stages(&config).is_empty());

    // The next cycle does not try the same confirmation again.
    let (code, stdout, stderr) = run_one_cycle(&demo);
    let log = format!("stdout:\n{stdout}\nstderr:\n{stderr}");
    assert_ne!(code, Some(101), "the daemon panicked:\n{log}");
    let cycles = demo.ledger();
    assert_eq!(cycles.len(), 3, "{cycles:#?}");
    let confirmations = experiments(&cycles)
        .into_iter()
        .filter(|e| e["confirmation_of"] == 1)
        .count();
    assert_eq!(confirmations, 1, "confirmed once only:\n{log}\n{cycles:#?}");
    demo.assert_children_gone();
}
