//! A tier that cannot run here is a counted skip, and under `CI=true` a
//! failure: the real kimi-k3-in-c test, run again as a child of this test
//! program with `K3_BIN` removed, once as a developer runs it and once as
//! CI does.

use std::path::Path;
use std::process::{Command, Output};

/// The test that needs `K3_BIN`.
const KIMI: &str = "kimi_k3_real::the_real_engine_runs_the_example_cycle_after_cycle";

/// [`KIMI`] alone, without an engine, `CI` set to `ci` (or unset), its
/// skips logged to `log`.
fn kimi_without_engine(ci: Option<&str>, log: &Path) -> Output {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([KIMI, "--exact", "--nocapture", "--test-threads", "1"])
        .env_remove("K3_BIN")
        .env("ORCH_TEST_SKIP_LOG", log);
    match ci {
        Some(v) => cmd.env("CI", v),
        None => cmd.env_remove("CI"),
    };
    cmd.output().unwrap()
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn a_missing_engine_is_a_counted_skip_and_fails_under_ci() {
    let dir = tempfile::tempdir().unwrap();
    for ci in [None, Some("false")] {
        let log = dir.path().join(format!("skips-{ci:?}.log"));
        let out = kimi_without_engine(ci, &log);
        let said = text(&out);
        assert!(out.status.success(), "CI={ci:?}: {said}");
        assert!(said.contains("1 passed"), "the test did not run: {said}");
        assert!(
            said.contains("*** SKIPPED") && said.contains("K3_BIN is unset"),
            "the skip is not said: {said}"
        );
        let logged = std::fs::read_to_string(&log).unwrap();
        assert_eq!(logged.lines().count(), 1, "{logged}");
        assert!(logged.starts_with(&format!("{KIMI}\t")), "{logged}");
    }
    let log = dir.path().join("skips-ci.log");
    let out = kimi_without_engine(Some("true"), &log);
    let said = text(&out);
    assert!(!out.status.success(), "under CI=true a skip passed: {said}");
    assert!(said.contains("1 failed"), "the test did not run: {said}");
    assert!(
        said.contains("K3_BIN is unset") && said.contains("CI=true"),
        "the failure does not say why: {said}"
    );
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(logged.contains("FAILED under CI=true"), "{logged}");
}
