//! tinyk3: a small but real tiered mixture-of-experts engine, its far expert tier and its bench.
//!
//! Module map, from the bytes on disk up to the commands:
//! - [`manifest`], [`checkpoint`], [`rng`]: the checkpoint format and its deterministic writer;
//! - [`aligned`], [`coldio`]: page-aligned buffers and reads that bypass the page cache;
//! - [`math`]: f32 kernels with a fixed summation order, shared by engine and server;
//! - [`trunk`]: the dense weights, part resident, the rest re-read per use;
//! - [`tiers`], [`pins`]: pinned experts, the LRU cache, cold reads, `K3EXPERTS` lists;
//! - [`far`], [`server`]: the far tier's wire protocol, client and expert server;
//! - [`model`], [`moe`]: the forward pass (attention, dense, router) and the routed experts;
//! - [`engine`]: open a model under [`profile::Settings`], prefill, step, generate, counters;
//! - [`heat`]: the expert histogram and request trace;
//! - [`phases`]: wall-clock seconds per part of the forward pass (trunk, experts by tier, draft);
//! - [`profile`]: engine settings and the orchestrator's profile TOML;
//! - [`serve`]: `tinyk3 serve`, the OpenAI-compatible server with constrained decoding and metrics;
//! - [`cli`], [`cmd`]: the command line and one handler per subcommand;
//! - [`error`]: the error type and its exit codes.

pub mod aligned;
pub mod checkpoint;
pub mod cli;
pub mod cmd;
pub mod coldio;
pub mod engine;
pub mod error;
pub mod far;
pub mod heat;
pub mod manifest;
pub mod math;
pub mod model;
pub mod moe;
pub mod phases;
pub mod pins;
pub mod profile;
pub mod rng;
pub mod serve;
pub mod server;
pub mod tiers;
pub mod trunk;

pub use engine::{Counters, DecodeMode, Engine, Generation};
pub use error::{Error, Result};
pub use profile::Settings;
