//! `orchestrator`: tunes a tiered mixture-of-experts serving stack by safe,
//! measured experiments, and stages wins for a person to approve.
//!
//! Modules, lowest first: each imports only from modules listed before it
//! (`tests/e2e/layering.rs` checks that against `docs/architecture.md`).
//!
//! The ground everything stands on:
//! - [`vocab`]: the closed sets stored in the ledger (verdicts, stage states, arms, digests).
//! - `atomic_file`: temp file, fsync, rename, fsync of the directory.
//! - [`clock`]: the clock seam rows are stamped with.
//! - `display`: how stored numbers read for people.
//! - `progress`: what the daemon is doing now, for stderr and the metrics endpoint.
//! - [`profile`]: the serving stack's knobs, canonical form and digest.
//! - [`process`]: child processes: argv templates, process groups, cancellation, orphans.
//! - [`heat`]: the expert heat histogram and request trace, parsed and checked.
//! - [`judge`]: pure statistics: noise floor, sequential paired A/B, run order.
//!
//! What a stack offers and how it is configured:
//! - [`menu`]: the fixed menu, its JSON schema and the validator of answers.
//! - [`ledger`]: the experiment ledger, SQLite or PostgreSQL; all SQL lives here.
//! - [`config`]: the configuration file → validated types (the judge's policy among them).
//! - [`stack_support`]: which menu entries a stack supports (`[stack] unsupported`).
//! - `apply`: an approved stage written as its stack's live profile, and the restart line.
//!
//! One cycle, in the order data flows:
//! - [`observe`]: the live metrics, heat and trace.
//! - [`plan`]: one planner per menu entry; `rerank_pins` replays the trace first.
//! - [`brain`]: the proposer: the served model (chat API) or a bandit over the menu.
//! - [`measure`]: scorers, the hash gate and the A/B runner.
//! - `embedded`: the embedded default's tinyk3 stack, run as children.
//! - [`cycle`]: one cycle: observe, choose, plan, measure, judge, record, stage.
//! - `daemon`: the long-running loop of cycles.
//!
//! Reading the ledger and the command line:
//! - [`report`]: the weekly report, Markdown or HTML with SVG charts.
//! - [`cli`]: the clap types.
//! - [`commands`]: one handler per subcommand, and the exit codes.

pub mod vocab;
mod atomic_file;
pub mod clock;
mod display;
mod progress;
pub mod profile;
pub mod process;
pub mod heat;
pub mod judge;

pub mod menu;
pub mod ledger;
pub mod config;
pub mod stack_support;
mod apply;

pub mod observe;
pub mod plan;
pub mod brain;
pub mod measure;
mod embedded;
pub mod cycle;
mod daemon;

pub mod report;
pub mod cli;
pub mod commands;
