//! What an approved stage realized, measured by the real daemon: a real
//! `tinyk3 serve` as the live server (restarted by the test double of
//! `systemctl restart` in [`crate::live_stack`]), a shadow of the replaced
//! profile started beside it, and the stage's claim seeded through the
//! ledger API as the loop records one. A win is realized as a win; a live
//! server started slower than the profile it reports (a `--cache-gb`
//! override a stale service unit could carry) realizes a loss, which
//! `stage revert` undoes; a stack with no shadow says why nothing is
//! realized.

use orchestrator::ledger::StageId;
use orchestrator::profile::Profile;
use serde_json::Value;

use crate::live_stack::{LiveStack, text};
use crate::{common, staged};

/// Big enough that tiers matter (experts of 384 KiB, cold reads from
/// disk), small enough to serve in tens of milliseconds a token.
const INIT: [&str; 20] = [
    "--seed",
    "2",
    "--layers",
    "8",
    "--experts",
    "32",
    "--top-k",
    "4",
    "--d-model",
    "128",
    "--d-expert",
    "256",
    "--d-dense",
    "512",
    "--heads",
    "4",
    "--vocab",
    "512",
    "--skew",
    "1.0",
];
/// An expert cache of ten experts: every token reads most of its experts
/// from disk (measured here: 66-115 ms a token through the server).
const SLOW: &str = "[memory]\nbudget_gb = 0.05\ntrunk_gb = 0.03\ncache_gb = 0.004\n";
/// A cache that holds every expert (10-16 ms a token).
const FAST: &str = "[memory]\nbudget_gb = 0.2\ntrunk_gb = 0.03\ncache_gb = 0.15\n";

fn profile(text: &str) -> Profile {
    Profile::parse(text, std::path::Path::new("test")).unwrap()
}

/// The daemon of this stack: the bandit proposes (no served model needed),
/// floors of 10 pairs, its metrics on a free port, this checkpoint's
/// expert size.
fn configure(s: &LiveStack) {
    let metrics = format!("metrics_listen = \"127.0.0.1:{}\"", common::free_port());
    s.edit_config(&[
        ("proposer = \"model\"", "proposer = \"bandit\""),
        ("floor_pairs = 20", "floor_pairs = 10"),
        ("expert_bytes = 1572864", "expert_bytes = 393216"),
        ("metrics_listen = \"127.0.0.1:9464\"", &metrics),
    ]);
}

fn approve_with_restart(s: &LiveStack, id: StageId) {
    let said = s.ok(&[
        "stage",
        "approve",
        &id.0.to_string(),
        "--by",
        "ada",
        "--restart",
    ]);
    assert!(
        said.contains("reporting that it runs the profile in"),
        "the restart waited for the server to report the new profile: {said}"
    );
}

/// Runs the real daemon a cycle at a time until stage `id` is realized
/// (at most `cycles`); every cycle line and stderr, and the stage's
/// `realized` as `stage show --json` gives it.
fn cycles_until_realized(s: &LiveStack, id: StageId, cycles: usize) -> (String, String, Value) {
    let (mut lines, mut logs) = (String::new(), String::new());
    for _ in 0..cycles {
        let out = s.cmd().args(["run", "--once"]).output().unwrap();
        lines.push_str(&text(&out.stdout));
        logs.push_str(&text(&out.stderr));
        let realized = s.show(id)["realized"].clone();
        if matches!(
            realized["status"].as_str(),
            Some("win" | "within_noise" | "loss")
        ) {
            return (lines, logs, realized);
        }
    }
    panic!("stage {id} was not realized within {cycles} cycles:\n{lines}\n{logs}");
}

#[test]
fn an_approved_win_restarted_on_is_measured_realized_by_the_next_cycles() {
    let _heavy = common::heavy();
    let s = LiveStack::with_live_server(SLOW, Some(&INIT), "");
    configure(&s);
    let (id, candidate) = s.stage_to(&s.base(), &profile(FAST));
    approve_with_restart(&s, id);
    assert_eq!(s.live().digest(), candidate.digest());

    let (lines, _, realized) = cycles_until_realized(&s, id, 3);
    assert_eq!(realized["status"], "win", "{realized:#}\n{lines}");
    // (Its interval is the judge's reported 90% one, which a decision
    // after two blocks leaves wide; the decision is the verdict.)
    assert!(
        realized["effect_percent"].as_f64().unwrap() < 0.0,
        "{realized:#}"
    );
    assert!(realized["interval_percent"].as_array().unwrap().len() == 2);
    // The claim it is shown beside: the seeded confirmation's -0.2.
    let claimed = realized["claimed_effect_percent"].as_f64().unwrap();
    assert!(
        (claimed - 100.0 * (-0.2f64).exp_m1()).abs() < 1e-9,
        "{realized:#}"
    );
    assert!(realized["revert"].is_null());
    assert!(lines.contains(&format!("REALIZED stage #{id}")), "{lines}");
    // `orchestrator ledger` names the cycle for what it measured (the
    // seeded claim's cycle has no proposal either: it is not one).
    let ledger = s.ok(&["ledger"]);
    assert_eq!(
        ledger.matches("scheduled (realization)").count(),
        1,
        "{ledger}"
    );
    // The live server ran faster than the replaced profile's shadow.
    let shown = s.show(id);
    let attempts = shown["realization_attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 1, "{shown:#}");
    let table = s.ok(&["stage", "list", "--all"]);
    assert!(table.contains("realized a win"), "{table}");
    let list = s.list();
    let row = list.iter().find(|v| v["id"] == id.0).unwrap();
    assert_eq!(row["realized"]["status"], "win", "{row:#}");

    // The report shows the claim against the realization, and charts it.
    let md = s.ok(&["report"]);
    assert!(md.contains("## Claimed against realized"), "{md}");
    let row = md
        .lines()
        .find(|l| l.starts_with(&format!("| #{id} ")))
        .unwrap_or_else(|| panic!("no row of stage {id}:\n{md}"));
    assert!(row.contains("-18.1%") && row.contains("| win "), "{row}");
    let html = s.ok(&["report", "--format", "html"]);
    assert!(html.contains("<svg id=\"chart-realized\""), "no chart");
    assert!(
        html.contains(&format!("stage #{id} realized win")),
        "no realized point"
    );
}

/// An attempt that decided nothing (seeded: `inconclusive`, the live
/// server too noisy) holds the next one back for the back-off every
/// undecided measurement keeps: the next cycle measures something else,
/// and the stage says why and when; once the back-off has passed, a cycle
/// realizes it. The back-off here is `max_wait_s` 20 s, where 3600 s is
/// shipped.
#[test]
fn a_realization_that_decided_nothing_is_tried_again_only_after_its_back_off() {
    let _heavy = common::heavy();
    let s = LiveStack::with_live_server(SLOW, Some(&INIT), "");
    configure(&s);
    s.edit_config(&[("max_wait_s = 3600", "max_wait_s = 20")]);
    let (id, _) = s.stage_to(&s.base(), &profile(FAST));
    approve_with_restart(&s, id);
    let seeded = staged::undecided_realization(&s.path("ledger/orchestrator.db"), id);
    let due = std::time::Instant::now() + std::time::Duration::from_secs(20);

    let out = s.cmd().args(["run", "--once"]).output().unwrap();
    let shown = s.show(id);
    let attempts = shown["realization_attempts"].as_array().unwrap();
    assert_eq!(
        attempts.len(),
        1,
        "measured again at once:\n{shown:#}\n{}",
        text(&out.stderr)
    );
    assert_eq!(shown["realized"]["status"], "unrealized", "{shown:#}");
    let line = shown["realized"]["note"].as_str().unwrap_or_default();
    assert!(
        line.contains(&format!(
            "its last attempt (experiment #{seeded}) decided nothing"
        )) && line.contains("the next is due at"),
        "{line}"
    );
    // The cycle measured something else: the seeded cycle is the only
    // realization in the ledger.
    let ledger = s.ok(&["ledger"]);
    assert_eq!(
        ledger.matches("scheduled (realization)").count(),
        1,
        "{ledger}"
    );

    std::thread::sleep(due.saturating_duration_since(std::time::Instant::now()));
    let (lines, _, realized) = cycles_until_realized(&s, id, 3);
    assert_eq!(realized["status"], "win", "{realized:#}\n{lines}");
    let attempts = s.show(id)["realization_attempts"].as_array().unwrap().len();
    assert_eq!(attempts, 2);
}

#[test]
fn a_live_server_slower_than_its_profile_realizes_a_loss_that_revert_undoes() {
    let _heavy = common::heavy();
    // The supervisor starts the server with a stale flag over the profile.
    let s = LiveStack::with_live_server(FAST, Some(&INIT), "--cache-gb 0.004");
    configure(&s);
    let base = s.base();
    let (id, candidate) = s.stage(&base, 0.16);
    approve_with_restart(&s, id);
    assert_eq!(s.live().digest(), candidate.digest());
    let (on_top, _) = s.stage(&candidate, 0.17);

    let (lines, logs, realized) = cycles_until_realized(&s, id, 3);
    assert_eq!(realized["status"], "loss", "{realized:#}\n{lines}\n{logs}");
    // (Its interval is the judge's reported 90% one, which a decision
    // after two blocks may leave wide; the decision is the verdict.)
    assert!(
        realized["effect_percent"].as_f64().unwrap() > 0.0,
        "{realized:#}"
    );
    assert_eq!(
        realized["revert"],
        format!("orchestrator stage revert {id} --reason \"realized a loss\"")
    );
    // Loud: the cycle line, an error log line, and `stage show`.
    let line = lines
        .lines()
        .find(|l| l.contains("REALIZED A LOSS"))
        .unwrap_or_else(|| panic!("no cycle line says so:\n{lines}"));
    assert!(
        line.contains(&format!("orchestrator stage revert {id}")),
        "{line}"
    );
    assert!(
        logs.lines()
            .any(|l| l.contains("ERROR") && l.contains(&format!("stage #{id} realized a LOSS"))),
        "{logs}"
    );
    let shown = s.ok(&["stage", "show", &id.0.to_string()]);
    assert!(shown.contains("realized a LOSS +"), "{shown}");
    assert!(
        shown.contains(&format!("`orchestrator stage revert {id} --reason")),
        "{shown}"
    );

    // The revert restores the replaced profile; the win built on it expires.
    let id_text = id.0.to_string();
    let said = s.ok(&[
        "stage",
        "revert",
        &id_text,
        "--reason",
        "realized a loss",
        "--by",
        "bob",
        "--restart",
    ]);
    assert!(
        said.contains(&format!(
            "Expired 1 staged win(s) measured on top of the reverted profile: {on_top}"
        )),
        "{said}"
    );
    assert_eq!(
        s.live().digest(),
        base.digest(),
        "the replaced profile is back"
    );
    let list = s.list();
    let row = |x: StageId| list.iter().find(|v| v["id"] == x.0).unwrap().clone();
    assert_eq!(row(on_top)["state"], "expired");
    assert_eq!(row(id)["revert"]["requested_by"], "bob");
    assert_eq!(row(id)["realized"]["status"], "loss");

    let md = s.ok(&["report"]);
    assert!(
        md.contains("**LOSS**") && md.contains(&format!("stage revert {id}")),
        "{md}"
    );
}

#[test]
fn a_stack_without_a_shadow_says_why_its_stages_stay_unrealized() {
    let _heavy = common::heavy();
    let s = LiveStack::with_live_server(SLOW, None, "");
    configure(&s);
    // Cut [stack.shadow] out of the config.
    let path = s.path("config.toml");
    let config = std::fs::read_to_string(&path).unwrap();
    let (head, rest) = config.split_once("\n[stack.shadow]\n").unwrap();
    let tail = &rest[rest.find("\n[model]").unwrap()..];
    std::fs::write(&path, format!("{head}{tail}")).unwrap();

    let (id, _) = s.stage(&s.base(), 0.005);
    approve_with_restart(&s, id);
    let out = s.cmd().args(["run", "--once"]).output().unwrap();
    let realized = s.show(id)["realized"].clone();
    assert_eq!(
        realized["status"],
        "unrealized",
        "{realized:#}\n{}",
        text(&out.stderr)
    );
    assert!(
        realized["note"]
            .as_str()
            .unwrap()
            .contains("no [stack.shadow]"),
        "{realized:#}"
    );
    assert!(
        realized["effect_percent"].is_null(),
        "no verdict is made up"
    );
    assert!(
        s.show(id)["realization_attempts"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    let shown = s.ok(&["stage", "show", &id.0.to_string()]);
    assert!(
        shown.contains("not realized yet: the config has no [stack.shadow]"),
        "{shown}"
    );
}

/// A live server that does not report the profile it runs, restarted by
/// hand after an approval without `--restart`: the daemon cannot tell when
/// it runs the stage's profile, says so and names `stage restarted`; once
/// the operator records the restart, the next cycles realize the stage.
#[test]
fn a_restart_by_hand_recorded_with_stage_restarted_is_realized() {
    let _heavy = common::heavy();
    let s = LiveStack::with_live_server(SLOW, Some(&INIT), "");
    configure(&s);
    s.edit_config(&[("health_profile_sha256 = \"profile_sha256\"\n", "")]);
    let (id, candidate) = s.stage_to(&s.base(), &profile(FAST));
    let (staged, _) = s.stage(&candidate, 0.17);
    let id_text = id.0.to_string();
    s.ok(&["stage", "approve", &id_text, "--by", "ada"]);
    assert_eq!(s.live().digest(), candidate.digest());

    // Not applied: nothing to have restarted on.
    let out = s
        .cmd()
        .args(["stage", "restarted", &staged.0.to_string()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("Nothing was recorded"),
        "{}",
        text(&out.stderr)
    );

    // The operator restarts the stack by hand; the daemon cannot tell.
    let restarted = std::process::Command::new("./restart-test-double.sh")
        .current_dir(s.dir.path())
        .status()
        .unwrap();
    assert!(restarted.success());
    let out = s.cmd().args(["run", "--once"]).output().unwrap();
    let realized = s.show(id)["realized"].clone();
    assert_eq!(
        realized["status"],
        "unrealized",
        "{realized:#}\n{}",
        text(&out.stderr)
    );
    let note = realized["note"].as_str().unwrap();
    assert!(
        note.contains(&format!("orchestrator stage restarted {id}")),
        "{note}"
    );
    assert!(
        s.show(id)["realization_attempts"]
            .as_array()
            .unwrap()
            .is_empty()
    );

    let said = s.ok(&["stage", "restarted", &id_text]);
    assert!(
        said.contains(&format!(
            "Recorded that the stack was restarted on stage {id}'s"
        )),
        "{said}"
    );
    let (lines, _, realized) = cycles_until_realized(&s, id, 3);
    assert_eq!(realized["status"], "win", "{realized:#}\n{lines}");
}
