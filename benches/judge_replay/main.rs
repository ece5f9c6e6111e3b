//! Replay benchmark of the judgement on real A/A traces.
//!
//! `cargo bench --bench judge_replay` replays every trace in
//! `benches/traces/`; `cargo bench --bench judge_replay -- --trace FILE...`
//! replays yours (record one with `orchestrator trace --runs 600 --out
//! FILE`). Each decision is the daemon's whole judging path run over a
//! circular block bootstrap of the trace ([`replay`]): the A/B judged
//! against the bound first and the floor measured as the daemon measures it
//! when the bound cannot decide, warmups, the alternating block order,
//! blocks discarded and re-run, the sequential test, and a win confirmed by
//! a second A/B (on the first one's floor while it is valid, or with
//! `confirmation_new_floor` on one measured after the win, as the shipped
//! config says), with a true effect injected into the candidate's runs.
//!
//! It prints, per trace, the verdict rates with Wilson 95% intervals, single
//! A/B and confirmed, for A/A candidates (one floor per A/B, and one floor
//! shared by five A/Bs), for candidates ×0.3, ×0.8, ×0.9, ×1.1, ×1.25 and ±2
//! floors, and the runs per decision, floor runs included; then the
//! cheapest fixed-sample protocol that meets the same targets on the same
//! traces. It exits 1 when the shipped policy misses a target on any trace,
//! naming the trace and the target.
//!
//! `JUDGE_REPLAY_TRIALS` (default 2000 per cell) and `JUDGE_REPLAY_SEED`
//! (default 20261201) set the sampling; `JUDGE_REPLAY_GRID=1` also prints
//! the grid of sequential policies the default was chosen from.

mod cost;
mod replay;
mod synthetic;
mod table;
mod trace;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use orchestrator::judge::{Confidence, Policy};
use replay::{FloorUse, Judge, Stream};
use table::{Cell, Targets};
use trace::Trace;

/// Warmups per arm, as the shipped config (`[measure] warmup_runs`).
const WARMUPS: usize = 1;

/// The effects replayed, as a label and the candidate's log ratio given
/// the trace's true floor `f`.
fn effects(f: f64) -> Vec<(String, f64)> {
    vec![
        ("A/A".into(), 0.0),
        // A big win, as the shoot-out's fast profiles are against its slow
        // start: decided against the bound with no floor (issue #16).
        ("×0.3".into(), 0.3f64.ln()),
        ("×0.8".into(), 0.8f64.ln()),
        ("×0.9".into(), 0.9f64.ln()),
        ("×1.1".into(), 1.1f64.ln()),
        ("×1.25".into(), 1.25f64.ln()),
        ("−2F".into(), -2.0 * f),
        ("+2F".into(), 2.0 * f),
    ]
}

/// The policy the daemon ships: `config.toml`'s, as the config builds it.
fn shipped() -> Policy {
    orchestrator::config::Config::load(Path::new("config.toml"))
        .expect("config.toml loads (run from the repository root)")
        .policy
}

fn env_number<T: std::str::FromStr>(name: &str) -> Option<T> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

fn trace_paths() -> Result<Vec<PathBuf>, String> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut paths = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--trace" => {
                for p in it.by_ref() {
                    if p.starts_with("--") {
                        break;
                    }
                    paths.push(PathBuf::from(p));
                }
            }
            "--bench" => {}
            other if other.starts_with("--") => {
                return Err(format!(
                    "unknown argument {other}; usage: -- [--trace FILE...]"
                ));
            }
            other => paths.push(PathBuf::from(other)),
        }
    }
    if paths.is_empty() {
        let mut found: Vec<PathBuf> = std::fs::read_dir("benches/traces")
            .map_err(|e| format!("benches/traces: {e}; run from the repository root"))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "csv"))
            .collect();
        found.sort();
        paths = found;
    }
    Ok(paths)
}

/// Replays `trials` decisions of every effect on one trace.
fn cells(trace: &Trace, judge: Judge, policy: Policy, trials: usize, seed: u64) -> Vec<Cell> {
    let f = replay::true_floor(trace);
    let mut out = Vec::new();
    let scenarios = [
        ("", FloorUse::Each),
        (" (floor shared by 5)", FloorUse::Shared(5)),
    ];
    for (e, (label, theta)) in effects(f).into_iter().enumerate() {
        for (s, (suffix, floors)) in scenarios.iter().enumerate() {
            // The shared floor matters for the false-win rate; the other
            // effects are replayed with a floor per A/B only.
            if s == 1 && theta != 0.0 {
                continue;
            }
            let mut cell = Cell::new(format!("{label}{suffix}"), theta);
            let per = match floors {
                FloorUse::Each => 1,
                FloorUse::Shared(k) => *k,
            };
            for t in 0..trials.div_ceil(per) {
                let stream_seed = seed
                    ^ (e as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
                    ^ (s as u64).wrapping_mul(0xBF58_476D_1CE4_E5B9)
                    ^ (t as u64).wrapping_mul(0x94D0_49BB_1331_11EB);
                let mut stream = Stream::new(trace, stream_seed);
                for o in replay::replay(&mut stream, judge, policy, WARMUPS, theta, *floors) {
                    cell.add(&o);
                }
            }
            out.push(cell);
        }
    }
    out
}

/// The fixed-sample protocols searched for the cheapest that meets the
/// targets: our own decision rule at a fixed size, and the autotune habit.
fn fixed_grid() -> Vec<Judge> {
    let mut g = Vec::new();
    for alpha in [0.05, 0.2, 0.5] {
        for pairs in (4..=40).step_by(4) {
            g.push(Judge::FixedPaired { pairs, alpha });
        }
    }
    for runs in (3..=31).step_by(2) {
        g.push(Judge::MedianOf { runs });
    }
    g
}

/// Every trace's cells for one judge, in parallel over the traces.
fn all_cells(
    traces: &[Trace],
    judge: Judge,
    policy: Policy,
    trials: usize,
    seed: u64,
) -> Vec<Vec<Cell>> {
    std::thread::scope(|s| {
        let handles: Vec<_> = traces
            .iter()
            .map(|t| s.spawn(move || cells(t, judge, policy, trials, seed)))
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("replay thread"))
            .collect()
    })
}

fn main() -> ExitCode {
    let paths = match trace_paths() {
        Ok(p) if !p.is_empty() => p,
        Ok(_) => {
            eprintln!("no traces: put CSV files in benches/traces/ or pass -- --trace FILE...");
            return ExitCode::from(2);
        }
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let mut traces = Vec::new();
    for p in &paths {
        match Trace::load(p) {
            Ok(t) => traces.push(t),
            Err(e) => {
                eprintln!("{e}");
                return ExitCode::from(2);
            }
        }
    }
    let trials: usize = env_number("JUDGE_REPLAY_TRIALS").unwrap_or(2000);
    let seed: u64 = env_number("JUDGE_REPLAY_SEED").unwrap_or(20_261_201);
    let real = traces.len();
    traces.push(synthetic::trace(seed, 20_000));
    let policy = shipped();
    let targets = Targets::default();
    let started = std::time::Instant::now();

    println!("## Judge replay on real A/A traces\n");
    println!(
        "{trials} decisions per cell, seed {seed}, circular block bootstrap of {} runs, {} warmup per arm.\n",
        replay::BLOCK,
        WARMUPS
    );
    table::traces(&traces, policy.max_contention_rise);

    let ours = Judge::Ours(policy);
    let results = all_cells(&traces, ours, policy, trials, seed);
    let mut missed = Vec::new();
    for (i, (trace, cells)) in traces.iter().zip(&results).enumerate() {
        table::cells(trace, &ours.label(), cells);
        let misses = targets.check(trace, policy, cells);
        if i < real {
            missed.extend(misses);
        } else {
            for m in misses {
                println!("(simulation, not a target) missed: {m}\n");
            }
        }
    }

    // A trace noisier than max_noise_floor is refused as too noisy, as it
    // must be; what the judge would have done there without the limit:
    for trace in traces[..real].iter() {
        let floor = replay::true_floor(trace);
        let busy = table::contended_block_share(trace, policy.max_contention_rise) > 0.5;
        if busy || policy.max_floor.is_some_and(|m| floor > m.get()) {
            let mut lifted = policy;
            lifted.max_floor = None;
            lifted.max_contention_rise = None;
            let cells = cells(trace, Judge::Ours(lifted), lifted, trials / 2, seed ^ 3);
            table::cells(
                trace,
                &format!(
                    "too noisy for the daemon (noise {:.1}%, {:.0}% of blocks contended beyond max_contention_rise): it refuses to judge there; this is the judge with both limits lifted, for the record",
                    100.0 * floor.exp_m1(),
                    100.0 * table::contended_block_share(trace, policy.max_contention_rise)
                ),
                &cells,
            );
        }
    }

    if std::env::var_os("JUDGE_REPLAY_GRID").is_some() {
        println!("### Grid of sequential policies\n");
        println!(
            "| policy | runs per decision (A/B runs) | meets targets | worst confirmed false win | worst single false win | worst false loss | worst power |"
        );
        println!("|---|---|---|---|---|---|---|");
        for conf in [0.1, 0.2, 0.3, 0.5] {
            for (min, max) in [(4, 8), (4, 12), (4, 16), (6, 16)] {
                for fp in [12, 20, 30] {
                    let mut p = Policy::new(
                        Confidence::try_from(conf).expect("valid"),
                        min,
                        max,
                        policy.min_floor,
                    )
                    .expect("valid");
                    p.floor_pairs = fp;
                    p.max_floor = policy.max_floor;
                    p.max_contention_rise = policy.max_contention_rise;
                    p.max_discarded_blocks = policy.max_discarded_blocks;
                    let r = all_cells(&traces[..real], Judge::Ours(p), p, trials / 2, seed ^ 1);
                    table::grid_row(
                        &Judge::Ours(p).label(),
                        &r,
                        &targets,
                        &traces[..real],
                        policy,
                    );
                }
            }
        }
        println!();
    }

    // The comparator: the cheapest fixed protocol meeting the same targets,
    // over all real traces and on each by itself.
    let grid = fixed_grid()
        .into_iter()
        .map(|judge| {
            let r = all_cells(&traces[..real], judge, policy, trials / 2, seed ^ 2);
            (judge, r)
        })
        .collect();
    let fixed = cost::Fixed { grid };
    if std::env::var_os("JUDGE_REPLAY_FIXED").is_some() {
        for (judge, r) in &fixed.grid {
            for (t, c) in traces[..real].iter().zip(r) {
                table::grid_row(
                    &format!("{} on {}", judge.label(), t.name),
                    std::slice::from_ref(c),
                    &targets,
                    std::slice::from_ref(t),
                    policy,
                );
            }
        }
    }
    missed.extend(cost::report(
        &traces[..real],
        &results[..real],
        &fixed,
        &targets,
        policy,
    ));
    println!("### Runs per decision at each injected effect\n");
    println!(
        "All runs with a floor per A/B, and in parentheses the A/B runs alone (first A/B and, for a win, its confirmation).\n"
    );
    table::cost_by_effect(&traces, &results);
    println!("Replayed in {:.0} s.\n", started.elapsed().as_secs_f64());
    if missed.is_empty() {
        println!("Every target is met on every trace.");
        ExitCode::SUCCESS
    } else {
        for m in &missed {
            println!("MISSED: {m}");
        }
        ExitCode::FAILURE
    }
}
