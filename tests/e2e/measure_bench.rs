//! The bench scorer against real `tinyk3 bench` processes: success, output
//! hashes across checkpoint seeds, exit 1, 2 and 4, a hang past the timeout
//! (the whole process group gone), garbage and missing JSON, the memory
//! pre-flight, and an unknown knob refused by `orchestrator check`.

use std::time::{Duration, Instant};

use crate::common::{alive, config_with_bench, profile_file, script, tiny_model, tinyk3_argv};
use assert_cmd::Command;
use orchestrator::ledger::TimingSource;
use orchestrator::measure::bench::BenchScorer;
use orchestrator::measure::output::{OutputError, OutputHash};
use orchestrator::measure::scorer::{MeasureError, RunFailure, Scorer};
use orchestrator::process::cancel::Cancel;

fn scorer(dir: &std::path::Path, argv: &str) -> BenchScorer {
    BenchScorer::from_config(&config_with_bench(dir, argv, "", 30.0, 0.1)).unwrap()
}

async fn fail(s: &BenchScorer, dir: &std::path::Path) -> RunFailure {
    s.score(&profile_file(dir, "p.toml"), &Cancel::never())
        .await
        .expect_err("the run must fail")
}

#[tokio::test]
async fn a_tinyk3_run_is_valid_and_its_hash_depends_only_on_the_checkpoint() {
    let (tmp, model) = tiny_model(7);
    let (_tmp8, model8) = tiny_model(8);
    let s = scorer(tmp.path(), &tinyk3_argv(&model));
    let p = profile_file(tmp.path(), "p.toml");
    let a = s.score(&p, &Cancel::never()).await.unwrap();
    assert!(a.seconds_per_token > 0.0 && a.seconds_per_token.is_finite());
    assert_eq!(a.tokens, Some(6));
    assert_eq!(a.exit_code, Some(0));
    assert_eq!(a.timing_source, TimingSource::Engine);
    assert_eq!(a.output_hash.as_str().len(), 16);
    // The hash is FNV-1a 64 over the ids the engine reported.
    let ids: Vec<u32> = a.extras["generated_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() as u32)
        .collect();
    assert_eq!(a.output_hash, OutputHash::of_ids(&ids));
    assert!(
        a.extras.contains_key("hits"),
        "tier hits kept: {:?}",
        a.extras.keys()
    );
    // tinyk3 measures the parts of a decode token; the scorer reads them.
    let (t, e) = (
        a.parts.trunk_seconds_per_token.unwrap(),
        a.parts.expert_seconds_per_token.unwrap(),
    );
    assert!(
        t > 0.0 && e > 0.0 && t + e <= a.seconds_per_token + 1e-9,
        "{:?}",
        a.parts
    );
    assert!((0.0..=1.0).contains(&a.parts.far_hit_share.unwrap()));
    assert_eq!(a.parts.draft_acceptance, None, "speculation is off");
    // The scorer knows whether a memory limit applied; the run's stderr
    // tail is the engine's alone (the daemon says a missing limit once).
    assert!(a.memory_limit.is_some());
    assert!(
        !a.stderr_tail.contains("[orchestrator]") && !a.stderr_tail.contains("memory limit"),
        "{}",
        a.stderr_tail
    );
    // Another profile, same checkpoint: same output (tinyk3 is bit-identical).
    let mut bigger = p.profile.clone();
    bigger.memory.cache_gb = 0.005;
    let p2 =
        orchestrator::profile::ProfileFile::write(&tmp.path().join("p2.toml"), bigger).unwrap();
    let b = s.score(&p2, &Cancel::never()).await.unwrap();
    assert_eq!(a.output_hash, b.output_hash);
    // Another seed: other output.
    let c = scorer(tmp.path(), &tinyk3_argv(&model8))
        .score(&p, &Cancel::never())
        .await
        .unwrap();
    assert_ne!(a.output_hash, c.output_hash);
    // No {out} file is left behind in the work dir.
    let left: Vec<_> = std::fs::read_dir(tmp.path().join("work"))
        .unwrap()
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[tokio::test]
async fn a_corrupt_trunk_is_a_runtime_failure_exit_1() {
    let (tmp, model) = tiny_model(7);
    let trunk = model.join("trunk.bin");
    let len = std::fs::metadata(&trunk).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&trunk)
        .unwrap()
        .set_len(len - 4096)
        .unwrap();
    let f = fail(&scorer(tmp.path(), &tinyk3_argv(&model)), tmp.path()).await;
    assert!(matches!(f.error, MeasureError::Runtime { .. }), "{f}");
    assert_eq!(f.exit_code, Some(1));
    assert!(f.to_string().contains("trunk"), "{f}");
    assert!(f.stderr_tail.contains("trunk"), "{}", f.stderr_tail);
}

#[tokio::test]
async fn a_truncated_experts_file_is_invalid_output_exit_4() {
    let (tmp, model) = tiny_model(7);
    let experts = model.join("experts.bin");
    let len = std::fs::metadata(&experts).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&experts)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    let f = fail(&scorer(tmp.path(), &tinyk3_argv(&model)), tmp.path()).await;
    assert!(matches!(f.error, MeasureError::ExpertLoad { .. }), "{f}");
    assert_eq!(f.exit_code, Some(4));
    assert!(f.to_string().contains("an expert failed to load"), "{f}");
}

#[tokio::test]
async fn a_profile_the_engine_refuses_is_a_usage_failure_exit_2() {
    let (tmp, model) = tiny_model(7);
    let s = scorer(tmp.path(), &tinyk3_argv(&model));
    let mut p = profile_file(tmp.path(), "p.toml");
    // Too small a cache for top-k experts: the engine names the smallest.
    p.profile.memory.cache_gb = 0.000_000_1;
    let p = orchestrator::profile::ProfileFile::write(&p.path, p.profile).unwrap();
    let f = s.score(&p, &Cancel::never()).await.unwrap_err();
    assert!(matches!(f.error, MeasureError::Usage { .. }), "{f}");
    assert!(f.to_string().contains("smallest"), "{f}");
}

#[tokio::test]
async fn a_hang_is_killed_at_the_timeout_with_its_whole_process_group() {
    let _heavy = crate::common::heavy_async().await;
    let tmp = tempfile::tempdir().unwrap();
    let pids = tmp.path().join("pids");
    // The hanging command of this test only: a shell whose background child
    // would be orphaned if only the shell were killed.
    let argv = format!(
        r#""sh", "-c", "sleep 100 & echo $! > {p}; echo $$ >> {p}; wait", "{{out}}""#,
        p = pids.display()
    );
    let cfg = config_with_bench(tmp.path(), &argv, "", 1.0, 0.1);
    let s = BenchScorer::from_config(&cfg).unwrap();
    let t0 = Instant::now();
    let f = fail(&s, tmp.path()).await;
    assert!(matches!(f.error, MeasureError::Timeout { .. }), "{f}");
    assert!(f.to_string().contains("run_timeout_s"), "{f}");
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    let pids: Vec<i32> = std::fs::read_to_string(&pids)
        .unwrap()
        .lines()
        .map(|l| l.trim().parse().unwrap())
        .collect();
    assert_eq!(pids.len(), 2);
    // The reparented grandchild may take a moment to be reaped by init.
    let deadline = Instant::now() + Duration::from_secs(2);
    while pids.iter().any(|&p| alive(p)) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for p in pids {
        assert!(!alive(p), "process {p} survived the timeout");
    }
}

#[tokio::test]
async fn garbage_missing_and_invalid_json_are_typed_failures() {
    let tmp = tempfile::tempdir().unwrap();
    let d = tmp.path();
    // Doubles standing in for a broken engine: tinyk3 cannot be made to
    // print garbage, which is the point of these cases.
    let garbage = script(
        d,
        "garbage-bench-double",
        "echo 'loading... {not json' > \"$1\"",
    );
    let silent = script(d, "silent-bench-double", "exit 0");
    let zero = script(
        d,
        "zero-time-bench-double",
        "echo '{\"generated_ids\":[1,2],\"seconds_per_token\":0}' > \"$1\"",
    );
    let no_ids = script(
        d,
        "no-ids-bench-double",
        "echo '{\"seconds_per_token\":0.5}' > \"$1\"",
    );
    let chatty = script(
        d,
        "stdout-garbage-bench-double",
        "echo starting; echo '{oops'; echo done",
    );
    let ok_stdout = script(
        d,
        "stdout-json-bench-double",
        "echo starting; echo '{\"generated_ids\":[3],\"seconds_per_token\":0.25}'",
    );
    let argv = |p: &std::path::Path| format!(r#""{}", "{{out}}""#, p.display());

    let f = fail(&scorer(d, &argv(&garbage)), d).await;
    assert!(
        matches!(f.error, MeasureError::Output(OutputError::NotJson { .. })),
        "{f}"
    );
    let f = fail(&scorer(d, &argv(&silent)), d).await;
    assert!(matches!(f.error, MeasureError::MissingOutput { .. }), "{f}");
    assert!(f.to_string().contains("wrote no JSON"), "{f}");
    let f = fail(&scorer(d, &argv(&zero)), d).await;
    assert!(
        matches!(f.error, MeasureError::Output(OutputError::BadTime { .. })),
        "{f}"
    );
    let f = fail(&scorer(d, &argv(&no_ids)), d).await;
    assert!(
        matches!(f.error, MeasureError::Output(OutputError::NoOutput)),
        "{f}"
    );

    let stdout = |p: &std::path::Path| {
        BenchScorer::from_config(&config_with_bench(
            d,
            &argv(p),
            "output = \"stdout\"",
            30.0,
            0.1,
        ))
        .unwrap()
    };
    let f = fail(&stdout(&chatty), d).await;
    assert!(
        matches!(f.error, MeasureError::Output(OutputError::NoJsonLine)),
        "{f}"
    );
    let ok = stdout(&ok_stdout)
        .score(&profile_file(d, "p.toml"), &Cancel::never())
        .await
        .unwrap();
    assert_eq!(ok.seconds_per_token, 0.25);
    assert_eq!(ok.output_hash, OutputHash::of_ids(&[3]));
    // A stack that reports no parts (kimi-k3-in-c) has none, and that is fine.
    assert!(!ok.parts.any());
    // A part out of range is refused naming the field.
    let bad_share = script(
        d,
        "bad-share-bench-double",
        "echo '{\"generated_ids\":[1],\"seconds_per_token\":0.5,\"far_hit_share\":2}' > \"$1\"",
    );
    let f = fail(&scorer(d, &argv(&bad_share)), d).await;
    assert!(
        matches!(
            f.error,
            MeasureError::Output(OutputError::BadPart {
                field: "far_hit_share",
                ..
            })
        ),
        "{f}"
    );
}

#[tokio::test]
async fn the_preflight_refuses_with_the_numbers_and_runs_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let marker = tmp.path().join("ran");
    let runs = script(
        tmp.path(),
        "marker-bench-double",
        &format!("touch {}", marker.display()),
    );
    let cfg = config_with_bench(
        tmp.path(),
        &format!(r#""{}""#, runs.display()),
        "",
        30.0,
        1.0e6,
    );
    let f = fail(&BenchScorer::from_config(&cfg).unwrap(), tmp.path()).await;
    assert!(matches!(f.error, MeasureError::Preflight(_)), "{f}");
    let msg = f.to_string();
    assert!(
        msg.contains("GB") && msg.contains("memory_headroom_gb"),
        "{msg}"
    );
    assert!(!marker.exists(), "the command ran despite the refusal");
}

#[tokio::test]
async fn a_missing_engine_is_a_spawn_failure_naming_it() {
    let tmp = tempfile::tempdir().unwrap();
    let f = fail(
        &scorer(tmp.path(), r#""bin/no-such-engine", "{out}""#),
        tmp.path(),
    )
    .await;
    assert!(matches!(f.error, MeasureError::Spawn(_)), "{f}");
    assert!(f.to_string().contains("bin/no-such-engine"), "{f}");
}

#[test]
fn an_unknown_knob_in_the_bench_argv_is_refused_at_config_load_with_exit_2() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("config.toml");
    std::fs::write(
        &path,
        r#"
[stack]
name = "t"
live_profile = "live.toml"
[stack.bench]
argv = ["tinyk3", "bench", "--cache-gb", "{memory.cache_mb}", "--out", "{out}"]
[cycle]
proposer = "bandit"
"#,
    )
    .unwrap();
    let out = Command::cargo_bin("orchestrator")
        .unwrap()
        .args(["--config", path.to_str().unwrap(), "check"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("{memory.cache_mb}"), "{err}");
    assert!(
        err.contains("memory.cache_gb"),
        "the valid knobs are listed: {err}"
    );
}
