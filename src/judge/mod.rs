//! Judgement: the measured noise floor and the paired sequential A/B.
//!
//! - [`policy`]: validated confidence, floor and pair budget (built from config).
//! - [`noise`]: the noise floor from A/A pairs (robust scale, clamped below).
//! - [`protocol`]: which arm runs next: warmups, then ABBA-ordered pairs.
//! - [`interval`]: one robust statistic per ABBA block, and its interval.
//! - [`pocock`]: the boundary that keeps the interval valid at every look.
//! - [`interference`]: which blocks a burst of competing work hit (a run
//!   contended beyond its floor's runs), to be re-run.
//! - [`sequential`]: the paired sequential test: when to stop, and the verdict.
//! - [`changepoint`]: PELT change points of a series (the report's floors
//!   and baseline, the live metrics a floor and a waiting loop watch).
//! - [`schedule`]: the run schedules of an A/B and a floor A/A, as state
//!   machines the daemon and the replay benchmark both drive.
//!
//! Everything here is a pure function of measured numbers; measuring them is
//! `measure`'s job and storing them the ledger's.

pub mod changepoint;
pub mod interference;
pub mod interval;
pub mod noise;
pub mod pocock;
pub mod policy;
pub mod protocol;
pub mod schedule;
pub mod sequential;

pub use interval::Estimate;
pub use noise::{NoiseError, NoiseFloor};
pub use policy::{Confidence, Floor, ParamError, Policy};
pub use protocol::{Slot, pair_order, slot};
pub use schedule::{AbSchedule, BOUND_LOOKS, FloorEnd, FloorNext, FloorSchedule, Next, Resumed};
pub use sequential::{
    Decision, Discards, SequentialTest, Step, Timed, classify, confirm, decide, log_ratio,
};

use crate::vocab::{Arm, VerdictKind};

/// Data the judgement cannot use; the cycle records it as a `failed` run.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum JudgeError {
    #[error("a {arm} run reported {value} s/token; a valid run reports a finite value > 0")]
    InvalidTime { arm: Arm, value: f64 },
    #[error(
        "this A/B already decided `{kind}` after {pairs} pairs; start a new test \
         (an independent replication) to measure again"
    )]
    AlreadyDecided { kind: VerdictKind, pairs: usize },
    #[error(
        "this A/B waits for its noise floor (the bound could not decide it); measure the floor \
         and resume the A/B with it before running more pairs; this is a bug in orchestrator"
    )]
    WaitsForFloor,
    #[error(
        "this A/B is not waiting for a noise floor; only an A/B judged against the bound that \
         asked for one resumes with it; this is a bug in orchestrator"
    )]
    NotWaitingForFloor,
}
