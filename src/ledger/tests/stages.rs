//! Staging a confirmed win, listing and showing stages, and deciding them once.

use super::*;

/// Records `v` for `id` and returns it as the win it is.
async fn recorded_win(tx: &mut WriteTx, id: ExperimentId, v: &NewVerdict) -> RecordedWin {
    tx.insert_verdict(id, v).await.unwrap();
    RecordedWin::of(id, v).unwrap()
}

#[tokio::test]
async fn a_stage_is_refused_unless_the_ledger_holds_its_two_wins_as_given() {
    for ledger in backends().await {
        let mut tx = ledger.begin_write().await.unwrap();
        let cycle = tx.open_cycle(t(0), ProposerKind::Model).await.unwrap();
        let first = tx
            .insert_experiment(&experiment(cycle, 1, 2))
            .await
            .unwrap();
        let won = measured(VerdictKind::Win, -0.2, -0.3, -0.1);
        let win = recorded_win(&mut tx, first, &won).await;
        let again = measured(VerdictKind::Win, -0.15, -0.25, -0.05);
        let refused = |e: LedgerError| matches!(e, LedgerError::NotStageable { .. });

        // A win that does not confirm it, on the same profiles.
        let unrelated = tx
            .insert_experiment(&experiment(cycle, 1, 2))
            .await
            .unwrap();
        let other = recorded_win(&mut tx, unrelated, &again).await;
        let err = tx.insert_stage(&win, &other, t(5)).await.unwrap_err();
        assert!(refused(err), "not its confirmation");

        // Its confirmation, but of another candidate.
        let elsewhere = tx
            .insert_experiment(&NewExperiment {
                confirmation_of: Some(first),
                ..experiment(cycle, 1, 3)
            })
            .await
            .unwrap();
        let other = recorded_win(&mut tx, elsewhere, &again).await;
        let err = tx.insert_stage(&win, &other, t(5)).await.unwrap_err();
        assert!(refused(err), "another candidate");

        let confirmation = tx
            .insert_experiment(&NewExperiment {
                confirmation_of: Some(first),
                ..experiment(cycle, 1, 2)
            })
            .await
            .unwrap();
        let claimed = RecordedWin::of(confirmation, &again).unwrap();
        // No verdict recorded yet.
        let err = tx.insert_stage(&win, &claimed, t(5)).await.unwrap_err();
        assert!(refused(err), "no verdict yet");
        // Another verdict recorded than the win given.
        tx.insert_verdict(
            confirmation,
            &measured(VerdictKind::Inconclusive, -0.15, -0.25, -0.05),
        )
        .await
        .unwrap();
        let err = tx.insert_stage(&win, &claimed, t(5)).await.unwrap_err();
        assert!(
            err.to_string().contains(&format!(
                "experiment {first} cannot be staged on experiment {confirmation}"
            )),
            "{err}"
        );

        // A recorded win, but other statistics than the ones given, on
        // either side.
        let second = tx
            .insert_experiment(&NewExperiment {
                confirmation_of: Some(first),
                ..experiment(cycle, 1, 2)
            })
            .await
            .unwrap();
        let confirmed = recorded_win(&mut tx, second, &again).await;
        let overstated = measured(VerdictKind::Win, -0.3, -0.4, -0.2);
        let overstated = RecordedWin::of(second, &overstated).unwrap();
        let err = tx.insert_stage(&win, &overstated, t(5)).await.unwrap_err();
        assert!(refused(err), "the confirmation's figures differ");
        let bound = NewVerdict {
            noise_floor: Some(0.5),
            ..won.clone()
        };
        let err = tx
            .insert_stage(&RecordedWin::of(first, &bound).unwrap(), &confirmed, t(5))
            .await
            .unwrap_err();
        assert!(refused(err), "the first win's floor differs");
        tx.commit().await.unwrap();
        assert!(ledger.stages(None).await.unwrap().is_empty());

        // The two wins as recorded: staged with the confirmation's figures.
        let id = ledger.insert_stage(&win, &confirmed, t(5)).await.unwrap();
        let stage = ledger.stage(id).await.unwrap();
        assert_eq!(
            (stage.experiment_id, stage.confirmation_id),
            (first, second)
        );
        assert_eq!(
            (stage.effect, stage.interval, stage.noise_floor),
            (-0.15, confirmed.interval(), 0.02)
        );
    }
}

/// A confirmation judged against the bound stages the bound as its floor,
/// as its verdict recorded it.
#[tokio::test]
async fn a_win_confirmed_against_the_bound_stages_the_bound() {
    for ledger in backends().await {
        let mut tx = ledger.begin_write().await.unwrap();
        let cycle = tx.open_cycle(t(0), ProposerKind::Model).await.unwrap();
        let first = tx
            .insert_experiment(&experiment(cycle, 1, 2))
            .await
            .unwrap();
        let win = recorded_win(
            &mut tx,
            first,
            &measured(VerdictKind::Win, -0.2, -0.3, -0.1),
        )
        .await;
        let second = tx
            .insert_experiment(&NewExperiment {
                confirmation_of: Some(first),
                ..experiment(cycle, 1, 2)
            })
            .await
            .unwrap();
        let against_bound = NewVerdict {
            noise_floor: Some(0.405),
            floor_is_bound: true,
            ..measured(VerdictKind::Win, -0.9, -1.7, -0.1)
        };
        let confirmed = recorded_win(&mut tx, second, &against_bound).await;
        let id = tx.insert_stage(&win, &confirmed, t(5)).await.unwrap();
        tx.commit().await.unwrap();
        let listed = ledger.stages(None).await.unwrap();
        assert_eq!(listed[0].id, id);
        assert_eq!(listed[0].noise_floor, 0.405);
        assert!(listed[0].floor_is_bound);
    }
}

#[tokio::test]
async fn stage_round_trip_list_and_show() {
    for ledger in backends().await {
        let (id, first, second) = staged_win(&ledger, 1).await;
        let stage = ledger.stage(id).await.unwrap();
        assert_eq!(
            stage,
            Stage {
                id,
                experiment_id: first,
                confirmation_id: second,
                state: StageState::Staged,
                base_digest: digest(1),
                candidate_digest: digest(200),
                candidate_profile: "# profile 200\n".into(),
                // The confirmation's estimate, not the first win's.
                effect: -0.15,
                interval: Interval {
                    low: -0.25,
                    high: -0.05
                },
                noise_floor: 0.02,
                created_at: t(200),
                decided_at: None,
                decided_by: None,
                note: None,
                stack: None,
                applied_at: None,
                applied_by: None,
                applied_to: None,
                apply_refusal: None,
                apply_refused_at: None,
                confirmed_by_stack: None,
                approved_for_class: None,
                restarted_at: None,
            }
        );

        let staged = ledger.stages(Some(StageState::Staged)).await.unwrap();
        assert_eq!(staged.len(), 1);
        assert_eq!(staged[0].id, id);
        assert_eq!(staged[0].menu_id, MenuId::StageSpeculative);
        assert_eq!(staged[0].parameters, json!({"draft_len": 4}));
        assert_eq!(staged[0].base_digest, digest(1));
        assert_eq!(staged[0].age(t(260)), chrono::Duration::seconds(60));
        assert!(
            ledger
                .stages(Some(StageState::Approved))
                .await
                .unwrap()
                .is_empty()
        );

        let detail = ledger.stage_detail(id).await.unwrap();
        assert_eq!(detail.stage, stage);
        assert_eq!(detail.experiment.id, first);
        assert_eq!(detail.confirmation.id, second);
        assert_eq!(detail.confirmation.confirmation_of, Some(first));
        assert_eq!(detail.runs.len(), 4);
        assert_eq!(detail.confirmation_runs.len(), 4);
        assert!(detail.runs.iter().all(|r| r.experiment_id == first));
        assert_eq!(
            detail.runs.iter().map(|r| r.arm).collect::<Vec<_>>(),
            vec![Arm::Baseline, Arm::Candidate, Arm::Candidate, Arm::Baseline]
        );
        assert_eq!(detail.verdict.kind, VerdictKind::Win);
        assert_eq!(detail.confirmation_verdict.effect, Some(-0.15));
        assert_eq!(ledger.confirmations(first).await.unwrap()[0].id, second);
    }
}

#[tokio::test]
async fn a_stage_is_decided_once_and_the_refusal_names_the_first_decider() {
    for ledger in backends().await {
        let (id, _, _) = staged_win(&ledger, 1).await;
        ledger
            .decide_stage(
                id,
                StageDecision::Approved,
                "alice",
                Some("looks right"),
                t(400),
            )
            .await
            .unwrap();
        let err = ledger
            .decide_stage(id, StageDecision::Rejected, "bob", Some("no"), t(500))
            .await
            .unwrap_err();
        match &err {
            LedgerError::StageAlreadyDecided {
                id: got,
                state,
                by,
                at,
            } => {
                assert_eq!(*got, id);
                assert_eq!(*state, StageState::Approved);
                assert_eq!(by, "alice");
                assert_eq!(*at, t(400));
            }
            other => panic!("expected StageAlreadyDecided, got {other:?}"),
        }
        let msg = err.to_string();
        assert!(msg.contains("approved by alice"), "{msg}");
        let stage = ledger.stage(id).await.unwrap();
        assert_eq!(stage.state, StageState::Approved);
        assert_eq!(stage.decided_by.as_deref(), Some("alice"));
        assert_eq!(stage.note.as_deref(), Some("looks right"));
        assert_eq!(stage.decided_at, Some(t(400)));

        let mut expire = ledger.begin_write().await.unwrap();
        let err = expire
            .expire_stage(id, "base changed", t(600))
            .await
            .unwrap_err();
        assert!(
            matches!(err, LedgerError::StageAlreadyDecided { .. }),
            "{err:?}"
        );
        drop(expire);

        let (other, _, _) = staged_win(&ledger, 2).await;
        let silent = ledger
            .decide_stage(other, StageDecision::Rejected, "bob", None, t(500))
            .await
            .unwrap_err();
        assert!(
            matches!(silent, LedgerError::RejectionNeedsReason { .. }),
            "{silent:?}"
        );
        assert_eq!(ledger.stage(other).await.unwrap().state, StageState::Staged);

        let missing = ledger
            .decide_stage(StageId(77), StageDecision::Approved, "alice", None, t(1))
            .await
            .unwrap_err();
        assert!(
            missing.to_string().contains("stage 77 does not exist"),
            "{missing}"
        );
    }
}

#[tokio::test]
async fn stages_on_an_old_base_expire() {
    for ledger in backends().await {
        let (on_old, _, _) = staged_win(&ledger, 1).await;
        let (on_live, _, _) = staged_win(&ledger, 2).await;
        let expired = ledger
            .expire_stale_stages(&digest(2), "the live profile changed", t(900))
            .await
            .unwrap();
        assert_eq!(expired, vec![on_old]);
        let old = ledger.stage(on_old).await.unwrap();
        assert_eq!(old.state, StageState::Expired);
        assert_eq!(old.decided_by.as_deref(), Some("orchestrator"));
        assert_eq!(old.note.as_deref(), Some("the live profile changed"));
        assert_eq!(
            ledger.stage(on_live).await.unwrap().state,
            StageState::Staged
        );

        let mut tx = ledger.begin_write().await.unwrap();
        tx.expire_stage(on_live, "base is gone", t(950))
            .await
            .unwrap();
        tx.commit().await.unwrap();
        assert_eq!(
            ledger.stage(on_live).await.unwrap().state,
            StageState::Expired
        );
        assert_eq!(
            ledger
                .stages(Some(StageState::Expired))
                .await
                .unwrap()
                .len(),
            2
        );
    }
}

#[tokio::test]
async fn a_win_built_on_a_waiting_win_stays_while_it_waits_and_goes_with_it() {
    for ledger in backends().await {
        // Live is profile 1; the waiting win takes it to 3, and a win
        // measured on top of that (`[cycle] build_on_staged`) to 4.
        let (under, _, _) = staged_win_on(&ledger, 1, 3).await;
        let (on_top, _, _) = staged_win_on(&ledger, 3, 4).await;
        let (old, _, _) = staged_win_on(&ledger, 5, 6).await;
        let expired = ledger
            .expire_stale_stages(&digest(1), "the live profile changed", t(900))
            .await
            .unwrap();
        assert_eq!(expired, vec![old]);
        assert_eq!(
            ledger.stage(on_top).await.unwrap().state,
            StageState::Staged
        );

        // The waiting win approved: the one on top is now on the live base.
        let expired = ledger
            .expire_stale_stages(&digest(3), "the live profile changed", t(910))
            .await
            .unwrap();
        assert_eq!(expired, vec![under]);
        assert_eq!(
            ledger.stage(on_top).await.unwrap().state,
            StageState::Staged
        );

        // Another profile live: the chain has nothing to stand on.
        let expired = ledger
            .expire_stale_stages(&digest(7), "the live profile changed", t(920))
            .await
            .unwrap();
        assert_eq!(expired, vec![on_top]);
    }
}

#[test]
fn only_chains_that_start_at_the_live_profile_are_kept() {
    use crate::ledger::stage_expiry::stale_stages;
    let d = |n| digest(n);
    // 1 -> 2 -> 3 is a chain from live 1; 4 <-> 5 build on each other but on
    // nothing live, so neither keeps the other.
    let staged = vec![
        (StageId(10), d(2), d(3)),
        (StageId(11), d(1), d(2)),
        (StageId(12), d(4), d(5)),
        (StageId(13), d(5), d(4)),
    ];
    assert_eq!(stale_stages(&d(1), &staged), vec![StageId(12), StageId(13)]);
    assert_eq!(
        stale_stages(&d(9), &staged),
        vec![StageId(10), StageId(11), StageId(12), StageId(13)]
    );
}

#[test]
fn a_rejected_win_takes_the_wins_built_on_it_and_no_other() {
    use crate::ledger::stage_expiry::built_on;
    let d = |n| digest(n);
    // Rejected: 1 -> 2. Built on it: 2 -> 3 and 3 -> 4. Beside it on the
    // live profile: 1 -> 5. Back to the rejected win's base, 3 -> 1, is
    // built on it; 1 -> 5 is not, though 3 -> 1 leads there.
    let staged = vec![
        (StageId(20), d(2), d(3)),
        (StageId(21), d(3), d(4)),
        (StageId(22), d(1), d(5)),
        (StageId(23), d(3), d(1)),
    ];
    assert_eq!(
        built_on(&d(1), &d(2), &staged),
        vec![StageId(20), StageId(21), StageId(23)]
    );
    // A win with nothing on top of it takes nothing.
    assert_eq!(built_on(&d(1), &d(5), &staged), Vec::<StageId>::new());
}

#[tokio::test]
async fn rejecting_a_waiting_win_expires_what_was_measured_on_top_of_it() {
    for ledger in backends().await {
        let (under, _, _) = staged_win_on(&ledger, 1, 3).await;
        let (on_top, _, _) = staged_win_on(&ledger, 3, 4).await;
        let (beside, _, _) = staged_win_on(&ledger, 1, 5).await;
        let mut tx = ledger.begin_write().await.unwrap();
        tx.decide_stage(
            under,
            crate::ledger::StageDecision::Rejected,
            "a person",
            Some("not now"),
            t(900),
        )
        .await
        .unwrap();
        let expired = tx
            .expire_built_on(under, "measured on top of a rejected win", t(900))
            .await
            .unwrap();
        tx.commit().await.unwrap();
        assert_eq!(expired, vec![on_top]);
        let on_top = ledger.stage(on_top).await.unwrap();
        assert_eq!(on_top.state, StageState::Expired);
        assert_eq!(
            on_top.note.as_deref(),
            Some("measured on top of a rejected win")
        );
        assert_eq!(
            ledger.stage(beside).await.unwrap().state,
            StageState::Staged
        );
    }
}
