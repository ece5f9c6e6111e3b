//! Snapshot tests of the prompt text.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{TimeZone, Utc};
use serde_json::json;

use super::*;
use crate::brain::double::{repo_menu, situation};
use crate::ledger::{CycleId, ExperimentId, ExperimentOutcome, Interval};
use crate::menu::MenuId;
use crate::vocab::{Digest, ProposerKind, VerdictKind};

fn outcome(
    id: i64,
    menu_id: MenuId,
    parameters: serde_json::Value,
    proposer: Option<ProposerKind>,
    verdict: Option<VerdictKind>,
    effect: Option<f64>,
) -> ExperimentOutcome {
    ExperimentOutcome {
        experiment_id: ExperimentId(id),
        cycle_id: CycleId(id),
        created_at: Utc.with_ymd_and_hms(2026, 11, 29, 8, 0, 0).unwrap(),
        menu_id,
        parameters,
        base_digest: Digest::of(b"base"),
        proposer,
        confirmation_of: None,
        verdict,
        effect,
        interval: effect.map(|e| Interval {
            low: e - 0.02,
            high: e + 0.02,
        }),
        noise_floor: effect.map(|_| 0.015),
        pairs: effect.map(|_| 8),
    }
}

pub(crate) fn history() -> Vec<ExperimentOutcome> {
    let mut confirm = outcome(
        14,
        MenuId::RerankPins,
        json!({"pin_count": 64}),
        None,
        None,
        None,
    );
    confirm.confirmation_of = Some(ExperimentId(13));
    vec![
        confirm,
        outcome(
            13,
            MenuId::RerankPins,
            json!({"pin_count": 64}),
            Some(ProposerKind::Model),
            Some(VerdictKind::Win),
            Some(-0.0834),
        ),
        outcome(
            12,
            MenuId::RebalanceTrunkCache,
            json!({"trunk_fraction": 0.35}),
            Some(ProposerKind::Bandit),
            Some(VerdictKind::WithinNoise),
            Some(0.004),
        ),
        outcome(
            11,
            MenuId::StageSpeculative,
            json!({"draft_len": 4}),
            Some(ProposerKind::Model),
            Some(VerdictKind::HashMismatch),
            None,
        ),
        outcome(
            10,
            MenuId::DeepenWarmSet,
            json!({"warm_set": 256}),
            Some(ProposerKind::Model),
            Some(VerdictKind::Failed),
            None,
        ),
    ]
}

fn metrics() -> LiveMetrics {
    LiveMetrics {
        seconds_per_token: Some(1.8734),
        tier_residency: Some(0.625),
        heat_coverage: Some(0.41),
        far_available: Some(1.0),
        draft_acceptance: None,
        other: BTreeMap::from([("cold_reads_per_token".to_string(), 12.5)]),
    }
}

#[test]
fn the_full_prompt_is_stable() {
    let menu = repo_menu();
    let m = metrics();
    let floor = NoiseFloorState::Current {
        value: 0.0149,
        pairs: 12,
        age: Duration::from_secs(5400),
        stale: false,
    };
    let h = history();
    let s = situation(&menu, &m, &floor, &h);
    insta::assert_snapshot!("full_prompt", render(&messages(&s, &[])));
}

#[test]
fn a_first_cycle_prompt_says_what_is_missing() {
    let menu = repo_menu();
    let m = LiveMetrics::default();
    let s = situation(&menu, &m, &NoiseFloorState::Missing, &[]);
    let text = situation_text(&s);
    insta::assert_snapshot!("first_cycle_situation", text);
}

#[test]
fn the_distance_to_the_objective_is_shown_both_ways() {
    let menu = repo_menu();
    let floor = NoiseFloorState::Current {
        value: 0.01,
        pairs: 4,
        age: Duration::from_secs(200_000),
        stale: true,
    };
    let slow = LiveMetrics {
        seconds_per_token: Some(1.5),
        ..LiveMetrics::default()
    };
    let text = situation_text(&situation(&menu, &slow, &floor, &[]));
    assert!(
        text.contains("Live: 1.5 s/token, 0.5 s/token (+50.00%) slower than the objective."),
        "{text}"
    );
    assert!(text.contains("stale, remeasure is due"), "{text}");
    assert!(text.contains("measured 2 days ago"), "{text}");
    let fast = LiveMetrics {
        seconds_per_token: Some(0.75),
        ..LiveMetrics::default()
    };
    let text = situation_text(&situation(&menu, &fast, &floor, &[]));
    assert!(
        text.contains("meeting the objective by 0.25 s/token"),
        "{text}"
    );
}

#[test]
fn every_menu_bound_is_in_the_prompt() {
    let menu = repo_menu();
    let m = LiveMetrics::default();
    let text = situation_text(&situation(&menu, &m, &NoiseFloorState::Missing, &[]));
    for e in menu.entries() {
        assert!(text.contains(&format!("## {}: ", e.id)), "{}", e.id);
        for p in &e.params {
            assert!(text.contains(&format!("- {}: ", p.name)), "{}", p.name);
        }
    }
    assert!(
        text.contains("integer from 0 to 512 (suggested step 16)"),
        "{text}"
    );
    assert!(
        text.contains("number from 0 to 1 (suggested step 0.05)"),
        "{text}"
    );
}

#[test]
fn the_followup_lists_our_refusals_in_order() {
    let refusals = [
        crate::menu::Rejection::ExtraField,
        crate::menu::Rejection::Duplicate {
            what: "stage_speculative draft_len 4".into(),
            previous: 77,
        },
    ];
    insta::assert_snapshot!("followup", followup_text(&refusals));
}

#[test]
fn numbers_print_without_float_noise() {
    assert_eq!(num(0.35000000000000003), "0.35");
    assert_eq!(num(2.0), "2");
    assert_eq!(num(-0.00001), "0");
    assert_eq!(num(f64::NAN), "not a finite number");
    assert_eq!(pct_abs(0.0), "±0.00%");
}

/// The served model sees the live profile's values and every value excluded
/// on it, each with why, under the parameter it belongs to; an entry with no
/// value left says so. (A model shown none of this kept proposing the live
/// `draft_len` 0.)
#[test]
fn the_prompt_shows_the_live_values_and_what_is_excluded_on_them() {
    use crate::menu::{Excluded, ParamValue, Why};
    use crate::profile::{Knob, KnobValue};
    let x = |experiment, param: &str, value, why| Excluded {
        experiment,
        param: param.into(),
        value,
        why,
    };
    let mut excluded = vec![
        x(
            MenuId::StageSpeculative,
            "draft_len",
            ParamValue::Integer(0),
            Why::Live,
        ),
        x(
            MenuId::RebalanceTrunkCache,
            "trunk_fraction",
            ParamValue::Number(0.5),
            Why::Live,
        ),
        x(
            MenuId::StageSpeculative,
            "draft_len",
            ParamValue::Integer(4),
            Why::Decided { experiment: 11 },
        ),
        x(
            MenuId::StageSpeculative,
            "draft_len",
            ParamValue::Integer(2),
            Why::RefusedByPlanner { cycle: Some(9) },
        ),
    ];
    for n in [1, 3, 5, 6, 7, 8] {
        excluded.push(x(
            MenuId::StageSpeculative,
            "draft_len",
            ParamValue::Integer(n),
            Why::RefusedByPlanner { cycle: None },
        ));
    }
    let menu = repo_menu()
        .excluding(excluded)
        .closing([crate::menu::Closed {
            experiment: MenuId::DeepenWarmSet,
            param: "warm_set".into(),
            lo: 0.0,
            hi: 1024.0,
            why: "is closed by this test".into(),
        }]);
    let knobs = [
        (Knob::MemoryTrunkGb, KnobValue::Number(2.0)),
        (Knob::PinsFile, KnobValue::Text(String::new())),
        (Knob::SpeculativeDraftLen, KnobValue::Integer(0)),
    ];
    let m = metrics();
    let floor = NoiseFloorState::Missing;
    let mut s = situation(&menu, &m, &floor, &[]);
    s.live_knobs = &knobs;
    let text = situation_text(&s);
    for line in [
        "Live profile (the settings serving now; a candidate changes some):",
        "- memory.trunk_gb: 2\n",
        "- pins.file: \"\" (none)\n",
        "- speculative.draft_len: 0\n",
        "  - draft_len 0 equals the live profile's value\n",
        "  - draft_len 4 was already decided on this live profile (experiment 11)\n",
        "  - draft_len 2 was already refused by the planner on this live profile (cycle 9)\n",
        "  - trunk_fraction 0.5 equals the live profile's value\n",
        "  - draft_len 8 was refused by the planner earlier in this cycle\n",
        "  Closed on the live profile (refused if proposed): warm_set from 0 to 1024: every \
         value is closed by this test\n",
    ] {
        assert!(text.contains(line), "missing {line:?} in:\n{text}");
    }
    // draft_len 0..8 are all excluded: the entry says so, and the schema
    // has no stage_speculative alternative.
    let spec = text.split("## stage_speculative").nth(1).unwrap();
    assert!(
        spec.split("## ")
            .next()
            .unwrap()
            .contains("Every value of this entry is excluded"),
        "{spec}"
    );
    let schema = menu.json_schema().to_string();
    assert!(!schema.contains("stage_speculative"), "{schema}");
    assert!(schema.contains("rebalance_trunk_cache"), "{schema}");
}

/// The system text describes the stack config describes: a dense stack
/// (no expert lever on its menu, no `expert_bytes`) is not called a
/// mixture of experts, and its prompt lists no expert metrics it lacks.
#[test]
fn a_dense_stack_is_not_described_as_a_mixture_of_experts() {
    let dense = StackDescription {
        name: "llama-server".into(),
        experts: false,
    };
    let text = system_text(&dense, 40);
    assert!(!text.contains("mixture-of-experts"), "{text}");
    assert!(text.contains("the serving stack `llama-server`"), "{text}");
    let moe = system_text(&crate::brain::double::MOE_STACK, 40);
    assert!(
        moe.contains("the tiered mixture-of-experts serving stack `tinyk3`"),
        "{moe}"
    );
    let menu = repo_menu();
    let m = LiveMetrics {
        seconds_per_token: Some(0.05),
        ..LiveMetrics::default()
    };
    let floor = NoiseFloorState::Missing;
    let mut s = situation(&menu, &m, &floor, &[]);
    s.stack = &dense;
    let text = situation_text(&s);
    let live = text.split("Noise floor").next().unwrap();
    assert!(!live.contains("heat coverage"), "{live}");
    assert!(!live.contains("far tier"), "{live}");
    assert!(live.contains("draft acceptance: not available"), "{live}");
}

/// From config: llama-server's menu (pins and far tier unsupported, no
/// expert_bytes) is dense; tinyk3's is tiered.
#[test]
fn the_stack_description_comes_from_config() {
    use std::path::Path;
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for (file, experts) in [("config.toml", true), ("examples/llama-server.toml", false)] {
        let config = Config::load(&root.join(file)).unwrap();
        let menu = crate::stack_support::stack_menu(&config, &repo_menu()).unwrap();
        let d = StackDescription::of(&config, &menu);
        assert_eq!(d.experts, experts, "{file}");
        assert_eq!(d.name, config.stack.name);
    }
}
