//! Generated tokens (and every logit bit) are identical under every profile.

use std::path::Path;

use serde_json::Value;

use crate::common::{bench_ok, start_server, tiny_model};

fn same(a: &Value, b: &Value, what: &str) {
    assert_eq!(
        a["generated_ids"], b["generated_ids"],
        "{what}: tokens differ"
    );
    assert_eq!(
        a["logits_digest"], b["logits_digest"],
        "{what}: logits differ"
    );
}

#[test]
fn profile_matrix_is_bit_identical() {
    let (tmp, model) = tiny_model();
    let base = bench_ok(
        &model,
        &["--incremental", "--cache-gb", "1", "--threads", "1"],
    );
    assert_eq!(base["tokens"], 12);
    assert_eq!(base["generated_ids"].as_array().unwrap().len(), 12);
    // Everything fits: after the first touch of each expert, the cache serves it.
    assert!(base["hits"]["cache"].as_u64().unwrap() > 0);
    small_cache_and_trunk(&model, &base);
    trunk_all_but_half_the_embedding(&model, &base);
    pins_from_own_heat(tmp.path(), &model, &base);
    speculation_threads_and_recompute(&model, &base);
    far_tier_warm(&model, &base);
    far_tier_dead_or_dying(&model, &base);
    knobs_from_a_profile(tmp.path(), &model, &base);
}

/// Small caches and trunk budgets read more from disk and change no bit.
fn small_cache_and_trunk(model: &Path, base: &Value) {
    // A cache of 4 experts (the minimum for top-2 is 2): many cold reads from disk.
    let small = bench_ok(
        model,
        &["--incremental", "--cache-gb", "0.0001", "--threads", "2"],
    );
    same(base, &small, "small cache, 2 threads");
    assert!(small["hits"]["cold"].as_u64() > base["hits"]["cold"].as_u64());
    assert!(small["disk_bytes_read"].as_u64() > base["disk_bytes_read"].as_u64());

    // Trunk mostly re-read from disk every token.
    let trunk = bench_ok(
        model,
        &[
            "--incremental",
            "--trunk-gb",
            "0.00002",
            "--cache-gb",
            "0.0001",
        ],
    );
    same(base, &trunk, "small trunk");
    assert!(trunk["trunk_bytes_read"].as_u64().unwrap() > 0);
    assert_eq!(base["trunk_bytes_read"], 0);
}

/// A trunk budget that ends inside the embedding table.
fn trunk_all_but_half_the_embedding(model: &Path, base: &Value) {
    // All of the trunk but half the embedding table: the budget's rest holds the
    // table's first rows, so every byte of trunk_gb holds trunk.
    let manifest: Value =
        serde_json::from_slice(&std::fs::read(model.join("manifest.json")).unwrap()).unwrap();
    let embed = manifest["trunk"]["segments"][0]["bytes"].as_u64().unwrap();
    assert_eq!(manifest["trunk"]["segments"][0]["name"], "embed");
    let aligned: u64 = manifest["trunk"]["segments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["bytes"].as_u64().unwrap().div_ceil(4096) * 4096)
        .sum();
    let resident = aligned - embed / 2;
    // A few bytes over, so the GB float cannot round below a whole block.
    let gb = format!("{}", (resident + 100) as f64 / 1e9);
    let part = bench_ok(
        model,
        &["--incremental", "--trunk-gb", &gb, "--cache-gb", "0.0001"],
    );
    same(base, &part, "trunk all but half the embedding");
    assert_eq!(part["residency"]["trunk_resident_bytes"], resident);
}

/// Pins from the run's own heat; leaves `pins.txt` in `dir` for [`knobs_from_a_profile`].
fn pins_from_own_heat(dir: &Path, model: &Path, base: &Value) {
    let trace = dir.join("trace");
    bench_ok(
        model,
        &[
            "--incremental",
            "--dump-cache-trace",
            trace.to_str().unwrap(),
        ],
    );
    let pins = dir.join("pins.txt");
    let out = crate::common::run(&[
        "pins",
        model.to_str().unwrap(),
        "--hist",
        trace.join("expert_hist.json").to_str().unwrap(),
        "--out",
        pins.to_str().unwrap(),
    ]);
    assert!(out.status.success());
    let pinned = bench_ok(
        model,
        &[
            "--incremental",
            "--cache-gb",
            "0.0001",
            "--pins",
            pins.to_str().unwrap(),
            "--pin-count",
            "6",
        ],
    );
    same(base, &pinned, "pins");
    assert!(pinned["hits"]["pinned"].as_u64().unwrap() > 0);
    assert_eq!(pinned["residency"]["pinned_experts"], 6);
}

/// Speculation, threads, and no KV cache at all.
fn speculation_threads_and_recompute(model: &Path, base: &Value) {
    let spec = bench_ok(
        model,
        &["--incremental", "--spec", "3", "--cache-gb", "0.0001"],
    );
    same(base, &spec, "spec 3");
    assert!(spec["draft"]["proposed"].as_u64().unwrap() > 0);
    let spec1 = bench_ok(model, &["--incremental", "--spec", "1", "--threads", "1"]);
    same(base, &spec1, "spec 1, 1 thread");
    let recompute = bench_ok(model, &["--threads", "2"]);
    same(base, &recompute, "non-incremental");
}

/// Experts served by a live far tier.
fn far_tier_warm(model: &Path, base: &Value) {
    let server = start_server(model, 32, &[]);
    let far = bench_ok(
        model,
        &[
            "--incremental",
            "--cache-gb",
            "0.0001",
            "--far",
            &server.addr,
            "--far-warm-set",
            "12",
        ],
    );
    same(base, &far, "far warm");
    assert_eq!(far["far"]["available"], true);
    assert!(far["far"]["error"].is_null());
    assert!(far["hits"]["far"].as_u64().unwrap() > 0, "{}", far["hits"]);
    assert_eq!(far["far"]["warm"], 12);
    let far_spec = bench_ok(
        model,
        &[
            "--incremental",
            "--spec",
            "2",
            "--cache-gb",
            "0.0001",
            "--far",
            &server.addr,
        ],
    );
    same(base, &far_spec, "far + spec");
    drop(server);
}

/// A far tier that never answers, or dies mid-run: the run falls back, bit for bit.
fn far_tier_dead_or_dying(model: &Path, base: &Value) {
    // Far tier configured but nobody listening.
    let dead = bench_ok(model, &["--incremental", "--far", "127.0.0.1:9"]);
    same(base, &dead, "far dead");
    assert_eq!(dead["far"]["configured"], true);
    assert_eq!(dead["far"]["available"], false);
    assert!(
        dead["far"]["error"]
            .as_str()
            .unwrap()
            .contains("cannot connect")
    );

    // Far tier dies mid-run (exits abruptly on its 6th compute request, during token 2).
    let dying = start_server(model, 32, &["--exit-after-requests", "5"]);
    let killed = bench_ok(
        model,
        &[
            "--incremental",
            "--cache-gb",
            "0.0001",
            "--far",
            &dying.addr,
            "--far-warm-set",
            "32",
        ],
    );
    same(base, &killed, "far killed mid-run");
    assert_eq!(killed["far"]["available"], false);
    assert!(
        killed["far"]["hits"].as_u64().unwrap() > 0,
        "it served before dying"
    );
    assert!(
        killed["far"]["error"].as_str().unwrap().contains("lost"),
        "{}",
        killed["far"]["error"]
    );
}

/// The same knobs from an orchestrator profile (its pins file is the one
/// [`pins_from_own_heat`] wrote in `dir`).
fn knobs_from_a_profile(dir: &Path, model: &Path, base: &Value) {
    let profile = dir.join("p.toml");
    std::fs::write(
        &profile,
        "[memory]\nbudget_gb = 0.01\ntrunk_gb = 0.00002\ncache_gb = 0.0001\n[pins]\nfile = \"pins.txt\"\ncount = 3\n[far]\naddr = \"\"\nwarm_set = 0\n[speculative]\ndraft_len = 2\n[compute]\nthreads = 1\n",
    )
    .unwrap();
    let prof = bench_ok(model, &["--profile", profile.to_str().unwrap()]);
    same(base, &prof, "profile");
    assert_eq!(prof["residency"]["pinned_experts"], 3);
    assert_eq!(prof["budget_bytes"], 10_000_000);
    assert!(prof["peak_rss_bytes"].as_u64().unwrap() > 0);
}
