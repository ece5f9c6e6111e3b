//! The paired, interleaved A/B runner: sequences runs (warmups discarded,
//! then pairs in ABBA order), records every run in the ledger as it ends,
//! passes each run through the hash gate, steps the judge after each pair,
//! and returns the verdict. Also the A/A measurement of the noise floor.
//!
//! All decisions are the judge's ([`crate::judge`]); this module only runs
//! things in the judge's order and keeps the books. What a measurement ends
//! with (its verdict, runs and reasons) is [`super::ab_outcome`].

use std::time::Duration;

use serde_json::{Map, Value};

use super::deadline::{self, Deadline};
use super::gate::{GateCheck, HashGate};
use super::pressure::{self, Pressure};
use super::scorer::{MeasureError, RunFailure, RunOutcome, Scorer};
use super::stand_aside::{Gate, Interruptions, RunWatch, StandAside};
use crate::clock::Clock;
use crate::judge::{
    self, AbSchedule, Floor, FloorEnd, FloorNext, FloorSchedule, Next, Policy, Timed,
};
use crate::ledger::{ExperimentId, Ledger, NewRun, RunId, RunPressure, TokenParts};
use crate::process::cancel::Cancel;
use crate::profile::ProfileFile;
use crate::progress::Progress;
use crate::vocab::{Arm, Digest};

pub use super::ab_outcome::*;

/// Runs A/Bs with one scorer against one ledger.
pub struct AbRunner<'a, S, C> {
    pub scorer: &'a S,
    pub ledger: &'a Ledger,
    pub clock: &'a C,
    pub cancel: Cancel,
    /// Discarded runs per arm before the pairs (`[measure] warmup_runs`).
    pub warmups_per_arm: usize,
    /// `[measure] run_timeout_s` as the cap of deadlines derived from each
    /// profile's recorded runs ([`super::deadline`]); `None`: the scorer's
    /// own fixed timeout.
    pub deadline_cap: Option<Duration>,
    /// Runs done of at most how many, for people and the metrics endpoint.
    pub progress: Progress,
    /// The live server's users first: each run waits for them, and a block
    /// they interrupted is re-run ([`super::stand_aside`]); `None` where
    /// the live load is not read.
    pub stand_aside: Option<&'a StandAside>,
}

/// What an A/B measures: its experiment, its two profiles, its policy.
struct Arms<'p> {
    experiment_id: ExperimentId,
    baseline: &'p ProfileFile,
    candidate: &'p ProfileFile,
    policy: Policy,
}

/// What one run contributed.
enum Ran {
    /// A valid run, and whether the live server's users interrupted it.
    Valid(Timed, bool),
    Ended(AbVerdict),
}

impl<S: Scorer + Sync, C: Clock> AbRunner<'_, S, C> {
    /// Paired A/B of `candidate` against `baseline` (the live profile)
    /// until the judge decides (at the latest at `policy.max_pairs`, plus
    /// the bounded re-runs of discarded blocks).
    pub async fn run_ab(
        &self,
        experiment_id: ExperimentId,
        baseline: &ProfileFile,
        candidate: &ProfileFile,
        gate: &mut HashGate,
        policy: Policy,
        floor: Floor,
    ) -> Result<AbReport, AbError> {
        let schedule = AbSchedule::new(policy, floor, self.warmups_per_arm);
        let arms = Arms {
            experiment_id,
            baseline,
            candidate,
            policy,
        };
        let report = self.ab_runs(&arms, gate, schedule, Vec::new()).await;
        self.scorer.finish().await;
        match report? {
            BoundedAb::Done(report) => Ok(report),
            // A schedule with a measured floor never asks for one.
            BoundedAb::NeedsFloor(p) => Err(AbError::Undecided {
                pairs: p.runs.len() / 2,
            }),
        }
    }

    /// The A/B of a live profile with no valid floor, judged against the
    /// bound `policy.max_floor` first ([`AbSchedule::against_bound`]);
    /// `None` when the policy has no bound.
    pub async fn run_ab_against_bound(
        &self,
        experiment_id: ExperimentId,
        baseline: &ProfileFile,
        candidate: &ProfileFile,
        gate: &mut HashGate,
        policy: Policy,
    ) -> Option<Result<BoundedAb, AbError>> {
        let schedule = AbSchedule::against_bound(policy, self.warmups_per_arm)?;
        let arms = Arms {
            experiment_id,
            baseline,
            candidate,
            policy,
        };
        let report = self.ab_runs(&arms, gate, schedule, Vec::new()).await;
        // Paused for its floor, the A/B keeps what its scorer holds (a
        // shadow's server) warm for [`Self::resume_ab`], which goes on with
        // no warmups; it is released when the A/B ends (or with the scorer).
        if !matches!(report, Ok(BoundedAb::NeedsFloor(_))) {
            self.scorer.finish().await;
        }
        Some(report)
    }

    /// Goes on with an A/B paused for its floor, now measured: its pairs
    /// are judged again against `floor` from the first look, the blocks the
    /// floor discards are marked so, and it runs on until it decides.
    #[expect(
        clippy::too_many_arguments,
        reason = "the A/B's own arguments, and its floor"
    )]
    pub async fn resume_ab(
        &self,
        experiment_id: ExperimentId,
        baseline: &ProfileFile,
        candidate: &ProfileFile,
        gate: &mut HashGate,
        policy: Policy,
        paused: Box<PausedAb>,
        floor: Floor,
    ) -> Result<AbReport, AbError> {
        let PausedAb {
            mut schedule,
            mut runs,
        } = *paused;
        let resumed = schedule.resume(floor, policy.floor_contention)?;
        self.discard_pairs(&mut runs, &resumed.discarded_pairs)
            .await?;
        if let Next::Decided(d) = resumed.next {
            self.scorer.finish().await;
            return Ok(AbReport {
                verdict: AbVerdict::Decided(d),
                runs,
            });
        }
        let arms = Arms {
            experiment_id,
            baseline,
            candidate,
            policy,
        };
        let report = self.ab_runs(&arms, gate, schedule, runs).await;
        self.scorer.finish().await;
        match report? {
            BoundedAb::Done(report) => Ok(report),
            BoundedAb::NeedsFloor(p) => Err(AbError::Undecided {
                pairs: p.runs.len() / 2,
            }),
        }
    }

    async fn ab_runs(
        &self,
        arms: &Arms<'_>,
        gate: &mut HashGate,
        mut schedule: AbSchedule,
        mut runs: Vec<RecordedRun>,
    ) -> Result<BoundedAb, AbError> {
        let policy = arms.policy;
        let base_digest = arms.baseline.profile.digest();
        // Bounded by the policy; the guard only turns a bug into an error.
        let start = runs.len();
        let most = start
            + 2 * self.warmups_per_arm
            + 2 * (policy.max_pairs + 2 * policy.max_discarded_blocks + 2);
        let bound = start + 2 * self.warmups_per_arm + 2 * policy.max_pairs;
        let mut users = Interruptions::default();
        let most_live = policy.max_discarded_blocks;
        while runs.len() < most + users.extra_runs() {
            self.progress.runs(runs.len(), bound + discarded(&runs));
            let slot = schedule.slot();
            let profile = match slot.profile {
                Arm::Baseline => arms.baseline,
                _ => arms.candidate,
            };
            let ran = self
                .one(
                    arms.experiment_id,
                    runs.len(),
                    slot,
                    profile,
                    slot.profile,
                    &base_digest,
                    gate,
                    &mut runs,
                )
                .await?;
            let timed = match ran {
                Ran::Valid(t, interrupted) => {
                    if interrupted {
                        schedule.interrupt();
                    }
                    t
                }
                Ran::Ended(verdict) => return Ok(BoundedAb::Done(AbReport { verdict, runs })),
            };
            match schedule.record(timed)? {
                Next::Run => {}
                Next::Discarded(d) => {
                    self.block_discarded(&mut runs, &mut users, d.live, most_live)
                        .await?;
                }
                Next::NeedsFloor => {
                    return Ok(BoundedAb::NeedsFloor(Box::new(PausedAb { schedule, runs })));
                }
                Next::Decided(d) => {
                    if d.too_noisy.is_some() {
                        self.discard_last_block(&mut runs).await?;
                    }
                    return Ok(BoundedAb::Done(AbReport {
                        verdict: AbVerdict::Decided(d),
                        runs,
                    }));
                }
            }
        }
        Err(AbError::Undecided {
            pairs: runs.len() / 2,
        })
    }

    /// A/A pairs of the live profile under the same protocol, giving the
    /// noise floor ([`judge::noise::estimate`]): `policy.floor_pairs`
    /// pairs, raised to the estimator's minimum and to whole blocks.
    pub async fn measure_noise_floor(
        &self,
        experiment_id: ExperimentId,
        live: &ProfileFile,
        gate: &mut HashGate,
        policy: Policy,
    ) -> Result<NoiseReport, AbError> {
        let report = self.floor_runs(experiment_id, live, gate, policy).await;
        self.scorer.finish().await;
        report
    }

    async fn floor_runs(
        &self,
        experiment_id: ExperimentId,
        live: &ProfileFile,
        gate: &mut HashGate,
        policy: Policy,
    ) -> Result<NoiseReport, AbError> {
        let mut schedule = FloorSchedule::new(policy, self.warmups_per_arm);
        let digest = live.profile.digest();
        let mut runs = Vec::new();
        let most = schedule.most_runs();
        let bound = 2 * self.warmups_per_arm + 2 * schedule.pairs_wanted();
        let mut users = Interruptions::default();
        let most_live = policy.max_discarded_blocks;
        while runs.len() < most + users.extra_runs() {
            self.progress.runs(runs.len(), bound + discarded(&runs));
            let slot = schedule.slot();
            // Both arms are the live profile: any output change is the
            // baseline's, which fails the cycle loudly.
            let ran = self
                .one(
                    experiment_id,
                    runs.len(),
                    slot,
                    live,
                    Arm::Baseline,
                    &digest,
                    gate,
                    &mut runs,
                )
                .await?;
            let timed = match ran {
                Ran::Valid(t, interrupted) => {
                    if interrupted {
                        schedule.interrupt();
                    }
                    t
                }
                Ran::Ended(v) => {
                    let reason = v
                        .to_new_verdict(self.clock.now())
                        .reason
                        .unwrap_or_default();
                    return Ok(NoiseReport {
                        outcome: NoiseOutcome::Failed { reason },
                        runs,
                    });
                }
            };
            let end = match schedule.record(timed)? {
                FloorNext::Run => continue,
                FloorNext::Discarded(d) => {
                    self.block_discarded(&mut runs, &mut users, d.live, most_live)
                        .await?;
                    continue;
                }
                FloorNext::Done(end) => end,
            };
            let outcome = match end {
                FloorEnd::Measured { floor, pairs, .. } => NoiseOutcome::Measured { floor, pairs },
                FloorEnd::TooNoisy { discards, pairs } => {
                    self.discard_last_block(&mut runs).await?;
                    NoiseOutcome::TooNoisy {
                        reason: too_noisy_reason(&discards),
                        pairs,
                    }
                }
                FloorEnd::Unusable(e) => NoiseOutcome::Failed {
                    reason: e.to_string(),
                },
            };
            return Ok(NoiseReport { outcome, runs });
        }
        Err(AbError::Undecided {
            pairs: runs.len() / 2,
        })
    }

    /// Marks the runs of these pairs discarded, here and in the ledger
    /// (those not marked yet).
    async fn discard_pairs(
        &self,
        runs: &mut [RecordedRun],
        pairs: &[usize],
    ) -> Result<(), AbError> {
        let hit = |r: &RecordedRun| {
            !r.discarded
                && r.run
                    .pair_index
                    .and_then(|p| usize::try_from(p).ok())
                    .is_some_and(|p| pairs.contains(&p))
        };
        let ids: Vec<RunId> = runs.iter().filter(|r| hit(r)).map(|r| r.id).collect();
        if ids.is_empty() {
            return Ok(());
        }
        self.ledger.mark_discarded(&ids).await?;
        for r in runs.iter_mut().filter(|r| hit(r)) {
            r.discarded = true;
        }
        Ok(())
    }

    /// Marks the block the judge discarded; defers the measurement once the
    /// live server's users interrupted more than `most` of its blocks.
    async fn block_discarded(
        &self,
        runs: &mut [RecordedRun],
        users: &mut Interruptions,
        live: usize,
        most: usize,
    ) -> Result<(), AbError> {
        self.discard_last_block(runs).await?;
        users
            .note(live, most)
            .map_err(|deferral| AbError::Deferred {
                runs: runs.len(),
                deferral,
            })
    }

    /// Marks the last block's four runs as discarded, here and in the ledger.
    async fn discard_last_block(&self, runs: &mut [RecordedRun]) -> Result<(), AbError> {
        let n = runs.len();
        let block = &mut runs[n.saturating_sub(4)..];
        let ids: Vec<RunId> = block.iter().map(|r| r.id).collect();
        self.ledger.mark_discarded(&ids).await?;
        for r in block {
            r.discarded = true;
        }
        Ok(())
    }

    /// Runs, gates and records run number `run`; `gate_arm` is the arm the
    /// hash gate judges it as.
    #[expect(clippy::too_many_arguments, reason = "one private step of two loops")]
    async fn one(
        &self,
        experiment_id: ExperimentId,
        run: usize,
        slot: judge::Slot,
        profile: &ProfileFile,
        gate_arm: Arm,
        baseline_digest: &Digest,
        gate: &mut HashGate,
        runs: &mut Vec<RecordedRun>,
    ) -> Result<Ran, AbError> {
        let order_index = u32::try_from(run).unwrap_or(u32::MAX);
        if self.cancel.is_cancelled() {
            return Err(AbError::Cancelled { runs: runs.len() });
        }
        // Between runs, never during one: the users of the live server go
        // first.
        if let Some(sa) = self.stand_aside {
            match sa.wait_clear(&self.cancel).await {
                Gate::Clear(_) => {}
                Gate::Cancelled => return Err(AbError::Cancelled { runs: runs.len() }),
                Gate::Deferred(deferral) => {
                    return Err(AbError::Deferred {
                        runs: runs.len(),
                        deferral,
                    });
                }
            }
        }
        let started_at = self.clock.now();
        let mut row = NewRun {
            experiment_id,
            arm: slot.ledger_arm(),
            order_index,
            pair_index: slot.pair.map(|p| u32::try_from(p).unwrap_or(u32::MAX)),
            started_at,
            seconds_per_token: None,
            timing_source: None,
            tokens: None,
            output_hash: None,
            exit_code: None,
            duration_s: 0.0,
            stderr_tail: String::new(),
            refused: false,
            error: None,
            parts: TokenParts::default(),
            pressure: RunPressure::default(),
        };
        let deadline = match self.deadline_cap {
            Some(cap) => {
                let recent = self
                    .ledger
                    .recent_run_durations(&profile.profile.digest(), deadline::HISTORY)
                    .await?;
                Some(Deadline::for_run(cap, &recent, runs.is_empty()))
            }
            None => None,
        };
        let sample = pressure::Sample::now();
        let watch = self
            .stand_aside
            .map(|sa| sa.watch_run(self.scorer.sends_to_live_server()));
        let scored = match (deadline, self.deadline_cap) {
            (Some(d), Some(cap)) => {
                let scored = self
                    .scorer
                    .score_within(profile, &self.cancel, d.duration())
                    .await;
                overran(scored, d, cap)
            }
            _ => self.scorer.score(profile, &self.cancel).await,
        };
        let machine = sample.until_now();
        let seen = watch.map(RunWatch::finish);
        let live = seen.and_then(|s| s.peak);
        let interrupted = self
            .stand_aside
            .zip(seen)
            .is_some_and(|(sa, seen)| sa.interrupted(&seen));
        pressure::warn_once_if_missing(&machine);
        row.pressure = run_pressure(&machine);
        row.pressure.live_requests = live;
        let outcome: RunOutcome = match scored {
            Ok(o) => o,
            Err(RunFailure {
                error,
                exit_code,
                duration,
                stderr_tail,
            }) => {
                row.exit_code = exit_code;
                row.duration_s = duration.as_secs_f64();
                row.stderr_tail = stderr_tail;
                row.error = Some(error.to_string());
                self.record(row, None, runs).await?;
                if matches!(error, MeasureError::Cancelled) {
                    return Err(AbError::Cancelled { runs: runs.len() });
                }
                return Ok(Ran::Ended(AbVerdict::Failed {
                    arm: slot.profile,
                    warmup: slot.warmup,
                    order_index,
                    reason: error.to_string(),
                }));
            }
        };
        row.timing_source = Some(outcome.timing_source);
        row.tokens = outcome.tokens;
        row.output_hash = Some(outcome.output_hash.as_str().to_string());
        row.exit_code = outcome.exit_code;
        row.duration_s = outcome.duration.as_secs_f64();
        row.stderr_tail = outcome.stderr_tail.clone();
        let check = gate
            .check(
                self.ledger,
                gate_arm,
                &outcome.output_hash,
                baseline_digest,
                self.clock.now(),
            )
            .await;
        match check {
            Ok(GateCheck::Match | GateCheck::Pinned) => {
                row.seconds_per_token = Some(outcome.seconds_per_token);
                // Only a valid run's parts are figures (the hash gate passed).
                row.parts = outcome.parts;
                self.record(row, Some(outcome.extras), runs).await?;
                Ok(Ran::Valid(
                    Timed {
                        seconds_per_token: outcome.seconds_per_token,
                        contention: machine.contention,
                    },
                    interrupted,
                ))
            }
            Ok(GateCheck::Mismatch { expected, got }) => {
                row.refused = true;
                row.error = Some(format!(
                    "output hash {got} differs from the pinned reference {expected}"
                ));
                self.record(row, Some(outcome.extras), runs).await?;
                Ok(Ran::Ended(AbVerdict::HashMismatch {
                    order_index,
                    expected,
                    got,
                }))
            }
            Err(e) => {
                // Kept as evidence, never a metric.
                row.refused = true;
                row.error = Some(e.to_string());
                self.record(row, Some(outcome.extras), runs).await?;
                Err(e.into())
            }
        }
    }

    async fn record(
        &self,
        run: NewRun,
        extras: Option<Map<String, Value>>,
        runs: &mut Vec<RecordedRun>,
    ) -> Result<(), AbError> {
        let id = self.ledger.insert_run(&run).await?;
        runs.push(RecordedRun {
            id,
            run,
            extras,
            discarded: false,
        });
        Ok(())
    }
}

/// The ledger's columns of a run's pressure.
/// Runs of a measurement so far that were discarded (and are re-run).
fn discarded(runs: &[RecordedRun]) -> usize {
    runs.iter().filter(|r| r.discarded).count()
}

/// A timeout at a derived deadline says so: which runs it came from and
/// that the cap is the configured value.
fn overran(
    scored: Result<RunOutcome, RunFailure>,
    d: Deadline,
    cap: Duration,
) -> Result<RunOutcome, RunFailure> {
    match (scored, d) {
        (Err(mut f), Deadline::Derived { typical, .. }) => {
            if let MeasureError::Timeout { after } = f.error {
                f.error = MeasureError::Overran {
                    after,
                    typical,
                    cap,
                };
            }
            Err(f)
        }
        (scored, _) => scored,
    }
}

fn run_pressure(p: &Pressure) -> RunPressure {
    RunPressure {
        load1: p.load1,
        cpu_pressure: p.cpu,
        memory_pressure: p.memory,
        io_pressure: p.io,
        contention: p.contention,
        live_requests: None,
    }
}
