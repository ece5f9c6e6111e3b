//! The one way a test says it cannot run here: a tier whose tool, binary,
//! data or privilege is missing. Outside CI the test is skipped, loudly and
//! counted; under `CI=true` (set by `.ci/run`) it FAILS, so a missing tier
//! is never a green run.
//!
//! Shared by the end-to-end tests (`tests/e2e/main.rs`) and the library's
//! unit tests (`src/ledger/tests/mod.rs`), both through `#[path]`: it needs
//! nothing but `std`.
//!
//! Every skip is appended to a log, one line per skip (`test<TAB>reason`):
//! `ORCH_TEST_SKIP_LOG`, else `test-skips.log` in the target directory.
//! `scripts/test.sh` empties it first and prints it at the end, because the
//! test harness hides a passing test's stderr.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The variable CI sets; `true` turns every skip into a failure.
const CI_VAR: &str = "CI";
/// Where skips are logged, when set.
const LOG_VAR: &str = "ORCH_TEST_SKIP_LOG";

/// Skips of this test program so far.
static SKIPPED: AtomicUsize = AtomicUsize::new(0);

/// Whether this run is CI's, where nothing may be skipped.
pub fn in_ci() -> bool {
    std::env::var(CI_VAR).is_ok_and(|v| v == "true")
}

/// The log every skip is appended to.
pub fn log_path() -> PathBuf {
    if let Some(p) = std::env::var_os(LOG_VAR) {
        return PathBuf::from(p);
    }
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"));
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(|| workspace.join("target"), |t| workspace.join(t));
    target.join("test-skips.log")
}

/// The calling test cannot run here because of `reason`; `enable` says how
/// to give it what it needs. Under `CI=true` this panics (the test fails);
/// otherwise it prints the skip, counts and logs it, and the caller returns.
pub fn skip(reason: &str, enable: &str) {
    let thread = std::thread::current();
    let test = thread.name().unwrap_or("an unnamed test");
    if in_ci() {
        record(test, &format!("FAILED under CI=true: {reason}"));
        panic!(
            "{test} cannot run here: {reason}.\nUnder {CI_VAR}=true a test that cannot run fails \
             instead of skipping. To run it: {enable}"
        );
    }
    let n = SKIPPED.fetch_add(1, Ordering::Relaxed) + 1;
    let log = record(test, reason);
    eprintln!(
        "\n*** SKIPPED {test}: {reason}\n*** to run it: {enable}\n*** skip {n} of this test \
         program, logged to {log}; under {CI_VAR}=true it fails\n"
    );
}

/// Appends the skip to the log; the log's path, or why it could not be
/// written (a skip is still printed and counted then).
fn record(test: &str, reason: &str) -> String {
    use std::io::Write;
    let path = log_path();
    let line = format!("{test}\t{}\n", reason.replace(['\n', '\t'], " "));
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .and_then(|mut f| f.write_all(line.as_bytes()));
    match written {
        Ok(()) => path.display().to_string(),
        Err(e) => format!("nowhere ({}: {e})", path.display()),
    }
}
