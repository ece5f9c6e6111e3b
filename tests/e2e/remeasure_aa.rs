//! An A/A is never a win or a loss, end to end: the real daemon on the
//! embedded tinyk3 stack, its menu narrowed to `remeasure`, on a stack
//! measured by its bench alone (no `[stack.surface]`, as the real
//! kimi-k3-in-c engine's config), so the proposer's `remeasure` is an A/A
//! of the live profile through the bench, the same path that once recorded
//! a `loss` of +13.1% on the real engine.
//!
//! Both arms run the same profile at the same speed. A burst that covers
//! one arm of every pair is what makes such an A/A look directional; the
//! machine cannot be made to burst on cue, so `arm-biased-bench.sh` (a test
//! double around the real `tinyk3 bench`) reports the runs the schedule
//! puts in the candidate slot three times slower. The test checks that
//! premise on the recorded runs (the sequential test alone calls them a
//! loss), then that the A/A's verdict has no direction: with the guard in
//! `cycle/floor_refresh.rs` (`aa_verdict`) taking the decision's kind, this
//! test reads "an A/A judged loss".

use orchestrator::judge::{self, Floor, Policy, Step};
use orchestrator::ledger::ExperimentId;
use orchestrator::vocab::{Arm, VerdictKind};

use crate::demo::Demo;
use crate::faults::{TINY_EXPERT_BYTES, TINY_INIT, TINY_START, edit_config};

/// How much slower the double reports a candidate-slot run.
const BIAS: f64 = 3.0;

/// A wrapper of the real bench that reports the runs of the candidate slot
/// of an A/A slower. The daemon runs one warmup per arm, then pairs in the
/// alternating block order `B C C B | C B B C` (`judge::protocol`); the
/// wrapper counts its runs in the demo's `aa-runs` (the test runs one
/// cycle, so every run it counts is that A/A's, and the bench runs nothing
/// else) and, in a candidate slot, multiplies the `seconds_per_token` the
/// engine wrote to `--out` by [`BIAS`].
fn arm_biased_bench(demo: &Demo, tinyk3: &str) -> std::path::PathBuf {
    let counter = demo.path("aa-runs");
    let body = format!(
        r#"# Test double: a burst over one arm of every pair, on cue.
n=$(cat '{counter}' 2>/dev/null || echo 0)
echo $((n + 1)) > '{counter}'
{tinyk3} "$@" || exit $?
out=""; prev=""
for a in "$@"; do [ "$prev" = "--out" ] && out="$a"; prev="$a"; done
m=$((n - 2))
[ "$m" -ge 0 ] || exit 0
case $((m % 8)) in 1|2|4|7) ;; *) exit 0 ;; esac
awk -v f={BIAS} '{{
  if (match($0, /"seconds_per_token": *[0-9.eE+-]+/)) {{
    v = substr($0, RSTART, RLENGTH); sub(/"seconds_per_token": */, "", v)
    $0 = substr($0, 1, RSTART - 1) "\"seconds_per_token\":" (v * f) substr($0, RSTART + RLENGTH)
  }}
  print
}}' "$out" > "$out.biased" && mv "$out.biased" "$out""#,
        counter = counter.display(),
    );
    crate::common::script(demo.dir.path(), "arm-biased-bench.sh", &body)
}

#[test]
fn a_remeasure_on_a_same_speed_stack_never_takes_a_direction() {
    let _heavy = crate::common::heavy();
    let demo = Demo::new("bandit", TINY_START, TINY_INIT, TINY_EXPERT_BYTES, 4);
    let tinyk3 = format!("{:?}", crate::common::tinyk3_bin());
    let double = arm_biased_bench(&demo, &tinyk3);
    edit_config(&demo, |t| {
        // Only `remeasure` is on the menu.
        let t = t.replacen(
            "\n[stack]\n",
            "\n[stack]\nunsupported = [\"rerank_pins\", \"deepen_warm_set\", \"stage_speculative\", \"rebalance_trunk_cache\"]\n",
            1,
        );
        // Measured by its bench alone: the A/A runs the (wrapped) bench.
        let (before, rest) = t.split_once("[stack.surface]").unwrap();
        let (_, after) = rest.split_once("[stack.metrics]").unwrap();
        let t = format!("{before}[stack.metrics]{after}");
        let bench = format!("argv = [\n  {tinyk3}, \"bench\"");
        assert!(t.contains(&bench), "the bench argv starts with tinyk3");
        let t = t.replacen(&bench, &format!("argv = [\n  {:?}, \"bench\"", double), 1);
        // 48 tokens a run, not 8: the tiny checkpoint's runs are short
        // enough for scheduling jitter to swamp them.
        let t = t.replacen("\"--gen\", \"8\"", "\"--gen\", \"48\"", 1);
        // About the verdict, not the machine: a shared machine's bursts
        // must not end the A/A as too noisy, nor its floor as too wide.
        t.replace("max_contention_rise = 0.25", "max_contention_rise = 10")
            .replace("max_discarded_blocks = 8", "max_discarded_blocks = 1000")
            .replace("max_noise_floor = 0.50", "max_noise_floor = 0.95")
    });

    let log = demo.run_ok(&["run", "--cycles", "1"]);
    let cycles = demo.ledger();
    assert_eq!(cycles.len(), 1, "{cycles:#?}");
    let verdicts = cycles[0]["verdicts"].as_array().unwrap();
    assert_eq!(verdicts.len(), 1, "{cycles:#?}");
    let aa = &verdicts[0];
    assert_eq!(aa["menu_id"], "remeasure", "{aa:#}");
    assert!(aa["proposal_id"].is_i64(), "the proposer chose it: {aa:#}");
    let v = &aa["verdict"];
    let experiment = ExperimentId(v["experiment_id"].as_i64().unwrap());

    // The premise: the runs the double slowed are the candidate slot's,
    // and the sequential test alone, under the A/A's own floor, would
    // call these pairs a loss.
    let runs = demo.read_ledger(async |l| l.runs(experiment).await.unwrap());
    let mut pairs: std::collections::BTreeMap<u32, (f64, f64)> = Default::default();
    for r in runs.iter().filter(|r| !r.discarded) {
        let (Some(p), Some(spt)) = (r.pair_index, r.seconds_per_token) else {
            continue;
        };
        let slot = pairs.entry(p).or_default();
        match r.arm {
            Arm::Baseline => slot.0 = spt,
            Arm::Candidate => slot.1 = spt,
            Arm::Warmup => {}
        }
    }
    let pairs: Vec<(f64, f64)> = pairs
        .into_values()
        .filter(|(b, c)| *b > 0.0 && *c > 0.0)
        .collect();
    assert!(pairs.len() >= 10, "{pairs:?}\n{log}");
    let mut ratios: Vec<f64> = pairs.iter().map(|(b, c)| c / b).collect();
    ratios.sort_by(f64::total_cmp);
    let median = ratios[ratios.len() / 2];
    assert!(median > 1.8, "the candidate slots ran slow: {pairs:?}");
    let floor = v["noise_floor"].as_f64().expect("the A/A measured a floor");
    let step = judge::decide(&pairs, Floor::try_from(floor).unwrap(), &Policy::default()).unwrap();
    assert!(
        matches!(step, Step::Decided(d) if d.kind == VerdictKind::Loss),
        "premise: the test alone takes a direction on these pairs: {step:?}\n{pairs:?}"
    );
    eprintln!("A/A pairs (floor {floor:.3}): {pairs:?}");

    // The A/A's verdict: a floor, never a direction.
    let kind = v["kind"].as_str().unwrap();
    assert!(
        ["within_noise", "inconclusive"].contains(&kind),
        "an A/A judged {kind}: {v:#}\n{log}"
    );
    if kind == "within_noise" {
        assert!(v["reason"].as_str().unwrap_or("").contains("A/A"), "{v:#}");
    }
    let out = demo
        .cmd()
        .args(["stage", "list", "--all"])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("no stages yet"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    demo.assert_children_gone();
}
