//! `orchestrator stage` and `orchestrator ledger` driven as real processes
//! against a ledger filled through the ledger API.

use std::path::{Path, PathBuf};
use std::process::Command as StdCommand;

use crate::staged;
use assert_cmd::Command;
use orchestrator::ledger::StageId;
use orchestrator::profile::Profile;

const BASE: &str = "[memory]\nbudget_gb = 1.0\ntrunk_gb = 0.25\ncache_gb = 0.5\n";

struct Fixture {
    dir: tempfile::TempDir,
}

impl Fixture {
    fn new() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let config =
            std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("config.toml"))
                .unwrap()
                .replace(
                    "dir = \"experiments\"",
                    &format!(
                        "dir = {:?}",
                        Path::new(env!("CARGO_MANIFEST_DIR")).join("experiments")
                    ),
                );
        std::fs::write(dir.path().join("config.toml"), config).unwrap();
        std::fs::create_dir_all(dir.path().join("ledger/profiles")).unwrap();
        std::fs::write(dir.path().join("ledger/profiles/live.toml"), BASE).unwrap();
        Fixture { dir }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.path().join(rel)
    }

    fn cmd(&self) -> Command {
        let mut c = Command::cargo_bin("orchestrator").unwrap();
        c.arg("--config").arg(self.path("config.toml"));
        c
    }

    fn base(&self) -> Profile {
        Profile::parse(BASE, Path::new("base")).unwrap()
    }

    /// Stages a confirmed win that raises the cache to `cache_gb`.
    fn stage_win(&self, cache_gb: f64) -> StageId {
        let base = self.base();
        staged::stage_win(
            &self.path("ledger/orchestrator.db"),
            &base,
            &staged::variant(&base, cache_gb),
        )
    }

    fn live(&self) -> Profile {
        Profile::load(&self.path("ledger/profiles/live.toml")).unwrap()
    }
}

fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn list_show_and_approve_a_staged_win() {
    let f = Fixture::new();
    let id = f.stage_win(0.75);

    let out = f.cmd().args(["stage", "list"]).output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("rebalance_trunk_cache"), "{text}");
    assert!(text.contains("-18.1% [-22.1%, -13.9%]"), "{text}");
    assert!(text.contains(f.base().digest().short()), "{text}");

    let out = f.cmd().args(["stage", "list", "--json"]).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v[0]["state"], "staged");
    // The effect is named both ways, as the table shows it and as stored.
    let pct = v[0]["effect_percent"].as_f64().unwrap();
    let log = v[0]["effect_log_ratio"].as_f64().unwrap();
    assert!((pct + 18.1).abs() < 0.05, "{v:#}");
    assert!((100.0 * log.exp_m1() - pct).abs() < 1e-9, "{v:#}");
    assert!(v[0].get("effect").is_none(), "no unlabelled effect: {v:#}");

    let out = f
        .cmd()
        .args(["stage", "show", &id.0.to_string()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("memory.cache_gb: 0.5 -> 0.75"), "{text}");
    assert!(text.contains("confirmation: verdict win"), "{text}");
    assert!(text.contains("candidate"), "{text}");

    let out = f
        .cmd()
        .args([
            "stage",
            "approve",
            &id.0.to_string(),
            "--by",
            "ada",
            "--note",
            "looks right",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("restart it"), "{}", stdout(&out));
    assert!(
        stdout(&out).contains("restart `orchestrator run`"),
        "the embedded stack restarts with the daemon: {}",
        stdout(&out)
    );
    assert_eq!(f.live().memory.cache_gb, 0.75);

    let out = f
        .cmd()
        .args(["stage", "list", "--all", "--json"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v[0]["state"], "approved");
    assert_eq!(v[0]["decided_by"], "ada");
    assert!(v[0]["applied_at"].is_string(), "{v:#}");

    // On SQLite the approval wrote the file, and `stage show` says so as a
    // PostgreSQL ledger's daemon-applied stage reads.
    let out = f
        .cmd()
        .args(["stage", "show", &id.0.to_string()])
        .output()
        .unwrap();
    let text = stdout(&out);
    assert!(
        text.contains("apply    approved by ada at ")
            && text.contains(&format!(
                "; applied to {} by `orchestrator stage approve` on host ",
                f.path("ledger/profiles/live.toml").display()
            )),
        "{text}"
    );

    // A second decision is refused, naming the first one; exit 1.
    let out = f
        .cmd()
        .args([
            "stage",
            "reject",
            &id.0.to_string(),
            "--reason",
            "changed my mind",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("already approved by ada"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_stage_of_another_stack_is_not_written_to_this_configs_live_profile() {
    let f = Fixture::new();
    let base = f.base();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let id = rt.block_on(async {
        let ledger = orchestrator::ledger::Ledger::open(f.path("ledger/orchestrator.db"))
            .await
            .unwrap()
            .scoped(orchestrator::ledger::StackScope {
                name: "another-desk".into(),
                class: None,
            });
        let id = staged::stage_win_on(&ledger, &base, &staged::variant(&base, 0.75)).await;
        ledger.close().await;
        id
    });
    let before = std::fs::read(f.path("ledger/profiles/live.toml")).unwrap();
    let out = f
        .cmd()
        .args(["stage", "approve", &id.0.to_string(), "--by", "ada"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("was staged by stack \"another-desk\"")
            && stderr(&out).contains("configures stack \"tinyk3\"")
            && stderr(&out).contains("Nothing was written"),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        std::fs::read(f.path("ledger/profiles/live.toml")).unwrap(),
        before
    );
    let out = f
        .cmd()
        .args(["stage", "list", "--stack", "another-desk", "--json"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v[0]["state"], "staged", "{v:#}");
}

#[test]
fn approving_a_stage_whose_base_is_no_longer_live_expires_it() {
    let f = Fixture::new();
    let id = f.stage_win(0.75);
    std::fs::write(
        f.path("ledger/profiles/live.toml"),
        BASE.replace("cache_gb = 0.5", "cache_gb = 0.4"),
    )
    .unwrap();
    let before = std::fs::read(f.path("ledger/profiles/live.toml")).unwrap();
    let out = f
        .cmd()
        .args(["stage", "approve", &id.0.to_string()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(err.contains("expired"), "{err}");
    assert!(err.contains("live profile changed"), "{err}");
    assert!(err.contains("Nothing was written"), "{err}");
    assert_eq!(
        std::fs::read(f.path("ledger/profiles/live.toml")).unwrap(),
        before
    );
    let out = f
        .cmd()
        .args(["stage", "list", "--all", "--json"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v[0]["state"], "expired");
}

#[test]
fn approving_one_win_expires_the_others_measured_against_the_old_profile() {
    let f = Fixture::new();
    let first = f.stage_win(0.75);
    let second = f.stage_win(0.6);
    let out = f
        .cmd()
        .args(["stage", "approve", &first.0.to_string(), "--by", "ada"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains(&format!(
            "Expired 1 other staged win(s) measured against the old live profile: {second}"
        )),
        "{text}"
    );

    // `stage list` no longer offers it, and the ledger says who and why.
    let out = f.cmd().args(["stage", "list", "--json"]).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v, serde_json::json!([]), "{v}");
    let states = staged::stages(&f.path("config.toml"));
    assert_eq!(
        states,
        vec![
            (first.0, "approved".into(), Some("ada".into())),
            (second.0, "expired".into(), Some("orchestrator".into())),
        ]
    );
    let out = f
        .cmd()
        .args(["stage", "show", &second.0.to_string()])
        .output()
        .unwrap();
    let text = stdout(&out);
    assert!(
        text.contains(&format!("stage {first} was approved")),
        "{text}"
    );

    // Approving it now is refused, naming the decision; the live profile
    // keeps the first approval.
    let out = f
        .cmd()
        .args(["stage", "approve", &second.0.to_string()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("already expired by orchestrator"),
        "{}",
        stderr(&out)
    );
    assert_eq!(f.live().memory.cache_gb, 0.75);
    let (code, report) = staged::check(&f.path("config.toml"));
    assert_eq!(code, 0, "{report:#}");
}

#[test]
fn two_racing_approvals_exactly_one_wins() {
    for round in 0..3 {
        let f = Fixture::new();
        let id = f.stage_win(0.75);
        let bin = assert_cmd::cargo::cargo_bin("orchestrator");
        let children: Vec<_> = (0..2)
            .map(|i| {
                StdCommand::new(&bin)
                    .arg("--config")
                    .arg(f.path("config.toml"))
                    .args([
                        "stage",
                        "approve",
                        &id.0.to_string(),
                        "--by",
                        &format!("shell{i}"),
                    ])
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        let outs: Vec<_> = children
            .into_iter()
            .map(|c| c.wait_with_output().unwrap())
            .collect();
        let ok = outs.iter().filter(|o| o.status.success()).count();
        assert_eq!(
            ok,
            1,
            "round {round}: {:?}",
            outs.iter().map(stderr).collect::<Vec<_>>()
        );
        let loser = outs.iter().find(|o| !o.status.success()).unwrap();
        let err = stderr(loser);
        assert!(
            err.contains("already approved by shell"),
            "round {round}: {err}"
        );
        assert!(!err.contains("database is locked"), "{err}");
        assert_eq!(f.live().memory.cache_gb, 0.75);
    }
}

#[test]
fn reject_needs_a_reason_and_unknown_stages_are_named() {
    let f = Fixture::new();
    let id = f.stage_win(0.75);
    let out = f
        .cmd()
        .args(["stage", "reject", &id.0.to_string(), "--reason", " "])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("--reason must say why"),
        "{}",
        stderr(&out)
    );

    let out = f.cmd().args(["stage", "show", "999"]).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("999 does not exist"),
        "{}",
        stderr(&out)
    );

    let out = f.cmd().args(["stage", "approve", "abc"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "clap usage errors exit 2");

    let out = f
        .cmd()
        .args([
            "stage",
            "reject",
            &id.0.to_string(),
            "--reason",
            "too risky",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(f.live().memory.cache_gb, 0.5, "rejecting writes nothing");
}

#[test]
fn ledger_lists_cycles_with_their_verdicts() {
    let f = Fixture::new();
    f.stage_win(0.75);
    let out = f.cmd().args(["ledger", "--limit", "5"]).output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("completed"), "{text}");
    assert_eq!(text.matches("win").count(), 2, "{text}");
    let out = f.cmd().args(["ledger", "--json"]).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v.as_array().unwrap().len(), 1);
}

#[test]
fn check_explains_what_it_found_on_a_fresh_config() {
    let f = Fixture::new();
    let out = f.cmd().arg("check").output().unwrap();
    // The fixture's config names target/release/tinyk3 beside it, which
    // is not there: that fails the check (exit 1), not the config (2).
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(text.contains("menu"), "{text}");
    assert!(text.contains("5 entries"), "{text}");
    assert!(text.contains("profile"), "{text}");
    assert!(
        text.contains("bench    FAILED target/release/tinyk3: NOT FOUND"),
        "{text}"
    );
    assert!(text.contains("no answer"), "endpoints are probed: {text}");
}

#[test]
fn a_bad_config_exits_2_naming_the_key() {
    let f = Fixture::new();
    let text = std::fs::read_to_string(f.path("config.toml"))
        .unwrap()
        .replace("max_pairs = 16", "max_pair = 16");
    std::fs::write(f.path("config.toml"), text).unwrap();
    let out = f.cmd().arg("check").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(err.contains("did you mean `max_pairs`?"), "{err}");
}

#[test]
fn config_comes_from_the_environment_when_no_flag_is_given() {
    let f = Fixture::new();
    let out = Command::cargo_bin("orchestrator")
        .unwrap()
        .env("ORCHESTRATOR_CONFIG", f.path("config.toml"))
        .arg("check")
        .output()
        .unwrap();
    assert_ne!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stdout(&out).contains(&f.path("config.toml").display().to_string()));
}

#[test]
fn only_run_creates_a_ledger_every_other_command_refuses_a_missing_one() {
    let f = Fixture::new();
    let text = std::fs::read_to_string(f.path("config.toml"))
        .unwrap()
        .replace(
            "path = \"ledger/orchestrator.db\"",
            "path = \"ledgr/orchestrator.db\"",
        );
    std::fs::write(f.path("config.toml"), text).unwrap();
    let missing = f.path("ledgr/orchestrator.db");
    let commands: &[&[&str]] = &[
        &["ledger"],
        &["ledger", "--json"],
        &["ledger", "--check"],
        &["stage", "list"],
        &["stage", "list", "--all", "--json"],
        &["stage", "show", "1"],
        &["stage", "approve", "1", "--by", "ann"],
        &["stage", "reject", "1", "--reason", "no", "--by", "ann"],
        &["report", "--week", "2026-W47"],
        &["rebaseline", "--reason", "new engine", "--by", "ann"],
    ];
    for args in commands {
        let out = f.cmd().args(*args).output().unwrap();
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(
            err.contains(&format!("there is no ledger at {}", missing.display()))
                && err.contains("`orchestrator run` creates it")
                && err.contains(&format!(
                    "check `ledger.path` in {}",
                    f.path("config.toml").display()
                )),
            "{args:?}: {err}"
        );
        assert_eq!(err.matches("no ledger").count(), 1, "said once: {err}");
        assert!(
            !stdout(&out).contains("no cycles recorded"),
            "{args:?} reported an empty ledger"
        );
        assert!(
            !f.path("ledgr").exists(),
            "{args:?} created the mistyped ledger's directory"
        );
    }
}

#[test]
fn show_and_approve_print_the_command_line_that_runs_the_staged_profile() {
    let f = Fixture::new();
    // A stack run by a person, not the embedded default: its serve command
    // is the `[stack.shadow]` argv, on the live surface's port.
    let text = std::fs::read_to_string(f.path("config.toml")).unwrap();
    let text = &text[..text.find("[embedded]").unwrap()];
    std::fs::write(f.path("config.toml"), text).unwrap();
    let id = f.stage_win(0.75).0.to_string();
    let live = f.path("ledger/profiles/live.toml");
    let serve = format!(
        "target/release/tinyk3 serve ledger/tinyk3-demo --profile {} --listen 127.0.0.1:8181",
        live.display()
    );

    let out = f.cmd().args(["stage", "show", &id]).output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains(&format!(
            "after `orchestrator stage approve {id}`, restart the serving stack with"
        )),
        "{text}"
    );
    let cd = format!("cd {} && ", f.dir.path().display());
    assert!(text.contains(&format!("{cd}{serve}")), "{text}");

    let out = f
        .cmd()
        .args(["stage", "show", &id, "--json"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        v["restart_after_approval"][1]
            .as_str()
            .is_some_and(|l| l.contains(&serve)),
        "{v:#}"
    );

    let out = f
        .cmd()
        .args(["stage", "approve", &id, "--by", "ada"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains("restart the serving stack with") && text.contains(&serve),
        "{text}"
    );
}

#[test]
fn without_user_the_decider_is_the_login_or_passwd_name_and_is_said() {
    let f = Fixture::new();
    let id = f.stage_win(0.75).0.to_string();
    let out = f
        .cmd()
        .env_remove("USER")
        .args(["stage", "reject", &id, "--reason", "not now"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    // SAFETY: getpwuid reads the password database; the name is copied at once.
    let passwd = unsafe {
        let pw = libc::getpwuid(libc::geteuid());
        std::ffi::CStr::from_ptr((*pw).pw_name)
            .to_string_lossy()
            .into_owned()
    };
    let text = stdout(&out);
    let by = text
        .strip_prefix(&format!("stage {id} rejected by "))
        .and_then(|t| t.split(':').next())
        .unwrap_or_else(|| panic!("{text}"));
    assert_ne!(by, "unknown", "{text}");
    let err = stderr(&out);
    if err.contains("from the password entry") {
        assert_eq!(by, passwd);
    } else {
        assert!(err.contains("from the login name"), "{err}");
    }
    assert!(
        err.contains(&format!("recording the decision as {by:?}")),
        "what it used is said: {err}"
    );
}

#[test]
fn a_missing_config_file_names_its_error_once() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope.toml");
    let out = Command::cargo_bin("orchestrator")
        .unwrap()
        .arg("--config")
        .arg(&missing)
        .arg("check")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(err.contains(&missing.display().to_string()), "{err}");
    assert_eq!(err.matches("No such file or directory").count(), 1, "{err}");
}

#[test]
fn a_win_measured_on_top_of_a_waiting_win_is_approved_after_it() {
    let f = Fixture::new();
    let under = f.stage_win(0.75);
    // What the daemon stages while `under` waits (`[cycle] build_on_staged`).
    let base = staged::variant(&f.base(), 0.75);
    let mut top = base.clone();
    top.memory.trunk_gb = 0.2;
    let on_top = staged::stage_win(&f.path("ledger/orchestrator.db"), &base, &top);

    let out = f.cmd().args(["stage", "list"]).output().unwrap();
    let text = stdout(&out);
    assert!(
        text.contains(&format!(
            "measured on top of stage {under}, which waits: approve {under} first"
        )),
        "{text}"
    );

    // Out of order: refused, nothing written, nothing expired.
    let before = std::fs::read(f.path("ledger/profiles/live.toml")).unwrap();
    let out = f
        .cmd()
        .args(["stage", "approve", &on_top.0.to_string()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains(&format!("approve stage {under} first")),
        "{err}"
    );
    assert!(err.contains("Nothing was written"), "{err}");
    assert_eq!(
        std::fs::read(f.path("ledger/profiles/live.toml")).unwrap(),
        before
    );

    // In order: the first approval keeps the win on top of it, which then
    // applies on its own base.
    for id in [under, on_top] {
        let out = f
            .cmd()
            .args(["stage", "approve", &id.0.to_string(), "--by", "ada"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        assert!(!stdout(&out).contains("Expired"), "{}", stdout(&out));
    }
    assert_eq!(f.live(), top);
    let states = staged::stages(&f.path("config.toml"));
    assert!(states.iter().all(|(_, s, _)| s == "approved"), "{states:?}");
}

#[test]
fn rejecting_a_waiting_win_expires_the_win_measured_on_top_of_it() {
    let f = Fixture::new();
    let under = f.stage_win(0.75);
    let base = staged::variant(&f.base(), 0.75);
    let mut top = base.clone();
    top.memory.trunk_gb = 0.2;
    let on_top = staged::stage_win(&f.path("ledger/orchestrator.db"), &base, &top);
    // A win on the live profile itself is no part of the chain.
    let beside = f.stage_win(0.6);
    let out = f
        .cmd()
        .args([
            "stage",
            "reject",
            &under.0.to_string(),
            "--reason",
            "not now",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains(&format!(
            "Expired the stage(s) measured on top of it: {on_top}."
        )),
        "{}",
        stdout(&out)
    );
    // By the rejection itself: nothing else ran since.
    let states = staged::stages(&f.path("config.toml"));
    assert!(
        states.contains(&(on_top.0, "expired".into(), Some("orchestrator".into()))),
        "{states:?}"
    );
    assert!(
        states.contains(&(beside.0, "staged".into(), None)),
        "{states:?}"
    );
    let out = f
        .cmd()
        .args(["stage", "show", &on_top.to_string()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains(&format!("measured on top of stage {under}, rejected by")),
        "{}",
        stdout(&out)
    );
}

#[test]
fn a_win_on_the_live_profile_is_approved_though_a_win_on_top_of_it_comes_back() {
    let f = Fixture::new();
    let under = f.stage_win(0.75);
    // Measured on top of `under`, it goes back to the live profile: each
    // of the two is then "built on" the other's candidate.
    let there = staged::variant(&f.base(), 0.75);
    let back = staged::stage_win(&f.path("ledger/orchestrator.db"), &there, &f.base());
    let out = f
        .cmd()
        .args(["stage", "approve", &under.0.to_string(), "--by", "ada"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(f.live(), there);
    let states = staged::stages(&f.path("config.toml"));
    assert!(
        states.contains(&(under.0, "approved".into(), Some("ada".into()))),
        "{states:?}"
    );
    // Now an ordinary win on the live profile.
    assert!(
        states.contains(&(back.0, "staged".into(), None)),
        "{states:?}"
    );
}

/// Seen on the real engine: a live profile that does not parse was listed
/// as `VIOLATION LiveProfile` and counted as a rule the ledger breaks. It
/// is the profile file's fault: `ledger --check` says so, with the fix, and
/// calls the ledger itself consistent; the exit is still 1.
#[test]
fn ledger_check_blames_a_torn_live_profile_on_the_file_not_the_ledger() {
    let f = Fixture::new();
    f.stage_win(0.75);
    let live = f.path("ledger/profiles/live.toml");
    std::fs::write(&live, "[memory\nbudget_gb = 1.0\n").unwrap();
    let out = f.cmd().args(["ledger", "--check"]).output().unwrap();
    let (text, err) = (stdout(&out), stderr(&out));
    assert_eq!(out.status.code(), Some(1), "{text}\n{err}");
    assert!(!text.contains("VIOLATION"), "{text}");
    assert!(text.contains("is consistent"), "{text}");
    let line = text
        .lines()
        .find(|l| l.starts_with("PROFILE"))
        .unwrap_or_else(|| panic!("no PROFILE line: {text}"));
    assert!(
        line.contains(&format!("the live profile {} is not whole", live.display()))
            && line.contains("This is the profile file, not the ledger")
            && line.contains("`orchestrator check`"),
        "{line}"
    );
    assert!(
        !err.contains("breaks") && err.contains("itself is consistent"),
        "{err}"
    );

    let (code, report) = staged::check(&f.path("config.toml"));
    assert_eq!(code, 1);
    assert_eq!(report["consistent"], true, "{report}");
    assert_eq!(report["violations"].as_array().unwrap().len(), 0);
    assert_eq!(report["live_profile"]["whole"], false, "{report}");
}

/// The runs of a block the judge discarded are listed with the evidence
/// but were never counted: `stage show` says how many pairs it left out
/// and marks their runs, in text and JSON.
#[test]
fn stage_show_marks_the_runs_the_judge_discarded() {
    let f = Fixture::new();
    let id = f.stage_win(0.75);
    let db = f.path("ledger/orchestrator.db");
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let ledger = orchestrator::ledger::Ledger::open_existing(&db)
            .await
            .unwrap();
        let detail = ledger.stage_detail(id).await.unwrap();
        // The first A/B's pair 0 (its first two runs).
        let pair0: Vec<_> = detail
            .runs
            .iter()
            .filter(|r| r.pair_index == Some(0))
            .map(|r| r.id)
            .collect();
        assert_eq!(pair0.len(), 2);
        ledger.mark_discarded(&pair0).await.unwrap();
        ledger.close().await;
    });

    let out = f
        .cmd()
        .args(["stage", "show", &id.0.to_string()])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let experiment = text
        .lines()
        .find(|l| l.starts_with("experiment: verdict"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        experiment.contains("(and 1 discarded, marked below)"),
        "{experiment}"
    );
    let confirmation = text
        .lines()
        .find(|l| l.starts_with("confirmation: verdict"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(!confirmation.contains("discarded"), "{confirmation}");
    let marked = text.lines().filter(|l| l.ends_with("  discarded")).count();
    assert_eq!(marked, 2, "the two runs of pair 0:\n{text}");

    let out = f
        .cmd()
        .args(["stage", "show", &id.0.to_string(), "--json"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["discarded_pairs"]["experiment"], serde_json::json!([0]));
    assert_eq!(v["discarded_pairs"]["confirmation"], serde_json::json!([]));
    let runs = v["detail"]["runs"].as_array().unwrap();
    let flagged: Vec<bool> = runs.iter().map(|r| r["discarded"] == true).collect();
    assert_eq!(flagged, [true, true, false, false], "{v:#}");
}
