//! Claimed against realized: each stage approved and applied in the
//! period, its claim (the confirmation's effect) beside what it realized
//! on the live server (its realization A/B: the live server against a
//! shadow of the profile it replaced), with the live server's seconds per
//! token before and after (the medians of that A/B's two arms). The
//! Markdown section is here; the chart is [`super::realized_chart`].

use std::collections::BTreeMap;
use std::fmt::Write;

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::markdown::{cell, spt, when};
use super::period::Period;
use super::redact::Redactor;
use crate::display;
use crate::judge::noise::median;
use crate::ledger::{
    ExperimentId, Interval, Realized, ReportRun, ReportStage, StageId, StageRealization,
};
use crate::vocab::{Arm, StageState, VerdictKind};

/// One applied stage: claimed against realized.
#[derive(Debug, Clone, Serialize)]
pub struct StageRealized {
    pub stage: StageId,
    /// Its menu entry, or its parts for a composite.
    pub label: String,
    pub applied_at: DateTime<Utc>,
    /// The confirmation's effect and interval (log ratios).
    pub claimed: f64,
    pub claimed_interval: Interval,
    /// `win`, `within_noise`, `loss`, `measuring`, `given_up`, `unrealized`.
    pub status: &'static str,
    pub realized: Option<Measured>,
    /// Why it is not realized, when it is not (the daemon's note, or the
    /// last attempt's reason), redacted.
    pub why_not: Option<String>,
}

/// A realization A/B that decided.
#[derive(Debug, Clone, Serialize)]
pub struct Measured {
    pub experiment: ExperimentId,
    pub verdict: VerdictKind,
    pub effect: f64,
    pub interval: Interval,
    pub decided_at: DateTime<Utc>,
    /// Median s/token of the replaced profile's shadow (the baseline arm),
    /// when its runs are in the period.
    pub replaced_spt: Option<f64>,
    /// Median s/token of the live server on the stage's profile.
    pub live_spt: Option<f64>,
}

/// The period's applied stages with their realizations, by applied time.
pub(super) fn stages_realized(
    stages: &[ReportStage],
    realizations: &BTreeMap<StageId, StageRealization>,
    runs: &[ReportRun],
    period: &Period,
    redactor: &Redactor,
) -> Vec<StageRealized> {
    let none = StageRealization::default();
    let mut out: Vec<StageRealized> = stages
        .iter()
        .filter(|s| s.state == StageState::Approved)
        .filter_map(|s| {
            s.applied_at
                .filter(|at| period.contains(*at))
                .map(|at| (s, at))
        })
        .map(|(s, applied_at)| {
            let r = realizations.get(&s.id).unwrap_or(&none);
            let realized = r.of(true);
            let measured = match realized {
                Realized::Measured(a) => match (a.verdict, a.effect, a.interval, a.decided_at) {
                    (Some(verdict), Some(effect), Some(interval), Some(decided_at)) => {
                        Some(Measured {
                            experiment: a.experiment_id,
                            verdict,
                            effect,
                            interval,
                            decided_at,
                            replaced_spt: arm_median(runs, a.experiment_id, Arm::Baseline),
                            live_spt: arm_median(runs, a.experiment_id, Arm::Candidate),
                        })
                    }
                    _ => None,
                },
                _ => None,
            };
            let why_not = match realized {
                Realized::GivenUp(a) => a.reason.clone(),
                Realized::Waiting(n) => n.map(|n| n.note.clone()),
                Realized::Measuring => Some("being measured".into()),
                _ => None,
            };
            StageRealized {
                stage: s.id,
                label: crate::ledger::stage_label(s.menu_id, &s.parts),
                applied_at,
                claimed: s.effect,
                claimed_interval: s.interval,
                status: realized.status().unwrap_or("unrealized"),
                realized: measured,
                why_not: why_not.map(|w| redactor.apply(&w)),
            }
        })
        .collect();
    out.sort_by_key(|s| (s.applied_at, s.stage));
    out
}

fn arm_median(runs: &[ReportRun], experiment: ExperimentId, arm: Arm) -> Option<f64> {
    let v: Vec<f64> = runs
        .iter()
        .filter(|r| r.experiment_id == experiment && r.arm == arm && !r.refused)
        .filter_map(|r| r.seconds_per_token)
        .collect();
    median(&v)
}

/// The Markdown section; nothing when no stage was applied in the period.
pub(super) fn markdown(w: &mut String, stages: &[StageRealized]) {
    if stages.is_empty() {
        return;
    }
    let _ = writeln!(w, "## Claimed against realized\n");
    let _ = writeln!(
        w,
        "Each stage applied in the period: its claim (the confirming A/B) beside what it realized on \
         the live server, an A/B of the live server against a shadow of the profile it replaced, \
         judged as any A/B, by the live server's own noise floor. s/token: the medians of that \
         A/B's arms.\n"
    );
    let _ = writeln!(
        w,
        "| stage | applied | claimed | realized | live s/token (replaced → live) |"
    );
    let _ = writeln!(w, "|---|---|---|---|---|");
    for s in stages {
        let claimed = display::effect(s.claimed, s.claimed_interval.low, s.claimed_interval.high);
        let (realized, speeds) = match &s.realized {
            Some(m) => {
                let effect = display::effect(m.effect, m.interval.low, m.interval.high);
                let what = match m.verdict {
                    VerdictKind::Loss => format!(
                        "**LOSS** {effect} (experiment #{}): `orchestrator stage revert {}`",
                        m.experiment, s.stage
                    ),
                    VerdictKind::Win => format!("win {effect} (experiment #{})", m.experiment),
                    _ => format!("within noise {effect} (experiment #{})", m.experiment),
                };
                let speeds = match (m.replaced_spt, m.live_spt) {
                    (Some(a), Some(b)) => format!("{} → {}", spt(a), spt(b)),
                    _ => "-".into(),
                };
                (what, speeds)
            }
            None => (
                format!(
                    "not realized ({}){}",
                    s.status,
                    s.why_not
                        .as_deref()
                        .map(|w| format!(": {}", cell(w)))
                        .unwrap_or_default()
                ),
                "-".into(),
            ),
        };
        let _ = writeln!(
            w,
            "| #{} {} | {} | {claimed} | {realized} | {speeds} |",
            s.stage,
            cell(&s.label),
            when(s.applied_at)
        );
    }
    let _ = writeln!(w);
}
