//! The bench contract of `examples/kimi-k3-in-c.toml`, tested against
//! `tinyk3 bench`, which takes the kimi-k3-in-c CLI's flags: the example is
//! loaded as written with only the engine, the model and the ledger paths
//! substituted, and real runs go through the bench scorer and the loop.

use std::path::{Path, PathBuf};

use crate::common;
use crate::common::{script, tiny_model, tinyk3_bin};
use orchestrator::config::Config;
use orchestrator::heat::{Heat, Trace};
use orchestrator::measure::bench::BenchScorer;
use orchestrator::measure::scorer::{MeasureError, Scorer};
use orchestrator::menu::{Menu, MenuId};
use orchestrator::process::cancel::Cancel;
use orchestrator::process::template::RenderContext;
use orchestrator::profile::{Profile, ProfileFile};

const EXAMPLE: &str = include_str!("../../examples/kimi-k3-in-c.toml");

/// A profile the tiny checkpoint fits in.
const TINY: &str =
    "[memory]\nbudget_gb = 0.01\ntrunk_gb = 0.002\ncache_gb = 0.002\n[compute]\nthreads = 1\n";

/// The example with `bin/k3 MODEL` replaced by `tinyk3 bench MODEL`, ids the
/// tiny vocabulary holds, and everything it writes under `root`.
fn example_text(root: &Path, engine: &[&str], model: &Path) -> String {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let engine: Vec<String> = engine.iter().map(|a| format!("{a:?}")).collect();
    let text = EXAMPLE
        .replace(
            "\"bin/k3\", \"/srv/k3model\"",
            &format!("{}, {:?}", engine.join(", "), model),
        )
        .replace("1008,10484,318,15383,387", "1,2,3,4")
        .replace("/srv/k3trunk", &root.join("trunk").display().to_string())
        .replace(
            "../ledger/kimi-k3-in-c",
            &root.join("ledger").display().to_string(),
        )
        .replace(
            "../experiments",
            &repo.join("experiments").display().to_string(),
        )
        .replace(
            "127.0.0.1:9464",
            &format!("127.0.0.1:{}", common::free_port()),
        )
        .replace("max_pairs = 16", "max_pairs = 8\nfloor_pairs = 10")
        .replace("run_timeout_s = 1800", "run_timeout_s = 60")
        .replace("memory_headroom_gb = 1.0", "memory_headroom_gb = 0.1")
        .replace("interval_s = 60", "interval_s = 0.01");
    assert!(!text.contains("\"bin/k3\""), "the engine was substituted");
    text
}

/// The example in `root/config.toml`, its live profile the tiny one.
fn example(root: &Path, engine: &[&str], model: &Path) -> Config {
    let path = root.join("config.toml");
    std::fs::write(&path, example_text(root, engine, model)).unwrap();
    std::fs::create_dir_all(root.join("profiles")).unwrap();
    std::fs::write(root.join("profiles/kimi-k3-in-c.toml"), TINY).unwrap();
    Config::load(&path).unwrap()
}

fn tinyk3() -> String {
    tinyk3_bin().display().to_string()
}

fn profile(dir: &Path, name: &str, draft_len: u64) -> ProfileFile {
    let mut p = Profile::parse(TINY, Path::new(name)).unwrap();
    p.speculative.draft_len = draft_len;
    ProfileFile::write(&dir.join(name), p).unwrap()
}

#[test]
fn the_example_loads_with_its_levers_and_renders_the_cli_contract() {
    let tmp = tempfile::tempdir().unwrap();
    let config =
        Config::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/kimi-k3-in-c.toml"))
            .unwrap();
    let menu = Menu::load(&config.menu_dir).unwrap();
    let menu = orchestrator::stack_support::stack_menu(&config, &menu).unwrap();
    let ids: Vec<MenuId> = menu.entries().iter().map(|e| e.id).collect();
    assert_eq!(
        ids,
        [
            MenuId::StageSpeculative,
            MenuId::RebalanceTrunkCache,
            MenuId::Remeasure
        ]
    );
    let bench = config.stack.bench.as_ref().unwrap();
    assert_eq!(bench.env["OMP_WAIT_POLICY"], "passive");
    let render = |draft_len| {
        let p = profile(tmp.path(), &format!("p{draft_len}.toml"), draft_len);
        let ctx = RenderContext {
            out: Some(PathBuf::from("/o/run.json")),
            ..RenderContext::default()
        };
        bench.argv.render(&p.profile, p.dir(), &ctx)
    };
    let off = render(0);
    let at = |argv: &[String], flag: &str| argv.iter().position(|a| a == flag);
    assert!(at(&off, "--spec").is_none(), "{off:?}");
    assert!(at(&off, "--incremental").is_some(), "{off:?}");
    let on = render(3);
    let spec = at(&on, "--spec").expect("--spec when draft_len > 0");
    assert_eq!(on[spec + 1], "3");
    assert!(
        at(&on, "--incremental").is_some(),
        "--spec needs --incremental"
    );
    for argv in [&off, &on] {
        let out = at(argv, "--out").expect("--out always");
        assert_eq!(argv[out + 1], "/o/run.json");
        let gen_tokens: u64 = argv[at(argv, "--gen").unwrap() + 1].parse().unwrap();
        assert!(gen_tokens >= 1);
        assert_eq!(argv[at(argv, "--cache-gb").unwrap() + 1], "0.002");
        assert_eq!(argv[at(argv, "--trunk-gb").unwrap() + 1], "0.002");
        assert_eq!(argv[at(argv, "--threads").unwrap() + 1], "1");
        assert!(at(argv, "--trunk").is_some());
        let dump = &argv[at(argv, "--dump-cache-trace").unwrap() + 1];
        assert!(
            bench
                .create_dirs
                .iter()
                .any(|d| d.ends_with(dump.trim_start_matches("../"))),
            "the dump directory {dump} is made before each run: {:?}",
            bench.create_dirs
        );
    }
}

#[tokio::test]
async fn real_bench_runs_give_one_hash_and_dump_the_heat_the_cycle_reads() {
    let (tmp, model) = tiny_model(11);
    let config = example(tmp.path(), &[&tinyk3(), "bench"], &model);
    let scorer = BenchScorer::from_config(&config).unwrap();
    let base = scorer
        .score(&profile(tmp.path(), "base.toml", 0), &Cancel::never())
        .await
        .unwrap();
    assert!(base.seconds_per_token > 0.0 && base.seconds_per_token.is_finite());
    assert_eq!(base.exit_code, Some(0));
    let spec = scorer
        .score(&profile(tmp.path(), "spec.toml", 2), &Cancel::never())
        .await
        .unwrap();
    assert_eq!(
        base.output_hash, spec.output_hash,
        "speculation verified exactly leaves the output alone"
    );
    // The heat the bench dumped is what the next cycle observes.
    let metrics = config.stack.metrics.as_ref().unwrap();
    let heat = Heat::load(Path::new(metrics.heat.as_deref().unwrap())).unwrap();
    assert!(heat.total() > 0);
    let trace = Trace::load(metrics.heat_trace.as_ref().unwrap(), heat.shape()).unwrap();
    assert!(!trace.requests().is_empty());
    let obs = orchestrator::observe::observe(Some(metrics), &reqwest::Client::new())
        .await
        .unwrap();
    assert!(obs.heat.is_some() && obs.trace.is_some(), "{:?}", obs.gaps);
    assert!(
        obs.gaps.iter().any(|g| g.contains("no metrics endpoint")),
        "a CLI has no metrics endpoint and the cycle says so: {:?}",
        obs.gaps
    );
}

#[tokio::test]
async fn the_dump_directory_exists_before_the_engine_starts() {
    // A stand-in for kimi-k3-in-c's habit: it writes its trace only into a
    // directory that already exists and silently nothing otherwise. It takes
    // the same flags and exits 1 when the directory is missing, so a run
    // without `create_dirs` would fail here rather than pass unnoticed.
    let tmp = tempfile::tempdir().unwrap();
    let engine = script(
        tmp.path(),
        "dumps-only-into-existing-dir",
        r#"while [ $# -gt 0 ]; do
  case "$1" in
    --dump-cache-trace) dump="$2"; shift ;;
    --out) out="$2"; shift ;;
  esac
  shift
done
[ -d "$dump" ] || { echo "no directory $dump" >&2; exit 1; }
echo '{"seconds_per_token": 0.5, "generated_ids": [1, 2, 3]}' > "$out""#,
    );
    let config = example(
        tmp.path(),
        &[&engine.display().to_string()],
        &tmp.path().join("model"),
    );
    let heat_dir = &config.stack.bench.as_ref().unwrap().create_dirs[0];
    assert!(!heat_dir.exists());
    let scorer = BenchScorer::from_config(&config).unwrap();
    let run = scorer
        .score(&profile(tmp.path(), "p.toml", 0), &Cancel::never())
        .await
        .unwrap();
    assert_eq!(run.seconds_per_token, 0.5);
    assert!(heat_dir.is_dir());
}

#[tokio::test]
async fn exit_2_and_4_of_the_engine_are_failed_runs_with_their_cause() {
    let (tmp, model) = tiny_model(12);
    let config = example(tmp.path(), &[&tinyk3(), "bench"], &model);
    let scorer = BenchScorer::from_config(&config).unwrap();
    // 2: a cache that cannot hold top-k experts does not suit the engine.
    let mut small = Profile::parse(TINY, Path::new("small")).unwrap();
    small.memory.cache_gb = 0.000_001;
    let small = ProfileFile::write(&tmp.path().join("small.toml"), small).unwrap();
    let f = scorer.score(&small, &Cancel::never()).await.unwrap_err();
    assert!(matches!(f.error, MeasureError::Usage { .. }), "{f}");
    assert_eq!(f.exit_code, Some(2));
    // 4: an expert that cannot be loaded makes any output invalid.
    let experts = model.join("experts.bin");
    let len = std::fs::metadata(&experts).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&experts)
        .unwrap()
        .set_len(len / 3)
        .unwrap();
    let f = scorer
        .score(&profile(tmp.path(), "p.toml", 0), &Cancel::never())
        .await
        .unwrap_err();
    assert!(matches!(f.error, MeasureError::ExpertLoad { .. }), "{f}");
    assert_eq!(f.exit_code, Some(4));
}

#[test]
fn orchestrator_runs_cycles_on_the_example_and_records_a_verdict_each() {
    let _heavy = crate::common::heavy();
    let (tmp, model) = tiny_model(13);
    let config = example(tmp.path(), &[&tinyk3(), "bench"], &model);
    let out = assert_cmd::Command::cargo_bin("orchestrator")
        .unwrap()
        .arg("--config")
        .arg(&config.path)
        .args(["run", "--cycles", "2"])
        .timeout(std::time::Duration::from_secs(300))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = assert_cmd::Command::cargo_bin("orchestrator")
        .unwrap()
        .arg("--config")
        .arg(&config.path)
        .args(["ledger", "--json"])
        .output()
        .unwrap();
    let cycles: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let cycles = cycles.as_array().unwrap();
    assert_eq!(cycles.len(), 2, "{cycles:#?}");
    for c in cycles {
        let verdicts = c["verdicts"].as_array().unwrap();
        // One verdict, or an A/B's and the A/A of the floor it measured.
        let own = verdicts
            .iter()
            .filter(|v| v["menu_id"] != "remeasure")
            .count();
        assert!(
            verdicts.len() == 1 || (verdicts.len() == 2 && own == 1),
            "one verdict per cycle (and its floor's A/A): {c:#}"
        );
        let menu = verdicts[0]["menu_id"].as_str().unwrap_or("");
        assert!(
            !["rerank_pins", "deepen_warm_set"].contains(&menu),
            "an unsupported entry was run: {c:#}"
        );
    }
}
