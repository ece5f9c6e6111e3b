//! Whether an approved stage reached its stack's live profile: settled once
//! (written or refused), by its own stack's handle, on both backends.

use super::*;

fn scope(name: &str) -> StackScope {
    StackScope {
        name: name.into(),
        class: Some("spark".into()),
    }
}

/// A stage of `ledger`'s stack, approved at t(300).
async fn approved(ledger: &Ledger, base: u8) -> StageId {
    let (id, _, _) = staged_win(ledger, base).await;
    ledger
        .decide_stage(id, StageDecision::Approved, "alice", None, t(300))
        .await
        .unwrap();
    id
}

async fn settle(ledger: &Ledger, id: StageId, outcome: ApplyOutcome<'_>, at: i64) -> bool {
    let mut tx = ledger.begin_write().await.unwrap();
    let done = tx
        .settle_apply(
            id,
            outcome,
            "the daemon of stack box-a",
            "/srv/live.toml",
            t(at),
        )
        .await
        .unwrap();
    tx.commit().await.unwrap();
    done
}

#[tokio::test]
async fn an_approval_waits_for_its_own_stacks_daemon_and_is_applied_once() {
    for ledger in backends().await {
        let a = ledger.clone().scoped(scope("box-a"));
        let b = ledger.clone().scoped(scope("box-b"));
        let id = approved(&a, 1).await;
        let (staged, _, _) = staged_win(&a, 2).await;
        assert_eq!(a.stage(id).await.unwrap().apply(), StageApply::Waiting);
        assert_eq!(
            a.stage(staged).await.unwrap().apply(),
            StageApply::NotApproved
        );
        let ids = |v: Vec<Stage>| v.iter().map(|s| s.id).collect::<Vec<_>>();
        assert_eq!(ids(a.stages_to_apply().await.unwrap()), vec![id]);
        // Another stack's daemon never sees it.
        assert!(b.stages_to_apply().await.unwrap().is_empty());

        assert!(settle(&a, id, ApplyOutcome::Applied, 400).await);
        let stage = a.stage(id).await.unwrap();
        assert_eq!(
            stage.apply(),
            StageApply::Applied {
                at: t(400),
                by: "the daemon of stack box-a",
                to: "/srv/live.toml"
            }
        );
        assert_eq!(stage.apply().status(), Some("applied"));
        assert!(a.stages_to_apply().await.unwrap().is_empty());
        // Settled once: neither a second apply nor a refusal changes it.
        assert!(!settle(&a, id, ApplyOutcome::Applied, 500).await);
        assert!(!settle(&a, id, ApplyOutcome::Refused("late"), 500).await);
        assert_eq!(a.stage(id).await.unwrap(), stage);
        // A stage that is only staged is not applied.
        assert!(!settle(&a, staged, ApplyOutcome::Applied, 500).await);
        let listed = a.stages(Some(StageState::Approved)).await.unwrap();
        assert_eq!(listed[0].applied_at, Some(t(400)));
    }
}

#[tokio::test]
async fn a_refused_apply_says_why_and_is_never_applied_after() {
    for ledger in backends().await {
        let a = ledger.clone().scoped(scope("box-a"));
        let id = approved(&a, 1).await;
        let why = "the live profile changed (now 0202020202, was 0101010101 when measured)";
        // An apply is never stamped before the approval it follows.
        assert!(settle(&a, id, ApplyOutcome::Refused(why), 100).await);
        let stage = a.stage(id).await.unwrap();
        assert_eq!(
            stage.apply(),
            StageApply::Refused {
                at: t(300),
                by: "the daemon of stack box-a",
                to: "/srv/live.toml",
                why
            }
        );
        assert_eq!(stage.applied_at, None);
        assert!(!settle(&a, id, ApplyOutcome::Applied, 400).await);
        assert!(a.stages_to_apply().await.unwrap().is_empty());
        let listed = a.stages(None).await.unwrap();
        assert_eq!(listed[0].apply_refusal.as_deref(), Some(why));
    }
}

#[tokio::test]
async fn the_schema_refuses_an_apply_that_does_not_fit_its_stage() {
    for ledger in backends().await {
        let (staged, _, _) = staged_win(&ledger, 1).await;
        let id = approved(&ledger, 2).await;
        let stamp = if ledger.backend() == Backend::Sqlite {
            "'2026-12-01T00:00:00.000000Z'"
        } else {
            "'2026-12-01T00:00:00Z'"
        };
        let cases = [
            (
                format!(
                    "UPDATE stages SET applied_at = {stamp}, applied_by = 'x', applied_to = 'y' WHERE id = {staged}"
                ),
                "a staged stage applied",
            ),
            (
                format!(
                    "UPDATE stages SET applied_at = {stamp}, applied_by = 'x', applied_to = 'y', \
                     apply_refusal = 'no', apply_refused_at = {stamp} WHERE id = {id}"
                ),
                "both applied and refused",
            ),
            (
                format!("UPDATE stages SET applied_at = {stamp}, applied_to = 'y' WHERE id = {id}"),
                "applied without saying by what",
            ),
            (
                format!(
                    "UPDATE stages SET apply_refusal = 'no', applied_by = 'x', applied_to = 'y' WHERE id = {id}"
                ),
                "refused without saying when",
            ),
            (
                format!(
                    "UPDATE stages SET applied_at = '1999-01-01T00:00:00.000000Z', applied_by = 'x', applied_to = 'y' WHERE id = {id}"
                ),
                "applied before it was approved",
            ),
        ];
        for (sql, what) in cases {
            assert_constraint(raw(&ledger, &sql).await, what);
        }
        // Its apply is still waiting.
        assert_eq!(ledger.stage(id).await.unwrap().apply(), StageApply::Waiting);
    }
}

#[tokio::test]
async fn of_two_daemons_racing_to_apply_one_stage_exactly_one_settles_it() {
    for ledger in backends().await {
        let mut ids = Vec::new();
        for base in 1..=3 {
            ids.push(approved(&ledger, base).await);
        }
        for id in ids {
            let barrier = Arc::new(Barrier::new(2));
            let race = |ledger: Ledger, who: &'static str| {
                let barrier = Arc::clone(&barrier);
                tokio::spawn(async move {
                    barrier.wait().await;
                    let mut tx = ledger.begin_write().await?;
                    let won = tx
                        .settle_apply(id, ApplyOutcome::Applied, who, "/srv/live.toml", t(400))
                        .await?;
                    // The winner writes the live profile here, holding the
                    // transaction, so the other really has to wait.
                    if won {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                    tx.commit().await?;
                    Ok::<_, LedgerError>((who, won))
                })
            };
            let one = race(ledger.clone(), "daemon one");
            let two = race(ledger.clone(), "daemon two");
            let results = [one.await.unwrap().unwrap(), two.await.unwrap().unwrap()];
            let winners: Vec<_> = results.iter().filter(|(_, won)| *won).collect();
            assert_eq!(winners.len(), 1, "{results:?}");
            let stage = ledger.stage(id).await.unwrap();
            assert_eq!(stage.applied_by.as_deref(), Some(winners[0].0));
        }
    }
}

#[tokio::test]
async fn stages_approved_before_applies_were_recorded_read_as_applied() {
    let dir = tempfile::tempdir().unwrap();
    // The schema as it was before 20261201220002.
    let (path, pool) = sqlite_before(dir.path(), "20261201220002").await;
    let (base, candidate) = ("1".repeat(64), "2".repeat(64));
    for (e, state, decided) in [
        (1, "approved", "'2026-12-01T01:00:00.000000Z', 'alice'"),
        (3, "staged", "NULL, NULL"),
    ] {
        sqlx::query(&format!(
            "INSERT INTO stages (experiment_id, confirmation_id, state, base_digest, \
             candidate_digest, candidate_profile, effect, interval_low, interval_high, \
             noise_floor, created_at, decided_at, decided_by, stack) VALUES ({e}, {}, '{state}', \
             '{base}', '{candidate}', 'x', -0.1, -0.2, -0.05, 0.02, \
             '2026-12-01T00:00:00.000000Z', {decided}, 'desk')",
            e + 1
        ))
        .execute(&pool)
        .await
        .unwrap();
    }
    pool.close().await;

    let ledger = Ledger::open(&path).await.unwrap();
    // (Read by id: `stages()` joins the experiments this test left out.)
    let approved = ledger.stage(StageId(1)).await.unwrap();
    assert_eq!(approved.state, StageState::Approved);
    let at = Utc.with_ymd_and_hms(2026, 12, 1, 1, 0, 0).unwrap();
    assert!(
        matches!(approved.apply(), StageApply::Applied { at: a, by, .. } if a == at && by.contains("stage approve")),
        "{:?}",
        approved.apply()
    );
    let staged = ledger.stage(StageId(2)).await.unwrap();
    assert_eq!(staged.apply(), StageApply::NotApproved);
    assert!(ledger.stages_to_apply().await.unwrap().is_empty());
}
