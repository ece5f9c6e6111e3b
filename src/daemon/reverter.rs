//! The daemon's half of `stage revert` on a shared PostgreSQL ledger: the
//! CLI (on any machine) records the request, and the stage's own stack's
//! daemon, at start and before each cycle observes (right after it applies
//! approvals), writes the replaced profile back to its live profile with
//! the checks the CLI makes on SQLite (`crate::apply::check_revert`), or
//! records why not. Settled before the write, committed after, as an
//! apply. It never restarts the stack: it logs the command line that would.

use anyhow::Context;
use chrono::Utc;

use crate::apply::{self, RevertCheck};
use crate::config::Config;
use crate::ledger::{ApplyOutcome, Ledger, StageId};

/// Writes back the replaced profile of each revert asked for on this
/// daemon's stack (its handle is scoped to it), oldest request first.
pub async fn revert_requested(config: &Config, ledger: &Ledger) {
    let waiting = match ledger.reverts_to_apply().await {
        Ok(w) => w,
        Err(e) => {
            tracing::error!(
                "cannot list the reverts to write ({e}); trying again at the next cycle"
            );
            return;
        }
    };
    for revert in waiting {
        if let Err(e) = revert_one(config, ledger, revert.stage_id).await {
            tracing::error!(
                stage = %revert.stage_id,
                "the revert of stage {} was not written: {e:#}; trying again at the next cycle",
                revert.stage_id
            );
        }
    }
}

async fn revert_one(config: &Config, ledger: &Ledger, id: StageId) -> anyhow::Result<()> {
    let live_path = &config.stack.live_profile;
    let to = live_path.display().to_string();
    let by = format!(
        "the daemon of stack {} on host {} (pid {})",
        config.stack.name,
        apply::host(),
        std::process::id()
    );
    let mut tx = ledger.begin_write().await?;
    let Some(revert) = tx.stage_revert(id).await? else {
        return Ok(());
    };
    let stage = tx.stage(id).await?;
    let replaced = tx
        .experiment(stage.experiment_id)
        .await?
        .base_profile
        .clone();
    let now = Utc::now();
    let check = apply::check_revert(&stage, &replaced, live_path)
        .with_context(|| format!("reading the live profile {to} to compare it with the stage's"))?;
    let asked = format!("asked for by {} ({})", revert.requested_by, revert.reason);
    match check {
        RevertCheck::Refuse(why) => {
            let why = why.to_string();
            if tx
                .settle_revert(id, ApplyOutcome::Refused(&why), &by, &to, now)
                .await?
            {
                tx.commit().await?;
                tracing::warn!(stage = %id, "the revert of stage {id} ({asked}) was NOT written to {to}: {why}");
            }
        }
        RevertCheck::AlreadyBack => {
            if tx
                .settle_revert(id, ApplyOutcome::Applied, &by, &to, now)
                .await?
            {
                tx.commit().await?;
                tracing::info!(stage = %id, "revert of stage {id}: {to} already holds the replaced profile; recorded as reverted");
            }
        }
        RevertCheck::Write { restored, live } => {
            if !tx
                .settle_revert(id, ApplyOutcome::Applied, &by, &to, now)
                .await?
            {
                return Ok(());
            }
            let written_by = format!(
                "the daemon of stack {} reverting stage {id} ({asked}, {now})",
                config.stack.name
            );
            apply::write(live_path, &restored, &written_by)
                .with_context(|| format!("writing the live profile {to}"))?;
            tx.commit().await?;
            let changes: Vec<String> = live.diff(&restored).iter().map(|c| c.to_string()).collect();
            tracing::info!(
                stage = %id,
                "reverted stage {id} ({asked}) in {to}: {}. The serving stack reads its profile at \
                 start: restart it for this to take effect. Nothing was restarted or signalled.",
                changes.join(", ")
            );
            for line in apply::restart_lines(config, &restored).unwrap_or_default() {
                tracing::info!(stage = %id, "{line}");
            }
        }
    }
    Ok(())
}
