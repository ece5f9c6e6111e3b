//! `stage revert` on a shared PostgreSQL ledger (issue #32), on the test
//! cluster of `scripts/postgres.sh`: a revert asked for from another host
//! writes no file there; the stage's own stack's real daemon writes the
//! replaced profile back at its next start, once, and the staged win
//! measured on top of the reverted profile is expired by the request.

use std::path::Path;
use std::process::Output;
use std::time::Duration;

use orchestrator::ledger::{Ledger, StackScope, StageId};
use orchestrator::profile::Profile;
use serde_json::Value;

use crate::common;
use crate::postgres_stack_lock::{PG_PASSWORD_VAR, fresh_database, host_config, orchestrator};
use crate::staged;

/// A bench double standing in for the engine: it answers at once.
const BENCH: &str = r#"out=""
while [ $# -gt 0 ]; do
  if [ "$1" = "--out" ]; then out="$2"; fi
  shift
done
printf '{"seconds_per_token": 0.05%d, "output_hash": "00000000deadbeef"}' $(($$ % 10)) > "$out""#;

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn run(config: &Path, args: &[&str]) -> Output {
    orchestrator(config).args(args).output().unwrap()
}

fn stage_for(url: &str, stack: &str, base: &Profile, candidate: &Profile) -> StageId {
    let password = std::env::var(PG_PASSWORD_VAR).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let ledger = Ledger::open_postgres(url, Some(&password), Duration::from_secs(5))
            .await
            .unwrap()
            .scoped(StackScope {
                name: stack.to_string(),
                class: None,
            });
        let id = staged::stage_win_on(&ledger, base, candidate).await;
        ledger.close().await;
        id
    })
}

#[test]
fn a_revert_from_another_host_is_written_by_the_stacks_daemon_once() {
    let _heavy = common::heavy();
    let url = fresh_database("revert_anywhere");
    let (s_dir, t_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let s = host_config(
        s_dir.path(),
        &url,
        "spark-s",
        &common::script(s_dir.path(), "bench-double.sh", BENCH),
    );
    let t = host_config(
        t_dir.path(),
        &url,
        "spark-t",
        &common::script(t_dir.path(), "bench-double.sh", BENCH),
    );
    let live_path = s_dir.path().join("live.toml");
    let base = Profile::load(&live_path).unwrap();
    let candidate = staged::variant(&base, 0.003);
    let id = stage_for(&url, "spark-s", &base, &candidate);
    let out = run(&t, &["stage", "approve", &id.to_string(), "--by", "alice"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let out = run(&s, &["run", "--cycles", "1"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        Profile::load(&live_path).unwrap().digest(),
        candidate.digest()
    );
    let on_top = stage_for(
        &url,
        "spark-s",
        &candidate,
        &staged::variant(&candidate, 0.004),
    );

    // --restart needs the file written here: refused, nothing recorded.
    let id_text = id.to_string();
    let revert = [
        "stage",
        "revert",
        id_text.as_str(),
        "--reason",
        "slower live",
        "--by",
        "bob",
    ];
    let out = run(&t, &[&revert[..], &["--restart"]].concat());
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let out = run(&t, &revert);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let said = text(&out.stdout);
    assert!(
        said.contains("the daemon of stack spark-s writes the replaced profile"),
        "{said}"
    );
    assert!(
        said.contains(&format!("on top of the reverted profile: {on_top}")),
        "{said}"
    );
    assert_eq!(
        Profile::load(&live_path).unwrap().digest(),
        candidate.digest(),
        "no host but the stack's own writes its live profile"
    );
    let show = |id: StageId| -> Value {
        let out = run(&t, &["stage", "show", &id.to_string(), "--json"]);
        assert!(out.status.success(), "{}", text(&out.stderr));
        serde_json::from_slice(&out.stdout).unwrap()
    };
    assert!(show(id)["revert"]["applied_at"].is_null());
    assert_eq!(show(on_top)["detail"]["stage"]["state"], "expired");

    let out = run(&s, &["run", "--cycles", "1"]);
    let log = text(&out.stderr);
    assert!(
        log.contains(&format!(
            "reverted stage {id} (asked for by bob (slower live))"
        )),
        "{log}"
    );
    assert_eq!(Profile::load(&live_path).unwrap().digest(), base.digest());
    let written = std::fs::read_to_string(&live_path).unwrap();
    let revert_row = show(id)["revert"].clone();
    assert!(revert_row["applied_at"].is_string(), "{revert_row:#}");
    assert!(
        revert_row["applied_by"]
            .as_str()
            .unwrap()
            .starts_with("the daemon of stack spark-s"),
        "{revert_row:#}"
    );

    // Settled once: the next start writes nothing.
    let out = run(&s, &["run", "--cycles", "1"]);
    assert!(
        !text(&out.stderr).contains("reverted stage"),
        "{}",
        text(&out.stderr)
    );
    assert_eq!(std::fs::read_to_string(&live_path).unwrap(), written);
}
