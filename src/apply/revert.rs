//! A revert puts back the profile an applied stage replaced (its
//! experiment's base profile): the checks that must hold first (the stored
//! profile matches the stage's base digest, the live profile is still the
//! stage's own, the restored profile's pin list exists). The write itself
//! is [`super::write`], atomic like an apply's.

use std::path::{Path, PathBuf};

use crate::ledger::Stage;
use crate::profile::{Profile, ProfileError};
use crate::vocab::Digest;

/// What the live profile says about reverting a stage.
#[derive(Debug)]
pub enum RevertCheck {
    /// The live profile is the stage's: write `restored` over it.
    Write { restored: Profile, live: Profile },
    /// The live profile already is the replaced one: an earlier revert
    /// wrote it and stopped before recording that it did.
    AlreadyBack,
    /// The file must not be written, because of this.
    Refuse(RevertRefusal),
}

/// Why a stage's replaced profile is not written back.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RevertRefusal {
    /// Its stored base profile does not parse, or not to its digest.
    #[error("its replaced profile, as stored, {0}; the ledger may be damaged")]
    Damaged(String),
    /// Something else changed the live profile since the stage's was written.
    #[error(
        "the live profile changed since the stage's profile was written (now {}, the stage's is {}): \
         something else wrote it since, so reverting would undo that too",
        .now.short(), .applied.short()
    )]
    LiveChanged { now: Digest, applied: Digest },
    /// The replaced profile names a pin list that is no longer on this host.
    #[error(
        "its replaced profile's pin list {} is missing, so the stack could not start on it",
        .0.display()
    )]
    PinsMissing(PathBuf),
}

/// The profile `stage` replaced, from `stored` (its experiment's base
/// profile as stored), checked to parse to the stage's base digest: what a
/// revert writes back, and what a realization's shadow runs.
pub fn replaced_profile(stage: &Stage, stored: &str) -> Result<Profile, RevertRefusal> {
    let restored = Profile::parse(stored, Path::new(&format!("stage {} base", stage.id)))
        .map_err(|e| RevertRefusal::Damaged(format!("does not parse ({e})")))?;
    if restored.digest() != stage.base_digest {
        return Err(RevertRefusal::Damaged(format!(
            "does not match the stage's base digest {}",
            stage.base_digest
        )));
    }
    Ok(restored)
}

/// Checks reverting `stage` to `replaced` (its experiment's base profile,
/// as stored) against the live profile at `live_path`. An unreadable live
/// profile is an error, not a refusal: the caller may try again.
pub fn check_revert(
    stage: &Stage,
    replaced: &str,
    live_path: &Path,
) -> Result<RevertCheck, ProfileError> {
    let restored = match replaced_profile(stage, replaced) {
        Ok(p) => p,
        Err(refusal) => return Ok(RevertCheck::Refuse(refusal)),
    };
    let live = Profile::load(live_path)?;
    let now = live.digest();
    if now == stage.base_digest {
        return Ok(RevertCheck::AlreadyBack);
    }
    if now != stage.candidate_digest {
        return Ok(RevertCheck::Refuse(RevertRefusal::LiveChanged {
            now,
            applied: stage.candidate_digest.clone(),
        }));
    }
    if let Some(pins) = restored.pins_path(live_path)
        && !pins.exists()
    {
        return Ok(RevertCheck::Refuse(RevertRefusal::PinsMissing(pins)));
    }
    Ok(RevertCheck::Write { restored, live })
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

    /// An applied stage of `candidate` over `BASE`.
    fn stage(candidate: &Profile) -> Stage {
        let now = chrono::Utc::now();
        Stage {
            id: StageId(3),
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
            created_at: now,
            decided_at: Some(now),
            decided_by: Some("ann".into()),
            note: None,
            stack: Some("desk".into()),
            applied_at: Some(now),
            applied_by: Some("a test".into()),
            applied_to: Some("live.toml".into()),
            apply_refusal: None,
            apply_refused_at: None,
            confirmed_by_stack: None,
            approved_for_class: None,
            restarted_at: None,
        }
    }

    #[test]
    fn a_revert_is_written_only_over_the_stages_own_profile() {
        let dir = tempfile::tempdir().unwrap();
        let live = dir.path().join("live.toml");
        let candidate = profile(&BASE.replace("0.5", "0.75"));
        let s = stage(&candidate);
        super::super::write(&live, &candidate, "stage approve 3").unwrap();
        match check_revert(&s, BASE, &live).unwrap() {
            RevertCheck::Write { restored, live } => {
                assert_eq!(restored.digest(), s.base_digest);
                assert_eq!(live.digest(), s.candidate_digest);
            }
            other => panic!("{other:?}"),
        }

        // Something else wrote the live profile since: refused, naming both.
        let other = profile(&BASE.replace("0.5", "0.4"));
        std::fs::write(&live, other.canonical()).unwrap();
        match check_revert(&s, BASE, &live).unwrap() {
            RevertCheck::Refuse(r @ RevertRefusal::LiveChanged { .. }) => {
                let why = r.to_string();
                assert!(why.contains(other.digest().short()), "{why}");
                assert!(why.contains(s.candidate_digest.short()), "{why}");
            }
            other => panic!("{other:?}"),
        }

        // Back already (a revert that died before recording it).
        std::fs::write(&live, BASE).unwrap();
        assert!(matches!(
            check_revert(&s, BASE, &live),
            Ok(RevertCheck::AlreadyBack)
        ));
    }

    #[test]
    fn a_damaged_base_or_a_missing_pin_list_is_never_written_back() {
        let dir = tempfile::tempdir().unwrap();
        let live = dir.path().join("live.toml");
        let candidate = profile(&BASE.replace("0.5", "0.75"));
        std::fs::write(&live, candidate.canonical()).unwrap();
        let s = stage(&candidate);
        // Stored text that is not the stage's base.
        assert!(matches!(
            check_revert(&s, &BASE.replace("1.0", "2.0"), &live),
            Ok(RevertCheck::Refuse(RevertRefusal::Damaged(_)))
        ));
        assert!(matches!(
            check_revert(&s, "[memory\n", &live),
            Ok(RevertCheck::Refuse(RevertRefusal::Damaged(_)))
        ));
        // A base with a pin list that is gone.
        let pinned = format!("{BASE}[pins]\nfile = \"pins.txt\"\ncount = 4\n");
        let mut s = stage(&candidate);
        s.base_digest = profile(&pinned).digest();
        match check_revert(&s, &pinned, &live).unwrap() {
            RevertCheck::Refuse(RevertRefusal::PinsMissing(p)) => {
                assert_eq!(p, dir.path().join("pins.txt"));
            }
            other => panic!("{other:?}"),
        }
        // An unreadable live profile settles nothing.
        assert!(check_revert(&s, &pinned, &dir.path().join("missing.toml")).is_err());
    }
}
