//! Prints the request body the orchestrator's model proposer sends for cycle
//! N of a representative run: the real prompt (`brain::prompt`), the real menu
//! schema (`experiments/`) and `[model] max_tokens` from a config file, with
//! live metrics and a history that change from cycle to cycle.
//!
//! Usage: `cargo run --example menu_request -- [CONFIG] [CYCLE]`
//! (defaults `config.toml` and 1). `tinyk3/bench/menu_choice.sh` times the
//! bodies against `tinyk3 serve`.

use std::path::PathBuf;
use std::time::Duration;

use chrono::{TimeZone, Utc};
use serde_json::json;

use orchestrator::brain::{ChatClient, NoiseFloorState, Situation, prompt};
use orchestrator::config::Config;
use orchestrator::ledger::{CycleId, ExperimentId, ExperimentOutcome, Interval};
use orchestrator::menu::{Menu, MenuId};
use orchestrator::observe::LiveMetrics;
use orchestrator::vocab::{Digest, ProposerKind, VerdictKind};

/// What cycle `i` of a run has seen: the experiments before it, newest first.
fn history(cycle: u32, keep: usize) -> Vec<ExperimentOutcome> {
    let menu = [
        (MenuId::Remeasure, json!({})),
        (MenuId::RerankPins, json!({"pin_count": 64})),
        (MenuId::DeepenWarmSet, json!({"warm_set": 256})),
        (MenuId::RebalanceTrunkCache, json!({"trunk_fraction": 0.35})),
        (MenuId::StageSpeculative, json!({"draft_len": 3})),
    ];
    let verdicts = [
        VerdictKind::WithinNoise,
        VerdictKind::Win,
        VerdictKind::Loss,
        VerdictKind::WithinNoise,
    ];
    (1..cycle)
        .rev()
        .take(keep)
        .map(|i| {
            let (menu_id, parameters) = menu[i as usize % menu.len()].clone();
            let effect = match menu_id {
                MenuId::Remeasure => None,
                _ => Some(-0.01 * f64::from(i % 7) + 0.02),
            };
            ExperimentOutcome {
                experiment_id: ExperimentId(i64::from(i)),
                cycle_id: CycleId(i64::from(i)),
                created_at: Utc.with_ymd_and_hms(2026, 11, 29, 8, 0, 0).unwrap(),
                menu_id,
                parameters,
                base_digest: Digest::of(b"base"),
                proposer: Some(ProposerKind::Model),
                confirmation_of: None,
                verdict: Some(verdicts[i as usize % verdicts.len()]),
                effect,
                interval: effect.map(|e| Interval {
                    low: e - 0.02,
                    high: e + 0.02,
                }),
                noise_floor: Some(0.015),
                pairs: Some(8),
            }
        })
        .collect()
}

fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let config = PathBuf::from(args.next().unwrap_or_else(|| "config.toml".into()));
    let cycle: u32 = args.next().map_or(Ok(1), |c| c.parse())?;
    let config = Config::load(&config)?;
    let menu = orchestrator::stack_support::stack_menu(&config, &Menu::load(&config.menu_dir)?)?;
    let metrics = LiveMetrics {
        seconds_per_token: Some(0.9 - 0.013 * f64::from(cycle)),
        tier_residency: Some(0.55 + 0.01 * f64::from(cycle % 9)),
        heat_coverage: Some(0.2 + 0.02 * f64::from(cycle % 7)),
        far_available: Some(1.0),
        draft_acceptance: None,
        ..LiveMetrics::default()
    };
    let floor = NoiseFloorState::Current {
        value: 0.0148,
        pairs: 12,
        age: Duration::from_secs(60 * u64::from(cycle)),
        stale: false,
    };
    let past = history(cycle, config.cycle.history as usize);
    let stack = orchestrator::brain::StackDescription::of(&config, &menu);
    let situation = Situation {
        token_shares: None,
        live_digest: None,
        menu: &menu,
        stack: &stack,
        live_knobs: &[],
        target_seconds_per_token: config.objective.target_seconds_per_token.get(),
        metrics: &metrics,
        noise_floor: &floor,
        history: &past,
    };
    let client = ChatClient::from_config(&config.model)?;
    let body = client.request_body(&prompt::messages(&situation, &[]), &menu.json_schema());
    println!("{}", serde_json::to_string(&body)?);
    Ok(())
}
