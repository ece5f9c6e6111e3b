//! `orchestrator check` as a real process: what a run needs from this
//! machine (programs, the files their argv names, the memory pre-flight,
//! the endpoints) fails the check with exit 1 and its fix; the embedded
//! default's stack is started by `run`, so its silent endpoints do not.

use std::path::Path;
use std::process::Output;

use crate::common;
use crate::demo;
use assert_cmd::Command;

fn check(config: &Path) -> Output {
    Command::cargo_bin("orchestrator")
        .unwrap()
        .arg("--config")
        .arg(config)
        .arg("check")
        .env("PATH", "/usr/bin:/bin")
        .output()
        .unwrap()
}

fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn the_kimi_example_fails_on_its_missing_engine_model_and_memory() {
    let out = check(&repo().join("examples/kimi-k3-in-c.toml"));
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("bench    FAILED bin/k3: NOT FOUND") && stdout.contains("fix the program"),
        "{stdout}"
    );
    for model in ["/srv/k3model", "/srv/k3trunk"] {
        assert!(
            stdout.contains(&format!(
                "FAILED {model} (in [stack.bench] argv) does not exist"
            )),
            "{model}: {stdout}"
        );
    }
    // The dump directory is made before each run: not a failure.
    assert!(!stdout.contains("FAILED ../ledger"), "{stdout}");
    // The 64 GB profile against this machine, through the run's own pre-flight.
    let profile =
        orchestrator::profile::Profile::load(&repo().join("examples/profiles/kimi-k3-in-c.toml"))
            .unwrap();
    let refused = orchestrator::measure::preflight::check(&profile, 1.0).is_err();
    assert_eq!(
        stdout.contains("memory   FAILED the pre-flight refuses every run"),
        refused,
        "{stdout}"
    );
    if refused {
        assert!(stdout.contains("lower memory.budget_gb"), "{stdout}");
        assert!(stderr.contains("memory pre-flight"), "{stderr}");
    }
    assert!(stderr.contains("check(s) failed"), "{stderr}");
}

#[test]
fn the_llama_server_example_fails_when_its_server_and_models_are_missing() {
    let dir = tempfile::tempdir().unwrap();
    let port = common::free_port();
    let text_in = std::fs::read_to_string(repo().join("examples/llama-server.toml"))
        .unwrap()
        .replace("127.0.0.1:8080", &format!("127.0.0.1:{port}"))
        .replace(
            "\"../experiments\"",
            &format!("{:?}", repo().join("experiments")),
        )
        .replace(
            "\"profiles/llama-server.toml\"",
            &format!("{:?}", repo().join("examples/profiles/llama-server.toml")),
        );
    let config = dir.path().join("config.toml");
    std::fs::write(&config, text_in).unwrap();
    let out = check(&config);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("shadow   FAILED llama-server: NOT FOUND on PATH"),
        "{stdout}"
    );
    assert!(
        stdout.contains("FAILED /models/target.gguf (in [stack.shadow] argv) does not exist"),
        "{stdout}"
    );
    assert!(
        stdout.contains("FAILED /models/draft.gguf (in [stack.shadow] optional"),
        "the draft model of the optional group too: {stdout}"
    );
    for (what, key) in [
        ("surface", "[stack.surface] base_url"),
        ("metrics", "[stack.metrics] url"),
        ("model", "[model] base_url"),
    ] {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(what))
            .unwrap_or_else(|| panic!("no {what} line: {stdout}"));
        assert!(
            line.contains("FAILED") && line.contains("no answer") && line.contains(key),
            "{line}"
        );
    }
}

#[test]
fn a_stack_whose_program_and_model_exist_passes_and_fails_once_the_model_is_gone() {
    let (dir, model) = common::tiny_model(3);
    let config = dir.path().join("config.toml");
    std::fs::write(
        &config,
        format!(
            "[stack]\nname = \"t\"\nlive_profile = \"live.toml\"\n\
             unsupported = [\"rerank_pins\", \"deepen_warm_set\", \"stage_speculative\"]\n\
             [stack.bench]\nargv = [{}]\n[menu]\ndir = {:?}\n\
             [cycle]\nproposer = \"bandit\"\n[measure]\nmemory_headroom_gb = 0.0\n",
            common::tinyk3_argv(&model),
            repo().join("experiments")
        ),
    )
    .unwrap();
    common::profile_file(dir.path(), "live.toml");
    let out = check(&config);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(
        stdout.contains(&format!("{}: exists", model.display())),
        "{stdout}"
    );
    assert!(stdout.contains("memory   0.01 GB budget"), "{stdout}");

    std::fs::remove_dir_all(&model).unwrap();
    let out = check(&config);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    assert!(
        stdout.contains(&format!(
            "FAILED {} (in [stack.bench] argv) does not exist",
            model.display()
        )),
        "{stdout}"
    );

    // Without its live profile a real stack's every cycle would fail.
    std::fs::remove_file(dir.path().join("live.toml")).unwrap();
    let out = check(&config);
    let (stdout, _) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("profile  FAILED") && stdout.contains("[stack] live_profile"),
        "{stdout}"
    );
}

#[test]
fn the_embedded_default_passes_with_its_stack_down_and_says_run_starts_it() {
    let demo = demo::Demo::new(
        "model",
        "[memory]\nbudget_gb = 0.01\n",
        "\"--seed\", \"1\"",
        1,
        4,
    );
    let out = check(&demo.path("config.toml"));
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    for what in ["surface", "metrics", "model"] {
        let line = stdout
            .lines()
            .find(|l| l.starts_with(what))
            .unwrap_or_else(|| panic!("no {what} line: {stdout}"));
        assert!(
            line.contains("no answer")
                && line.contains("`orchestrator run`, which starts the embedded stack")
                && !line.contains("FAILED"),
            "{line}"
        );
    }
}

#[test]
fn a_config_error_still_exits_2() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    std::fs::write(&config, "[stack]\nname = \"t\"\nlive_profil = \"x\"\n").unwrap();
    let out = check(&config);
    assert_eq!(out.status.code(), Some(2), "{:?}", text(&out));
}
