//! Engine time by what it bought, and the daemon's waits.

use super::*;
use crate::vocab::WaitKind;

fn scope(name: &str) -> StackScope {
    StackScope {
        name: name.into(),
        class: None,
    }
}

/// An experiment of `ledger`'s stack with one warmup run of each length,
/// a minute apart from `at`, and its verdict if any.
async fn measured(
    ledger: &Ledger,
    menu_id: MenuId,
    confirmation_of: Option<ExperimentId>,
    verdict: Option<VerdictKind>,
    at: DateTime<Utc>,
    seconds: &[f64],
) -> ExperimentId {
    let cycle = ledger.open_cycle(at, ProposerKind::Bandit).await.unwrap();
    let e = ledger
        .insert_experiment(&NewExperiment {
            menu_id,
            confirmation_of,
            created_at: at,
            ..experiment(cycle, 1, 2)
        })
        .await
        .unwrap();
    for (i, &s) in seconds.iter().enumerate() {
        let order = u32::try_from(i).unwrap();
        ledger
            .insert_run(&NewRun {
                duration_s: s,
                started_at: at + chrono::Duration::minutes(i64::from(order)),
                ..run(e, Arm::Warmup, order, None)
            })
            .await
            .unwrap();
    }
    if let Some(v) = verdict {
        let v = NewVerdict::refusal(v, "test", at);
        ledger.insert_verdict(e, &v).await.unwrap();
    }
    e
}

/// Every run counts once, under what its experiment bought (a failed
/// verdict first), for its own stack; days and windows go by the run's
/// start.
#[tokio::test]
async fn runs_are_counted_by_what_they_bought() {
    for db in backends().await {
        let mine = db.clone().scoped(scope("mine"));
        let theirs = db.clone().scoped(scope("theirs"));
        let t0 = Utc.with_ymd_and_hms(2026, 12, 4, 23, 0, 0).unwrap();
        measured(&mine, MenuId::Remeasure, None, None, t0, &[1.0, 2.0]).await;
        let ab = measured(&mine, MenuId::StageSpeculative, None, None, t0, &[4.0]).await;
        let conf = Some(ab);
        measured(&mine, MenuId::StageSpeculative, conf, None, t0, &[8.0]).await;
        let failed = Some(VerdictKind::Failed);
        measured(&mine, MenuId::DeepenWarmSet, None, failed, t0, &[16.0]).await;
        let day2 = t0 + chrono::Duration::hours(2);
        measured(&mine, MenuId::Remeasure, None, None, day2, &[32.0]).await;
        measured(&theirs, MenuId::Remeasure, None, None, t0, &[64.0]).await;

        let until = t0 + chrono::Duration::days(2);
        let all = mine.engine_runs(t0, until).await.unwrap();
        assert_eq!(all.len(), 6, "{all:?}");
        let days = EngineSeconds::per_day(&all);
        assert_eq!(days.len(), 2, "{days:?}");
        let first = EngineSeconds {
            floor: 3.0,
            ab: 4.0,
            confirmation: 8.0,
            failed: 16.0,
        };
        assert_eq!(days[0].1, first);
        assert_eq!(days[1].1.floor, 32.0);
        assert_eq!(
            first.to_string(),
            "31 s (floor 3, A/B 4, confirmation 8, failed 16)"
        );
        // The floor's second run began a minute after the first; the
        // window's end is not in it.
        let late = mine
            .engine_runs(t0 + chrono::Duration::seconds(30), day2)
            .await
            .unwrap();
        assert_eq!(EngineSeconds::of(&late).total(), 2.0, "{late:?}");
        let everyone = db.engine_runs(t0, until).await.unwrap();
        assert_eq!(EngineSeconds::of(&everyone).total(), 127.0);
        // The report reads the same per stack.
        let report = db
            .report_engine_runs(
                &ReportStack {
                    name: "mine".into(),
                    with_unowned: true,
                },
                t0,
                until,
            )
            .await
            .unwrap();
        assert_eq!(report, all);
    }
}

fn wait(at: DateTime<Utc>) -> NewWait {
    NewWait {
        kind: WaitKind::Converged,
        started_at: at,
        after_cycle: None,
        reason: "nothing left worth measuring".into(),
        wakes_on: vec!["a stage approved or rejected".into()],
        next_look_at: at + chrono::Duration::seconds(60),
        backoff_s: 60.0,
    }
}

#[tokio::test]
async fn a_wait_is_recorded_looked_at_and_ended_once() {
    for db in backends().await {
        let ledger = db.scoped(scope("s"));
        let t0 = Utc.with_ymd_and_hms(2026, 12, 4, 8, 0, 0).unwrap();
        let id = ledger.insert_wait(&wait(t0)).await.unwrap();
        let later = t0 + chrono::Duration::seconds(120);
        ledger
            .wait_looked(id, "still nothing", later, 120.0)
            .await
            .unwrap();
        let w = &ledger.recent_waits(5).await.unwrap()[0];
        assert_eq!((w.looks, w.reason.as_str()), (1, "still nothing"));
        assert_eq!(w.stack.as_deref(), Some("s"));
        assert_eq!(w.kind, WaitKind::Converged);
        assert_eq!(w.wakes_on, vec!["a stage approved or rejected"]);
        assert!(w.ended_at.is_none() && w.woken_by.is_none());
        ledger
            .end_wait(id, later, "the live profile changed")
            .await
            .unwrap();
        ledger.end_wait(id, later, "shutdown").await.unwrap();
        let w = &ledger.recent_waits(5).await.unwrap()[0];
        assert_eq!(w.woken_by.as_deref(), Some("the live profile changed"));
        assert_eq!(w.ended_at, Some(later));
        assert_eq!(ledger.end_open_waits("stopped", later).await.unwrap(), 0);
    }
}

#[tokio::test]
async fn waits_a_dead_daemon_left_open_are_ended_at_start_and_only_its_own() {
    for db in backends().await {
        let mine = db.clone().scoped(scope("mine"));
        let theirs = db.clone().scoped(scope("theirs"));
        let t0 = Utc.with_ymd_and_hms(2026, 12, 4, 8, 0, 0).unwrap();
        mine.insert_wait(&wait(t0)).await.unwrap();
        theirs.insert_wait(&wait(t0)).await.unwrap();
        // Found before it began (a clock stepped back): ended when it began.
        let early = t0 - chrono::Duration::seconds(5);
        let ended = mine.end_open_waits("the daemon stopped", early).await;
        assert_eq!(ended.unwrap(), 1);
        let w = &mine.recent_waits(5).await.unwrap()[0];
        assert_eq!(w.ended_at, Some(t0));
        assert!(theirs.recent_waits(5).await.unwrap()[0].ended_at.is_none());
        assert_eq!(
            db.recent_waits(5).await.unwrap().len(),
            2,
            "unscoped sees all"
        );
    }
}

/// The schema refuses a wait that ended without saying why.
#[tokio::test]
async fn an_ended_wait_says_what_ended_it() {
    let ledger = Ledger::open_in_memory().await.unwrap();
    let id = ledger.insert_wait(&wait(t(0))).await.unwrap();
    let err = ledger.end_wait(id, t(10), " ").await.unwrap_err();
    assert!(err.to_string().contains("CHECK"), "{err}");
}
