//! Tests of the ledger through its typed API, against in-memory and tempfile
//! SQLite databases and a real PostgreSQL ([`backends`]), and the fixtures
//! they share. Raw SQL appears only where a test
//! must try what the typed API cannot express (an illegal state), to prove
//! the schema refuses it.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use serde_json::json;
use tokio::sync::Barrier;

mod applies;
mod check;
mod claims;
mod class_applies;
mod compositions;
mod costs;
mod engine_time;
mod manual;
mod open;
mod parts;
mod realizations;
mod report;
mod reverts;
mod rows;
mod scope;
mod stages;
mod verdicts;

/// The tests' one skip helper, shared with `tests/e2e/` (it needs only `std`).
#[path = "../../../tests/support/skip.rs"]
pub(crate) mod skip;

pub(super) use super::*;
use crate::menu::MenuId;
use crate::vocab::{Arm, CycleStatus, Digest, Method, ProposerKind, StageState, VerdictKind};

/// The test PostgreSQL's URL (no password), as `scripts/postgres.sh start`
/// prints it; `scripts/test.sh` always sets it.
pub(super) const PG_URL_VAR: &str = "ORCH_TEST_PG_URL";
/// Its password.
pub(crate) const PG_PASSWORD_VAR: &str = "ORCH_TEST_PG_PASSWORD";
/// `1` runs the ledger suite on SQLite only: for a developer without
/// PostgreSQL, and said out loud. Without it a missing PostgreSQL fails.
const NO_PG_VAR: &str = "ORCH_TEST_NO_PG";

/// A SQLite file in `dir` migrated only up to (not including) the migration
/// `version`: the schema an older daemon left, for tests of what a newer
/// migration makes of its rows. Foreign keys are off, so a test inserts only
/// the rows it is about.
pub(super) async fn sqlite_before(
    dir: &std::path::Path,
    version: &str,
) -> (std::path::PathBuf, sqlx::SqlitePool) {
    use sqlx::sqlite::{SqliteConnectOptions, SqlitePool};
    let path = dir.join("orchestrator.db");
    let before = dir.join("migrations");
    std::fs::create_dir(&before).unwrap();
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("migrations");
    for entry in std::fs::read_dir(&repo).unwrap() {
        let p = entry.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        if p.is_file() && name.as_str() < version {
            std::fs::copy(&p, before.join(&name)).unwrap();
        }
    }
    let options = SqliteConnectOptions::new()
        .filename(&path)
        .create_if_missing(true)
        .foreign_keys(false);
    let pool = SqlitePool::connect_with(options).await.unwrap();
    sqlx::migrate::Migrator::new(before.as_path())
        .await
        .unwrap()
        .run(&pool)
        .await
        .unwrap();
    (path, pool)
}

/// A fresh, migrated ledger on each backend: an in-memory SQLite one, then
/// a new database on the test PostgreSQL. Each says which it is on stderr
/// (shown with a failing test's output).
pub(super) async fn backends() -> impl Iterator<Item = Ledger> {
    let mut all = vec![Ledger::open_in_memory().await.unwrap()];
    all.extend(fresh_postgres().await);
    all.into_iter()
        .inspect(|l| eprintln!("-- on {:?} ({})", l.backend(), l.path().display()))
}

/// A new, empty database on the test PostgreSQL, migrated; `None` only when
/// the developer opted out with `ORCH_TEST_NO_PG=1`. (Each test gets its own
/// database because tests run in parallel; the cluster is thrown away after.)
pub(crate) async fn fresh_postgres() -> Option<Ledger> {
    use sqlx::postgres::{PgConnectOptions, PgConnection};
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    if std::env::var(NO_PG_VAR).as_deref() == Ok("1") {
        skip::skip(
            &format!("{NO_PG_VAR}=1, so the PostgreSQL half of this test is not run"),
            &format!(
                "unset {NO_PG_VAR} and run through scripts/test.sh, or first \
                 `eval \"$(bash scripts/postgres.sh start)\"`"
            ),
        );
        return None;
    }
    let url = std::env::var(PG_URL_VAR).unwrap_or_else(|_| {
        panic!(
            "{PG_URL_VAR} is not set, so the ledger cannot be tested on PostgreSQL: run the tests \
             through scripts/test.sh (it starts a throw-away cluster), or first \
             `eval \"$(bash scripts/postgres.sh start)\"`; set {NO_PG_VAR}=1 to test on SQLite only"
        )
    });
    let password = std::env::var(PG_PASSWORD_VAR).ok();
    let mut admin = PgConnectOptions::from_str(&url).unwrap();
    if let Some(p) = &password {
        admin = admin.password(p);
    }
    let mut admin = PgConnection::connect_with(&admin).await.unwrap();
    let name = format!(
        "ledger_{}_{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    );
    sqlx::query(&format!("CREATE DATABASE {name}"))
        .execute(&mut admin)
        .await
        .unwrap();
    admin.close().await.unwrap();
    let (server, _) = url.rsplit_once('/').expect("a URL with a database");
    let ledger = Ledger::open_postgres(
        &format!("{server}/{name}"),
        password.as_deref(),
        DEFAULT_BUSY_TIMEOUT,
    )
    .await
    .unwrap();
    Some(ledger)
}

pub(crate) fn t(seconds: i64) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 29, 8, 0, 0).unwrap() + chrono::Duration::seconds(seconds)
}

pub(super) fn digest(n: u8) -> Digest {
    Digest::of(&[n])
}

pub(crate) fn experiment(cycle_id: CycleId, base: u8, candidate: u8) -> NewExperiment {
    NewExperiment {
        cycle_id,
        proposal_id: None,
        confirmation_of: None,
        created_at: t(10),
        menu_id: MenuId::StageSpeculative,
        parameters: json!({"draft_len": 4}),
        method: Method::Bench,
        base_profile: format!("# profile {base}\n"),
        base_digest: digest(base),
        candidate_profile: format!("# profile {candidate}\n"),
        candidate_digest: digest(candidate),
        planner_notes: None,
    }
}

pub(super) fn measured(kind: VerdictKind, effect: f64, low: f64, high: f64) -> NewVerdict {
    NewVerdict {
        kind,
        decided_at: t(100),
        effect: Some(effect),
        interval: Some(Interval { low, high }),
        noise_floor: Some(0.02),
        floor_is_bound: false,
        pairs: 6,
        method: Some("test confidence sequence".to_string()),
        reason: None,
    }
}

/// The bandit's valid first proposal in `cycle_id`, at `at`: a `remeasure`.
pub(crate) fn bandit_proposal(cycle_id: CycleId, at: DateTime<Utc>) -> NewProposal {
    NewProposal {
        cycle_id,
        proposer: ProposerKind::Bandit,
        attempt: 1,
        created_at: at,
        prompt: None,
        raw_answer: None,
        parsed: Some(json!({"experiment": "remeasure"})),
        rejection: None,
        note: None,
    }
}

pub(super) fn refusal(kind: VerdictKind, reason: &str) -> NewVerdict {
    NewVerdict::refusal(kind, reason, t(100))
}

pub(super) fn run(experiment_id: ExperimentId, arm: Arm, order: u32, pair: Option<u32>) -> NewRun {
    NewRun {
        experiment_id,
        arm,
        order_index: order,
        pair_index: pair,
        started_at: t(20 + i64::from(order)),
        seconds_per_token: Some(1.5 + f64::from(order) / 100.0),
        timing_source: Some(TimingSource::Engine),
        tokens: Some(32),
        output_hash: Some("9f86d081884c7d65".to_string()),
        exit_code: Some(0),
        duration_s: 48.0,
        stderr_tail: "done\n".to_string(),
        refused: false,
        error: None,
        parts: TokenParts {
            trunk_seconds_per_token: Some(0.4),
            expert_seconds_per_token: Some(1.0),
            far_hit_share: Some(0.2),
            draft_acceptance: None,
        },
        pressure: RunPressure {
            load1: Some(0.5),
            cpu_pressure: Some(0.02),
            memory_pressure: Some(0.0),
            io_pressure: None,
            contention: Some(1.4),
            live_requests: Some(1.0),
        },
    }
}

/// One ABBA pair of runs for an experiment.
pub(super) async fn abba(tx: &mut WriteTx, experiment_id: ExperimentId) {
    let arms = [Arm::Baseline, Arm::Candidate, Arm::Candidate, Arm::Baseline];
    for (i, arm) in arms.into_iter().enumerate() {
        let order = u32::try_from(i).unwrap();
        tx.insert_run(&run(experiment_id, arm, order, Some(order / 2)))
            .await
            .unwrap();
    }
}

/// A win, its confirmation, and their stage, written as the loop would: one
/// transaction for the whole change.
pub(crate) async fn staged_win(ledger: &Ledger, base: u8) -> (StageId, ExperimentId, ExperimentId) {
    staged_win_on(ledger, base, 200).await
}

/// A confirmed win from profile `base` to profile `candidate`, staged.
pub(crate) async fn staged_win_on(
    ledger: &Ledger,
    base: u8,
    candidate: u8,
) -> (StageId, ExperimentId, ExperimentId) {
    let mut tx = ledger.begin_write().await.unwrap();
    let cycle = tx.open_cycle(t(0), ProposerKind::Model).await.unwrap();
    let first = tx
        .insert_experiment(&experiment(cycle, base, candidate))
        .await
        .unwrap();
    abba(&mut tx, first).await;
    let won = measured(VerdictKind::Win, -0.2, -0.3, -0.1);
    tx.insert_verdict(first, &won).await.unwrap();
    let second = tx
        .insert_experiment(&NewExperiment {
            confirmation_of: Some(first),
            ..experiment(cycle, base, candidate)
        })
        .await
        .unwrap();
    abba(&mut tx, second).await;
    let confirmed = measured(VerdictKind::Win, -0.15, -0.25, -0.05);
    tx.insert_verdict(second, &confirmed).await.unwrap();
    let stage = tx
        .insert_stage(
            &RecordedWin::of(first, &won).unwrap(),
            &RecordedWin::of(second, &confirmed).unwrap(),
            t(200),
        )
        .await
        .unwrap();
    tx.close_cycle(cycle, &CycleOutcome::Completed, t(300))
        .await
        .unwrap();
    tx.commit().await.unwrap();
    (stage, first, second)
}

/// A stage of `ledger`'s stack from profile `base` to profile 200,
/// approved at t(300) and applied at t(310).
pub(super) async fn applied(ledger: &Ledger, base: u8) -> StageId {
    let (id, _, _) = staged_win(ledger, base).await;
    let mut tx = ledger.begin_write().await.unwrap();
    tx.decide_stage(id, StageDecision::Approved, "alice", None, t(300))
        .await
        .unwrap();
    assert!(
        tx.settle_apply(
            id,
            ApplyOutcome::Applied,
            "stage approve",
            "/srv/live.toml",
            t(310)
        )
        .await
        .unwrap()
    );
    tx.commit().await.unwrap();
    id
}

/// Runs raw SQL that the typed API would never issue.
pub(super) async fn raw(ledger: &Ledger, sql: &str) -> Result<(), LedgerError> {
    let done = match &ledger.pool {
        Pool::Sqlite(p) => sqlx::query(sql).execute(p).await.map(|_| ()),
        Pool::Postgres(p) => sqlx::query(sql).execute(p).await.map(|_| ()),
    };
    done.map_err(ledger.ctx.err("run a test statement"))
}

/// The SQLite pool of a test that is about SQLite's file itself.
pub(super) fn sqlite_pool(ledger: &Ledger) -> &sqlx::SqlitePool {
    match &ledger.pool {
        Pool::Sqlite(p) => p,
        Pool::Postgres(_) => panic!("a SQLite-only test got a PostgreSQL ledger"),
    }
}

/// One text value read by raw SQL (to see the stored form).
pub(super) async fn raw_text(ledger: &Ledger, sql: &str) -> String {
    match &ledger.pool {
        Pool::Sqlite(p) => sqlx::query_scalar(sql).fetch_one(p).await.unwrap(),
        Pool::Postgres(p) => sqlx::query_scalar(sql).fetch_one(p).await.unwrap(),
    }
}

pub(super) fn assert_constraint(result: Result<impl std::fmt::Debug, LedgerError>, what: &str) {
    match result {
        Err(LedgerError::Constraint { .. }) => {}
        other => panic!("{what}: expected a schema refusal, got {other:?}"),
    }
}
