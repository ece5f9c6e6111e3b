//! `orchestrator stage revert` and `stage approve|revert --restart` driven
//! as real processes: a real `tinyk3 serve` as the live server, restarted
//! by a test double of `systemctl restart` (a script that stops the server
//! it started last and starts a new one in a session of its own, as a
//! supervisor would), and a SQLite ledger filled through the ledger API.

use std::time::{Duration, Instant};

use crate::live_stack::{LiveStack, healthy, text};
use crate::{common, staged};
use orchestrator::ledger::StageId;

const BASE: &str = "[memory]\nbudget_gb = 1.0\ntrunk_gb = 0.25\ncache_gb = 0.5\n";

fn id(s: StageId) -> String {
    s.0.to_string()
}

#[test]
fn approve_and_revert_with_restart_restart_the_live_server_and_revert_expires_what_was_built_on_it()
{
    let _heavy = common::heavy();
    let f = LiveStack::with_live_server(BASE, None, "");
    let (first, candidate) = f.stage(&f.base(), 0.75);

    let said = f.ok(&["stage", "approve", &id(first), "--by", "ada", "--restart"]);
    assert!(
        said.contains("Restarted the stack with `./restart-test-double.sh`"),
        "{said}"
    );
    assert!(
        said.contains(&format!("127.0.0.1:{}/health answered", f.port)),
        "{said}"
    );
    assert_eq!(f.live().digest(), candidate.digest());
    let approved_server = f.server_pid().expect("the restart started a server");
    assert!(common::alive(approved_server) && healthy(f.port));
    let shown = f.show(first);
    assert!(
        shown["detail"]["stage"]["restarted_at"].is_string(),
        "{shown:#}"
    );

    // A win measured on top of the approved profile waits; the revert
    // takes its base away.
    let (on_top, _) = f.stage(&candidate, 0.9);
    let said = f.ok(&[
        "stage",
        "revert",
        &id(first),
        "--reason",
        "slower live",
        "--by",
        "bob",
        "--restart",
    ]);
    assert!(
        said.contains(&format!("stage {first} reverted by bob (slower live)")),
        "{said}"
    );
    assert!(said.contains("memory.cache_gb: 0.75 -> 0.5"), "{said}");
    assert!(
        said.contains(&format!(
            "Expired 1 staged win(s) measured on top of the reverted profile: {on_top}"
        )),
        "{said}"
    );
    assert!(said.contains("Restarted the stack with"), "{said}");
    assert_eq!(
        f.live().digest(),
        f.base().digest(),
        "the replaced profile is back"
    );
    let reverted_server = f.server_pid().unwrap();
    assert_ne!(
        reverted_server, approved_server,
        "a new server runs the reverted profile"
    );
    assert!(!common::alive(approved_server));
    assert!(healthy(f.port));

    let list = f.list();
    let row = |s: StageId| list.iter().find(|v| v["id"] == s.0).unwrap().clone();
    assert_eq!(row(first)["revert"]["requested_by"], "bob");
    assert_eq!(row(first)["revert"]["reason"], "slower live");
    assert!(row(first)["revert"]["applied_at"].is_string());
    assert!(row(first)["revert"]["restarted_at"].is_string());
    assert_eq!(row(on_top)["state"], "expired");
    let out = f.cmd().args(["stage", "list", "--all"]).output().unwrap();
    let table = text(&out.stdout);
    assert!(table.contains("reverted by bob at"), "{table}");
    let out = f
        .cmd()
        .args(["stage", "show", &id(first)])
        .output()
        .unwrap();
    assert!(
        text(&out.stdout).contains("revert   reverted by bob"),
        "{}",
        text(&out.stdout)
    );

    // Once reverted is once.
    let out = f
        .cmd()
        .args(["stage", "revert", &id(first), "--reason", "again"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("is reverted already"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn a_revert_is_refused_when_the_live_profile_changed_since_the_stage_was_applied() {
    let f = LiveStack::new(None, BASE);
    let (first, _) = f.stage(&f.base(), 0.75);
    let out = f
        .cmd()
        .args(["stage", "approve", &id(first), "--by", "ada"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    // Someone edits the live profile by hand after the approval.
    let by_hand = staged::variant(&f.base(), 0.6);
    std::fs::write(f.path("ledger/profiles/live.toml"), by_hand.canonical()).unwrap();

    let out = f
        .cmd()
        .args([
            "stage",
            "revert",
            &id(first),
            "--reason",
            "slower",
            "--by",
            "bob",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(
        err.contains(&format!("stage {first} was NOT reverted")),
        "{err}"
    );
    assert!(
        err.contains("the live profile changed since the stage's profile was written"),
        "{err}"
    );
    assert!(err.contains(by_hand.digest().short()), "{err}");
    assert_eq!(f.live().digest(), by_hand.digest(), "nothing was written");
    let row = f.list().into_iter().find(|v| v["id"] == first.0).unwrap();
    assert!(row["revert"].is_null(), "nothing was recorded: {row:#}");

    // A stage that was never applied has nothing to revert.
    let (staged_only, _) = f.stage(&by_hand, 0.7);
    let out = f
        .cmd()
        .args(["stage", "revert", &id(staged_only), "--reason", "no"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("only an approved stage"),
        "{}",
        text(&out.stderr)
    );
}

#[test]
fn a_failed_restart_exits_1_naming_the_command_and_leaves_the_profile_written() {
    let f = LiveStack::new(
        Some("\"./restart-test-double.sh\", \"tinyk3.service\""),
        BASE,
    );
    common::script(
        f.dir.path(),
        "restart-test-double.sh",
        "echo \"Failed to restart $1: Unit $1 not found.\" >&2\nexit 5",
    );
    let (first, candidate) = f.stage(&f.base(), 0.75);
    let out = f
        .cmd()
        .args(["stage", "approve", &id(first), "--by", "ada", "--restart"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(
        err.contains("the restart command `./restart-test-double.sh tinyk3.service` exited 5"),
        "{err}"
    );
    assert!(err.contains("Unit tinyk3.service not found"), "{err}");
    assert!(err.contains("IS written"), "{err}");
    assert_eq!(
        f.live().digest(),
        candidate.digest(),
        "the profile stays written"
    );
    let row = f.list().into_iter().find(|v| v["id"] == first.0).unwrap();
    assert_eq!(row["state"], "approved");

    // A restart that comes back but whose server never answers is one too.
    let f = LiveStack::new(Some("\"true\""), BASE);
    let (first, _) = f.stage(&f.base(), 0.75);
    std::fs::write(
        f.path("config.toml"),
        std::fs::read_to_string(f.path("config.toml"))
            .unwrap()
            .replace("restart_timeout_s = 60", "restart_timeout_s = 1"),
    )
    .unwrap();
    let started = Instant::now();
    let out = f
        .cmd()
        .args(["stage", "approve", &id(first), "--by", "ada", "--restart"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(
        err.contains("the restart command `true` ran, but the live server's"),
        "{err}"
    );
    assert!(
        err.contains("did not answer 200 on the live profile within 1s"),
        "{err}"
    );
    assert!(started.elapsed() < Duration::from_secs(30));
}

#[test]
fn restart_without_a_configured_command_is_refused_before_anything_is_written() {
    let f = LiveStack::new(None, BASE);
    let (first, _) = f.stage(&f.base(), 0.75);
    let out = f
        .cmd()
        .args(["stage", "approve", &id(first), "--by", "ada", "--restart"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(err.contains("has no [stack] restart"), "{err}");
    assert!(err.contains("Nothing was written"), "{err}");
    assert_eq!(f.live().digest(), f.base().digest());
    let row = f.list().into_iter().find(|v| v["id"] == first.0).unwrap();
    assert_eq!(row["state"], "staged");
}
