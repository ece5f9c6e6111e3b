//! `orchestrator stage restarted ID`: the operator says they restarted the
//! stack on an applied stage's profile by hand (without `--restart`). A
//! live server that reports the profile it runs needs no word of it; one
//! that does not (no `[stack.surface] health_profile_sha256`) leaves the
//! daemon no way to tell when it runs the stage's profile, so the stage is
//! measured realized only after a restart recorded here or by `--restart`.
//! Nothing is written or restarted: the restart is recorded on the stage.

use chrono::Utc;

use crate::commands::UsageError;
use crate::config::Config;
use crate::ledger::{Backend, Ledger, Restarted, RevertStatus, StageId};
use crate::profile::Profile;
use crate::vocab::StageState;

pub(super) async fn restarted(config: &Config, ledger: &Ledger, id: StageId) -> anyhow::Result<()> {
    let stage = ledger.stage(id).await?;
    if stage.state != StageState::Approved || !stage.is_applied() {
        return Err(UsageError(format!(
            "stage {id} is {}{}: only a stage whose profile was written to the live profile can \
             have been restarted on. Nothing was recorded.",
            stage.state,
            if stage.state == StageState::Approved {
                " but its profile was not written yet"
            } else {
                ""
            }
        ))
        .into());
    }
    if let Some(r) = ledger.stage_revert(id).await?
        && r.status() != RevertStatus::Refused
    {
        return Err(UsageError(format!(
            "stage {id} is {} ({} by {}): its profile is no longer the one to run. Nothing was \
             recorded.",
            r.status().as_str(),
            r.requested_at.format("%Y-%m-%d %H:%M UTC"),
            r.requested_by
        ))
        .into());
    }
    // On SQLite this host wrote the live profile: it must still be the stage's.
    if ledger.backend() == Backend::Sqlite {
        let live = &config.stack.live_profile;
        let digest = Profile::load(live).map(|p| p.digest());
        if digest.as_ref().ok() != Some(&stage.candidate_digest) {
            let what = match digest {
                Ok(d) => format!("profile {}", d.short()),
                Err(e) => format!("unreadable ({e})"),
            };
            return Err(UsageError(format!(
                "the live profile {} is {what}, not stage {id}'s {}: something changed it since \
                 the stage was applied. Nothing was recorded.",
                live.display(),
                stage.candidate_digest.short()
            ))
            .into());
        }
    }
    ledger
        .record_restart(id, Restarted::Approval, Utc::now())
        .await?;
    println!(
        "Recorded that the stack was restarted on stage {id}'s profile {}: the daemon's next \
         cycles measure what it realized (`orchestrator stage show {id}`).",
        stage.candidate_digest.short()
    );
    Ok(())
}
