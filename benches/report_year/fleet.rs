//! `report_year -- --fleet`: the fleet report's time on a fleet's year of
//! ledger. Eight stacks (`host-00` to `host-07`, classes `spark` and `desk`
//! alternating), each a scoped ledger handle running one cycle an hour for
//! 52 weeks (the single-stack year's cycle, a tenth of its rate per host),
//! written through the ledger API one transaction per stack-week. Times
//! `report --all` and `report --stack host-03` for 2026-W30: selecting the
//! stacks, building each one's report and the summary, and rendering both
//! Markdown and HTML, as the command does. Prints medians of several runs.

use std::path::Path;
use std::str::FromStr;
use std::time::{Duration as StdDuration, Instant};

use chrono::{Duration, Utc};
use orchestrator::ledger::{DEFAULT_BUSY_TIMEOUT, Ledger, PostgresTarget, StackScope};
use orchestrator::report::fleet::{self, Selection};
use orchestrator::report::period::IsoWeek;
use orchestrator::report::redact::Redactor;
use orchestrator::report::{Period, html};
use orchestrator::vocab::Digest;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sqlx::Connection;
use sqlx::postgres::{PgConnectOptions, PgConnection};

use super::{Counts, WEEKS, cycle, floor, year_start};

const STACKS: usize = 8;
const CYCLES_PER_STACK_WEEK: i64 = 168;
const REPORT_RUNS: usize = 5;
/// Bump when the fleet fixture's shape changes.
const FLEET_VERSION: u32 = 1;
const PG_URL_VAR: &str = "ORCH_TEST_PG_URL";
const PG_PASSWORD_VAR: &str = "ORCH_TEST_PG_PASSWORD";

fn scope(s: usize) -> StackScope {
    StackScope {
        name: format!("host-{s:02}"),
        class: Some(if s % 2 == 0 { "spark" } else { "desk" }.into()),
    }
}

/// Writes the fleet's year.
async fn generate(ledger: &Ledger) -> Counts {
    let mut rng = StdRng::seed_from_u64(18);
    let live = Digest::of(b"live");
    let mut counts = Counts {
        experiments: 0,
        runs: 0,
    };
    let step = Duration::seconds(7 * 86_400 / CYCLES_PER_STACK_WEEK);
    for w in 0..WEEKS {
        let week_start = year_start() + Duration::weeks(w);
        for s in 0..STACKS {
            let scope = scope(s);
            let mut tx = ledger
                .clone()
                .scoped(scope.clone())
                .begin_write()
                .await
                .unwrap();
            for d in 0..7 {
                let value = 0.01 + rng.random::<f64>() * 0.002;
                let at = week_start + Duration::days(d) + Duration::minutes(1);
                let key = format!("{}/bench", scope.name);
                tx.insert_noise_floor(&floor(&key, &live, value, at))
                    .await
                    .unwrap();
            }
            for k in 0..CYCLES_PER_STACK_WEEK {
                // Hosts start their cycles a few minutes apart.
                let at = week_start + step * (k as i32) + Duration::minutes(2 + 5 * s as i64);
                cycle(
                    &mut tx,
                    &mut rng,
                    w * CYCLES_PER_STACK_WEEK + k,
                    at,
                    &live,
                    &mut counts,
                )
                .await;
            }
            tx.commit().await.unwrap();
        }
    }
    counts
}

/// Times `selection`'s report, built and rendered both ways.
async fn time(ledger: &Ledger, selection: &Selection) -> (Vec<StdDuration>, usize, u32) {
    let week = IsoWeek::parse("2026-W30").unwrap();
    // The config's own stack: one of the fleet.
    let own = scope(0);
    let mut times = Vec::new();
    let mut shape = (0, 0);
    for _ in 0..REPORT_RUNS {
        let t0 = Instant::now();
        let stacks = fleet::select(ledger, &own, selection).await.unwrap();
        let f = fleet::build_fleet(
            ledger,
            &stacks,
            Period::week(week),
            1.0,
            Utc::now(),
            &Redactor::default(),
        )
        .await
        .unwrap();
        let md = fleet::render_markdown(&f);
        let page = html::render_fleet(&f);
        times.push(t0.elapsed());
        assert!(md.contains("Fleet summary") && page.contains("fleet-summary"));
        shape = (f.reports.len(), f.total.cycles);
    }
    times.sort();
    (times, shape.0, shape.1)
}

fn ms(d: StdDuration) -> f64 {
    d.as_secs_f64() * 1e3
}

async fn measure(backend: &str, ledger: &Ledger) {
    for (what, selection) in [
        ("report --all", Selection::All),
        ("report --stack host-03", Selection::Stack("host-03".into())),
    ] {
        let (times, stacks, cycles) = time(ledger, &selection).await;
        println!(
            "report_year --fleet: {backend:<10} {what:<22} 2026-W30 ({stacks} stack report(s), {cycles} cycles): median {:.1} ms over {} runs (min {:.1} ms, max {:.1} ms)",
            ms(times[times.len() / 2]),
            times.len(),
            ms(times[0]),
            ms(times[times.len() - 1])
        );
    }
}

fn report_generated(backend: &str, counts: &Counts, took: StdDuration) {
    println!(
        "report_year --fleet: {backend}: generated {} experiments and {} runs ({STACKS} stacks x {WEEKS} weeks x {CYCLES_PER_STACK_WEEK} cycles) through the ledger API in {:.1} s",
        counts.experiments,
        counts.runs,
        took.as_secs_f64()
    );
}

async fn sqlite(path: &Path) {
    if !path.is_file() {
        let partial = path.with_extension("partial.db");
        for suffix in ["", "-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{suffix}", partial.display()));
        }
        let ledger = Ledger::open(&partial).await.unwrap();
        let t0 = Instant::now();
        let counts = generate(&ledger).await;
        report_generated("SQLite", &counts, t0.elapsed());
        ledger.close().await;
        std::fs::rename(&partial, path).unwrap();
    } else {
        println!(
            "report_year --fleet: reusing the cached fleet year ledger {} (delete it to regenerate)",
            path.display()
        );
    }
    let ledger = Ledger::open(path).await.unwrap();
    measure("SQLite", &ledger).await;
    ledger.close().await;
}

/// Runs one statement on the test server's own database.
async fn pg_admin(url: &str, sql: &str) {
    let mut admin = PgConnectOptions::from_str(url).unwrap();
    if let Ok(p) = std::env::var(PG_PASSWORD_VAR) {
        admin = admin.password(&p);
    }
    let mut admin = PgConnection::connect_with(&admin).await.unwrap();
    sqlx::query(sql).execute(&mut admin).await.unwrap();
    admin.close().await.unwrap();
}

async fn postgres(url: &str) {
    let name = format!("report_year_fleet_{}", std::process::id());
    pg_admin(url, &format!("CREATE DATABASE {name}")).await;
    let (server, _) = url.rsplit_once('/').unwrap();
    let target =
        PostgresTarget::new(&format!("{server}/{name}"), Some(PG_PASSWORD_VAR.into())).unwrap();
    let ledger = target.open(DEFAULT_BUSY_TIMEOUT).await.unwrap();
    let t0 = Instant::now();
    let counts = generate(&ledger).await;
    report_generated("PostgreSQL", &counts, t0.elapsed());
    measure("PostgreSQL", &ledger).await;
    ledger.close().await;
    pg_admin(url, &format!("DROP DATABASE {name}")).await;
}

pub fn main(rt: &tokio::runtime::Runtime) {
    let path = std::env::var_os("REPORT_YEAR_FLEET_DB").map_or_else(
        || {
            std::env::temp_dir().join(format!(
                "orchestrator-report-year-fleet-v{FLEET_VERSION}.db"
            ))
        },
        std::path::PathBuf::from,
    );
    rt.block_on(sqlite(&path));
    match std::env::var(PG_URL_VAR) {
        Ok(url) => rt.block_on(postgres(&url)),
        Err(_) => eprintln!(
            "report_year --fleet: {PG_URL_VAR} is not set, so PostgreSQL is skipped: start a \
             throw-away server with `eval \"$(bash scripts/postgres.sh start)\"` (it sets \
             {PG_URL_VAR} and {PG_PASSWORD_VAR}), run again, then \
             `bash scripts/postgres.sh stop \"$ORCH_TEST_PG_DIR\"`"
        ),
    }
}
