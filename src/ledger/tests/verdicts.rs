//! Verdicts, the schema's CHECKs, and the history queries built on verdicts
//! (duplicate check, recent experiments, recent cycles).

use super::*;

#[tokio::test]
async fn exactly_one_verdict_per_experiment() {
    for ledger in backends().await {
        let cycle = ledger.open_cycle(t(0), ProposerKind::Model).await.unwrap();
        let exp = ledger
            .insert_experiment(&experiment(cycle, 1, 2))
            .await
            .unwrap();
        let new = measured(VerdictKind::WithinNoise, 0.004, -0.01, 0.015);
        let id = ledger.insert_verdict(exp, &new).await.unwrap();
        let got = ledger.verdict(exp).await.unwrap().unwrap();
        assert_eq!(
            got,
            Verdict {
                id,
                cycle_id: cycle,
                experiment_id: Some(exp),
                recorded: NewVerdict {
                    kind: VerdictKind::WithinNoise,
                    decided_at: t(100),
                    effect: Some(0.004),
                    interval: Some(Interval {
                        low: -0.01,
                        high: 0.015
                    }),
                    noise_floor: Some(0.02),
                    floor_is_bound: false,
                    pairs: 6,
                    method: Some("test confidence sequence".into()),
                    reason: None,
                },
            }
        );

        let second = ledger
            .insert_verdict(exp, &measured(VerdictKind::Win, -0.2, -0.3, -0.1))
            .await
            .unwrap_err();
        assert!(
            matches!(
                second,
                LedgerError::VerdictExists {
                    existing: VerdictKind::WithinNoise,
                    ..
                }
            ),
            "{second:?}"
        );
        assert!(second.to_string().contains("within_noise"), "{second}");
        assert_eq!(ledger.verdict(exp).await.unwrap().unwrap().id, id);
    }
}

#[tokio::test]
async fn a_verdict_judged_against_the_bound_says_so() {
    for ledger in backends().await {
        let cycle = ledger.open_cycle(t(0), ProposerKind::Model).await.unwrap();
        let exp = ledger
            .insert_experiment(&experiment(cycle, 1, 2))
            .await
            .unwrap();
        let mut new = measured(VerdictKind::Win, -1.2, -1.3, -1.1);
        new.noise_floor = Some(1.5f64.ln());
        new.floor_is_bound = true;
        ledger.insert_verdict(exp, &new).await.unwrap();
        let got = ledger.verdict(exp).await.unwrap().unwrap();
        assert!(got.floor_is_bound, "{got:?}");
        assert_eq!(got.noise_floor, new.noise_floor);
    }
}

#[tokio::test]
async fn verdict_rules_are_enforced() {
    for ledger in backends().await {
        let cycle = ledger.open_cycle(t(0), ProposerKind::Model).await.unwrap();
        let exp = ledger
            .insert_experiment(&experiment(cycle, 1, 2))
            .await
            .unwrap();

        // A win without its statistics.
        assert_constraint(
            ledger
                .insert_verdict(exp, &refusal(VerdictKind::Win, "trust me"))
                .await,
            "bare win",
        );
        // A hash mismatch never shows a delta.
        let with_delta = NewVerdict {
            reason: Some("candidate output differs".into()),
            ..measured(VerdictKind::HashMismatch, -0.3, -0.4, -0.2)
        };
        assert_constraint(
            ledger.insert_verdict(exp, &with_delta).await,
            "mismatch delta",
        );
        // A failure says why.
        assert_constraint(
            ledger
                .insert_verdict(
                    exp,
                    &NewVerdict {
                        reason: None,
                        ..refusal(VerdictKind::Failed, "")
                    },
                )
                .await,
            "silent failure",
        );
        ledger
            .insert_verdict(
                exp,
                &refusal(VerdictKind::HashMismatch, "run 3 hash differs"),
            )
            .await
            .unwrap();

        // A cycle without an experiment gets one rejected/failed verdict.
        let other = ledger.open_cycle(t(1), ProposerKind::Model).await.unwrap();
        let v = ledger
            .insert_cycle_verdict(other, &refusal(VerdictKind::Rejected, "3 invalid answers"))
            .await
            .unwrap();
        assert_constraint(
            ledger
                .insert_cycle_verdict(other, &refusal(VerdictKind::Failed, "again"))
                .await,
            "second cycle verdict",
        );
        assert_constraint(
            ledger
                .insert_cycle_verdict(other, &measured(VerdictKind::Win, -0.2, -0.3, -0.1))
                .await,
            "win without an experiment",
        );
        let listed = ledger.recent_cycles(1).await.unwrap();
        assert_eq!(listed[0].cycle.id, other);
        assert_eq!(listed[0].verdicts[0].verdict.id, v);
        assert_eq!(listed[0].verdicts[0].menu_id, None);
    }
}

#[tokio::test]
async fn check_constraints_refuse_illegal_states() {
    for ledger in backends().await {
        let cycle = ledger.open_cycle(t(0), ProposerKind::Model).await.unwrap();
        let (stage, _, _) = staged_win(&ledger, 1).await;

        assert_constraint(
            raw(&ledger, "UPDATE stages SET state = 'pending'").await,
            "unknown stage state",
        );
        assert_constraint(
            raw(&ledger, "UPDATE stages SET state = 'approved'").await,
            "approval without who and when",
        );
        assert_constraint(
            raw(&ledger, "UPDATE cycles SET status = 'paused'").await,
            "unknown cycle status",
        );
        assert_constraint(
            raw(
                &ledger,
                &format!(
                    "UPDATE cycles SET status = 'failed', ended_at = started_at WHERE id = {cycle}"
                ),
            )
            .await,
            "failure without a cause",
        );
        assert_constraint(
            raw(&ledger, "UPDATE experiments SET menu_id = 'rewrite_engine'").await,
            "off-menu experiment",
        );
        assert_constraint(
            raw(&ledger, "UPDATE experiments SET base_digest = 'abc'").await,
            "short digest",
        );
        assert_constraint(
            raw(&ledger, "UPDATE verdicts SET kind = 'great'").await,
            "unknown verdict",
        );
        assert_constraint(
            raw(&ledger, "UPDATE runs SET arm = 'both'").await,
            "unknown arm",
        );
        assert_constraint(
            raw(&ledger, "UPDATE cycles SET started_at = '29/11/2026'").await,
            "malformed timestamp",
        );
        // Nothing changed.
        assert_eq!(ledger.stage(stage).await.unwrap().state, StageState::Staged);
    }
}

#[tokio::test]
async fn duplicate_detection_matches_menu_parameters_and_base() {
    for ledger in backends().await {
        let cycle = ledger.open_cycle(t(0), ProposerKind::Model).await.unwrap();
        let params = json!({"warm_set": 128, "policy": "hot"});
        let decided = ledger
            .insert_experiment(&NewExperiment {
                menu_id: MenuId::DeepenWarmSet,
                parameters: params.clone(),
                ..experiment(cycle, 1, 2)
            })
            .await
            .unwrap();
        let same_key = |base| {
            let params: serde_json::Value =
                serde_json::from_str(r#"{"policy": "hot", "warm_set": 128}"#).unwrap();
            (MenuId::DeepenWarmSet, params, digest(base))
        };
        let (m, p, b) = same_key(1);
        assert_eq!(
            ledger.already_decided(m, &p, &b).await.unwrap(),
            None,
            "no verdict yet"
        );

        ledger
            .insert_verdict(decided, &measured(VerdictKind::Loss, 0.1, 0.05, 0.15))
            .await
            .unwrap();
        let prior = ledger.already_decided(m, &p, &b).await.unwrap().unwrap();
        assert_eq!(prior.experiment_id, decided);
        assert_eq!(prior.verdict, VerdictKind::Loss);

        // Another base profile, other parameters, another entry: not duplicates.
        let (m2, p2, b2) = same_key(9);
        assert_eq!(ledger.already_decided(m2, &p2, &b2).await.unwrap(), None);
        let p3 = json!({"policy": "hot", "warm_set": 256});
        assert_eq!(ledger.already_decided(m, &p3, &b).await.unwrap(), None);
        assert_eq!(
            ledger
                .already_decided(MenuId::StageSpeculative, &p, &b)
                .await
                .unwrap(),
            None
        );

        // A failed experiment measured nothing, so repeating it is allowed.
        let failed = ledger
            .insert_experiment(&NewExperiment {
                menu_id: MenuId::DeepenWarmSet,
                parameters: p3.clone(),
                ..experiment(cycle, 1, 3)
            })
            .await
            .unwrap();
        ledger
            .insert_verdict(failed, &refusal(VerdictKind::Failed, "bench timed out"))
            .await
            .unwrap();
        assert_eq!(ledger.already_decided(m, &p3, &b).await.unwrap(), None);
    }
}

#[tokio::test]
async fn recent_experiments_carry_verdicts_and_proposers() {
    for ledger in backends().await {
        let cycle = ledger.open_cycle(t(0), ProposerKind::Bandit).await.unwrap();
        let proposal = ledger
            .insert_proposal(&NewProposal {
                cycle_id: cycle,
                proposer: ProposerKind::Bandit,
                attempt: 1,
                created_at: t(1),
                prompt: None,
                raw_answer: None,
                parsed: Some(json!({"experiment": "stage_speculative"})),
                rejection: None,
                note: None,
            })
            .await
            .unwrap();
        let mut ids = Vec::new();
        for i in 0..4u8 {
            let id = ledger
                .insert_experiment(&NewExperiment {
                    proposal_id: (i == 2).then_some(proposal),
                    ..experiment(cycle, 1, 10 + i)
                })
                .await
                .unwrap();
            ids.push(id);
        }
        ledger
            .insert_verdict(ids[2], &measured(VerdictKind::Loss, 0.08, 0.04, 0.12))
            .await
            .unwrap();
        let recent = ledger.recent_experiments(3).await.unwrap();
        assert_eq!(
            recent.iter().map(|e| e.experiment_id).collect::<Vec<_>>(),
            vec![ids[3], ids[2], ids[1]]
        );
        assert_eq!(recent[0].verdict, None);
        assert_eq!(recent[1].verdict, Some(VerdictKind::Loss));
        assert_eq!(recent[1].effect, Some(0.08));
        assert_eq!(
            recent[1].interval,
            Some(Interval {
                low: 0.04,
                high: 0.12
            })
        );
        assert_eq!(recent[1].proposer, Some(ProposerKind::Bandit));
        assert_eq!(recent[1].pairs, Some(6));
        assert_eq!(recent[2].proposer, None);
    }
}

#[tokio::test]
async fn recent_cycles_list_their_verdicts_newest_first() {
    for ledger in backends().await {
        let (_, first, second) = staged_win(&ledger, 1).await;
        let later = ledger
            .open_cycle(t(1000), ProposerKind::Model)
            .await
            .unwrap();
        let listed = ledger.recent_cycles(10).await.unwrap();
        assert_eq!(listed.len(), 2);
        assert_eq!(listed[0].cycle.id, later);
        assert!(listed[0].verdicts.is_empty());
        let kinds: Vec<_> = listed[1]
            .verdicts
            .iter()
            .map(|v| (v.verdict.experiment_id, v.verdict.kind, v.menu_id))
            .collect();
        assert_eq!(
            kinds,
            vec![
                (
                    Some(first),
                    VerdictKind::Win,
                    Some(MenuId::StageSpeculative)
                ),
                (
                    Some(second),
                    VerdictKind::Win,
                    Some(MenuId::StageSpeculative)
                ),
            ]
        );
        assert_eq!(
            listed[1].verdicts[0].parameters,
            Some(json!({"draft_len": 4}))
        );
        assert_eq!(ledger.recent_cycles(1).await.unwrap().len(), 1);
        // The CLI prints it as JSON.
        let text = serde_json::to_string(&listed).unwrap();
        assert!(text.contains("\"kind\":\"win\""), "{text}");
    }
}
