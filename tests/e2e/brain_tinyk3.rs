//! The model proposer against the real served model: `tinyk3 serve` on a
//! free loopback port with a tiny checkpoint. With random weights its choice
//! is arbitrary, but it is a real schema-constrained answer, validated here.

use std::path::Path;
use std::time::Duration;

use crate::common;
use crate::live_server::Serve;
use rand::SeedableRng;
use rand::rngs::StdRng;

use orchestrator::brain::{
    Backoff, ChatClient, Decision, DuplicateCheck, ModelProposer, NoiseFloorState, Proposer,
    Situation,
};
use orchestrator::config::{Model, Seconds};
use orchestrator::ledger::{ExperimentId, LedgerError};
use orchestrator::menu::{Menu, Proposal};
use orchestrator::observe::LiveMetrics;
use orchestrator::vocab::ProposerKind;

struct NothingDecided;

impl DuplicateCheck for NothingDecided {
    async fn previous(&self, _: &Proposal) -> Result<Option<ExperimentId>, LedgerError> {
        Ok(None)
    }
}

#[tokio::test]
async fn brain_against_real_tinyk3_serve() {
    let (dir, model) = common::tiny_model(7);
    let profile = dir.path().join("profile.toml");
    std::fs::write(
        &profile,
        "[memory]\nbudget_gb = 1\ntrunk_gb = 0.5\ncache_gb = 0.01\n",
    )
    .unwrap();
    let serve = Serve::start(&model, &profile);
    // The live values excluded, as every cycle does: tinyk3's constrained
    // decoder takes the schema with its ranges cut around them.
    let live = orchestrator::profile::Profile::load(&profile).unwrap();
    let menu = Menu::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("experiments"))
        .unwrap()
        .excluding(orchestrator::menu::exclusions::base_values(
            orchestrator::plan::unchanged(&live),
        ));
    // Four: the split, the draft, the warm set, and, the profile having no
    // pins, a re-rank of none.
    assert_eq!(menu.excluded().len(), 4, "{:?}", menu.excluded());
    let cfg = Model {
        base_url: format!("http://{}/v1", serve.addr).parse().unwrap(),
        name: "tinyk3".to_string(),
        api_key_env: None,
        connect_timeout: Seconds::from_secs(5),
        request_timeout: Seconds::from_secs(120),
        max_attempts: 3,
        max_tokens: orchestrator::config::DEFAULT_MAX_TOKENS,
        rationale_max_chars: orchestrator::menu::RATIONALE_MAX_CHARS,
        bandit_fallback_after: 3,
        bandit_after_no_win: 4,
    };
    let client = ChatClient::from_config(&cfg).unwrap();
    let mut proposer = ModelProposer::new(client, 3, Backoff::default(), StdRng::seed_from_u64(1));
    let metrics = LiveMetrics {
        seconds_per_token: Some(2.5),
        ..LiveMetrics::default()
    };
    let stack = orchestrator::brain::StackDescription {
        name: "tinyk3".into(),
        experts: true,
    };
    let situation = Situation {
        live_digest: None,
        token_shares: None,
        menu: &menu,
        stack: &stack,
        live_knobs: &[],
        target_seconds_per_token: 1.0,
        metrics: &metrics,
        noise_floor: &NoiseFloorState::Missing,
        history: &[],
    };
    let outcome = tokio::time::timeout(
        Duration::from_secs(60),
        proposer.propose(&situation, &NothingDecided),
    )
    .await
    .expect("the tiny model answers within a minute");
    assert_eq!(outcome.proposer, ProposerKind::Model);
    let Decision::Chosen(chosen) = &outcome.decision else {
        panic!("expected a valid menu choice: {:?}", outcome.decision)
    };
    // Constrained decoding with the menu's schema: the first answer is valid.
    assert_eq!(outcome.attempts.len(), 1, "{:?}", outcome.attempts);
    let raw = outcome.attempts[0].raw_answer.as_deref().unwrap();
    assert_eq!(menu.validate(raw).as_ref(), Ok(chosen));
    assert!(
        outcome.attempts[0]
            .prompt
            .as_deref()
            .unwrap()
            .contains("## remeasure")
    );
}
