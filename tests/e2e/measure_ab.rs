//! The A/B runner end to end on real `tinyk3 bench` processes and a real
//! ledger file: ABBA order and one verdict, the hash gate (candidate and
//! baseline), a failed run, cancellation, the A/A noise floor, and a block
//! a real user of a real live server interrupted, re-run.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::{alive, config_with_bench, profile_file, script, tiny_model, tinyk3_argv};
use crate::live_server::{self, Serve};
use chrono::Utc;
use orchestrator::clock::SystemClock;
use orchestrator::config::StandAsideSettings;
use orchestrator::judge::{Confidence, Floor, Policy};
use orchestrator::ledger::{ExperimentId, Ledger, NewExperiment, NewReferenceHash};
use orchestrator::measure::ab::{AbError, AbRunner, AbVerdict, NoiseOutcome};
use orchestrator::measure::bench::BenchScorer;
use orchestrator::measure::gate::{GateError, HashGate, bench_prompt_set};
use orchestrator::measure::scorer::{MeasureError, RunFailure, RunOutcome, Scorer};
use orchestrator::measure::stand_aside::{self, StandAside};
use orchestrator::menu::MenuId;
use orchestrator::observe::live_load::LiveLoad;
use orchestrator::process::cancel::Cancel;
use orchestrator::profile::ProfileFile;
use orchestrator::vocab::{Arm, Method, ProposerKind, VerdictKind};

const STACK: &str = "tinyk3-test";

fn policy() -> Policy {
    Policy::new(
        Confidence::try_from(0.9).unwrap(),
        4,
        6,
        Floor::try_from(0.05).unwrap(),
    )
    .unwrap()
}

async fn experiment(ledger: &Ledger, base: &ProfileFile, cand: &ProfileFile) -> ExperimentId {
    let cycle = ledger
        .open_cycle(Utc::now(), ProposerKind::Bandit)
        .await
        .unwrap();
    ledger
        .insert_experiment(&NewExperiment {
            cycle_id: cycle,
            proposal_id: None,
            confirmation_of: None,
            created_at: Utc::now(),
            menu_id: MenuId::Remeasure,
            parameters: serde_json::json!({}),
            method: Method::Bench,
            base_profile: base.profile.canonical(),
            base_digest: base.profile.digest(),
            candidate_profile: cand.profile.canonical(),
            candidate_digest: cand.profile.digest(),
            planner_notes: None,
        })
        .await
        .unwrap()
}

/// Routes each profile file to its own real bench scorer: the candidate's
/// runs use a checkpoint of another seed. tinyk3's output is identical under
/// every profile by design, so only another checkpoint changes it.
struct PerProfileBench {
    baseline_path: std::path::PathBuf,
    baseline: BenchScorer,
    candidate: BenchScorer,
}

impl Scorer for PerProfileBench {
    fn method(&self) -> Method {
        Method::Bench
    }
    async fn score(&self, p: &ProfileFile, cancel: &Cancel) -> Result<RunOutcome, RunFailure> {
        if p.path == self.baseline_path {
            self.baseline.score(p, cancel).await
        } else {
            self.candidate.score(p, cancel).await
        }
    }
}

/// The A/B runner every test here uses: the system clock, never cancelled.
fn runner<'a, S>(
    scorer: &'a S,
    ledger: &'a Ledger,
    warmups_per_arm: usize,
    deadline_cap: Option<Duration>,
) -> AbRunner<'a, S, SystemClock> {
    AbRunner {
        scorer,
        ledger,
        clock: &SystemClock,
        cancel: Cancel::never(),
        warmups_per_arm,
        deadline_cap,
        progress: Default::default(),
        stand_aside: None,
    }
}

fn bench(dir: &Path, model: &Path) -> BenchScorer {
    BenchScorer::from_config(&config_with_bench(dir, &tinyk3_argv(model), "", 30.0, 0.1)).unwrap()
}

#[tokio::test]
async fn an_a_a_run_records_every_run_in_abba_order_and_gives_one_verdict() {
    let _heavy = crate::common::heavy_async().await;
    let (tmp, model) = tiny_model(7);
    let ledger = Ledger::open(tmp.path().join("ledger.db")).await.unwrap();
    let cfg = config_with_bench(tmp.path(), &tinyk3_argv(&model), "", 30.0, 0.1);
    let scorer = BenchScorer::from_config(&cfg).unwrap();
    let live = profile_file(tmp.path(), "live.toml");
    let exp = experiment(&ledger, &live, &live).await;
    let prompt_set = bench_prompt_set(cfg.stack.bench.as_ref().unwrap());
    let mut gate = HashGate::load(&ledger, STACK, &prompt_set).await.unwrap();
    let runner = runner(&scorer, &ledger, 1, None);
    let t0 = Instant::now();
    let report = runner
        .run_ab(
            exp,
            &live,
            &live,
            &mut gate,
            policy(),
            Floor::try_from(0.05).unwrap(),
        )
        .await
        .unwrap();
    eprintln!(
        "A/A: {:?} after {} runs in {:?}",
        report.verdict.kind(),
        report.runs.len(),
        t0.elapsed()
    );
    let AbVerdict::Decided(d) = &report.verdict else {
        panic!("an A/A on a healthy engine is judged: {:?}", report.verdict);
    };
    // Two warmups, then whole blocks: those the judge used, and those it
    // discarded (an arm whose runs disagreed), marked so and kept.
    let stored = ledger.runs(exp).await.unwrap();
    assert_eq!(stored.len(), report.runs.len());
    let discarded = stored.iter().filter(|r| r.discarded).count();
    assert_eq!(discarded % 4, 0, "whole blocks are discarded");
    // On a loaded machine the judge may stop as too noisy (every block
    // discarded past its bound); its `pairs` then counts every pair run, and
    // the bookkeeping below must hold all the same.
    let used = if d.too_noisy.is_some() {
        d.pairs - discarded / 2
    } else {
        assert!(d.pairs >= 4 && d.pairs <= 6 && d.pairs % 2 == 0, "{d:?}");
        d.pairs
    };
    assert_eq!(stored.len(), 2 + 2 * used + discarded);
    let arms: String = stored
        .iter()
        .map(|r| match r.arm {
            Arm::Warmup => 'W',
            Arm::Baseline => 'B',
            Arm::Candidate => 'C',
        })
        .collect();
    // ABBA and BAAB blocks alternate in time, discarded ones included.
    let blocks: String = ["BCCB", "CBBC"]
        .iter()
        .cycle()
        .take((used + discarded / 2) / 2)
        .copied()
        .collect();
    assert_eq!(arms, format!("WW{blocks}"));
    for (i, r) in stored.iter().enumerate() {
        assert_eq!(r.order_index as usize, i);
        assert_eq!(
            r.pair_index.map(|p| p as usize),
            (i >= 2).then(|| (i - 2) / 2)
        );
        assert!(r.seconds_per_token.unwrap() > 0.0 && !r.refused && r.error.is_none());
        // tinyk3's measured parts of a token reach the ledger with the run.
        assert!(
            r.parts.trunk_seconds_per_token.unwrap() > 0.0
                && r.parts.expert_seconds_per_token.unwrap() > 0.0,
            "{:?}",
            r.parts
        );
    }
    let hashes: std::collections::BTreeSet<_> =
        stored.iter().map(|r| r.output_hash.clone()).collect();
    assert_eq!(hashes.len(), 1);
    // The first baseline run pinned the reference.
    let reference = ledger
        .current_reference_hash(STACK, &prompt_set)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(Some(reference.recorded.output_hash), stored[0].output_hash);
    // Exactly one verdict, with its statistics, as the ledger keeps it.
    ledger
        .insert_verdict(exp, &report.verdict.to_new_verdict(Utc::now()))
        .await
        .unwrap();
    let v = ledger.verdict(exp).await.unwrap().unwrap();
    assert_eq!(v.kind, d.kind);
    assert!(v.effect.is_some() && v.interval.is_some());
    assert!(
        ledger
            .insert_verdict(exp, &report.verdict.to_new_verdict(Utc::now()))
            .await
            .is_err()
    );
}

#[tokio::test]
async fn a_candidate_with_other_output_is_a_hash_mismatch_with_no_delta() {
    let _heavy = crate::common::heavy_async().await;
    let (tmp, model) = tiny_model(7);
    let (_t8, model8) = tiny_model(8);
    let ledger = Ledger::open(tmp.path().join("ledger.db")).await.unwrap();
    let base = profile_file(tmp.path(), "live.toml");
    let cand = profile_file(tmp.path(), "candidate.toml");
    let scorer = PerProfileBench {
        baseline_path: base.path.clone(),
        baseline: bench(tmp.path(), &model),
        candidate: bench(tmp.path(), &model8),
    };
    let exp = experiment(&ledger, &base, &cand).await;
    let mut gate = HashGate::load(&ledger, STACK, "bench:test").await.unwrap();
    let runner = runner(&scorer, &ledger, 1, None);
    let report = runner
        .run_ab(
            exp,
            &base,
            &cand,
            &mut gate,
            policy(),
            Floor::try_from(0.05).unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(
        report.verdict.kind(),
        VerdictKind::HashMismatch,
        "{:?}",
        report.verdict
    );
    // It stopped at the candidate's warmup; that run is kept, refused, without a metric.
    let stored = ledger.runs(exp).await.unwrap();
    assert_eq!(stored.len(), 2);
    assert!(!stored[0].refused && stored[0].seconds_per_token.is_some());
    assert!(stored[1].refused && stored[1].seconds_per_token.is_none());
    // A refused run keeps no figure at all, its parts included.
    assert!(!stored[1].parts.any() && stored[0].parts.any());
    assert!(stored[1].error.as_deref().unwrap().contains("differs"));
    let v = report.verdict.to_new_verdict(Utc::now());
    assert!(v.effect.is_none() && v.interval.is_none());
    assert!(v.reason.as_deref().unwrap().contains("broken engine"));
    ledger.insert_verdict(exp, &v).await.unwrap();
}

#[tokio::test]
async fn a_baseline_that_no_longer_matches_fails_loudly_and_says_rebaseline() {
    let _heavy = crate::common::heavy_async().await;
    let (tmp, model) = tiny_model(7);
    let ledger = Ledger::open(tmp.path().join("ledger.db")).await.unwrap();
    let live = profile_file(tmp.path(), "live.toml");
    ledger
        .pin_reference_hash(&NewReferenceHash {
            stack: STACK.into(),
            prompt_set: "bench:test".into(),
            profile_digest: live.profile.digest(),
            output_hash: "0123456789abcdef".into(),
            pinned_at: Utc::now(),
            pinned_by: "a person".into(),
            reason: "an older engine build".into(),
        })
        .await
        .unwrap();
    let scorer = bench(tmp.path(), &model);
    let exp = experiment(&ledger, &live, &live).await;
    let mut gate = HashGate::load(&ledger, STACK, "bench:test").await.unwrap();
    let runner = runner(&scorer, &ledger, 1, None);
    let err = runner
        .run_ab(
            exp,
            &live,
            &live,
            &mut gate,
            policy(),
            Floor::try_from(0.05).unwrap(),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, AbError::Gate(GateError::BaselineMismatch { .. })),
        "{err}"
    );
    assert!(err.to_string().contains("orchestrator rebaseline"), "{err}");
    let stored = ledger.runs(exp).await.unwrap();
    assert_eq!(stored.len(), 1);
    assert!(stored[0].refused && stored[0].seconds_per_token.is_none());
}

#[tokio::test]
async fn a_failed_candidate_run_ends_the_experiment_failed_with_its_cause() {
    let _heavy = crate::common::heavy_async().await;
    let (tmp, model) = tiny_model(7);
    let (_t2, broken) = tiny_model(7);
    let experts = broken.join("experts.bin");
    let len = std::fs::metadata(&experts).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&experts)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    let ledger = Ledger::open(tmp.path().join("ledger.db")).await.unwrap();
    let base = profile_file(tmp.path(), "live.toml");
    let cand = profile_file(tmp.path(), "candidate.toml");
    let scorer = PerProfileBench {
        baseline_path: base.path.clone(),
        baseline: bench(tmp.path(), &model),
        candidate: bench(tmp.path(), &broken),
    };
    let exp = experiment(&ledger, &base, &cand).await;
    let mut gate = HashGate::load(&ledger, STACK, "bench:test").await.unwrap();
    let runner = runner(&scorer, &ledger, 0, None);
    let report = runner
        .run_ab(
            exp,
            &base,
            &cand,
            &mut gate,
            policy(),
            Floor::try_from(0.05).unwrap(),
        )
        .await
        .unwrap();
    let AbVerdict::Failed {
        arm,
        order_index,
        reason,
        ..
    } = &report.verdict
    else {
        panic!("{:?}", report.verdict);
    };
    assert_eq!((*arm, *order_index), (Arm::Candidate, 1));
    assert!(reason.contains("an expert failed to load"), "{reason}");
    let stored = ledger.runs(exp).await.unwrap();
    assert_eq!(stored[1].exit_code, Some(4));
    assert!(
        stored[1].stderr_tail.contains("failed to load"),
        "{}",
        stored[1].stderr_tail
    );
    ledger
        .insert_verdict(exp, &report.verdict.to_new_verdict(Utc::now()))
        .await
        .unwrap();
}

#[tokio::test]
async fn shutdown_kills_the_running_child_group_promptly_and_records_the_run() {
    let _heavy = crate::common::heavy_async().await;
    let tmp = tempfile::tempdir().unwrap();
    let pidfile = tmp.path().join("pid");
    // A stand-in for a long engine run: it records its pid and sleeps.
    let slow = script(
        tmp.path(),
        "slow-bench-double",
        &format!("echo $$ > {}; exec sleep 100", pidfile.display()),
    );
    let cfg = config_with_bench(
        tmp.path(),
        &format!(r#""{}""#, slow.display()),
        "",
        60.0,
        0.1,
    );
    let scorer = BenchScorer::from_config(&cfg).unwrap();
    let ledger = Ledger::open(tmp.path().join("ledger.db")).await.unwrap();
    let live = profile_file(tmp.path(), "live.toml");
    let exp = experiment(&ledger, &live, &live).await;
    let mut gate = HashGate::load(&ledger, STACK, "bench:test").await.unwrap();
    let (handle, cancel) = Cancel::new();
    let runner = AbRunner {
        cancel,
        ..runner(&scorer, &ledger, 1, None)
    };
    let t0 = Instant::now();
    let fire = async {
        while !pidfile.exists() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        handle.cancel();
    };
    let (result, ()) = tokio::join!(
        runner.run_ab(
            exp,
            &live,
            &live,
            &mut gate,
            policy(),
            Floor::try_from(0.05).unwrap()
        ),
        fire
    );
    let err = result.unwrap_err();
    assert!(matches!(err, AbError::Cancelled { runs: 1 }), "{err}");
    assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
    let pid: i32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(!alive(pid), "the engine survived shutdown");
    let stored = ledger.runs(exp).await.unwrap();
    assert_eq!(stored.len(), 1);
    assert!(stored[0].error.as_deref().unwrap().contains("cancelled"));
}

#[tokio::test]
async fn the_noise_floor_comes_from_a_a_pairs_of_the_live_profile() {
    let _heavy = crate::common::heavy_async().await;
    let (tmp, model) = tiny_model(7);
    let ledger = Ledger::open(tmp.path().join("ledger.db")).await.unwrap();
    let scorer = bench(tmp.path(), &model);
    let live = profile_file(tmp.path(), "live.toml");
    let exp = experiment(&ledger, &live, &live).await;
    let mut gate = HashGate::load(&ledger, STACK, "bench:test").await.unwrap();
    let runner = runner(&scorer, &ledger, 0, None);
    let min = Floor::try_from(0.001).unwrap();
    let mut p = Policy::new(Confidence::try_from(0.9).unwrap(), 4, 6, min).unwrap();
    // Fewer than the estimator's minimum are raised to it.
    p.floor_pairs = 3;
    let report = runner
        .measure_noise_floor(exp, &live, &mut gate, p)
        .await
        .unwrap();
    let NoiseOutcome::Measured { floor, pairs } = &report.outcome else {
        panic!("{:?}", report.outcome);
    };
    assert_eq!(floor.n, orchestrator::judge::noise::MIN_PAIRS);
    assert_eq!(pairs.len(), floor.n);
    assert!(floor.measured > 0.0 && floor.value.get() >= min.get());
    assert_eq!(report.runs.len(), 2 * floor.n);
    let row = report
        .to_new_noise_floor(STACK, &live.profile.digest(), Utc::now(), Some(exp))
        .unwrap();
    assert_eq!(row.value, floor.measured);
    // The conditions it was measured under are kept with it.
    if orchestrator::measure::pressure::current().available() {
        assert!(row.cpu_pressure.is_some(), "{row:?}");
    }
    assert!(row.load1.is_some(), "{row:?}");
    // And its runs' typical contention, the reference of the judge's
    // interference rule: runnable tasks per core, at least 1.
    let per_run: Vec<f64> = report
        .runs
        .iter()
        .filter_map(|r| r.run.pressure.contention)
        .collect();
    assert_eq!(per_run.len(), report.runs.len(), "every run is read");
    assert!(per_run.iter().all(|c| *c >= 1.0), "{per_run:?}");
    assert!(row.contention.is_some_and(|c| c >= 1.0), "{row:?}");
    ledger.insert_noise_floor(&row).await.unwrap();
    let latest = ledger.latest_noise_floor(STACK).await.unwrap().unwrap();
    assert_eq!(latest.n as usize, floor.n);
    assert_eq!(latest.contention, row.contention);
}

/// A real bench scorer that records the deadline the runner gives each run
/// and, from run `hang_at` on, stands in for a hung engine by failing as a
/// timed-out run would at that deadline (without waiting it out).
struct DeadlineRecordingBench {
    inner: BenchScorer,
    deadlines: std::sync::Mutex<Vec<Duration>>,
    hang_at: usize,
}

impl Scorer for DeadlineRecordingBench {
    fn method(&self) -> Method {
        Method::Bench
    }
    async fn score(&self, p: &ProfileFile, cancel: &Cancel) -> Result<RunOutcome, RunFailure> {
        self.inner.score(p, cancel).await
    }
    async fn score_within(
        &self,
        p: &ProfileFile,
        cancel: &Cancel,
        deadline: Duration,
    ) -> Result<RunOutcome, RunFailure> {
        let n = {
            let mut d = self.deadlines.lock().unwrap();
            d.push(deadline);
            d.len()
        };
        if n >= self.hang_at {
            return Err(RunFailure {
                error: MeasureError::Timeout { after: deadline },
                exit_code: None,
                duration: deadline,
                stderr_tail: String::new(),
            });
        }
        self.inner.score(p, cancel).await
    }
}

/// Found under load on the demo: every run had the one fixed
/// `run_timeout_s`, too short for a loaded machine and far too long for a
/// hang. Now the configured value is the cap: a profile without history
/// gets it; once the ledger holds a few of its runs, a run gets 10 times
/// their slow end (at least 30 s), and a timeout there says so.
#[tokio::test]
async fn each_run_gets_a_deadline_from_its_profiles_recorded_runs() {
    let _heavy = crate::common::heavy_async().await;
    let (tmp, model) = tiny_model(7);
    let ledger = Ledger::open(tmp.path().join("ledger.db")).await.unwrap();
    let cfg = config_with_bench(tmp.path(), &tinyk3_argv(&model), "", 30.0, 0.1);
    let scorer = DeadlineRecordingBench {
        inner: BenchScorer::from_config(&cfg).unwrap(),
        deadlines: Default::default(),
        hang_at: 6,
    };
    let live = profile_file(tmp.path(), "live.toml");
    let exp = experiment(&ledger, &live, &live).await;
    let prompt_set = bench_prompt_set(cfg.stack.bench.as_ref().unwrap());
    let mut gate = HashGate::load(&ledger, STACK, &prompt_set).await.unwrap();
    let cap = Duration::from_secs(900);
    let runner = runner(&scorer, &ledger, 1, Some(cap));
    let report = runner
        .run_ab(
            exp,
            &live,
            &live,
            &mut gate,
            policy(),
            Floor::try_from(0.05).unwrap(),
        )
        .await
        .unwrap();
    let deadlines = scorer.deadlines.lock().unwrap().clone();
    // Two warmups and the first pair's runs: fewer than 3 valid runs of the
    // profile recorded, so the cap.
    assert_eq!(&deadlines[..5], &[cap; 5], "{deadlines:?}");
    // Then derived: these runs take well under 3 s, so the 30 s floor.
    assert_eq!(deadlines[5], Duration::from_secs(30), "{deadlines:?}");
    let AbVerdict::Failed { reason, .. } = &report.verdict else {
        panic!("the hung run fails the A/B: {:?}", report.verdict);
    };
    assert!(
        reason.contains("10x the slow end of this profile's recent runs")
            && reason.contains("run_timeout_s (900s)"),
        "{reason}"
    );
}

/// The real bench scorer, with a real user of the live server at `addr`
/// whose request is in the server while run number `at` goes on.
struct UserDuringRun {
    bench: BenchScorer,
    at: usize,
    calls: std::sync::atomic::AtomicUsize,
    addr: String,
}

impl Scorer for UserDuringRun {
    fn method(&self) -> Method {
        Method::Bench
    }
    async fn score(&self, p: &ProfileFile, cancel: &Cancel) -> Result<RunOutcome, RunFailure> {
        use std::sync::atomic::Ordering;
        if self.calls.fetch_add(1, Ordering::SeqCst) == self.at {
            let addr = self.addr.clone();
            // About 2 s of generation on the tiny checkpoint.
            std::thread::spawn(move || live_server::chat(&addr, 800));
            let t0 = Instant::now();
            while live_server::metric(&self.addr, "tinyk3_requests_in_flight") < 1.0 {
                assert!(
                    t0.elapsed() < Duration::from_secs(30),
                    "the user's request never ran"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            // Read at least once by the monitor while this run goes on.
            tokio::time::sleep(3 * stand_aside::POLL).await;
        }
        self.bench.score(p, cancel).await
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_block_a_live_user_interrupted_is_discarded_for_both_arms_and_rerun() {
    let _heavy = crate::common::heavy_async().await;
    let (tmp, model) = tiny_model(11);
    let live = profile_file(tmp.path(), "live.toml");
    let serve = Serve::start(&model, &live.path);
    let names = [
        ("live_requests_processing", "tinyk3_requests_in_flight"),
        ("live_requests_waiting", "tinyk3_requests_queued"),
        ("live_requests_total", "tinyk3_requests_total"),
    ];
    let metrics = orchestrator::config::Metrics {
        url: Some(format!("http://{}/metrics", serve.addr).parse().unwrap()),
        names: names
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect(),
        heat: None,
        heat_trace: None,
        heat_flush: None,
        required: false,
    };
    let load = LiveLoad::from_config(Some(&metrics), reqwest::Client::new()).unwrap();
    let settings = StandAsideSettings {
        above: 0,
        quiet: Duration::ZERO,
        max_wait: Duration::from_secs(120),
    };
    let sa = StandAside::spawn(load, settings, stand_aside::POLL, false, None);
    let ledger = Ledger::open(tmp.path().join("ledger.db")).await.unwrap();
    let exp = experiment(&ledger, &live, &live).await;
    let mut gate = HashGate::load(&ledger, STACK, "bench:test").await.unwrap();
    // The first paired run (after one warmup per arm) meets the user.
    let scorer = UserDuringRun {
        bench: bench(tmp.path(), &model),
        at: 2,
        calls: Default::default(),
        addr: serve.addr.clone(),
    };
    let runner = AbRunner {
        stand_aside: Some(&sa),
        ..runner(&scorer, &ledger, 1, None)
    };
    // A floor so wide that no block is discordant (an arm's runs 4 floors,
    // 7x, apart): only the user can discard a block here.
    let report = runner
        .run_ab(
            exp,
            &live,
            &live,
            &mut gate,
            policy(),
            Floor::try_from(0.5).unwrap(),
        )
        .await
        .unwrap();
    let AbVerdict::Decided(d) = &report.verdict else {
        panic!("{:?}", report.verdict)
    };
    assert!(d.too_noisy.is_none(), "{d:?}");
    let stored = ledger.runs(exp).await.unwrap();
    let discarded: Vec<u32> = stored
        .iter()
        .filter(|r| r.discarded)
        .map(|r| r.order_index)
        .collect();
    // The user's block, both arms, and nothing else; then it was re-run.
    assert_eq!(discarded, vec![2, 3, 4, 5], "{stored:#?}");
    assert_eq!(stored.len(), 2 + 4 + 2 * d.pairs);
    let live_requests = |i: usize| stored[i].pressure.live_requests;
    assert!(
        live_requests(2).is_some_and(|n| n >= 1.0),
        "{:?}",
        stored[2].pressure
    );
    // The runs after it waited for the user to be served (a run shorter
    // than a reading's interval may have none).
    for (i, r) in stored.iter().enumerate().skip(6) {
        assert_eq!(
            live_requests(i).unwrap_or(0.0),
            0.0,
            "run {i}: {:?}",
            r.pressure
        );
    }
}
