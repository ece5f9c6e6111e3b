//! `orchestrator compare`: the judge as a command, end to end. The real
//! binary on the embedded tinyk3 stack (a small checkpoint) judges a
//! profile against the live one (or `--base`): a win confirmed by its
//! second A/B, a loss, a difference within noise, a changed output (the
//! `fault-wrapper` test double in front of the real engine), a missing
//! profile (exit 2, nothing measured) and a stack that is down (exit 1).
//! Each comparison is recorded as manual experiments in cycles of their
//! own (proposer `human`), never staged, the live profile never written;
//! and a daemon started afterwards neither stages nor trips over them.

use std::process::Output;

use serde_json::Value;

use crate::demo::Demo;
use crate::faults::{edit_config, queue_fault, wrap_bench};

/// `bound_win`'s checkpoint: big enough that a run is more than process
/// start-up, so its speed is the engine's even on a loaded machine.
const INIT: &str = r#""--seed", "3", "--layers", "4", "--experts", "16", "--top-k", "2", "--d-model", "64", "--d-expert", "128", "--d-dense", "256", "--heads", "2", "--vocab", "512""#;
const EXPERT_BYTES: u64 = 3 * 64 * 128 * 4;
/// No speculation: each token recomputes the whole sequence.
const START: &str = "[memory]\nbudget_gb = 0.01\ntrunk_gb = 0.001\ncache_gb = 0.004\n[far]\naddr = \"FAR\"\nwarm_set = 0\n";
/// The start with speculation: a KV cache and drafts, several times faster.
const DRAFT: &str = "[speculative]\ndraft_len = 8\n";

fn demo(max_pairs: u32) -> Demo {
    Demo::new("bandit", START, INIT, EXPERT_BYTES, max_pairs)
}

/// A profile file in the demo's directory: the start plus `extra`, its far
/// tier the demo's.
fn profile(demo: &Demo, name: &str, extra: &str) -> String {
    let text = format!("{START}{extra}").replace("FAR", &format!("127.0.0.1:{}", demo.far));
    std::fs::write(demo.path(name), text).unwrap();
    demo.path(name).display().to_string()
}

/// A profile other than the start that runs the same command:
/// `memory.budget_gb` reaches no argument of the bench.
fn same_speed(demo: &Demo) -> String {
    let same = profile(demo, "same.toml", "");
    let text = std::fs::read_to_string(&same)
        .unwrap()
        .replace("budget_gb = 0.01", "budget_gb = 0.011");
    std::fs::write(&same, text).unwrap();
    same
}

fn compare(demo: &Demo, args: &[&str]) -> (Output, Option<Value>) {
    let out = demo.cmd().arg("compare").args(args).output().unwrap();
    let json = serde_json::from_slice(&out.stdout).ok();
    (out, json)
}

fn said(out: &Output) -> String {
    format!(
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Every cycle in the ledger is a manual comparison's: one manual
/// experiment, and the floor's A/A it measured, if any, beside it; no
/// proposer was asked; nothing is staged.
fn assert_recorded_manual(demo: &Demo, cycles: usize) -> Vec<Value> {
    let listed = demo.ledger();
    assert_eq!(listed.len(), cycles, "{listed:#?}");
    for c in &listed {
        assert!(c["cycle"]["proposer"].is_null(), "{c:#}");
        let vs = c["verdicts"].as_array().unwrap();
        let manual = vs.iter().filter(|v| v["manual"] == true).count();
        assert_eq!(manual, 1, "{c:#}");
        for v in vs {
            assert!(v["manual"] == true || v["menu_id"] == "remeasure", "{v:#}");
        }
    }
    assert!(
        demo.json_list(&["stage", "list", "--all", "--json"])
            .is_empty(),
        "a comparison is never staged"
    );
    listed
}

#[test]
fn a_faster_candidate_wins_is_confirmed_and_nothing_is_staged() {
    let _heavy = crate::common::heavy();
    let demo = demo(16);
    let candidate = profile(&demo, "candidate.toml", DRAFT);
    let (out, json) = compare(&demo, &["--candidate", &candidate, "--json"]);
    assert!(out.status.success(), "{}", said(&out));
    let j = json.unwrap_or_else(|| panic!("no JSON: {}", said(&out)));
    assert_eq!(j["verdict"], "win", "{j:#}");
    assert_eq!(j["confirmed"], true, "{j:#}");
    assert_eq!(j["staged"], false);
    assert_eq!(j["base"]["live"], true, "{j:#}");
    // The claim is the confirmation's, as a stage's is, and says faster.
    let conf = &j["confirmation"];
    assert_eq!(conf["verdict"], "win", "{j:#}");
    assert_eq!(j["effect_log_ratio"], conf["effect_log_ratio"]);
    let [lo, hi] = [0, 1].map(|i| j["interval_log_ratio"][i].as_f64().unwrap());
    let effect = j["effect_log_ratio"].as_f64().unwrap();
    // Its 90% interval holds the estimate; whether it lies wholly below
    // zero is the judge's own promise (`bound_win`), not this command's.
    assert!(lo <= effect && effect <= hi && effect < 0.0, "{j:#}");
    assert!(j["speedup"].as_f64().unwrap() > 1.0, "{j:#}");
    for ab in [&j["ab"], conf] {
        // At least one ABBA block (2 pairs): a big effect may settle there.
        assert!(ab["runs"]["baseline"].as_u64().unwrap() >= 2, "{ab:#}");
        assert_eq!(ab["runs"]["baseline"], ab["runs"]["candidate"], "{ab:#}");
        assert!(ab["noise_floor"].as_f64().unwrap() > 0.0, "{ab:#}");
    }
    assert!(j["engine_s"].as_f64().unwrap() > 0.0);

    // Two cycles: the A/B, then its confirmation, which re-tests it.
    let listed = assert_recorded_manual(&demo, 2);
    let ab = listed[1]["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["manual"] == true)
        .unwrap();
    let again = listed[0]["verdicts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["manual"] == true)
        .unwrap();
    assert_eq!(ab["verdict"]["experiment_id"], j["ab"]["experiment_id"]);
    assert_eq!(again["confirmation_of"], j["ab"]["experiment_id"]);
    assert_eq!(ab["menu_id"], Value::Null, "no menu entry planned it");

    // The live profile is the base and was never written.
    let live = std::fs::read_to_string(demo.path("ledger/profiles/live.toml")).unwrap();
    assert!(!live.contains("draft_len = 8"), "{live}");

    // The text form says the same, in words.
    let (out, _) = compare(&demo, &["--candidate", &candidate]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", said(&out));
    assert!(
        text.contains("verdict: win, a confirmed win") && text.contains("nothing staged"),
        "{text}"
    );

    // The loop that runs next learns nothing from them and stages nothing:
    // its history, its pending win and its proposers leave manual
    // experiments out (a `manual` row read as a menu entry would fail it).
    let run = demo.cmd().args(["run", "--once"]).output().unwrap();
    assert!(run.status.success(), "{}", said(&run));
    let cycles = demo.ledger();
    let own = &cycles[0];
    for v in own["verdicts"].as_array().unwrap() {
        assert_ne!(v["manual"], true, "{v:#}");
        assert!(
            v["confirmation_of"].is_null(),
            "no manual win is confirmed: {v:#}"
        );
    }
    assert!(
        demo.json_list(&["stage", "list", "--all", "--json"])
            .is_empty()
    );
}

#[test]
fn a_slower_candidate_loses_against_a_given_base() {
    let _heavy = crate::common::heavy();
    let demo = demo(8);
    let fast = profile(&demo, "fast.toml", DRAFT);
    let slow = profile(&demo, "slow.toml", "");
    let (out, json) = compare(&demo, &["--candidate", &slow, "--base", &fast, "--json"]);
    assert!(out.status.success(), "a loss is a verdict: {}", said(&out));
    let j = json.unwrap();
    assert_eq!(j["verdict"], "loss", "{j:#}");
    assert_eq!(j["confirmed"], false);
    assert!(
        j["confirmation"].is_null(),
        "only a win is confirmed: {j:#}"
    );
    assert_eq!(j["base"]["live"], false);
    assert!(j["interval_log_ratio"][0].as_f64().unwrap() > 0.0, "{j:#}");
    assert_recorded_manual(&demo, 1);
}

#[test]
fn the_same_speed_is_within_noise_with_the_floor_it_measured() {
    let _heavy = crate::common::heavy();
    // An A/A on a machine that other tests load may be `inconclusive` (the
    // judge discarded blocks for interference, or the floor's A/A was too
    // noisy to give one): a verdict the judge owes there, not this test's
    // subject (CI at 064e795, 2026-12-05). So an inconclusive comparison is
    // tried again on a fresh demo, at most three times; a win or a loss,
    // or three inconclusives, fails.
    for attempt in 1..=3 {
        let demo = demo(16);
        // A wide enough floor that an A/A settles within it on a loaded machine.
        edit_config(&demo, |t| {
            t.replace("min_noise_floor = 0.01", "min_noise_floor = 0.10")
        });
        let same = same_speed(&demo);
        let (out, json) = compare(&demo, &["--candidate", &same, "--json"]);
        assert!(out.status.success(), "{}", said(&out));
        let j = json.unwrap();
        if j["verdict"] == "inconclusive" && attempt < 3 {
            eprintln!("attempt {attempt} was inconclusive, trying again: {j:#}");
            continue;
        }
        assert_eq!(j["verdict"], "within_noise", "attempt {attempt}: {j:#}");
        assert!(j["confirmation"].is_null());
        // Within noise is never decided against the bound: the floor was
        // measured in the comparison's own cycle, by an A/A of the base.
        assert_eq!(j["ab"]["floor_is_bound"], false, "{j:#}");
        let floor = &j["ab"]["floor_measured"];
        assert!(floor["runs"]["baseline"].as_u64().unwrap() > 0, "{j:#}");
        assert!(j["ab"]["noise_floor"].as_f64().unwrap() >= 1.10f64.ln() - 1e-9);
        assert_recorded_manual(&demo, 1);
        return;
    }
}

/// A win's confirmation is judged by a floor still valid, the one its win
/// was judged by included (`[measure] confirmation_new_floor = false`, as
/// shipped): its pairs are its own, and no A/A is run for it. With the key
/// on, that floor may not judge it: the bound does, or a floor measured
/// after the win. The floor comes from an A/A comparison first; this test
/// keeps it valid on a machine other tests load (`floor_pressure_shift`
/// and `max_contention_rise` at their widest, which the shipped config
/// does not do), since a floor gone stale would hide the rule under test.
#[test]
fn a_confirmation_is_judged_by_its_wins_floor_unless_told_to_measure_after_it() {
    let _heavy = crate::common::heavy();
    let widest = |t: String| {
        t.replace("min_noise_floor = 0.01", "min_noise_floor = 0.10")
            .replace("floor_pressure_shift = 0.25", "floor_pressure_shift = 1.0")
            .replace("max_contention_rise = 0.25", "max_contention_rise = 10.0")
    };
    // A floor measured by an A/A comparison, tried on a fresh demo up to
    // three times: on a loaded machine an A/A's floor may come out too
    // noisy to use, a verdict the judge owes there.
    let mut measured = None;
    for attempt in 1..=3 {
        let demo = demo(16);
        edit_config(&demo, widest);
        let same = same_speed(&demo);
        let (out, json) = compare(&demo, &["--candidate", &same, "--json"]);
        assert!(out.status.success(), "{}", said(&out));
        let j = json.unwrap();
        let floor = j["ab"]["noise_floor"].as_f64();
        if j["ab"]["floor_is_bound"] == false && !j["ab"]["floor_measured"].is_null() {
            measured = Some((demo, floor.expect("a measured floor has a value")));
            break;
        }
        eprintln!("attempt {attempt} measured no usable floor: {j:#}");
    }
    let (demo, floor) = measured.expect("three A/A comparisons measured no usable floor");

    // The win is judged against that floor, and so is its confirmation.
    let candidate = profile(&demo, "candidate.toml", DRAFT);
    let (out, json) = compare(&demo, &["--candidate", &candidate, "--json"]);
    assert!(out.status.success(), "{}", said(&out));
    let j = json.unwrap();
    assert_eq!(j["verdict"], "win", "{j:#}");
    for ab in [&j["ab"], &j["confirmation"]] {
        assert_eq!(ab["verdict"], "win", "{j:#}");
        assert_eq!(ab["floor_is_bound"], false, "{j:#}");
        assert!(ab["floor_measured"].is_null(), "no A/A was run: {j:#}");
        assert_eq!(ab["noise_floor"].as_f64(), Some(floor), "{j:#}");
    }
    assert_eq!(j["confirmed"], true, "{j:#}");

    // With the key on, the same floor (still valid: the first A/B is judged
    // by it) may not judge the confirmation.
    edit_config(&demo, |t| {
        t.replace(
            "confirmation_new_floor = false",
            "confirmation_new_floor = true",
        )
    });
    let (out, json) = compare(&demo, &["--candidate", &candidate, "--json"]);
    assert!(out.status.success(), "{}", said(&out));
    let j = json.unwrap();
    assert_eq!(j["ab"]["noise_floor"].as_f64(), Some(floor), "{j:#}");
    assert_eq!(j["verdict"], "win", "{j:#}");
    let again = &j["confirmation"];
    assert!(
        again["floor_is_bound"] == true || !again["floor_measured"].is_null(),
        "the confirmation was judged by the floor measured before its win: {j:#}"
    );
}

#[test]
fn a_changed_output_is_a_hash_mismatch_with_no_effect() {
    let _heavy = crate::common::heavy();
    let demo = demo(8);
    // The test double in front of the real engine: the baseline's warmup
    // runs as is (and pins the reference output), the candidate's first
    // run comes back with another output hash.
    wrap_bench(&demo);
    queue_fault(&demo, "none");
    queue_fault(&demo, "change-output");
    let candidate = profile(&demo, "candidate.toml", DRAFT);
    let (out, json) = compare(&demo, &["--candidate", &candidate, "--json"]);
    assert!(
        out.status.success(),
        "a hash mismatch is a verdict: {}",
        said(&out)
    );
    let j = json.unwrap();
    assert_eq!(j["verdict"], "hash_mismatch", "{j:#}");
    assert!(
        j["effect_log_ratio"].is_null() && j["interval_log_ratio"].is_null(),
        "{j:#}"
    );
    assert!(j["confirmation"].is_null());
    assert!(
        j["ab"]["reason"]
            .as_str()
            .unwrap()
            .contains("broken engine"),
        "{j:#}"
    );
    assert_recorded_manual(&demo, 1);
}

#[test]
fn a_missing_or_unparseable_profile_is_a_usage_error_and_nothing_is_measured() {
    let demo = demo(8);
    let (out, _) = compare(&demo, &["--candidate", "no-such-profile.toml"]);
    assert_eq!(out.status.code(), Some(2), "{}", said(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--candidate") && err.contains("no-such-profile.toml"),
        "{err}"
    );
    std::fs::write(demo.path("bad.toml"), "[memory\nbudget_gb = ").unwrap();
    let bad = demo.path("bad.toml").display().to_string();
    let candidate = profile(&demo, "candidate.toml", DRAFT);
    let (out, _) = compare(&demo, &["--candidate", &candidate, "--base", &bad]);
    assert_eq!(out.status.code(), Some(2), "{}", said(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--base"));
    assert!(
        !demo.path("ledger/orchestrator.db").exists(),
        "refused before any ledger was opened"
    );
}

#[test]
fn a_stack_that_is_down_fails_the_comparison_with_exit_1_recorded() {
    let _heavy = crate::common::heavy();
    let demo = demo(8);
    // No embedded stack, and nobody made or started this one: the engine
    // the bench command names has no checkpoint to run, so every run fails.
    edit_config(&demo, |t| t[..t.find("[embedded]").unwrap()].to_string());
    std::fs::create_dir_all(demo.path("ledger/profiles")).unwrap();
    let live = profile(&demo, "ledger/profiles/live.toml", "");
    let candidate = profile(&demo, "candidate.toml", DRAFT);
    let (out, json) = compare(&demo, &["--candidate", &candidate, "--json"]);
    assert_eq!(out.status.code(), Some(1), "{}", said(&out));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("could not be measured"), "{err}");
    let j = json.unwrap_or_else(|| panic!("the JSON is printed all the same: {}", said(&out)));
    assert_eq!(j["verdict"], "failed", "{j:#}");
    assert!(j["ab"]["reason"].as_str().is_some(), "{j:#}");
    let listed = assert_recorded_manual(&demo, 1);
    assert_eq!(listed[0]["cycle"]["status"], "failed", "{listed:#?}");
    assert!(std::path::Path::new(&live).exists());
}
