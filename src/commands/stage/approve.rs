//! `orchestrator stage approve`: on SQLite it writes the live profile in
//! the approval's own transaction (the CLI runs on the stack's host); on a
//! shared PostgreSQL ledger it records the approval only, and the stack's
//! daemon writes the file on its host (`daemon/applier.rs`). Either way the
//! approval expires the stages it makes moot; nothing is restarted unless
//! `--restart` asks for `[stack] restart` (SQLite, after the write).

use std::path::Path;

use anyhow::Context;
use chrono::Utc;

use crate::apply::{Check, Refusal};
use crate::commands::UsageError;
use crate::config::Config;
use crate::ledger::{
    ApplyOutcome, Backend, Ledger, LedgerError, Restarted, StackScope, StageDecision, StageId,
    WriteTx,
};
use crate::profile::Profile;
use crate::vocab::{Digest, StageState};

/// Approves a staged win. On SQLite (the CLI runs on the stack's host) it
/// writes the live profile itself; on a shared PostgreSQL ledger it only
/// records the approval, and the stack's daemon writes the file on its host
/// (`daemon/applier.rs`).
pub(super) async fn approve(
    config: &Config,
    ledger: &Ledger,
    id: StageId,
    by: &str,
    note: Option<&str>,
    restart: bool,
) -> anyhow::Result<()> {
    if restart {
        crate::apply::restart_command(config)
            .map_err(|e| UsageError(format!("{e}. Nothing was written.")))?;
    }
    // The approval expires only the stage's own stack's other staged wins:
    // another stack's live profile does not change.
    let ledger = match ledger.stage(id).await?.stack {
        Some(name) => ledger.clone().scoped(StackScope { name, class: None }),
        None => ledger.clone(),
    };
    refuse_if_built_on_waiting(config, &ledger, id).await?;
    match ledger.backend() {
        Backend::Postgres if restart => Err(UsageError(format!(
            "--restart runs [stack] restart after this command writes the live profile, but on a \
             PostgreSQL ledger the stack's daemon writes it on its host: approve without --restart, \
             and restart the stack once `orchestrator stage show {id}` says it is applied. \
             Nothing was recorded."
        ))
        .into()),
        Backend::Postgres => approve_for_daemon(config, &ledger, id, by, note, None).await,
        Backend::Sqlite => approve_and_write(config, &ledger, id, by, note, restart).await,
    }
}

/// A win measured on top of another staged win (`[cycle] build_on_staged`)
/// is approved after it: its evidence is against that win's profile, which
/// is not live yet. Refused before anything is written, and not expired:
/// it becomes approvable once the win under it is approved.
///
/// A stage measured on the live profile itself is never refused, even when
/// another waiting win's candidate happens to be that profile too (a chain
/// that came back to where it started): that one is built on this one, not
/// the other way round. Where the live profile cannot be read here (a
/// PostgreSQL ledger approved from another machine), the chain alone says.
async fn refuse_if_built_on_waiting(
    config: &Config,
    ledger: &Ledger,
    id: StageId,
) -> anyhow::Result<()> {
    let stage = ledger.stage(id).await?;
    if stage.state != StageState::Staged {
        return Ok(());
    }
    if Profile::load(&config.stack.live_profile).is_ok_and(|p| p.digest() == stage.base_digest) {
        return Ok(());
    }
    for other in ledger.stages(Some(StageState::Staged)).await? {
        if other.id == id {
            continue;
        }
        let under = ledger.stage(other.id).await?;
        if under.candidate_digest == stage.base_digest {
            return Err(UsageError(format!(
                "stage {id} was measured on top of stage {under_id}, which still waits for \
                 approval: approve stage {under_id} first (then {id}), or reject {under_id}, which \
                 expires {id}. Nothing was written.",
                under_id = under.id
            ))
            .into());
        }
    }
    Ok(())
}

/// `stage approve ID --class`: approves the stage for every host of its
/// stack's class, on a shared PostgreSQL ledger. The approval is recorded
/// with the class; the stage's own daemon applies it as any approval, and
/// every other daemon of the class applies it to its own live profile when
/// that profile is the stage's base (`daemon/applier.rs`).
pub(super) async fn approve_for_class(
    config: &Config,
    ledger: &Ledger,
    id: StageId,
    by: &str,
    note: Option<&str>,
) -> anyhow::Result<()> {
    if ledger.backend() != Backend::Postgres {
        return Err(UsageError(format!(
            "stage approve --class approves stage {id} for every host of its class, whose daemons \
             share a PostgreSQL ledger; this ledger is a SQLite file on one host. Approve it \
             without --class. Nothing was recorded."
        ))
        .into());
    }
    let detail = ledger.stage_detail(id).await?;
    let class = ledger.cycle(detail.experiment.cycle_id).await?.class;
    let (Some(stack), Some(class)) = (detail.stage.stack.clone(), class) else {
        return Err(UsageError(format!(
            "stage {id}'s stack {} names no [stack] class, so it has no classmates to apply it: \
             approve it without --class. Nothing was recorded.",
            detail.stage.stack.as_deref().unwrap_or("(unnamed)")
        ))
        .into());
    };
    let ledger = ledger.clone().scoped(StackScope {
        name: stack,
        class: None,
    });
    approve_for_daemon(config, &ledger, id, by, note, Some(&class)).await?;
    println!(
        "Approved for class {class}: every daemon of the class whose live profile is the stage's \
         base ({}) writes it to its own at the start of its next cycle; the others record why \
         not. `orchestrator stage show {id}` lists each host's.",
        detail.stage.base_digest.short()
    );
    Ok(())
}

fn already_decided(stage: crate::ledger::Stage) -> LedgerError {
    LedgerError::StageAlreadyDecided {
        id: stage.id,
        state: stage.state,
        by: stage.decided_by.unwrap_or_default(),
        at: stage.decided_at.unwrap_or(stage.created_at),
    }
}

/// A PostgreSQL ledger's approval (for `class` too, when given): recorded,
/// with the stages it makes moot expired, in one transaction; no file is
/// written here.
async fn approve_for_daemon(
    config: &Config,
    ledger: &Ledger,
    id: StageId,
    by: &str,
    note: Option<&str>,
    class: Option<&str>,
) -> anyhow::Result<()> {
    let mut tx = ledger.begin_write().await?;
    let stage = tx.stage(id).await?;
    if stage.state != StageState::Staged {
        return Err(already_decided(stage).into());
    }
    let Some(stack) = stage.stack.clone() else {
        anyhow::bail!(
            "stage {id} records no stack, so no daemon would apply it: start its stack's daemon \
             once (it adopts the rows written before stacks were recorded), then approve again. \
             Nothing was recorded."
        );
    };
    // Refused here rather than by the daemon later: nobody could apply it.
    let candidate = Profile::parse(&stage.candidate_profile, Path::new(&format!("stage {id}")))?;
    if candidate.digest() != stage.candidate_digest {
        anyhow::bail!(
            "stage {id}'s stored profile does not match its recorded digest {}; the ledger may be damaged, nothing was recorded",
            stage.candidate_digest
        );
    }
    let expired = record_approval(tx, &stage, by, note, None, class, Utc::now()).await?;
    println!(
        "stage {id} approved by {by}, recorded in the ledger: the daemon of stack {stack} writes it \
         to its live profile on its host at the start of its next cycle (nothing was written here). \
         `orchestrator stage show {id}` says when it has."
    );
    if config.stack.name == stack
        && let Some(lines) = crate::apply::restart_lines(config, &candidate)
    {
        println!("Once it is applied, {}", lines.join("\n"));
    }
    print_superseded(&expired);
    Ok(())
}

/// A SQLite ledger's approval: the live profile is written while the
/// approval's transaction is held, and the apply recorded with it.
async fn approve_and_write(
    config: &Config,
    ledger: &Ledger,
    id: StageId,
    by: &str,
    note: Option<&str>,
    restart: bool,
) -> anyhow::Result<()> {
    let live_path = &config.stack.live_profile;
    // The IMMEDIATE transaction is held across the file write, so a racing
    // approval waits here and then finds this one's decision.
    let mut tx = ledger.begin_write().await?;
    let stage = tx.stage(id).await?;
    if stage.state != StageState::Staged {
        return Err(already_decided(stage).into());
    }
    if let Some(stack) = &stage.stack
        && *stack != config.stack.name
    {
        return Err(UsageError(format!(
            "stage {id} was staged by stack {stack:?}, but {} configures stack {:?}: its live \
             profile is not the one the stage was measured against. Approve it with stack \
             {stack:?}'s config. Nothing was written.",
            config.path.display(),
            config.stack.name
        ))
        .into());
    }
    let applied_by = format!(
        "`orchestrator stage approve` on host {}",
        crate::apply::host()
    );
    let to = live_path.display().to_string();
    let now = Utc::now();
    let (candidate, live) = match crate::apply::check(&stage, live_path)
        .with_context(|| format!("reading the live profile to compare it with stage {id}'s base"))?
    {
        Check::Write { candidate, live } => (candidate, live),
        Check::AlreadyLive => {
            // A previous approval wrote the file and died before recording it.
            let note = format!(
                "{}(the live profile already matched the staged one: recorded an interrupted approval)",
                note.map(|n| format!("{n} ")).unwrap_or_default()
            );
            let applied = Some((applied_by.as_str(), to.as_str()));
            let expired = record_approval(tx, &stage, by, Some(&note), applied, None, now).await?;
            println!(
                "stage {id} approved: {} already holds this profile (an earlier approval was interrupted before it was recorded)",
                live_path.display()
            );
            print_superseded(&expired);
            return Ok(());
        }
        Check::Refuse(why @ Refusal::LiveMoved { .. }) => {
            let reason = why.to_string();
            tx.expire_stage(id, &reason, now).await?;
            tx.commit().await?;
            anyhow::bail!(
                "stage {id} is expired and was not applied: {reason}. Its evidence was measured against \
                 another profile, so it proves nothing about the live one; the loop will test the idea \
                 again against the current profile. Nothing was written."
            );
        }
        Check::Refuse(why @ Refusal::PinsMissing(_)) => anyhow::bail!(
            "stage {id}'s {why}; nothing was written: reject this stage and let the loop plan it again"
        ),
        Check::Refuse(why @ Refusal::Damaged(_)) => {
            anyhow::bail!("stage {id}'s {why}: nothing was written")
        }
    };
    crate::apply::write(
        live_path,
        &candidate,
        &format!("`orchestrator stage approve {id}` (by {by}, {now})"),
    )
    .with_context(|| format!("writing the live profile {}", live_path.display()))?;
    let applied = Some((applied_by.as_str(), to.as_str()));
    let expired = record_approval(tx, &stage, by, note, applied, None, now).await?;
    println!(
        "stage {id} approved by {by}; {} now holds:",
        live_path.display()
    );
    for change in live.diff(&candidate) {
        println!("  {change}");
    }
    print_superseded(&expired);
    if restart {
        return run_restart(config, ledger, id, Restarted::Approval, &candidate).await;
    }
    println!(
        "The serving stack reads its profile at start: restart it for this to take effect. \
         Nothing was restarted or signalled."
    );
    if let Some(lines) = crate::apply::restart_lines(config, &candidate) {
        for line in lines {
            println!("{line}");
        }
    }
    Ok(())
}

/// `--restart`, after the live profile was written and recorded: runs
/// `[stack] restart`, waits for the live server, and records the restart.
/// A failed restart is exit 1 naming the command; the profile stays written.
pub(super) async fn run_restart(
    config: &Config,
    ledger: &Ledger,
    id: StageId,
    what: Restarted,
    profile: &Profile,
) -> anyhow::Result<()> {
    let live = config.stack.live_profile.display();
    let done = match crate::apply::restart(config, profile).await {
        Ok(done) => done,
        Err(e) if e.is_usage() => return Err(UsageError(format!("{e}")).into()),
        Err(e) => anyhow::bail!(
            "{e}. The live profile {live} IS written and stage {id}'s {} is recorded; restart the \
             stack by hand once the command is fixed",
            match what {
                Restarted::Approval => "approval",
                Restarted::Revert => "revert",
            }
        ),
    };
    ledger.record_restart(id, what, Utc::now()).await?;
    match &done.healthy {
        Some(url) => println!(
            "Restarted the stack with `{}`: {url} answered after {:.1}s, {} the profile in {live}.",
            done.command,
            done.took.as_secs_f64(),
            if done.reports_profile {
                "reporting that it runs"
            } else {
                "on"
            }
        ),
        None => println!(
            "Restarted the stack with `{}` ({:.1}s); it has no live server to wait for.",
            done.command,
            done.took.as_secs_f64()
        ),
    }
    Ok(())
}

/// Records the approval of `stage` and, when this process wrote the live
/// profile, the apply (`applied`: by what, to which file); expires the
/// stages the approval makes moot; commits. Returns those expired.
async fn record_approval(
    mut tx: WriteTx,
    stage: &crate::ledger::Stage,
    by: &str,
    note: Option<&str>,
    applied: Option<(&str, &str)>,
    for_class: Option<&str>,
    now: chrono::DateTime<Utc>,
) -> anyhow::Result<Vec<StageId>> {
    let id = stage.id;
    tx.decide_stage(id, StageDecision::Approved, by, note, now)
        .await?;
    if let Some(class) = for_class {
        tx.approve_for_class(id, class).await?;
    }
    if let Some((applied_by, to)) = applied {
        tx.settle_apply(id, ApplyOutcome::Applied, applied_by, to, now)
            .await?;
    }
    let mut expired = expire_related(&mut tx, id, stage, now).await?;
    expired.extend(expire_superseded(&mut tx, id, &stage.candidate_digest, now).await?);
    tx.commit().await?;
    Ok(expired)
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
        "stage {approved} was approved: its stack's live profile is now (or, once its daemon \
         applies it, becomes) {}, not this stage's base",
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
