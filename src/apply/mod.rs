//! An approved stage becomes its stack's live profile: the checks that must
//! hold first (its stored profile matches its digest, the live profile is
//! still the stage's base, its pin list exists), the atomic write, and the
//! command line that restarts the stack with it ([`restart`]): the
//! orchestrator restarts nothing. [`running`] asks the live server which
//! profile it runs, where the stack says.
//!
//! Who applies depends on the ledger: on SQLite `stage approve` does, in
//! the approval's own transaction (the CLI runs on the stack's host); on a
//! shared PostgreSQL ledger an approval may come from any machine, so the
//! stack's own daemon applies it when it next sees it.

pub mod restart;
pub mod revert;
pub mod running;

use std::path::{Path, PathBuf};

use crate::ledger::Stage;
use crate::profile::{Profile, ProfileError};
use crate::vocab::Digest;

pub use restart::{restart, restart_command, restart_lines};
pub use revert::{RevertCheck, RevertRefusal, check_revert};

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::{ExperimentId, Interval, StageId};
    use crate::vocab::StageState;

    const BASE: &str = "[memory]\nbudget_gb = 1.0\ntrunk_gb = 0.25\ncache_gb = 0.5\n";

    fn profile(text: &str) -> Profile {
        Profile::parse(text, Path::new("test")).unwrap()
    }

    /// An approved stage of `candidate` over `BASE`.
    fn stage(candidate: &Profile) -> Stage {
        Stage {
            id: StageId(7),
            experiment_id: ExperimentId(1),
            confirmation_id: ExperimentId(2),
            state: StageState::Approved,
            base_digest: profile(BASE).digest(),
            candidate_digest: candidate.digest(),
            candidate_profile: candidate.canonical(),
            effect: -0.1,
            interval: Interval {
                low: -0.2,
                high: -0.05,
            },
            noise_floor: 0.02,
            created_at: chrono::Utc::now(),
            decided_at: None,
            decided_by: None,
            note: None,
            stack: Some("desk".into()),
            applied_at: None,
            applied_by: None,
            applied_to: None,
            apply_refusal: None,
            apply_refused_at: None,
            confirmed_by_stack: None,
            approved_for_class: None,
            restarted_at: None,
        }
    }

    #[test]
    fn a_stage_is_written_only_over_its_base_and_with_its_pin_list() {
        let dir = tempfile::tempdir().unwrap();
        let live = dir.path().join("live.toml");
        std::fs::write(&live, BASE).unwrap();
        let candidate = profile(&BASE.replace("0.5", "0.75"));
        let s = stage(&candidate);
        assert!(matches!(check(&s, &live), Ok(Check::Write { .. })));

        // The live profile moved on: refused, naming both digests.
        let moved = profile(&BASE.replace("0.5", "0.4"));
        std::fs::write(&live, moved.canonical()).unwrap();
        match check(&s, &live).unwrap() {
            Check::Refuse(r @ Refusal::LiveMoved { .. }) => {
                let why = r.to_string();
                assert!(why.contains(moved.digest().short()), "{why}");
                assert!(why.contains(s.base_digest.short()), "{why}");
            }
            other => panic!("{other:?}"),
        }

        // Written already (an apply that died before recording it).
        write(&live, &candidate, "a test").unwrap();
        assert!(matches!(check(&s, &live), Ok(Check::AlreadyLive)));
        let text = std::fs::read_to_string(&live).unwrap();
        assert!(
            text.starts_with("# live profile written by a test\n"),
            "{text}"
        );

        // A candidate whose pin list is not on this host.
        std::fs::write(&live, BASE).unwrap();
        let pinned = profile(&format!("{BASE}[pins]\nfile = \"pins.txt\"\ncount = 4\n"));
        match check(&stage(&pinned), &live).unwrap() {
            Check::Refuse(Refusal::PinsMissing(p)) => assert_eq!(p, dir.path().join("pins.txt")),
            other => panic!("{other:?}"),
        }
        std::fs::write(dir.path().join("pins.txt"), "K3EXPERTS 1 1 1 1\n").unwrap();
        assert!(matches!(
            check(&stage(&pinned), &live),
            Ok(Check::Write { .. })
        ));
    }

    #[test]
    fn a_damaged_stage_or_an_unreadable_live_profile_is_never_written() {
        let dir = tempfile::tempdir().unwrap();
        let live = dir.path().join("live.toml");
        std::fs::write(&live, BASE).unwrap();
        let candidate = profile(&BASE.replace("0.5", "0.75"));
        let mut s = stage(&candidate);
        s.candidate_digest = profile(BASE).digest();
        assert!(matches!(
            check(&s, &live),
            Ok(Check::Refuse(Refusal::Damaged(_)))
        ));
        s.candidate_profile = "[memory\n".into();
        assert!(matches!(
            check(&s, &live),
            Ok(Check::Refuse(Refusal::Damaged(_)))
        ));
        // Not a refusal: nothing about the stage is settled by a missing file.
        let s = stage(&candidate);
        assert!(check(&s, &dir.path().join("missing.toml")).is_err());
    }
}
