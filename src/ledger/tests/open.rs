//! Opening, pragmas, transactions, concurrency and query plans.

use super::*;

#[tokio::test]
async fn open_existing_never_creates_a_ledger_or_its_directory() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sub").join("orchestrator.db");
    assert!(Ledger::open_existing(&path).await.is_err());
    assert!(!dir.path().join("sub").exists(), "no directory made");
    let flat = dir.path().join("orchestrator.db");
    assert!(Ledger::open_existing(&flat).await.is_err());
    assert!(!flat.exists(), "no file made");
    let made = Ledger::open(&flat).await.unwrap();
    let id = made.open_cycle(t(0), ProposerKind::Bandit).await.unwrap();
    made.close().await;
    let again = Ledger::open_existing(&flat).await.unwrap();
    assert_eq!(again.cycle(id).await.unwrap().status, CycleStatus::Running);
    again.close().await;
}

#[tokio::test]
async fn file_ledger_sets_its_pragmas_and_reopens() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sub").join("orchestrator.db");
    let ledger = Ledger::open(&path).await.unwrap();
    let mut c = sqlite_pool(&ledger).acquire().await.unwrap();
    let mode: String = sqlx::query_scalar("PRAGMA journal_mode")
        .fetch_one(&mut *c)
        .await
        .unwrap();
    let fk: i64 = sqlx::query_scalar("PRAGMA foreign_keys")
        .fetch_one(&mut *c)
        .await
        .unwrap();
    let sync: i64 = sqlx::query_scalar("PRAGMA synchronous")
        .fetch_one(&mut *c)
        .await
        .unwrap();
    let busy: i64 = sqlx::query_scalar("PRAGMA busy_timeout")
        .fetch_one(&mut *c)
        .await
        .unwrap();
    drop(c);
    assert_eq!(mode, "wal");
    assert_eq!(fk, 1);
    assert_eq!(sync, 1, "synchronous=NORMAL");
    assert_eq!(busy, 10_000);
    let id = ledger.open_cycle(t(0), ProposerKind::Bandit).await.unwrap();
    ledger.close().await;

    // Reopening finds the schema applied and the data kept.
    let again = Ledger::open(&path).await.unwrap();
    assert_eq!(again.cycle(id).await.unwrap().status, CycleStatus::Running);
    assert_eq!(again.path(), path.as_path());
}

#[tokio::test]
async fn open_names_the_file_when_it_is_not_a_database() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("garbage.db");
    std::fs::write(&path, vec![b'x'; 8192]).unwrap();
    let err = Ledger::open(&path).await.unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains(&path.display().to_string()), "{msg}");
    assert!(matches!(err, LedgerError::Corrupt { .. }), "{err:?}");
}

#[tokio::test]
async fn dropping_a_write_transaction_rolls_it_back() {
    for ledger in backends().await {
        let mut tx = ledger.begin_write().await.unwrap();
        let id = tx.open_cycle(t(0), ProposerKind::Model).await.unwrap();
        assert_eq!(tx.cycle(id).await.unwrap().status, CycleStatus::Running);
        drop(tx);
        assert!(matches!(
            ledger.cycle(id).await.unwrap_err(),
            LedgerError::NotFound { .. }
        ));
    }
}

/// Two processes' worth of `stage approve` racing: separate pools on one
/// file, each doing load → (write the profile) → decide → commit.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_decisions_on_a_file_ledger_exactly_one_wins() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("orchestrator.db");
    let setup = Ledger::open(&path).await.unwrap();
    let mut stages = Vec::new();
    for base in 1..=5 {
        stages.push(staged_win(&setup, base).await.0);
    }
    setup.close().await;

    let a = Ledger::open(&path).await.unwrap();
    let b = Ledger::open(&path).await.unwrap();
    for id in stages {
        let barrier = Arc::new(Barrier::new(2));
        let race = |ledger: Ledger, who: &'static str, decision| {
            let barrier = Arc::clone(&barrier);
            tokio::spawn(async move {
                barrier.wait().await;
                let mut tx = ledger.begin_write().await?;
                let stage = tx.stage(id).await?;
                // The approve command writes the live profile here; hold the
                // lock a while so the other side really has to wait.
                if stage.state == StageState::Staged {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                tx.decide_stage(id, decision, who, Some("raced"), t(400))
                    .await?;
                tx.commit().await
            })
        };
        let one = race(a.clone(), "alice", StageDecision::Approved);
        let two = race(b.clone(), "bob", StageDecision::Rejected);
        let results = [one.await.unwrap(), two.await.unwrap()];
        let winners = results.iter().filter(|r| r.is_ok()).count();
        assert_eq!(winners, 1, "{results:?}");
        let stage = a.stage(id).await.unwrap();
        for r in results {
            if let Err(e) = r {
                match e {
                    LedgerError::StageAlreadyDecided { by, state, .. } => {
                        assert_eq!(Some(by), stage.decided_by);
                        assert_eq!(state, stage.state);
                    }
                    other => panic!("the loser must get the typed refusal, got {other}"),
                }
            }
        }
    }
}

#[tokio::test]
async fn a_writer_stuck_past_the_timeout_gets_a_clear_message() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("orchestrator.db");
    let holder = Ledger::open(&path).await.unwrap();
    let waiter = Ledger::open_with(&path, Duration::from_millis(200))
        .await
        .unwrap();
    let held = holder.begin_write().await.unwrap();
    let err = waiter.begin_write().await.unwrap_err();
    drop(held);
    let msg = err.to_string();
    assert!(matches!(err, LedgerError::Locked { .. }), "{err:?}");
    assert!(msg.contains(&path.display().to_string()), "{msg}");
    assert!(msg.contains("another orchestrator process"), "{msg}");
    assert!(!msg.contains("database is locked"), "{msg}");
    // Once the holder is gone the waiter writes normally.
    waiter.begin_write().await.unwrap().commit().await.unwrap();
}

#[tokio::test]
async fn named_queries_use_indexes() {
    let ledger = Ledger::open_in_memory().await.unwrap();
    for &q in NamedQuery::ALL {
        let plan = ledger.query_plan(q).await.unwrap();
        for line in plan.lines() {
            let full_scan = line.starts_with("SCAN ")
                && !line.contains(" USING ")
                && !line.contains("VIRTUAL TABLE");
            // The newest K experiments walk the primary key backwards and stop
            // after K rows: bounded, not a full scan.
            let bounded = (q == NamedQuery::RecentExperiments && line == "SCAN e")
                || (q == NamedQuery::RecentLiveMetric && line == "SCAN o");
            assert!(!full_scan || bounded, "{q:?} scans a table:\n{plan}");
            assert!(!line.contains("TEMP B-TREE"), "{q:?} sorts rows:\n{plan}");
        }
        assert!(
            plan.contains("USING")
                || [NamedQuery::RecentExperiments, NamedQuery::RecentLiveMetric].contains(&q),
            "{q:?} uses no index:\n{plan}"
        );
    }
    let dup = ledger
        .query_plan(NamedQuery::DuplicateDecided)
        .await
        .unwrap();
    assert!(dup.contains("experiments_by_identity"), "{dup}");
    let refused = ledger.query_plan(NamedQuery::PlannerRefused).await.unwrap();
    assert!(refused.contains("proposals_valid_by_parsed"), "{refused}");
    let on = ledger
        .query_plan(NamedQuery::PlannerRefusalsOn)
        .await
        .unwrap();
    assert!(on.contains("observations_by_base_profile"), "{on}");
    let decided = ledger.query_plan(NamedQuery::DecidedOn).await.unwrap();
    assert!(decided.contains("experiments_by_identity"), "{decided}");
    let floor = ledger
        .query_plan(NamedQuery::LatestNoiseFloor)
        .await
        .unwrap();
    assert!(floor.contains("noise_floors_by_stack"), "{floor}");
}

#[test]
fn canonical_json_sorts_keys_at_every_level() {
    let v: serde_json::Value =
        serde_json::from_str(r#"{"b": [{"y": 1, "x": 2}], "a": null}"#).unwrap();
    assert_eq!(
        codec::canonical_json(&v),
        r#"{"a":null,"b":[{"x":2,"y":1}]}"#
    );
}

#[test]
fn timestamps_are_fixed_width_and_ordered() {
    let a = codec::ts_text(&t(0));
    let b = codec::ts_text(&(t(0) + chrono::Duration::microseconds(1)));
    assert_eq!(a, "2026-11-29T08:00:00.000000Z");
    assert_eq!(a.len(), 27);
    assert!(a < b);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn processes_opening_a_fresh_ledger_at_once_migrate_it_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("orchestrator.db");
    let opens: Vec<_> = (0..4)
        .map(|_| {
            let path = path.clone();
            tokio::spawn(async move { Ledger::open(&path).await })
        })
        .collect();
    for open in opens {
        let ledger = open.await.unwrap().unwrap();
        ledger.open_cycle(t(0), ProposerKind::Model).await.unwrap();
    }
    let ledger = Ledger::open(&path).await.unwrap();
    let applied: i64 = sqlx::query_scalar("SELECT count(*) FROM _sqlx_migrations")
        .fetch_one(sqlite_pool(&ledger))
        .await
        .unwrap();
    assert_eq!(applied, i64::try_from(MIGRATOR.iter().count()).unwrap());
    assert_eq!(ledger.recent_cycles(10).await.unwrap().len(), 4);
}

#[tokio::test]
async fn an_edited_or_newer_schema_is_refused_with_advice() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("orchestrator.db");
    let ledger = Ledger::open(&path).await.unwrap();
    raw(&ledger, "UPDATE _sqlx_migrations SET checksum = x'00'")
        .await
        .unwrap();
    ledger.close().await;
    let edited = Ledger::open(&path).await.unwrap_err();
    let msg = edited.to_string();
    assert!(matches!(edited, LedgerError::Migrate { .. }), "{edited:?}");
    assert!(msg.contains("never edited"), "{msg}");
    assert!(msg.contains(&path.display().to_string()), "{msg}");

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("orchestrator.db");
    let ledger = Ledger::open(&path).await.unwrap();
    raw(
        &ledger,
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time) \
         VALUES (99991231000000, 'from the future', 1, x'00', 0)",
    )
    .await
    .unwrap();
    ledger.close().await;
    let newer = Ledger::open(&path).await.unwrap_err();
    assert!(newer.to_string().contains("newer orchestrator"), "{newer}");
}

/// The password reaches the server and nowhere else: not the ledger's
/// rows, its `Debug` form (what a log line would print) or its errors.
#[tokio::test]
async fn the_postgres_password_never_reaches_the_ledger_or_its_messages() {
    let Some(ledger) = fresh_postgres().await else {
        return;
    };
    let password = std::env::var(PG_PASSWORD_VAR).expect("the test cluster has a password");
    assert!(password.len() >= 16, "a password worth looking for");
    staged_win(&ledger, 1).await;
    let url = ledger.path().display().to_string();
    assert!(!url.contains(&password), "{url}");
    assert!(
        !format!("{ledger:?}").contains(&password),
        "Debug shows the password"
    );
    // Every stored value, as text.
    let Pool::Postgres(pool) = &ledger.pool else {
        unreachable!()
    };
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT tablename::text FROM pg_tables WHERE schemaname = current_schema()",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    assert!(tables.len() >= 9, "{tables:?}");
    for table in tables {
        let rows: Vec<String> = sqlx::query_scalar(&format!("SELECT t::text FROM {table} t"))
            .fetch_all(pool)
            .await
            .unwrap();
        for row in rows {
            assert!(
                !row.contains(&password),
                "{table} holds the password: {row}"
            );
        }
    }
    // A wrong password is refused with a message that shows neither.
    let wrong = format!("{password}-wrong");
    let err = Ledger::open_postgres(&url, Some(&wrong), Duration::from_secs(5))
        .await
        .unwrap_err();
    let msg = format!("{err} {err:?}");
    assert!(matches!(err, LedgerError::OpenPostgres { .. }), "{msg}");
    assert!(msg.contains("password_env"), "names the fix: {msg}");
    assert!(!msg.contains(&password), "{msg}");
}

/// A configured password variable that is unset is refused by name.
#[tokio::test]
async fn an_unset_password_variable_is_refused_by_name() {
    let target = PostgresTarget::new(
        "postgres://orchestrator@127.0.0.1:1/ledger",
        Some("ORCH_TEST_SURELY_UNSET_PW".into()),
    )
    .unwrap();
    let err = target.open(Duration::from_secs(1)).await.unwrap_err();
    assert!(
        matches!(&err, LedgerError::PasswordUnset { var, .. } if var == "ORCH_TEST_SURELY_UNSET_PW"),
        "{err:?}"
    );
    assert!(err.to_string().contains("export it"), "{err}");
}

/// The advisory writer lock queues PostgreSQL writers as `BEGIN IMMEDIATE`
/// queues SQLite's: a second writer waits, then gives up with `Locked`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_postgres_writer_waits_for_the_other_then_reports_it_locked() {
    let Some(first) = fresh_postgres().await else {
        return;
    };
    let url = first.path().display().to_string();
    let password = std::env::var(PG_PASSWORD_VAR).ok();
    let second = Ledger::open_postgres(&url, password.as_deref(), Duration::from_millis(300))
        .await
        .unwrap();
    let held = first.begin_write().await.unwrap();
    let started = std::time::Instant::now();
    let err = second.begin_write().await.unwrap_err();
    assert!(matches!(err, LedgerError::Locked { .. }), "{err:?}");
    assert!(started.elapsed() >= Duration::from_millis(250), "it waited");
    held.rollback().await.unwrap();
    second.begin_write().await.unwrap().commit().await.unwrap();
}

/// One daemon per stack on a shared PostgreSQL ledger: a second taker of
/// the same stack is refused with the holder named, another stack is not,
/// and the lock goes with its session.
#[tokio::test]
async fn a_stack_lock_is_held_once_and_goes_with_its_session() {
    let Some(first) = fresh_postgres().await else {
        return;
    };
    let url = first.path().display().to_string();
    let password = std::env::var(PG_PASSWORD_VAR).ok();
    let second = Ledger::open_postgres(&url, password.as_deref(), DEFAULT_BUSY_TIMEOUT)
        .await
        .unwrap();
    assert_eq!(first.stack_lock_holder("spark-1").await.unwrap(), None);
    let held = first.lock_stack("spark-1").await.unwrap();
    let err = second.lock_stack("spark-1").await.unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, LedgerError::StackLocked { .. }), "{err:?}");
    let me = format!("orchestrator pid {}", std::process::id());
    assert!(msg.contains(&me) && msg.contains("[stack] name"), "{msg}");
    assert!(second.stack_lock_holder("spark-1").await.unwrap().is_some());
    let other = second.lock_stack("spark-2").await.unwrap();
    drop(held);
    // The server ends the dropped session a moment after its socket closes.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let successor = loop {
        match second.lock_stack("spark-1").await {
            Ok(lock) => break lock,
            Err(e) if std::time::Instant::now() < deadline => {
                assert!(matches!(e, LedgerError::StackLocked { .. }), "{e:?}");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => panic!("the dropped lock was never released: {e}"),
        }
    };
    drop((other, successor));
    // SQLite has its file lock instead.
    let sqlite = Ledger::open_in_memory().await.unwrap();
    assert!(matches!(
        sqlite.lock_stack("spark-1").await.unwrap_err(),
        LedgerError::PostgresOnly { .. }
    ));
}

/// A server restart ends the session holding a stack's lock: `regain`
/// takes it again on a new session, or names the daemon that took the
/// stack meanwhile.
#[tokio::test]
async fn a_stack_lock_whose_session_ended_is_regained_unless_the_stack_was_taken() {
    let Some(ledger) = fresh_postgres().await else {
        return;
    };
    let url = ledger.path().display().to_string();
    let password = std::env::var(PG_PASSWORD_VAR).ok();
    let other = Ledger::open_postgres(&url, password.as_deref(), DEFAULT_BUSY_TIMEOUT)
        .await
        .unwrap();
    let mut lock = ledger.lock_stack("spark-regain").await.unwrap();
    assert!(!lock.regain(&ledger).await.unwrap(), "held: nothing to do");
    // What a restart does to the session, done by hand.
    let end_holder = "SELECT pg_terminate_backend(l.pid) FROM pg_locks l \
         WHERE l.locktype = 'advisory' AND l.objsubid = 2 AND l.granted \
           AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())";
    raw(&other, end_holder).await.unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while other
        .stack_lock_holder("spark-regain")
        .await
        .unwrap()
        .is_some()
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the session never ended"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(lock.regain(&ledger).await.unwrap(), "taken again");
    assert!(!lock.regain(&ledger).await.unwrap(), "and held");
    let me = format!("orchestrator pid {}", std::process::id());
    let holder = other.stack_lock_holder("spark-regain").await.unwrap();
    assert!(holder.is_some_and(|h| h.contains(&me)));
    // Ended again, and another daemon takes the stack first: refused by name.
    raw(&other, end_holder).await.unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let _theirs = loop {
        match other.lock_stack("spark-regain").await {
            Ok(l) => break l,
            Err(_) if std::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => panic!("the ended session kept its lock: {e}"),
        }
    };
    let err = lock.regain(&ledger).await.unwrap_err();
    assert!(matches!(err, LedgerError::StackLocked { .. }), "{err:?}");
    assert!(
        !err.is_transient(),
        "another daemon's stack is not waited out"
    );
}

/// Opting out of PostgreSQL is a counted skip, and under `CI=true` a
/// failure: a PostgreSQL test run again as a child of this test program
/// with `ORCH_TEST_NO_PG=1`, as a developer and as CI.
#[test]
fn opting_out_of_postgres_is_a_counted_skip_and_fails_under_ci() {
    const TEST: &str =
        "ledger::tests::open::the_postgres_password_never_reaches_the_ledger_or_its_messages";
    let dir = tempfile::tempdir().unwrap();
    let run = |ci: bool| {
        let log = dir.path().join(format!("skips-{ci}.log"));
        let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
        cmd.args([TEST, "--exact", "--nocapture"])
            .env("ORCH_TEST_NO_PG", "1")
            .env("ORCH_TEST_SKIP_LOG", &log);
        if ci {
            cmd.env("CI", "true");
        } else {
            cmd.env_remove("CI");
        }
        let out = cmd.output().unwrap();
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (
            out.status.success(),
            said,
            std::fs::read_to_string(&log).unwrap(),
        )
    };
    let (passed, said, logged) = run(false);
    assert!(passed && said.contains("1 passed"), "{said}");
    assert!(
        said.contains("*** SKIPPED") && said.contains("ORCH_TEST_NO_PG=1"),
        "{said}"
    );
    assert!(logged.starts_with(&format!("{TEST}\t")), "{logged}");
    let (passed, said, logged) = run(true);
    assert!(!passed && said.contains("1 failed"), "{said}");
    assert!(said.contains("CI=true"), "{said}");
    assert!(logged.contains("FAILED under CI=true"), "{logged}");
}

/// A refused port, a service that is not PostgreSQL and a wrong password
/// each name their cause; the refused port at once, not after the pool's
/// 11 s timeout.
#[tokio::test]
async fn a_failed_postgres_connection_names_its_cause() {
    // Nothing listening: a port bound and released.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let started = std::time::Instant::now();
    let err = Ledger::open_postgres(
        &format!("postgres://orchestrator@127.0.0.1:{port}/ledger"),
        None,
        DEFAULT_BUSY_TIMEOUT,
    )
    .await
    .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("nothing is listening") && text.contains("connection refused"),
        "{text}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );

    // A service that answers garbage (an HTTP server's reply).
    let garbage = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = garbage.local_addr().unwrap();
    tokio::spawn(async move {
        use tokio::io::AsyncWriteExt;
        loop {
            let (mut s, _) = garbage.accept().await.unwrap();
            let _ = s
                .write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
                .await;
        }
    });
    let err = Ledger::open_postgres(
        &format!("postgres://orchestrator@{addr}/ledger"),
        None,
        DEFAULT_BUSY_TIMEOUT,
    )
    .await
    .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("did not speak the PostgreSQL protocol"),
        "{text}"
    );

    // A wrong password, through the config's variable.
    if std::env::var(NO_PG_VAR).as_deref() == Ok("1") {
        return;
    }
    let url = std::env::var(PG_URL_VAR).expect("the test cluster");
    let var = "ORCH_TEST_WRONG_PG_PASSWORD";
    // SAFETY: a variable only this test reads.
    unsafe { std::env::set_var(var, "not-the-password") };
    let target = PostgresTarget::new(&url, Some(var.into())).unwrap();
    let err = target.open(DEFAULT_BUSY_TIMEOUT).await.unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("password authentication failed for user \"orchestrator\"")
            && text.contains(var),
        "{text}"
    );
    assert!(
        matches!(&err, LedgerError::OpenPostgres { source, .. } if source.reached()),
        "{err:?}"
    );
}
