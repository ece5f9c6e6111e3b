//! `orchestrator stage reject ID --reason TEXT`: refuses a staged win, and
//! expires what can never be approved without it (the composites that
//! apply it, the wins measured on top of it).

use chrono::Utc;

use super::UsageError;
use crate::ledger::{Ledger, StageDecision, StageId};

pub(super) async fn reject(
    ledger: &Ledger,
    id: StageId,
    by: &str,
    reason: &str,
) -> anyhow::Result<()> {
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
    // A win measured on top of it ([cycle] build_on_staged) can never be
    // approved now: its base will not be live.
    let why = format!("it was measured on top of stage {id}, rejected by {by}: {reason}");
    let on_top = tx.expire_built_on(id, &why, now).await?;
    tx.commit().await?;
    println!("stage {id} rejected by {by}: {reason}");
    let list = |ids: &[StageId]| {
        ids.iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    };
    if !composites.is_empty() {
        println!(
            "Expired the composite stage(s) that apply it: {}.",
            list(&composites)
        );
    }
    if !on_top.is_empty() {
        println!(
            "Expired the stage(s) measured on top of it: {}.",
            list(&on_top)
        );
    }
    Ok(())
}
