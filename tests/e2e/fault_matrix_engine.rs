//! The fault matrix, engine side: the real daemon (`orchestrator run`, the
//! embedded tinyk3 stack) whose bench command runs through `fault-wrapper`,
//! fed one fault at a time while the daemon runs. Each fault must end the
//! experiment it hit in a `failed` or `hash_mismatch` verdict, with an ERROR
//! log line naming the cause, no process of the run's group left alive, and
//! the next cycle completing normally. Where a fault lands depends on when
//! the next run starts: mostly an A/B's, sometimes a noise floor's A/A
//! measured within the A/B's cycle (which the A/B then names as why it is
//! undecided); the last case makes sure of the latter.

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
    // converges, and the bounded run never stops, before the last case),
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
    let mut daemon = Daemon::start(&demo, &["--cycles", "1000"], &[]);
    let minute = Duration::from_secs(60);

    // A clean first cycle pins the reference output hash and the floor.
    let first = wait_for(3 * minute, "the first cycle", &mut daemon, || {
        closed_after(&demo, 0).into_iter().next()
    });
    assert_eq!(first["cycle"]["status"], "completed", "{first:#}");
    let mut last_id = first["cycle"]["id"].as_i64().unwrap();
    let mut wrong = Vec::new();

    for &(fault, words) in ENGINE_FAULTS {
        last_id = hit_then_recover(&demo, &mut daemon, fault, words, last_id, &mut wrong).0;
        eprintln!("{fault}: {:.1}s", t0.elapsed().as_secs_f64());
    }
    // A fault in a noise floor's A/A measured for an A/B the bound did
    // not decide is as loud as one in an A/B: that A/A is `failed` with
    // the cause, an ERROR line names it, and the A/B is left undecided
    // naming it. The fault is queued while such a floor is under way with
    // runs left; when it still lands elsewhere, the matrix is checked
    // there and it tries again.
    let db = demo.path("ledger/orchestrator.db");
    let mut in_floor = false;
    for attempt in 1..=5 {
        // Once converged, the loop's cycles are `remeasure`s until UCB1
        // tries an arm again (some 50 cycles here).
        let floor = wait_for(
            5 * minute,
            "a noise floor under way for an A/B",
            &mut daemon,
            || ledger::open_floor(&db).filter(|&(_, runs)| (2..6).contains(&runs)),
        );
        let (next, hit) = hit_then_recover(
            &demo,
            &mut daemon,
            "exit4",
            &["exit", "4"],
            last_id,
            &mut wrong,
        );
        last_id = next;
        eprintln!(
            "exit4 queued during floor #{}: it hit experiment #{hit} (attempt {attempt})",
            floor.0
        );
        if hit == floor.0 {
            in_floor = true;
            break;
        }
    }
    assert!(
        in_floor,
        "no fault landed in a noise floor's A/A in 5 tries"
    );

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

/// Queues `fault`, waits for the run it hits, and checks the
/// matrix there: the experiment it hit ended `failed` (or `hash_mismatch`)
/// naming the cause, an experiment of that cycle begun before it says that
/// experiment left it undecided, an ERROR line names the cause (else `wrong` says so),
/// nothing of the run's process group is left, and the next cycle completes
/// with no failure. Returns (the next cycle's id, the experiment hit).
fn hit_then_recover(
    demo: &Demo,
    daemon: &mut Daemon,
    fault: &str,
    words: &[&str],
    last_id: i64,
    wrong: &mut Vec<String>,
) -> (i64, i64) {
    let minute = Duration::from_secs(60);
    let invocations_before = wrapper_log(demo).len();
    let log_before = daemon.stderr().len();
    queue_fault(demo, fault);
    let db = demo.path("ledger/orchestrator.db");
    let (hit, experiment) = wait_for(
        minute,
        &format!("the cycle hit by `{fault}`"),
        daemon,
        || {
            let (cycle, experiment) = ledger::experiment_of_fault(&db, fault, last_id)?;
            closed_after(demo, cycle - 1)
                .into_iter()
                .find(|c| c["cycle"]["id"] == cycle)
                .map(|c| (c, experiment))
        },
    );
    let hit_id = hit["cycle"]["id"].as_i64().unwrap();
    let log = wrapper_log(demo);
    let injected: Vec<_> = log[invocations_before..]
        .iter()
        .filter(|(k, _, _)| k == fault)
        .collect();
    assert_eq!(injected.len(), 1, "{fault} injected once: {log:?}");
    let (kind, reason) = verdict_of(&hit, experiment);
    assert!(
        kind == "failed" || kind == "hash_mismatch",
        "{fault}: experiment #{experiment}: verdict {kind}: {hit:#}"
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
    // An A/B whose floor the fault broke (begun before it) is left
    // undecided, and says why. A floor measured whole before the A/B's
    // run was hit is later than the A/B and says nothing of it.
    for v in hit["verdicts"].as_array().unwrap() {
        if v["verdict"]["experiment_id"]
            .as_i64()
            .is_some_and(|id| id < experiment)
        {
            let other = v["verdict"]["reason"].as_str().unwrap_or("");
            assert!(
                other.contains(&format!("experiment #{experiment}")),
                "{fault}: the cycle's other verdict names the experiment it hit: {hit:#}"
            );
        }
    }
    // An ERROR line logged since names the cause too.
    let stderr = daemon.stderr();
    if !error_lines(&stderr[log_before..])
        .iter()
        .any(|l| words.iter().all(|w| l.contains(w)))
    {
        wrong.push(format!(
            "{fault} (experiment #{experiment}): no ERROR line naming {words:?}"
        ));
    }
    // Nothing of the faulty run's process group survives.
    let pgid = injected[0].1;
    let left = group_members(pgid);
    assert!(left.is_empty(), "{fault}: group {pgid} still has {left:?}");

    // The next cycle runs normally.
    let next = wait_for(
        2 * minute,
        &format!("the cycle after `{fault}`"),
        daemon,
        || closed_after(demo, hit_id).into_iter().next(),
    );
    assert_eq!(
        next["cycle"]["status"], "completed",
        "after {fault}: {next:#}"
    );
    assert_ne!(only_verdict(&next).0, "failed", "after {fault}: {next:#}");
    eprintln!("{fault}: cycle {hit_id} experiment #{experiment} {kind} ({reason})");
    (next["cycle"]["id"].as_i64().unwrap(), experiment)
}
