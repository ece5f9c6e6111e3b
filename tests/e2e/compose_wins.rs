//! Composing wins on the real daemon and tinyk3: two confirmed wins on
//! different knobs staged against the live profile (speculative drafts, a
//! warm far tier) are combined by the next cycles into one candidate,
//! measured against the live profile, confirmed, and staged as one stage
//! that names its parts; approving it applies both changes and expires the
//! parts.
//!
//! The parts' evidence is seeded through the ledger API (as the other stage
//! tests do) with modest effects; the composite's two A/Bs are real runs of
//! tinyk3, judged by the daemon's own judge.

use crate::demo::Demo;
use crate::staged::{self, Win};
use orchestrator::menu::MenuId;
use orchestrator::profile::Profile;
use serde_json::{Value, json};

const INIT: &str = r#""--seed", "2", "--layers", "8", "--experts", "32", "--top-k", "4", "--d-model", "128", "--d-expert", "256", "--d-dense", "512", "--heads", "4", "--vocab", "512""#;
/// A cache of ten experts (of 256) and a cold far tier.
const START: &str = "[memory]\nbudget_gb = 0.05\ntrunk_gb = 0.03\ncache_gb = 0.004\n[far]\naddr = \"FAR\"\nwarm_set = 0\n";

fn stage_list(demo: &Demo) -> Vec<Value> {
    demo.json_list(&["stage", "list", "--all", "--json"])
}

#[test]
fn two_staged_wins_on_different_knobs_are_composed_staged_as_one_and_approving_it_expires_them() {
    let _heavy = crate::common::heavy();
    let demo = Demo::new("bandit", START, INIT, 3 * 128 * 256 * 4, 12);
    // The shipped interference gate (contention relative to the floor's)
    // is kept: a steady load, however high, discards nothing.
    let live_path = demo.path("ledger/profiles/live.toml");
    std::fs::create_dir_all(live_path.parent().unwrap()).unwrap();
    std::fs::copy(demo.path("start.toml"), &live_path).unwrap();
    let live = Profile::load(&live_path).unwrap();
    let db = demo.path("ledger/orchestrator.db");

    let mut draft = live.clone();
    draft.speculative.draft_len = 4;
    let drafts = staged::stage_win_as(
        &db,
        &live,
        &draft,
        &Win {
            menu_id: MenuId::StageSpeculative,
            parameters: json!({"draft_len": 4}),
            effect: (-0.03, -0.05, -0.01),
            ..Default::default()
        },
    );
    let mut warm = live.clone();
    warm.far.warm_set = 64;
    let far = staged::stage_win_as(
        &db,
        &live,
        &warm,
        &Win {
            menu_id: MenuId::DeepenWarmSet,
            parameters: json!({"warm_set": 64}),
            effect: (-0.02, -0.04, -0.005),
            ..Default::default()
        },
    );

    // A floor, the composite's A/B, a fresh floor, its confirmation.
    let mut staged_id = None;
    let mut lines = String::new();
    for _ in 0..8 {
        let out = demo.cmd().args(["run", "--cycles", "1"]).output().unwrap();
        let code = out.status.code();
        assert!(
            code != Some(101) && code != Some(2),
            "the daemon panicked or refused its config ({code:?}):\n{lines}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        lines.push_str(&stdout);
        lines.push_str(&String::from_utf8_lossy(&out.stderr));
        if let Some(at) = stdout.find("STAGED #") {
            let id: String = stdout[at + 8..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            staged_id = Some(id.parse::<i64>().unwrap());
            break;
        }
    }
    let id =
        staged_id.unwrap_or_else(|| panic!("no composite was staged within 8 cycles:\n{lines}"));
    assert!(
        lines.contains("[composition]"),
        "a composition cycle ran:\n{lines}"
    );
    // What the cycles said, for `--nocapture`.
    eprintln!("{lines}");

    // The composite names its parts, best first; it is one stage.
    let stages = stage_list(&demo);
    let composite = stages.iter().find(|s| s["id"] == id).unwrap();
    let parts: Vec<i64> = composite["parts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["stage_id"].as_i64().unwrap())
        .collect();
    assert_eq!(parts, vec![drafts.0, far.0], "{composite:#}");
    assert_eq!(composite["state"], "staged");
    let text = demo.cmd().args(["stage", "list"]).output().unwrap();
    let text = String::from_utf8_lossy(&text.stdout).into_owned();
    assert!(
        text.contains(&format!(
            "composite of #{} stage_speculative + #{} deepen_warm_set",
            drafts.0, far.0
        )),
        "{text}"
    );
    let show = demo
        .cmd()
        .args(["stage", "show", &id.to_string()])
        .output()
        .unwrap();
    let show = String::from_utf8_lossy(&show.stdout).into_owned();
    for needed in [
        "speculative.draft_len: 0 -> 4",
        "far.warm_set: 0 -> 64",
        &format!("stage #{} stage_speculative", drafts.0),
        &format!("stage #{} deepen_warm_set", far.0),
    ] {
        assert!(show.contains(needed), "{needed:?} missing:\n{show}");
    }

    // The composite's first A/B is in the ledger, filed as a composition.
    let cycles = demo.ledger();
    let measured: Vec<&Value> = cycles
        .iter()
        .flat_map(|c| c["verdicts"].as_array().into_iter().flatten())
        .filter(|e| e["parameters"]["parts"] == json!([drafts.0, far.0]))
        .collect();
    assert_eq!(
        measured.len(),
        2,
        "its A/B and its confirmation:\n{cycles:#?}"
    );

    // Approving the composite applies both changes and expires its parts.
    let out = demo
        .cmd()
        .args(["stage", "approve", &id.to_string(), "--by", "test"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let now = Profile::load(&live_path).unwrap();
    assert_eq!(now.speculative.draft_len, 4);
    assert_eq!(now.far.warm_set, 64);
    for s in stage_list(&demo) {
        if s["id"] == drafts.0 || s["id"] == far.0 {
            assert_eq!(s["state"], "expired", "{s:#}");
        }
    }
    let shown = demo
        .cmd()
        .args(["stage", "show", &drafts.0.to_string()])
        .output()
        .unwrap();
    let shown = String::from_utf8_lossy(&shown.stdout).into_owned();
    assert!(
        shown.contains(&format!("its composite stage {id} was approved")),
        "{shown}"
    );
    demo.assert_children_gone();
}

/// A composite staged (seeded through the ledger API, as the loop records
/// one) and one of its parts rejected by a person: the composite applies
/// that part's change too, so `stage reject` expires it, saying why.
#[test]
fn rejecting_a_part_expires_its_composite() {
    let demo = Demo::new("bandit", START, INIT, 3 * 128 * 256 * 4, 12);
    let live_path = demo.path("ledger/profiles/live.toml");
    std::fs::create_dir_all(live_path.parent().unwrap()).unwrap();
    std::fs::copy(demo.path("start.toml"), &live_path).unwrap();
    let live = Profile::load(&live_path).unwrap();
    let db = demo.path("ledger/orchestrator.db");
    let mut warm = live.clone();
    warm.far.warm_set = 64;
    let mut draft = live.clone();
    draft.speculative.draft_len = 4;
    let mut both = warm.clone();
    both.speculative.draft_len = 4;
    let a = staged::stage_win_as(
        &db,
        &live,
        &warm,
        &Win {
            menu_id: MenuId::DeepenWarmSet,
            parameters: json!({"warm_set": 64}),
            effect: (-0.1, -0.15, -0.05),
            ..Default::default()
        },
    );
    let b = staged::stage_win_as(
        &db,
        &live,
        &draft,
        &Win {
            menu_id: MenuId::StageSpeculative,
            parameters: json!({"draft_len": 4}),
            effect: (-0.05, -0.08, -0.02),
            ..Default::default()
        },
    );
    let composite = staged::stage_win_as(
        &db,
        &live,
        &both,
        &Win {
            menu_id: MenuId::DeepenWarmSet,
            parameters: json!({"parts": [a.0, b.0]}),
            effect: (-0.3, -0.35, -0.25),
            ..Default::default()
        },
    );
    staged::link_composite(&db, composite, &[a, b]);

    let out = demo
        .cmd()
        .args([
            "stage",
            "reject",
            &b.to_string(),
            "--reason",
            "drafts change the output",
            "--by",
            "test",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains(&format!(
            "Expired the composite stage(s) that apply it: {composite}"
        )),
        "{stdout}"
    );
    let states: Vec<(i64, String)> = stage_list(&demo)
        .iter()
        .map(|s| {
            (
                s["id"].as_i64().unwrap(),
                s["state"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert!(states.contains(&(a.0, "staged".into())), "{states:?}");
    assert!(states.contains(&(b.0, "rejected".into())), "{states:?}");
    assert!(
        states.contains(&(composite.0, "expired".into())),
        "{states:?}"
    );
    let show = demo
        .cmd()
        .args(["stage", "show", &composite.to_string()])
        .output()
        .unwrap();
    let show = String::from_utf8_lossy(&show.stdout);
    assert!(
        show.contains(&format!(
            "its part stage {b} was rejected by test: drafts change the output"
        )),
        "{show}"
    );
}
