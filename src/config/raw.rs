//! The file as written: one serde struct per table, each refusing keys it
//! does not know (`deny_unknown_fields`, whose message lists the table's
//! keys for [`super::hint`]), with the defaults of omitted keys. The
//! per-table `TryFrom`s beside this module turn these into the validated
//! types; a table without checks of its own ([`Objective`],
//! [`CycleSettings`]) is deserialized into its public type directly.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;

use serde::Deserialize;

use super::{BenchOutput, CycleSettings, Fraction, LedgerSizeMb, Objective, Seconds};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawConfig {
    #[serde(default)]
    pub objective: Objective,
    #[serde(default)]
    pub ledger: RawLedger,
    #[serde(default)]
    pub menu: RawMenu,
    pub stack: RawStack,
    pub model: Option<RawModel>,
    #[serde(default)]
    pub cycle: CycleSettings,
    #[serde(default)]
    pub measure: RawMeasure,
    #[serde(default)]
    pub daemon: RawDaemon,
    pub embedded: Option<RawEmbedded>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
#[derive(Default)]
pub(super) struct RawLedger {
    /// A SQLite file (the default, [`default_ledger_path`]).
    #[serde(default)]
    pub path: Option<PathBuf>,
    /// A PostgreSQL database instead: `postgres://user@host:port/db`.
    #[serde(default)]
    pub url: Option<String>,
    /// The environment variable holding the PostgreSQL password.
    #[serde(default)]
    pub password_env: Option<String>,
    #[serde(default)]
    pub max_size_mb: Option<LedgerSizeMb>,
}

pub(super) fn default_ledger_path() -> PathBuf {
    PathBuf::from("ledger/orchestrator.db")
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawMenu {
    #[serde(default = "default_menu_dir")]
    pub dir: PathBuf,
}

impl Default for RawMenu {
    fn default() -> Self {
        RawMenu {
            dir: default_menu_dir(),
        }
    }
}

fn default_menu_dir() -> PathBuf {
    PathBuf::from("experiments")
}

// ---- [stack] and its sub-tables ------------------------------------------------

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawStack {
    pub name: String,
    pub class: Option<String>,
    #[serde(default)]
    pub class_confirm_wait_s: u64,
    pub live_profile: PathBuf,
    #[serde(default = "default_work_dir")]
    pub work_dir: PathBuf,
    pub expert_bytes: Option<u64>,
    #[serde(default)]
    pub cache_spare_slots: u32,
    pub bench: Option<RawBench>,
    pub surface: Option<RawSurface>,
    pub metrics: Option<RawMetrics>,
    pub shadow: Option<RawShadow>,
    #[serde(default)]
    pub unsupported: Vec<String>,
    /// `stage approve|revert --restart`'s command (argv, never a shell).
    pub restart: Option<Vec<String>>,
    #[serde(default = "default_restart_timeout")]
    pub restart_timeout_s: Seconds,
}

fn default_restart_timeout() -> Seconds {
    Seconds::from_secs(120)
}

fn default_work_dir() -> PathBuf {
    PathBuf::from("ledger/work")
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawBench {
    pub argv: Vec<String>,
    #[serde(default)]
    pub optional: Vec<RawOptional>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default = "default_output")]
    pub output: BenchOutput,
    #[serde(default)]
    pub create_dirs: Vec<PathBuf>,
}

fn default_output() -> BenchOutput {
    BenchOutput::File
}

/// One `[[stack.bench.optional]]` / `[[stack.shadow.optional]]` group.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawOptional {
    pub when: String,
    pub args: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawSurface {
    pub base_url: String,
    pub prompts: Vec<String>,
    #[serde(default = "default_max_tokens")]
    pub max_tokens: u32,
    #[serde(default)]
    pub send_cache_prompt_false: bool,
    pub health_profile_sha256: Option<String>,
}

fn default_max_tokens() -> u32 {
    32
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawMetrics {
    pub url: Option<String>,
    #[serde(default)]
    pub names: BTreeMap<String, String>,
    pub heat: Option<String>,
    pub heat_trace: Option<PathBuf>,
    pub heat_flush: Option<String>,
    #[serde(default)]
    pub required: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawShadow {
    pub argv: Vec<String>,
    #[serde(default)]
    pub optional: Vec<RawOptional>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    #[serde(default = "default_health")]
    pub health_path: String,
    #[serde(default = "default_start_timeout")]
    pub start_timeout_s: Seconds,
    #[serde(default)]
    pub require_drafts: bool,
    pub drafted_series: Option<String>,
    #[serde(default = "default_metrics_path")]
    pub metrics_path: String,
}

fn default_metrics_path() -> String {
    "/metrics".to_string()
}

fn default_health() -> String {
    "/health".to_string()
}
fn default_start_timeout() -> Seconds {
    Seconds::from_secs(60)
}

// ---- [model] -------------------------------------------------------------------

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawModel {
    pub base_url: String,
    pub name: String,
    pub api_key_env: Option<String>,
    #[serde(default = "default_connect_timeout")]
    pub connect_timeout_s: Seconds,
    #[serde(default = "default_request_timeout")]
    pub request_timeout_s: Seconds,
    #[serde(default = "default_attempts")]
    pub max_attempts: u32,
    #[serde(default = "default_model_max_tokens")]
    pub max_tokens: u32,
    #[serde(default = "default_rationale_max_chars")]
    pub rationale_max_chars: usize,
    #[serde(default = "default_bandit_fallback_after")]
    pub bandit_fallback_after: u32,
    #[serde(default = "default_bandit_after_no_win")]
    pub bandit_after_no_win: u32,
}

pub(super) fn default_bandit_fallback_after() -> u32 {
    3
}

/// Four: a model that has found nothing in four of its own experiments
/// gives one cycle in five to the bandit, which tries the line the live
/// token's largest measured part favours.
pub(super) fn default_bandit_after_no_win() -> u32 {
    4
}

pub(super) fn default_rationale_max_chars() -> usize {
    crate::menu::RATIONALE_MAX_CHARS
}

pub(super) fn default_model_max_tokens() -> u32 {
    super::DEFAULT_MAX_TOKENS
}

pub(super) fn default_connect_timeout() -> Seconds {
    Seconds::from_secs(5)
}
pub(super) fn default_request_timeout() -> Seconds {
    Seconds::from_secs(120)
}
pub(super) fn default_attempts() -> u32 {
    3
}

// ---- [measure]: the measurement's keys and the judge's -------------------------

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawMeasure {
    #[serde(default = "default_warmup")]
    pub warmup_runs: u32,
    #[serde(default = "default_min_pairs")]
    pub min_pairs: u32,
    #[serde(default = "default_max_pairs")]
    pub max_pairs: u32,
    #[serde(default = "default_confidence")]
    pub confidence: Fraction,
    #[serde(default = "default_min_floor")]
    pub min_noise_floor: Fraction,
    #[serde(default = "default_floor_age")]
    pub noise_floor_max_age_s: Seconds,
    #[serde(default = "default_run_timeout")]
    pub run_timeout_s: Seconds,
    #[serde(default = "default_headroom")]
    pub memory_headroom_gb: f64,
    #[serde(default = "default_floor_pairs")]
    pub floor_pairs: u32,
    #[serde(default = "default_max_floor")]
    pub max_noise_floor: Fraction,
    #[serde(default = "default_max_contention_rise")]
    pub max_contention_rise: f64,
    /// Retired: an absolute ceiling on the PSI share, which a steady load
    /// saturates. Read only to refuse it with the name of its replacement.
    #[serde(default)]
    pub max_pressure: Option<toml::Value>,
    #[serde(default = "default_max_discarded")]
    pub max_discarded_blocks: u32,
    #[serde(default = "default_pressure_shift")]
    pub floor_pressure_shift: f64,
    #[serde(default = "default_confirmation_new_floor")]
    pub confirmation_new_floor: bool,
}

impl Default for RawMeasure {
    fn default() -> Self {
        toml::from_str("").expect("every measure key has a default")
    }
}

fn default_floor_pairs() -> u32 {
    crate::judge::Policy::DEFAULT_FLOOR_PAIRS as u32
}
fn default_max_floor() -> Fraction {
    Fraction::try_from(0.50).expect("a fraction")
}
fn default_max_contention_rise() -> f64 {
    crate::judge::Policy::DEFAULT_MAX_CONTENTION_RISE
}
fn default_max_discarded() -> u32 {
    8
}
fn default_confirmation_new_floor() -> bool {
    crate::judge::Policy::DEFAULT_CONFIRMATION_NEW_FLOOR
}
fn default_pressure_shift() -> f64 {
    0.25
}

fn default_warmup() -> u32 {
    1
}
// The judge's defaults ([`crate::judge::Policy::default`]), whose error
// rates the simulation benchmark reports.
fn default_min_pairs() -> u32 {
    2
}
fn default_max_pairs() -> u32 {
    16
}
fn default_confidence() -> Fraction {
    Fraction::try_from(0.10).expect("a fraction")
}
fn default_min_floor() -> Fraction {
    Fraction::try_from(0.01).expect("a fraction")
}
fn default_floor_age() -> Seconds {
    Seconds::from_secs(24 * 3600)
}
fn default_run_timeout() -> Seconds {
    Seconds::from_secs(300)
}
fn default_headroom() -> f64 {
    1.0
}

// ---- [daemon] and [embedded] ---------------------------------------------------

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawDaemon {
    #[serde(default = "default_metrics_listen")]
    pub metrics_listen: SocketAddr,
    #[serde(default)]
    pub allow_remote: bool,
    #[serde(default)]
    pub stand_aside_above: u32,
    #[serde(default = "default_stand_aside_quiet_s")]
    pub stand_aside_quiet_s: f64,
    #[serde(default = "default_stand_aside_max_wait_s")]
    pub stand_aside_max_wait_s: Seconds,
}

fn default_stand_aside_quiet_s() -> f64 {
    super::daemon::DEFAULT_QUIET_S
}

fn default_stand_aside_max_wait_s() -> Seconds {
    Seconds::from_secs(super::daemon::DEFAULT_MAX_WAIT_S)
}

fn default_metrics_listen() -> SocketAddr {
    "127.0.0.1:9464".parse().expect("a literal address")
}

impl Default for RawDaemon {
    fn default() -> Self {
        RawDaemon {
            metrics_listen: default_metrics_listen(),
            allow_remote: false,
            stand_aside_above: 0,
            stand_aside_quiet_s: default_stand_aside_quiet_s(),
            stand_aside_max_wait_s: default_stand_aside_max_wait_s(),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawEmbedded {
    pub tinyk3: PathBuf,
    pub model_dir: PathBuf,
    #[serde(default)]
    pub init_args: Vec<String>,
    pub starting_profile: PathBuf,
    pub serve_listen: SocketAddr,
    pub expert_server_listen: SocketAddr,
    #[serde(default = "default_max_warm")]
    pub expert_server_max_warm: u64,
    pub heat_dir: PathBuf,
    #[serde(default = "default_embedded_start")]
    pub start_timeout_s: Seconds,
    #[serde(default)]
    pub serve_args: Vec<String>,
}

fn default_max_warm() -> u64 {
    1024
}
fn default_embedded_start() -> Seconds {
    Seconds::from_secs(180)
}
