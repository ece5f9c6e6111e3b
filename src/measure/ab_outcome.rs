//! What an A/B or an A/A measurement ends with: its runs as recorded, its
//! verdict or why it has none, and the reasons the cycle shows. The runner
//! that produces them is [`super::ab`].

use chrono::{DateTime, Utc};
use serde_json::{Map, Value};

use super::gate::GateError;
use crate::judge::{self, AbSchedule, Decision, Discards, Floor, JudgeError, NoiseFloor};
use crate::ledger::{
    ExperimentId, Interval, LedgerError, NewNoiseFloor, NewRun, NewVerdict, RunId, RunPressure,
};
use crate::vocab::{Arm, Digest, VerdictKind};

/// A run as recorded, with what the stack reported beyond the metric.
#[derive(Debug, Clone, PartialEq)]
pub struct RecordedRun {
    pub id: RunId,
    pub run: NewRun,
    /// The stack's extra report (tier hits, ...) of a valid run.
    pub extras: Option<Map<String, Value>>,
    /// Its block was discarded by the judge (and marked so in the ledger).
    pub discarded: bool,
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
        /// The profile it ran.
        arm: Arm,
        /// A warmup (stored with `arm = warmup`), not a measured run.
        warmup: bool,
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
            floor_is_bound: false,
            pairs: 0,
            method: None,
            reason: Some(reason),
        };
        match self {
            AbVerdict::Decided(d) => {
                // A too-noisy A/B with no accepted block has no effect.
                let measured = d.pairs > 0;
                NewVerdict {
                    kind: d.kind,
                    decided_at,
                    effect: measured.then_some(d.estimate.log_ratio),
                    // What people read: the interval at the reported level.
                    interval: measured.then_some(Interval {
                        low: d.reported.0,
                        high: d.reported.1,
                    }),
                    noise_floor: Some(d.floor.get()),
                    floor_is_bound: d.against_bound,
                    pairs: u32::try_from(d.pairs).unwrap_or(u32::MAX),
                    method: Some(d.method.to_string()),
                    reason: match d.too_noisy {
                        Some(n) => Some(too_noisy_reason(&n)),
                        None if d.against_bound => Some(against_bound_reason(d.floor)),
                        None => None,
                    },
                }
            }
            AbVerdict::HashMismatch {
                order_index,
                expected,
                got,
            } => refusal(format!(
                "run #{order_index} of the candidate produced output {got}, the pinned reference is {expected}: a speedup that changes the output is a broken engine, so nothing was measured"
            )),
            AbVerdict::Failed {
                arm,
                warmup,
                order_index,
                reason,
            } => {
                // Named as the ledger stores the run: a warmup is `warmup`.
                let run = if *warmup {
                    format!("warmup of the {arm}")
                } else {
                    arm.to_string()
                };
                refusal(format!(
                    "run #{order_index} ({run}) could not be measured: {reason}"
                ))
            }
        }
    }
}

/// Why an A/B or a floor ended without a decision on the profiles: the
/// machine's own noise. Names what was seen and what to do.
pub fn too_noisy_reason(n: &Discards) -> String {
    let mut seen = Vec::new();
    if n.interfered > 0 {
        seen.push(format!(
            "{} block(s) ran under interference (a run shared each core among up to {:.0}% more tasks than the noise floor's runs did)",
            n.interfered,
            100.0 * n.worst_rise
        ));
    }
    if n.discordant > 0 {
        seen.push(format!(
            "{} block(s) had runs of one arm far apart",
            n.discordant
        ));
    }
    format!(
        "machine too noisy to decide: {}; nothing is staged from it. Stop the competing work (or let it settle, and the floor is measured under it), or raise [measure] max_contention_rise / max_discarded_blocks",
        seen.join(", ")
    )
}

/// What a verdict judged against the bound says of its floor: no floor
/// was measured, and the bound is not one.
pub fn against_bound_reason(bound: Floor) -> String {
    format!(
        "judged against the bound [measure] max_noise_floor ({bound}), no noise floor measured: the verdict holds against every smaller floor"
    )
}

/// An A/B's verdict and its runs, in run order.
#[derive(Debug, Clone, PartialEq)]
pub struct AbReport {
    pub verdict: AbVerdict,
    pub runs: Vec<RecordedRun>,
}

/// How an A/B judged against the bound stopped.
#[derive(Debug)]
pub enum BoundedAb {
    /// Decided (against the bound, or ended by a failed run).
    Done(AbReport),
    /// The bound could not decide: measure the floor, then
    /// [`AbRunner::resume_ab`] (or [`PausedAb::without_floor`]).
    NeedsFloor(Box<PausedAb>),
}

/// An A/B waiting for its noise floor: its schedule and its runs so far.
#[derive(Debug)]
pub struct PausedAb {
    pub(super) schedule: AbSchedule,
    pub(super) runs: Vec<RecordedRun>,
}

impl PausedAb {
    /// The A/B's end when its floor could not be measured: `inconclusive`,
    /// `why` the reason, with where the pairs stood against the bound.
    pub fn without_floor(self, why: &str) -> AbReport {
        let verdict = match self.schedule.without_floor() {
            Some(d) => AbVerdict::Decided(d),
            None => AbVerdict::Failed {
                arm: Arm::Baseline,
                warmup: false,
                order_index: u32::try_from(self.runs.len()).unwrap_or(u32::MAX),
                reason: why.to_string(),
            },
        };
        AbReport {
            verdict,
            runs: self.runs,
        }
    }
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
    /// Too many blocks ran under pressure: no floor (with why), and every
    /// A/A pair run, for the record.
    TooNoisy {
        reason: String,
        pairs: Vec<(f64, f64)>,
    },
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
        let used: Vec<&RecordedRun> = self
            .runs
            .iter()
            .filter(|r| r.run.pair_index.is_some() && !r.discarded)
            .collect();
        let median_of = |f: fn(&RunPressure) -> Option<f64>| {
            let v: Vec<f64> = used.iter().filter_map(|r| f(&r.run.pressure)).collect();
            judge::noise::median(&v)
        };
        Some(NewNoiseFloor {
            stack: stack.to_string(),
            profile_digest: profile_digest.clone(),
            value: floor.measured,
            n: u32::try_from(floor.n).unwrap_or(u32::MAX),
            method: floor.method.to_string(),
            measured_at,
            experiment_id,
            load1: median_of(|p| p.load1),
            cpu_pressure: median_of(|p| p.cpu_pressure),
            contention: median_of(|p| p.contention),
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
    /// Standing aside for the live server's users took too long
    /// ([`super::stand_aside`]): the measurement stops between two runs.
    #[error("deferred after {runs} run(s): {}", deferral.reason)]
    Deferred {
        runs: usize,
        deferral: super::stand_aside::Deferral,
    },
}
