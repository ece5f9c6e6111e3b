//! End-to-end tests of the orchestrator: the real daemon and CLI, the real
//! tinyk3 stack (and llama.cpp and kimi-k3-in-c tiers) over real files,
//! loopback ports and SQLite. One test program with a module per area, so
//! the dependency tree is linked once.
//!
//! Tests that load the machine or measure time take [`common::heavy`] for
//! their whole body: in one program they would otherwise run beside each
//! other, which they never did as separate programs.

// Helpers shared by the modules below.
mod common;
mod demo;
mod faults;
mod live_stack;
mod live_server;
mod report_fixture;
#[path = "../support/skip.rs"]
mod skip;
mod staged;

mod approve_anywhere;
mod bandit_screening;
mod bound_win;
mod brain_tinyk3;
mod check_cli;
mod checkpoint_top_k;
mod child_environment;
mod ci_skips;
mod class_confirm;
mod compare_cli;
mod compose_wins;
mod confirm_unsupported;
mod crash_consistency;
mod doc_links;
mod engine_loop;
mod fault_matrix_engine;
mod fault_matrix_metrics;
mod fault_matrix_model;
mod fleet_race;
mod judge_simulation;
mod kimi_k3_bench;
mod kimi_k3_real;
mod layering;
mod ledger_write_failure;
mod llama_server;
mod measure_ab;
mod measure_bench;
mod measure_surface;
mod noisy_machine;
mod plan_pins;
mod realization;
mod postgres_quiet;
mod postgres_restart;
mod postgres_stack_lock;
mod report_cli;
mod report_fleet;
mod report_html;
mod report_markdown;
mod report_period;
mod remeasure_aa;
mod report_plan;
mod revert_anywhere;
mod run_loop;
mod run_stages_a_win;
mod security;
mod service;
mod shadow_drafts;
mod stand_aside;
mod stage_cli;
mod stage_concurrency;
mod stage_revert;
mod too_wide_floor;
mod unknown_stack;
