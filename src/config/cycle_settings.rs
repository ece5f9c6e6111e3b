//! `[cycle]`: how the daemon paces its cycles (the interval, and the backoff
//! after failures in a row), who proposes each experiment from how much
//! history, and whether it builds on a win that waits for approval. Its keys are units and closed sets, so the table needs no check
//! beyond deserializing.

use serde::Deserialize;

use super::Seconds;

/// Who proposes each cycle's experiment (`[cycle] proposer`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProposerChoice {
    Model,
    Bandit,
}

/// The `[cycle]` table: pacing of the loop and the proposer's inputs.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CycleSettings {
    #[serde(default = "default_interval")]
    pub interval_s: Seconds,
    #[serde(default = "default_proposer")]
    pub proposer: ProposerChoice,
    #[serde(default = "default_history")]
    pub history: u32,
    #[serde(default = "default_failures")]
    pub max_consecutive_failures: u32,
    #[serde(default = "default_backoff_max")]
    pub backoff_max_s: Seconds,
    /// While exactly one confirmed win waits for approval on the profile
    /// the loop works from, the next experiments are measured on top of it
    /// (its candidate is their base), so the search does not stall on the
    /// operator: an approval usually follows, and what was measured on the
    /// old profile would expire with it. Only where the bench measures
    /// every protocol and the stack has no `[stack] class` (see
    /// `cycle/base.rs`).
    #[serde(default = "default_build_on_staged")]
    pub build_on_staged: bool,
}

impl Default for CycleSettings {
    fn default() -> Self {
        toml::from_str("").expect("every cycle key has a default")
    }
}

fn default_interval() -> Seconds {
    Seconds::from_secs(60)
}
fn default_proposer() -> ProposerChoice {
    ProposerChoice::Model
}
fn default_history() -> u32 {
    8
}
fn default_failures() -> u32 {
    3
}
fn default_build_on_staged() -> bool {
    true
}
fn default_backoff_max() -> Seconds {
    Seconds::from_secs(900)
}
