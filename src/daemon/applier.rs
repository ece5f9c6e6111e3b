//! The daemon's half of approval from anywhere: on a shared PostgreSQL
//! ledger `stage approve` only records the approval (it may run on any
//! machine), and the stack's own daemon, at start and at the start of
//! every cycle before it observes, writes each approved stage of its stack
//! to its live profile with the checks `stage approve` makes on SQLite
//! (`crate::apply`), or records why it did not. It never restarts the
//! stack: it logs the command line that would.
//!
//! A failed attempt (the live profile unreadable, the ledger unreachable)
//! is logged and left unsettled, so the next cycle tries again; only the
//! cycle itself stops the daemon on a ledger that cannot be written.

use anyhow::Context;
use chrono::Utc;

use crate::apply::{self, Check};
use crate::config::Config;
use crate::ledger::{ApplyOutcome, Ledger, Stage, StageApply, StageId};

/// Applies the approved, unsettled stages of this daemon's stack (its
/// ledger handle is scoped to it), oldest approval first.
pub async fn apply_approved(config: &Config, ledger: &Ledger) {
    let waiting = match ledger.stages_to_apply().await {
        Ok(w) => w,
        Err(e) => {
            tracing::error!(
                "cannot list the approved stages to apply ({e}); trying again at the next cycle"
            );
            return;
        }
    };
    for stage in waiting {
        if let Err(e) = apply_one(config, ledger, stage.id).await {
            tracing::error!(
                stage = %stage.id,
                "approved stage {} was not applied: {e:#}; trying again at the next cycle",
                stage.id
            );
        }
    }
}

async fn apply_one(config: &Config, ledger: &Ledger, id: StageId) -> anyhow::Result<()> {
    let live_path = &config.stack.live_profile;
    let to = live_path.display().to_string();
    let by = format!(
        "the daemon of stack {} on host {} (pid {})",
        config.stack.name,
        apply::host(),
        std::process::id()
    );
    // Held across the file write, as `stage approve` holds its own.
    let mut tx = ledger.begin_write().await?;
    let stage = tx.stage(id).await?;
    if stage.apply() != StageApply::Waiting {
        return Ok(());
    }
    let now = Utc::now();
    let check = apply::check(&stage, live_path).with_context(|| {
        format!("reading the live profile {to} to compare it with the stage's base")
    })?;
    match check {
        Check::Refuse(why) => {
            let why = why.to_string();
            if tx
                .settle_apply(id, ApplyOutcome::Refused(&why), &by, &to, now)
                .await?
            {
                tx.commit().await?;
                tracing::warn!(
                    stage = %id,
                    "approved stage {id} (by {}) NOT applied to {to}: {why}. Nothing was written; \
                     the loop tests the idea again against the current profile",
                    approver(&stage)
                );
            }
        }
        Check::AlreadyLive => {
            if tx
                .settle_apply(id, ApplyOutcome::Applied, &by, &to, now)
                .await?
            {
                tx.commit().await?;
                tracing::info!(
                    stage = %id,
                    "approved stage {id}: {to} already holds its profile (an earlier apply was \
                     interrupted before it was recorded); recorded as applied"
                );
            }
        }
        Check::Write { candidate, live } => {
            // Settled before the write: a daemon that finds it settled
            // writes nothing.
            if !tx
                .settle_apply(id, ApplyOutcome::Applied, &by, &to, now)
                .await?
            {
                return Ok(());
            }
            let written_by = format!(
                "the daemon of stack {} for stage {id} (approved by {}, applied {now})",
                config.stack.name,
                approver(&stage)
            );
            // A failed write drops the transaction: the apply stays unsettled.
            apply::write(live_path, &candidate, &written_by)
                .with_context(|| format!("writing the live profile {to}"))?;
            tx.commit().await?;
            let changes: Vec<String> = live
                .diff(&candidate)
                .iter()
                .map(|c| c.to_string())
                .collect();
            tracing::info!(
                stage = %id,
                "applied approved stage {id} (by {}) to {to}: {}. The serving stack reads its \
                 profile at start: restart it for this to take effect. Nothing was restarted or signalled.",
                approver(&stage),
                changes.join(", ")
            );
            for line in apply::restart_lines(config, &candidate).unwrap_or_default() {
                tracing::info!(stage = %id, "{line}");
            }
        }
    }
    Ok(())
}

fn approver(stage: &Stage) -> &str {
    stage.decided_by.as_deref().unwrap_or("nobody recorded")
}
