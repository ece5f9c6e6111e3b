//! The judge's promise on a loaded machine, end to end: the real daemon on
//! tinyk3 judges scripted candidates that change the profile but not the
//! speed (a trunk/cache split where both halves hold everything) while CPU
//! hogs run beside it. Nothing may be staged; the verdicts are
//! `within_noise`, or `inconclusive` with the noisy-machine reason.
//!
//! Two loads: hogs running steadily through the floor and the A/Bs (a busy
//! machine: every core busy, one runnable task more than there are cores,
//! which the floor holds: candidates are judged), and more hogs
//! that start only after the floor was measured (a burst beside the A/B,
//! which the floor does not hold: its blocks are discarded as interfered).
//!
//! Departures from the shipped config: the demo's quick protocol (a tiny
//! checkpoint, 8 tokens, `max_pairs` 8), `floor_pairs = 10` (the least, to
//! keep the test short), `[cycle] max_wait_s = 1` so the value and the
//! side of the line an inconclusive A/B closed are open again by the next
//! cycle, and a floor too wide to judge with is measured again by the next
//! A/B (shipped: an hour, `cycle::floor::CurrentFloor::too_wide_holds`), and in the burst part `max_discarded_blocks = 1`
//! so a too-noisy A/B gives up after two blocks, `floor_pressure_shift =
//! 1.0` so the floor measured before the burst is the one judged against,
//! and `max_noise_floor = 0.95` so a tiny checkpoint's wide floor on a
//! shared machine still leads to the A/B (0.99, the widest the config
//! takes, in the steady part, for the same reason; shipped: 0.50). The
//! profile runs one thread (the default is two), and the steady load is of
//! the idle scheduling class, so that the floor under it is narrow enough
//! to judge against ([`steady_load`]); the burst's loops are of the default
//! class.

use std::process::{Child, Command};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use chrono::{Duration as Span, Utc};
use orchestrator::ledger::{NoiseFloor, Run};
use orchestrator::menu::MenuId;
use orchestrator::vocab::{Arm, VerdictKind};

use crate::demo::Demo;
use crate::faults::server::{FaultyHttpServer, Reply};
use crate::faults::{
    TINY_EXPERT_BYTES, TINY_INIT, edit_config, not_standing_aside, use_model_double,
};

/// Budgets far above the tiny checkpoint's trunk and experts, so every
/// trunk/cache split holds all of both: a candidate of the same speed.
/// One thread per run (a profile's default is two): a run of two threads
/// that wait on each other stalls whenever other work takes either
/// thread's core. 30 runs beside three busy loops spread 0.08-0.13 (MAD σ
/// of the pairs' log ratios) on one thread, 0.18-0.22 on two; beside three
/// idle-class loops, 0.16 and 0.45 (2026-12-07).
const ROOMY_START: &str = "[memory]\nbudget_gb = 0.2\ntrunk_gb = 0.1\ncache_gb = 0.1\n[far]\naddr = \"FAR\"\nwarm_set = 0\n[compute]\nthreads = 1\n";

/// Busy loops, killed on drop.
struct Hogs(Vec<Child>);

impl Hogs {
    /// `n` busy loops at the default priority: they take the cores from
    /// the bench.
    fn of(n: usize) -> Hogs {
        Hogs::spawn(n, &[])
    }

    /// `n` busy loops of the idle scheduling class (`chrt --idle 0`). They
    /// are runnable, so `/proc/loadavg`'s contention counts them as fully
    /// as any, but a waking task of the default class takes their core at
    /// once. Nice 19 is not enough: a tiny checkpoint's run wakes many times
    /// per token and waited out a nice-19 loop's slice each time (30 runs:
    /// median s/token ×1.9, spread 0.48 against 0.12 quiet; as idle loops,
    /// ×1.0 and 0.16; 2026-12-07).
    fn idle(n: usize) -> Hogs {
        Hogs::spawn(n, &["chrt", "--idle", "0"])
    }

    fn spawn(n: usize, prefix: &[&str]) -> Hogs {
        let argv: Vec<&str> = prefix
            .iter()
            .copied()
            .chain(["sh", "-c", "while :; do :; done"])
            .collect();
        Hogs(
            (0..n)
                .map(|_| {
                    // The shell is the child, or `chrt` execs it: the child
                    // killed on drop is the loop itself.
                    Command::new(argv[0]).args(&argv[1..]).spawn().unwrap()
                })
                .collect(),
        )
    }
}

impl Drop for Hogs {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn cores() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get())
}

/// A model double that proposes a different no-op split every time.
fn split_proposer() -> FaultyHttpServer {
    let n = AtomicUsize::new(0);
    FaultyHttpServer::start(move |_| {
        let k = n.fetch_add(1, Ordering::Relaxed);
        let fraction = [0.3, 0.4, 0.6, 0.7, 0.35, 0.45, 0.55, 0.65][k % 8];
        Reply::Chat(format!(
            "{{\"experiment\":\"rebalance_trunk_cache\",\"params\":{{\"trunk_fraction\":{fraction}}},\"rationale\":\"same speed\"}}"
        ))
    })
}

/// The demo on the tiny checkpoint with the no-op split proposer, its
/// config edited by `(from, to)` replacements. The model double must
/// outlive the demo's runs.
fn hogged_demo(replacements: &[(&str, &str)]) -> (FaultyHttpServer, Demo) {
    let model = split_proposer();
    let demo = Demo::new("model", ROOMY_START, TINY_INIT, TINY_EXPERT_BYTES, 8);
    use_model_double(&demo, model.port);
    // Not standing aside: nobody uses the live server here, and its
    // start-up quiet spell (10 s) before the first run let a burst started
    // before `run` into the load the floor's check reads, so the floor was
    // measured again under the burst instead of the burst being interference.
    edit_config(&demo, not_standing_aside);
    // An A/B the hogs made inconclusive closes its value and its side of
    // the split's line for `max_wait_s`; at the shipped hour, two of them
    // closed both sides of the one knob this proposer names, and every
    // later cycle of the test was refused (CI, 2026-12-05). At 1 s each
    // cycle judges a split (a value at most three times).
    edit_config(&demo, |t| t.replace("max_wait_s = 3600", "max_wait_s = 1"));
    if !replacements.is_empty() {
        edit_config(&demo, |t| {
            replacements
                .iter()
                .fold(t, |t, (from, to)| t.replace(from, to))
        });
    }
    (model, demo)
}

/// The steady busy machine both tests judge on: a busy loop of the idle
/// class on every core and one more. They are runnable, so the floor's
/// contention (`/proc/loadavg`) and CPU pressure hold them, but they take
/// next to nothing from the bench; the rest of the suite, running beside a
/// heavy test, still does. Loops of the default priority spoilt the floor
/// whenever other work joined them: the tiny checkpoint's millisecond runs
/// either got a core or waited out a time slice, and in CI at e44977c
/// (2026-12-07) every floor of both rounds of the steady test came out
/// 104-172% wide, so nothing was judged. One default loop and two idle
/// ones gave floors of 0.27-1.82 (log ratios) in five runs of that test
/// here, all idle ones 0.21-0.52, with a busy loop of ours beside two of
/// them (2026-12-07).
fn steady_load() -> Hogs {
    Hogs::idle(cores() + 1)
}

/// `orchestrator run --cycles N` with `hogs` running from `settle` before
/// it to its end; its stderr, after checking it exited 0.
fn run_under(hogs: Hogs, demo: &Demo, cycles: u32, settle: Duration) -> String {
    std::thread::sleep(settle);
    let out = demo
        .cmd()
        .args(["run", "--cycles", &cycles.to_string()])
        .output()
        .unwrap();
    drop(hogs);
    let log = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{log}");
    log
}

/// How many wins `stage list` shows.
fn staged(demo: &Demo) -> usize {
    demo.json_list(&["stage", "list", "--json"]).len()
}

/// Confirmation A/Bs whose verdict is a win, read through the ledger API.
fn confirmed_wins(demo: &Demo) -> usize {
    demo.read_ledger(async |l| {
        let all = l.recent_experiments(u32::MAX).await.unwrap();
        all.iter()
            .filter(|e| e.confirmation_of.is_some() && e.verdict == Some(VerdictKind::Win))
            .count()
    })
}

/// Every noise floor of the demo's stacks, oldest first.
fn noise_floors(demo: &Demo) -> Vec<NoiseFloor> {
    demo.read_ledger(async |l| {
        let (start, end) = (Utc::now() - Span::days(1), Utc::now() + Span::days(1));
        let mut floors = Vec::new();
        for stack in l.report_stacks().await.unwrap() {
            floors.extend(l.report_noise_floors(&stack, start, end).await.unwrap());
        }
        floors.sort_by_key(|f| f.id);
        floors
    })
}

/// The judged runs (no warmups) of the newest A/B (not a floor's A/A).
fn newest_ab_runs(demo: &Demo) -> Vec<Run> {
    demo.read_ledger(async |l| {
        let newest = l
            .recent_experiments(u32::MAX)
            .await
            .unwrap()
            .into_iter()
            .find(|e| e.menu_id != MenuId::Remeasure)
            .expect("an A/B was recorded");
        let runs = l.runs(newest.experiment_id).await.unwrap();
        runs.into_iter().filter(|r| r.arm != Arm::Warmup).collect()
    })
}

/// The floor an A/B is judged against: `max_noise_floor` (here 0.95) as
/// the judge holds it, a log ratio.
fn usable(floor: &NoiseFloor) -> bool {
    floor.value < 0.95f64.ln_1p()
}

/// `(menu id, verdict kind, reason)` of every verdict, oldest cycle first.
/// A cycle may hold two: an A/B whose floor it measured holds the floor's
/// A/A beside it.
fn verdicts(demo: &Demo) -> Vec<(String, String, String)> {
    let mut cycles = demo.ledger();
    cycles.reverse();
    verdicts_of(&cycles)
}

/// [`verdicts`] of the given `orchestrator ledger --json` cycles, in order.
fn verdicts_of(cycles: &[serde_json::Value]) -> Vec<(String, String, String)> {
    let s = |x: &serde_json::Value| x.as_str().unwrap_or_default().to_string();
    cycles
        .iter()
        .flat_map(|c| c["verdicts"].as_array().cloned().unwrap_or_default())
        .map(|v| {
            (
                s(&v["menu_id"]),
                s(&v["verdict"]["kind"]),
                s(&v["verdict"]["reason"]),
            )
        })
        .collect()
}

/// The split A/Bs judged against a floor: not called too noisy. The hogs
/// ran through the floor too, so the floor holds their load: candidates
/// are judged on a busy machine. (The absolute rule this replaced,
/// `max_pressure` 0.97, discarded every block here: the hogs keep the CPU
/// stall share at 1.0.)
fn measured_under_hogs(v: &[(String, String, String)]) -> usize {
    v.iter()
        .filter(|(m, k, r)| {
            m == "rebalance_trunk_cache"
                && (k != "inconclusive" || !r.contains("machine too noisy"))
        })
        .count()
}

#[test]
fn a_same_speed_candidate_under_cpu_hogs_is_never_staged() {
    let _heavy = crate::common::heavy();
    // The shipped judge, but for the widest floor it may judge against: a
    // tiny checkpoint's floor under the steady load came out 24-69% wide
    // (log ratios 0.21-0.52, five runs, 2026-12-07; [`steady_load`]), and
    // at the shipped 0.50 some A/Bs would be called too noisy and nothing
    // judged on the busy machine.
    let (_model, demo) = hogged_demo(&[("max_noise_floor = 0.50", "max_noise_floor = 0.99")]);
    let mut log = run_under(steady_load(), &demo, 6, Duration::from_secs(2));
    // A floor wider still is measured again by the next cycle: one more
    // round of cycles, at most, before the test gives up (below).
    if measured_under_hogs(&verdicts(&demo)) == 0 {
        log += &run_under(steady_load(), &demo, 6, Duration::from_secs(2));
    }
    let v = verdicts(&demo);
    let judged: Vec<&(String, String, String)> = v
        .iter()
        .filter(|(m, _, _)| m == "rebalance_trunk_cache")
        .collect();
    assert!(
        !judged.is_empty(),
        "no candidate was measured: {v:?}\n{log}"
    );
    // A single A/B may cross the floor by chance; what must never happen is
    // a staged win. On the replayed traces that is at most 5% an A/B; under
    // these hogs, whose millisecond runs either get a core or wait out a
    // time slice, it was 2 of 6 A/Bs in one run (2026-12-01 22:58 UTC, every
    // verdict counted, floors measured in the cycle under the hogs), so the
    // single-A/B count is printed, not bounded (README, "Known limits").
    let decided_wrongly = judged
        .iter()
        .filter(|(_, k, _)| k == "win" || k == "loss")
        .count();
    let widths: Vec<f64> = noise_floors(&demo).iter().map(|f| f.value).collect();
    eprintln!(
        "same-speed A/Bs decided win or loss: {decided_wrongly} of {}; floors (log ratios): {widths:?}",
        judged.len()
    );
    for (_, kind, reason) in &judged {
        assert!(
            ["within_noise", "inconclusive", "win", "loss"].contains(&kind.as_str()),
            "{kind}: {reason}"
        );
        if kind == "inconclusive" && !reason.is_empty() {
            assert!(reason.contains("machine too noisy"), "{reason}");
        }
    }
    let measured = measured_under_hogs(&v);
    // No win was confirmed, and none staged.
    assert_eq!(confirmed_wins(&demo), 0, "{v:?}");
    assert_eq!(staged(&demo), 0, "{v:?}");
    demo.assert_children_gone();
    // Every floor of both rounds came out wider than max_noise_floor: the
    // judge refused the machine, as it must, but then no candidate was
    // judged on the busy machine, which is what this test is for.
    if measured == 0 {
        crate::skip::skip(
            &format!(
                "every A/B was called too noisy, so none was judged on the busy machine: {v:?}"
            ),
            "run it on a machine with less other work beside it",
        );
    }
}

#[test]
fn a_burst_after_the_floor_is_interference_and_nothing_is_staged() {
    let _heavy = crate::common::heavy();
    let (_model, demo) = hogged_demo(&[
        ("max_discarded_blocks = 8", "max_discarded_blocks = 1"),
        ("floor_pressure_shift = 0.25", "floor_pressure_shift = 1.0"),
        // This test is about the burst, not the floor's width: a tiny
        // checkpoint's floor on a shared machine can be wide.
        ("max_noise_floor = 0.50", "max_noise_floor = 0.95"),
    ]);
    // A steady load of our own ([`steady_load`]), which drowns out the
    // other work on a shared machine in the contention the interference
    // rule reads, and the floor under it. Of the default class it left the
    // floor 0.75-0.96 wide (log ratio) three times running (CI at c5ecff6,
    // 2026-12-07), so the burst could not be judged; the burst's hogs, of
    // the default class, take the cores. A floor the machine spoilt anyway
    // is measured again, twice at most.
    let steady = steady_load();
    std::thread::sleep(Duration::from_secs(2));
    for _ in 0..3 {
        let out = demo.cmd().args(["run", "--cycles", "1"]).output().unwrap();
        let log = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{log}");
        if noise_floors(&demo).iter().any(usable) {
            break;
        }
    }
    // A win found under the steady load is confirmed by the next cycle.
    // Under the burst, a confirmation that measures a floor (its win's
    // gone stale as the load moved, or with `confirmation_new_floor`)
    // takes the burst into that floor and nothing is interference (CI at
    // 01de14f, 2026-12-05). So such a confirmation runs here, under the
    // steady load, first.
    for _ in 0..2 {
        let newest = demo.ledger();
        let unconfirmed_win = newest[..1].iter().any(|c| {
            c["verdicts"].as_array().is_some_and(|vs| {
                vs.iter().any(|v| {
                    v["verdict"]["kind"] == "win"
                        && v["confirmation_of"].is_null()
                        && v["menu_id"] != "remeasure"
                })
            })
        });
        if !unconfirmed_win {
            break;
        }
        let out = demo.cmd().args(["run", "--cycles", "1"]).output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // The tiny checkpoint's runs last milliseconds, and under hogs of the
    // default priority a run either gets a core or waits out a time slice:
    // on a shared 2-core machine its floor came out 117-188% wide in one
    // run of this test in two (2026-12-01), hence the idle steady load.
    // Other work on the machine can still spoil it. The burst cannot be
    // judged without a floor, so that case is a counted skip (a failure in
    // CI), not a pass of the burst rule.
    let floors = noise_floors(&demo);
    assert!(!floors.is_empty(), "three cycles measured no floor");
    if !floors.iter().any(usable) {
        let widths: Vec<f64> = floors.iter().map(|f| f.value).collect();
        return crate::skip::skip(
            &format!(
                "no noise floor under max_noise_floor could be measured on this machine in three tries (log-ratio widths {widths:?}); the burst rule is covered by judge::interference and judge::schedule's unit tests"
            ),
            "run it on a machine with less other work beside it",
        );
    }
    let floor = floors.last().unwrap();
    let f = floor
        .contention
        .unwrap_or_else(|| panic!("the floor recorded no contention (/proc/loadavg): {floor:?}"));
    assert!(
        f >= 1.0,
        "the floor's contention is per core, at least 1: {f}"
    );
    // A confirmation under the steady load above may have staged a real
    // win: the burst must stage nothing more.
    let staged_before = staged(&demo);
    // Then the burst on top of it: enough busy loops to triple the floor's
    // runnable tasks, whatever the other work on the machine does meanwhile
    // (it can ease off by at most what it was).
    let n = (2.0 * f * cores() as f64).ceil() as usize + cores();
    let log = run_under(Hogs::of(n), &demo, 1, Duration::from_secs(1));
    drop(steady);
    // The burst's one cycle: the newest.
    let v = verdicts_of(&demo.ledger()[..1]);
    let ab: Vec<&(String, String, String)> =
        v.iter().filter(|(m, _, _)| m != "remeasure").collect();
    assert_eq!(ab.len(), 1, "{v:?}\n{log}");
    let (menu, kind, reason) = ab[0];
    assert_eq!(kind, "inconclusive", "{menu}: {reason}\n{log}");
    assert!(
        reason.contains("machine too noisy") && reason.contains("under interference"),
        "{reason}"
    );
    assert_eq!(staged(&demo), staged_before, "{v:?}");
    // Every run of the discarded blocks is kept as evidence, marked so, and
    // each says how contended it was: beyond the floor's by the rule.
    let runs = newest_ab_runs(&demo);
    assert!(!runs.is_empty(), "the burst's A/B kept no runs: {v:?}");
    assert!(
        runs.iter().all(|r| r.discarded),
        "every judged run was discarded: {runs:#?}"
    );
    let max = runs
        .iter()
        .map(|r| {
            r.pressure
                .contention
                .unwrap_or_else(|| panic!("a run without its contention: {r:?}"))
        })
        .fold(f64::MIN, f64::max);
    assert!(max > 1.25 * f, "contention {max} against the floor's {f}");
    demo.assert_children_gone();
}
