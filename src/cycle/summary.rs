//! What a cycle did, as a record for the daemon and one readable line:
//! menu id, parameters, verdict, effect ± interval, floor, and the live
//! stack's seconds per token against the target.

use std::fmt;

use serde_json::Value;

use crate::display;
use crate::ledger::{CycleId, ExperimentId, Interval, StageId};
use crate::menu::MenuId;
use crate::vocab::{CycleStatus, DeferredAt, Scheduled, VerdictKind};

use super::outcome::Done;

/// The longest reason a cycle line shows (the ledger keeps it whole).
const MAX_REASON: usize = 600;

/// The outcome of one cycle, as recorded.
#[derive(Debug, Clone)]
pub struct CycleSummary {
    pub cycle_id: CycleId,
    pub status: Option<CycleStatus>,
    /// Why the orchestrator chose the experiment itself, if it did.
    pub scheduled: Option<Scheduled>,
    pub menu_id: Option<MenuId>,
    pub params: Option<Value>,
    pub experiment_id: Option<ExperimentId>,
    pub verdict: Option<VerdictKind>,
    /// Log ratio candidate/baseline and its interval.
    pub effect: Option<(f64, Interval)>,
    pub floor: Option<f64>,
    pub reason: Option<String>,
    pub staged: Option<StageId>,
    /// The waiting win whose candidate this cycle measured against, when
    /// it built on one (`cycle/base.rs`): its runs' baseline is that
    /// candidate, not the live profile.
    pub built_on: Option<StageId>,
    /// Median seconds per token of the live profile's runs this cycle.
    pub live_measured: Option<f64>,
    /// The stack's own seconds-per-token metric, when scraped.
    pub live_metric: Option<f64>,
    pub target: f64,
    pub seconds: f64,
    /// The cycle stood aside for the live server's users too long, here.
    pub deferred: Option<DeferredAt>,
}

impl CycleSummary {
    pub fn new(cycle_id: CycleId) -> CycleSummary {
        CycleSummary {
            cycle_id,
            status: None,
            scheduled: None,
            menu_id: None,
            params: None,
            experiment_id: None,
            verdict: None,
            effect: None,
            floor: None,
            reason: None,
            staged: None,
            built_on: None,
            live_measured: None,
            live_metric: None,
            target: 1.0,
            seconds: 0.0,
            deferred: None,
        }
    }

    /// The line of cycle `cycle_id`, which ended with `status` after
    /// `seconds`, from what it did (`done`), the waiting win it built on
    /// and the stack's own seconds-per-token metric.
    pub(super) fn of(
        cycle_id: CycleId,
        status: CycleStatus,
        done: Done,
        built_on: Option<StageId>,
        live_metric: Option<f64>,
        seconds: f64,
    ) -> CycleSummary {
        let Done {
            tried,
            judged,
            staged,
        } = done;
        CycleSummary {
            cycle_id,
            status: Some(status),
            scheduled: tried.scheduled,
            menu_id: tried.menu_id,
            params: tried.params,
            experiment_id: tried.experiment_id,
            verdict: Some(judged.verdict),
            effect: judged.effect,
            floor: judged.floor,
            reason: judged.reason,
            staged,
            built_on,
            live_measured: judged.base_measured,
            live_metric,
            target: 1.0,
            seconds,
            deferred: None,
        }
    }

    /// The live seconds per token to show: measured here, else the metric.
    pub fn live(&self) -> Option<f64> {
        self.live_measured.or(self.live_metric)
    }
}

impl fmt::Display for CycleSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cycle {:>4}  ", self.cycle_id)?;
        let what = match (self.menu_id, &self.params) {
            (Some(m), Some(p)) => {
                let params = p
                    .as_object()
                    .map(|o| {
                        o.iter()
                            .map(|(k, v)| format!("{k}={v}"))
                            .collect::<Vec<_>>()
                            .join(" ")
                    })
                    .unwrap_or_default();
                format!("{m} {params}").trim_end().to_string()
            }
            _ => "(no experiment)".to_string(),
        };
        write!(f, "{what:<40}")?;
        if let Some(s) = self.scheduled {
            match s {
                Scheduled::Realization(stage) => write!(f, " [realization of stage #{stage}]")?,
                _ => write!(f, " [{}]", s.as_str())?,
            }
        }
        if let Some(on) = self.built_on {
            write!(f, " [on top of #{on}]")?;
        }
        // An interrupted cycle is `aborted`, as the ledger's cycle status and
        // the run's summary count it, though its verdict is `failed`.
        // A deferred one is `aborted` in the ledger too, and says deferred.
        let verdict = match (self.status, self.verdict) {
            _ if self.deferred.is_some() => "deferred",
            (Some(CycleStatus::Aborted), _) => "aborted",
            (_, Some(v)) => v.as_str(),
            (_, None) => "-",
        };
        write!(f, "  {verdict:<13}")?;
        if let Some((e, i)) = self.effect {
            write!(f, " {}", display::effect(e, i.low, i.high))?;
        }
        if let Some(fl) = self.floor {
            write!(f, "  floor {}", display::floor(fl))?;
        }
        // Built on a waiting win, the baseline measured is its candidate.
        let (label, live) = match self.built_on {
            Some(_) => ("base", self.live_measured),
            None => ("live", self.live()),
        };
        match live {
            Some(live) => {
                let gap = live - self.target;
                let state = if gap <= 0.0 {
                    "target met".to_string()
                } else {
                    format!("{gap:.3} s above target")
                };
                write!(
                    f,
                    "  {label} {live:.4} s/token vs target {:.3} ({state})",
                    self.target
                )?;
            }
            None => write!(f, "  {label} s/token unknown")?,
        }
        if let Some(stage) = self.staged {
            write!(f, "  STAGED #{stage} (orchestrator stage show {stage})")?;
        }
        let realized = match self.scheduled {
            Some(Scheduled::Realization(stage)) => Some(stage),
            _ => None,
        };
        match (realized, self.verdict) {
            (Some(stage), Some(VerdictKind::Loss)) => write!(
                f,
                "  REALIZED A LOSS: stage #{stage} made the live server slower; revert it with \
                 `orchestrator stage revert {stage} --reason \"realized a loss\"`"
            )?,
            (Some(stage), Some(VerdictKind::Win)) => write!(f, "  REALIZED stage #{stage}")?,
            (Some(stage), Some(VerdictKind::WithinNoise)) => {
                write!(f, "  stage #{stage} realized nothing beyond the noise")?
            }
            _ => {}
        }
        if let Some(reason) = &self.reason
            && matches!(
                self.verdict,
                Some(VerdictKind::Failed | VerdictKind::Rejected | VerdictKind::HashMismatch)
            )
        {
            // What to do comes at the end of a reason: never cut it off.
            write!(f, "  ({})", display::shorten_middle(reason, MAX_REASON))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failed(status: CycleStatus, reason: &str) -> CycleSummary {
        let mut r = CycleSummary::new(CycleId(7));
        r.status = Some(status);
        r.verdict = Some(VerdictKind::Failed);
        r.reason = Some(reason.to_string());
        r
    }

    #[test]
    fn a_long_reason_keeps_its_actionable_end() {
        let reason = format!(
            "run #3 (candidate) could not be measured: the bench command exited with code 1: {}; \
             lower memory.budget_gb in the profile",
            "loading layer ".repeat(40)
        );
        let line = failed(CycleStatus::Failed, &reason).to_string();
        assert!(
            line.contains("run #3 (candidate)")
                && line.ends_with("lower memory.budget_gb in the profile)"),
            "{line}"
        );
    }

    #[test]
    fn a_deferred_cycle_reads_deferred_with_its_reason() {
        let mut r = failed(
            CycleStatus::Aborted,
            "deferred: the live server was serving 2 request(s) of its users",
        );
        r.deferred = Some(DeferredAt::Start);
        let line = r.to_string();
        assert!(line.contains("  deferred "), "{line}");
        assert!(!line.contains("aborted"), "{line}");
        assert!(
            line.ends_with("(deferred: the live server was serving 2 request(s) of its users)"),
            "{line}"
        );
    }

    #[test]
    fn an_interrupted_cycle_reads_aborted_not_failed() {
        let line = failed(CycleStatus::Aborted, "aborted: shutdown while measuring").to_string();
        assert!(line.contains("  aborted "), "{line}");
        assert!(!line.contains("failed"), "{line}");
        let line = failed(CycleStatus::Failed, "the bench broke").to_string();
        assert!(line.contains("  failed "), "{line}");
    }

    #[test]
    fn a_realized_loss_names_the_revert_and_a_win_says_realized() {
        let mut r = CycleSummary::new(CycleId(9));
        r.status = Some(CycleStatus::Completed);
        r.scheduled = Some(Scheduled::Realization(3));
        r.verdict = Some(VerdictKind::Loss);
        let line = r.to_string();
        assert!(line.contains("[realization of stage #3]"), "{line}");
        assert!(
            line.contains("REALIZED A LOSS: stage #3 made the live server slower")
                && line.ends_with("`orchestrator stage revert 3 --reason \"realized a loss\"`"),
            "{line}"
        );
        r.verdict = Some(VerdictKind::Win);
        let line = r.to_string();
        assert!(
            line.contains("REALIZED stage #3") && !line.contains("revert"),
            "{line}"
        );
        r.verdict = Some(VerdictKind::Failed);
        assert!(!r.to_string().contains("REALIZED"));
    }
}
