//! Snapshot tests of the prompt text.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{TimeZone, Utc};
use serde_json::json;

use super::*;
use crate::brain::double::repo_menu;
use crate::ledger::{CycleId, ExperimentId, ExperimentOutcome, Interval};
use crate::menu::{Menu, MenuId};
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

fn situation<'a>(
    menu: &'a Menu,
    metrics: &'a LiveMetrics,
    floor: &'a NoiseFloorState,
    history: &'a [ExperimentOutcome],
) -> Situation<'a> {
    Situation {
        menu,
        target_seconds_per_token: 1.0,
        metrics,
        noise_floor: floor,
        history,
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
        crate::menu::Rejection::Duplicate { previous: 77 },
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
