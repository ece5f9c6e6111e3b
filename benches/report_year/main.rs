//! Benchmark: a weekly report from a ledger holding a year of cycles (about
//! 100,000 experiments and 1,000,000 runs, written through the ledger API)
//! must take under a second. Prints the generation time and the median of
//! several report runs; exits 1 if the median is 1 s or more.
//!
//! The generated ledger is cached in the temp dir (or `REPORT_YEAR_DB`) so
//! reruns only measure the report; delete the file to regenerate.
//!
//! `-- --fleet` (issue #18 item 7): a fleet's year instead, 8 stacks of 2
//! classes each running a cycle an hour (see [`fleet`]), on SQLite (cached
//! as above) and, when `ORCH_TEST_PG_URL` is set, on PostgreSQL (written
//! fresh into a throw-away database); times `report --all` and `report
//! --stack host-03` (each stack's reports and the summary, built and
//! rendered as the command does).

mod fleet;

use std::path::PathBuf;
use std::time::{Duration as StdDuration, Instant};

use chrono::{DateTime, Duration, NaiveDate, Utc};
use orchestrator::ledger::{
    CycleOutcome, Interval, Ledger, NewExperiment, NewNoiseFloor, NewObservation, NewProposal,
    NewRun, NewVerdict, RecordedWin, TimingSource, TokenParts, WriteTx,
};
use orchestrator::menu::MenuId;
use orchestrator::report::period::IsoWeek;
use orchestrator::report::{BuildOptions, Period, build, html, markdown};
use orchestrator::vocab::{Arm, Digest, Method, ProposerKind, VerdictKind};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;

const WEEKS: i64 = 52;
const CYCLES_PER_WEEK: i64 = 1_920;
/// Two warmups and four A/B pairs: ten runs per experiment.
const WARMUPS: u32 = 2;
const PAIRS: u32 = 4;
/// Every this many cycles, a win is confirmed and staged (two experiments).
const STAGE_EVERY: i64 = 300;
const REPORT_RUNS: usize = 7;
/// Bump when the fixture's shape changes, so a stale cache is not reused.
const FIXTURE_VERSION: u32 = 2;

fn year_start() -> DateTime<Utc> {
    // Monday 2025-12-01, so the year covers 2026-W30 whole.
    NaiveDate::from_ymd_opt(2025, 12, 1)
        .unwrap()
        .and_hms_opt(0, 0, 0)
        .unwrap()
        .and_utc()
}

fn db_path() -> PathBuf {
    std::env::var_os("REPORT_YEAR_DB").map_or_else(
        || std::env::temp_dir().join(format!("orchestrator-report-year-v{FIXTURE_VERSION}.db")),
        PathBuf::from,
    )
}

struct Counts {
    experiments: u64,
    runs: u64,
}

/// One cycle: observation, proposal, experiment with its runs, verdict; and
/// now and then a confirmation and a stage.
async fn cycle(
    tx: &mut WriteTx,
    rng: &mut StdRng,
    i: i64,
    at: DateTime<Utc>,
    live: &Digest,
    counts: &mut Counts,
) {
    let proposer = if i % 3 == 0 {
        ProposerKind::Bandit
    } else {
        ProposerKind::Model
    };
    let c = tx.open_cycle(at, proposer).await.unwrap();
    tx.insert_observation(&NewObservation {
        cycle_id: c,
        observed_at: at,
        metrics: json!({"seconds_per_token": 1.2, "far_hit_share": 0.1}),
        heat: None,
        live_profile_digest: live.clone(),
        base_profile_digest: live.clone(),
    })
    .await
    .unwrap();
    let menu = MenuId::ALL[(i as usize) % MenuId::ALL.len()];
    let params = json!({"n": i % 97});
    let p = tx
        .insert_proposal(&NewProposal {
            cycle_id: c,
            proposer,
            attempt: 1,
            created_at: at,
            prompt: None,
            raw_answer: None,
            parsed: Some(json!({"menu_id": menu, "parameters": params})),
            rejection: None,
            note: None,
        })
        .await
        .unwrap();
    let staged = i % STAGE_EVERY == 0;
    let (kind, effect) = draw_verdict(rng, staged);
    let mut ids = Vec::new();
    // The staged cycle's two wins, as recorded.
    let mut wins = Vec::new();
    for k in 0..if staged { 2 } else { 1 } {
        let e = tx
            .insert_experiment(&NewExperiment {
                cycle_id: c,
                proposal_id: (k == 0).then_some(p),
                confirmation_of: ids.first().copied(),
                created_at: at + Duration::seconds(k * 60),
                menu_id: menu,
                parameters: params.clone(),
                method: Method::Bench,
                base_profile: "# live\n".into(),
                base_digest: live.clone(),
                candidate_profile: format!("# {menu} {params}\n"),
                candidate_digest: Digest::of(format!("{menu}{params}").as_bytes()),
                planner_notes: None,
            })
            .await
            .unwrap();
        counts.experiments += 1;
        let level = 1.2 * (1.0 + 0.01 * (rng.random::<f64>() - 0.5));
        for order in 0..WARMUPS + 2 * PAIRS {
            let (arm, pair) = arm_at(order);
            let refused = kind == VerdictKind::HashMismatch && arm == Arm::Candidate;
            let spt = match arm {
                _ if refused => None,
                Arm::Candidate => Some(level * effect.exp()),
                _ => Some(level * (1.0 + 0.005 * rng.random::<f64>())),
            };
            tx.insert_run(&NewRun {
                experiment_id: e,
                arm,
                order_index: order,
                pair_index: pair,
                started_at: at + Duration::seconds(i64::from(order) * 10),
                seconds_per_token: spt,
                timing_source: spt.map(|_| TimingSource::Engine),
                tokens: Some(24),
                output_hash: Some("00000000deadbeef".into()),
                exit_code: Some(0),
                duration_s: 10.0,
                stderr_tail: String::new(),
                refused,
                error: None,
                // Every valid run carries its measured parts, as tinyk3's do.
                parts: spt.map_or_else(TokenParts::default, |s| TokenParts {
                    trunk_seconds_per_token: Some(0.3 * s),
                    expert_seconds_per_token: Some(0.62 * s),
                    far_hit_share: Some(0.2 + 0.01 * rng.random::<f64>()),
                    draft_acceptance: (menu == MenuId::StageSpeculative && arm == Arm::Candidate)
                        .then_some(0.7),
                }),
                pressure: Default::default(),
            })
            .await
            .unwrap();
            counts.runs += 1;
        }
        let verdict = verdict_row(kind, effect, at);
        tx.insert_verdict(e, &verdict).await.unwrap();
        ids.push(e);
        wins.extend(RecordedWin::of(e, &verdict));
    }
    if staged {
        tx.insert_stage(&wins[0], &wins[1], at + Duration::minutes(3))
            .await
            .unwrap();
    }
    let outcome = if i % 97 == 0 {
        CycleOutcome::Failed("bench exited 4: an expert failed to load".into())
    } else {
        CycleOutcome::Completed
    };
    tx.close_cycle(c, &outcome, at + Duration::minutes(4))
        .await
        .unwrap();
}

/// The cycle's verdict and its effect (a log ratio): a staged cycle wins,
/// the others draw from a fixed mix of outcomes.
fn draw_verdict(rng: &mut StdRng, staged: bool) -> (VerdictKind, f64) {
    let roll: f64 = rng.random();
    if staged {
        (VerdictKind::Win, -0.05)
    } else if roll < 0.5 {
        (VerdictKind::WithinNoise, (rng.random::<f64>() - 0.5) * 0.02)
    } else if roll < 0.7 {
        (VerdictKind::Loss, 0.03 + rng.random::<f64>() * 0.05)
    } else if roll < 0.8 {
        (VerdictKind::Inconclusive, -0.01)
    } else if roll < 0.9 {
        (VerdictKind::Win, -0.02 - rng.random::<f64>() * 0.05)
    } else {
        (VerdictKind::HashMismatch, 0.0)
    }
}

/// The arm and pair of run `order`: the warmups, then A/B pairs whose order
/// alternates (AB, BA, AB, ...).
fn arm_at(order: u32) -> (Arm, Option<u32>) {
    if order < WARMUPS {
        return (Arm::Warmup, None);
    }
    let j = order - WARMUPS;
    let first_is_baseline = (j / 2) % 2 == 0;
    let baseline = (j % 2 == 0) == first_is_baseline;
    (
        if baseline {
            Arm::Baseline
        } else {
            Arm::Candidate
        },
        Some(j / 2),
    )
}

/// The verdict row of an experiment started `at`; a hash mismatch measured nothing.
fn verdict_row(kind: VerdictKind, effect: f64, at: DateTime<Utc>) -> NewVerdict {
    let measured = kind != VerdictKind::HashMismatch;
    NewVerdict {
        kind,
        decided_at: at + Duration::minutes(2),
        effect: measured.then_some(effect),
        interval: measured.then_some(Interval {
            low: effect - 0.01,
            high: effect + 0.01,
        }),
        noise_floor: measured.then_some(0.01),
        floor_is_bound: false,
        pairs: if measured { PAIRS } else { 0 },
        method: measured.then(|| "bench fixture".to_string()),
        reason: (!measured).then(|| "candidate output hash differs".to_string()),
    }
}

/// A day's noise floor of `stack` (its key in the ledger).
fn floor(stack: &str, live: &Digest, value: f64, at: DateTime<Utc>) -> NewNoiseFloor {
    NewNoiseFloor {
        stack: stack.into(),
        profile_digest: live.clone(),
        value,
        n: 8,
        method: "bench fixture".into(),
        measured_at: at,
        experiment_id: None,
        load1: Some(0.5),
        cpu_pressure: Some(0.02),
        contention: Some(1.0),
    }
}

/// Writes the year, one transaction per week, into `path`.
async fn generate(path: &std::path::Path) -> Counts {
    let ledger = Ledger::open(path).await.unwrap();
    let mut rng = StdRng::seed_from_u64(48);
    let live = Digest::of(b"live");
    let mut counts = Counts {
        experiments: 0,
        runs: 0,
    };
    let step = Duration::seconds(7 * 86_400 / CYCLES_PER_WEEK);
    for w in 0..WEEKS {
        let week_start = year_start() + Duration::weeks(w);
        let mut tx = ledger.begin_write().await.unwrap();
        for d in 0..7 {
            let value = if w < 30 { 0.01 } else { 0.03 } + rng.random::<f64>() * 0.002;
            let at = week_start + Duration::days(d) + Duration::minutes(1);
            tx.insert_noise_floor(&floor("bench", &live, value, at))
                .await
                .unwrap();
        }
        for k in 0..CYCLES_PER_WEEK {
            let i = w * CYCLES_PER_WEEK + k;
            cycle(
                &mut tx,
                &mut rng,
                i,
                week_start + step * (k as i32) + Duration::minutes(2),
                &live,
                &mut counts,
            )
            .await;
        }
        tx.commit().await.unwrap();
    }
    ledger.close().await;
    counts
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    if std::env::args().any(|a| a == "--fleet") {
        fleet::main(&rt);
        return;
    }
    let path = db_path();
    let cached = path.is_file();
    if !cached {
        let partial = path.with_extension("partial.db");
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", partial.display()));
        }
        let t0 = Instant::now();
        let counts = rt.block_on(generate(&partial));
        let took = t0.elapsed();
        std::fs::rename(&partial, &path).unwrap();
        println!(
            "report_year: generated {} experiments and {} runs ({} weeks of {} cycles) through the ledger API in {:.1} s -> {}",
            counts.experiments,
            counts.runs,
            WEEKS,
            CYCLES_PER_WEEK,
            took.as_secs_f64(),
            path.display()
        );
    } else {
        println!(
            "report_year: reusing the cached year ledger {} (delete it to regenerate)",
            path.display()
        );
    }
    let week = IsoWeek::parse("2026-W30").unwrap();
    let now = Utc::now();
    let (times, sizes, projection) = rt.block_on(async {
        let ledger = Ledger::open(&path).await.unwrap();
        let mut times: Vec<StdDuration> = Vec::new();
        let mut sizes = (0, 0, 0, 0);
        let mut projection = (None, 0);
        for _ in 0..REPORT_RUNS {
            let t0 = Instant::now();
            let options = BuildOptions::new(Period::week(week), "bench", 1.0, now);
            let report = build(&ledger, &options).await.unwrap();
            let md = markdown::render(&report);
            let page = html::render(&report);
            times.push(t0.elapsed());
            sizes = (
                report.cycles.total,
                report.speed.len(),
                md.len(),
                page.len(),
            );
            let p = &report.projection;
            projection = (
                p.projected,
                p.levers.iter().filter(|l| !l.factors.is_empty()).count(),
            );
        }
        ledger.close().await;
        (times, sizes, projection)
    });
    // The new columns are populated, so the projection's queries ran.
    let (projected, applied) = projection;
    println!(
        "report_year: projection {} s/token with {applied} lever(s) applied from measured parts",
        projected.map_or("-".into(), |v| format!("{v:.4}"))
    );
    assert!(
        projected.is_some() && applied > 0,
        "the year fixture must exercise the projection"
    );
    let mut sorted = times.clone();
    sorted.sort();
    let median = sorted[sorted.len() / 2];
    println!(
        "report_year: weekly report {week} ({} cycles, {} speed points; markdown {} B, html {} B): median {:.1} ms over {} runs (min {:.1} ms, max {:.1} ms)",
        sizes.0,
        sizes.1,
        sizes.2,
        sizes.3,
        median.as_secs_f64() * 1e3,
        times.len(),
        sorted[0].as_secs_f64() * 1e3,
        sorted[sorted.len() - 1].as_secs_f64() * 1e3
    );
    if median >= StdDuration::from_secs(1) {
        eprintln!("report_year: FAILED: the median weekly report took 1 s or more");
        std::process::exit(1);
    }
}
