//! `orchestrator stage list|show|approve|reject`: a person inspects and
//! decides staged wins. Approving writes the live profile file and nothing
//! else: it never restarts, signals or contacts the serving stack.

use std::path::Path;

use anyhow::Context;
use chrono::Utc;
use serde_json::json;

use super::UsageError;
use crate::cli::StageCommand;
use crate::config::Config;
use crate::display;
use crate::ledger::{
    Ledger, LedgerError, Run, StageDecision, StageDetail, StageId, StagePart, WriteTx,
};
use crate::profile::Profile;
use crate::vocab::{Digest, StageState};

pub fn run(config_path: &Path, cmd: StageCommand) -> anyhow::Result<()> {
    let config = Config::load(config_path)?;
    super::runtime()?.block_on(async {
        let ledger = super::open_ledger(&config).await?;
        let result = match cmd {
            StageCommand::List { all, json } => list(&ledger, all, json).await,
            StageCommand::Show { id, json } => show(&config, &ledger, StageId(id), json).await,
            StageCommand::Approve { id, by, note } => {
                let by = super::decider::decider(by)?;
                approve(&config, &ledger, StageId(id), &by, note.as_deref()).await
            }
            StageCommand::Reject { id, reason, by } => {
                let by = super::decider::decider(by)?;
                reject(&ledger, StageId(id), &by, &reason).await
            }
        };
        ledger.close().await;
        result
    })
}

async fn list(ledger: &Ledger, all: bool, json: bool) -> anyhow::Result<()> {
    let state = if all { None } else { Some(StageState::Staged) };
    let stages = ledger.stages(state).await?;
    if json {
        let labelled: Vec<serde_json::Value> = stages.iter().map(labelled_json).collect();
        println!("{}", serde_json::to_string_pretty(&labelled)?);
        return Ok(());
    }
    if stages.is_empty() {
        println!(
            "{}",
            if all {
                "no stages yet: wins appear here once the loop has confirmed one"
            } else {
                "no staged wins waiting (see every state with --all)"
            }
        );
        return Ok(());
    }
    let now = Utc::now();
    println!(
        "{:>4}  {:<9} {:<22} {:<28} {:<30} {:>7} {:>5}  base",
        "id", "state", "experiment", "parameters", "effect [interval]", "floor", "age"
    );
    for s in &stages {
        println!(
            "{:>4}  {:<9} {:<22} {:<28} {:<30} {:>7} {:>5}  {}",
            s.id.0,
            s.state.as_str(),
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
    }
    Ok(())
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
    }
    v
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
    let live = Profile::load(&config.stack.live_profile).ok();
    let diff: Vec<String> = match &live {
        Some(live) => live
            .diff(&candidate)
            .iter()
            .map(|c| c.to_string())
            .collect(),
        None => vec![],
    };
    let restart = super::restart::restart_lines(config, &candidate);
    if json {
        let out = json!({
            "detail": detail,
            "live_profile": config.stack.live_profile,
            "live_digest": live.as_ref().map(|p| p.digest()),
            "diff_against_live": diff,
            "restart_after_approval": restart,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
        return Ok(());
    }
    print_detail(config, &detail, live.as_ref(), &diff);
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

fn print_detail(config: &Config, d: &StageDetail, live: Option<&Profile>, diff: &[String]) {
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
    println!();
    match live {
        None => println!(
            "live profile {} cannot be read; no diff shown",
            config.stack.live_profile.display()
        ),
        Some(live) if live.digest() == s.base_digest => {
            println!("changes against the live profile (which is the stage's base):");
        }
        Some(_) => println!(
            "changes against the live profile (NOT the stage's base any more: approving will expire it):"
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
        println!(
            "{title}: verdict {} after {} pairs, effect {stats}, floor {}, method {}",
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

fn print_runs(runs: &[Run]) {
    println!(
        "  {:>5} {:<9} {:>4} {:>12} {:>6} {:<16} {:>4} {:>8}",
        "order", "arm", "pair", "s/token", "tokens", "output hash", "exit", "took"
    );
    for r in runs {
        println!(
            "  {:>5} {:<9} {:>4} {:>12} {:>6} {:<16} {:>4} {:>7.2}s{}",
            r.order_index,
            r.arm.as_str(),
            r.pair_index
                .map(|p| p.to_string())
                .unwrap_or_else(|| "-".into()),
            r.seconds_per_token
                .map(|x| format!("{x:.6}"))
                .unwrap_or_else(|| "-".into()),
            r.tokens
                .map(|t| t.to_string())
                .unwrap_or_else(|| "-".into()),
            r.output_hash.as_deref().unwrap_or("-"),
            r.exit_code
                .map(|c| c.to_string())
                .unwrap_or_else(|| "-".into()),
            r.duration_s,
            if r.refused { "  refused" } else { "" }
        );
    }
}

async fn approve(
    config: &Config,
    ledger: &Ledger,
    id: StageId,
    by: &str,
    note: Option<&str>,
) -> anyhow::Result<()> {
    let live_path = &config.stack.live_profile;
    // The IMMEDIATE transaction is held across the file write, so a racing
    // approval waits here and then finds this one's decision.
    let mut tx = ledger.begin_write().await?;
    let stage = tx.stage(id).await?;
    if stage.state != StageState::Staged {
        return Err(LedgerError::StageAlreadyDecided {
            id,
            state: stage.state,
            by: stage.decided_by.unwrap_or_default(),
            at: stage.decided_at.unwrap_or(stage.created_at),
        }
        .into());
    }
    let candidate = Profile::parse(&stage.candidate_profile, Path::new(&format!("stage {id}")))?;
    if candidate.digest() != stage.candidate_digest {
        anyhow::bail!(
            "stage {id}'s stored profile does not match its recorded digest {}; the ledger may be damaged, nothing was written",
            stage.candidate_digest
        );
    }
    let live = Profile::load(live_path).with_context(|| {
        format!("reading the live profile to compare it with stage {id}'s base")
    })?;
    let live_digest = live.digest();
    let now = Utc::now();
    if live_digest == stage.candidate_digest {
        // A previous approval wrote the file and died before recording it.
        tx.decide_stage(
            id,
            StageDecision::Approved,
            by,
            Some(&format!(
                "{}(the live profile already matched the staged one: recorded an interrupted approval)",
                note.map(|n| format!("{n} ")).unwrap_or_default()
            )),
            now,
        )
        .await?;
        let mut expired = expire_related(&mut tx, id, &stage, now).await?;
        expired.extend(expire_superseded(&mut tx, id, &stage.candidate_digest, now).await?);
        tx.commit().await?;
        println!(
            "stage {id} approved: {} already holds this profile (an earlier approval was interrupted before it was recorded)",
            live_path.display()
        );
        print_superseded(&expired);
        return Ok(());
    }
    if live_digest != stage.base_digest {
        let reason = format!(
            "the live profile changed (now {}, was {} when measured)",
            live_digest.short(),
            stage.base_digest.short()
        );
        tx.expire_stage(id, &reason, now).await?;
        tx.commit().await?;
        anyhow::bail!(
            "stage {id} is expired and was not applied: {reason}. Its evidence was measured against \
             another profile, so it proves nothing about the live one; the loop will test the idea \
             again against the current profile. Nothing was written."
        );
    }
    if let Some(pins) = candidate.pins_path(live_path)
        && !pins.exists()
    {
        anyhow::bail!(
            "stage {id}'s pin list {} is missing (it is written next to the live profile when planned); \
             nothing was written: reject this stage and let the loop plan it again",
            pins.display()
        );
    }
    let text = format!(
        "# live profile written by `orchestrator stage approve {id}` (by {by}, {now})\n{}",
        candidate.canonical()
    );
    crate::atomic_file::write(live_path, text.as_bytes())
        .with_context(|| format!("writing the live profile {}", live_path.display()))?;
    tx.decide_stage(id, StageDecision::Approved, by, note, now)
        .await?;
    let mut expired = expire_related(&mut tx, id, &stage, now).await?;
    expired.extend(expire_superseded(&mut tx, id, &stage.candidate_digest, now).await?);
    tx.commit().await?;
    println!(
        "stage {id} approved by {by}; {} now holds:",
        live_path.display()
    );
    for change in live.diff(&candidate) {
        println!("  {change}");
    }
    println!(
        "The serving stack reads its profile at start: restart it for this to take effect. \
         Nothing was restarted or signalled."
    );
    if let Some(lines) = super::restart::restart_lines(config, &candidate) {
        for line in lines {
            println!("{line}");
        }
    }
    print_superseded(&expired);
    Ok(())
}

/// Expires, with a reason naming the relation, the stages an approval of
/// `approved` makes moot: a composite's parts (the composite applies them
/// all), or the composites a part belongs to (their base is no longer live).
/// [`expire_superseded`] would expire them too, but without saying why.
async fn expire_related(
    tx: &mut WriteTx,
    approved: StageId,
    stage: &crate::ledger::Stage,
    now: chrono::DateTime<Utc>,
) -> anyhow::Result<Vec<StageId>> {
    let mut expired = Vec::new();
    for part in tx.parts_of(stage.experiment_id).await? {
        if tx.stage(part.stage_id).await?.state == StageState::Staged {
            let why = format!("its composite stage {approved} was approved, which applies it");
            tx.expire_stage(part.stage_id, &why, now).await?;
            expired.push(part.stage_id);
        }
    }
    for composite in tx.staged_composites_of(approved).await? {
        let why = format!(
            "its part stage {approved} was approved alone: the live profile is no longer this composite's base"
        );
        tx.expire_stage(composite, &why, now).await?;
        expired.push(composite);
    }
    Ok(expired)
}

/// Expires, in the approval's own transaction, every other staged win whose
/// base is not the profile just approved: their evidence was measured
/// against the profile that is no longer live. Doing it here rather than at
/// the daemon's next cycle means `stage list` never offers them, and a
/// racing `stage approve` of one of them finds it expired by this approval.
async fn expire_superseded(
    tx: &mut WriteTx,
    approved: StageId,
    live: &Digest,
    now: chrono::DateTime<Utc>,
) -> anyhow::Result<Vec<StageId>> {
    let reason = format!(
        "stage {approved} was approved: the live profile is now {}, not this stage's base",
        live.short()
    );
    Ok(tx.expire_stale_stages(live, &reason, now).await?)
}

fn print_superseded(expired: &[StageId]) {
    if !expired.is_empty() {
        let ids: Vec<String> = expired.iter().map(ToString::to_string).collect();
        println!(
            "Expired {} other staged win(s) measured against the old live profile: {}. \
             The loop tests their ideas again against the new one.",
            expired.len(),
            ids.join(", ")
        );
    }
}

async fn reject(ledger: &Ledger, id: StageId, by: &str, reason: &str) -> anyhow::Result<()> {
    if reason.trim().is_empty() {
        return Err(UsageError("--reason must say why the stage is rejected".into()).into());
    }
    let now = Utc::now();
    let mut tx = ledger.begin_write().await?;
    tx.decide_stage(id, StageDecision::Rejected, by, Some(reason), now)
        .await?;
    // A composite applies every part: one rejected, the composite goes too.
    let composites = tx.staged_composites_of(id).await?;
    for &composite in &composites {
        let why = format!("its part stage {id} was rejected by {by}: {reason}");
        tx.expire_stage(composite, &why, now).await?;
    }
    tx.commit().await?;
    println!("stage {id} rejected by {by}: {reason}");
    if !composites.is_empty() {
        let ids: Vec<String> = composites.iter().map(ToString::to_string).collect();
        println!(
            "Expired the composite stage(s) that apply it: {}.",
            ids.join(", ")
        );
    }
    Ok(())
}
