//! Benchmark (issue #18 item 7): how many cycles per hour one ledger
//! sustains with N daemons writing. Each simulated daemon is a tokio task
//! with its own ledger handle (its own connection pool, scoped to its own
//! stack, as a daemon on its own host) that writes the rows of real cycles,
//! one auto-committed write per row as the daemon's cycle does: open the
//! cycle, the observation, the proposal, the experiment, 20 runs, the
//! verdict, close; every tenth cycle also a confirming experiment with its
//! 20 runs and verdict, and the stage. Nothing is measured in between: the
//! daemons write as fast as the database takes it, for a fixed wall time.
//!
//! For N = 1, 2, 4, 8 on PostgreSQL (a throw-away database per trial on the
//! server of `ORCH_TEST_PG_URL`, password in `ORCH_TEST_PG_PASSWORD`; start
//! one with `eval "$(bash scripts/postgres.sh start)"`) and on SQLite (a
//! fresh WAL file per trial, for comparison), it prints the cycles per hour
//! sustained (the median of the repeats) and the p50/p99 of one cycle's
//! ledger write time (over every cycle of the repeats). The machine is
//! shared and noisy: quote medians and ratios.
//!
//! `FLEET_BENCH_SECONDS` (default 5) sets each trial's wall time,
//! `FLEET_BENCH_REPEATS` (default 3) the repeats.

use std::str::FromStr;
use std::time::{Duration as StdDuration, Instant};

use chrono::{Duration, Utc};
use orchestrator::ledger::{
    CycleOutcome, DEFAULT_BUSY_TIMEOUT, Interval, Ledger, NewExperiment, NewObservation,
    NewProposal, NewRun, NewVerdict, PostgresTarget, RecordedWin, StackScope, TimingSource,
    TokenParts,
};
use orchestrator::menu::MenuId;
use orchestrator::vocab::{Arm, Digest, Method, ProposerKind, VerdictKind};
use serde_json::json;
use sqlx::Connection;
use sqlx::postgres::{PgConnectOptions, PgConnection};

const FLEET_SIZES: [usize; 4] = [1, 2, 4, 8];
const RUNS_PER_EXPERIMENT: u32 = 20;
/// Every this many cycles a daemon confirms a win and stages it.
const STAGE_EVERY: u64 = 10;
const PG_URL_VAR: &str = "ORCH_TEST_PG_URL";
const PG_PASSWORD_VAR: &str = "ORCH_TEST_PG_PASSWORD";

fn env_or<T: FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// One experiment with its runs and verdict, as the cycle writes them.
async fn experiment(
    ledger: &Ledger,
    cycle_id: orchestrator::ledger::CycleId,
    proposal: Option<orchestrator::ledger::ProposalId>,
    confirmation_of: Option<orchestrator::ledger::ExperimentId>,
    n: u64,
    kind: VerdictKind,
) -> (orchestrator::ledger::ExperimentId, NewVerdict) {
    let menu = MenuId::ALL[(n as usize) % MenuId::ALL.len()];
    let params = json!({"n": n % 97});
    let now = Utc::now();
    let e = ledger
        .insert_experiment(&NewExperiment {
            cycle_id,
            proposal_id: proposal,
            confirmation_of,
            created_at: now,
            menu_id: menu,
            parameters: params.clone(),
            method: Method::Bench,
            base_profile: "# live\n".into(),
            base_digest: Digest::of(b"live"),
            candidate_profile: format!("# {menu} {params}\n"),
            candidate_digest: Digest::of(format!("{menu}{params}").as_bytes()),
            planner_notes: None,
        })
        .await
        .unwrap();
    for order in 0..RUNS_PER_EXPERIMENT {
        // Two warmups, then alternating A/B pairs.
        let (arm, pair) = match order {
            0 | 1 => (Arm::Warmup, None),
            o if (o / 2) % 2 == 0 => (Arm::Baseline, Some((o - 2) / 2)),
            o => (Arm::Candidate, Some((o - 2) / 2)),
        };
        let spt = 1.2 + f64::from(order % 3) * 0.001;
        ledger
            .insert_run(&NewRun {
                experiment_id: e,
                arm,
                order_index: order,
                pair_index: pair,
                started_at: now + Duration::milliseconds(i64::from(order)),
                seconds_per_token: Some(spt),
                timing_source: Some(TimingSource::Engine),
                tokens: Some(24),
                output_hash: Some("00000000deadbeef".into()),
                exit_code: Some(0),
                duration_s: 10.0,
                stderr_tail: String::new(),
                refused: false,
                error: None,
                parts: TokenParts {
                    trunk_seconds_per_token: Some(0.3 * spt),
                    expert_seconds_per_token: Some(0.62 * spt),
                    far_hit_share: Some(0.2),
                    draft_acceptance: None,
                },
                pressure: Default::default(),
            })
            .await
            .unwrap();
    }
    let effect = if kind == VerdictKind::Win {
        -0.05
    } else {
        0.002
    };
    let verdict = NewVerdict {
        kind,
        decided_at: Utc::now(),
        effect: Some(effect),
        interval: Some(Interval {
            low: effect - 0.01,
            high: effect + 0.01,
        }),
        noise_floor: Some(0.01),
        floor_is_bound: false,
        pairs: (RUNS_PER_EXPERIMENT - 2) / 2,
        method: Some("fleet bench".into()),
        reason: None,
    };
    ledger.insert_verdict(e, &verdict).await.unwrap();
    (e, verdict)
}

/// One cycle's ledger writes; `n` is the daemon's cycle number.
async fn cycle(ledger: &Ledger, n: u64) {
    let now = Utc::now();
    let c = ledger.open_cycle(now, ProposerKind::Bandit).await.unwrap();
    ledger
        .insert_observation(&NewObservation {
            cycle_id: c,
            observed_at: now,
            metrics: json!({"seconds_per_token": 1.2, "far_hit_share": 0.1}),
            heat: None,
            live_profile_digest: Digest::of(b"live"),
            base_profile_digest: Digest::of(b"live"),
        })
        .await
        .unwrap();
    let menu = MenuId::ALL[(n as usize) % MenuId::ALL.len()];
    let p = ledger
        .insert_proposal(&NewProposal {
            cycle_id: c,
            proposer: ProposerKind::Bandit,
            attempt: 1,
            created_at: now,
            prompt: None,
            raw_answer: None,
            parsed: Some(json!({"menu_id": menu, "parameters": {"n": n % 97}})),
            rejection: None,
            note: None,
        })
        .await
        .unwrap();
    let staged = n % STAGE_EVERY == 0;
    let kind = if staged {
        VerdictKind::Win
    } else {
        VerdictKind::WithinNoise
    };
    let (first, won) = experiment(ledger, c, Some(p), None, n, kind).await;
    if staged {
        let (second, confirmed) =
            experiment(ledger, c, None, Some(first), n, VerdictKind::Win).await;
        ledger
            .insert_stage(
                &RecordedWin::of(first, &won).unwrap(),
                &RecordedWin::of(second, &confirmed).unwrap(),
                Utc::now(),
            )
            .await
            .unwrap();
    }
    ledger
        .close_cycle(c, &CycleOutcome::Completed, Utc::now())
        .await
        .unwrap();
}

/// Where one trial's ledger lives.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Backend {
    Postgres,
    Sqlite,
}

impl Backend {
    fn name(self) -> &'static str {
        match self {
            Backend::Postgres => "PostgreSQL",
            Backend::Sqlite => "SQLite",
        }
    }
}

fn db_name(k: usize) -> String {
    format!("fleet_bench_{}_{k}", std::process::id())
}

/// Runs one statement on the test server's own database.
async fn pg_admin(sql: &str) {
    let url = std::env::var(PG_URL_VAR).unwrap();
    let mut admin = PgConnectOptions::from_str(&url).unwrap();
    if let Ok(p) = std::env::var(PG_PASSWORD_VAR) {
        admin = admin.password(&p);
    }
    let mut admin = PgConnection::connect_with(&admin).await.unwrap();
    sqlx::query(sql).execute(&mut admin).await.unwrap();
    admin.close().await.unwrap();
}

/// A fresh, empty ledger for one trial, and how to open more handles on it.
enum Trial {
    Postgres(PostgresTarget),
    Sqlite(tempfile::TempDir),
}

impl Trial {
    async fn new(backend: Backend, k: usize) -> Trial {
        match backend {
            Backend::Sqlite => {
                let dir = tempfile::tempdir().unwrap();
                // Migrate once, so the daemons start on a ready ledger.
                Ledger::open(&dir.path().join("fleet.db"))
                    .await
                    .unwrap()
                    .close()
                    .await;
                Trial::Sqlite(dir)
            }
            Backend::Postgres => {
                let name = db_name(k);
                pg_admin(&format!("CREATE DATABASE {name}")).await;
                let url = std::env::var(PG_URL_VAR).unwrap();
                let (server, _) = url.rsplit_once('/').unwrap();
                let target =
                    PostgresTarget::new(&format!("{server}/{name}"), Some(PG_PASSWORD_VAR.into()))
                        .unwrap();
                target
                    .open(DEFAULT_BUSY_TIMEOUT)
                    .await
                    .unwrap()
                    .close()
                    .await;
                Trial::Postgres(target)
            }
        }
    }

    /// Drops a PostgreSQL trial's database (a SQLite one goes with its dir).
    async fn finish(self, k: usize) {
        if let Trial::Postgres(_) = self {
            pg_admin(&format!("DROP DATABASE {}", db_name(k))).await;
        }
    }

    async fn open(&self) -> Ledger {
        match self {
            Trial::Postgres(t) => t.open(DEFAULT_BUSY_TIMEOUT).await.unwrap(),
            Trial::Sqlite(dir) => Ledger::open(&dir.path().join("fleet.db")).await.unwrap(),
        }
    }
}

/// What one trial measured.
struct Outcome {
    cycles: u64,
    elapsed: StdDuration,
    /// One cycle's write time, per cycle.
    cycle_times: Vec<StdDuration>,
}

/// N daemons writing cycles for `wall`.
async fn trial(backend: Backend, n: usize, k: usize, wall: StdDuration) -> Outcome {
    let t = Trial::new(backend, k).await;
    let mut daemons = Vec::with_capacity(n);
    for d in 0..n {
        daemons.push(t.open().await.scoped(StackScope {
            name: format!("host-{d:02}"),
            class: Some(if d % 2 == 0 { "spark" } else { "desk" }.into()),
        }));
    }
    let start = Instant::now();
    let deadline = start + wall;
    let tasks: Vec<_> = daemons
        .into_iter()
        .map(|ledger| {
            tokio::spawn(async move {
                let mut times = Vec::new();
                let mut i = 0;
                while Instant::now() < deadline {
                    let t0 = Instant::now();
                    cycle(&ledger, i).await;
                    times.push(t0.elapsed());
                    i += 1;
                }
                ledger.close().await;
                times
            })
        })
        .collect();
    let mut cycle_times = Vec::new();
    for task in tasks {
        cycle_times.extend(task.await.unwrap());
    }
    // Cycles that started before the deadline finish after it: count the
    // time they took.
    let elapsed = start.elapsed();
    t.finish(k).await;
    Outcome {
        cycles: cycle_times.len() as u64,
        elapsed,
        cycle_times,
    }
}

fn percentile(sorted: &[StdDuration], p: f64) -> StdDuration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn main() {
    let wall = StdDuration::from_secs_f64(env_or("FLEET_BENCH_SECONDS", 5.0));
    let repeats: usize = env_or("FLEET_BENCH_REPEATS", 3);
    let mut backends = Vec::new();
    if std::env::var(PG_URL_VAR).is_ok() {
        backends.push(Backend::Postgres);
    } else {
        eprintln!(
            "fleet_ledger: {PG_URL_VAR} is not set, so PostgreSQL is skipped: start a throw-away \
             server with `eval \"$(bash scripts/postgres.sh start)\"` (it sets {PG_URL_VAR} and \
             {PG_PASSWORD_VAR}), run again, then `bash scripts/postgres.sh stop \"$ORCH_TEST_PG_DIR\"`"
        );
    }
    backends.push(Backend::Sqlite);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    println!(
        "fleet_ledger: {RUNS_PER_EXPERIMENT} runs per experiment, a stage every {STAGE_EVERY} cycles, \
         {:.0} s per trial, {repeats} repeats; cycles/hour is the median of the repeats",
        wall.as_secs_f64()
    );
    let mut k = 0;
    for backend in backends {
        let mut single = None;
        for n in FLEET_SIZES {
            let mut rates = Vec::new();
            let mut times = Vec::new();
            for _ in 0..repeats {
                let o = rt.block_on(trial(backend, n, k, wall));
                k += 1;
                rates.push(o.cycles as f64 * 3600.0 / o.elapsed.as_secs_f64());
                times.extend(o.cycle_times);
            }
            rates.sort_by(f64::total_cmp);
            times.sort();
            let rate = rates[rates.len() / 2];
            let base = *single.get_or_insert(rate);
            println!(
                "fleet_ledger: {:<10} N={n}: {:>9.0} cycles/hour (x{:.2} of N=1; repeats {}), \
                 cycle write p50 {:.1} ms, p99 {:.1} ms over {} cycles",
                backend.name(),
                rate,
                rate / base,
                rates
                    .iter()
                    .map(|r| format!("{r:.0}"))
                    .collect::<Vec<_>>()
                    .join(" "),
                percentile(&times, 0.5).as_secs_f64() * 1e3,
                percentile(&times, 0.99).as_secs_f64() * 1e3,
                times.len()
            );
        }
    }
}
