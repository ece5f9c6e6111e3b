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

/// The example with its checkpoint paths pointing at `model` and `trunk`,
/// its live profile at `live`, written into `dir`.
fn kimi_config(dir: &Path, model: &Path, trunk: &Path, live: &Path) -> std::path::PathBuf {
    let text = std::fs::read_to_string(repo().join("examples/kimi-k3-in-c.toml"))
        .unwrap()
        .replace("/srv/k3model", &model.display().to_string())
        .replace("/srv/k3trunk", &trunk.display().to_string())
        .replace(
            "\"../experiments\"",
            &format!("{:?}", repo().join("experiments")),
        )
        .replace(
            "\"profiles/kimi-k3-in-c.toml\"",
            &format!("{:?}", live.display().to_string()),
        );
    let config = dir.join("config.toml");
    std::fs::write(&config, text).unwrap();
    config
}

/// Seen on the real engine: the example's `expert_bytes = 17555456` (the
/// full model's slot) against a tiny checkpoint whose slot is a few KB
/// passed `check`, and every rebalance was then refused. The checkpoint
/// our writer makes declares its slot (`orchestrator.env`): `check` reads
/// it and fails the config, naming the value to set.
#[test]
fn check_fails_an_expert_bytes_the_checkpoint_contradicts() {
    let dir = tempfile::tempdir().unwrap();
    let (model, trunk) = (dir.path().join("model"), dir.path().join("trunk"));
    let made = std::process::Command::new("python3")
        .arg(repo().join("scripts/k3_checkpoint.py"))
        .args([&model, &trunk])
        .args(["--layers", "3", "--experts", "8"])
        .output()
        .expect("python3 runs scripts/k3_checkpoint.py");
    assert!(made.status.success(), "{:?}", made);
    let env = std::fs::read_to_string(model.join("orchestrator.env")).unwrap();
    let slot = env
        .lines()
        .find_map(|l| l.strip_prefix("K3_EXPERT_BYTES="))
        .unwrap()
        .to_string();
    let live = dir.path().join("live.toml");
    std::fs::copy(repo().join("examples/profiles/kimi-k3-in-c.toml"), &live).unwrap();
    let config = kimi_config(dir.path(), &model, &trunk, &live);
    let out = check(&config);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    let line = stdout
        .lines()
        .find(|l| l.starts_with("slots"))
        .unwrap_or_else(|| panic!("no slots line: {stdout}"));
    assert!(
        line.contains("FAILED [stack] expert_bytes = 17555456")
            && line.contains("orchestrator.env K3_EXPERT_BYTES")
            && line.contains(&format!("set expert_bytes = {slot}")),
        "{line}"
    );
    assert!(stderr.contains("expert_bytes"), "{stderr}");

    // With the checkpoint's own value the slot line passes.
    let text_in = std::fs::read_to_string(&config)
        .unwrap()
        .replace("expert_bytes = 17555456", &format!("expert_bytes = {slot}"));
    std::fs::write(&config, text_in).unwrap();
    let (stdout, _) = text(&check(&config));
    assert!(
        stdout.contains(&format!("slots    [stack] expert_bytes = {slot}: as ")),
        "{stdout}"
    );
    assert!(stdout.contains("cache    24 GB holds"), "{stdout}");
}

/// A live profile whose cache holds fewer slots than top-k +
/// `cache_spare_slots` is one the engine refuses to start with (every run
/// would fail): `check` says so, with the smallest cache that works.
#[test]
fn check_fails_a_live_cache_below_top_k_and_the_spare_slots() {
    let dir = tempfile::tempdir().unwrap();
    let (model, trunk) = (dir.path().join("model"), dir.path().join("trunk"));
    std::fs::create_dir_all(&model).unwrap();
    std::fs::create_dir_all(&trunk).unwrap();
    // As scripts/k3_checkpoint.py writes it for a top-4 model.
    std::fs::write(
        model.join("orchestrator.env"),
        "K3_TOP_K=4\nK3_EXPERT_BYTES=24576\n",
    )
    .unwrap();
    let live = dir.path().join("live.toml");
    // 0.0001 GB = 100,000 bytes: 4 slots of 24,576, one short of top-4 + 1.
    std::fs::write(
        &live,
        "[memory]\nbudget_gb = 0.5\ntrunk_gb = 0.02\ncache_gb = 0.0001\n\n[compute]\nthreads = 2\n",
    )
    .unwrap();
    let config = kimi_config(dir.path(), &model, &trunk, &live);
    let text_in = std::fs::read_to_string(&config)
        .unwrap()
        .replace("expert_bytes = 17555456", "expert_bytes = 24576");
    std::fs::write(&config, text_in).unwrap();
    let out = check(&config);
    let (stdout, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(1), "{stdout}\n{stderr}");
    let line = stdout
        .lines()
        .find(|l| l.starts_with("cache"))
        .unwrap_or_else(|| panic!("no cache line: {stdout}"));
    assert!(
        line.contains("FAILED")
            && line.contains("holds 4 slot(s) of 24576 bytes")
            && line.contains("top-k = 4")
            && line.contains("+ 1 spare ([stack] cache_spare_slots)")
            && line.contains("raise memory.cache_gb to at least 0.00012288"),
        "{line}"
    );
    assert!(stderr.contains("cache slots"), "{stderr}");

    // Five slots are enough.
    std::fs::write(
        &live,
        "[memory]\nbudget_gb = 0.5\ntrunk_gb = 0.02\ncache_gb = 0.000123\n\n[compute]\nthreads = 2\n",
    )
    .unwrap();
    let (stdout, _) = text(&check(&config));
    assert!(
        stdout.contains("cache    0.000123 GB holds 5 slots of 24576 bytes: ok"),
        "{stdout}"
    );
}
