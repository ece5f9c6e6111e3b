//! `orchestrator stage revert ID --reason TEXT`: puts back the profile an
//! approved, applied stage replaced (its experiment's base profile), only
//! while the live profile is still the stage's own; recorded with who and
//! why. On SQLite the CLI writes the file in the revert's own transaction;
//! on PostgreSQL it records the request and the stack's daemon writes it on
//! its host (`daemon/reverter.rs`). Either way the staged wins measured on
//! top of the reverted profile expire, and the command says which.

use anyhow::Context;
use chrono::Utc;

use crate::apply::{RevertCheck, RevertRefusal};
use crate::commands::UsageError;
use crate::config::Config;
use crate::ledger::{
    ApplyOutcome, Backend, Ledger, Restarted, RevertStatus, StackScope, Stage, StageId, WriteTx,
};
use crate::vocab::StageState;

pub(super) async fn revert(
    config: &Config,
    ledger: &Ledger,
    id: StageId,
    by: &str,
    reason: &str,
    restart: bool,
) -> anyhow::Result<()> {
    if reason.trim().is_empty() {
        return Err(UsageError("--reason must say why the stage is reverted".into()).into());
    }
    if restart && ledger.backend() == Backend::Sqlite {
        crate::apply::restart_command(config)
            .map_err(|e| UsageError(format!("{e}. Nothing was written.")))?;
    }
    // The stages the revert expires are its own stack's.
    let ledger = match ledger.stage(id).await?.stack {
        Some(name) => ledger.clone().scoped(StackScope { name, class: None }),
        None => ledger.clone(),
    };
    match ledger.backend() {
        Backend::Postgres if restart => Err(UsageError(format!(
            "--restart runs [stack] restart after this command writes the live profile, but on a \
             PostgreSQL ledger the stack's daemon writes it on its host: revert without --restart, \
             and restart the stack once `orchestrator stage show {id}` says it is reverted. \
             Nothing was recorded."
        ))
        .into()),
        Backend::Postgres => request_for_daemon(&ledger, id, by, reason).await,
        Backend::Sqlite => revert_and_write(config, &ledger, id, by, reason, restart).await,
    }
}

/// The stage, checked revertible under the write lock: approved, its
/// profile written, not reverted yet, and of `here`'s stack when given
/// (the config of the host that writes the file).
async fn revertible(tx: &mut WriteTx, here: Option<&Config>, id: StageId) -> anyhow::Result<Stage> {
    let stage = tx.stage(id).await?;
    if stage.state != StageState::Approved || !stage.is_applied() {
        return Err(UsageError(format!(
            "stage {id} is {}{}: only an approved stage whose profile was written to the live \
             profile can be reverted. Nothing was written.",
            stage.state,
            if stage.state == StageState::Approved {
                " but its profile was never written"
            } else {
                ""
            }
        ))
        .into());
    }
    if let (Some(stack), Some(config)) = (&stage.stack, here)
        && *stack != config.stack.name
    {
        return Err(UsageError(format!(
            "stage {id} is stack {stack:?}'s, but {} configures stack {:?}: revert it with stack \
             {stack:?}'s config. Nothing was written.",
            config.path.display(),
            config.stack.name
        ))
        .into());
    }
    if let Some(r) = tx.stage_revert(id).await?
        && r.status() != RevertStatus::Refused
    {
        return Err(UsageError(format!(
            "stage {id} is {} already: asked for by {} at {} ({}). Nothing was written.",
            r.status().as_str(),
            r.requested_by,
            r.requested_at,
            r.reason
        ))
        .into());
    }
    Ok(stage)
}

/// Expires this stack's staged wins that the revert leaves without a live
/// base (measured on top of the reverted profile), in `tx`.
async fn expire_built_on_reverted(
    tx: &mut WriteTx,
    stage: &Stage,
    by: &str,
    reason: &str,
    now: chrono::DateTime<Utc>,
) -> anyhow::Result<Vec<StageId>> {
    let why = format!(
        "stage {} was reverted by {by} ({reason}): its stack's live profile is {} again, not this \
         stage's base",
        stage.id,
        stage.base_digest.short()
    );
    Ok(tx
        .expire_stale_stages(&stage.base_digest, &why, now)
        .await?)
}

async fn revert_and_write(
    config: &Config,
    ledger: &Ledger,
    id: StageId,
    by: &str,
    reason: &str,
    restart: bool,
) -> anyhow::Result<()> {
    let live_path = &config.stack.live_profile;
    let to = live_path.display().to_string();
    let mut tx = ledger.begin_write().await?;
    let stage = revertible(&mut tx, Some(config), id).await?;
    let replaced = tx
        .experiment(stage.experiment_id)
        .await?
        .base_profile
        .clone();
    let check = crate::apply::check_revert(&stage, &replaced, live_path)
        .with_context(|| format!("reading the live profile to compare it with stage {id}'s"))?;
    let applied_by = format!(
        "`orchestrator stage revert` on host {}",
        crate::apply::host()
    );
    let now = Utc::now();
    let (restored, changes) = match check {
        RevertCheck::Refuse(why @ RevertRefusal::LiveChanged { .. }) => anyhow::bail!(
            "stage {id} was NOT reverted: {why}. Nothing was written or recorded; put the profile \
             back by hand if that is what you want"
        ),
        RevertCheck::Refuse(why) => {
            anyhow::bail!("stage {id} was NOT reverted: {why}. Nothing was written or recorded")
        }
        RevertCheck::AlreadyBack => (None, Vec::new()),
        RevertCheck::Write { restored, live } => {
            let changes: Vec<String> = live.diff(&restored).iter().map(|c| c.to_string()).collect();
            (Some(restored), changes)
        }
    };
    tx.request_revert(id, by, reason, now).await?;
    tx.settle_revert(id, ApplyOutcome::Applied, &applied_by, &to, now)
        .await?;
    let expired = expire_built_on_reverted(&mut tx, &stage, by, reason, now).await?;
    if let Some(restored) = &restored {
        crate::apply::write(
            live_path,
            restored,
            &format!("`orchestrator stage revert {id}` (by {by}, {now}: {reason})"),
        )
        .with_context(|| format!("writing the live profile {to}"))?;
    }
    tx.commit().await?;
    match &restored {
        Some(_) => {
            println!(
                "stage {id} reverted by {by} ({reason}); {to} now holds the profile it replaced:"
            );
            for change in &changes {
                println!("  {change}");
            }
        }
        None => println!(
            "stage {id} reverted by {by} ({reason}): {to} already held the profile it replaced (an \
             earlier revert was interrupted before it was recorded)"
        ),
    }
    print_expired(&expired);
    let base = crate::profile::Profile::load(live_path)?;
    if restart {
        super::approve::run_restart(config, ledger, id, Restarted::Revert, &base).await
    } else {
        println!(
            "The serving stack reads its profile at start: restart it for this to take effect. \
             Nothing was restarted or signalled."
        );
        for line in crate::apply::restart_lines(config, &base).unwrap_or_default() {
            println!("{line}");
        }
        Ok(())
    }
}

/// A PostgreSQL ledger's revert: recorded, with the wins it leaves without
/// a base expired, in one transaction; the daemon writes the file.
async fn request_for_daemon(
    ledger: &Ledger,
    id: StageId,
    by: &str,
    reason: &str,
) -> anyhow::Result<()> {
    let mut tx = ledger.begin_write().await?;
    // Any machine may ask: the config's own stack need not be the stage's.
    let stage = revertible(&mut tx, None, id).await?;
    let replaced = tx
        .experiment(stage.experiment_id)
        .await?
        .base_profile
        .clone();
    let parsed = crate::profile::Profile::parse(
        &replaced,
        std::path::Path::new(&format!("stage {id} base")),
    );
    if parsed.map(|p| p.digest()).ok() != Some(stage.base_digest.clone()) {
        anyhow::bail!(
            "stage {id}'s replaced profile, as stored, does not match its base digest {}; the \
             ledger may be damaged, nothing was recorded",
            stage.base_digest
        );
    }
    let now = Utc::now();
    tx.request_revert(id, by, reason, now).await?;
    let expired = expire_built_on_reverted(&mut tx, &stage, by, reason, now).await?;
    tx.commit().await?;
    println!(
        "stage {id}'s revert asked for by {by} ({reason}), recorded in the ledger: the daemon of \
         stack {} writes the replaced profile on its host at the start of its next cycle, if its \
         live profile is still the stage's (nothing was written here). `orchestrator stage show \
         {id}` says when it has.",
        stage.stack.as_deref().unwrap_or("(unnamed)")
    );
    print_expired(&expired);
    Ok(())
}

fn print_expired(expired: &[StageId]) {
    if !expired.is_empty() {
        let ids: Vec<String> = expired.iter().map(ToString::to_string).collect();
        println!(
            "Expired {} staged win(s) measured on top of the reverted profile: {}.",
            expired.len(),
            ids.join(", ")
        );
    }
}
