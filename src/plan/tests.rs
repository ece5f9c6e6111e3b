//! Tests of what every planner shares, and of the planners other than
//! rerank_pins (which has its own file).

use std::collections::BTreeMap;
use std::path::Path;

use proptest::prelude::*;

use super::*;
use crate::heat::Shape;
use crate::menu::{Menu, ParamValue};

fn live() -> Profile {
    Profile::parse(
        "[memory]\nbudget_gb = 1.0\ntrunk_gb = 0.25\ncache_gb = 0.5\n\
         [far]\naddr = \"127.0.0.1:7070\"\nwarm_set = 64\n",
        Path::new("live.toml"),
    )
    .unwrap()
}

fn ctx<'a>(live: &'a Profile, dir: &'a Path) -> PlanContext<'a> {
    PlanContext {
        live,
        live_path: Box::leak(dir.join("live.toml").into_boxed_path()),
        profiles_dir: Box::leak(dir.join("profiles").into_boxed_path()),
        expert_bytes: Some(1_572_864),
        cache_spare_slots: 0,
        heat: None,
        trace: None,
        current_pins: None,
        top_k: Some((4, "given")),
        menu: None,
    }
}

fn proposal(id: MenuId, params: &[(&str, ParamValue)]) -> Proposal {
    Proposal {
        experiment: id,
        params: params
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect::<BTreeMap<_, _>>(),
    }
}

fn int(id: MenuId, name: &str, n: i64) -> Proposal {
    proposal(id, &[(name, ParamValue::Integer(n))])
}

fn fraction(x: f64) -> Proposal {
    proposal(
        MenuId::RebalanceTrunkCache,
        &[("trunk_fraction", ParamValue::Number(x))],
    )
}

#[test]
fn every_planner_touches_only_the_knobs_its_menu_entry_declares() {
    let menu = Menu::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("experiments")).unwrap();
    let live = live();
    let dir = Path::new("/ledger");
    let cases = [
        int(MenuId::DeepenWarmSet, "warm_set", 128),
        int(MenuId::StageSpeculative, "draft_len", 3),
        fraction(0.5),
        proposal(MenuId::Remeasure, &[]),
    ];
    for p in cases {
        assert_eq!(planner(p.experiment).id(), p.experiment);
        let plan = plan(&ctx(&live, dir), &p).unwrap();
        let touches = &menu.entry(p.experiment).unwrap().touches;
        for change in live.diff(&plan.candidate) {
            assert!(
                touches.contains(&change.knob),
                "{} changed {change}",
                p.experiment
            );
        }
    }
    // rerank_pins is covered in its own tests; it touches pins.* and cache_gb.
    assert_eq!(planner(MenuId::RerankPins).id(), MenuId::RerankPins);
}

#[test]
fn warm_set_needs_a_far_tier_and_a_difference_it_can_make() {
    let mut live = live();
    let dir = Path::new("/ledger");
    let plan = plan(
        &ctx(&live, dir),
        &int(MenuId::DeepenWarmSet, "warm_set", 96),
    )
    .unwrap();
    assert_eq!(plan.candidate.far.warm_set, 96);
    assert_eq!(plan.notes["warm_set"]["from"], 64);

    let same = plan_err(&live, dir, &int(MenuId::DeepenWarmSet, "warm_set", 64));
    assert_eq!(same, PlanRefusal::NoChange);

    // 2 x 8 = 16 experts: warm sets of 64 and 96 both hold them all.
    let heat = Heat::parse(r#"{"n_layers":2,"n_experts":8,"counts":{"0,1":3}}"#, "h").unwrap();
    let mut c = ctx(&live, dir);
    c.heat = Some(&heat);
    let err = super::plan(&c, &int(MenuId::DeepenWarmSet, "warm_set", 96)).unwrap_err();
    assert_eq!(err.kind(), "not_predicted_to_help", "{err}");
    assert!(err.to_string().contains("all 16 experts"), "{err}");

    live.far.addr.clear();
    let err = plan_err(&live, dir, &int(MenuId::DeepenWarmSet, "warm_set", 96));
    assert_eq!(err.kind(), "not_applicable");
    assert!(err.to_string().contains("far.addr is empty"), "{err}");
}

/// The warm sets the menu closes with no heat recorded yet are those the
/// planner refuses once one is: from the experts the far tier can be asked
/// for on, while the live warm set holds them all.
#[test]
fn the_warm_sets_closed_on_the_menu_are_the_live_set_again() {
    let menu = Menu::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("experiments")).unwrap();
    let dir = Path::new("/ledger");
    let closed_warm = |live: &Profile, sizes: &StackSizes| -> Vec<crate::menu::Closed> {
        infeasible(live, sizes, &menu)
            .into_iter()
            .filter(|c| c.experiment == MenuId::DeepenWarmSet)
            .collect()
    };
    // 2 x 8 = 16 experts, as the checkpoint declares and the heat counts;
    // the live warm set of 64 holds them all.
    let heat = Heat::parse(r#"{"n_layers":2,"n_experts":8,"counts":{"0,1":3}}"#, "h").unwrap();
    let sizes = StackSizes {
        experts: Some(16),
        ..StackSizes::default()
    };
    let mut live = live();
    for pins in [0, 4] {
        live.pins.count = pins;
        live.pins.file = if pins > 0 {
            "pins.txt".into()
        } else {
            String::new()
        };
        let closed = closed_warm(&live, &sizes);
        assert_eq!(closed.len(), 1, "{closed:?}");
        let (from, to) = (closed[0].lo as i64, closed[0].hi as i64);
        assert_eq!(from, 16 - pins as i64, "{closed:?}");
        assert!(
            closed[0].why.contains("the live profile again"),
            "{closed:?}"
        );
        let mut c = ctx(&live, dir);
        c.heat = Some(&heat);
        for n in [from, from + 1, 96, to] {
            let err = super::plan(&c, &int(MenuId::DeepenWarmSet, "warm_set", n)).unwrap_err();
            assert_eq!(err.kind(), "not_predicted_to_help", "{pins} {n}: {err}");
        }
        // One short of them all is another profile, and open.
        super::plan(&c, &int(MenuId::DeepenWarmSet, "warm_set", from - 1)).unwrap();
    }
    // A live set short of them all closes nothing: a deeper one differs.
    live.pins = Default::default();
    live.far.warm_set = 8;
    assert!(closed_warm(&live, &sizes).is_empty());
    // Without the checkpoint's count, or a far tier, nothing is known.
    live.far.warm_set = 64;
    assert!(closed_warm(&live, &StackSizes::default()).is_empty());
    live.far.addr.clear();
    assert!(closed_warm(&live, &sizes).is_empty());
}

fn plan_err(live: &Profile, dir: &Path, p: &Proposal) -> PlanRefusal {
    plan(&ctx(live, dir), p).unwrap_err()
}

#[test]
fn speculative_sets_the_draft_length() {
    let live = live();
    let dir = Path::new("/ledger");
    let plan = plan(
        &ctx(&live, dir),
        &int(MenuId::StageSpeculative, "draft_len", 4),
    )
    .unwrap();
    assert_eq!(plan.candidate.speculative.draft_len, 4);
    assert_eq!(
        plan_err(&live, dir, &int(MenuId::StageSpeculative, "draft_len", 0)),
        PlanRefusal::NoChange
    );
}

#[test]
fn rebalance_moves_ram_between_trunk_and_cache_in_whole_mb() {
    let live = live();
    let dir = Path::new("/ledger");
    let plan = plan(&ctx(&live, dir), &fraction(0.5)).unwrap();
    assert_eq!(plan.candidate.memory.trunk_gb, 0.375);
    assert_eq!(plan.candidate.memory.cache_gb, 0.375);
    assert_eq!(plan.notes["cache_slots"]["from"], 317);
    let odd = plan_err_or(&live, dir, &fraction(0.123_456_7));
    assert_eq!(odd.candidate.memory.trunk_gb, 0.093);
    assert_eq!(
        plan_err(&live, dir, &fraction(1.0 / 3.0)),
        PlanRefusal::NoChange,
        "a third of 0.75 GB is the live 0.25"
    );
    let err = plan_err(&live, dir, &fraction(1.0)).to_string();
    assert!(
        err.contains("top-k = 4") && err.contains("largest trunk_fraction that works is 0.990"),
        "{err}"
    );
}

/// Found by the fault matrix: with top-k unknown (no pin list, no usable
/// trace) `trunk_fraction = 1` planned a profile with no expert cache, which
/// the engine refuses, so the cycle failed instead of the plan being refused.
#[test]
fn rebalance_never_plans_an_empty_cache_even_with_top_k_unknown() {
    let live = live();
    let dir = Path::new("/ledger");
    let mut c = ctx(&live, dir);
    c.top_k = None;
    let err = plan(&c, &fraction(1.0)).unwrap_err().to_string();
    assert!(err.contains("top-k = 1"), "{err}");
    assert!(plan(&c, &fraction(0.5)).is_ok());
}

/// Found on the real kimi-k3-in-c engine: it refuses a cache of fewer than
/// top-k + 1 slots, and the planner allowed top-k, so a candidate the engine
/// would not start passed the plan. `cache_spare_slots` says how many more.
#[test]
fn rebalance_keeps_the_spare_slots_the_engine_needs() {
    let live = live();
    let dir = Path::new("/ledger");
    // 743 MB of trunk leaves 7 MB of cache: 4 slots of 1.57 MB, not 5.
    let tight = fraction(743.0 / 750.0);
    assert!(plan(&ctx(&live, dir), &tight).is_ok());
    let mut c = ctx(&live, dir);
    c.cache_spare_slots = 1;
    let err = plan(&c, &tight).unwrap_err().to_string();
    assert!(
        err.contains("top-k = 4 + 1 spare")
            && err.contains("largest trunk_fraction that works is 0.989"),
        "{err}"
    );
}

/// Found on the real kimi-k3-in-c engine: the refusal named 0.975, a value
/// off the menu's 0.05 grid that no search proposes; it names the largest
/// value on the grid that works instead.
#[test]
fn a_rebalance_refusal_names_the_largest_value_on_the_menus_grid() {
    let live = live();
    let dir = Path::new("/ledger");
    let menu = Menu::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("experiments")).unwrap();
    let c = PlanContext {
        menu: Some(&menu),
        ..ctx(&live, dir)
    };
    // 0.75 GB in all, 4 slots of 1.57 MB kept: 0.9916 exactly, 0.95 on the grid.
    let err = plan(&c, &fraction(1.0)).unwrap_err().to_string();
    assert!(
        err.contains("the largest trunk_fraction on the menu's grid (steps of 0.05 from 0) that works is 0.95"),
        "{err}"
    );
    let on_grid = fraction(0.95);
    assert!(plan(&c, &on_grid).is_ok(), "the value named works");
}

/// Found on the real kimi-k3-in-c engine: with the full model's slot size
/// against a tiny checkpoint's RAM every rebalance was refused with "the
/// largest trunk_fraction that works is 0.000", which did not work either.
#[test]
fn a_rebalance_no_split_can_serve_says_none_works() {
    // The real engine's test profile: 0.05 GB of trunk and cache.
    let mut live = live();
    live.memory.trunk_gb = 0.02;
    live.memory.cache_gb = 0.03;
    let dir = Path::new("/ledger");
    let menu = Menu::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("experiments")).unwrap();
    for menu in [None, Some(&menu)] {
        let c = PlanContext {
            expert_bytes: Some(17_555_456),
            cache_spare_slots: 1,
            menu,
            ..ctx(&live, dir)
        };
        let err = plan(&c, &fraction(0.5)).unwrap_err().to_string();
        assert!(
            err.contains("no trunk_fraction works: all 0.05 GB as cache holds 2 of them")
                && err.contains("[stack] expert_bytes")
                && !err.contains("0.000"),
            "{err}"
        );
    }
}

fn plan_err_or(live: &Profile, dir: &Path, p: &Proposal) -> Plan {
    plan(&ctx(live, dir), p).unwrap()
}

#[test]
fn remeasure_is_the_live_profile_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let live = live();
    let live_path = dir.path().join("live.toml");
    std::fs::write(
        &live_path,
        "# a comment the live file keeps\n".to_string() + &live.canonical(),
    )
    .unwrap();
    let c = ctx(&live, dir.path());
    let plan = plan(&c, &proposal(MenuId::Remeasure, &[])).unwrap();
    assert!(plan.candidate_is_live);
    assert_eq!(plan.candidate, live);
    assert_eq!(plan.candidate_path, live_path);
    write_plan(&plan).unwrap();
    let text = std::fs::read_to_string(&live_path).unwrap();
    assert!(
        text.starts_with("# a comment"),
        "the live file was rewritten: {text}"
    );
    assert!(!dir.path().join("profiles").exists());
}

#[test]
fn write_plan_writes_files_then_the_candidate_by_digest() {
    let dir = tempfile::tempdir().unwrap();
    let live = live();
    let plan = plan(
        &ctx(&live, dir.path()),
        &int(MenuId::StageSpeculative, "draft_len", 2),
    )
    .unwrap();
    let mut plan = plan;
    let list = dir.path().join("profiles").join("pins-x.k3experts");
    plan.files
        .push((list.clone(), b"K3EXPERTS 1 1 1 1\n".to_vec()));
    write_plan(&plan).unwrap();
    assert_eq!(std::fs::read(&list).unwrap(), b"K3EXPERTS 1 1 1 1\n");
    let written = Profile::load(&plan.candidate_path).unwrap();
    assert_eq!(written, plan.candidate);
    assert_eq!(
        plan.candidate_path.file_name().unwrap().to_string_lossy(),
        format!("{}.toml", written.digest())
    );
    // Idempotent, and a file in the way is an error that names it.
    write_plan(&plan).unwrap();
    plan.files[0].0 = dir.path().join("live.toml").join("sub");
    std::fs::write(dir.path().join("live.toml"), "x").unwrap();
    let err = write_plan(&plan).unwrap_err().to_string();
    assert!(err.contains("live.toml/sub"), "{err}");
}

#[test]
fn refusals_have_stable_kinds() {
    let kinds = [
        PlanRefusal::NotApplicable { why: "x".into() }.kind(),
        PlanRefusal::NoChange.kind(),
        PlanRefusal::NotPredictedToHelp {
            why: "x".into(),
            notes: Value::Null,
        }
        .kind(),
        PlanRefusal::MissingInput {
            what: "x".into(),
            fix: "y".into(),
        }
        .kind(),
        PlanRefusal::Invalid { why: "x".into() }.kind(),
    ];
    assert_eq!(
        kinds,
        [
            "not_applicable",
            "no_change",
            "not_predicted_to_help",
            "missing_input",
            "invalid"
        ]
    );
}

#[test]
fn a_proposal_that_skipped_validation_is_refused_not_panicked_on() {
    let live = live();
    let err = plan(
        &ctx(&live, Path::new("/l")),
        &proposal(MenuId::StageSpeculative, &[]),
    )
    .unwrap_err();
    assert!(err.to_string().contains("draft_len"), "{err}");
    let err = plan(
        &ctx(&live, Path::new("/l")),
        &int(MenuId::StageSpeculative, "draft_len", -1),
    )
    .unwrap_err();
    assert_eq!(err.kind(), "invalid");
}

#[test]
fn top_k_comes_from_the_caller_then_the_pin_list_then_the_trace() {
    let live = live();
    let shape = Shape::new(2, 4, "t").unwrap();
    let list = PinList {
        shape,
        top_k: 2,
        rows: vec![],
    };
    let e = |layer, expert| crate::heat::Expert { layer, expert };
    let trace = Trace::from_requests(shape, vec![e(0, 1), e(0, 2), e(1, 0), e(1, 3)]).unwrap();
    let mut c = ctx(&live, Path::new("/l"));
    assert_eq!(c.top_k(), Some((4, "given")));
    c.top_k = None;
    c.trace = Some(&trace);
    assert_eq!(c.top_k(), Some((2, "the trace")));
    c.current_pins = Some(&list);
    assert_eq!(c.top_k(), Some((2, "the live pin list")));
}

proptest! {
    /// The engine floors `cache_gb * 1e9 / expert_bytes`; the planner's GB
    /// value must give exactly the slots it planned, and stay within a hair
    /// of the bytes.
    #[test]
    fn cache_gb_gives_the_engine_the_planned_slots(slots in 0u64..100_000, extra in 0u64..1000, eb in 1u64..4_000_000) {
        let bytes = slots * eb + extra.min(eb - 1);
        let gb = cache_gb_holding(bytes, Some(eb));
        prop_assert_eq!(cache_slots(gb, eb), bytes / eb);
        prop_assert_eq!(gb_to_bytes(gb), bytes);
    }

    /// Every rebalance keeps trunk + cache, rounds the trunk to whole MB and
    /// passes Profile::validate.
    #[test]
    fn rebalance_keeps_the_total(x in 0.0f64..=1.0, trunk_mb in 0u64..4000, cache_mb in 50u64..4000) {
        let mut live = live();
        live.memory.trunk_gb = trunk_mb as f64 / 1000.0;
        live.memory.cache_gb = cache_mb as f64 / 1000.0;
        live.memory.budget_gb = 8.0;
        if let Ok(plan) = plan(&ctx(&live, Path::new("/l")), &fraction(x)) {
            let m = &plan.candidate.memory;
            prop_assert!(plan.candidate.validate().is_ok());
            prop_assert_eq!(gb_to_bytes(m.trunk_gb) + gb_to_bytes(m.cache_gb), (trunk_mb + cache_mb) * 1_000_000);
            prop_assert_eq!(gb_to_bytes(m.trunk_gb) % 1_000_000, 0);
        }
    }
}

/// The value each planner names as unchanged plans to the live profile
/// itself, on profiles with and without speculation, and on splits that
/// are not round numbers; a step of the grid away, it changes the profile.
#[test]
fn the_unchanged_value_of_each_planner_plans_to_the_live_profile() {
    let dir = Path::new("/ledger");
    let profiles = [
        live(),
        Profile::parse(
            "[memory]\nbudget_gb = 0.01\ntrunk_gb = 0.001\ncache_gb = 0.004\n\
             [far]\naddr = \"127.0.0.1:1\"\nwarm_set = 0\n[speculative]\ndraft_len = 3\n",
            Path::new("live.toml"),
        )
        .unwrap(),
        Profile::parse(
            "[memory]\nbudget_gb = 8.0\ntrunk_gb = 2.0\ncache_gb = 2.0\n",
            Path::new("live.toml"),
        )
        .unwrap(),
    ];
    for live in &profiles {
        let same = unchanged(live);
        let ids: Vec<MenuId> = same.iter().map(|(id, _, _)| *id).collect();
        // rerank_pins follows the heat, not the profile alone, but for a
        // profile with no pins, whose re-rank of none is itself.
        let rerank: &[MenuId] = if live.pins.count == 0 {
            &[MenuId::RerankPins]
        } else {
            &[]
        };
        let expected: Vec<MenuId> = rerank
            .iter()
            .copied()
            .chain([
                MenuId::DeepenWarmSet,
                MenuId::StageSpeculative,
                MenuId::RebalanceTrunkCache,
            ])
            .collect();
        assert_eq!(ids, expected);
        for (id, param, value) in same {
            if id == MenuId::RerankPins {
                // A step away needs the heat: `rerank_pins_tests`.
                let p = proposal(id, &[(param, value.clone())]);
                assert_eq!(
                    plan(&ctx(live, dir), &p).unwrap_err(),
                    PlanRefusal::NoChange
                );
                continue;
            }
            if id == MenuId::DeepenWarmSet && live.far.addr.is_empty() {
                continue;
            }
            let p = proposal(id, &[(param, value.clone())]);
            // Expert sizes of the small profile are not these; no top-k check.
            let c = PlanContext {
                expert_bytes: None,
                ..ctx(live, dir)
            };
            assert_eq!(
                plan(&c, &p).unwrap_err(),
                PlanRefusal::NoChange,
                "{id} {param} {value:?}"
            );
            let moved = match value {
                ParamValue::Integer(n) => ParamValue::Integer(n + 1),
                ParamValue::Number(x) => ParamValue::Number(x + 0.2),
                other => other,
            };
            assert!(
                plan(&c, &proposal(id, &[(param, moved)])).is_ok(),
                "{id}: a step away is a change"
            );
        }
    }
    // Each profile here has no pins: rerank_pins' 0 comes first.
    let split = unchanged(&profiles[2]);
    assert_eq!(split[3].2, ParamValue::Number(0.5), "a 50/50 split is 0.5");
    let small = unchanged(&profiles[1]);
    assert_eq!(small[2].2, ParamValue::Integer(3));
    assert_eq!(small[3].2, ParamValue::Number(0.2));
}

/// The band [`Planner::same_within`] gives is the planner's own rounding:
/// on the demo's 150 MB split (seen: a served model proposing 0.33333 to
/// 0.33339 against the live 1/3, one refused cycle each) every fraction
/// inside it plans the live profile, and one just outside does not.
#[test]
fn fractions_within_the_resolution_of_the_live_split_plan_the_live_profile() {
    let dir = Path::new("/ledger");
    let live = Profile::parse(
        "[memory]\nbudget_gb = 0.3\ntrunk_gb = 0.05\ncache_gb = 0.1\n",
        Path::new("live.toml"),
    )
    .unwrap();
    let c = PlanContext {
        expert_bytes: None,
        ..ctx(&live, dir)
    };
    let (param, half) = planner(MenuId::RebalanceTrunkCache)
        .same_within(&live)
        .unwrap();
    assert_eq!(param, "trunk_fraction");
    assert!((half - 0.5 / 150.0).abs() < 1e-12, "{half}");
    let centre = 1.0 / 3.0;
    for k in -9..=9 {
        let x = centre + half * f64::from(k) / 10.0;
        assert_eq!(
            plan(&c, &fraction(x)).unwrap_err(),
            PlanRefusal::NoChange,
            "{x}"
        );
    }
    for x in [0.33334, 0.33339, 0.3365] {
        assert_eq!(
            plan(&c, &fraction(x)).unwrap_err(),
            PlanRefusal::NoChange,
            "{x}"
        );
    }
    for x in [centre - 1.2 * half, centre + 1.2 * half, 0.35] {
        assert!(plan(&c, &fraction(x)).is_ok(), "{x} is a change");
    }
    let all = resolutions(&live);
    assert_eq!(all.len(), 1, "only the split is rounded: {all:?}");
}
