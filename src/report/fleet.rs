//! The fleet report (issue #18: many stacks, one ledger): `report --stack
//! NAME | --class NAME | --all` picks stacks of the ledger, builds each
//! one's [`Report`] on its own rows, and sums them up in a [`Fleet`]
//! summary: per stack its class, cycles, wins staged and approved, and the
//! live s/token against the objective.
//!
//! Rows with no stack (written before stacks were recorded) belong to the
//! config's own stack: a pre-fleet ledger held that one stack's history,
//! and the daemon adopts them at its next start (`Ledger::adopt_unowned`).

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::build::{BuildOptions, build};
use super::period::Period;
use super::redact::Redactor;
use super::{Report, markdown};
use crate::judge::noise::median;
use crate::ledger::{Ledger, LedgerError, ReportStack, StackScope};

/// Which stacks a report covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selection {
    /// The config's own `[stack] name` (no flag): the one-stack report.
    Own,
    /// `--stack NAME`.
    Stack(String),
    /// `--class NAME`: every stack whose latest cycle ran as that class.
    Class(String),
    /// `--all`: every stack that ran a cycle.
    All,
}

/// A name the ledger does not know, with the ones it does.
#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    #[error(
        "--stack {name}: no stack of that name ran a cycle in this ledger; name one of its stacks ({}) or use --all",
        known_list(known)
    )]
    UnknownStack { name: String, known: Vec<String> },
    #[error(
        "--class {name}: no stack of this ledger last ran as that class (its latest cycle's `[stack] class`); name one of its classes ({}) or use --all",
        known_list(known)
    )]
    UnknownClass { name: String, known: Vec<String> },
    #[error(transparent)]
    Ledger(#[from] LedgerError),
}

fn known_list(known: &[String]) -> String {
    if known.is_empty() {
        "none".to_string()
    } else {
        known.join(", ")
    }
}

/// One stack of the ledger: its name, its class (as its latest cycle, or
/// for the config's own stack its config, says) and whether the rows with
/// no stack are its.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FleetStack {
    pub name: String,
    pub class: Option<String>,
    pub with_unowned: bool,
}

/// The stacks of the ledger, by name: every stack that ran a cycle, and the
/// config's own if it did or if cycles with no stack (its) exist.
pub async fn stacks(ledger: &Ledger, own: &StackScope) -> Result<Vec<FleetStack>, LedgerError> {
    let mut names = ledger.report_stacks().await?;
    let own_rows = ReportStack {
        name: own.name.clone(),
        with_unowned: true,
    };
    let own_latest = ledger.report_latest_cycle(&own_rows).await?;
    if own_latest.is_some() && !names.contains(&own.name) {
        names.push(own.name.clone());
        names.sort();
    }
    let mut out = Vec::with_capacity(names.len());
    for name in names {
        let is_own = name == own.name;
        let class = if is_own && own.class.is_some() {
            own.class.clone()
        } else if is_own {
            own_latest.as_ref().and_then(|c| c.class.clone())
        } else {
            let rows = ReportStack {
                name: name.clone(),
                with_unowned: false,
            };
            ledger
                .report_latest_cycle(&rows)
                .await?
                .and_then(|c| c.class)
        };
        out.push(FleetStack {
            name,
            class,
            with_unowned: is_own,
        });
    }
    Ok(out)
}

/// The stacks `selection` names, or the error naming the known ones.
pub async fn select(
    ledger: &Ledger,
    own: &StackScope,
    selection: &Selection,
) -> Result<Vec<FleetStack>, FleetError> {
    let own_stack = || FleetStack {
        name: own.name.clone(),
        class: own.class.clone(),
        with_unowned: true,
    };
    if *selection == Selection::Own {
        return Ok(vec![own_stack()]);
    }
    let all = stacks(ledger, own).await?;
    let chosen: Vec<FleetStack> = match selection {
        Selection::Own | Selection::All => all.clone(),
        Selection::Stack(name) => all.iter().filter(|s| &s.name == name).cloned().collect(),
        Selection::Class(class) => all
            .iter()
            .filter(|s| s.class.as_ref() == Some(class))
            .cloned()
            .collect(),
    };
    if !chosen.is_empty() {
        return Ok(chosen);
    }
    match selection {
        // The config names its own stack: an empty report, not an error.
        Selection::Stack(name) if *name == own.name => Ok(vec![own_stack()]),
        Selection::All => Ok(vec![own_stack()]),
        Selection::Stack(name) => Err(FleetError::UnknownStack {
            name: name.clone(),
            known: all.into_iter().map(|s| s.name).collect(),
        }),
        Selection::Class(name) => {
            let mut known: Vec<String> = all.into_iter().filter_map(|s| s.class).collect();
            known.sort();
            known.dedup();
            Err(FleetError::UnknownClass {
                name: name.clone(),
                known,
            })
        }
        Selection::Own => unreachable!("answered above"),
    }
}

/// The reports of several stacks over one period, and their summary.
#[derive(Debug, Clone, Serialize)]
pub struct Fleet {
    #[serde(skip)]
    pub period: Period,
    pub title: String,
    pub generated_at: DateTime<Utc>,
    pub target: f64,
    /// One report per stack, by stack name.
    pub reports: Vec<Report>,
    pub summary: Vec<SummaryRow>,
    pub total: SummaryTotal,
}

/// One stack's line of the fleet summary, read from its report.
#[derive(Debug, Clone, Serialize)]
pub struct SummaryRow {
    pub stack: String,
    pub class: Option<String>,
    pub cycles: u32,
    /// Confirmed wins staged in the period.
    pub staged: u32,
    /// Stages a person approved in the period.
    pub approved: u32,
    /// The live profile's measured s/token (the report's live figure).
    pub live: Option<f64>,
}

/// The summary's total line.
#[derive(Debug, Clone, Default, Serialize)]
pub struct SummaryTotal {
    pub stacks: usize,
    pub cycles: u32,
    pub staged: u32,
    pub approved: u32,
    /// Stacks whose live figure was measured in the period.
    pub measured: usize,
    /// Of those, the ones at or under the objective.
    pub at_target: usize,
    /// The median of the measured live figures.
    pub median_live: Option<f64>,
}

impl Fleet {
    /// `Fleet summary: 2026-W47 (…)`, the summary's heading and the page title.
    pub fn heading(&self) -> String {
        format!("Fleet summary: {}", self.title)
    }
}

/// Builds each stack's report (one after the other: each reads one week
/// of one stack) and the summary.
pub async fn build_fleet(
    ledger: &Ledger,
    stacks: &[FleetStack],
    period: Period,
    target: f64,
    now: DateTime<Utc>,
    redactor: &Redactor,
) -> Result<Fleet, LedgerError> {
    let mut reports = Vec::with_capacity(stacks.len());
    let mut summary = Vec::with_capacity(stacks.len());
    for s in stacks {
        let mut o = BuildOptions::new(period, &s.name, target, now);
        o.with_unowned = s.with_unowned;
        o.redactor = redactor.clone();
        let r = build(ledger, &o).await?;
        summary.push(SummaryRow {
            stack: s.name.clone(),
            class: s.class.clone(),
            cycles: r.cycles.total,
            staged: r.stages.staged,
            approved: r.stages.approved,
            live: r.live.as_ref().map(|l| l.value),
        });
        reports.push(r);
    }
    let lives: Vec<f64> = summary.iter().filter_map(|s| s.live).collect();
    let total = SummaryTotal {
        stacks: summary.len(),
        cycles: summary.iter().map(|s| s.cycles).sum(),
        staged: summary.iter().map(|s| s.staged).sum(),
        approved: summary.iter().map(|s| s.approved).sum(),
        measured: lives.len(),
        at_target: lives.iter().filter(|v| **v <= target).count(),
        median_live: median(&lives),
    };
    Ok(Fleet {
        period,
        title: period.title(),
        generated_at: now,
        target,
        reports,
        summary,
        total,
    })
}

/// The summary table in Markdown (also the HTML page's, through its
/// Markdown subset).
pub fn summary_markdown(f: &Fleet) -> String {
    use std::fmt::Write;
    let spt = markdown::spt;
    let vs = |v: f64| format!("{:+.4} ({:.2}×)", v - f.target, v / f.target);
    let mut o = String::new();
    let w = &mut o;
    let _ = writeln!(w, "# {}\n", f.heading());
    let _ = writeln!(
        w,
        "Generated {} from the experiment ledger, one row per stack report above. Objective: **{} s/token**; live is the report's measured live figure, against the objective as the distance (and the ratio).\n",
        markdown::when(f.generated_at),
        spt(f.target)
    );
    let _ = writeln!(
        w,
        "| stack | class | cycles | wins staged | approved | live s/token | vs objective |"
    );
    let _ = writeln!(w, "|---|---|---:|---:|---:|---:|---:|");
    for s in &f.summary {
        let _ = writeln!(
            w,
            "| {} | {} | {} | {} | {} | {} | {} |",
            markdown::cell(&s.stack),
            s.class.as_deref().map_or("-".to_string(), markdown::cell),
            s.cycles,
            s.staged,
            s.approved,
            s.live.map_or("-".to_string(), spt),
            s.live.map_or("not measured".to_string(), vs)
        );
    }
    let t = &f.total;
    let _ = writeln!(
        w,
        "| **total: {} stack(s)** | | {} | {} | {} | {} | {} of {} measured at the objective |",
        t.stacks,
        t.cycles,
        t.staged,
        t.approved,
        t.median_live
            .map_or("-".to_string(), |m| format!("median {}", spt(m))),
        t.at_target,
        t.measured
    );
    let _ = writeln!(w);
    o
}

/// The whole fleet report in Markdown: each stack's report, then the summary.
pub fn render_markdown(f: &Fleet) -> String {
    let mut o = String::new();
    for r in &f.reports {
        o.push_str(&markdown::render(r));
        o.push_str("\n---\n\n");
    }
    o.push_str(&summary_markdown(f));
    o
}
