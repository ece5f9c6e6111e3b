//! Tests of the combined candidate: changes of different knobs add up,
//! memory moves combine as deltas, and combinations the budget rules or a
//! shared knob forbid are refused with the rule and the parts named.

use std::collections::BTreeMap;
use std::path::Path;

use super::*;
use crate::menu::{ParamValue, Proposal};
use crate::plan::{PlanContext, plan};

const EB: u64 = 1_572_864;

fn live() -> Profile {
    Profile::parse(
        "[memory]\nbudget_gb = 1.0\ntrunk_gb = 0.25\ncache_gb = 0.5\n\
         [far]\naddr = \"127.0.0.1:7070\"\nwarm_set = 64\n",
        Path::new("live.toml"),
    )
    .unwrap()
}

fn ctx(live: &Profile) -> PlanContext<'_> {
    PlanContext {
        live,
        live_path: Path::new("/ledger/profiles/live.toml"),
        profiles_dir: Path::new("/ledger/profiles"),
        expert_bytes: Some(EB),
        cache_spare_slots: 0,
        heat: None,
        trace: None,
        current_pins: None,
        top_k: Some((4, "given")),
        menu: None,
    }
}

/// A real planner's candidate for one parameter.
fn planned(live: &Profile, id: MenuId, name: &str, v: ParamValue) -> Profile {
    let p = Proposal {
        experiment: id,
        params: BTreeMap::from([(name.to_string(), v)]),
    };
    plan(&ctx(live), &p).unwrap().candidate
}

/// What rerank_pins stages: `n` pins paid out of the cache.
fn pinned(live: &Profile, n: u64) -> Profile {
    let mut p = live.clone();
    p.memory.cache_gb =
        super::cache_gb_holding(gb_to_bytes(live.memory.cache_gb) - n * EB, Some(EB));
    p.pins.file = "pins-0123456789abcdef.k3experts".into();
    p.pins.count = n;
    p
}

fn part<'a>(label: &'a str, menu_id: MenuId, candidate: &'a Profile) -> Part<'a> {
    Part {
        label,
        menu_id,
        candidate,
    }
}

#[test]
fn wins_on_different_knobs_add_up_and_memory_moves_combine() {
    let live = live();
    let split = planned(
        &live,
        MenuId::RebalanceTrunkCache,
        "trunk_fraction",
        ParamValue::Number(0.2),
    );
    let warm = planned(
        &live,
        MenuId::DeepenWarmSet,
        "warm_set",
        ParamValue::Integer(128),
    );
    let draft = planned(
        &live,
        MenuId::StageSpeculative,
        "draft_len",
        ParamValue::Integer(3),
    );
    let pins = pinned(&live, 20);
    let plan = compose(
        &ctx(&live),
        &[
            part("stage #1", MenuId::RebalanceTrunkCache, &split),
            part("stage #2", MenuId::DeepenWarmSet, &warm),
            part("stage #3", MenuId::StageSpeculative, &draft),
            part("stage #4", MenuId::RerankPins, &pins),
        ],
    )
    .unwrap();
    let c = &plan.candidate;
    assert_eq!(c.far.warm_set, 128);
    assert_eq!(c.speculative.draft_len, 3);
    assert_eq!(
        (c.pins.count, c.pins.file.as_str()),
        (20, pins.pins.file.as_str())
    );
    assert_eq!(c.memory.trunk_gb, split.memory.trunk_gb);
    // The split's cache, less what the pins cost: both moves applied.
    let cache = gb_to_bytes(split.memory.cache_gb) - 20 * EB;
    assert_eq!(gb_to_bytes(c.memory.cache_gb), cache);
    assert_eq!(cache_slots(c.memory.cache_gb, EB), cache / EB);
    assert_eq!(c.memory.budget_gb, live.memory.budget_gb);
    // Each part's changes are in the notes, for the ledger.
    assert_eq!(plan.notes["parts"].as_array().unwrap().len(), 4);
    assert!(plan.candidate_path.starts_with("/ledger/profiles"));
}

#[test]
fn pins_paid_out_of_a_cache_another_win_shrank_are_refused() {
    let live = live();
    // Alone, each leaves a working cache: the split 10 slots, the pins
    // hundreds. Together the 8 pins come out of the 10 slots left.
    let split = planned(
        &live,
        MenuId::RebalanceTrunkCache,
        "trunk_fraction",
        ParamValue::Number(0.979),
    );
    assert_eq!(cache_slots(split.memory.cache_gb, EB), 10);
    let pins = pinned(&live, 8);
    let err = compose(
        &ctx(&live),
        &[
            part(
                "stage #1 (rebalance_trunk_cache)",
                MenuId::RebalanceTrunkCache,
                &split,
            ),
            part("stage #2 (rerank_pins)", MenuId::RerankPins, &pins),
        ],
    )
    .unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, ComposeRefusal::Budget { .. }), "{msg}");
    assert!(
        msg.contains("2 slot(s)") && msg.contains("fewer than top-k = 4"),
        "{msg}"
    );
    // With more pins than the shrunk cache holds at all, the cache would go
    // below zero: refused too, naming the knob.
    let many = pinned(&live, 100);
    let err = compose(
        &ctx(&live),
        &[
            part("stage #1", MenuId::RebalanceTrunkCache, &split),
            part("stage #2", MenuId::RerankPins, &many),
        ],
    )
    .unwrap_err();
    assert!(err.to_string().contains("memory.cache_gb"), "{err}");
}

#[test]
fn two_parts_setting_one_knob_differently_are_refused() {
    let live = live();
    let warm = planned(
        &live,
        MenuId::DeepenWarmSet,
        "warm_set",
        ParamValue::Integer(128),
    );
    let mut other = planned(
        &live,
        MenuId::StageSpeculative,
        "draft_len",
        ParamValue::Integer(3),
    );
    other.far.warm_set = 32;
    let err = compose(
        &ctx(&live),
        &[
            part("stage #1", MenuId::DeepenWarmSet, &warm),
            part("stage #2", MenuId::StageSpeculative, &other),
        ],
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "stage #1 sets far.warm_set to 128 and stage #2 to 32: they change the same knob, so \
         their effects do not add up; approve the better one alone"
    );
    // The same value set twice is no conflict.
    other.far.warm_set = 128;
    assert!(
        compose(
            &ctx(&live),
            &[
                part("stage #1", MenuId::DeepenWarmSet, &warm),
                part("stage #2", MenuId::StageSpeculative, &other),
            ],
        )
        .is_ok()
    );
}

#[test]
fn one_part_or_two_of_one_entry_is_no_composition() {
    let live = live();
    let a = planned(
        &live,
        MenuId::DeepenWarmSet,
        "warm_set",
        ParamValue::Integer(128),
    );
    let b = planned(
        &live,
        MenuId::DeepenWarmSet,
        "warm_set",
        ParamValue::Integer(256),
    );
    let one = [part("stage #1", MenuId::DeepenWarmSet, &a)];
    assert!(matches!(
        compose(&ctx(&live), &one),
        Err(ComposeRefusal::TooFew { .. })
    ));
    let same = [
        part("stage #1", MenuId::DeepenWarmSet, &a),
        part("stage #2", MenuId::DeepenWarmSet, &b),
    ];
    assert!(matches!(
        compose(&ctx(&live), &same),
        Err(ComposeRefusal::TooFew { .. })
    ));
}
