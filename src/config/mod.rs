//! The configuration file, loaded into validated types at the edge.
//!
//! Relative paths in the file are relative to the file's own directory, and
//! child processes run there, so a config and the files it names move
//! together. Errors name the file, the line, the key, what is wrong and what
//! to do; an unknown key gets the nearest valid key suggested.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::judge::{Confidence, Floor, ParamError, Policy};
use crate::measure::template::{ArgvTemplate, Special, TemplateError};
use crate::menu::MenuId;

/// The environment variable that selects the config file.
pub const CONFIG_ENV: &str = "ORCHESTRATOR_CONFIG";
/// The file used when neither `--config` nor the environment names one.
pub const DEFAULT_CONFIG: &str = "config.toml";

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error(
        "cannot read config file {path}: {source} (pass --config PATH or set ORCHESTRATOR_CONFIG)"
    )]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}:{line}: {key}{problem}{hint}")]
    Invalid {
        path: PathBuf,
        line: usize,
        /// `[section] key: ` when known, else empty.
        key: String,
        problem: String,
        /// `; did you mean ...?` or a fix, possibly empty.
        hint: String,
    },
    #[error("{path}: {problem}")]
    Semantic { path: PathBuf, problem: String },
}

/// A size cap of the ledger file in MiB (`[ledger] max_size_mb`): strictly
/// positive and finite. Enforced by SQLite's `max_page_count`.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(try_from = "f64")]
pub struct LedgerSizeMb(f64);

impl LedgerSizeMb {
    /// The cap in bytes.
    pub fn bytes(self) -> u64 {
        (self.0 * 1024.0 * 1024.0) as u64
    }
}

impl TryFrom<f64> for LedgerSizeMb {
    type Error = String;
    fn try_from(x: f64) -> Result<Self, String> {
        if x.is_finite() && x > 0.0 && x < 1e9 {
            Ok(LedgerSizeMb(x))
        } else {
            Err(format!("must be a size in MiB above 0 (e.g. 512), got {x}"))
        }
    }
}

/// A strictly positive, finite duration given in seconds.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(try_from = "f64")]
pub struct Seconds(Duration);

impl Seconds {
    pub fn duration(self) -> Duration {
        self.0
    }
    pub fn from_secs(s: u64) -> Seconds {
        Seconds(Duration::from_secs(s))
    }
}

impl TryFrom<f64> for Seconds {
    type Error = String;
    fn try_from(x: f64) -> Result<Self, String> {
        if x.is_finite() && x > 0.0 && x < 1e9 {
            Ok(Seconds(Duration::from_secs_f64(x)))
        } else {
            Err(format!("must be a number of seconds > 0 (got {x})"))
        }
    }
}

/// A fraction strictly between 0 and 1 (confidence levels, floors).
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(try_from = "f64")]
pub struct Fraction(f64);

impl Fraction {
    pub fn get(self) -> f64 {
        self.0
    }
}

impl TryFrom<f64> for Fraction {
    type Error = String;
    fn try_from(x: f64) -> Result<Self, String> {
        if x > 0.0 && x < 1.0 {
            Ok(Fraction(x))
        } else {
            Err(format!("must be strictly between 0 and 1 (got {x})"))
        }
    }
}

/// The objective, in seconds per token.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(try_from = "f64")]
pub struct SecondsPerToken(f64);

impl SecondsPerToken {
    pub fn get(self) -> f64 {
        self.0
    }
}

impl TryFrom<f64> for SecondsPerToken {
    type Error = String;
    fn try_from(x: f64) -> Result<Self, String> {
        if x.is_finite() && x > 0.0 {
            Ok(SecondsPerToken(x))
        } else {
            Err(format!("must be seconds per token > 0 (got {x})"))
        }
    }
}

/// The whole configuration, validated; paths are absolute.
#[derive(Debug, Clone)]
pub struct Config {
    /// The file it came from.
    pub path: PathBuf,
    /// The file's directory: base of relative paths and children's cwd.
    pub base_dir: PathBuf,
    pub objective: Objective,
    pub ledger_path: PathBuf,
    /// `[ledger] max_size_mb`: the ledger stops growing there (a write
    /// beyond it fails like a full disk and stops the daemon).
    pub ledger_max_size: Option<LedgerSizeMb>,
    pub menu_dir: PathBuf,
    pub stack: Stack,
    pub model: Model,
    pub cycle: Cycle,
    pub measure: Measure,
    pub daemon: Daemon,
    pub embedded: Option<Embedded>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Objective {
    #[serde(default = "default_target")]
    pub target_seconds_per_token: SecondsPerToken,
}

fn default_target() -> SecondsPerToken {
    SecondsPerToken(1.0)
}

/// The serving stack being tuned.
#[derive(Debug, Clone)]
pub struct Stack {
    /// Names the stack in the ledger (noise floors, reference hashes).
    pub name: String,
    pub live_profile: PathBuf,
    /// Scratch space for bench outputs and candidate profiles.
    pub work_dir: PathBuf,
    /// Bytes of one routed expert: converts pin counts and warm sets to RAM.
    pub expert_bytes: Option<u64>,
    /// Expert-cache slots the engine needs beyond top-k (`[stack]
    /// cache_spare_slots`): kimi-k3-in-c refuses a cache under top-k + 1, so
    /// one token's working set never evicts an expert still being multiplied.
    pub cache_spare_slots: u32,
    pub bench: Option<Bench>,
    pub surface: Option<Surface>,
    pub metrics: Option<Metrics>,
    pub shadow: Option<Shadow>,
    /// Menu entries this stack cannot carry out (`[stack] unsupported`):
    /// refused when proposed, never silently skipped (see [`crate::support`]).
    pub unsupported: Vec<MenuId>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BenchOutput {
    /// The JSON object is written to `{out}`.
    File,
    /// The JSON object is the last line of stdout that parses as JSON.
    Stdout,
}

#[derive(Debug, Clone)]
pub struct Bench {
    pub argv: ArgvTemplate,
    pub env: BTreeMap<String, String>,
    pub output: BenchOutput,
    /// Directories made before every run (absolute). Some engines write a
    /// dump only into a directory that already exists, and silently nothing
    /// otherwise (kimi-k3-in-c's `--dump-cache-trace DIR`).
    pub create_dirs: Vec<PathBuf>,
}

#[derive(Debug, Clone)]
pub struct Surface {
    pub base_url: reqwest::Url,
    pub prompts: Vec<String>,
    pub max_tokens: u32,
    /// Send `cache_prompt: false` (llama.cpp): cached prefixes change timing.
    pub send_cache_prompt_false: bool,
}

#[derive(Debug, Clone)]
pub struct Metrics {
    /// The Prometheus endpoint; `None` for a stack without one (a bench-only
    /// CLI), which still has heat dumps to read.
    pub url: Option<reqwest::Url>,
    /// Our name → the stack's Prometheus series name.
    pub names: BTreeMap<String, String>,
    /// Where the stack's heat histogram can be read (a URL or a file).
    pub heat: Option<String>,
    pub heat_trace: Option<PathBuf>,
    /// POSTed before reading the trace, so the stack writes it out first.
    pub heat_flush: Option<reqwest::Url>,
    /// Fail the cycle when metrics cannot be read (else proceed without).
    pub required: bool,
}

#[derive(Debug, Clone)]
pub struct Shadow {
    pub argv: ArgvTemplate,
    pub env: BTreeMap<String, String>,
    pub health_path: String,
    pub start_timeout: Seconds,
    /// A candidate with `speculative.draft_len > 0` must show drafted tokens
    /// (llama.cpp's `timings.draft_n`, or `drafted_series` on the shadow's
    /// metrics); without them the run fails instead of measuring a plain
    /// server (llama-server keeps serving when the draft does not fit).
    pub require_drafts: bool,
    /// The shadow's Prometheus counter of drafted tokens, if it has one.
    pub drafted_series: Option<String>,
    /// Where the shadow serves its metrics. Default `/metrics`.
    pub metrics_path: String,
}

#[derive(Debug, Clone)]
pub struct Model {
    pub base_url: reqwest::Url,
    pub name: String,
    /// The NAME of the environment variable holding the API key, if any.
    pub api_key_env: Option<String>,
    pub connect_timeout: Seconds,
    pub request_timeout: Seconds,
    pub max_attempts: u32,
    /// `max_tokens` of each request: bounds a rambling rationale.
    pub max_tokens: u32,
    /// The rationale's `maxLength` in the schema and the validator.
    pub rationale_max_chars: usize,
    /// After this many cycles in a row in which every answer of the model
    /// was refused, the bandit chooses for one cycle (at least 1).
    pub bandit_fallback_after: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProposerChoice {
    Model,
    Bandit,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Cycle {
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
fn default_backoff_max() -> Seconds {
    Seconds::from_secs(900)
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Measure {
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
    #[serde(default = "default_max_pressure")]
    pub max_pressure: Fraction,
    #[serde(default = "default_max_discarded")]
    pub max_discarded_blocks: u32,
    #[serde(default = "default_pressure_shift")]
    pub floor_pressure_shift: f64,
}

impl Measure {
    /// The judge's policy: confidence, pair budget, the floor's lower clamp
    /// and upper limit (the config states both as relative changes, the
    /// judge takes log ratios), the floor's pairs and the pressure rules.
    pub fn policy(&self) -> Result<Policy, ParamError> {
        let mut p = Policy::new(
            Confidence::try_from(self.confidence.get())?,
            self.min_pairs as usize,
            self.max_pairs as usize,
            Floor::try_from(self.min_noise_floor.get().ln_1p())?,
        )?;
        p.floor_pairs = self.floor_pairs as usize;
        p.max_floor = Some(Floor::try_from(self.max_noise_floor.get().ln_1p())?);
        p.max_pressure = Some(self.max_pressure.get());
        p.max_discarded_blocks = self.max_discarded_blocks as usize;
        Ok(p)
    }
}

fn default_floor_pairs() -> u32 {
    crate::judge::Policy::DEFAULT_FLOOR_PAIRS as u32
}
fn default_max_floor() -> Fraction {
    Fraction(0.50)
}
fn default_max_pressure() -> Fraction {
    Fraction(0.97)
}
fn default_max_discarded() -> u32 {
    8
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
    4
}
fn default_max_pairs() -> u32 {
    16
}
fn default_confidence() -> Fraction {
    Fraction(0.10)
}
fn default_min_floor() -> Fraction {
    Fraction(0.01)
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

/// The embedded default: the reference stack (tinyk3) prepared and run as
/// children of `orchestrator run`. Absent for a stack you run yourself.
#[derive(Debug, Clone)]
pub struct Embedded {
    pub tinyk3: PathBuf,
    pub model_dir: PathBuf,
    /// Extra arguments of `tinyk3 init` when the checkpoint is missing.
    pub init_args: Vec<String>,
    /// Copied to the live profile path when that is missing.
    pub starting_profile: PathBuf,
    pub serve_listen: SocketAddr,
    pub expert_server_listen: SocketAddr,
    /// Most experts the far tier may hold warm.
    pub expert_server_max_warm: u64,
    pub heat_dir: PathBuf,
    pub start_timeout: Seconds,
    /// Extra arguments of `tinyk3 serve` (e.g. its context window).
    pub serve_args: Vec<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Daemon {
    /// The orchestrator's own Prometheus endpoint.
    #[serde(default = "default_metrics_listen")]
    pub metrics_listen: SocketAddr,
    /// Bind addresses outside loopback only when this is true.
    #[serde(default)]
    pub allow_remote: bool,
}

fn default_metrics_listen() -> SocketAddr {
    "127.0.0.1:9464".parse().expect("a literal address")
}

impl Default for Daemon {
    fn default() -> Self {
        Daemon {
            metrics_listen: default_metrics_listen(),
            allow_remote: false,
        }
    }
}

// ---- the file as written ------------------------------------------------------

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    #[serde(default = "default_objective")]
    objective: Objective,
    #[serde(default)]
    ledger: RawLedger,
    #[serde(default)]
    menu: RawMenu,
    stack: RawStack,
    model: Option<RawModel>,
    #[serde(default = "default_cycle")]
    cycle: Cycle,
    #[serde(default = "default_measure")]
    measure: Measure,
    #[serde(default)]
    daemon: Daemon,
    embedded: Option<RawEmbedded>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEmbedded {
    tinyk3: PathBuf,
    model_dir: PathBuf,
    #[serde(default)]
    init_args: Vec<String>,
    starting_profile: PathBuf,
    serve_listen: SocketAddr,
    expert_server_listen: SocketAddr,
    #[serde(default = "default_max_warm")]
    expert_server_max_warm: u64,
    heat_dir: PathBuf,
    #[serde(default = "default_embedded_start")]
    start_timeout_s: Seconds,
    #[serde(default)]
    serve_args: Vec<String>,
}

fn default_max_warm() -> u64 {
    1024
}
fn default_embedded_start() -> Seconds {
    Seconds::from_secs(180)
}

fn default_objective() -> Objective {
    Objective {
        target_seconds_per_token: default_target(),
    }
}

fn default_cycle() -> Cycle {
    toml::from_str("").expect("every cycle key has a default")
}

fn default_measure() -> Measure {
    toml::from_str("").expect("every measure key has a default")
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawLedger {
    #[serde(default = "default_ledger_path")]
    path: PathBuf,
    #[serde(default)]
    max_size_mb: Option<LedgerSizeMb>,
}

impl Default for RawLedger {
    fn default() -> Self {
        RawLedger {
            path: default_ledger_path(),
            max_size_mb: None,
        }
    }
}

fn default_ledger_path() -> PathBuf {
    PathBuf::from("ledger/orchestrator.db")
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMenu {
    #[serde(default = "default_menu_dir")]
    dir: PathBuf,
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

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawStack {
    name: String,
    live_profile: PathBuf,
    #[serde(default = "default_work_dir")]
    work_dir: PathBuf,
    expert_bytes: Option<u64>,
    #[serde(default)]
    cache_spare_slots: u32,
    bench: Option<RawBench>,
    surface: Option<RawSurface>,
    metrics: Option<RawMetrics>,
    shadow: Option<RawShadow>,
    #[serde(default)]
    unsupported: Vec<String>,
}

fn default_work_dir() -> PathBuf {
    PathBuf::from("ledger/work")
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBench {
    argv: Vec<String>,
    #[serde(default)]
    optional: Vec<RawOptional>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default = "default_output")]
    output: BenchOutput,
    #[serde(default)]
    create_dirs: Vec<PathBuf>,
}

fn default_output() -> BenchOutput {
    BenchOutput::File
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOptional {
    when: String,
    args: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSurface {
    base_url: String,
    prompts: Vec<String>,
    #[serde(default = "default_max_tokens")]
    max_tokens: u32,
    #[serde(default)]
    send_cache_prompt_false: bool,
}

fn default_max_tokens() -> u32 {
    32
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawMetrics {
    url: Option<String>,
    #[serde(default)]
    names: BTreeMap<String, String>,
    heat: Option<String>,
    heat_trace: Option<PathBuf>,
    heat_flush: Option<String>,
    #[serde(default)]
    required: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawShadow {
    argv: Vec<String>,
    #[serde(default)]
    optional: Vec<RawOptional>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default = "default_health")]
    health_path: String,
    #[serde(default = "default_start_timeout")]
    start_timeout_s: Seconds,
    #[serde(default)]
    require_drafts: bool,
    drafted_series: Option<String>,
    #[serde(default = "default_metrics_path")]
    metrics_path: String,
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

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawModel {
    base_url: String,
    name: String,
    api_key_env: Option<String>,
    #[serde(default = "default_connect_timeout")]
    connect_timeout_s: Seconds,
    #[serde(default = "default_request_timeout")]
    request_timeout_s: Seconds,
    #[serde(default = "default_attempts")]
    max_attempts: u32,
    #[serde(default = "default_model_max_tokens")]
    max_tokens: u32,
    #[serde(default = "default_rationale_max_chars")]
    rationale_max_chars: usize,
    #[serde(default = "default_bandit_fallback_after")]
    bandit_fallback_after: u32,
}

fn default_bandit_fallback_after() -> u32 {
    3
}

fn default_rationale_max_chars() -> usize {
    crate::menu::RATIONALE_MAX_CHARS
}

fn default_model_max_tokens() -> u32 {
    crate::brain::client::MAX_TOKENS
}

fn default_connect_timeout() -> Seconds {
    Seconds::from_secs(5)
}
fn default_request_timeout() -> Seconds {
    Seconds::from_secs(120)
}
fn default_attempts() -> u32 {
    3
}

/// Every key the file may hold, by table, for "did you mean" suggestions.
/// A bound on `[stack] cache_spare_slots`: an engine wanting more than a
/// handful of slots beyond top-k is a misread setting, not an engine.
const MAX_CACHE_SPARE_SLOTS: u32 = 64;

const KNOWN_KEYS: &[&str] = &[
    "objective",
    "target_seconds_per_token",
    "ledger",
    "path",
    "max_size_mb",
    "menu",
    "dir",
    "stack",
    "name",
    "live_profile",
    "work_dir",
    "expert_bytes",
    "cache_spare_slots",
    "bench",
    "argv",
    "optional",
    "when",
    "args",
    "env",
    "output",
    "surface",
    "base_url",
    "prompts",
    "max_tokens",
    "send_cache_prompt_false",
    "metrics",
    "url",
    "names",
    "heat",
    "heat_trace",
    "heat_flush",
    "required",
    "shadow",
    "health_path",
    "start_timeout_s",
    "model",
    "api_key_env",
    "connect_timeout_s",
    "request_timeout_s",
    "max_attempts",
    "max_tokens",
    "rationale_max_chars",
    "bandit_fallback_after",
    "cycle",
    "interval_s",
    "proposer",
    "history",
    "max_consecutive_failures",
    "backoff_max_s",
    "measure",
    "warmup_runs",
    "min_pairs",
    "max_pairs",
    "confidence",
    "min_noise_floor",
    "noise_floor_max_age_s",
    "run_timeout_s",
    "memory_headroom_gb",
    "floor_pairs",
    "max_noise_floor",
    "max_pressure",
    "max_discarded_blocks",
    "floor_pressure_shift",
    "daemon",
    "metrics_listen",
    "allow_remote",
    "embedded",
    "tinyk3",
    "model_dir",
    "init_args",
    "starting_profile",
    "serve_listen",
    "expert_server_listen",
    "expert_server_max_warm",
    "heat_dir",
    "serve_args",
    "unsupported",
    "create_dirs",
    "require_drafts",
    "drafted_series",
    "metrics_path",
];

impl Config {
    /// Which file to load: `--config`, else `ORCHESTRATOR_CONFIG`, else `config.toml`.
    pub fn locate(flag: Option<&Path>) -> PathBuf {
        flag.map(Path::to_path_buf)
            .or_else(|| std::env::var_os(CONFIG_ENV).map(PathBuf::from))
            .unwrap_or_else(|| PathBuf::from(DEFAULT_CONFIG))
    }

    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Config::parse(&text, path)
    }

    /// Parses config text as if it were the file at `path`.
    pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
        let raw: RawConfig = toml::from_str(text).map_err(|e| toml_error(text, path, &e))?;
        let abs = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
        let base_dir = abs
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from("."));
        let semantic = |problem: String| ConfigError::Semantic {
            path: path.to_path_buf(),
            problem,
        };
        let template = |what: &str, e: TemplateError| semantic(format!("[{what}] argv: {e}"));
        let resolve = |p: &Path| base_dir.join(p);

        let rs = raw.stack;
        if rs.expert_bytes == Some(0) {
            return Err(semantic(
                "[stack] expert_bytes must be > 0 (bytes of one routed expert)".into(),
            ));
        }
        if rs.cache_spare_slots > MAX_CACHE_SPARE_SLOTS {
            return Err(semantic(format!(
                "[stack] cache_spare_slots = {} is more than {MAX_CACHE_SPARE_SLOTS}: it counts the \
                 expert-cache slots the engine needs beyond top-k (kimi-k3-in-c: 1, most engines: 0)",
                rs.cache_spare_slots
            )));
        }
        if rs.name.trim().is_empty() {
            return Err(semantic("[stack] name must not be empty".into()));
        }
        let bench = rs
            .bench
            .map(|b| {
                let optional: Vec<_> = b.optional.into_iter().map(|o| (o.when, o.args)).collect();
                let argv =
                    ArgvTemplate::parse(&b.argv, &optional, &[Special::Out, Special::Profile])
                        .map_err(|e| template("stack.bench", e))?;
                Ok::<_, ConfigError>(Bench {
                    argv,
                    env: b.env,
                    output: b.output,
                    create_dirs: b.create_dirs.iter().map(|d| resolve(d)).collect(),
                })
            })
            .transpose()?;
        let surface = rs
            .surface
            .map(|s| {
                if s.prompts.is_empty() {
                    return Err(semantic(
                        "[stack.surface] prompts is empty; give at least one fixed prompt".into(),
                    ));
                }
                if s.max_tokens == 0 {
                    return Err(semantic(
                        "[stack.surface] max_tokens must be at least 1".into(),
                    ));
                }
                Ok(Surface {
                    base_url: url(&s.base_url, "stack.surface", "base_url").map_err(semantic)?,
                    prompts: s.prompts,
                    max_tokens: s.max_tokens,
                    send_cache_prompt_false: s.send_cache_prompt_false,
                })
            })
            .transpose()?;
        let metrics = rs
            .metrics
            .map(|m| {
                Ok::<_, ConfigError>(Metrics {
                    url: m
                        .url
                        .map(|u| url(&u, "stack.metrics", "url"))
                        .transpose()
                        .map_err(semantic)?,
                    names: m.names,
                    // A file path is relative to the config, like every path.
                    heat: m.heat.map(|h| {
                        if h.starts_with("http://") || h.starts_with("https://") {
                            h
                        } else {
                            resolve(Path::new(&h)).display().to_string()
                        }
                    }),
                    heat_trace: m.heat_trace.map(|p| resolve(&p)),
                    heat_flush: m
                        .heat_flush
                        .map(|u| url(&u, "stack.metrics", "heat_flush"))
                        .transpose()
                        .map_err(semantic)?,
                    required: m.required,
                })
            })
            .transpose()?;
        let shadow = rs
            .shadow
            .map(|s| {
                let optional: Vec<_> = s.optional.into_iter().map(|o| (o.when, o.args)).collect();
                if !s.metrics_path.starts_with('/') {
                    return Err(semantic(format!(
                        "[stack.shadow] metrics_path = {:?} must be an absolute path like \"/metrics\"",
                        s.metrics_path
                    )));
                }
                Ok::<_, ConfigError>(Shadow {
                    argv: ArgvTemplate::parse(
                        &s.argv,
                        &optional,
                        &[Special::Port, Special::Profile],
                    )
                    .map_err(|e| template("stack.shadow", e))?,
                    env: s.env,
                    health_path: s.health_path,
                    start_timeout: s.start_timeout_s,
                    require_drafts: s.require_drafts,
                    drafted_series: s.drafted_series,
                    metrics_path: s.metrics_path,
                })
            })
            .transpose()?;
        let unsupported = parse_unsupported(&rs.unsupported).map_err(semantic)?;
        if bench.is_none() && surface.is_none() {
            return Err(semantic(
                "[stack] has neither [stack.bench] nor [stack.surface]: the orchestrator needs one way to measure"
                    .into(),
            ));
        }
        let model = match raw.model {
            Some(m) => {
                if let Some(var) = &m.api_key_env {
                    check_env_name(var).map_err(semantic)?;
                }
                if m.max_tokens < 64 {
                    return Err(semantic(format!(
                        "[model] max_tokens = {} cannot hold the shortest menu answer; use at least 64",
                        m.max_tokens
                    )));
                }
                if m.max_attempts == 0 {
                    return Err(semantic("[model] max_attempts must be at least 1".into()));
                }
                if m.rationale_max_chars > crate::menu::RATIONALE_MAX_CHARS_LIMIT {
                    return Err(semantic(format!(
                        "[model] rationale_max_chars = {} is more than {}; use a smaller bound (0 asks for an empty rationale)",
                        m.rationale_max_chars,
                        crate::menu::RATIONALE_MAX_CHARS_LIMIT
                    )));
                }
                if m.bandit_fallback_after == 0 {
                    return Err(semantic(
                        "[model] bandit_fallback_after = 0 would hand every cycle to the bandit; \
                         use at least 1 (default 3), or set [cycle] proposer = \"bandit\""
                            .into(),
                    ));
                }
                Model {
                    base_url: url(&m.base_url, "model", "base_url").map_err(semantic)?,
                    name: m.name,
                    api_key_env: m.api_key_env,
                    connect_timeout: m.connect_timeout_s,
                    request_timeout: m.request_timeout_s,
                    max_attempts: m.max_attempts,
                    max_tokens: m.max_tokens,
                    rationale_max_chars: m.rationale_max_chars,
                    bandit_fallback_after: m.bandit_fallback_after,
                }
            }
            None if raw.cycle.proposer == ProposerChoice::Model => {
                return Err(semantic(
                    "[cycle] proposer = \"model\" needs a [model] table (base_url, name); \
                     add one or set proposer = \"bandit\""
                        .into(),
                ));
            }
            None => Model {
                base_url: url("http://127.0.0.1:1/v1", "model", "base_url").map_err(semantic)?,
                name: String::new(),
                api_key_env: None,
                connect_timeout: default_connect_timeout(),
                request_timeout: default_request_timeout(),
                max_attempts: default_attempts(),
                max_tokens: default_model_max_tokens(),
                rationale_max_chars: default_rationale_max_chars(),
                bandit_fallback_after: default_bandit_fallback_after(),
            },
        };
        let m = &raw.measure;
        if m.min_pairs == 0 || m.min_pairs > m.max_pairs {
            return Err(semantic(format!(
                "[measure] min_pairs ({}) must be at least 1 and at most max_pairs ({})",
                m.min_pairs, m.max_pairs
            )));
        }
        // The judge's own rules (even pair counts, whole ABBA blocks).
        m.policy().map_err(|e| semantic(format!("[measure] {e}")))?;
        if (m.floor_pairs as usize) < crate::judge::noise::MIN_PAIRS || m.floor_pairs > 200 {
            return Err(semantic(format!(
                "[measure] floor_pairs must be between {} and 200 (got {}); each pair is two runs of the live profile",
                crate::judge::noise::MIN_PAIRS,
                m.floor_pairs
            )));
        }
        if m.max_noise_floor.get() <= m.min_noise_floor.get() {
            return Err(semantic(format!(
                "[measure] max_noise_floor ({}) must be above min_noise_floor ({})",
                m.max_noise_floor.get(),
                m.min_noise_floor.get()
            )));
        }
        if !(m.floor_pressure_shift.is_finite()
            && m.floor_pressure_shift > 0.0
            && m.floor_pressure_shift <= 1.0)
        {
            return Err(semantic(format!(
                "[measure] floor_pressure_shift must be in (0, 1], a change of the CPU stall share (got {})",
                m.floor_pressure_shift
            )));
        }
        if !(m.memory_headroom_gb.is_finite() && m.memory_headroom_gb >= 0.0) {
            return Err(semantic(format!(
                "[measure] memory_headroom_gb must be a number >= 0 (got {})",
                m.memory_headroom_gb
            )));
        }
        if !raw.daemon.allow_remote && !raw.daemon.metrics_listen.ip().is_loopback() {
            return Err(semantic(format!(
                "[daemon] metrics_listen = {} is not loopback; use 127.0.0.1 or set allow_remote = true",
                raw.daemon.metrics_listen
            )));
        }
        let embedded = match raw.embedded {
            Some(e) => {
                for (key, addr) in [
                    ("serve_listen", e.serve_listen),
                    ("expert_server_listen", e.expert_server_listen),
                ] {
                    if !addr.ip().is_loopback() {
                        return Err(semantic(format!(
                            "[embedded] {key} = {addr} is not loopback; the embedded stack only binds 127.0.0.1"
                        )));
                    }
                }
                Some(Embedded {
                    tinyk3: resolve(&e.tinyk3),
                    model_dir: resolve(&e.model_dir),
                    init_args: e.init_args,
                    starting_profile: resolve(&e.starting_profile),
                    serve_listen: e.serve_listen,
                    expert_server_listen: e.expert_server_listen,
                    expert_server_max_warm: e.expert_server_max_warm,
                    heat_dir: resolve(&e.heat_dir),
                    start_timeout: e.start_timeout_s,
                    serve_args: e.serve_args,
                })
            }
            None => None,
        };
        Ok(Config {
            embedded,
            path: abs.clone(),
            objective: raw.objective,
            ledger_path: resolve(&raw.ledger.path),
            ledger_max_size: raw.ledger.max_size_mb,
            menu_dir: resolve(&raw.menu.dir),
            stack: Stack {
                name: rs.name,
                live_profile: resolve(&rs.live_profile),
                work_dir: resolve(&rs.work_dir),
                expert_bytes: rs.expert_bytes,
                cache_spare_slots: rs.cache_spare_slots,
                bench,
                surface,
                metrics,
                shadow,
                unsupported,
            },
            model,
            cycle: raw.cycle,
            measure: raw.measure,
            daemon: raw.daemon,
            base_dir,
        })
    }
}

/// `[stack] unsupported`: menu ids, each once; `remeasure` is never one
/// (every stack can repeat a measurement of itself).
fn parse_unsupported(ids: &[String]) -> Result<Vec<MenuId>, String> {
    let mut out = Vec::new();
    for text in ids {
        let id: MenuId = text.parse().map_err(|()| {
            format!(
                "[stack] unsupported: {text:?} is not a menu id; the menu's ids are: {}",
                MenuId::ids()
            )
        })?;
        if id == MenuId::Remeasure {
            return Err(
                "[stack] unsupported may not hold \"remeasure\": the noise floor and every verdict need it"
                    .into(),
            );
        }
        if out.contains(&id) {
            return Err(format!("[stack] unsupported names {id} twice"));
        }
        out.push(id);
    }
    Ok(out)
}

fn url(text: &str, table: &str, key: &str) -> Result<reqwest::Url, String> {
    let u = reqwest::Url::parse(text).map_err(|e| {
        format!(
            "[{table}] {key} = {text:?} is not a URL ({e}); write e.g. \"http://127.0.0.1:8080\""
        )
    })?;
    if !matches!(u.scheme(), "http" | "https") {
        return Err(format!("[{table}] {key} = {text:?} must be http or https"));
    }
    Ok(u)
}

/// `api_key_env` names a variable; refuse what looks like a pasted key, so a
/// secret never sits in a config file.
fn check_env_name(var: &str) -> Result<(), String> {
    let ok = !var.is_empty()
        && var.len() <= 64
        && var
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
        && !var.as_bytes()[0].is_ascii_digit();
    if ok {
        Ok(())
    } else {
        Err(
            "[model] api_key_env must be the NAME of an environment variable (like \
             ORCHESTRATOR_API_KEY), in capitals, digits and underscores. If you pasted the key \
             itself, remove it from the file and export it in that variable instead"
                .to_string(),
        )
    }
}

/// Turns a TOML/serde error into file:line, the key, the problem and a hint.
fn toml_error(text: &str, path: &Path, e: &toml::de::Error) -> ConfigError {
    let offset = e.span().map(|s| s.start).unwrap_or(0);
    let line = text[..offset.min(text.len())].matches('\n').count() + 1;
    let message = e.message().trim().to_string();
    let key = key_at(text, line);
    let hint = match unknown_field(&message) {
        Some(bad) => match nearest(bad) {
            Some(good) => format!("; did you mean `{good}`?"),
            None => "; remove it (see the comments in the default config.toml for valid keys)"
                .to_string(),
        },
        None => String::new(),
    };
    ConfigError::Invalid {
        path: path.to_path_buf(),
        line,
        key,
        problem: message,
        hint,
    }
}

/// `[table] key: ` for the key assigned on `line`, if that line assigns one.
fn key_at(text: &str, line: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let Some(this) = lines.get(line.saturating_sub(1)) else {
        return String::new();
    };
    let table = lines[..line.saturating_sub(1)]
        .iter()
        .rev()
        .map(|l| l.trim())
        .find(|l| l.starts_with('['))
        .unwrap_or("")
        .to_string();
    match this.split_once('=') {
        Some((k, _)) if !this.trim_start().starts_with('[') => {
            let sep = if table.is_empty() { "" } else { " " };
            format!("{table}{sep}{}: ", k.trim())
        }
        _ if !table.is_empty() => format!("{table}: "),
        _ => String::new(),
    }
}

fn unknown_field(message: &str) -> Option<&str> {
    let rest = message.strip_prefix("unknown field `")?;
    rest.split('`').next()
}

/// The known key closest in edit distance, if it is close enough to be a typo.
fn nearest(bad: &str) -> Option<&'static str> {
    KNOWN_KEYS
        .iter()
        .map(|k| (edit_distance(bad, k), *k))
        .filter(|(d, k)| *d <= (k.len().max(bad.len()) / 3).max(2))
        .min()
        .map(|(_, k)| k)
}

/// Levenshtein distance, two rows.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != *cb);
            cur.push(sub.min(prev[j + 1] + 1).min(cur[j] + 1));
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests;
