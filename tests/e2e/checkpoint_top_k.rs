//! The planners know top-k from the checkpoint before any pin list or trace
//! exists: the real daemon on the embedded tinyk3 stack, from a start with
//! no pin list on a checkpoint whose tokens each use 4 experts a layer, its
//! menu narrowed to `rebalance_trunk_cache`.
//!
//! The start's RAM (1.5 MB of trunk, 1.55 MB of cache: 63 slots) is split
//! in whole MB, so `trunk_fraction = 1.0` leaves 2 slots: enough for one
//! expert, the least a planner assumed when nothing said top-k, and fewer
//! than the 4 the engine needs. The bandit's first choice on the line is
//! 1.0; with top-k unknown, the planner let it through and the engine
//! refused the run (exit 2), failing the first cycle of every seed of the
//! shoot-out's B (2026-12-07). With top-k read from the checkpoint's
//! `manifest.json` (`plan::checkpoint`), the menu closes 1.0 and the cycle
//! measures a split the engine runs.
//!
//! The same checkpoint declares its experts in all (4 layers of 8): a live
//! warm set of 32 holds every one, so every deeper warm set is the live
//! profile again and the menu closes them before any heat is recorded.
//! Without that, the bandit's first warm set was the deepest, 1024,
//! measured against a live set that already held everything (the
//! shoot-out's B, 2026-12-07).

use crate::demo::Demo;
use crate::faults::edit_config;

const INIT: &str = r#""--seed", "1", "--layers", "4", "--experts", "8", "--top-k", "4", "--d-model", "32", "--d-expert", "64", "--d-dense", "64", "--heads", "2", "--vocab", "256""#;

/// One expert of [`INIT`]'s checkpoint: three f32 matrices of 32 x 64.
const EXPERT_BYTES: u64 = 3 * 32 * 64 * 4;

const START: &str = "[memory]\nbudget_gb = 0.01\ntrunk_gb = 0.0015\ncache_gb = 0.00155\n[far]\naddr = \"FAR\"\nwarm_set = 0\n";

#[test]
fn a_first_cycle_with_no_pin_list_keeps_top_k_cache_slots() {
    let _heavy = crate::common::heavy();
    let demo = Demo::new("bandit", START, INIT, EXPERT_BYTES, 4);
    edit_config(&demo, |t| {
        t.replacen(
            "\n[stack]\n",
            "\n[stack]\nunsupported = [\"rerank_pins\", \"deepen_warm_set\", \"stage_speculative\"]\n",
            1,
        )
    });
    let log = demo.run_ok(&["run", "--cycles", "1"]);
    assert!(
        !log.contains("refused its arguments"),
        "the engine refused a candidate the planner let through:\n{log}"
    );
    let ab = the_one_cycles_ab(&demo, "rebalance_trunk_cache", &log);
    assert_ne!(ab["verdict"]["kind"], "failed", "{ab:#}\n{log}");
    let fraction = ab["parameters"]["trunk_fraction"].as_f64().unwrap();
    assert!(fraction < 1.0, "{ab:#}");
    // The split measured keeps at least top-k slots, as the engine needs.
    let candidate = demo.read_ledger(async |l| {
        let id =
            orchestrator::ledger::ExperimentId(ab["verdict"]["experiment_id"].as_i64().unwrap());
        l.experiment(id).await.unwrap()
    });
    let profile = orchestrator::profile::Profile::parse(
        &candidate.candidate_profile,
        std::path::Path::new("candidate.toml"),
    )
    .unwrap();
    let slots = (profile.memory.cache_gb * 1e9 / EXPERT_BYTES as f64).floor();
    assert!(slots >= 4.0, "{slots} slots: {profile:?}");
    demo.assert_children_gone();
}

#[test]
fn a_live_warm_set_holding_every_expert_is_not_measured_deeper() {
    let _heavy = crate::common::heavy();
    let start = START.replace("warm_set = 0", "warm_set = 32");
    let demo = Demo::new("bandit", &start, INIT, EXPERT_BYTES, 4);
    edit_config(&demo, |t| {
        t.replacen(
            "\n[stack]\n",
            "\n[stack]\nunsupported = [\"rerank_pins\", \"stage_speculative\", \"rebalance_trunk_cache\"]\n",
            1,
        )
    });
    let log = demo.run_ok(&["run", "--cycles", "1"]);
    let ab = the_one_cycles_ab(&demo, "deepen_warm_set", &log);
    let warm = ab["parameters"]["warm_set"].as_i64().unwrap();
    assert!(
        warm < 32,
        "a warm set of {warm} holds no more than the live 32 of 32:\n{ab:#}"
    );
    demo.assert_children_gone();
}

/// The verdict of the A/B of `menu_id` in the ledger's one cycle.
fn the_one_cycles_ab(demo: &Demo, menu_id: &str, log: &str) -> serde_json::Value {
    let cycles = demo.ledger();
    assert_eq!(cycles.len(), 1, "{cycles:#?}");
    cycles[0]["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["menu_id"] == menu_id)
        .cloned()
        .unwrap_or_else(|| panic!("cycle 1 measured {menu_id}: {cycles:#?}\n{log}"))
}
