//! `orchestrator`: tunes a tiered mixture-of-experts serving stack by safe,
//! measured experiments, and stages wins for a person to approve.
//!
//! Modules, in the order data flows through one cycle:
//!
//! - [`vocab`]: the shared vocabulary (verdicts, stage states, arms, digests).
//! - [`judge`]: statistics: noise floor, sequential paired A/B, simulation.
//! - [`ledger`]: the SQLite experiment ledger; all SQL lives here.
//! - [`brain`]: the proposer: the served model (chat API) or a bandit over the menu.
//! - [`heat`]: the expert heat histogram and request trace, parsed and checked.
//! - [`stack_support`]: which menu entries a stack supports (`[stack] unsupported`), checked against its commands.
//! - [`plan`]: one planner per menu entry; `rerank_pins` replays the trace first.
//! - [`report`]: the weekly report from the ledger, Markdown or HTML with SVG charts.

pub mod atomic_file;
pub mod brain;
pub mod cli;
pub mod clock;
pub mod commands;
pub mod config;
pub mod cycle;
pub mod daemon;
pub mod display;
pub mod embedded;
pub mod heat;
pub mod judge;
pub mod ledger;
pub mod measure;
pub mod menu;
pub mod observe;
pub mod plan;
pub mod process;
pub mod profile;
pub mod progress;
pub mod report;
pub mod stack_support;
pub mod vocab;
