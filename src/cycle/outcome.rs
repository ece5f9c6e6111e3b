//! What a cycle's kinds hand back, as values: what a kind set out to do
//! ([`Tried`]), what its judged A/B, its A/A or its refusal decided
//! ([`Judged`], as recorded in the verdict), and the stage a confirmed win
//! became ([`Done`]). The caller stages from a [`Judged`] and the cycle's
//! summary line is built from a [`Done`]; nothing is read back out of a
//! shared record.

use serde_json::Value;

use crate::ledger::{ExperimentId, Interval, NewVerdict, RecordedWin, StageId};
use crate::measure::ab::RecordedRun;
use crate::menu::MenuId;
use crate::vocab::{Arm, Scheduled, VerdictKind};

/// What a kind of cycle set out to do, as far as it got: known before it
/// measures, so a cycle cut short still says it (on its line, and in the
/// `failed` verdict of the experiment it had created).
#[derive(Debug, Clone, Default)]
pub(super) struct Tried {
    pub scheduled: Option<Scheduled>,
    pub menu_id: Option<MenuId>,
    pub params: Option<Value>,
    pub experiment_id: Option<ExperimentId>,
    /// The measured floor the A/B was being judged against.
    pub floor: Option<f64>,
    /// The experiment's `failed` verdict is recorded already (an A/A cut
    /// short records its own).
    pub recorded: bool,
}

impl Tried {
    /// An experiment `menu_id` with `params`, scheduled or not.
    pub fn experiment(scheduled: Option<Scheduled>, menu_id: MenuId, params: Value) -> Tried {
        Tried {
            scheduled,
            menu_id: Some(menu_id),
            params: Some(params),
            ..Tried::default()
        }
    }

    /// Nothing said yet: a stop from deep down that its caller names.
    pub fn is_empty(&self) -> bool {
        self.scheduled.is_none()
            && self.menu_id.is_none()
            && self.experiment_id.is_none()
            && self.floor.is_none()
            && !self.recorded
    }

    /// What the cycle line says it is measuring.
    pub fn measuring(&self) -> String {
        match (self.scheduled, self.menu_id) {
            (Some(Scheduled::Confirmation), Some(m)) => {
                format!("confirmation A/B of {}", m.as_str())
            }
            (Some(Scheduled::Composition), _) => "A/B of a composition of staged wins".into(),
            (_, Some(m)) => format!("A/B of {}", m.as_str()),
            _ => "A/B".into(),
        }
    }
}

/// What an experiment (or a refused cycle) decided, as its verdict records
/// it: returned by the judged A/B for its caller to stage from.
#[derive(Debug, Clone)]
pub(super) struct Judged {
    pub verdict: VerdictKind,
    /// Log ratio candidate/baseline and its interval.
    pub effect: Option<(f64, Interval)>,
    /// The measured floor it was judged against; `None` against the bound.
    pub floor: Option<f64>,
    /// Why, for failures, hash mismatches, refusals and a machine too noisy
    /// to decide.
    pub reason: Option<String>,
    /// Median seconds per token of the baseline's valid runs.
    pub base_measured: Option<f64>,
    /// The win as its verdict recorded it, what a stage is built from;
    /// `None` for any other verdict.
    pub win: Option<RecordedWin>,
}

impl Judged {
    /// A verdict with no measurement: a refusal, or a failure.
    pub fn refusal(verdict: VerdictKind, why: &str) -> Judged {
        Judged {
            verdict,
            effect: None,
            floor: None,
            reason: Some(why.to_string()),
            base_measured: None,
            win: None,
        }
    }

    /// The verdict `v` recorded for experiment `experiment_id` from its
    /// runs `runs`, judged against `floor`.
    pub fn recorded(
        experiment_id: ExperimentId,
        v: &NewVerdict,
        floor: Option<f64>,
        runs: &[RecordedRun],
    ) -> Judged {
        Judged {
            verdict: v.kind,
            effect: v.effect.zip(v.interval),
            floor,
            reason: v.reason.clone(),
            base_measured: median_baseline(runs),
            win: RecordedWin::of(experiment_id, v),
        }
    }
}

/// What one cycle did: what it tried, what that decided, and the stage.
#[derive(Debug, Clone)]
pub(super) struct Done {
    pub tried: Tried,
    pub judged: Judged,
    pub staged: Option<StageId>,
}

impl Done {
    pub fn new(tried: Tried, judged: Judged) -> Done {
        Done {
            tried,
            judged,
            staged: None,
        }
    }
}

/// The median seconds per token of the baseline arm's valid runs.
fn median_baseline(runs: &[RecordedRun]) -> Option<f64> {
    let mut times = valid_times(runs, Arm::Baseline);
    if times.is_empty() {
        return None;
    }
    times.sort_by(f64::total_cmp);
    let mid = times.len() / 2;
    Some(if times.len() % 2 == 1 {
        times[mid]
    } else {
        (times[mid - 1] + times[mid]) / 2.0
    })
}

/// Runs of an arm that produced a metric.
fn valid_times(runs: &[RecordedRun], arm: Arm) -> Vec<f64> {
    runs.iter()
        .filter(|r| r.run.arm == arm && !r.run.refused)
        .filter_map(|r| r.run.seconds_per_token)
        .collect()
}
