//! Round trips of cycles, observations, proposals, experiments, runs, noise
//! floors and reference hashes, with the rules the schema enforces on them.

use super::*;

#[tokio::test]
async fn cycle_round_trip_and_close_once() {
    for ledger in backends().await {
        let id = ledger.open_cycle(t(0), ProposerKind::Model).await.unwrap();
        let open = ledger.cycle(id).await.unwrap();
        assert_eq!(
            open,
            CycleRecord {
                id,
                started_at: t(0),
                ended_at: None,
                status: CycleStatus::Running,
                error: None,
                // Configured with the model, but asked nothing yet.
                proposer: None,
                stack: None,
                class: None,
            }
        );
        // A cycle names a proposer once it recorded one's proposal.
        ledger
            .insert_proposal(&bandit_proposal(id, t(1)))
            .await
            .unwrap();
        assert_eq!(
            ledger.cycle(id).await.unwrap().proposer,
            Some(ProposerKind::Bandit)
        );
        let outcome = CycleOutcome::Failed("model unreachable at http://127.0.0.1:9".into());
        ledger.close_cycle(id, &outcome, t(5)).await.unwrap();
        let closed = ledger.cycle(id).await.unwrap();
        assert_eq!(closed.status, CycleStatus::Failed);
        assert_eq!(closed.ended_at, Some(t(5)));
        assert_eq!(
            closed.error.as_deref(),
            Some("model unreachable at http://127.0.0.1:9")
        );

        let again = ledger
            .close_cycle(id, &CycleOutcome::Completed, t(6))
            .await
            .unwrap_err();
        assert!(
            matches!(
                again,
                LedgerError::CycleNotRunning {
                    status: CycleStatus::Failed,
                    ..
                }
            ),
            "{again:?}"
        );
        let missing = ledger.cycle(CycleId(999)).await.unwrap_err();
        assert!(missing.to_string().contains("cycle 999"), "{missing}");
    }
}

#[tokio::test]
async fn abort_running_cycles_closes_only_running_ones() {
    for ledger in backends().await {
        let a = ledger.open_cycle(t(0), ProposerKind::Model).await.unwrap();
        let b = ledger.open_cycle(t(1), ProposerKind::Model).await.unwrap();
        let done = ledger.open_cycle(t(2), ProposerKind::Model).await.unwrap();
        ledger
            .close_cycle(done, &CycleOutcome::Completed, t(3))
            .await
            .unwrap();

        let n = ledger
            .abort_running_cycles("found running at start: the daemon crashed", t(10))
            .await
            .unwrap();
        assert_eq!(n, 2);
        for id in [a, b] {
            let c = ledger.cycle(id).await.unwrap();
            assert_eq!(c.status, CycleStatus::Aborted);
            assert_eq!(c.ended_at, Some(t(10)));
            assert_eq!(
                c.error.as_deref(),
                Some("found running at start: the daemon crashed")
            );
        }
        assert_eq!(
            ledger.cycle(done).await.unwrap().status,
            CycleStatus::Completed
        );
        assert_eq!(
            ledger.abort_running_cycles("again", t(11)).await.unwrap(),
            0
        );
    }
}

#[tokio::test]
async fn observation_round_trip() {
    for ledger in backends().await {
        let cycle = ledger.open_cycle(t(0), ProposerKind::Model).await.unwrap();
        let new = NewObservation {
            cycle_id: cycle,
            observed_at: t(1),
            metrics: json!({"seconds_per_token": 1.7, "tier_hits": {"ram": 0.5}}),
            heat: Some(json!({"coverage": 0.9})),
            live_profile_digest: digest(1),
            base_profile_digest: digest(1),
        };
        let id = ledger.insert_observation(&new).await.unwrap();
        let got = ledger.observation(cycle).await.unwrap().unwrap();
        assert_eq!(
            got,
            Observation {
                id,
                recorded: new.clone(),
            }
        );
        let bad = ledger
            .insert_observation(&NewObservation {
                metrics: json!([1, 2]),
                ..new
            })
            .await
            .unwrap_err();
        assert!(bad.to_string().contains("an array"), "{bad}");
    }
}

#[tokio::test]
async fn proposal_round_trip_keeps_raw_answer_and_rejection() {
    for ledger in backends().await {
        let cycle = ledger.open_cycle(t(0), ProposerKind::Model).await.unwrap();
        let rejected = NewProposal {
            cycle_id: cycle,
            proposer: ProposerKind::Model,
            attempt: 1,
            created_at: t(1),
            prompt: Some("choose one experiment".into()),
            raw_answer: Some("{\"experiment\": \"rm -rf /\"}".into()),
            parsed: None,
            rejection: Some(ProposalRejection {
                kind: "off_menu".into(),
                reason: "the experiment id is not on the menu".into(),
            }),
            note: None,
        };
        let accepted = NewProposal {
            attempt: 2,
            created_at: t(2),
            raw_answer: Some("{\"experiment\":\"remeasure\",\"params\":{}}".into()),
            parsed: Some(json!({"experiment": "remeasure", "params": {}})),
            rejection: None,
            ..rejected.clone()
        };
        let r1 = ledger.insert_proposal(&rejected).await.unwrap();
        let r2 = ledger.insert_proposal(&accepted).await.unwrap();
        let got = ledger.proposals(cycle).await.unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].id, r1);
        assert_eq!(got[0].raw_answer, rejected.raw_answer);
        assert_eq!(got[0].rejection, rejected.rejection);
        assert_eq!(got[0].parsed, None);
        assert_eq!(got[1].id, r2);
        assert_eq!(got[1].attempt, 2);
        assert_eq!(got[1].parsed, accepted.parsed);
        assert_eq!(got[1].prompt.as_deref(), Some("choose one experiment"));

        // Neither parsed nor refused says nothing: the schema refuses it.
        let silent = NewProposal {
            attempt: 3,
            parsed: None,
            rejection: None,
            ..rejected.clone()
        };
        assert_constraint(ledger.insert_proposal(&silent).await, "silent proposal");
        // The same attempt twice.
        assert_constraint(ledger.insert_proposal(&rejected).await, "repeated attempt");
    }
}

#[tokio::test]
async fn experiment_round_trip_with_canonical_parameters() {
    let ledger = Ledger::open_in_memory().await.unwrap();
    let cycle = ledger.open_cycle(t(0), ProposerKind::Model).await.unwrap();
    let proposal = ledger
        .insert_proposal(&NewProposal {
            cycle_id: cycle,
            proposer: ProposerKind::Model,
            attempt: 1,
            created_at: t(1),
            prompt: Some("p".into()),
            raw_answer: Some("a".into()),
            parsed: Some(json!({"experiment": "rerank_pins"})),
            rejection: None,
            note: None,
        })
        .await
        .unwrap();
    let new = NewExperiment {
        proposal_id: Some(proposal),
        menu_id: MenuId::RerankPins,
        parameters: serde_json::from_str(r#"{"pin_count": 64, "a": {"z": 1, "b": 2}}"#).unwrap(),
        planner_notes: Some(
            json!({"hit_rate": {"new": 0.61, "current": 0.55, "lru": 0.5, "belady": 0.7}}),
        ),
        ..experiment(cycle, 1, 2)
    };
    let id = ledger.insert_experiment(&new).await.unwrap();
    let got = ledger.experiment(id).await.unwrap();
    assert_eq!(
        got,
        Experiment {
            id,
            recorded: new.clone(),
        }
    );
    let stored = raw_text(
        &ledger,
        &format!("SELECT parameters FROM experiments WHERE id = {id}"),
    )
    .await;
    assert_eq!(stored, r#"{"a":{"b":2,"z":1},"pin_count":64}"#);

    let not_object = ledger
        .insert_experiment(&NewExperiment {
            parameters: json!(4),
            ..experiment(cycle, 1, 2)
        })
        .await
        .unwrap_err();
    assert!(
        matches!(not_object, LedgerError::NotAnObject { .. }),
        "{not_object:?}"
    );
}

#[tokio::test]
async fn run_round_trip_and_run_rules() {
    for ledger in backends().await {
        let cycle = ledger.open_cycle(t(0), ProposerKind::Model).await.unwrap();
        let exp = ledger
            .insert_experiment(&experiment(cycle, 1, 2))
            .await
            .unwrap();
        let warmup = NewRun {
            seconds_per_token: None,
            timing_source: None,
            tokens: None,
            output_hash: None,
            exit_code: Some(4),
            error: Some("exit 4: an expert failed to load".into()),
            parts: TokenParts::default(),
            stderr_tail: "expert 3,17: short read\n".into(),
            ..run(exp, Arm::Warmup, 0, None)
        };
        let refused = NewRun {
            seconds_per_token: None,
            refused: true,
            output_hash: Some("0000000000000bad".into()),
            timing_source: Some(TimingSource::Client),
            parts: TokenParts::default(),
            ..run(exp, Arm::Candidate, 1, Some(0))
        };
        let good = run(exp, Arm::Baseline, 2, Some(0));
        let mut ids = Vec::new();
        for r in [&warmup, &refused, &good] {
            ids.push(ledger.insert_run(r).await.unwrap());
        }
        let got = ledger.runs(exp).await.unwrap();
        assert_eq!(got.len(), 3);
        for ((stored, new), id) in got.iter().zip([&warmup, &refused, &good]).zip(&ids) {
            assert_eq!(
                stored,
                &Run {
                    id: *id,
                    recorded: new.clone(),
                    discarded: false,
                }
            );
        }
        assert!(got[2].parts.any(), "a valid run keeps its measured parts");
        // Every run recorded its contention (newest first), and the schema
        // keeps it on its scale: tasks per core, at least 1.
        assert_eq!(ledger.recent_contention(2).await.unwrap(), vec![1.4, 1.4]);
        let below_one = NewRun {
            pressure: crate::ledger::RunPressure {
                contention: Some(0.5),
                ..good.pressure
            },
            ..run(exp, Arm::Candidate, 8, Some(4))
        };
        assert_constraint(ledger.insert_run(&below_one).await, "contention below 1");
        let negative_live = NewRun {
            pressure: crate::ledger::RunPressure {
                live_requests: Some(-1.0),
                ..good.pressure
            },
            ..run(exp, Arm::Candidate, 8, Some(4))
        };
        assert_constraint(
            ledger.insert_run(&negative_live).await,
            "negative live requests",
        );

        // Measured parts belong to valid runs only, and stay in range.
        let parts_without_metric = NewRun {
            seconds_per_token: None,
            ..run(exp, Arm::Candidate, 6, Some(2))
        };
        assert_constraint(
            ledger.insert_run(&parts_without_metric).await,
            "parts without a metric",
        );
        let share_above_one = NewRun {
            parts: TokenParts {
                far_hit_share: Some(1.5),
                ..TokenParts::default()
            },
            ..run(exp, Arm::Candidate, 7, Some(3))
        };
        assert_constraint(ledger.insert_run(&share_above_one).await, "share above 1");

        // A refused run never carries a metric.
        let refused_with_metric = NewRun {
            refused: true,
            ..run(exp, Arm::Candidate, 3, Some(1))
        };
        assert_constraint(
            ledger.insert_run(&refused_with_metric).await,
            "refused metric",
        );
        // Warmups belong to no pair, measured runs to one.
        assert_constraint(
            ledger.insert_run(&run(exp, Arm::Warmup, 4, Some(1))).await,
            "warmup in a pair",
        );
        assert_constraint(
            ledger.insert_run(&run(exp, Arm::Baseline, 5, None)).await,
            "pairless baseline",
        );
        // Two runs in the same slot.
        assert_constraint(ledger.insert_run(&good).await, "same order index");
    }
}

#[tokio::test]
async fn foreign_keys_are_enforced() {
    for ledger in backends().await {
        assert_constraint(
            ledger
                .insert_run(&run(ExperimentId(42), Arm::Baseline, 0, Some(0)))
                .await,
            "run of a missing experiment",
        );
        assert_constraint(
            ledger
                .insert_experiment(&experiment(CycleId(7), 1, 2))
                .await,
            "experiment of a missing cycle",
        );
        let err = ledger
            .insert_verdict(
                ExperimentId(42),
                &measured(VerdictKind::Loss, 0.1, 0.05, 0.2),
            )
            .await
            .unwrap_err();
        assert!(
            matches!(
                err,
                LedgerError::NotFound {
                    what: "experiment",
                    id: 42,
                    ..
                }
            ),
            "{err:?}"
        );
    }
}

#[tokio::test]
async fn noise_floor_latest_per_stack() {
    for ledger in backends().await {
        assert_eq!(ledger.latest_noise_floor("tinyk3").await.unwrap(), None);
        let older = NewNoiseFloor {
            stack: "tinyk3".into(),
            profile_digest: digest(1),
            value: 0.031,
            n: 8,
            method: "A/A log-ratio quantile".into(),
            measured_at: t(0),
            experiment_id: None,
            load1: Some(0.7),
            cpu_pressure: Some(0.05),
            contention: Some(3.5),
        };
        let newer = NewNoiseFloor {
            value: 0.024,
            n: 12,
            measured_at: t(60),
            ..older.clone()
        };
        let other_stack = NewNoiseFloor {
            stack: "llama".into(),
            value: 0.5,
            measured_at: t(120),
            ..older.clone()
        };
        ledger.insert_noise_floor(&newer).await.unwrap();
        ledger.insert_noise_floor(&older).await.unwrap();
        ledger.insert_noise_floor(&other_stack).await.unwrap();
        let got = ledger.latest_noise_floor("tinyk3").await.unwrap().unwrap();
        assert_eq!(got.value, 0.024);
        assert_eq!(got.n, 12);
        assert_eq!(got.measured_at, t(60));
        assert_eq!(got.method, "A/A log-ratio quantile");
        assert_eq!(got.profile_digest, digest(1));
    }
}

#[tokio::test]
async fn reference_hash_current_is_the_latest_pin() {
    for ledger in backends().await {
        let first = NewReferenceHash {
            stack: "tinyk3".into(),
            prompt_set: "greedy-8".into(),
            profile_digest: digest(1),
            output_hash: "aaaaaaaaaaaaaaaa".into(),
            pinned_at: t(0),
            pinned_by: "orchestrator".into(),
            reason: "first pin".into(),
        };
        let repin = NewReferenceHash {
            output_hash: "bbbbbbbbbbbbbbbb".into(),
            pinned_at: t(500),
            pinned_by: "alice".into(),
            reason: "engine rebuilt with the new kernels".into(),
            ..first.clone()
        };
        ledger.pin_reference_hash(&first).await.unwrap();
        let id = ledger.pin_reference_hash(&repin).await.unwrap();
        let got = ledger
            .current_reference_hash("tinyk3", "greedy-8")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            got,
            ReferenceHash {
                id,
                recorded: repin,
            }
        );
        assert_eq!(
            ledger
                .current_reference_hash("tinyk3", "other")
                .await
                .unwrap(),
            None
        );
    }
}

/// A stored row serialises as one flat object, its id first, as it did when
/// each table had a twin struct: `ledger --json` and `stage show --json`
/// print these, and the composed `recorded` row must not show as a level.
#[tokio::test]
async fn stored_rows_serialise_flat_with_the_id_first() {
    for ledger in backends().await {
        let cycle = ledger.open_cycle(t(0), ProposerKind::Model).await.unwrap();
        let exp = ledger
            .insert_experiment(&experiment(cycle, 1, 2))
            .await
            .unwrap();
        ledger
            .insert_run(&run(exp, Arm::Baseline, 0, Some(0)))
            .await
            .unwrap();
        let new = measured(VerdictKind::WithinNoise, 0.004, -0.01, 0.015);
        ledger.insert_verdict(exp, &new).await.unwrap();
        /// The row as JSON text, and its top-level keys, sorted.
        fn keys(row: &impl serde::Serialize) -> (String, Vec<String>) {
            let text = serde_json::to_string(row).unwrap();
            let value: serde_json::Value = serde_json::from_str(&text).unwrap();
            let mut keys: Vec<String> = value.as_object().unwrap().keys().cloned().collect();
            keys.sort();
            (text, keys)
        }
        let sorted = |names: &[&str]| {
            let mut v: Vec<String> = names.iter().map(|s| s.to_string()).collect();
            v.sort();
            v
        };

        let (text, got) = keys(&ledger.experiment(exp).await.unwrap());
        assert!(text.starts_with("{\"id\":"), "{text}");
        assert_eq!(
            got,
            sorted(&[
                "id",
                "cycle_id",
                "proposal_id",
                "confirmation_of",
                "created_at",
                "menu_id",
                "parameters",
                "method",
                "base_profile",
                "base_digest",
                "candidate_profile",
                "candidate_digest",
                "planner_notes",
            ])
        );
        let (text, got) = keys(&ledger.runs(exp).await.unwrap()[0]);
        assert!(text.starts_with("{\"id\":"), "{text}");
        assert!(text.ends_with(",\"discarded\":false}"), "{text}");
        assert_eq!(
            got,
            sorted(&[
                "id",
                "experiment_id",
                "arm",
                "order_index",
                "pair_index",
                "started_at",
                "seconds_per_token",
                "timing_source",
                "tokens",
                "output_hash",
                "exit_code",
                "duration_s",
                "stderr_tail",
                "refused",
                "error",
                "parts",
                "pressure",
                "discarded",
            ])
        );
        let (text, got) = keys(&ledger.verdict(exp).await.unwrap().unwrap());
        assert!(
            text.starts_with(&format!(
                "{{\"id\":1,\"cycle_id\":{cycle},\"experiment_id\":{exp},\"kind\":"
            )),
            "{text}"
        );
        assert_eq!(
            got,
            sorted(&[
                "id",
                "cycle_id",
                "experiment_id",
                "kind",
                "decided_at",
                "effect",
                "interval",
                "noise_floor",
                "floor_is_bound",
                "pairs",
                "method",
                "reason",
            ])
        );
    }
}

/// The duplicate check's "refused by the planner" query, on both backends
/// (its SQLite text pins an index PostgreSQL's grammar does not have).
#[tokio::test]
async fn a_proposal_the_planner_refused_on_a_profile_is_found_again() {
    for ledger in backends().await {
        let cycle = ledger.open_cycle(t(0), ProposerKind::Bandit).await.unwrap();
        ledger
            .insert_observation(&NewObservation {
                cycle_id: cycle,
                observed_at: t(1),
                metrics: json!({}),
                heat: None,
                live_profile_digest: digest(1),
                base_profile_digest: digest(1),
            })
            .await
            .unwrap();
        let parsed =
            json!({"experiment": "rebalance_trunk_cache", "params": {"trunk_fraction": 0.8}});
        ledger
            .insert_proposal(&NewProposal {
                cycle_id: cycle,
                proposer: ProposerKind::Bandit,
                attempt: 1,
                created_at: t(1),
                prompt: None,
                raw_answer: None,
                parsed: Some(parsed.clone()),
                rejection: None,
                note: None,
            })
            .await
            .unwrap();
        assert_eq!(
            ledger.planner_refused(&parsed, &digest(1)).await.unwrap(),
            None,
            "not refused yet"
        );
        ledger
            .insert_cycle_verdict(cycle, &refusal(VerdictKind::Rejected, "does not fit"))
            .await
            .unwrap();
        assert_eq!(
            ledger.planner_refused(&parsed, &digest(1)).await.unwrap(),
            Some(cycle)
        );
        assert_eq!(
            ledger.planner_refused(&parsed, &digest(2)).await.unwrap(),
            None,
            "on another live profile it is not"
        );
    }
}

#[tokio::test]
async fn observations_from_before_the_base_column_built_on_the_live_profile() {
    let dir = tempfile::tempdir().unwrap();
    let (path, pool) = sqlite_before(dir.path(), "20261203100001").await;
    let live = "3".repeat(64);
    sqlx::query(&format!(
        "INSERT INTO observations (cycle_id, observed_at, metrics, heat, live_profile_digest) \
         VALUES (1, '2026-12-01T00:00:00.000000Z', '{{}}', NULL, '{live}')"
    ))
    .execute(&pool)
    .await
    .unwrap();
    pool.close().await;

    let ledger = Ledger::open(&path).await.unwrap();
    let seen = ledger.observation(CycleId(1)).await.unwrap().unwrap();
    assert_eq!(seen.recorded.base_profile_digest.to_string(), live);
    // Filled in by the migration itself, where the refusal queries look.
    let pool = sqlx::SqlitePool::connect(&format!("sqlite://{}", path.display()))
        .await
        .unwrap();
    let filled: i64 =
        sqlx::query_scalar("SELECT count(*) FROM observations WHERE base_profile_digest = $1")
            .bind(&live)
            .fetch_one(&pool)
            .await
            .unwrap();
    assert_eq!(filled, 1);
}
