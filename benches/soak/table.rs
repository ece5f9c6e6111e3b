//! The soak benchmark's results table: overhead, CPU, RSS, ledger growth,
//! throughput, verdict mix and unclosed cycles, from the ledger's cycle costs
//! and the samples taken while the daemon ran.

use std::collections::BTreeMap;
use std::time::Duration;

use orchestrator::ledger::CycleCost;
use orchestrator::vocab::CycleStatus;

use crate::{Args, RssSample, SizeSample, stats};

fn ms(x: Option<f64>) -> String {
    x.map(|v| format!("{:.1} ms", v * 1e3))
        .unwrap_or_else(|| "-".into())
}

/// A size in KB, shown in MB.
fn kb(x: Option<u64>) -> String {
    x.map(|v| format!("{:.1} MB", v as f64 / 1024.0))
        .unwrap_or_else(|| "-".into())
}

fn met(ok: bool) -> &'static str {
    if ok { "met" } else { "NOT met" }
}

pub fn print(
    args: &Args,
    costs: &[CycleCost],
    rss: &[RssSample],
    sizes: &[SizeSample],
    wall: Duration,
) {
    let overheads = Overheads::of(costs);
    let daemon = Daemon::of(costs, rss);
    println!();
    println!(
        "soak: {} cycles (asked {}), fault rate {}, seed {}, bandit proposer, tiny tinyk3 checkpoint",
        costs.len(),
        args.cycles,
        args.fault_rate,
        args.seed
    );
    println!();
    println!("| measure | value | target |");
    println!("|---|---:|---|");
    overhead_rows(&overheads);
    daemon_rows(&overheads, &daemon);
    ledger_rows(costs, sizes, wall);
    mix_rows(costs);
}

/// The orchestrator's own time per cycle, from the ledger's cycle costs (in seconds).
struct Overheads {
    /// Cycle wall minus engine time, over the cycles that measured (ran the
    /// engine at least once): the headline.
    within: Vec<f64>,
    /// The same over every closed cycle.
    within_all: Vec<f64>,
    /// From one cycle's start to the next, minus the first one's engine time.
    start_to_start: Vec<f64>,
    engine: Vec<f64>,
    /// Overhead per engine run, over the cycles that ran the engine.
    per_run: Vec<f64>,
    /// Whole cycles that ran no engine (refused proposals).
    no_runs: Vec<f64>,
    /// Engine runs in all.
    runs: u64,
}

impl Overheads {
    fn of(costs: &[CycleCost]) -> Self {
        // Overhead over the cycles that ran to their end (an `aborted` one was
        // cut short by --max-minutes).
        let closed: Vec<&CycleCost> = costs
            .iter()
            .filter(|c| c.ended_at.is_some() && c.status != CycleStatus::Aborted)
            .collect();
        let within_all: Vec<f64> = closed
            .iter()
            .filter_map(|c| {
                let wall = (c.ended_at? - c.started_at).as_seconds_f64();
                Some(wall - c.engine_s)
            })
            .collect();
        let within: Vec<f64> = closed
            .iter()
            .filter(|c| c.runs > 0)
            .filter_map(|c| {
                let wall = (c.ended_at? - c.started_at).as_seconds_f64();
                Some(wall - c.engine_s)
            })
            .collect();
        let start_to_start: Vec<f64> = costs
            .windows(2)
            .map(|w| (w[1].started_at - w[0].started_at).as_seconds_f64() - w[0].engine_s)
            .collect();
        let engine: Vec<f64> = closed.iter().map(|c| c.engine_s).collect();
        let per_run: Vec<f64> = closed
            .iter()
            .filter(|c| c.runs > 0)
            .filter_map(|c| {
                let wall = (c.ended_at? - c.started_at).as_seconds_f64();
                Some((wall - c.engine_s) / f64::from(c.runs))
            })
            .collect();
        let no_runs: Vec<f64> = closed
            .iter()
            .filter(|c| c.runs == 0)
            .filter_map(|c| Some((c.ended_at? - c.started_at).as_seconds_f64()))
            .collect();
        let runs: u64 = costs.iter().map(|c| u64::from(c.runs)).sum();
        Self {
            within,
            within_all,
            start_to_start,
            engine,
            per_run,
            no_runs,
            runs,
        }
    }
}

/// The daemon process's CPU and memory, from the samples taken while it ran.
struct Daemon {
    /// RSS after the first completed cycle, at the end, and the maximum (KB).
    rss_start: Option<u64>,
    rss_end: Option<u64>,
    rss_max: Option<u64>,
    /// The kernel's high-water mark (VmHWM, KB).
    hwm: Option<u64>,
    /// Mean CPU seconds per cycle over the steady samples.
    cpu_per_cycle: Option<f64>,
    /// CPU seconds of each measuring cycle whose ends fell in different samples.
    cpu_measuring: Vec<f64>,
    /// RSS slope in KB per 1,000 cycles: over all steady samples, over the second half.
    slope_all: Option<f64>,
    slope_late: Option<f64>,
}

impl Daemon {
    fn of(costs: &[CycleCost], rss: &[RssSample]) -> Self {
        // RSS from the first completed cycle on (start-up maps the binary and
        // starts the runtime; that is not growth).
        let steady: Vec<&RssSample> = rss.iter().filter(|s| s.cycles >= 1).collect();
        // The daemon's own CPU per cycle, from the first finished cycle to the
        // last sample: unlike wall time, barely inflated by other load.
        let cpu_per_cycle = match (steady.first(), steady.last()) {
            (Some(a), Some(b)) if b.cycles > a.cycles => {
                Some((b.cpu_s - a.cpu_s) / (b.cycles - a.cycles) as f64)
            }
            _ => None,
        };
        // Per cycle k: the daemon's CPU from the end of cycle k-1 to the end of
        // cycle k (at the first sample that saw each end); `None` when both ends
        // fell between the same two samples.
        let cpu_at = |k: u64| {
            rss.iter()
                .find(|s| s.cycles >= k)
                .map(|s| (s.secs, s.cpu_s))
        };
        let cpu_measuring: Vec<f64> = costs
            .iter()
            .enumerate()
            .filter(|(_, c)| c.runs > 0 && c.status != CycleStatus::Aborted)
            .filter_map(|(i, _)| {
                let k = i as u64 + 1;
                let (a, b) = (cpu_at(k.saturating_sub(1))?, cpu_at(k)?);
                (b.0 > a.0 && k > 1).then_some(b.1 - a.1)
            })
            .collect();
        let slope = |from: u64| {
            let pts: Vec<(f64, f64)> = steady
                .iter()
                .filter(|s| s.cycles >= from)
                .map(|s| (s.cycles as f64, s.rss_kb as f64))
                .collect();
            stats::fit(&pts).map(|l| l.slope * 1000.0)
        };
        let n = costs.len() as u64;
        Self {
            rss_start: steady.first().map(|s| s.rss_kb),
            rss_end: steady.last().map(|s| s.rss_kb),
            rss_max: rss.iter().map(|s| s.rss_kb).max(),
            hwm: rss.iter().map(|s| s.hwm_kb).max(),
            cpu_per_cycle,
            cpu_measuring,
            slope_all: slope(1),
            slope_late: slope(n / 2),
        }
    }
}

/// The overhead rows: within the cycle, start to start, per run, without runs.
fn overhead_rows(o: &Overheads) {
    let p50 = stats::quantile(&o.within, 0.5);
    let p95 = stats::quantile(&o.within, 0.95);
    println!(
        "| overhead per measuring cycle ({} cycles ran the engine), within the cycle: median / p95 / max | {} / {} / {} | < 50 ms: {} |",
        o.within.len(),
        ms(p50),
        ms(p95),
        ms(o.within.iter().copied().reduce(f64::max)),
        met(p50.is_some_and(|m| m < 0.05))
    );
    println!(
        "| overhead per cycle, all cycles: median / p95 / max | {} / {} / {} | |",
        ms(stats::quantile(&o.within_all, 0.5)),
        ms(stats::quantile(&o.within_all, 0.95)),
        ms(o.within_all.iter().copied().reduce(f64::max)),
    );
    println!(
        "| overhead per cycle, all cycles, start to start: median / p95 / max | {} / {} / {} | |",
        ms(stats::quantile(&o.start_to_start, 0.5)),
        ms(stats::quantile(&o.start_to_start, 0.95)),
        ms(o.start_to_start.iter().copied().reduce(f64::max)),
    );
    println!(
        "| overhead per engine run (cycles with runs): median / p95 | {} / {} | |",
        ms(stats::quantile(&o.per_run, 0.5)),
        ms(stats::quantile(&o.per_run, 0.95)),
    );
    println!(
        "| whole cycle without engine runs (refused proposals; {} cycles): median / p95 | {} / {} | |",
        o.no_runs.len(),
        ms(stats::quantile(&o.no_runs, 0.5)),
        ms(stats::quantile(&o.no_runs, 0.95)),
    );
}

/// The daemon's CPU, the engine's time, and the daemon's RSS and its slope.
fn daemon_rows(o: &Overheads, d: &Daemon) {
    println!(
        "| daemon CPU time (user + sys) per cycle: mean over all / median over {} measuring cycles | {} / {} | |",
        d.cpu_measuring.len(),
        ms(d.cpu_per_cycle),
        ms(stats::quantile(&d.cpu_measuring, 0.5)),
    );
    println!(
        "| engine time per cycle: median / p95 ({} runs in all) | {} / {} | |",
        o.runs,
        ms(stats::quantile(&o.engine, 0.5)),
        ms(stats::quantile(&o.engine, 0.95)),
    );
    println!(
        "| daemon RSS: after cycle 1 / end / max (VmHWM) | {} / {} / {} ({}) | < 50 MB: {} |",
        kb(d.rss_start),
        kb(d.rss_end),
        kb(d.rss_max),
        kb(d.hwm),
        met(d.hwm.is_some_and(|h| h < 50 * 1024))
    );
    println!(
        "| RSS slope, KB per 1,000 cycles: all / second half | {} / {} | flat |",
        d.slope_all.map_or("-".into(), |s| format!("{s:+.0}")),
        d.slope_late.map_or("-".into(), |s| format!("{s:+.0}")),
    );
}

/// The ledger's growth per cycle, its final size, and the cycles per hour.
fn ledger_rows(costs: &[CycleCost], sizes: &[SizeSample], wall: Duration) {
    let size_pts: Vec<(f64, f64)> = sizes
        .iter()
        .map(|s| (s.cycles as f64, s.stored as f64))
        .collect();
    match stats::fit(&size_pts) {
        Some(g) => println!(
            "| ledger bytes per cycle (line through {} points), R², largest residual | {:.0} B, {:.5}, {:.1} KB | linear |",
            sizes.len(),
            g.slope,
            g.r2,
            g.max_residual / 1024.0
        ),
        None => println!("| ledger bytes per cycle | too few points | linear |"),
    }
    let final_size = sizes.last().map(|s| s.stored).unwrap_or(0);
    let final_disk = sizes.last().map(|s| s.on_disk).unwrap_or(0);
    println!(
        "| ledger at the end, after checkpoint (file + WAL on disk) | {:.0} KB ({:.0} KB) | |",
        final_size as f64 / 1024.0,
        final_disk as f64 / 1024.0
    );
    let span = match (costs.first(), costs.last().and_then(|c| c.ended_at)) {
        (Some(first), Some(end)) => (end - first.started_at).as_seconds_f64(),
        _ => f64::NAN,
    };
    println!(
        "| cycles per hour (first start to last end; harness wall {:.0} s) | {:.0} | |",
        wall.as_secs_f64(),
        costs.len() as f64 / span * 3600.0
    );
}

/// How the cycles ended, what the judge said, and how many never closed.
fn mix_rows(costs: &[CycleCost]) {
    let mut statuses: BTreeMap<&str, u64> = BTreeMap::new();
    for c in costs {
        *statuses.entry(c.status.as_str()).or_default() += 1;
    }
    let mut verdicts: BTreeMap<&str, u64> = BTreeMap::new();
    for v in costs.iter().flat_map(|c| &c.verdicts) {
        *verdicts.entry(v.as_str()).or_default() += 1;
    }
    println!(
        "| cycle status mix | {} | |",
        statuses
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!(
        "| verdict mix | {} | |",
        verdicts
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let unclosed = costs.iter().filter(|c| c.ended_at.is_none()).count();
    println!(
        "| unclosed cycles | {unclosed} | 0: {} |",
        met(unclosed == 0)
    );
}
