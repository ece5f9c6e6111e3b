//! `orchestrator report` as a real process: formats, files, empty weeks, and
//! exit 2 with the expected format for a bad week or date.

use crate::demo;
use crate::faults;
use crate::report_fixture;
use crate::report_fixture::Site;
use assert_cmd::Command;
use predicates::prelude::*;

fn cmd(site: &Site) -> Command {
    let mut c = Command::cargo_bin("orchestrator").unwrap();
    c.arg("--config").arg(site.config_path()).arg("report");
    c
}

#[test]
fn markdown_to_stdout_and_html_to_a_file() {
    let site = Site::new(true);
    cmd(&site)
        .args(["--week", "2026-W47"])
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "# Weekly report: tinyk3, 2026-W47 (2026-11-16 to 2026-11-22)",
        ))
        .stdout(predicate::str::contains("Projection (not a measurement)"))
        .stdout(predicate::str::contains(report_fixture::LEAKED_TOKEN).not());
    let out = site.dir.path().join("w47.html");
    cmd(&site)
        .args([
            "--since",
            "2026-11-16",
            "--until",
            "2026-11-22",
            "--format",
            "html",
            "--out",
        ])
        .arg(&out)
        .assert()
        .success()
        .stdout(predicate::str::is_empty());
    let html = std::fs::read_to_string(&out).unwrap();
    assert!(html.starts_with("<!DOCTYPE html>") && html.contains("<svg id=\"chart-noise\""));
    assert!(html.contains("2026-11-16 to 2026-11-22"));
}

#[test]
fn an_empty_week_is_reported_not_refused() {
    let site = Site::new(false);
    cmd(&site)
        .args(["--week", "2026-W01"])
        .assert()
        .success()
        .stdout(predicate::str::contains(
            "Nothing was recorded in this period",
        ))
        // The hint holds for either backend, not SQLite's `ledger.path` only.
        .stdout(predicate::str::contains(
            "check that its config's `[ledger]` table names this ledger (`path` for SQLite, `url` for PostgreSQL)",
        ));
}

#[test]
fn bad_periods_exit_2_naming_the_format() {
    let site = Site::new(false);
    for (args, expected) in [
        (&["--week", "2026-W54"][..], "YYYY-Www"),
        (&["--week", "2026-48"][..], "YYYY-Www"),
        (&["--since", "2026-13-01"][..], "YYYY-MM-DD"),
        (&["--since", "23/11/2026"][..], "YYYY-MM-DD"),
        (
            &["--since", "2026-11-20", "--until", "2026-11-19"][..],
            "since <= until",
        ),
    ] {
        cmd(&site)
            .args(args)
            .assert()
            .code(2)
            .stderr(predicate::str::contains(expected));
    }
    // clap refuses a week together with dates, also with exit 2.
    cmd(&site)
        .args(["--week", "2026-W47", "--since", "2026-11-16"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("--week"));
}

#[test]
fn a_missing_ledger_is_not_a_quiet_week() {
    let site = Site::new(false);
    std::fs::remove_file(site.ledger_path()).unwrap();
    cmd(&site)
        .args(["--week", "2026-W47"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("there is no ledger at"));
    assert!(
        !site.ledger_path().exists(),
        "the report must not create a ledger"
    );
}

#[test]
fn an_out_file_in_a_missing_directory_is_refused_with_the_fix() {
    let site = Site::new(false);
    let out = site.dir.path().join("no-such-dir").join("w47.md");
    cmd(&site)
        .args(["--week", "2026-W47", "--out"])
        .arg(&out)
        .assert()
        .code(2)
        .stderr(predicate::str::contains("no-such-dir does not exist"))
        .stderr(predicate::str::contains("create it first"));
    assert!(!out.exists());
}

#[test]
fn right_after_a_first_run_the_default_report_shows_it() {
    let _heavy = crate::common::heavy();
    // The real daemon on the embedded tinyk3 stack: its first cycle
    // measures the noise floor and stores it as the daemon does. Only
    // `remeasure` is on the menu: otherwise the first cycle may be a
    // choice the planner refuses, or an A/B the bound decides, neither of
    // which measures a floor.
    let demo = demo::Demo::new(
        "bandit",
        faults::TINY_START,
        faults::TINY_INIT,
        faults::TINY_EXPERT_BYTES,
        4,
    );
    // This test is about where the floor lands, not about judging: a
    // machine shared with other work must not end the measurement as too
    // noisy (which stores no floor).
    let config = demo.path("config.toml");
    let text = std::fs::read_to_string(&config)
        .unwrap()
        .replace("max_contention_rise = 0.25", "max_contention_rise = 10")
        .replace("max_discarded_blocks = 8", "max_discarded_blocks = 1000")
        .replace("max_noise_floor = 0.50", "max_noise_floor = 0.95")
        .replacen(
            "\n[stack]\n",
            "\n[stack]\nunsupported = [\"rerank_pins\", \"deepen_warm_set\", \"stage_speculative\", \"rebalance_trunk_cache\"]\n",
            1,
        );
    assert!(text.contains("unsupported = ["), "the menu is narrowed");
    std::fs::write(&config, text).unwrap();
    let out = demo.cmd().args(["run", "--cycles", "1"]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // No period given: the report covers today.
    let out = demo.cmd().arg("report").output().unwrap();
    let md = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!md.contains("Nothing was recorded"), "{md}");
    // Seven days ending on a Sunday are exactly an ISO week, and the
    // heading says so (CI at 060c261 ran on a Sunday).
    assert!(
        md.starts_with("# Report: tinyk3, ") || md.starts_with("# Weekly report: tinyk3, "),
        "{md}"
    );
    assert!(md.contains("- Cycles: 1 (1 completed"), "{md}");
    // The floor the cycle measured is in the noise section, by protocol.
    assert!(md.contains("1 measurement(s)"), "{md}");
    // (A proposed remeasure measures the live surface's floor.)
    assert!(
        md.contains("| bench | ±") || md.contains("| surface | ±"),
        "{md}"
    );
}
