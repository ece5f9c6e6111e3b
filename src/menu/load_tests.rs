//! Tests of menu loading: the repository's menu, and each malformed file
//! refused by name and line.

use std::fs;
use std::path::{Path, PathBuf};

use super::*;

fn repo_menu_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("experiments")
}

fn menu() -> Menu {
    Menu::load(&repo_menu_dir()).expect("the repository's menu loads")
}

/// A copy of the real menu in a temp dir, with one file rewritten.
fn menu_with(file: &str, edit: impl Fn(&str) -> String) -> (tempfile::TempDir, MenuError) {
    let dir = tempfile::tempdir().unwrap();
    for id in MenuId::ALL {
        let name = format!("{id}.toml");
        let text = fs::read_to_string(repo_menu_dir().join(&name)).unwrap();
        let text = if name == file { edit(&text) } else { text };
        fs::write(dir.path().join(&name), text).unwrap();
    }
    let err = Menu::load(dir.path()).expect_err("the edited menu must be refused");
    (dir, err)
}

#[test]
fn the_repository_menu_has_the_five_entries() {
    let m = menu();
    let ids: Vec<MenuId> = m.entries().iter().map(|e| e.id).collect();
    assert_eq!(ids, MenuId::ALL);
    assert_eq!(m.entry(MenuId::Remeasure).unwrap().method, Method::Surface);
    assert!(
        m.entry(MenuId::DeepenWarmSet)
            .unwrap()
            .touches
            .contains(&Knob::FarWarmSet)
    );
}

#[test]
fn a_missing_file_is_named() {
    let dir = tempfile::tempdir().unwrap();
    for id in &MenuId::ALL[1..] {
        fs::copy(
            repo_menu_dir().join(format!("{id}.toml")),
            dir.path().join(format!("{id}.toml")),
        )
        .unwrap();
    }
    let err = Menu::load(dir.path()).unwrap_err().to_string();
    assert!(err.contains("rerank_pins.toml is missing"), "{err}");
}

#[test]
fn an_extra_file_is_named() {
    let dir = tempfile::tempdir().unwrap();
    for id in MenuId::ALL {
        fs::copy(
            repo_menu_dir().join(format!("{id}.toml")),
            dir.path().join(format!("{id}.toml")),
        )
        .unwrap();
    }
    fs::write(dir.path().join("overclock.toml"), "id = \"overclock\"").unwrap();
    let err = Menu::load(dir.path()).unwrap_err().to_string();
    assert!(
        err.contains("overclock.toml is not on the fixed menu"),
        "{err}"
    );
}

#[test]
fn an_id_that_does_not_match_its_file_is_refused_with_the_line() {
    let (_d, err) = menu_with("deepen_warm_set.toml", |t| {
        t.replace("id = \"deepen_warm_set\"", "id = \"drop_tables\"")
    });
    let msg = err.to_string();
    assert!(msg.contains("deepen_warm_set.toml:2:"), "{msg}");
    assert!(msg.contains("id must be \"deepen_warm_set\""), "{msg}");
}

#[test]
fn an_unknown_parameter_type_is_refused_with_the_line() {
    let (_d, err) = menu_with("stage_speculative.toml", |t| {
        t.replace("type = \"integer\"", "type = \"complex\"")
    });
    let msg = err.to_string();
    assert!(msg.contains("unknown type `complex`"), "{msg}");
    assert!(msg.contains("stage_speculative.toml:"), "{msg}");
}

#[test]
fn min_above_max_is_refused() {
    let (_d, err) = menu_with("stage_speculative.toml", |t| {
        t.replace("min = 0", "min = 9")
    });
    assert!(err.to_string().contains("min (9) > max (8)"), "{err}");
}

#[test]
fn a_knob_the_profile_lacks_is_refused_with_the_line() {
    let (_d, err) = menu_with("deepen_warm_set.toml", |t| {
        t.replace(
            "touches = [\"far.warm_set\"]",
            "touches = [\"far.hot_set\"]",
        )
    });
    let msg = err.to_string();
    assert!(msg.contains("deepen_warm_set.toml:10:"), "{msg}");
    assert!(msg.contains("far.hot_set"), "{msg}");
    assert!(msg.contains("far.warm_set"), "lists the valid knobs: {msg}");
}

#[test]
fn a_parameter_the_planner_does_not_read_is_refused() {
    let (_d, err) = menu_with("stage_speculative.toml", |t| {
        t.replace("[params.draft_len]", "[params.draft_length]")
    });
    assert!(
        err.to_string()
            .contains("not read by the stage_speculative planner"),
        "{err}"
    );
}

#[test]
fn unknown_keys_in_a_menu_file_are_refused() {
    let (_d, err) = menu_with("remeasure.toml", |t| format!("{t}\ncost = 3\n"));
    let msg = format!(
        "{err} {:?}",
        std::error::Error::source(&err).map(|s| s.to_string())
    );
    assert!(msg.contains("remeasure.toml"), "{msg}");
    assert!(msg.contains("cost"), "{msg}");
}
