//! Realizations: the A/B of an applied stage on the live server, recorded
//! beside its stage, the first decided one its realized effect, kept out
//! of what the proposers read; the daemon's note; on both backends.

use super::*;

fn scope(name: &str) -> StackScope {
    StackScope {
        name: name.into(),
        class: None,
    }
}

/// A stage of `ledger`'s stack from profile `base` to profile 200,
/// approved and applied.
async fn applied_stage(ledger: &Ledger, base: u8) -> Stage {
    let id = applied(ledger, base).await;
    ledger.stage(id).await.unwrap()
}

/// One realization attempt of `stage` in a cycle of its own, ended with
/// `verdict` (none: still running), its cycle closed as `outcome`.
async fn attempt(
    ledger: &Ledger,
    stage: &Stage,
    base: u8,
    verdict: Option<NewVerdict>,
    outcome: CycleOutcome,
) -> ExperimentId {
    let cycle = ledger
        .open_cycle(t(400), ProposerKind::Bandit)
        .await
        .unwrap();
    let e = NewExperiment {
        method: Method::Surface,
        ..experiment(cycle, base, 200)
    };
    let id = ledger.insert_realization(stage, &e).await.unwrap();
    if let Some(v) = verdict {
        ledger.insert_verdict(id, &v).await.unwrap();
        ledger.close_cycle(cycle, &outcome, t(500)).await.unwrap();
    }
    id
}

#[tokio::test]
async fn a_realization_is_recorded_beside_its_stage_and_kept_from_the_proposers() {
    for ledger in backends().await {
        let a = ledger.clone().scoped(scope("box-a"));
        let b = ledger.clone().scoped(scope("box-b"));
        let stage = applied_stage(&a, 1).await;
        // The stage whose profile is live, for its own stack only.
        assert_eq!(
            a.live_stage(&digest(200)).await.unwrap(),
            Some(stage.clone())
        );
        assert_eq!(a.live_stage(&digest(1)).await.unwrap(), None);
        assert_eq!(b.live_stage(&digest(200)).await.unwrap(), None);
        assert_eq!(
            a.stage_realization(stage.id).await.unwrap(),
            Default::default()
        );

        // An experiment that is not the stage's change is no realization of it.
        let cycle = a.open_cycle(t(390), ProposerKind::Bandit).await.unwrap();
        let wrong = experiment(cycle, 2, 200);
        assert!(matches!(
            a.insert_realization(&stage, &wrong).await,
            Err(LedgerError::NotItsRealization { .. })
        ));
        a.close_cycle(cycle, &CycleOutcome::Completed, t(391))
            .await
            .unwrap();

        let failed = attempt(
            &a,
            &stage,
            1,
            Some(refusal(VerdictKind::Failed, "the shadow did not start")),
            CycleOutcome::Failed("the shadow did not start".into()),
        )
        .await;
        let r = a.stage_realization(stage.id).await.unwrap();
        assert_eq!(r.attempts.len(), 1);
        assert!(r.attempts[0].spent() && r.realized().is_none() && r.open());
        let lost = attempt(
            &a,
            &stage,
            1,
            Some(measured(VerdictKind::Loss, 0.12, 0.05, 0.2)),
            CycleOutcome::Completed,
        )
        .await;
        let r = a.stage_realization(stage.id).await.unwrap();
        let realized = r.realized().unwrap();
        assert_eq!(
            (realized.experiment_id, realized.verdict, realized.effect),
            (lost, Some(VerdictKind::Loss), Some(0.12))
        );
        assert_eq!(
            realized.interval,
            Some(Interval {
                low: 0.05,
                high: 0.2
            })
        );
        assert!(!r.open() && !r.given_up());
        assert_eq!(a.realizations().await.unwrap()[&stage.id].attempts.len(), 2);
        assert!(b.realizations().await.unwrap().is_empty());

        // Not a proposal: not in the history, not a duplicate, not a lever.
        let recent: Vec<ExperimentId> = a
            .recent_experiments(50)
            .await
            .unwrap()
            .iter()
            .map(|e| e.experiment_id)
            .collect();
        assert!(
            !recent.contains(&failed) && !recent.contains(&lost),
            "{recent:?}"
        );
        assert!(recent.contains(&stage.experiment_id));
        let on_base: Vec<ExperimentId> = a
            .decided_on(&digest(1))
            .await
            .unwrap()
            .iter()
            .map(|d| d.experiment_id)
            .collect();
        assert!(!on_base.contains(&lost), "{on_base:?}");
        let prior = a
            .already_decided(
                MenuId::StageSpeculative,
                &json!({"draft_len": 4}),
                &digest(1),
            )
            .await
            .unwrap()
            .unwrap();
        assert_ne!(prior.experiment_id, lost);

        // A revert asked for (waiting or written) takes the stage off the live profile.
        let mut tx = a.begin_write().await.unwrap();
        assert!(
            tx.request_revert(stage.id, "bob", "slower live", t(600))
                .await
                .unwrap()
        );
        tx.commit().await.unwrap();
        assert_eq!(a.live_stage(&digest(200)).await.unwrap(), None);
    }
}

#[tokio::test]
async fn attempts_that_ran_to_their_end_are_given_up_after_three_and_notes_change_once() {
    for ledger in backends().await {
        let a = ledger.clone().scoped(scope("box-a"));
        let stage = applied_stage(&a, 1).await;
        // Cut short by a shutdown: not spent.
        attempt(
            &a,
            &stage,
            1,
            Some(refusal(VerdictKind::Failed, "aborted: shutdown")),
            CycleOutcome::Aborted("shutdown".into()),
        )
        .await;
        // Still running: neither.
        let cycle = attempt(&a, &stage, 1, None, CycleOutcome::Completed).await;
        let r = a.stage_realization(stage.id).await.unwrap();
        assert!(r.attempts.iter().all(|x| !x.spent()), "{r:?}");
        assert_eq!(r.attempts[1].experiment_id, cycle);
        // Neither holds the next attempt back.
        let hour = chrono::Duration::hours(1);
        assert_eq!(r.retry_at(hour), None);
        a.abort_running_cycles("test", t(450)).await.unwrap();
        let r = a.stage_realization(stage.id).await.unwrap();
        assert_eq!(r.retry_at(hour), None, "a shutdown spoiled nothing: {r:?}");
        for n in 0..MAX_REALIZATION_ATTEMPTS {
            let r = a.stage_realization(stage.id).await.unwrap();
            assert!(r.open());
            // After an attempt that decided nothing, the next waits the
            // back-off from when it ended (its verdict's time, t(100)).
            let held = r.retry_at(hour).map(|(at, last)| (at, last.experiment_id));
            let last = r.attempts.last().unwrap().experiment_id;
            assert_eq!(held, (n > 0).then_some((t(100) + hour, last)), "{r:?}");
            attempt(
                &a,
                &stage,
                1,
                Some(measured(VerdictKind::Inconclusive, 0.01, -0.3, 0.3)),
                CycleOutcome::Completed,
            )
            .await;
        }
        let r = a.stage_realization(stage.id).await.unwrap();
        assert!(r.given_up() && !r.open() && r.realized().is_none(), "{r:?}");
        assert_eq!(r.retry_at(hour), None, "given up: nothing is due");

        assert!(
            a.note_realization(stage.id, "the live server runs another profile", t(700))
                .await
                .unwrap()
        );
        assert!(
            !a.note_realization(stage.id, "the live server runs another profile", t(710))
                .await
                .unwrap()
        );
        let note = a.stage_realization(stage.id).await.unwrap().note.unwrap();
        assert_eq!(note.noted_at, t(700), "the same note keeps its first time");
        assert!(
            a.note_realization(stage.id, "no [stack.shadow]", t(720))
                .await
                .unwrap()
        );
        let note = a.stage_realization(stage.id).await.unwrap().note.unwrap();
        assert_eq!(
            (note.note.as_str(), note.noted_at),
            ("no [stack.shadow]", t(720))
        );
        assert_eq!(a.realizations().await.unwrap()[&stage.id].note, Some(note));
    }
}
