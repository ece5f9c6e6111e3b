//! End to end: the real tinyk3 records a trace, `rerank_pins` plans from it,
//! and the engine run under the candidate measures exactly the hits the
//! replay predicted (its output is bit-identical under every profile, so the
//! trace repeats and the prediction can be checked to the lookup).

use std::path::Path;
use std::process::Command;

use crate::common;
use orchestrator::heat::{Heat, Trace};
use orchestrator::menu::{MenuId, ParamValue, Proposal};
use orchestrator::plan::{self, PlanContext, PlanRefusal, replay};
use orchestrator::profile::Profile;
use serde_json::Value;

fn run(args: &[&str]) -> String {
    let out = Command::new(common::tinyk3_bin())
        .args(args)
        .output()
        .expect("tinyk3 runs");
    assert!(
        out.status.success(),
        "tinyk3 {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn bench(model: &Path, profile: &Path, dump: Option<&Path>) -> Value {
    let mut args = vec![
        "bench",
        model.to_str().unwrap(),
        "--profile",
        profile.to_str().unwrap(),
        "--prompt",
        "Which experts should stay pinned?",
        "--gen",
        "96",
    ];
    if let Some(d) = dump {
        args.extend(["--dump-cache-trace", d.to_str().unwrap()]);
    }
    serde_json::from_str(run(&args).lines().last().unwrap()).unwrap()
}

fn u(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("not a count: {v}"))
}

#[test]
fn replay_predicts_the_engines_own_hits_and_the_candidate_delivers_them() {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("model");
    run(&[
        "init",
        "--out",
        model.to_str().unwrap(),
        "--layers",
        "4",
        "--experts",
        "16",
        "--d-model",
        "32",
        "--d-expert",
        "64",
        "--d-dense",
        "64",
        "--heads",
        "2",
        "--vocab",
        "256",
    ]);
    let manifest: Value =
        serde_json::from_str(&std::fs::read_to_string(model.join("manifest.json")).unwrap())
            .unwrap();
    let stride = u(&manifest["experts"]["stride"]);
    let top_k = u(&manifest["shape"]["top_k"]) as u32;

    // A live profile with 8 cache slots and no pins; its file sits in ledger/
    // and candidates go to ledger/profiles/, as on the default config.
    let ledger = dir.path().join("ledger");
    std::fs::create_dir_all(&ledger).unwrap();
    let live_path = ledger.join("live-profile.toml");
    let cache_gb = (8 * stride) as f64 / 1e9;
    std::fs::write(
        &live_path,
        format!("[memory]\nbudget_gb = 0.01\ntrunk_gb = 0.001\ncache_gb = {cache_gb}\n[compute]\nthreads = 1\n"),
    )
    .unwrap();
    let live = Profile::load(&live_path).unwrap();
    let heat_dir = dir.path().join("heat");
    let measured = bench(&model, &live_path, Some(&heat_dir));

    let heat = Heat::load(&heat_dir.join("expert_hist.json")).unwrap();
    let trace = Trace::load(&heat_dir.join("expert_trace.bin"), heat.shape()).unwrap();
    assert_eq!(
        trace.requests().len() as u64,
        u(&measured["expert_requests"])
    );
    assert_eq!(
        Heat::of_requests(trace.shape(), trace.requests()),
        heat,
        "histogram = trace"
    );

    // The replay of the live settings is the engine's own count, lookup for lookup.
    let lookups = replay::Lookups::of_trace(&trace);
    let hits = &measured["hits"];
    let engine_lookups: u64 = ["pinned", "cache", "far", "cold"]
        .iter()
        .map(|k| u(&hits[k]))
        .sum();
    assert_eq!(lookups.len() as u64, engine_lookups);
    assert_eq!(
        replay::lru(&lookups, 8).hits,
        u(&hits["cache"]) + u(&hits["pinned"])
    );
    assert_eq!(replay::infer_top_k(&trace), Some(top_k));

    let profiles = ledger.join("profiles");
    let ctx = PlanContext {
        live: &live,
        live_path: &live_path,
        profiles_dir: &profiles,
        expert_bytes: Some(stride),
        cache_spare_slots: 0,
        heat: Some(&heat),
        trace: Some(&trace),
        current_pins: None,
        top_k: Some((top_k, "given")),
        menu: None,
    };
    let proposal = Proposal {
        experiment: MenuId::RerankPins,
        params: [("pin_count".to_string(), ParamValue::Integer(4))].into(),
    };
    let plan = match plan::plan(&ctx, &proposal) {
        Ok(plan) => plan,
        Err(PlanRefusal::NotPredictedToHelp { notes, .. }) => {
            panic!("8 LRU slots for 16 lookups a pass should lose to pins: {notes}")
        }
        Err(e) => panic!("{e}"),
    };
    plan::write_plan(&plan).unwrap();
    assert!(plan.candidate_path.starts_with(&profiles));
    assert!(
        plan.candidate
            .pins_path(&plan.candidate_path)
            .unwrap()
            .is_file()
    );
    assert!(
        plan.candidate.pins_path(&live_path).unwrap().is_file(),
        "ready for approval"
    );
    let rates = &plan.notes["predicted_hit_rate"];
    let min = rates["belady_min"].as_f64().unwrap();
    for k in ["new_pins", "current_pins", "lru"] {
        assert!(rates[k].as_f64().unwrap() <= min, "{k} beats MIN: {rates}");
    }

    // The engine under the candidate: same output, the predicted hits exactly.
    let under = bench(&model, &plan.candidate_path, None);
    assert_eq!(under["generated_ids"], measured["generated_ids"]);
    assert_eq!(u(&under["residency"]["pinned_experts"]), 4);
    assert_eq!(u(&under["residency"]["cache_capacity_experts"]), 4);
    let predicted = &plan.notes["replay"]["new_pins"];
    assert_eq!(u(&under["hits"]["pinned"]), u(&predicted["pinned_hits"]));
    assert_eq!(
        u(&under["hits"]["pinned"]) + u(&under["hits"]["cache"]),
        u(&predicted["hits"])
    );
}
