//! Stacks sharing one ledger (issue #18): a scoped handle writes its stack
//! on every cycle and stage, and recovers, lists and expires its own only.

use super::*;

fn scope(name: &str, class: Option<&str>) -> StackScope {
    StackScope {
        name: name.into(),
        class: class.map(Into::into),
    }
}

#[tokio::test]
async fn each_stack_recovers_lists_and_expires_only_its_own_rows() {
    for ledger in backends().await {
        let a = ledger.clone().scoped(scope("box-a", Some("spark")));
        let b = ledger.clone().scoped(scope("box-b", Some("spark")));
        let (stage_a, _, _) = staged_win(&a, 1).await;
        let (stage_b, _, _) = staged_win(&b, 1).await;
        assert_eq!(
            a.stage(stage_a).await.unwrap().stack.as_deref(),
            Some("box-a")
        );
        assert_eq!(
            b.stage(stage_b).await.unwrap().stack.as_deref(),
            Some("box-b")
        );

        let running_a = a.open_cycle(t(400), ProposerKind::Bandit).await.unwrap();
        let running_b = b.open_cycle(t(400), ProposerKind::Bandit).await.unwrap();
        let rec = a.cycle(running_a).await.unwrap();
        assert_eq!(
            (rec.stack.as_deref(), rec.class.as_deref()),
            (Some("box-a"), Some("spark"))
        );
        // box-a restarting after a crash must not abort box-b's live cycle.
        assert_eq!(a.abort_running_cycles("crashed", t(500)).await.unwrap(), 1);
        assert_eq!(
            a.cycle(running_a).await.unwrap().status,
            CycleStatus::Aborted
        );
        assert_eq!(
            b.cycle(running_b).await.unwrap().status,
            CycleStatus::Running
        );

        // Each lists its own stages; the unscoped handle (the CLI) sees both.
        let ids = |l: Vec<StageSummary>| l.iter().map(|s| s.id).collect::<Vec<_>>();
        assert_eq!(
            ids(a.stages(Some(StageState::Staged)).await.unwrap()),
            vec![stage_a]
        );
        assert_eq!(ids(b.stages(None).await.unwrap()), vec![stage_b]);
        assert_eq!(ledger.stages(None).await.unwrap().len(), 2);

        // box-a's live profile moving on expires box-a's stage, not box-b's.
        let mut tx = a.begin_write().await.unwrap();
        let expired = tx
            .expire_stale_stages(&digest(9), "the live profile changed", t(600))
            .await
            .unwrap();
        tx.commit().await.unwrap();
        assert_eq!(expired, vec![stage_a]);
        assert_eq!(b.stage(stage_b).await.unwrap().state, StageState::Staged);
    }
}

#[tokio::test]
async fn rows_from_before_stacks_were_recorded_go_to_the_first_scoped_daemon() {
    for ledger in backends().await {
        let (old_stage, _, _) = staged_win(&ledger, 1).await;
        let old_cycle = ledger
            .open_cycle(t(400), ProposerKind::Model)
            .await
            .unwrap();
        // An unscoped handle adopts nothing.
        assert_eq!(ledger.adopt_unowned().await.unwrap(), Adopted::default());
        let a = ledger.clone().scoped(scope("desk", None));
        assert_eq!(
            a.adopt_unowned().await.unwrap(),
            Adopted {
                cycles: 2,
                stages: 1
            }
        );
        assert_eq!(
            a.cycle(old_cycle).await.unwrap().stack.as_deref(),
            Some("desk")
        );
        assert_eq!(
            a.stage(old_stage).await.unwrap().stack.as_deref(),
            Some("desk")
        );
        // A second daemon finds nothing left to adopt.
        let b = ledger.clone().scoped(scope("other", None));
        assert_eq!(b.adopt_unowned().await.unwrap(), Adopted::default());
        assert!(b.stages(None).await.unwrap().is_empty());
    }
}

/// What one stack's daemon wrote in [`history`].
struct History {
    /// An unconfirmed win on base 1: the next cycle's confirmation.
    win: ExperimentId,
    /// The cycle in which the planner refused `refused`.
    refusal_cycle: CycleId,
}

/// The proposal the planner refuses in every stack's history.
fn refused() -> serde_json::Value {
    json!({"experiment": "rebalance_trunk_cache", "params": {"trunk_fraction": 0.8}})
}

/// One stack's cycles as its daemon writes them, on the live profile
/// `digest(1)` (identical hosts: the same profile, the same experiment): a
/// proposed win with its runs (each run's contention and wall time `load`,
/// its CPU pressure `load` percent, so whose runs a read returned shows), a composition tried
/// on that base, and a proposal the planner refused.
async fn history(l: &Ledger, at: i64, load: f64) -> History {
    let observe = |cycle_id| NewObservation {
        cycle_id,
        observed_at: t(at + 1),
        metrics: json!({}),
        heat: None,
        live_profile_digest: digest(1),
        base_profile_digest: digest(1),
    };
    let proposal = |cycle_id, parsed| NewProposal {
        cycle_id,
        proposer: ProposerKind::Bandit,
        attempt: 1,
        created_at: t(at + 1),
        prompt: None,
        raw_answer: None,
        parsed: Some(parsed),
        rejection: None,
        note: None,
    };
    let mut tx = l.begin_write().await.unwrap();
    let cycle = tx.open_cycle(t(at), ProposerKind::Bandit).await.unwrap();
    tx.insert_observation(&observe(cycle)).await.unwrap();
    let p = tx
        .insert_proposal(&proposal(
            cycle,
            json!({"experiment": "stage_speculative", "params": {"draft_len": 4}}),
        ))
        .await
        .unwrap();
    let win = tx
        .insert_experiment(&NewExperiment {
            proposal_id: Some(p),
            ..experiment(cycle, 1, 200)
        })
        .await
        .unwrap();
    let arms = [Arm::Baseline, Arm::Candidate, Arm::Candidate, Arm::Baseline];
    for (i, arm) in arms.into_iter().enumerate() {
        let order = u32::try_from(i).unwrap();
        let mut r = run(win, arm, order, Some(order / 2));
        r.pressure.cpu_pressure = Some(load / 100.0);
        r.pressure.contention = Some(load);
        r.duration_s = load;
        tx.insert_run(&r).await.unwrap();
    }
    tx.insert_verdict(win, &measured(VerdictKind::Win, -0.2, -0.3, -0.1))
        .await
        .unwrap();
    tx.close_cycle(cycle, &CycleOutcome::Completed, t(at + 50))
        .await
        .unwrap();
    tx.commit().await.unwrap();
    l.insert_composition(&NewComposition {
        cycle_id: cycle,
        created_at: t(at + 2),
        base_digest: digest(1),
        experiment_id: None,
        refusal: Some("the pre-flight refused it".into()),
        parts: vec![],
    })
    .await
    .unwrap();

    let refusal_cycle = l
        .open_cycle(t(at + 60), ProposerKind::Bandit)
        .await
        .unwrap();
    l.insert_observation(&observe(refusal_cycle)).await.unwrap();
    l.insert_proposal(&proposal(refusal_cycle, refused()))
        .await
        .unwrap();
    l.insert_cycle_verdict(
        refusal_cycle,
        &refusal(VerdictKind::Rejected, "does not fit"),
    )
    .await
    .unwrap();
    l.close_cycle(refusal_cycle, &CycleOutcome::Completed, t(at + 70))
        .await
        .unwrap();
    History { win, refusal_cycle }
}

/// Every read a daemon's cycle decides with sees its own stack's rows
/// only: two identical hosts on one ledger never take each other's win for
/// their own pending one, each other's decided experiments for duplicates,
/// each other's refusals, compositions or load for their own.
#[tokio::test]
async fn a_stack_decides_only_from_its_own_history() {
    for ledger in backends().await {
        let a = ledger.clone().scoped(scope("box-a", Some("spark")));
        let b = ledger.clone().scoped(scope("box-b", Some("spark")));
        let fresh = ledger.clone().scoped(scope("box-c", Some("spark")));
        let ha = history(&a, 0, 10.0).await;
        // B's rows are the newer ones, so an unscoped read would find them first.
        let hb = history(&b, 1000, 90.0).await;

        // The history the proposers and the pending-win check read.
        let ids = |v: Vec<ExperimentOutcome>| v.iter().map(|e| e.experiment_id).collect::<Vec<_>>();
        assert_eq!(ids(a.recent_experiments(10).await.unwrap()), vec![ha.win]);
        assert_eq!(ids(b.recent_experiments(10).await.unwrap()), vec![hb.win]);
        assert_eq!(
            ids(ledger.recent_experiments(10).await.unwrap()),
            vec![hb.win, ha.win],
            "the unscoped handle (the CLI) sees every stack"
        );
        assert!(fresh.recent_experiments(10).await.unwrap().is_empty());

        // B confirms its own win; that A/B is none of A's confirmations.
        let confirm_b = b.open_cycle(t(2000), ProposerKind::Bandit).await.unwrap();
        let b_conf = b
            .insert_experiment(&NewExperiment {
                confirmation_of: Some(hb.win),
                ..experiment(confirm_b, 1, 200)
            })
            .await
            .unwrap();
        let conf = |v: Vec<Experiment>| v.iter().map(|e| e.id).collect::<Vec<_>>();
        assert_eq!(conf(b.confirmations(hb.win).await.unwrap()), vec![b_conf]);
        assert!(a.confirmations(hb.win).await.unwrap().is_empty());
        assert!(a.confirmations(ha.win).await.unwrap().is_empty());
        assert_eq!(ids(a.recent_experiments(10).await.unwrap()), vec![ha.win]);

        // The duplicate checks: the same experiment decided on B is new to A.
        let params = json!({"draft_len": 4});
        let dup = |l: Ledger| {
            let params = params.clone();
            async move {
                l.already_decided(MenuId::StageSpeculative, &params, &digest(1))
                    .await
                    .unwrap()
                    .map(|d| d.experiment_id)
            }
        };
        assert_eq!(dup(a.clone()).await, Some(ha.win));
        assert_eq!(dup(b.clone()).await, Some(hb.win));
        assert_eq!(dup(fresh.clone()).await, None);
        let on = |v: Vec<crate::ledger::DecidedOn>| {
            v.iter().map(|r| r.experiment_id).collect::<Vec<_>>()
        };
        assert_eq!(on(a.decided_on(&digest(1)).await.unwrap()), vec![ha.win]);
        assert!(fresh.decided_on(&digest(1)).await.unwrap().is_empty());

        // The planner's refusals on the live profile.
        assert_eq!(
            a.planner_refused(&refused(), &digest(1)).await.unwrap(),
            Some(ha.refusal_cycle)
        );
        assert_eq!(
            fresh.planner_refused(&refused(), &digest(1)).await.unwrap(),
            None
        );
        let cycles =
            |v: Vec<(CycleId, serde_json::Value)>| v.iter().map(|r| r.0).collect::<Vec<_>>();
        assert_eq!(
            cycles(a.planner_refusals_on(&digest(1)).await.unwrap()),
            vec![ha.refusal_cycle]
        );
        assert!(
            fresh
                .planner_refusals_on(&digest(1))
                .await
                .unwrap()
                .is_empty()
        );

        // The compositions tried on the base.
        assert_eq!(a.compositions_on(&digest(1)).await.unwrap().len(), 1);
        assert_eq!(ledger.compositions_on(&digest(1)).await.unwrap().len(), 2);
        assert!(fresh.compositions_on(&digest(1)).await.unwrap().is_empty());

        // The machine's load now, and a run's deadline: this host's runs.
        assert_eq!(a.recent_cpu_pressure(10).await.unwrap(), vec![0.1; 4]);
        assert_eq!(b.recent_contention(10).await.unwrap(), vec![90.0; 4]);
        assert_eq!(
            a.recent_run_durations(&digest(1), 10).await.unwrap(),
            vec![10.0; 2]
        );
        assert!(fresh.recent_cpu_pressure(10).await.unwrap().is_empty());
        assert!(fresh.recent_contention(10).await.unwrap().is_empty());

        // `orchestrator ledger --stack box-a`.
        let listed = a.recent_cycles(10).await.unwrap();
        assert_eq!(listed.len(), 2);
        assert!(
            listed
                .iter()
                .all(|c| c.cycle.stack.as_deref() == Some("box-a")),
            "{listed:?}"
        );
        assert_eq!(ledger.recent_cycles(10).await.unwrap().len(), 5);
    }
}

/// `ledger --check` on a fleet's database compares the checking host's live
/// profile with its own stack's stages only.
#[tokio::test]
async fn the_interrupted_approval_rule_reads_the_checking_hosts_stack_only() {
    for ledger in backends().await {
        let a = ledger.clone().scoped(scope("box-a", None));
        let b = ledger.clone().scoped(scope("box-b", None));
        // box-b's staged candidate is box-a's live profile (identical hosts
        // reach identical profiles): no interrupted approval on box-a.
        let (stage_b, _, _) = staged_win(&b, 1).await;
        let on_a_live = CheckContext {
            daemon_running: false,
            daemon_stacks: None,
            live_digest: Some(digest(200)),
        };
        assert_eq!(a.check(&on_a_live).await.unwrap(), vec![]);
        let unscoped = ledger.check(&on_a_live).await.unwrap();
        assert_eq!(
            unscoped.iter().map(|v| (v.rule, v.id)).collect::<Vec<_>>(),
            vec![(Rule::StageLive, Some(stage_b.0))]
        );
    }
}
