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
//! - [`plan`]: one planner per menu entry; `rerank_pins` replays the trace first.
//! - [`report`]: the weekly report from the ledger, Markdown or HTML with SVG charts.

pub mod judge;
pub mod ledger;
pub mod vocab;
pub mod atomic_file;
pub mod menu;
pub mod profile;
pub mod measure;
pub mod config;
pub mod cli;
pub mod commands;
pub mod display;
pub mod brain;
pub mod daemon;
pub mod observe;
pub mod heat;
pub mod plan;
pub mod embedded;
pub mod report;
pub mod cycle;
