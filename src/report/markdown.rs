//! The report as Markdown, to paste into a chat or a commit message.

use std::fmt::Write;

use chrono::{DateTime, Utc};

use super::period::IsoWeek;
use super::projection::Projection;
use super::{Report, Series};
use crate::display;
use crate::vocab::VerdictKind;

/// Seconds per token, with enough digits for sub-second stacks.
pub fn spt(v: f64) -> String {
    format!("{v:.4}")
}

pub fn when(t: DateTime<Utc>) -> String {
    t.format("%Y-%m-%d %H:%M UTC").to_string()
}

/// Table cells must stay on one line and not split on `|`.
pub fn cell(s: &str) -> String {
    s.replace('|', "\\|").replace(['\n', '\r'], " ")
}

fn rate(num: u32, den: u32) -> String {
    if den == 0 {
        "-".to_string()
    } else {
        format!("{:.0}%", 100.0 * f64::from(num) / f64::from(den))
    }
}

/// The method line, also used by the HTML page.
pub const CHANGE_METHOD: &str = "PELT (Killick, Fearnhead & Eckley 2012), Gaussian change in mean, \
     σ from the MAD of first differences, SIC penalty 2 ln n";

pub fn render(r: &Report) -> String {
    let mut o = String::new();
    let w = &mut o;
    let _ = writeln!(w, "# {}\n", r.heading());
    let _ = writeln!(
        w,
        "Generated {} from the experiment ledger. Every figure is read from the ledger; the projection at the end is labelled as one.\n",
        when(r.generated_at)
    );
    if r.is_empty() {
        let _ = writeln!(
            w,
            "Nothing was recorded in this period: no cycles, no noise-floor measurements, no open stages. {}\n\nObjective: {} s/token.",
            where_the_cycles_are(r),
            spt(r.target)
        );
        return o;
    }
    objective(w, r);
    verdicts(w, r);
    stages(w, r);
    refusals(w, r);
    noise(w, r);
    proposers(w, r);
    failures(w, r);
    engine(w, r);
    projection(w, &r.projection);
    o
}

/// For an empty period: which period holds the ledger's cycles, and the
/// command that reports it.
fn where_the_cycles_are(r: &Report) -> String {
    let Some((id, at)) = r.latest_cycle else {
        return "The ledger holds no cycle at all: if the daemon was meant to run, check that its config's `[ledger]` table names this ledger (`path` for SQLite, `url` for PostgreSQL).".into();
    };
    let when_ran = if at >= r.period.end {
        "after this period"
    } else {
        "before this period: the daemon has not run since"
    };
    let week = IsoWeek::of(at.date_naive());
    format!(
        "The ledger's latest cycle (#{id}) started {}, {when_ran}; its week is {week}: `orchestrator report --week {week}`.",
        when(at)
    )
}

fn objective(w: &mut String, r: &Report) {
    let _ = writeln!(w, "## Objective\n");
    let _ = writeln!(w, "- Target: **{} s/token**.", spt(r.target));
    match &r.live {
        Some(l) => {
            let _ = writeln!(
                w,
                "- Live profile, measured: **{} s/token** ({}); distance to the target **{:+.4} s/token** ({:.2}× the target).",
                spt(l.value),
                l.source,
                l.value - r.target,
                l.value / r.target
            );
        }
        None => {
            let _ = writeln!(
                w,
                "- Live profile: no baseline run measured it in this period."
            );
        }
    }
    match &r.best_staged {
        Some(b) => {
            let at = b
                .seconds_per_token
                .map(|v| format!(", about {} s/token on its base", spt(v)))
                .unwrap_or_default();
            let _ = writeln!(
                w,
                "- Best staged candidate: stage #{} ({}) {} (floor {}){at}, waiting for a person.",
                b.stage.id,
                crate::ledger::stage_label(b.stage.menu_id, &b.stage.parts),
                display::effect(b.stage.effect, b.stage.interval.low, b.stage.interval.high),
                display::verdict_floor(b.stage.noise_floor, b.stage.floor_is_bound)
            );
        }
        None => {
            let _ = writeln!(w, "- No staged candidate open at the end of the period.");
        }
    }
    let c = &r.cycles;
    let _ = writeln!(
        w,
        "- Cycles: {} ({} completed, {} failed, {} aborted, {} running).\n",
        c.total, c.completed, c.failed, c.aborted, c.running
    );
}

fn verdicts(w: &mut String, r: &Report) {
    let _ = writeln!(w, "## Verdicts by menu entry\n");
    if r.verdicts.is_empty() {
        let _ = writeln!(w, "No verdicts in this period.\n");
        return;
    }
    let kinds: Vec<&str> = VerdictKind::ALL.iter().map(|k| k.as_str()).collect();
    let _ = writeln!(w, "| menu entry | {} | total |", kinds.join(" | "));
    let _ = writeln!(w, "|---|{}---:|", "---:|".repeat(kinds.len()));
    for m in &r.verdicts {
        let name = m.menu.map_or("(no experiment)", |m| m.as_str());
        let counts: Vec<String> = m.counts.iter().map(u32::to_string).collect();
        let _ = writeln!(w, "| {name} | {} | {} |", counts.join(" | "), m.total());
    }
    let _ = writeln!(w);
}

fn stages(w: &mut String, r: &Report) {
    let s = &r.stages;
    let _ = writeln!(w, "## Stages\n");
    let _ = writeln!(
        w,
        "Staged {} · approved {} · rejected {} · expired {} · open at the end of the period {}.\n",
        s.staged,
        s.approved,
        s.rejected,
        s.expired,
        s.open_at_end.len()
    );
    for d in &s.decided {
        let _ = writeln!(
            w,
            "- stage #{} ({}) {}: {} by {} on {}{}",
            d.id,
            crate::ledger::stage_label(d.menu_id, &d.parts),
            display::percent(d.effect),
            d.state,
            d.decided_by.as_deref().unwrap_or("?"),
            d.decided_at.map(when).unwrap_or_default(),
            d.note
                .as_deref()
                .map(|n| format!(" ({})", cell(n)))
                .unwrap_or_default()
        );
    }
    if !s.decided.is_empty() {
        let _ = writeln!(w);
    }
}

fn refusals(w: &mut String, r: &Report) {
    let f = &r.refusals;
    let _ = writeln!(w, "## Refusals\n");
    let _ = writeln!(
        w,
        "The judge refused {} within-noise difference(s) and {} hash mismatch(es); {} run(s) were kept as evidence but refused as a metric. \
         A refusal is the noise floor and the hash gate doing their job.\n",
        f.within_noise, f.hash_mismatch, f.refused_runs
    );
    if !f.largest.is_empty() {
        let _ = writeln!(w, "Largest refused deltas:\n");
        let _ = writeln!(w, "| experiment | menu entry | effect | noise floor |");
        let _ = writeln!(w, "|---:|---|---:|---:|");
        for d in &f.largest {
            let _ = writeln!(
                w,
                "| #{} | {} | {} | {} |",
                d.experiment.map_or(0, |e| e.0),
                d.menu.map_or("-", |m| m.as_str()),
                d.effect.map_or("-".into(), display::percent),
                d.floor.map_or("-".into(), display::floor)
            );
        }
        let _ = writeln!(w);
    }
    for d in &f.mismatches {
        let _ = writeln!(
            w,
            "- hash mismatch, experiment #{} ({}): {}",
            d.experiment.map_or(0, |e| e.0),
            d.menu.map_or("-", |m| m.as_str()),
            cell(d.reason.as_deref().unwrap_or("no reason recorded"))
        );
    }
    if !f.mismatches.is_empty() {
        let _ = writeln!(w);
    }
}

fn noise(w: &mut String, r: &Report) {
    let _ = writeln!(w, "## Noise floor and drift\n");
    if r.noise.is_empty() {
        let _ = writeln!(w, "No noise floor was measured in this period.");
    } else {
        let vals: Vec<f64> = r.noise.iter().map(|p| p.value).collect();
        let min = vals.iter().copied().fold(f64::INFINITY, f64::min);
        let max = vals.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let last = &r.noise[r.noise.len() - 1];
        let _ = writeln!(
            w,
            "{} measurement(s); from {} to {}; latest {} on {} (n = {}, {}).",
            r.noise.len(),
            display::floor(min),
            display::floor(max),
            display::floor(last.value),
            when(last.at),
            last.n,
            cell(&last.method)
        );
        let _ = writeln!(
            w,
            "\n| measured | protocol | floor | pairs | load average | CPU stalled |\n|---|---|---|---|---|---|"
        );
        for p in &r.noise {
            let _ = writeln!(
                w,
                "| {} | {} | {} | {} | {} | {} |",
                when(p.at),
                p.protocol
                    .as_deref()
                    .map(cell)
                    .unwrap_or_else(|| "—".into()),
                display::floor(p.value),
                p.n,
                p.load1
                    .map(|l| format!("{l:.2}"))
                    .unwrap_or_else(|| "—".into()),
                p.cpu_pressure
                    .map(|c| format!("{:.0}%", 100.0 * c))
                    .unwrap_or_else(|| "—".into()),
            );
        }
    }
    let _ = writeln!(w, "\nChange points ({CHANGE_METHOD}):\n");
    if r.changes.is_empty() {
        let _ = writeln!(w, "- none flagged in this period");
    }
    for c in &r.changes {
        let (before, after) = match c.series {
            Series::NoiseFloor => (display::floor(c.before), display::floor(c.after)),
            Series::Baseline => (
                format!("{} s/token", spt(c.before)),
                format!("{} s/token", spt(c.after)),
            ),
        };
        let _ = writeln!(
            w,
            "- **{}** shifted at {}: {before} → {after}",
            c.series.as_str(),
            when(c.at)
        );
    }
    for n in &r.change_notes {
        let _ = writeln!(w, "- not tested: {n}");
    }
    let _ = writeln!(w);
}

fn proposers(w: &mut String, r: &Report) {
    let _ = writeln!(w, "## Proposer's record\n");
    if r.proposers.is_empty() {
        let _ = writeln!(w, "No proposals in this period.\n");
        return;
    }
    let _ = writeln!(
        w,
        "| proposer | answers | valid | valid rate | retries | duplicates | other rejections |"
    );
    let _ = writeln!(w, "|---|---:|---:|---:|---:|---:|---|");
    for p in &r.proposers {
        let other: Vec<String> = p
            .rejections
            .iter()
            .map(|(k, n)| format!("{k} {n}"))
            .collect();
        let _ = writeln!(
            w,
            "| {} | {} | {} | {} | {} | {} | {} |",
            p.proposer,
            p.attempts,
            p.valid,
            rate(p.valid, p.attempts),
            p.retries,
            p.duplicates,
            if other.is_empty() {
                "-".to_string()
            } else {
                other.join(", ")
            }
        );
    }
    let _ = writeln!(
        w,
        "\nWin rate per menu entry (wins / decided experiments, confirmations excluded):\n"
    );
    let names: Vec<&str> = r.proposers.iter().map(|p| p.proposer.as_str()).collect();
    let _ = writeln!(w, "| menu entry | {} |", names.join(" | "));
    let _ = writeln!(w, "|---|{}", "---:|".repeat(names.len()));
    for &m in crate::menu::MenuId::ALL {
        if !r
            .proposers
            .iter()
            .any(|p| p.per_menu.iter().any(|x| x.0 == m))
        {
            continue;
        }
        let cells: Vec<String> = r
            .proposers
            .iter()
            .map(|p| match p.per_menu.iter().find(|x| x.0 == m) {
                Some(&(_, wins, n)) => format!("{wins}/{n} ({})", rate(wins, n)),
                None => "-".to_string(),
            })
            .collect();
        let _ = writeln!(w, "| {m} | {} |", cells.join(" | "));
    }
    let _ = writeln!(w);
    if !r.refuted.is_empty() {
        let _ = writeln!(
            w,
            "Wins their own confirmation refuted (counted as decided experiments, not as wins; not levers of the projection):\n"
        );
        for x in &r.refuted {
            let _ = writeln!(w, "- {x}");
        }
        let _ = writeln!(w);
    }
}

fn failures(w: &mut String, r: &Report) {
    let _ = writeln!(w, "## Failures\n");
    if r.failures.is_empty() {
        let _ = writeln!(w, "No failed or aborted cycles, no failed measurements.\n");
        return;
    }
    let _ = writeln!(w, "| cycles | cause | e.g. cycle |");
    let _ = writeln!(w, "|---:|---|---|");
    for f in &r.failures {
        let ex: Vec<String> = f.examples.iter().map(|c| format!("#{c}")).collect();
        let _ = writeln!(
            w,
            "| {} | {} | {} |",
            f.cycles,
            cell(&f.cause),
            ex.join(", ")
        );
    }
    let _ = writeln!(w);
}

fn engine(w: &mut String, r: &Report) {
    let _ = writeln!(w, "## Engine time\n");
    let _ = writeln!(
        w,
        "What the daemon's engine runs took (their wall time, by the day they started, UTC), \
         by what it bought: noise floors (A/A), first A/Bs, confirmations, and experiments \
         that failed (time that bought nothing). Every second of it was taken from the \
         stack's users; `[cycle] max_engine_share` caps its share of wall-clock time.\n"
    );
    if r.engine.is_empty() {
        let _ = writeln!(w, "No engine runs in this period.\n");
        return;
    }
    let _ = writeln!(
        w,
        "| day | floor s | A/B s | confirmation s | failed s | total s | share of the wall-clock time |"
    );
    let _ = writeln!(w, "|---|---:|---:|---:|---:|---:|---:|");
    let row = |w: &mut String, label: &str, s: &crate::ledger::EngineSeconds, span_s: f64| {
        let _ = writeln!(
            w,
            "| {label} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} | {:.1}% |",
            s.floor,
            s.ab,
            s.confirmation,
            s.failed,
            s.total(),
            100.0 * s.total() / span_s
        );
    };
    let mut all = crate::ledger::EngineSeconds::default();
    for d in &r.engine {
        row(w, &d.day.to_string(), &d.seconds, 86_400.0);
        for u in crate::vocab::EngineUse::ALL {
            all.add(*u, d.seconds.get(*u));
        }
    }
    let span = (r.period.end - r.period.start).as_seconds_f64().max(1.0);
    row(w, "**period**", &all, span);
    let _ = writeln!(w);
}

fn projection(w: &mut String, p: &Projection) {
    let _ = writeln!(w, "## Projection (not a measurement)\n");
    let _ = writeln!(
        w,
        "What the live profile would run at if every remaining lever reached its measured best. \
         It multiplies only the measured figures below, each with its source, assuming each lever acts only on \
         the terms it changes (by the ratio measured in its best experiment; on the whole token, by its measured \
         whole-token ratio, where those terms are not measured), levers on one term compose, and \
         the rest of a token (R) does not move. The far-tier hit share and the draft acceptance are shown as \
         the state of their levers, not multiplied.\n"
    );
    let _ = writeln!(w, "| measured part of the live profile | value | source |");
    let _ = writeln!(w, "|---|---:|---|");
    for part in &p.parts {
        match &part.measured {
            Ok(s) => {
                let _ = writeln!(
                    w,
                    "| {} | {:.4} | {} |",
                    part.name,
                    s.value,
                    cell(&s.source)
                );
            }
            Err(why) => {
                let _ = writeln!(w, "| {} | - | {} |", part.name, cell(why));
            }
        }
    }
    let _ = writeln!(
        w,
        "\n| lever | acts on | best measured effect | multiplies | measured state (baseline → candidate) | source |"
    );
    let _ = writeln!(w, "|---|---|---:|---|---|---|");
    for l in &p.levers {
        let effect = l
            .best
            .as_ref()
            .map_or("-".to_string(), |b| display::percent(b.value));
        let multiplies = if l.factors.is_empty() {
            "not applied".to_string()
        } else {
            l.factors
                .iter()
                .map(|f| format!("{} × {:.4}", f.figure.symbol(), f.value))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let state = if l.state.is_empty() {
            "-".to_string()
        } else {
            l.state.join("; ")
        };
        let mut sources: Vec<String> = l.best.iter().map(|b| b.source.clone()).collect();
        sources.extend(l.factors.iter().map(|f| f.source.clone()));
        sources.extend(l.not_applied.iter().map(|n| format!("not applied: {n}")));
        let _ = writeln!(
            w,
            "| {} | {} | {effect} | {multiplies} | {} | {} |",
            l.menu,
            l.term.as_str(),
            cell(&state),
            cell(&sources.join("; "))
        );
    }
    let _ = writeln!(w);
    match (&p.projected, &p.arithmetic) {
        (Some(v), Some(a)) => {
            let _ = writeln!(w, "**Projected: {} s/token** = {a}.", spt(*v));
        }
        _ => {
            let _ = writeln!(
                w,
                "No projection: the ledger holds no measured speed of the live profile in this period."
            );
        }
    }
}
