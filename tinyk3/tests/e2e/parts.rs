//! The bench JSON's measured parts of a decode token: the trunk and expert
//! terms (timed around the real work), the far tier's hit share and the
//! draft acceptance, with the residual no timer covers reported beside them.

use serde_json::Value;

use crate::common::{bench_ok, start_server, tiny_model};

fn num(v: &Value, key: &str) -> f64 {
    v[key]
        .as_f64()
        .unwrap_or_else(|| panic!("`{key}` is not a number in {v}"))
}

/// The parts are disjoint timed intervals of the decode wall time, so with
/// the draft and the residual they add up to `seconds_per_token`.
fn check_sums(r: &Value) {
    let spt = num(r, "seconds_per_token");
    let (trunk, expert) = (
        num(r, "trunk_seconds_per_token"),
        num(r, "expert_seconds_per_token"),
    );
    let p = &r["phases"];
    let residual = num(r, "residual_seconds_per_token");
    assert!(trunk > 0.0 && expert > 0.0, "{r}");
    assert_eq!(num(p, "trunk"), trunk);
    assert_eq!(num(p, "expert"), expert);
    assert!(
        (trunk + expert + num(p, "draft") + residual - spt).abs() < 1e-9,
        "{p}"
    );
    // Timers cover nearly all of a token: the residual is small but real.
    assert!(residual > -1e-9 && residual < 0.5 * spt, "{p}");
    let tiers = num(p, "expert_local") + num(p, "expert_far") + num(p, "expert_cold");
    assert!(tiers <= expert + 1e-9, "{p}");
}

#[test]
fn bench_reports_measured_parts_of_a_decode_token() {
    let (_tmp, model) = tiny_model();
    // Cache of top-k experts only: most lookups go cold, no far tier.
    let cold = bench_ok(&model, &["--incremental", "--cache-gb", "0.0001"]);
    check_sums(&cold);
    assert_eq!(num(&cold, "far_hit_share"), 0.0);
    assert!(
        cold["draft_acceptance"].is_null(),
        "no speculation, no acceptance"
    );
    assert!(num(&cold["phases"], "expert_cold") > 0.0);

    // A warm far tier serves a measured share of the lookups.
    let server = start_server(&model, 32, &[]);
    let far = bench_ok(
        &model,
        &[
            "--incremental",
            "--cache-gb",
            "0.0001",
            "--far",
            &server.addr,
            "--far-warm-set",
            "32",
        ],
    );
    check_sums(&far);
    let share = num(&far, "far_hit_share");
    let h = &far["decode_hits"];
    let lookups: f64 = ["pinned", "cache", "far", "cold"]
        .iter()
        .map(|k| num(h, k))
        .sum();
    assert!((share - num(h, "far") / lookups).abs() < 1e-12, "{h}");
    assert!(share > 0.0 && share <= 1.0, "{share}");
    assert!(num(&far["phases"], "expert_far") > 0.0);

    // Speculation: the draft's passes are timed apart, acceptance reported.
    let spec = bench_ok(&model, &["--incremental", "--spec", "3"]);
    check_sums(&spec);
    assert!(num(&spec["phases"], "draft") > 0.0);
    let acc = num(&spec, "draft_acceptance");
    assert!((0.0..=1.0).contains(&acc));
    assert_eq!(acc, num(&spec["draft"], "acceptance"));
}
