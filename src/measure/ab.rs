//! The paired, interleaved A/B runner: sequences runs (warmups discarded,
//! then pairs in ABBA order), records every run in the ledger as it ends,
//! passes each run through the hash gate, steps the judge after each pair,
//! and returns the verdict. Also the A/A measurement of the noise floor.
//!
//! All decisions are the judge's ([`crate::judge`]); this module only runs
//! things in the judge's order and keeps the books.

use chrono::{DateTime, Utc};
use serde_json::{Map, Value};

use super::cancel::Cancel;
use super::gate::{GateCheck, GateError, HashGate};
use super::scorer::{MeasureError, ProfileFile, RunFailure, RunOutcome, Scorer};
use crate::judge::{self, Decision, Floor, JudgeError, NoiseFloor, Policy, SequentialTest, Step};
use crate::ledger::{
    ExperimentId, Interval, Ledger, LedgerError, NewNoiseFloor, NewRun, NewVerdict, RunId,
    TokenParts,
};
use crate::vocab::{Arm, Digest, VerdictKind};

/// The time of day, injected so tests and replays are deterministic.
pub trait Clock: Send + Sync {
    fn now(&self) -> DateTime<Utc>;
}

/// The system clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

/// A run as recorded, with what the stack reported beyond the metric.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedRun {
    pub id: RunId,
    pub run: NewRun,
    /// The stack's extra report (tier hits, ...) of a valid run.
    pub extras: Option<Map<String, Value>>,
}

/// How an A/B (or A/A) ended.
#[derive(Debug, Clone, PartialEq)]
pub enum AbVerdict {
    /// The judge decided: `win`, `loss`, `within_noise` or `inconclusive`.
    Decided(Decision),
    /// A candidate run's output differed from the reference.
    HashMismatch {
        order_index: u32,
        expected: String,
        got: String,
    },
    /// A run could not be measured.
    Failed {
        arm: Arm,
        order_index: u32,
        reason: String,
    },
}

impl AbVerdict {
    pub fn kind(&self) -> VerdictKind {
        match self {
            AbVerdict::Decided(d) => d.kind,
            AbVerdict::HashMismatch { .. } => VerdictKind::HashMismatch,
            AbVerdict::Failed { .. } => VerdictKind::Failed,
        }
    }

    /// The ledger row; a hash mismatch carries no effect (the gate).
    pub fn to_new_verdict(&self, decided_at: DateTime<Utc>) -> NewVerdict {
        let refusal = |reason: String| NewVerdict {
            kind: self.kind(),
            decided_at,
            effect: None,
            interval: None,
            noise_floor: None,
            pairs: 0,
            method: None,
            reason: Some(reason),
        };
        match self {
            AbVerdict::Decided(d) => NewVerdict {
                kind: d.kind,
                decided_at,
                effect: Some(d.estimate.log_ratio),
                interval: Some(Interval {
                    low: d.estimate.interval.0,
                    high: d.estimate.interval.1,
                }),
                noise_floor: Some(d.floor.get()),
                pairs: u32::try_from(d.pairs).unwrap_or(u32::MAX),
                method: Some(d.method.to_string()),
                reason: None,
            },
            AbVerdict::HashMismatch {
                order_index,
                expected,
                got,
            } => refusal(format!(
                "run #{order_index} of the candidate produced output {got}, the pinned reference is {expected}: a speedup that changes the output is a broken engine, so nothing was measured"
            )),
            AbVerdict::Failed {
                arm,
                order_index,
                reason,
            } => refusal(format!(
                "run #{order_index} ({arm}) could not be measured: {reason}"
            )),
        }
    }
}

/// An A/B's verdict and its runs, in run order.
#[derive(Debug, Clone, PartialEq)]
pub struct AbReport {
    pub verdict: AbVerdict,
    pub runs: Vec<RecordedRun>,
}

/// The result of an A/A noise-floor measurement.
#[derive(Debug, Clone, PartialEq)]
pub enum NoiseOutcome {
    Measured {
        floor: NoiseFloor,
        /// `(baseline-slot, candidate-slot)` seconds per token per pair,
        /// in run order (both slots ran the live profile).
        pairs: Vec<(f64, f64)>,
    },
    /// A run failed, or the runs could not give a floor (with why).
    Failed { reason: String },
}

/// An A/A measurement and its runs.
#[derive(Debug, Clone, PartialEq)]
pub struct NoiseReport {
    pub outcome: NoiseOutcome,
    pub runs: Vec<RecordedRun>,
}

impl NoiseReport {
    /// The ledger row for a measured floor (the value before the clamp).
    pub fn to_new_noise_floor(
        &self,
        stack: &str,
        profile_digest: &Digest,
        measured_at: DateTime<Utc>,
        experiment_id: Option<ExperimentId>,
    ) -> Option<NewNoiseFloor> {
        let NoiseOutcome::Measured { floor, .. } = &self.outcome else {
            return None;
        };
        Some(NewNoiseFloor {
            stack: stack.to_string(),
            profile_digest: profile_digest.clone(),
            value: floor.measured,
            n: u32::try_from(floor.n).unwrap_or(u32::MAX),
            method: floor.method.to_string(),
            measured_at,
            experiment_id,
        })
    }
}

/// Why an A/B stopped without a verdict of its own.
#[derive(Debug, thiserror::Error)]
pub enum AbError {
    /// The baseline no longer produces the pinned output: fail the cycle.
    #[error(transparent)]
    Gate(#[from] GateError),
    #[error(
        "the measurement was cancelled by shutdown after {runs} run(s); the running child's process group was killed"
    )]
    Cancelled { runs: usize },
    #[error(transparent)]
    Ledger(#[from] LedgerError),
    #[error(
        "the judge did not decide after {pairs} pairs, which its policy forbids; this is a bug in orchestrator, please report it"
    )]
    Undecided { pairs: usize },
    #[error("the judge refused a pair: {0}")]
    Judge(#[from] JudgeError),
}

/// Runs A/Bs with one scorer against one ledger.
pub struct AbRunner<'a, S, C> {
    pub scorer: &'a S,
    pub ledger: &'a Ledger,
    pub clock: &'a C,
    pub cancel: Cancel,
    /// Discarded runs per arm before the pairs (`[measure] warmup_runs`).
    pub warmups_per_arm: usize,
}

/// What one run contributed.
enum Ran {
    Valid(f64),
    Ended(AbVerdict),
}

impl<S: Scorer + Sync, C: Clock> AbRunner<'_, S, C> {
    /// Paired A/B of `candidate` against `baseline` (the live profile)
    /// until the judge decides (at the latest at `policy.max_pairs`).
    pub async fn run_ab(
        &self,
        experiment_id: ExperimentId,
        baseline: &ProfileFile,
        candidate: &ProfileFile,
        gate: &mut HashGate,
        policy: Policy,
        floor: Floor,
    ) -> Result<AbReport, AbError> {
        let mut test = SequentialTest::new(policy, floor);
        let mut runs = Vec::new();
        let mut pair = [0.0f64; 2];
        let last = 2 * self.warmups_per_arm + 2 * policy.max_pairs;
        let base_digest = baseline.profile.digest();
        for run in 0..last {
            let slot = judge::slot(self.warmups_per_arm, run);
            let profile = match slot.profile {
                Arm::Baseline => baseline,
                _ => candidate,
            };
            let ran = self
                .one(
                    experiment_id,
                    run,
                    profile,
                    slot.profile,
                    &base_digest,
                    gate,
                    &mut runs,
                )
                .await?;
            let spt = match ran {
                Ran::Valid(spt) => spt,
                Ran::Ended(verdict) => return Ok(AbReport { verdict, runs }),
            };
            if slot.warmup {
                continue;
            }
            pair[usize::from(slot.profile == Arm::Candidate)] = spt;
            if (run - 2 * self.warmups_per_arm) % 2 == 1 {
                if let Step::Decided(d) = test.push(pair[0], pair[1])? {
                    return Ok(AbReport {
                        verdict: AbVerdict::Decided(d),
                        runs,
                    });
                }
            }
        }
        Err(AbError::Undecided {
            pairs: test.pairs(),
        })
    }

    /// A/A pairs of the live profile under the same protocol, giving the
    /// noise floor ([`judge::noise::estimate`]). `pairs` is raised to the
    /// estimator's minimum and to an even number (whole ABBA blocks).
    pub async fn measure_noise_floor(
        &self,
        experiment_id: ExperimentId,
        live: &ProfileFile,
        gate: &mut HashGate,
        pairs: usize,
        min_floor: Floor,
    ) -> Result<NoiseReport, AbError> {
        let pairs = pairs.max(judge::noise::MIN_PAIRS).next_multiple_of(2);
        let digest = live.profile.digest();
        let mut runs = Vec::new();
        let mut pair = [0.0f64; 2];
        let mut times = Vec::with_capacity(pairs);
        for run in 0..2 * self.warmups_per_arm + 2 * pairs {
            let slot = judge::slot(self.warmups_per_arm, run);
            // Both arms are the live profile: any output change is the
            // baseline's, which fails the cycle loudly.
            let ran = self
                .one(
                    experiment_id,
                    run,
                    live,
                    Arm::Baseline,
                    &digest,
                    gate,
                    &mut runs,
                )
                .await?;
            let spt = match ran {
                Ran::Valid(spt) => spt,
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
            if slot.warmup {
                continue;
            }
            pair[usize::from(slot.profile == Arm::Candidate)] = spt;
            if (run - 2 * self.warmups_per_arm) % 2 == 1 {
                judge::log_ratio(pair[0], pair[1])?;
                times.push((pair[0], pair[1]));
            }
        }
        let log_ratios: Vec<f64> = times.iter().map(|(b, c)| (c / b).ln()).collect();
        let outcome = match judge::noise::estimate(&log_ratios, min_floor) {
            Ok(floor) => NoiseOutcome::Measured {
                floor,
                pairs: times,
            },
            Err(e) => NoiseOutcome::Failed {
                reason: e.to_string(),
            },
        };
        Ok(NoiseReport { outcome, runs })
    }

    /// Runs, gates and records run number `run`; `gate_arm` is the arm the
    /// hash gate judges it as.
    #[expect(clippy::too_many_arguments, reason = "one private step of two loops")]
    async fn one(
        &self,
        experiment_id: ExperimentId,
        run: usize,
        profile: &ProfileFile,
        gate_arm: Arm,
        baseline_digest: &Digest,
        gate: &mut HashGate,
        runs: &mut Vec<RecordedRun>,
    ) -> Result<Ran, AbError> {
        let slot = judge::slot(self.warmups_per_arm, run);
        let order_index = u32::try_from(run).unwrap_or(u32::MAX);
        if self.cancel.is_cancelled() {
            return Err(AbError::Cancelled { runs: runs.len() });
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
        };
        let outcome: RunOutcome = match self.scorer.score(profile, &self.cancel).await {
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
                Ok(Ran::Valid(outcome.seconds_per_token))
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
        runs.push(RecordedRun { id, run, extras });
        Ok(())
    }
}
