//! `orchestrator stage list|show|approve|reject|revert|restarted`: a person inspects and
//! decides staged wins, from any machine with the ledger. Approving
//! (`approve`) writes the live profile file, or on PostgreSQL has the
//! stack's daemon write it, and nothing else: it never restarts, signals or
//! contacts the serving stack.

use std::path::Path;

use chrono::Utc;
use serde_json::json;

mod approve;
mod realized;
mod reject;
mod restarted;
mod revert;
mod runs;

use super::UsageError;
use crate::cli::StageCommand;
use crate::config::Config;
use crate::display;
use crate::ledger::{Ledger, StageApply, StageDetail, StageId, StagePart, StageRevert};
use crate::profile::Profile;
use crate::vocab::StageState;
use runs::{discarded_pairs, print_runs};

pub fn run(config_path: &Path, cmd: StageCommand) -> anyhow::Result<()> {
    let config = Config::load(config_path)?;
    super::runtime()?.block_on(async {
        let ledger = super::open_ledger(&config).await?;
        let result = match cmd {
            StageCommand::List { all, json, stack } => {
                list(&config, &ledger, all, json, stack.as_deref()).await
            }
            StageCommand::Show { id, json } => show(&config, &ledger, StageId(id), json).await,
            StageCommand::Approve {
                id,
                by,
                note,
                class,
                restart,
            } => {
                let by = super::decider::decider(by)?;
                let id = StageId(id);
                if class {
                    approve::approve_for_class(&config, &ledger, id, &by, note.as_deref()).await
                } else {
                    approve::approve(&config, &ledger, id, &by, note.as_deref(), restart).await
                }
            }
            StageCommand::Revert {
                id,
                reason,
                by,
                restart,
            } => {
                let by = super::decider::decider(by)?;
                revert::revert(&config, &ledger, StageId(id), &by, &reason, restart).await
            }
            StageCommand::Restarted { id } => {
                restarted::restarted(&config, &ledger, StageId(id)).await
            }
            StageCommand::Reject { id, reason, by } => {
                let by = super::decider::decider(by)?;
                reject::reject(&ledger, StageId(id), &by, &reason).await
            }
        };
        ledger.close().await;
        result
    })
}

async fn list(
    config: &Config,
    ledger: &Ledger,
    all: bool,
    json: bool,
    stack: Option<&str>,
) -> anyhow::Result<()> {
    let state = if all { None } else { Some(StageState::Staged) };
    // A read handle scoped to the stack lists its stages only.
    let ledger = super::scoped_to_stack(config, ledger, stack).await?;
    let stages = ledger.stages(state).await?;
    let reverts = ledger.stage_reverts().await?;
    let revert_of = |id: StageId| reverts.iter().find(|r| r.stage_id == id);
    let realizations = ledger.realizations().await?;
    let none = crate::ledger::StageRealization::default();
    let realized_of = |s: &crate::ledger::StageSummary| {
        let claim = realized::Claim {
            id: s.id,
            effect: s.effect,
            interval: s.interval,
        };
        let r = realizations.get(&s.id).unwrap_or(&none);
        (claim, r.of(s.applied_at.is_some()))
    };
    if json {
        let labelled: Vec<serde_json::Value> = stages
            .iter()
            .map(|s| {
                let mut v = labelled_json(s);
                v["revert"] = json!(revert_of(s.id));
                let (claim, r) = realized_of(s);
                v["realized"] = realized::json(claim, r);
                v
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&labelled)?);
        return Ok(());
    }
    if stages.is_empty() {
        let of = stack.map(|s| format!(" of stack {s}")).unwrap_or_default();
        println!(
            "{}",
            if all && stack.is_some() {
                format!("no stages{of} yet")
            } else if stack.is_some() {
                format!("no staged wins{of} waiting (see every state with --all)")
            } else if all {
                "no stages yet: wins appear here once the loop has confirmed one".to_string()
            } else {
                "no staged wins waiting (see every state with --all)".to_string()
            }
        );
        return Ok(());
    }
    let now = Utc::now();
    let under = waiting_candidates(&ledger, &stages).await?;
    println!(
        "{:>4}  {:<9} {:<14} {:<22} {:<28} {:<30} {:>7} {:>5}  base",
        "id", "state", "stack", "experiment", "parameters", "effect [interval]", "floor", "age"
    );
    for s in &stages {
        println!(
            "{:>4}  {:<9} {:<14} {:<22} {:<28} {:<30} {:>7} {:>5}  {}",
            s.id.0,
            revert_of(s.id).map_or(s.state.as_str(), |r| r.status().as_str()),
            s.stack.as_deref().unwrap_or("-"),
            crate::ledger::stage_label(s.menu_id, &s.parts),
            parameters(&s.parameters, &s.parts),
            display::effect(s.effect, s.interval.low, s.interval.high),
            if s.floor_is_bound {
                "bound".to_string()
            } else {
                display::floor(s.noise_floor)
            },
            display::age(s.age(now)),
            s.base_digest.short(),
        );
        if let Some(on) = confirmed_on(s.confirmed_elsewhere(), s.confirmed_in_class.as_deref()) {
            println!("      {on}");
        }
        let (claim, r) = realized_of(s);
        if let Some(line) = realized::line(claim, r) {
            println!("      {line}");
        }
        if let Some(r) = revert_of(s.id) {
            println!("      {}", revert_line(r));
        }
        if s.state == StageState::Staged
            && let Some((id, _)) = under.iter().find(|(_, c)| *c == s.base_digest)
        {
            println!("      measured on top of stage {id}, which waits: approve {id} first");
        }
    }
    Ok(())
}

/// The candidates of the listed wins that wait, to name the one a win was
/// measured on top of (`[cycle] build_on_staged`).
async fn waiting_candidates(
    ledger: &Ledger,
    stages: &[crate::ledger::StageSummary],
) -> anyhow::Result<Vec<(crate::ledger::StageId, crate::vocab::Digest)>> {
    let mut out = Vec::new();
    for s in stages.iter().filter(|s| s.state == StageState::Staged) {
        out.push((s.id, ledger.stage(s.id).await?.candidate_digest));
    }
    Ok(out)
}

/// A stage as JSON with its effect named both ways: the stored log ratio
/// (`effect_log_ratio`, `interval_log_ratio`) and the relative change of
/// s/token the table shows (`effect_percent`, `interval_percent`).
fn labelled_json(s: &crate::ledger::StageSummary) -> serde_json::Value {
    let pct = |x: f64| 100.0 * x.exp_m1();
    let mut v = serde_json::to_value(s).unwrap_or_default();
    if let Some(o) = v.as_object_mut() {
        o.remove("effect");
        o.remove("interval");
        o.insert("effect_log_ratio".into(), json!(s.effect));
        o.insert(
            "interval_log_ratio".into(),
            json!([s.interval.low, s.interval.high]),
        );
        o.insert("effect_percent".into(), json!(pct(s.effect)));
        o.insert(
            "interval_percent".into(),
            json!([pct(s.interval.low), pct(s.interval.high)]),
        );
        // The bound judged against is no measured floor.
        let floor = (!s.floor_is_bound).then(|| pct(s.noise_floor));
        o.insert("noise_floor_percent".into(), json!(floor));
        if s.floor_is_bound {
            o.insert("bound_percent".into(), json!(pct(s.noise_floor)));
            o.remove("noise_floor");
        }
        o.insert(
            "confirmed_on".into(),
            json!(confirmed_on(
                s.confirmed_elsewhere(),
                s.confirmed_in_class.as_deref()
            )),
        );
    }
    v
}

/// "confirmed on stack B (class K)" for a stage a classmate confirmed;
/// `None` when its own stack did.
fn confirmed_on(by: Option<&str>, class: Option<&str>) -> Option<String> {
    let by = by?;
    Some(match class {
        Some(class) => format!("confirmed on stack {by} (class {class})"),
        None => format!("confirmed on stack {by}"),
    })
}

/// A stage's parameters: its experiment's, or for a composite each part's.
fn parameters(v: &serde_json::Value, parts: &[StagePart]) -> String {
    if parts.is_empty() {
        return compact(v);
    }
    parts
        .iter()
        .map(|p| compact(&p.parameters))
        .collect::<Vec<_>>()
        .join(" + ")
}

fn compact(v: &serde_json::Value) -> String {
    v.as_object()
        .map(|o| {
            o.iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_else(|| v.to_string())
}

async fn show(config: &Config, ledger: &Ledger, id: StageId, json: bool) -> anyhow::Result<()> {
    let detail = ledger.stage_detail(id).await?;
    let candidate = Profile::parse(
        &detail.stage.candidate_profile,
        Path::new(&format!("stage {id}")),
    )?;
    // Another stack's live profile (the config of the machine this runs on)
    // says nothing about this stage, and its own is on its host.
    let here = detail
        .stage
        .stack
        .as_ref()
        .is_none_or(|s| *s == config.stack.name);
    let live = here
        .then(|| Profile::load(&config.stack.live_profile).ok())
        .flatten();
    let diff: Vec<String> = match &live {
        Some(live) => live
            .diff(&candidate)
            .iter()
            .map(|c| c.to_string())
            .collect(),
        None => vec![],
    };
    let restart = here
        .then(|| crate::apply::restart_lines(config, &candidate))
        .flatten();
    let apply = apply_line(&detail.stage);
    let hosts = class_hosts(ledger, &detail.stage).await?;
    let revert = ledger.stage_revert(id).await?;
    let realization = ledger.stage_realization(id).await?;
    let claim = realized::Claim {
        id,
        effect: detail.stage.effect,
        interval: detail.stage.interval,
    };
    let realized = realization.of(detail.stage.is_applied());
    if json {
        let out = json!({
            "detail": detail,
            "revert": revert,
            "revert_summary": revert.as_ref().map(revert_line),
            "realized": realized::json(claim, realized),
            "realization_attempts": realization.attempts,
            "apply": detail.stage.apply().status(),
            "apply_summary": apply,
            "approved_for_class": detail.stage.approved_for_class,
            "class_applies": hosts.iter().map(|h| json!({
                "stack": h.stack,
                "apply": h.status(),
                "applied_at": h.apply.as_ref().and_then(|a| a.applied_at),
                "applied_by": h.apply.as_ref().map(|a| &a.applied_by),
                "applied_to": h.apply.as_ref().map(|a| &a.applied_to),
                "refusal": h.apply.as_ref().and_then(|a| a.refusal.as_ref()),
            })).collect::<Vec<_>>(),
            "confirmed_on": confirmed_on(
                detail.stage.confirmed_elsewhere(),
                detail.confirmed_in_class.as_deref()
            ),
            "live_profile": here.then_some(&config.stack.live_profile),
            "live_digest": live.as_ref().map(|p| p.digest()),
            "diff_against_live": diff,
            // Each run carries `discarded` too; these are its pairs.
            "discarded_pairs": {
                "experiment": discarded_pairs(&detail.runs),
                "confirmation": discarded_pairs(&detail.confirmation_runs),
            },
            "restart_after_approval": restart,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    print_detail(config, &detail, here, live.as_ref(), &diff);
    if let Some(line) = realized::line(claim, realized) {
        println!();
        println!("{line}");
    }
    if let Some(r) = &revert {
        println!();
        println!("revert   {}", revert_line(r));
    }
    if let Some(class) = &detail.stage.approved_for_class {
        println!();
        println!(
            "approved for class {class}: each other host of the class applies it to its own live profile"
        );
        for h in &hosts {
            println!("  {:<14} {}", h.stack, h.line());
        }
    }
    match (detail.stage.state, restart) {
        (StageState::Staged, Some(lines)) => {
            println!();
            println!(
                "after `orchestrator stage approve {id}`, {}",
                lines.join("\n")
            );
        }
        (StageState::Approved, Some(lines)) => {
            println!();
            println!("{}", lines.join("\n"));
        }
        // A rejected or expired profile is not one to run.
        _ => {}
    }
    Ok(())
}

/// A classmate of a stage approved for its class, and its apply if settled.
struct ClassHost {
    stack: String,
    apply: Option<crate::ledger::HostApply>,
}

impl ClassHost {
    fn status(&self) -> &'static str {
        match &self.apply {
            None => "waiting",
            Some(a) if a.refusal.is_some() => "refused",
            Some(_) => "applied",
        }
    }

    fn line(&self) -> String {
        match &self.apply {
            None => format!("waiting for stack {}'s daemon to apply it", self.stack),
            Some(a) => match (&a.refusal, a.applied_at, a.refused_at) {
                (Some(why), _, at) => format!(
                    "NOT applied: {why} (refused by {} at {}; {} was not written)",
                    a.applied_by,
                    at.map(|t| t.to_string()).unwrap_or_default(),
                    a.applied_to
                ),
                (None, at, _) => format!(
                    "applied to {} by {} at {}",
                    a.applied_to,
                    a.applied_by,
                    at.map(|t| t.to_string()).unwrap_or_default()
                ),
            },
        }
    }
}

/// Every stack of the class a stage was approved for but its own, with
/// its apply: the class's stacks as their cycles name them, and any that
/// recorded an apply.
async fn class_hosts(
    ledger: &Ledger,
    stage: &crate::ledger::Stage,
) -> anyhow::Result<Vec<ClassHost>> {
    let Some(class) = &stage.approved_for_class else {
        return Ok(Vec::new());
    };
    let mut applies = ledger.class_applies(stage.id).await?;
    let mut stacks = ledger.class_stacks(class).await?;
    stacks.extend(applies.iter().map(|a| a.stack.clone()));
    stacks.sort();
    stacks.dedup();
    Ok(stacks
        .into_iter()
        .filter(|s| Some(s) != stage.stack.as_ref())
        .map(|stack| {
            let apply = applies
                .iter()
                .position(|a| a.stack == stack)
                .map(|i| applies.swap_remove(i));
            ClassHost { stack, apply }
        })
        .collect())
}

/// A revert in one line: who asked, why, and whether it was written.
fn revert_line(r: &StageRevert) -> String {
    let asked = format!(
        "{} by {} at {}: {}",
        r.status().as_str(),
        r.requested_by,
        r.requested_at,
        r.reason
    );
    let by = r.applied_by.as_deref().unwrap_or_default();
    let to = r.applied_to.as_deref().unwrap_or_default();
    let restarted = r
        .restarted_at
        .map(|t| format!("; the stack was restarted on it at {t}"))
        .unwrap_or_default();
    match (&r.refusal, r.applied_at) {
        (Some(why), _) => {
            format!("{asked}; NOT written: {why} (refused by {by}; {to} was not written)")
        }
        (None, Some(at)) => {
            format!("{asked}; the replaced profile was written to {to} by {by} at {at}{restarted}")
        }
        (None, None) => format!("{asked}; waiting for its stack's daemon to write it"),
    }
}

/// Whether an approval reached the live profile, for `stage show`: "approved
/// by X at T; applied to PATH by the daemon of stack S ... at T2", or
/// waiting for it, or not applied and why.
fn apply_line(s: &crate::ledger::Stage) -> Option<String> {
    let approved = format!(
        "approved by {} at {}",
        s.decided_by.as_deref().unwrap_or_default(),
        s.decided_at.unwrap_or(s.created_at)
    );
    let stack = s.stack.as_deref().unwrap_or("(unnamed)");
    match s.apply() {
        StageApply::NotApproved => None,
        StageApply::Waiting => Some(format!(
            "{approved}; waiting for stack {stack}'s daemon to apply it"
        )),
        StageApply::Applied { at, by, to } => {
            Some(format!("{approved}; applied to {to} by {by} at {at}"))
        }
        StageApply::Refused { at, by, to, why } => Some(format!(
            "{approved}; NOT applied: {why} (refused by {by} at {at}; {to} was not written)"
        )),
    }
}

fn print_detail(
    config: &Config,
    d: &StageDetail,
    here: bool,
    live: Option<&Profile>,
    diff: &[String],
) {
    let s = &d.stage;
    println!(
        "stage {} ({}): {} {}",
        s.id,
        s.state,
        crate::ledger::stage_label(d.experiment.menu_id, &d.parts),
        parameters(&d.experiment.parameters, &d.parts)
    );
    if !d.parts.is_empty() {
        println!("parts    (approving this stage expires them; approving one expires this)");
        for p in &d.parts {
            println!(
                "  stage #{} {} {}: {} (its confirmation)",
                p.stage_id,
                p.menu_id,
                compact(&p.parameters),
                display::effect(p.effect, p.interval.low, p.interval.high)
            );
        }
    }
    println!(
        "effect   {} (confirmation), floor {}",
        display::effect(s.effect, s.interval.low, s.interval.high),
        display::verdict_floor(s.noise_floor, d.confirmation_verdict.floor_is_bound)
    );
    if let Some(stack) = &s.stack {
        println!("stack    {stack}");
    }
    if let Some(on) = confirmed_on(s.confirmed_elsewhere(), d.confirmed_in_class.as_deref()) {
        println!("         {on}: its independent A/B ran on that host");
    }
    println!("base     {}", s.base_digest);
    println!("staged   {}", s.candidate_digest);
    if let (Some(by), Some(at)) = (&s.decided_by, s.decided_at) {
        println!(
            "decided  {} by {by} at {at}{}",
            s.state,
            s.note
                .as_deref()
                .map(|n| format!(": {n}"))
                .unwrap_or_default()
        );
    }
    if let Some(line) = apply_line(s) {
        println!("apply    {line}");
    }
    if let Some(at) = s.restarted_at {
        println!("restart  `stage approve --restart` restarted the stack on it at {at}");
    }
    println!();
    match live {
        None if !here => println!(
            "the live profile of stack {} is on its host (this config is stack {}'s); no diff shown",
            s.stack.as_deref().unwrap_or_default(),
            config.stack.name
        ),
        None => println!(
            "live profile {} cannot be read; no diff shown",
            config.stack.live_profile.display()
        ),
        Some(live) if live.digest() == s.base_digest => {
            println!("changes against the live profile (which is the stage's base):");
        }
        Some(_) => println!(
            "changes against the live profile (NOT the stage's base any more: it will not be applied):"
        ),
    }
    for line in diff {
        println!("  {line}");
    }
    for (title, runs, v) in [
        ("experiment", &d.runs, &d.verdict),
        (
            "confirmation",
            &d.confirmation_runs,
            &d.confirmation_verdict,
        ),
    ] {
        println!();
        let stats = match (v.effect, v.interval) {
            (Some(e), Some(i)) => display::effect(e, i.low, i.high),
            _ => "-".to_string(),
        };
        let discarded = match discarded_pairs(runs).len() {
            0 => String::new(),
            n => format!(" (and {n} discarded, marked below)"),
        };
        println!(
            "{title}: verdict {} after {} pairs{discarded}, effect {stats}, floor {}, method {}",
            v.kind,
            v.pairs,
            v.noise_floor
                .map(|f| display::verdict_floor(f, v.floor_is_bound))
                .unwrap_or_else(|| "-".into()),
            v.method.as_deref().unwrap_or("-")
        );
        print_runs(runs);
    }
}
