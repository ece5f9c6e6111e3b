//! An approved stage becomes its stack's live profile: the checks that must
//! hold first (its stored profile matches its digest, the live profile is
//! still the stage's base, its pin list exists), the atomic write, and the
//! command line that restarts the stack with it ([`restart`]): the
//! orchestrator restarts nothing.
//!
//! Who applies depends on the ledger: on SQLite `stage approve` does, in
//! the approval's own transaction (the CLI runs on the stack's host); on a
//! shared PostgreSQL ledger an approval may come from any machine, so the
//! stack's own daemon applies it when it next sees it.

pub mod restart;

use std::path::{Path, PathBuf};

use crate::ledger::Stage;
use crate::profile::{Profile, ProfileError};
use crate::vocab::Digest;

pub use restart::restart_lines;

/// What the live profile says about applying a stage.
#[derive(Debug)]
pub enum Check {
    /// The live profile is the stage's base: write the candidate over it.
    Write { candidate: Profile, live: Profile },
    /// The live profile already is the candidate: an earlier apply wrote
    /// it and stopped before recording that it did.
    AlreadyLive,
    /// The file must not be written, because of this.
    Refuse(Refusal),
}

/// Why an approved stage's profile is not written to the live profile.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The stored profile does not parse, or not to its digest.
    #[error("its stored profile {0}; the ledger may be damaged")]
    Damaged(String),
    /// Its evidence was measured against another profile than the live one.
    #[error("the live profile changed (now {}, was {} when measured)", .now.short(), .base.short())]
    LiveMoved { now: Digest, base: Digest },
    /// The candidate names a pin list that is not on this host.
    #[error(
        "its pin list {} is missing (it is written next to the live profile when planned)",
        .0.display()
    )]
    PinsMissing(PathBuf),
}

/// Checks `stage` against the live profile at `live_path`. An unreadable
/// live profile is an error, not a refusal: nothing about the stage is
/// settled by it, and the caller may try again.
pub fn check(stage: &Stage, live_path: &Path) -> Result<Check, ProfileError> {
    let candidate = match Profile::parse(
        &stage.candidate_profile,
        Path::new(&format!("stage {}", stage.id)),
    ) {
        Ok(p) => p,
        Err(e) => {
            return Ok(Check::Refuse(Refusal::Damaged(format!(
                "does not parse ({e})"
            ))));
        }
    };
    if candidate.digest() != stage.candidate_digest {
        return Ok(Check::Refuse(Refusal::Damaged(format!(
            "does not match its recorded digest {}",
            stage.candidate_digest
        ))));
    }
    let live = Profile::load(live_path)?;
    let now = live.digest();
    if now == stage.candidate_digest {
        return Ok(Check::AlreadyLive);
    }
    if now != stage.base_digest {
        return Ok(Check::Refuse(Refusal::LiveMoved {
            now,
            base: stage.base_digest.clone(),
        }));
    }
    if let Some(pins) = candidate.pins_path(live_path)
        && !pins.exists()
    {
        return Ok(Check::Refuse(Refusal::PinsMissing(pins)));
    }
    Ok(Check::Write { candidate, live })
}

/// Writes `candidate` as the live profile at `live_path`, atomically (temp
/// file, fsync, rename), headed by a comment naming what wrote it.
pub fn write(live_path: &Path, candidate: &Profile, written_by: &str) -> std::io::Result<()> {
    let text = format!(
        "# live profile written by {written_by}\n{}",
        candidate.canonical()
    );
    crate::atomic_file::write(live_path, text.as_bytes())
}

/// This machine's name, as `applied_by` records it.
pub fn host() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "an unknown host".into())
}
