//! The fault matrix, engine side: the real daemon (`orchestrator run`, the
//! embedded tinyk3 stack) whose bench command runs through `fault-wrapper`,
//! fed one fault at a time while the daemon runs. Each fault must end its
//! cycle in exactly one `failed` or `hash_mismatch` verdict, with an ERROR
//! log line naming the cause, no process of the run's group left alive, and
//! the next cycle completing normally.

use std::time::{Duration, Instant};

use crate::demo::Demo;
use crate::faults::*;

/// Each fault, and words the ERROR line and verdict reason must carry.
const ENGINE_FAULTS: &[(&str, &[&str])] = &[
    ("crash", &["signal 9"]),
    (
        "hang",
        &["still going after 4s", "process group was killed"],
    ),
    ("garbage", &["no JSON"]),
    ("change-output", &["output", "pinned"]),
    ("exit4", &["exit", "4"]),
    ("die-mid-run", &["137"]),
];

#[test]
fn every_engine_fault_fails_one_cycle_loudly_and_the_next_runs_normally() {
    let _heavy = crate::common::heavy();
    let t0 = Instant::now();
    let demo = Demo::new("bandit", TINY_START, TINY_INIT, TINY_EXPERT_BYTES, 4);
    wrap_bench(&demo);
    // Every cycle must run the bench for a queued fault to hit one. Once
    // the line search is done, the loop's cycles are its `remeasure`s: a
    // floor stale by the next cycle keeps it offered (so the loop never
    // converges, and the bounded run never stops, before the last fault),
    // and without `[stack.surface]` it runs the bench, not the live server.
    edit_config(&demo, |t| {
        let (before, rest) = t.split_once("[stack.surface]").unwrap();
        let (_, after) = rest.split_once("[stack.metrics]").unwrap();
        format!("{before}[stack.metrics]{after}")
            .replace("run_timeout_s = 60", "run_timeout_s = 4")
            .replace(
                "noise_floor_max_age_s = 86400",
                "noise_floor_max_age_s = 0.001",
            )
    });
    let mut daemon = Daemon::start(&demo, &["--cycles", "100"], &[]);
    let minute = Duration::from_secs(60);

    // A clean first cycle pins the reference output hash and the floor.
    let first = wait_for(3 * minute, "the first cycle", &mut daemon, || {
        closed_after(&demo, 0).into_iter().next()
    });
    assert_eq!(first["cycle"]["status"], "completed", "{first:#}");
    let mut last_id = first["cycle"]["id"].as_i64().unwrap();
    let mut wrong = Vec::new();

    for &(fault, words) in ENGINE_FAULTS {
        let invocations_before = wrapper_log(&demo).len();
        queue_fault(&demo, fault);
        let db = demo.path("ledger/orchestrator.db");
        let hit = wait_for(
            minute,
            &format!("the cycle hit by `{fault}`"),
            &mut daemon,
            || {
                let cycle = ledger::cycle_of_fault(&db, fault)?;
                closed_after(&demo, cycle - 1)
                    .into_iter()
                    .find(|c| c["cycle"]["id"] == cycle)
            },
        );
        let hit_id = hit["cycle"]["id"].as_i64().unwrap();
        assert!(
            hit_id > last_id,
            "{fault} landed after the last normal cycle"
        );
        let log = wrapper_log(&demo);
        let injected: Vec<_> = log[invocations_before..]
            .iter()
            .filter(|(k, _, _)| k == fault)
            .collect();
        assert_eq!(injected.len(), 1, "{fault} injected once: {log:?}");
        let (kind, reason) = only_verdict(&hit);
        assert!(
            kind == "failed" || kind == "hash_mismatch",
            "{fault}: verdict {kind}: {hit:#}"
        );
        if fault == "change-output" {
            assert!(
                kind == "hash_mismatch" || reason.contains("no longer matches the reference"),
                "a changed output is a hash mismatch: {hit:#}"
            );
        }
        for w in words {
            assert!(
                reason.contains(w),
                "{fault}: the reason names the cause ({w}): {reason}"
            );
        }
        // The ERROR line names the cause too.
        let stderr = daemon.stderr();
        if !error_lines(&stderr)
            .iter()
            .any(|l| words.iter().all(|w| l.contains(w)))
        {
            wrong.push(format!("{fault}: no ERROR line naming {words:?}"));
        }
        // Nothing of the faulty run's process group survives.
        let pgid = injected[0].1;
        let left = group_members(pgid);
        assert!(left.is_empty(), "{fault}: group {pgid} still has {left:?}");

        // The next cycle runs normally.
        let next = wait_for(
            2 * minute,
            &format!("the cycle after `{fault}`"),
            &mut daemon,
            || closed_after(&demo, hit_id).into_iter().next(),
        );
        assert_eq!(
            next["cycle"]["status"], "completed",
            "after {fault}: {next:#}"
        );
        assert_ne!(only_verdict(&next).0, "failed", "after {fault}: {next:#}");
        last_id = next["cycle"]["id"].as_i64().unwrap();
        eprintln!(
            "{fault}: cycle {hit_id} {kind} ({reason}); {:.1}s",
            t0.elapsed().as_secs_f64()
        );
    }

    assert!(wrong.is_empty(), "{wrong:#?}\nlog:\n{}", daemon.stderr());
    let status = daemon.stop(minute);
    assert!(
        status.code().is_some(),
        "the daemon ended cleanly on SIGTERM: {status:?}"
    );
    // Every group the wrapper led is empty, and nothing started from the
    // demo's directory (bench, wrapper, serve, expert server) is left.
    for (_, pgid, _) in wrapper_log(&demo) {
        assert!(
            group_members(pgid).is_empty(),
            "group {pgid} outlived the daemon"
        );
    }
    let dir = demo.dir.path().to_string_lossy().to_string();
    let left = processes_mentioning(&dir);
    assert!(left.is_empty(), "processes outlived the daemon: {left:?}");
    demo.assert_children_gone();
    eprintln!("engine fault matrix: {:.1}s", t0.elapsed().as_secs_f64());
}
