//! Command-line types (clap derive); the handlers live in `cmd/`.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

/// A small but real tiered mixture-of-experts serving stack.
#[derive(Debug, Parser)]
#[command(name = "tinyk3", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Write a deterministic synthetic checkpoint.
    Init(InitArgs),
    /// Generate greedily under a profile and report measured speed and tier counters as JSON.
    Bench(BenchArgs),
    /// Serve experts from RAM over TCP: the far tier.
    ExpertServer(ServerArgs),
    /// Turn an `expert_hist.json` into a `K3EXPERTS` pin list, hottest first.
    Pins(PinsArgs),
    /// Serve the model over an OpenAI-compatible HTTP API, with metrics and heat.
    Serve(ServeArgs),
}

/// `tinyk3 init`.
#[derive(Debug, Args)]
pub struct InitArgs {
    /// Directory to write manifest.json, trunk.bin and experts.bin into.
    #[arg(long)]
    pub out: PathBuf,
    #[arg(long, default_value_t = 16)]
    pub layers: usize,
    #[arg(long, default_value_t = 64)]
    pub experts: usize,
    #[arg(long, default_value_t = 4)]
    pub top_k: usize,
    #[arg(long, default_value_t = 256)]
    pub d_model: usize,
    /// Hidden width of each expert's gated MLP.
    #[arg(long, default_value_t = 512)]
    pub d_expert: usize,
    /// Hidden width of each layer's dense block (sets the trunk's size).
    #[arg(long, default_value_t = 3072)]
    pub d_dense: usize,
    #[arg(long, default_value_t = 4)]
    pub heads: usize,
    #[arg(long, default_value_t = 32768)]
    pub vocab: usize,
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Zipf exponent of expert popularity (0 = uniform).
    #[arg(long, default_value_t = 1.0)]
    pub skew: f64,
    /// Attention layers the speculative draft keeps.
    #[arg(long, default_value_t = 1)]
    pub draft_layers: usize,
    /// Scale of the residual branches; smaller = the draft agrees more often.
    #[arg(long, default_value_t = 0.015)]
    pub residual_scale: f64,
}

/// `tinyk3 bench`, with the kimi-k3-in-c flags where they mean the same thing.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Model directory written by `tinyk3 init`.
    pub model: PathBuf,
    /// Prompt token ids, comma separated.
    #[arg(long, conflicts_with = "prompt")]
    pub ids: Option<String>,
    /// Prompt text (byte-level tokens).
    #[arg(long)]
    pub prompt: Option<String>,
    /// Tokens to generate (decode steps).
    #[arg(long = "gen", id = "gen", default_value_t = 16, value_parser = clap::value_parser!(u64).range(1..))]
    pub gen_tokens: u64,
    /// LRU expert cache in GB (10^9 bytes).
    #[arg(long)]
    pub cache_gb: Option<f64>,
    /// Resident trunk in GB; the rest is re-read every token.
    #[arg(long)]
    pub trunk_gb: Option<f64>,
    /// Accepted for kimi-k3-in-c compatibility and ignored: tinyk3's trunk lives in MODEL_DIR.
    #[arg(long)]
    pub trunk: Option<PathBuf>,
    /// RAM budget in GB for trunk + cache + pins (checked).
    #[arg(long)]
    pub budget_gb: Option<f64>,
    #[arg(long)]
    pub threads: Option<u64>,
    /// Decode with a KV cache (otherwise every token recomputes the sequence).
    #[arg(long)]
    pub incremental: bool,
    /// Speculative decoding with N draft tokens (needs --incremental).
    #[arg(long)]
    pub spec: Option<usize>,
    /// Write expert_hist.json and expert_trace.bin into DIR (created).
    #[arg(long)]
    pub dump_cache_trace: Option<PathBuf>,
    /// Write the JSON report here (it is also printed on stdout).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// A K3EXPERTS pin list.
    #[arg(long)]
    pub pins: Option<PathBuf>,
    /// Pin the first N rows of the pin list (default: all of them).
    #[arg(long)]
    pub pin_count: Option<usize>,
    /// host:port of a `tinyk3 expert-server`.
    #[arg(long)]
    pub far: Option<String>,
    /// Ask the far tier to hold the N hottest experts warm for this run.
    #[arg(long)]
    pub far_warm_set: Option<usize>,
    /// Take every knob from an orchestrator profile; explicit flags override it.
    #[arg(long)]
    pub profile: Option<PathBuf>,
}

/// `tinyk3 expert-server`.
#[derive(Debug, Args)]
pub struct ServerArgs {
    #[arg(long)]
    pub model: PathBuf,
    /// Address to listen on (port 0 picks a free one; the bound address is printed).
    #[arg(long, default_value = "127.0.0.1:0")]
    pub listen: String,
    /// Most experts held in RAM.
    #[arg(long)]
    pub warm_set: usize,
    /// Fault injection for tests: exit abruptly on compute request N+1, as if killed.
    #[arg(long)]
    pub exit_after_requests: Option<u64>,
}

/// `tinyk3 pins`.
#[derive(Debug, Args)]
pub struct PinsArgs {
    /// Model directory (for its shape).
    pub model: PathBuf,
    /// An expert_hist.json from `bench --dump-cache-trace`.
    #[arg(long)]
    pub hist: PathBuf,
    /// Where to write the K3EXPERTS list.
    #[arg(long)]
    pub out: PathBuf,
}

/// `tinyk3 serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Model directory written by `tinyk3 init`.
    pub model: PathBuf,
    /// The orchestrator profile to serve under (read once; a change takes a
    /// restart). `/health` reports the sha256 of the bytes read.
    #[arg(long)]
    pub profile: PathBuf,
    /// Override the profile's LRU expert cache, in GB (as `bench --cache-gb`).
    /// `/health` still reports the profile's sha256 and names what was overridden.
    #[arg(long)]
    pub cache_gb: Option<f64>,
    /// Override the profile's resident trunk, in GB (as `bench --trunk-gb`).
    #[arg(long)]
    pub trunk_gb: Option<f64>,
    /// Override the profile's compute threads.
    #[arg(long)]
    pub threads: Option<u64>,
    /// Address to listen on; port 0 picks a free one (the bound address is printed).
    #[arg(long, default_value = "127.0.0.1:8181")]
    pub listen: String,
    /// Allow a non-loopback --listen address (the server has no authentication).
    #[arg(long)]
    pub allow_remote: bool,
    /// Where `POST /heat/flush` writes expert_hist.json and expert_trace.bin.
    #[arg(long)]
    pub dump_cache_trace: Option<PathBuf>,
    /// Requests that may wait behind the running one; past that, 429.
    #[arg(long, default_value_t = 8)]
    pub queue: usize,
    /// Longest prompt accepted, in tokens (bytes of the templated chat).
    #[arg(long, default_value_t = 16384)]
    pub max_prompt_tokens: usize,
    /// The model's context window: only the last N prompt tokens are fed to
    /// it (0 = the whole prompt). Byte-level prefill is slow on a small
    /// machine; a long prompt's end is where the chat template puts the ask.
    #[arg(long, default_value_t = 0)]
    pub context_tokens: usize,
}
