//! Reads one period from the ledger and assembles the [`Report`]: counts,
//! series, change points, the proposer's record, failures and the projection.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Duration, Utc};

use super::levers::{Confirmations, lever_bests};
use super::period::Period;
use super::projection::{self, LeverEvidence, Parts};
use super::redact::Redactor;
use super::speeds::Speeds;
use super::{
    BestStaged, Change, CycleCounts, Failure, FloorPoint, MenuVerdicts, ProposerRecord, Refusals,
    RefusedDelta, Report, Series, StageCounts,
};
use crate::judge::changepoint::pelt;
use crate::ledger::{
    CycleRecord, ExperimentId, Ledger, LedgerError, ReportProposal, ReportRun, ReportStack,
    ReportStage, ReportVerdict,
};
use crate::menu::MenuId;
use crate::vocab::{CycleStatus, ProposerKind, StageState, VerdictKind};

/// How many refused deltas, mismatches and failure examples to list.
const TOP: usize = 5;
/// Longest failure cause shown; the ledger keeps the whole text.
const CAUSE_CHARS: usize = 200;

/// What to build a report of.
#[derive(Debug, Clone)]
pub struct BuildOptions {
    pub period: Period,
    /// The stack's name: its cycles, stages and noise floors.
    pub stack: String,
    /// Also report the rows with no stack (written before stacks were
    /// recorded): they belong to the one stack of a pre-fleet ledger, the
    /// config's own. True from [`BuildOptions::new`]; the fleet report
    /// clears it for every other stack.
    pub with_unowned: bool,
    /// The objective, seconds per token.
    pub target: f64,
    pub now: DateTime<Utc>,
    pub redactor: Redactor,
    /// How much noise-floor history before the period the change-point test
    /// sees: floors are re-measured about daily, so one week alone is too
    /// short to tell a shift from noise.
    pub floor_lookback: Duration,
}

impl BuildOptions {
    pub fn new(period: Period, stack: &str, target: f64, now: DateTime<Utc>) -> BuildOptions {
        BuildOptions {
            period,
            stack: stack.to_string(),
            with_unowned: true,
            target,
            now,
            redactor: Redactor::default(),
            floor_lookback: Duration::weeks(8),
        }
    }
}

impl BuildOptions {
    /// Whose rows the ledger's report queries read.
    pub fn report_stack(&self) -> ReportStack {
        ReportStack {
            name: self.stack.clone(),
            with_unowned: self.with_unowned,
        }
    }
}

/// The measured kinds: the proposer's decided experiments.
fn decided(kind: VerdictKind) -> bool {
    !matches!(kind, VerdictKind::Rejected | VerdictKind::Failed)
}

/// Reads the period and builds the report.
pub async fn build(ledger: &Ledger, o: &BuildOptions) -> Result<Report, LedgerError> {
    let (start, end) = (o.period.start, o.period.end);
    let stack = o.report_stack();
    let (cycles, verdicts, proposals, runs, floors, stages, engine_runs) = tokio::try_join!(
        ledger.report_cycles(&stack, start, end),
        ledger.report_verdicts(&stack, start, end),
        ledger.report_proposals(&stack, start, end),
        ledger.report_runs(&stack, start, end),
        ledger.report_noise_floors(&o.stack, start - o.floor_lookback, end),
        ledger.report_stages(&stack, start, end),
        ledger.report_engine_runs(&stack, start, end),
    )?;

    let speed_by_base = Speeds::from_runs(&runs);
    let (noise, mut changes, mut change_notes) =
        noise_series(&floors, &o.stack, &o.period, o.floor_lookback);
    let speed = speed_by_base.points.clone();
    let logs: Vec<f64> = speed.iter().map(|p| p.seconds_per_token.ln()).collect();
    match pelt(&logs) {
        Some(cps) => changes.extend(cps.into_iter().map(|c| Change {
            series: Series::Baseline,
            at: speed[c.index].at,
            before: c.before.exp(),
            after: c.after.exp(),
        })),
        None => change_notes.push(format!(
            "baseline s/token: {} points in the period, too few or too flat to test",
            speed.len()
        )),
    }
    changes.sort_by_key(|c| c.at);
    // After a shift in the baseline, the week's median mixes two machines:
    // the live speed is the level since the last shift.
    let since = changes
        .iter()
        .filter(|c| c.series == Series::Baseline)
        .map(|c| c.at)
        .next_back();
    let live = speed_by_base.live(since);
    let stage_counts = stage_counts(&stages, &o.period, &o.redactor);
    // Of the wins a person can approve now: one measured on top of a win
    // that waits ([cycle] build_on_staged) has its effect against that
    // win's candidate, and `stage approve` refuses it until that one is.
    let best_staged = stage_counts
        .open_at_end
        .iter()
        .filter(|s| {
            speed_by_base
                .live_base
                .as_ref()
                .is_none_or(|l| *l == s.base_digest)
        })
        .min_by(|a, b| a.effect.total_cmp(&b.effect))
        .map(|s| BestStaged {
            stage: s.clone(),
            seconds_per_token: speed_by_base
                .median_of(&s.base_digest, since)
                .map(|l| l * s.effect.exp()),
        });

    let parts = Parts {
        live: live.clone(),
        trunk: speed_by_base.live_part(since, "trunk term", |p| p.trunk_seconds_per_token),
        expert: speed_by_base.live_part(since, "expert term", |p| p.expert_seconds_per_token),
        far_share: speed_by_base.live_part(since, "far-tier hit share", |p| p.far_hit_share),
        acceptance: speed_by_base.live_part(since, "draft acceptance", |p| p.draft_acceptance),
    };
    // A win a person refused (or that expired) is not a remaining lever.
    let refused: BTreeSet<ExperimentId> = stages
        .iter()
        .filter(|s| matches!(s.state, StageState::Rejected | StageState::Expired))
        .filter(|s| s.decided_at.is_some_and(|at| at < end))
        .map(|s| s.experiment_id)
        .collect();
    let confirmations = Confirmations::of(&verdicts, end);
    let bests = lever_bests(
        &verdicts,
        &stage_counts.open_at_end,
        speed_by_base.live_base.as_ref(),
        &refused,
        &confirmations,
    );
    let excluded: Vec<(MenuId, String)> = confirmations
        .refuted
        .values()
        .filter(|r| r.base_digest.as_ref() == speed_by_base.live_base.as_ref())
        .map(|r| (r.menu, r.why()))
        .collect();
    // At most one experiment per lever: a handful of indexed reads.
    let mut evidence = Vec::with_capacity(bests.len());
    for (menu, best, experiment) in bests {
        let runs = ledger.report_lever_runs(experiment).await?;
        evidence.push(LeverEvidence::from_runs(menu, best, experiment, &runs));
    }

    let latest_cycle = if cycles.is_empty() {
        ledger
            .report_latest_cycle(&stack)
            .await?
            .map(|c| (c.id, c.started_at))
    } else {
        None
    };

    Ok(Report {
        latest_cycle,
        period: o.period,
        title: o.period.title(),
        generated_at: o.now,
        stack: o.stack.clone(),
        target: o.target,
        live,
        cycles: cycle_counts(&cycles),
        speed,
        best_staged,
        verdicts: verdict_mix(&verdicts),
        stages: stage_counts,
        refusals: refusals(&verdicts, &runs, &o.redactor),
        noise,
        changes,
        change_notes,
        proposers: proposer_records(&proposals, &verdicts, &confirmations),
        refuted: confirmations.refuted.into_values().collect(),
        failures: failures(&cycles, &verdicts, &o.redactor),
        engine: crate::ledger::EngineSeconds::per_day(&engine_runs)
            .into_iter()
            .map(|(day, seconds)| super::EngineDay { day, seconds })
            .collect(),
        projection: projection::project(&parts, &evidence, &excluded),
    })
}

fn cycle_counts(cycles: &[CycleRecord]) -> CycleCounts {
    let mut c = CycleCounts::default();
    for cy in cycles {
        c.total += 1;
        match cy.status {
            CycleStatus::Completed => c.completed += 1,
            CycleStatus::Failed => c.failed += 1,
            CycleStatus::Aborted => c.aborted += 1,
            CycleStatus::Running => c.running += 1,
        }
    }
    c
}

fn verdict_mix(verdicts: &[ReportVerdict]) -> Vec<MenuVerdicts> {
    let mut map: BTreeMap<usize, Vec<u32>> = BTreeMap::new();
    for v in verdicts {
        // Menu order as declared; cycles without an experiment last.
        let slot = v
            .menu_id
            .and_then(|m| MenuId::ALL.iter().position(|x| *x == m))
            .unwrap_or(MenuId::ALL.len());
        let k = VerdictKind::ALL
            .iter()
            .position(|k| *k == v.kind)
            .unwrap_or(0);
        map.entry(slot)
            .or_insert_with(|| vec![0; VerdictKind::ALL.len()])[k] += 1;
    }
    map.into_iter()
        .map(|(slot, counts)| MenuVerdicts {
            menu: MenuId::ALL.get(slot).copied(),
            counts,
        })
        .collect()
}

fn stage_counts(stages: &[ReportStage], p: &Period, r: &Redactor) -> StageCounts {
    let mut c = StageCounts::default();
    for s in stages {
        if p.contains(s.created_at) {
            c.staged += 1;
        }
        match s.decided_at {
            Some(at) if p.contains(at) => {
                match s.state {
                    StageState::Approved => c.approved += 1,
                    StageState::Rejected => c.rejected += 1,
                    StageState::Expired => c.expired += 1,
                    StageState::Staged => {}
                }
                let mut s = s.clone();
                s.stage.note = s.stage.note.take().map(|n| r.apply(&n));
                s.stage.decided_by = s.stage.decided_by.take().map(|n| r.apply(&n));
                c.decided.push(s);
            }
            Some(at) if at < p.end => {}
            _ => {
                let mut s = s.clone();
                // Open at the end of the period, whatever happened later.
                s.stage.state = StageState::Staged;
                s.stage.decided_at = None;
                s.stage.decided_by = None;
                s.stage.note = None;
                c.open_at_end.push(s);
            }
        }
    }
    c
}

fn refusals(verdicts: &[ReportVerdict], runs: &[ReportRun], r: &Redactor) -> Refusals {
    let delta = |v: &ReportVerdict| RefusedDelta {
        experiment: v.experiment_id,
        menu: v.menu_id,
        effect: v.effect,
        // A bound judged against is no measured floor: shown as none.
        floor: v.noise_floor.filter(|_| !v.floor_is_bound),
        reason: v.reason.as_deref().map(|t| r.apply(t)),
    };
    // An A/A (`remeasure`) is within noise by definition: it refused no
    // delta, so it is not counted among the refused ones.
    let mut within: Vec<&ReportVerdict> = verdicts
        .iter()
        .filter(|v| v.kind == VerdictKind::WithinNoise && v.menu_id != Some(MenuId::Remeasure))
        .collect();
    within.sort_by(|a, b| {
        let key = |v: &ReportVerdict| v.effect.map_or(0.0, f64::abs);
        key(b).total_cmp(&key(a)).then(a.id.cmp(&b.id))
    });
    let mismatches: Vec<&ReportVerdict> = verdicts
        .iter()
        .filter(|v| v.kind == VerdictKind::HashMismatch)
        .collect();
    Refusals {
        within_noise: within.len() as u32,
        hash_mismatch: mismatches.len() as u32,
        refused_runs: runs.iter().filter(|r| r.refused).count() as u32,
        largest: within.iter().take(TOP).map(|v| delta(v)).collect(),
        mismatches: mismatches
            .iter()
            .rev()
            .take(TOP)
            .map(|v| delta(v))
            .collect(),
    }
}

/// The floors in the period, and change points over the longer history.
fn noise_series(
    floors: &[crate::ledger::NoiseFloor],
    stack: &str,
    p: &Period,
    lookback: Duration,
) -> (Vec<FloorPoint>, Vec<Change>, Vec<String>) {
    let points: Vec<FloorPoint> = floors
        .iter()
        .filter(|f| p.contains(f.measured_at))
        .map(|f| FloorPoint {
            at: f.measured_at,
            value: f.value,
            n: f.n,
            method: f.method.clone(),
            // The key is `STACK/PROTOCOL`, and a stack's name may hold a `/`.
            protocol: f
                .stack
                .strip_prefix(stack)
                .and_then(|rest| rest.strip_prefix('/'))
                .map(str::to_string),
            load1: f.load1,
            cpu_pressure: f.cpu_pressure,
        })
        .collect();
    let values: Vec<f64> = floors.iter().map(|f| f.value).collect();
    let mut notes = Vec::new();
    let mut changes = Vec::new();
    match pelt(&values) {
        Some(cps) => changes.extend(
            cps.into_iter()
                .filter(|c| p.contains(floors[c.index].measured_at))
                .map(|c| Change {
                    series: Series::NoiseFloor,
                    at: floors[c.index].measured_at,
                    before: c.before,
                    after: c.after,
                }),
        ),
        None => notes.push(format!(
            "noise floor: {} measurements in the period and the {} days before, too few or too flat to test",
            values.len(),
            lookback.num_days()
        )),
    }
    (points, changes, notes)
}

fn proposer_records(
    proposals: &[ReportProposal],
    verdicts: &[ReportVerdict],
    confirmations: &Confirmations,
) -> Vec<ProposerRecord> {
    let mut out = Vec::new();
    for &kind in ProposerKind::ALL {
        let mine: Vec<&ReportProposal> = proposals.iter().filter(|p| p.proposer == kind).collect();
        let judged: Vec<&ReportVerdict> = verdicts
            .iter()
            .filter(|v| v.proposer == Some(kind) && v.confirmation_of.is_none() && decided(v.kind))
            .collect();
        if mine.is_empty() && judged.is_empty() {
            continue;
        }
        let mut rejections: BTreeMap<&str, u32> = BTreeMap::new();
        for p in &mine {
            if let Some(k) = p.rejection_kind.as_deref().filter(|k| *k != "duplicate") {
                *rejections.entry(k).or_default() += 1;
            }
        }
        let mut rejections: Vec<(String, u32)> = rejections
            .into_iter()
            .map(|(k, n)| (k.to_string(), n))
            .collect();
        rejections.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        // An A/A measures a floor and has no direction: no win rate.
        let per_menu = MenuId::ALL
            .iter()
            .filter(|&&m| m != MenuId::Remeasure)
            .filter_map(|&m| {
                let of: Vec<_> = judged.iter().filter(|v| v.menu_id == Some(m)).collect();
                // A win its confirmation refuted was not a win.
                let wins = of
                    .iter()
                    .filter(|v| v.kind == VerdictKind::Win)
                    .filter(|v| v.experiment_id.is_none_or(|e| !confirmations.refuted(e)))
                    .count() as u32;
                (!of.is_empty()).then_some((m, wins, of.len() as u32))
            })
            .collect();
        out.push(ProposerRecord {
            proposer: kind,
            attempts: mine.len() as u32,
            valid: mine
                .iter()
                .filter(|p| p.parsed && p.rejection_kind.is_none())
                .count() as u32,
            retries: mine.iter().filter(|p| p.attempt > 1).count() as u32,
            duplicates: mine
                .iter()
                .filter(|p| p.rejection_kind.as_deref() == Some("duplicate"))
                .count() as u32,
            rejections,
            per_menu,
        });
    }
    out
}

fn cause_of(text: &str, r: &Redactor) -> String {
    let line = text.lines().next().unwrap_or("").trim();
    let line = r.apply(line);
    if line.chars().count() > CAUSE_CHARS {
        let cut: String = line.chars().take(CAUSE_CHARS).collect();
        format!("{cut}…")
    } else {
        line
    }
}

fn failures(cycles: &[CycleRecord], verdicts: &[ReportVerdict], r: &Redactor) -> Vec<Failure> {
    let mut by_cause: BTreeMap<String, BTreeSet<crate::ledger::CycleId>> = BTreeMap::new();
    for c in cycles {
        if let Some(e) = &c.error {
            let what = if c.status == CycleStatus::Aborted {
                "aborted: "
            } else {
                ""
            };
            by_cause
                .entry(format!("{what}{}", cause_of(e, r)))
                .or_default()
                .insert(c.id);
        }
    }
    for v in verdicts.iter().filter(|v| v.kind == VerdictKind::Failed) {
        let reason = v.reason.as_deref().unwrap_or("no reason recorded");
        by_cause
            .entry(cause_of(reason, r))
            .or_default()
            .insert(v.cycle_id);
    }
    let mut out: Vec<Failure> = by_cause
        .into_iter()
        .map(|(cause, ids)| Failure {
            cause,
            cycles: ids.len() as u32,
            examples: ids.into_iter().take(TOP).collect(),
        })
        .collect();
    out.sort_by(|a, b| b.cycles.cmp(&a.cycles).then(a.cause.cmp(&b.cause)));
    out
}
