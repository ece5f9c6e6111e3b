//! Tests of rerank_pins on hand-made heat and traces.

use std::collections::BTreeMap;
use std::path::Path;

use proptest::prelude::*;

use super::*;
use crate::heat::Shape;
use crate::menu::ParamValue;
use crate::plan::plan;
use crate::profile::Profile;

const EB: u64 = 1_000_000;

fn proposal(n: i64) -> Proposal {
    Proposal {
        experiment: MenuId::RerankPins,
        params: BTreeMap::from([("pin_count".to_string(), ParamValue::Integer(n))]),
    }
}

fn live(cache_slots: u64, pins: u64) -> Profile {
    let mut p = Profile::parse(
        "[memory]\nbudget_gb = 1.0\ntrunk_gb = 0.1\ncache_gb = 0.0\n",
        Path::new("live.toml"),
    )
    .unwrap();
    p.memory.cache_gb = (cache_slots * EB) as f64 / 1e9;
    if pins > 0 {
        p.pins = Pins {
            file: "pins.k3experts".into(),
            count: pins,
        };
    }
    p
}

/// Two layers, one expert per layer per step: `cycle` lists layer-0 experts
/// visited in turn (layer 1 always asks expert 0).
fn trace_of(cycle: &[u32], steps: usize) -> Trace {
    let shape = Shape::new(2, 8, "t").unwrap();
    let mut reqs = Vec::new();
    for s in 0..steps {
        reqs.push(Expert {
            layer: 0,
            expert: cycle[s % cycle.len()],
        });
        reqs.push(Expert {
            layer: 1,
            expert: 0,
        });
    }
    Trace::from_requests(shape, reqs).unwrap()
}

struct Fixture {
    live: Profile,
    heat: Heat,
    trace: Trace,
    current: Option<PinList>,
}

impl Fixture {
    fn new(live: Profile, trace: Trace) -> Fixture {
        Fixture {
            heat: Heat::of_requests(trace.shape(), trace.requests()),
            live,
            trace,
            current: None,
        }
    }

    fn ctx(&self) -> PlanContext<'_> {
        PlanContext {
            live: &self.live,
            live_path: Path::new("/ledger/live.toml"),
            profiles_dir: Path::new("/ledger/profiles"),
            expert_bytes: Some(EB),
            cache_spare_slots: 0,
            heat: Some(&self.heat),
            trace: Some(&self.trace),
            current_pins: self.current.as_ref(),
            top_k: Some((1, "given")),
            menu: None,
        }
    }
}

/// Layer 0 loops over experts 1..=7 with 1 twice as often, at a reuse
/// distance (4 distinct lookups) that a 4-slot LRU just misses; layer 1
/// always asks expert 0.
fn skewed() -> Trace {
    trace_of(&[1, 2, 3, 4, 1, 5, 6, 7], 400)
}

#[test]
fn pins_the_hottest_and_pays_for_them_with_cache() {
    // A 4-slot LRU keeps only layer 1's expert; pinning the two hottest
    // (layer 1 expert 0, layer 0 expert 1) serves both always.
    let f = Fixture::new(live(4, 0), skewed());
    let plan = plan(&f.ctx(), &proposal(2)).unwrap();
    let c = &plan.candidate;
    assert_eq!(c.pins.count, 2);
    assert_eq!(cache_slots(c.memory.cache_gb, EB), 2, "4 slots - 2 pinned");
    assert!(c.pins.file.starts_with("pins-") && c.pins.file.ends_with(".k3experts"));
    assert_eq!(
        plan.candidate_path,
        Path::new("/ledger/profiles").join(format!("{}.toml", c.digest()))
    );
    // The list goes where the candidate is read from and where the live
    // profile (which it may become) is.
    let dirs: Vec<&Path> = plan
        .files
        .iter()
        .map(|(p, _)| p.parent().unwrap())
        .collect();
    assert_eq!(dirs, [Path::new("/ledger/profiles"), Path::new("/ledger")]);
    let list = PinList::parse(std::str::from_utf8(&plan.files[0].1).unwrap(), "x").unwrap();
    assert_eq!(list.top_k, 1);
    let e = |layer, expert| Expert { layer, expert };
    assert_eq!(list.pinned(2), [(e(1, 0), 400), (e(0, 1), 100)]);
    assert_eq!(list.rows.len(), 8, "the whole ranking, for the far tier");
    let p = &plan.notes["predicted_hit_rate"];
    let rate = |k: &str| p[k].as_f64().unwrap();
    assert!(rate("new_pins") > rate("current_pins"), "{p}");
    assert!(
        rate("belady_min") >= rate("new_pins") && rate("belady_min") >= rate("lru"),
        "{p}"
    );
    assert_eq!(plan.notes["replay"]["slots"], 4);
    assert_eq!(plan.notes["replay"]["lookups"], 800);
}

#[test]
fn a_shifting_working_set_is_not_predicted_to_help() {
    // Two phases with disjoint layer-0 experts: all-LRU follows the shift,
    // pins chosen by overall heat serve only one phase.
    let mut reqs = trace_of(&[1, 2, 3], 300).requests().to_vec();
    reqs.extend(trace_of(&[4, 5, 6], 300).requests());
    let f = Fixture::new(
        live(4, 0),
        Trace::from_requests(Shape::new(2, 8, "t").unwrap(), reqs).unwrap(),
    );
    let err = plan(&f.ctx(), &proposal(3)).unwrap_err();
    let PlanRefusal::NotPredictedToHelp { why, notes } = &err else {
        panic!("{err}");
    };
    assert!(why.contains("recorded lookups"), "{why}");
    for k in ["new_pins", "current_pins", "lru", "belady_min"] {
        assert!(notes["predicted_hit_rate"][k].is_f64(), "{notes}");
    }
    assert_eq!(err.notes(), Some(notes));
}

/// Every expert of both layers asked once: nothing comes back, so no cache
/// of any size serves a lookup (a short bench's few forward passes).
fn no_reuse() -> Trace {
    let reqs = (0..2)
        .flat_map(|layer| (0..8).map(move |expert| Expert { layer, expert }))
        .collect();
    Trace::from_requests(Shape::new(2, 8, "t").unwrap(), reqs).unwrap()
}

/// Fixture with the first `pins` experts of the heat's ranking pinned live.
fn pinned_live(cache_slots: u64, pins: u64, trace: Trace) -> Fixture {
    let mut f = Fixture::new(live(cache_slots, pins), trace);
    f.current = Some(PinList {
        shape: f.heat.shape(),
        top_k: 1,
        rows: f.heat.ranked(),
    });
    f
}

#[test]
fn fewer_pins_on_a_trace_without_reuse_are_measured_not_refused() {
    let f = pinned_live(2, 4, no_reuse());
    // The replay gives the 4 live pins their 4 preloaded hits and 0 pins
    // nothing: on this trace no cache hits, whatever its size.
    let planned = plan(&f.ctx(), &proposal(0)).unwrap();
    assert_eq!(planned.candidate.pins.count, 0);
    assert_eq!(
        cache_slots(planned.candidate.memory.cache_gb, EB),
        6,
        "2 + the 4 pins' bytes"
    );
    let replay = &planned.notes["replay"];
    assert_eq!(replay["lru"]["hits"], 0, "{replay}");
    assert!(replay["new_pins"]["hits"].as_u64() < replay["current_pins"]["hits"].as_u64());
    let why = planned.notes["replay_cannot_value_the_cache"]
        .as_str()
        .unwrap();
    assert!(
        why.contains("plain LRU hits 0") && why.contains("4 fewer pins"),
        "{why}"
    );

    // Where lookups come back, the replay values the cache and its
    // prediction stands: fewer pins that lose there are refused.
    let f = pinned_live(2, 2, skewed());
    let err = plan(&f.ctx(), &proposal(0)).unwrap_err();
    assert_eq!(err.kind(), "not_predicted_to_help", "{err}");
    // At the same count nothing moves to the cache: both sets are
    // preloaded alike and the replay judges them, reuse or not.
    let mut f = pinned_live(4, 2, no_reuse());
    if let Some(list) = f.current.as_mut() {
        list.rows.reverse(); // the live pins: the two coldest of the ranking
    }
    let err = plan(&f.ctx(), &proposal(2)).unwrap_err();
    assert_eq!(err.kind(), "not_predicted_to_help", "{err}");
}

#[test]
fn the_same_pins_again_is_no_change() {
    let f = pinned_live(2, 2, skewed());
    assert_eq!(
        plan(&f.ctx(), &proposal(2)).unwrap_err(),
        PlanRefusal::NoChange
    );
}

#[test]
fn refusals_say_what_to_do() {
    let f = Fixture::new(live(4, 0), skewed());
    let err = plan(&f.ctx(), &proposal(9)).unwrap_err().to_string();
    assert!(
        err.contains("8 experts with recorded heat") && err.contains("pin_count <= 8"),
        "{err}"
    );
    let err = plan(&f.ctx(), &proposal(4)).unwrap_err().to_string();
    assert!(
        err.contains("top-k = 1") && err.contains("pin_count <= 3"),
        "{err}"
    );

    // An engine needing one slot beyond top-k (kimi-k3-in-c) leaves one
    // pin fewer; found on the real engine, which refused the plan's cache.
    let mut ctx = f.ctx();
    ctx.cache_spare_slots = 1;
    assert!(plan(&f.ctx(), &proposal(3)).is_ok());
    let err = plan(&ctx, &proposal(3)).unwrap_err().to_string();
    assert!(
        err.contains("top-k = 1 + 1 spare") && err.contains("pin_count <= 2"),
        "{err}"
    );

    let mut ctx = f.ctx();
    ctx.expert_bytes = None;
    let err = plan(&ctx, &proposal(2)).unwrap_err();
    assert_eq!(err.kind(), "missing_input");
    assert!(err.to_string().contains("expert_bytes"), "{err}");
    let mut ctx = f.ctx();
    ctx.trace = None;
    assert!(
        plan(&ctx, &proposal(2))
            .unwrap_err()
            .to_string()
            .contains("heat_trace")
    );
    let mut ctx = f.ctx();
    ctx.heat = None;
    assert!(
        plan(&ctx, &proposal(2))
            .unwrap_err()
            .to_string()
            .contains("expert_hist.json")
    );

    let g = Fixture::new(live(4, 2), skewed());
    let err = plan(&g.ctx(), &proposal(2)).unwrap_err().to_string();
    assert!(
        err.contains("/ledger/pins.k3experts") && err.contains("pins.count = 0"),
        "{err}"
    );
}

/// The pin counts the menu closes on a live profile are exactly those the
/// planner refuses for the cache, at the least top-k (1), whatever the heat.
#[test]
fn the_counts_closed_on_the_menu_are_those_the_cache_cannot_pay_for() {
    let menu = crate::menu::Menu::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("experiments"))
        .expect("the repository's menu loads");
    for (slots, pins, spare) in [
        (4, 0, 0),
        (4, 0, 1),
        (6, 0, 0),
        (2, 0, 0),
        (1, 0, 0),
        (3, 2, 0),
    ] {
        let mut f = Fixture::new(live(slots, pins), skewed());
        if pins > 0 {
            f.current = Some(PinList {
                shape: f.heat.shape(),
                top_k: 1,
                rows: f.heat.ranked(),
            });
        }
        let mut ctx = f.ctx();
        ctx.cache_spare_slots = spare;
        // top-k 1, the fixture's, whether the pin list says so or not.
        let sizes = StackSizes {
            expert_bytes: Some(EB),
            cache_spare_slots: spare,
            top_k: f.current.as_ref().map(|p| p.top_k),
            experts: None,
        };
        let from = RerankPins.infeasible_from(&f.live, &sizes).unwrap().from as i64;
        assert_eq!(
            from,
            (slots + pins) as i64 - spare as i64,
            "{slots} {pins} {spare}"
        );
        let cache = "leaves the cache fewer than";
        // The heat's 8 experts bound the rest (a refusal of its own).
        for n in from..=8 {
            let err = plan(&ctx, &proposal(n)).unwrap_err().to_string();
            assert!(err.contains(cache), "{slots} {pins} {spare} {n}: {err}");
        }
        if let Err(e) = plan(&ctx, &proposal(from - 1)) {
            assert!(
                !e.to_string().contains(cache),
                "{slots} {pins} {spare}: {e}"
            );
        }
        let closed = crate::plan::infeasible(&f.live, &sizes, &menu);
        assert_eq!(closed.len(), 1, "{closed:?}");
        let c = &closed[0];
        assert_eq!(
            (c.experiment, c.lo, c.hi),
            (MenuId::RerankPins, from as f64, 512.0)
        );
        assert!(
            c.why
                .starts_with(&format!("is more than the {} pins", from - 1)),
            "{}",
            c.why
        );
    }
    // A known top-k of 3 closes two counts more, each refused.
    let f = Fixture::new(live(6, 0), skewed());
    let mut ctx = f.ctx();
    ctx.top_k = Some((3, "given"));
    let sizes = StackSizes {
        expert_bytes: Some(EB),
        cache_spare_slots: 0,
        top_k: Some(3),
        experts: None,
    };
    let from = RerankPins.infeasible_from(&f.live, &sizes).unwrap().from as i64;
    assert_eq!(from, 4);
    assert!(
        plan(&ctx, &proposal(4))
            .unwrap_err()
            .to_string()
            .contains("top-k = 3")
    );
    if let Err(e) = plan(&ctx, &proposal(3)) {
        assert!(
            !e.to_string().contains("leaves the cache fewer than"),
            "{e}"
        );
    }
    // Without the expert size nothing is known.
    assert!(crate::plan::infeasible(&live(4, 0), &StackSizes::default(), &menu).is_empty());
}

#[test]
fn top_k_is_read_off_the_trace_when_not_given() {
    let f = Fixture::new(live(4, 0), skewed());
    let mut ctx = f.ctx();
    ctx.top_k = None;
    let plan = plan(&ctx, &proposal(2)).unwrap();
    assert_eq!(
        plan.notes["top_k"],
        serde_json::json!({ "value": 1, "from": "the trace" })
    );
}

#[test]
fn pin_count_zero_unpins_and_returns_the_bytes_to_the_cache() {
    // Two never-requested pins leave a 2-slot LRU, which misses layer 0's
    // expert 1 (reused 2 lookups apart); 4 slots of LRU catch it.
    let mut f = Fixture::new(live(2, 2), trace_of(&[1, 2, 1, 3], 400));
    let e = |layer, expert| Expert { layer, expert };
    f.current = Some(PinList {
        shape: f.heat.shape(),
        top_k: 1,
        rows: vec![(e(1, 5), 0), (e(1, 6), 0)],
    });
    let plan = plan(&f.ctx(), &proposal(0)).unwrap();
    assert_eq!(plan.candidate.pins, Pins::default());
    assert_eq!(cache_slots(plan.candidate.memory.cache_gb, EB), 4);
    assert!(plan.files.is_empty());
}

proptest! {
    /// Whatever the split, trunk + cache + pinned bytes stay what they were,
    /// the engine's own formula finds the planned number of cache slots, and
    /// the candidate is a valid profile.
    #[test]
    fn the_budget_stays_fixed(
        cache_bytes in 2 * EB..40 * EB,
        current in 0u64..4,
        n in 0i64..6,
        eb in prop::sample::select(vec![EB, 1_572_864, 24_576, 3]),
    ) {
        let mut f = Fixture::new(live(0, current), skewed());
        f.live.memory.cache_gb = cache_bytes as f64 / 1e9;
        f.current = Some(PinList { shape: f.heat.shape(), top_k: 1, rows: f.heat.ranked().into_iter().rev().collect() });
        let mut ctx = f.ctx();
        ctx.expert_bytes = Some(eb);
        if let Ok(plan) = plan(&ctx, &proposal(n)) {
            let c = &plan.candidate;
            prop_assert!(c.validate().is_ok());
            let before = cache_bytes + current * eb;
            let after = gb_to_bytes(c.memory.cache_gb) + c.pins.count * eb;
            prop_assert_eq!(before, after);
            let pool = cache_bytes + current * eb;
            prop_assert_eq!(cache_slots(c.memory.cache_gb, eb), (pool - n as u64 * eb) / eb);
        }
    }
}
