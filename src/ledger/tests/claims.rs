//! Hosts of one class confirm each other (issue #18 item 4): which wins a
//! classmate may confirm, and the claim that lets exactly one stack do it.

use super::*;

fn scope(name: &str, class: Option<&str>) -> StackScope {
    StackScope {
        name: name.into(),
        class: class.map(Into::into),
    }
}

/// A measured experiment of `base` → `candidate` in a new cycle of
/// `ledger`'s stack, with `kind` as its verdict.
async fn measured_on(ledger: &Ledger, base: u8, candidate: u8, kind: VerdictKind) -> ExperimentId {
    let mut tx = ledger.begin_write().await.unwrap();
    let cycle = tx.open_cycle(t(0), ProposerKind::Bandit).await.unwrap();
    let id = tx
        .insert_experiment(&experiment(cycle, base, candidate))
        .await
        .unwrap();
    abba(&mut tx, id).await;
    tx.insert_verdict(id, &measured(kind, -0.2, -0.3, -0.1))
        .await
        .unwrap();
    tx.close_cycle(cycle, &CycleOutcome::Completed, t(120))
        .await
        .unwrap();
    tx.commit().await.unwrap();
    id
}

/// `ledger`'s confirmation of `win`, in a new cycle of its stack, as the
/// loop claims it: `None` when another stack holds the claim.
async fn claim(ledger: &Ledger, win: ExperimentId) -> Option<(CycleId, ExperimentId)> {
    let cycle = ledger
        .open_cycle(t(150), ProposerKind::Bandit)
        .await
        .unwrap();
    let confirmation = NewExperiment {
        confirmation_of: Some(win),
        created_at: t(160),
        ..experiment(cycle, 1, 200)
    };
    let id = ledger
        .claim_confirmation(win, &confirmation, t(160))
        .await
        .unwrap()?;
    Some((cycle, id))
}

#[tokio::test]
async fn a_classmate_finds_an_unconfirmed_win_on_its_live_profile_only() {
    for ledger in backends().await {
        let a = ledger.clone().scoped(scope("box-a", Some("spark")));
        let b = ledger.clone().scoped(scope("box-b", Some("spark")));
        let other_class = ledger.clone().scoped(scope("box-c", Some("dgx")));
        let classless = ledger.clone().scoped(scope("box-d", None));

        let win = measured_on(&a, 1, 200, VerdictKind::Win).await;
        // Not for box-b: a loss, a win on another base, another class's win.
        measured_on(&a, 1, 201, VerdictKind::Loss).await;
        measured_on(&a, 2, 202, VerdictKind::Win).await;
        measured_on(&other_class, 1, 203, VerdictKind::Win).await;
        let ids = |l: Vec<Experiment>| l.iter().map(|e| e.id).collect::<Vec<_>>();

        assert_eq!(
            ids(b.classmate_wins(&digest(1), 16).await.unwrap()),
            vec![win]
        );
        // A stack's own win is not a classmate's; the other class sees
        // none of spark's; a stack without a class takes no part.
        assert!(a.classmate_wins(&digest(1), 16).await.unwrap().is_empty());
        assert!(
            other_class
                .classmate_wins(&digest(1), 16)
                .await
                .unwrap()
                .is_empty()
        );
        assert!(
            classless
                .classmate_wins(&digest(1), 16)
                .await
                .unwrap()
                .is_empty()
        );

        // Once claimed, the win is no classmate's to confirm any more.
        claim(&b, win).await.expect("the first claim");
        assert!(b.classmate_wins(&digest(1), 16).await.unwrap().is_empty());
        let taken = ledger.confirmation_claim(win).await.unwrap().unwrap();
        assert_eq!(taken.stack.as_deref(), Some("box-b"));
        assert!(!taken.interrupted);
    }
}

#[tokio::test]
async fn two_stacks_claiming_one_win_at_once_exactly_one_confirms_it() {
    for ledger in backends().await {
        let a = ledger.clone().scoped(scope("box-a", Some("spark")));
        let b = ledger.clone().scoped(scope("box-b", Some("spark")));
        let win = measured_on(&a, 1, 200, VerdictKind::Win).await;

        let start = Arc::new(Barrier::new(2));
        let race = |l: Ledger| {
            let start = start.clone();
            tokio::spawn(async move {
                start.wait().await;
                claim(&l, win).await
            })
        };
        let (from_a, from_b) = (race(a.clone()), race(b.clone()));
        let (from_a, from_b) = (from_a.await.unwrap(), from_b.await.unwrap());
        assert!(
            from_a.is_some() != from_b.is_some(),
            "exactly one claim wins: {from_a:?} {from_b:?}"
        );
        let (winner, loser) = if from_a.is_some() { (&a, &b) } else { (&b, &a) };
        let (cycle, confirmation) = from_a.or(from_b).unwrap();
        // The loser recorded no confirmation experiment.
        assert_eq!(ledger.confirmations(win).await.unwrap().len(), 1);
        let held = ledger.confirmation_claim(win).await.unwrap().unwrap();
        assert_eq!(
            held.stack.as_deref(),
            Some(winner.scope().unwrap().name.as_str())
        );
        assert_eq!(held.confirmation_id, confirmation);
        assert!(claim(loser, win).await.is_none(), "a held claim is held");

        // The winner's confirmation is cut short (a shutdown): the claim
        // may be taken over, and the loser takes it.
        ledger
            .insert_verdict(
                confirmation,
                &refusal(VerdictKind::Failed, "aborted: shutdown"),
            )
            .await
            .unwrap();
        ledger
            .close_cycle(cycle, &CycleOutcome::Aborted("shutdown".into()), t(170))
            .await
            .unwrap();
        assert!(
            ledger
                .confirmation_claim(win)
                .await
                .unwrap()
                .unwrap()
                .interrupted
        );
        let (_, retaken) = claim(loser, win)
            .await
            .expect("an interrupted claim is free");
        let held = ledger.confirmation_claim(win).await.unwrap().unwrap();
        assert_eq!(
            (
                held.stack.as_deref(),
                held.confirmation_id,
                held.interrupted
            ),
            (Some(loser.scope().unwrap().name.as_str()), retaken, false)
        );
        assert!(claim(winner, win).await.is_none());
        // A claim's experiment must confirm the claimed win.
        let cycle = a.open_cycle(t(180), ProposerKind::Bandit).await.unwrap();
        let err = a
            .claim_confirmation(win, &experiment(cycle, 1, 200), t(180))
            .await
            .unwrap_err();
        assert!(
            matches!(err, LedgerError::NotItsConfirmation { .. }),
            "{err}"
        );
    }
}

#[tokio::test]
async fn a_stage_confirmed_by_a_classmate_is_the_wins_stack_and_says_who_confirmed() {
    for ledger in backends().await {
        let a = ledger.clone().scoped(scope("box-a", Some("spark")));
        let b = ledger.clone().scoped(scope("box-b", Some("spark")));
        let win = measured_on(&a, 1, 200, VerdictKind::Win).await;
        let (cycle, confirmation) = claim(&b, win).await.unwrap();
        let mut tx = b.begin_write().await.unwrap();
        abba(&mut tx, confirmation).await;
        let confirmed = measured(VerdictKind::Win, -0.15, -0.25, -0.05);
        tx.insert_verdict(confirmation, &confirmed).await.unwrap();
        tx.close_cycle(cycle, &CycleOutcome::Completed, t(190))
            .await
            .unwrap();
        tx.commit().await.unwrap();
        // The win as its own stack recorded it, read once, as the loop does.
        let won = b.verdict(win).await.unwrap().unwrap();
        let id = b
            .insert_stage(
                &RecordedWin::of(win, &won).unwrap(),
                &RecordedWin::of(confirmation, &confirmed).unwrap(),
                t(200),
            )
            .await
            .unwrap();

        let stage = ledger.stage(id).await.unwrap();
        assert_eq!(stage.stack.as_deref(), Some("box-a"));
        assert_eq!(stage.confirmed_by_stack.as_deref(), Some("box-b"));
        assert_eq!(stage.confirmed_elsewhere(), Some("box-b"));
        // box-a lists it (its stack), box-b does not.
        let listed = a.stages(Some(StageState::Staged)).await.unwrap();
        assert_eq!(listed.len(), 1);
        assert_eq!(
            (
                listed[0].confirmed_elsewhere(),
                listed[0].confirmed_in_class.as_deref()
            ),
            (Some("box-b"), Some("spark"))
        );
        assert!(b.stages(None).await.unwrap().is_empty());
        assert_eq!(
            ledger
                .stage_detail(id)
                .await
                .unwrap()
                .confirmed_in_class
                .as_deref(),
            Some("spark")
        );
        // A stage its own stack confirmed names no classmate.
        let (own, _, _) = staged_win(&a, 1).await;
        assert_eq!(ledger.stage(own).await.unwrap().confirmed_elsewhere(), None);
        // `ledger --check` from either host accepts both.
        for host in [&a, &b] {
            assert_eq!(host.check(&CheckContext::default()).await.unwrap(), vec![]);
        }
    }
}
