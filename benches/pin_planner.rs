//! The pin planner on replayed traces: on the held-out half of real tinyk3
//! traces, heat pinning's hit rate as a fraction of Belady's MIN at the same
//! bytes, next to LRU's fraction, for several byte budgets (issue 6 Targets).
//!
//! Run with `cargo bench --bench pin_planner`. It makes a default-skew
//! checkpoint in a temporary directory, records traces with `tinyk3 bench
//! --dump-cache-trace` (building tinyk3 first if no binary is found), and
//! prints a Markdown table.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use orchestrator::heat::{Expert, Heat, Trace};
use orchestrator::plan::replay::{self, Lookups};

/// Small enough to record a few hundred tokens in seconds, big enough (256
/// experts, top-4 of 32 per layer) that the budgets below are real choices.
const INIT: &[&str] = &[
    "--layers",
    "8",
    "--experts",
    "32",
    "--top-k",
    "4",
    "--d-model",
    "64",
    "--d-expert",
    "128",
    "--d-dense",
    "256",
    "--heads",
    "2",
    "--vocab",
    "256",
];
/// (checkpoint seed, prompt): different seeds give different routers, so
/// the traces are independent rather than two prompts on one model.
const TRACES: &[(&str, &str)] = &[
    ("1", "Which experts should stay pinned?"),
    (
        "2",
        "Describe the far tier in one sentence, then the cache.",
    ),
    ("3", "The experts of the far tier"),
];
const GEN: &str = "400";
/// Budgets as shares of all routed experts.
const SHARES: &[f64] = &[0.03125, 0.0625, 0.125, 0.25, 0.5];

fn main() {
    let bin = tinyk3();
    let dir = tempdir();
    let mut footer = (0, 0);
    println!(
        "| trace | budget (experts) | share of experts | MiB | MIN hit rate | LRU / MIN | heat pins, cache = top-k / MIN | heat pins, half cache / MIN |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    for (i, (seed, prompt)) in TRACES.iter().enumerate() {
        let model = dir.join(format!("model{seed}"));
        let out = ["init", "--out", model.to_str().unwrap(), "--seed", seed];
        run(&bin, &[&out[..], INIT].concat());
        let manifest: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(model.join("manifest.json")).unwrap())
                .unwrap();
        let stride = manifest["experts"]["stride"].as_u64().unwrap();
        let top_k = manifest["shape"]["top_k"].as_u64().unwrap() as usize;
        footer = (stride, top_k);
        let heat_dir = dir.join(format!("heat{i}"));
        // The trace does not depend on the cache size (the output is
        // bit-identical under every profile); a cache of every expert just
        // records it faster.
        let all_gb = format!("{}", (256 * stride) as f64 / 1e9);
        run(
            &bin,
            &[
                "bench",
                model.to_str().unwrap(),
                "--prompt",
                prompt,
                "--gen",
                GEN,
                "--incremental",
                "--cache-gb",
                &all_gb,
                "--dump-cache-trace",
                heat_dir.to_str().unwrap(),
            ],
        );
        let heat = Heat::load(&heat_dir.join("expert_hist.json")).unwrap();
        let trace = Trace::load(&heat_dir.join("expert_trace.bin"), heat.shape()).unwrap();
        let t0 = Instant::now();
        let (first_half, held_out) = replay::held_out(&trace);
        let ranked: Vec<Expert> = first_half.ranked().into_iter().map(|r| r.0).collect();
        let name = format!(
            "{} (seed {seed}, {} requests, {} held-out lookups)",
            i + 1,
            trace.requests().len(),
            held_out.len()
        );
        for share in SHARES {
            let slots = (share * heat.shape().total() as f64).round() as usize;
            let min = replay::belady_min(&held_out, slots).hit_rate();
            let lru = replay::lru(&held_out, slots).hit_rate();
            let pins =
                |cache: usize| pinned(&held_out, &ranked, slots.saturating_sub(cache), cache);
            let half = if slots / 2 >= top_k {
                format!("{:.3}", pins(slots / 2) / min)
            } else {
                "-".into()
            };
            println!(
                "| {name} | {slots} | {:.1}% | {:.2} | {:.3} | {:.3} | {:.3} | {half} |",
                share * 100.0,
                (slots as u64 * stride) as f64 / (1 << 20) as f64,
                min,
                lru / min,
                pins(top_k) / min,
            );
        }
        eprintln!(
            "trace {}: replays took {:.1} ms",
            i + 1,
            t0.elapsed().as_secs_f64() * 1e3
        );
    }
    let (stride, top_k) = footer;
    println!();
    println!(
        "Pins are the hottest experts of the trace's first half; every policy is replayed on the \
         second half from an empty cache (pins loaded, MIN starting with the soonest-needed \
         experts), hit rates over the engine's lookups (one per distinct expert per layer per \
         forward pass). Checkpoints: `tinyk3 init --seed S {}` (default skew), {GEN} generated tokens a trace, \
         expert = {stride} bytes, top-k = {top_k}.",
        INIT.join(" ")
    );
    let _ = std::fs::remove_dir_all(&dir);
}

fn pinned(lookups: &Lookups, ranked: &[Expert], pins: usize, cache: usize) -> f64 {
    replay::pinned_lru(lookups, &ranked[..pins.min(ranked.len())], cache).hit_rate()
}

fn run(bin: &Path, args: &[&str]) {
    let out = Command::new(bin).args(args).output().expect("tinyk3 runs");
    assert!(
        out.status.success(),
        "tinyk3 {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn tempdir() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("pin_planner_bench.{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `TINYK3_BIN`, else a release or debug build in the target directory, else
/// build one (release) with the cargo that runs this benchmark.
fn tinyk3() -> PathBuf {
    if let Some(p) = std::env::var_os("TINYK3_BIN") {
        return PathBuf::from(p);
    }
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"));
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(|d| workspace.join(d))
        .unwrap_or_else(|| workspace.join("target"));
    let release = target.join("release/tinyk3");
    if let Some(p) = [release.clone(), target.join("debug/tinyk3")]
        .into_iter()
        .find(|p| p.is_file())
    {
        return p;
    }
    eprintln!("building tinyk3 (release) for the benchmark...");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new(cargo)
        .args(["build", "--release", "-p", "tinyk3"])
        .current_dir(workspace)
        .status()
        .expect("cargo runs");
    assert!(
        status.success() && release.is_file(),
        "could not build tinyk3 into {}",
        release.display()
    );
    release
}
