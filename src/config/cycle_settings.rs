//! `[cycle]`: how the daemon paces its cycles (the interval, and the backoff
//! after failures in a row), who proposes each experiment from how much
//! history, and whether it builds on a win that waits for approval, how long a converged
//! loop waits at most, and the share of wall-clock time its engine runs may
//! take. Its keys are units and closed sets, so the table needs no check
//! beyond deserializing.

use serde::Deserialize;

use super::{EngineShare, Seconds};

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
    /// The longest a converged loop waits before it looks again
    /// (`daemon::wait`): its wait doubles from `interval_s` at each look
    /// that finds it still converged, up to this. A change it watches
    /// (an approval, a profile, config or menu edit, the heat, the live
    /// metrics) wakes it at once; this bounds how late it notices what it
    /// does not watch (a floor gone stale by age).
    #[serde(default = "default_max_wait")]
    pub max_wait_s: Seconds,
    /// The share of wall-clock time the daemon's engine runs may take over
    /// `engine_window_s` (`daemon::budget`); 1 puts no cap.
    #[serde(default = "default_max_engine_share")]
    pub max_engine_share: EngineShare,
    /// The sliding window `max_engine_share` is held over.
    #[serde(default = "default_engine_window")]
    pub engine_window_s: Seconds,
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
/// An hour: a converged loop looks again at least hourly, so what it does
/// not watch (a floor gone stale by age) waits at most that long; a look
/// costs no engine time (files, the ledger, one metrics scrape).
fn default_max_wait() -> Seconds {
    Seconds::from_secs(3600)
}
/// Half: the engine is the users' at least half of any window even where
/// the daemon cannot see their requests, while a fresh install's first
/// floor and A/Bs, slow as they are on a loaded machine, have the first
/// hour's 30 engine minutes before the cap is reached.
fn default_max_engine_share() -> EngineShare {
    EngineShare::try_from(0.5).expect("0.5 is a share")
}
/// An hour: several cycles long (a cycle takes 1-7 minutes), so one long
/// floor does not stop the loop, and short enough that a burst is paid
/// back within the hour.
fn default_engine_window() -> Seconds {
    Seconds::from_secs(3600)
}
fn default_backoff_max() -> Seconds {
    Seconds::from_secs(900)
}
