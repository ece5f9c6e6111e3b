//! The daemon's half of approval from anywhere: on a shared PostgreSQL
//! ledger `stage approve` only records the approval (it may run on any
//! machine), and the stack's own daemon, at start and at the start of
//! every cycle before it observes, writes each approved stage of its stack
//! to its live profile with the checks `stage approve` makes on SQLite
//! (`crate::apply`), or records why it did not. It never restarts the
//! stack: it logs the command line that would.
//!
//! A stage approved for its class (`stage approve --class`) is applied the
//! same way by every other daemon of that class, each to its own live
//! profile and recorded per host (`stage_applies`): written when that
//! profile is the stage's base, else refused with the reason.
//!
//! A failed attempt (the live profile unreadable, the ledger unreachable)
//! is logged and left unsettled, so the next cycle tries again; only the
//! cycle itself stops the daemon on a ledger that cannot be written.

use anyhow::Context;
use chrono::Utc;

use crate::apply::{self, Check};
use crate::config::Config;
use crate::ledger::{ApplyOutcome, Ledger, LedgerError, Stage, StageApply, StageId, WriteTx};

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
    let for_class = match ledger.class_stages_to_apply().await {
        Ok(w) => w,
        Err(e) => {
            tracing::error!(
                "cannot list the stages approved for this stack's class ({e}); trying again at the next cycle"
            );
            Vec::new()
        }
    };
    let waiting = waiting
        .into_iter()
        .map(|s| (s, Whose::Own))
        .chain(for_class.into_iter().map(|s| (s, Whose::Class)));
    for (stage, whose) in waiting {
        if let Err(e) = apply_one(config, ledger, stage.id, whose).await {
            tracing::error!(
                stage = %stage.id,
                "approved stage {} was not applied: {e:#}; trying again at the next cycle",
                stage.id
            );
        }
    }
}

/// Whose apply a stage is: this stack's own stage's (the stages columns),
/// or one approved for this stack's class (its row in `stage_applies`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Whose {
    Own,
    Class,
}

/// Settles the apply as `whose` says; `false` when it was settled already.
async fn settle(
    tx: &mut WriteTx,
    whose: Whose,
    id: StageId,
    outcome: ApplyOutcome<'_>,
    by: &str,
    to: &str,
    now: chrono::DateTime<Utc>,
) -> Result<bool, LedgerError> {
    match whose {
        Whose::Own => tx.settle_apply(id, outcome, by, to, now).await,
        Whose::Class => tx.settle_class_apply(id, outcome, by, to, now).await,
    }
}

async fn apply_one(
    config: &Config,
    ledger: &Ledger,
    id: StageId,
    whose: Whose,
) -> anyhow::Result<()> {
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
    if whose == Whose::Own && stage.apply() != StageApply::Waiting {
        return Ok(());
    }
    let now = Utc::now();
    let check = apply::check(&stage, live_path).with_context(|| {
        format!("reading the live profile {to} to compare it with the stage's base")
    })?;
    match check {
        Check::Refuse(why) => {
            let why = why.to_string();
            if settle(
                &mut tx,
                whose,
                id,
                ApplyOutcome::Refused(&why),
                &by,
                &to,
                now,
            )
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
            if settle(&mut tx, whose, id, ApplyOutcome::Applied, &by, &to, now).await? {
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
            if !settle(&mut tx, whose, id, ApplyOutcome::Applied, &by, &to, now).await? {
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

/// Who approved it, and for which class when for one.
fn approver(stage: &Stage) -> String {
    let by = stage.decided_by.as_deref().unwrap_or("nobody recorded");
    match &stage.approved_for_class {
        Some(class) => format!("{by}, for class {class}"),
        None => by.to_string(),
    }
}
