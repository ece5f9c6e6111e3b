//! `orchestrator report`: the report of one period, built once from the ledger as a
//! [`Report`] and rendered as Markdown ([`markdown`]) or a self-contained
//! HTML page with inline SVG charts ([`html`]). Every number in it is read
//! from the ledger or computed from numbers that are, with its source.
//!
//! - [`period`]: ISO weeks and date ranges.
//! - [`build`]: reads the ledger and assembles the [`Report`].
//! - [`fleet`]: one report per stack of a shared ledger, and their summary.
//! - change points in the noise floor and baseline: PELT, from
//!   [`crate::judge::changepoint`].
//! - [`projection`]: the projected seconds per token, with its sources.
//! - [`redact`]: keeps credentials out of free text.

pub mod build;
mod chart_frame;
pub mod fleet;
pub mod html;
mod levers;
pub mod markdown;
pub mod period;
pub mod projection;
pub mod redact;
mod speeds;

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::ledger::{CycleId, ExperimentId, ReportStage};
use crate::menu::MenuId;
use crate::vocab::{ProposerKind, VerdictKind};

pub use build::{BuildOptions, build};
pub use period::{Period, PeriodError};
pub use projection::Projection;

/// Everything a report shows, for one period.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    #[serde(skip)]
    pub period: Period,
    pub title: String,
    pub generated_at: DateTime<Utc>,
    pub stack: String,
    pub target: f64,
    /// The live profile's measured speed, if the period measured it.
    pub live: Option<projection::Sourced>,
    pub cycles: CycleCounts,
    /// The live profile's measured seconds per token, one point per experiment.
    pub speed: Vec<SpeedPoint>,
    /// The best candidate staged (open) at the end of the period.
    pub best_staged: Option<BestStaged>,
    pub verdicts: Vec<MenuVerdicts>,
    pub stages: StageCounts,
    pub refusals: Refusals,
    pub noise: Vec<FloorPoint>,
    /// Change points in the noise floor and in the baseline series.
    pub changes: Vec<Change>,
    /// Why a series could not be tested for change points, when it could not.
    pub change_notes: Vec<String>,
    pub proposers: Vec<ProposerRecord>,
    /// First-A/B wins their confirmation refuted by the end of the period:
    /// neither wins in the win rate nor remaining levers.
    pub refuted: Vec<RefutedWin>,
    pub failures: Vec<Failure>,
    /// The engine runs' time per day of the period, by what it bought.
    pub engine: Vec<EngineDay>,
    pub projection: Projection,
    /// When the period holds no cycle: the ledger's latest one, if any, so
    /// an empty report can say where the cycles are.
    pub latest_cycle: Option<(CycleId, DateTime<Utc>)>,
}

impl Report {
    /// `Weekly report: tinyk3, 2026-W47 (…)`, or `Report: tinyk3, 2026-12-01`
    /// for any period that is not exactly an ISO week.
    pub fn heading(&self) -> String {
        format!("{}: {}, {}", self.period.kind(), self.stack, self.title)
    }

    /// Nothing happened in the period: the renderers print a short note.
    pub fn is_empty(&self) -> bool {
        self.cycles.total == 0 && self.noise.is_empty() && self.stages.open_at_end.is_empty()
    }
}

/// One day's engine time (UTC, runs by their start), by what it bought.
#[derive(Debug, Clone, Serialize)]
pub struct EngineDay {
    pub day: chrono::NaiveDate,
    pub seconds: crate::ledger::EngineSeconds,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct CycleCounts {
    pub total: u32,
    pub completed: u32,
    pub failed: u32,
    pub aborted: u32,
    pub running: u32,
}

/// The median of one experiment's baseline runs.
#[derive(Debug, Clone, Serialize)]
pub struct SpeedPoint {
    pub at: DateTime<Utc>,
    pub experiment: ExperimentId,
    pub seconds_per_token: f64,
    pub runs: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct BestStaged {
    pub stage: ReportStage,
    /// Its base's measured speed times its confirmed effect.
    pub seconds_per_token: Option<f64>,
}

/// Verdict counts of one menu entry (`None`: cycles that ended before an
/// experiment existed), in [`VerdictKind::ALL`] order.
#[derive(Debug, Clone, Serialize)]
pub struct MenuVerdicts {
    pub menu: Option<MenuId>,
    pub counts: Vec<u32>,
}

impl MenuVerdicts {
    pub fn count(&self, kind: VerdictKind) -> u32 {
        VerdictKind::ALL
            .iter()
            .position(|k| *k == kind)
            .map_or(0, |i| self.counts[i])
    }

    pub fn total(&self) -> u32 {
        self.counts.iter().sum()
    }
}

/// Stage activity: created and decided within the period, and those open at its end.
#[derive(Debug, Clone, Default, Serialize)]
pub struct StageCounts {
    pub staged: u32,
    pub approved: u32,
    pub rejected: u32,
    pub expired: u32,
    pub open_at_end: Vec<ReportStage>,
    /// Decisions made in the period, with their notes (redacted).
    pub decided: Vec<ReportStage>,
}

/// Refusals, shown as the feature they are.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Refusals {
    pub within_noise: u32,
    pub hash_mismatch: u32,
    /// Runs kept as evidence but refused as a metric.
    pub refused_runs: u32,
    /// The within-noise verdicts with the largest |effect|, largest first.
    pub largest: Vec<RefusedDelta>,
    pub mismatches: Vec<RefusedDelta>,
}

#[derive(Debug, Clone, Serialize)]
pub struct RefusedDelta {
    pub experiment: Option<ExperimentId>,
    pub menu: Option<MenuId>,
    pub effect: Option<f64>,
    pub floor: Option<f64>,
    pub reason: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct FloorPoint {
    pub at: DateTime<Utc>,
    pub value: f64,
    pub n: u32,
    pub method: String,
    /// The protocol that measured it (`bench`, `surface`), when recorded.
    pub protocol: Option<String>,
    /// The machine's conditions during its runs (medians).
    pub load1: Option<f64>,
    pub cpu_pressure: Option<f64>,
}

/// Which series a change point is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Series {
    NoiseFloor,
    Baseline,
}

impl Series {
    pub fn as_str(self) -> &'static str {
        match self {
            Series::NoiseFloor => "noise floor",
            Series::Baseline => "baseline s/token",
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Change {
    pub series: Series,
    pub at: DateTime<Utc>,
    pub before: f64,
    pub after: f64,
}

/// One proposer's record in the period.
#[derive(Debug, Clone, Serialize)]
pub struct ProposerRecord {
    pub proposer: ProposerKind,
    pub attempts: u32,
    pub valid: u32,
    pub retries: u32,
    pub duplicates: u32,
    /// Other rejections by kind, most frequent first.
    pub rejections: Vec<(String, u32)>,
    /// Per menu entry: (wins, decided experiments), confirmations excluded.
    pub per_menu: Vec<(MenuId, u32, u32)>,
}

/// A first-A/B win its own confirming A/B did not reproduce.
#[derive(Debug, Clone, Serialize)]
pub struct RefutedWin {
    pub experiment: ExperimentId,
    pub menu: MenuId,
    /// The first A/B's effect (log ratio).
    pub effect: f64,
    #[serde(skip)]
    pub base_digest: Option<crate::vocab::Digest>,
    pub confirmation: ExperimentId,
    pub verdict: VerdictKind,
    pub confirmation_effect: Option<f64>,
}

impl RefutedWin {
    fn read(&self) -> String {
        let effect = self
            .confirmation_effect
            .map(|e| format!(" {}", crate::display::percent(e)))
            .unwrap_or_default();
        format!("{}{effect}", self.verdict)
    }

    /// Why its lever has no win left, for the projection.
    pub fn why(&self) -> String {
        format!(
            "the win of experiment #{} ({}) was refuted by its confirmation, experiment #{} ({})",
            self.experiment,
            crate::display::percent(self.effect),
            self.confirmation,
            self.read()
        )
    }
}

impl std::fmt::Display for RefutedWin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "experiment #{} ({}) {}, refuted by experiment #{} ({})",
            self.experiment,
            self.menu,
            crate::display::percent(self.effect),
            self.confirmation,
            self.read()
        )
    }
}

/// A cause of failure, with how many cycles it ended and a few of them.
#[derive(Debug, Clone, Serialize)]
pub struct Failure {
    pub cause: String,
    pub cycles: u32,
    pub examples: Vec<CycleId>,
}
