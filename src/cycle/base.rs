//! The profile a cycle builds on (`[cycle] build_on_staged`): the live
//! profile, or, while exactly one confirmed win waits for approval on it,
//! that win's candidate, and so on along a chain of single waiting wins.
//!
//! Why: an approval takes the operator's time, while the loop goes on. What
//! it measured on the profile an approval replaces expires with it (its
//! base is no longer live), so those cycles were spent for nothing; the
//! shoot-out (#16) saw 20 of the first 40 engine seconds go that way. Built
//! on the waiting win, the next win's base is that win's candidate: it
//! stays staged while that win waits, becomes an ordinary staged win once
//! it is approved, and expires if it is rejected (`ledger::stale_stages`).
//! `stage approve` refuses a win whose base still waits, naming it.
//!
//! Two or more wins waiting on one profile stop the walk there: their
//! composition is due on that profile (`composition`).
//!
//! Only where the bench measures every protocol: the live server serves the
//! live profile alone, so an A/A of another profile must be a bench run. And
//! not for a stack with a `[stack] class`: its classmates confirm its wins
//! on their own live profiles.

use super::{CycleRunner, profiles_dir};
use crate::brain::Proposer;
use crate::clock::Clock;
use crate::ledger::{LedgerError, StageId};
use crate::measure::by_protocol::StackScorer;
use crate::menu::MenuId;
use crate::profile::{Profile, ProfileFile};
use crate::vocab::{Digest, Method, StageState};

/// How many waiting wins a chain follows (a win staged on the last makes one
/// more): a person approving once a day still finds a short list, and a
/// runaway chain cannot form.
const MAX_CHAIN: usize = 4;

impl<P: Proposer, C: Clock> CycleRunner<'_, P, C> {
    /// The profile this cycle's experiments are measured against: `live`,
    /// or the candidate of the waiting win it builds on, with that win.
    pub(super) async fn working_base(
        &self,
        live: ProfileFile,
    ) -> Result<(ProfileFile, Option<StageId>), LedgerError> {
        if !self.config.cycle.build_on_staged
            || self.config.stack.class.is_some()
            || !self.bench_measures_everything()
        {
            return Ok((live, None));
        }
        let staged = self.ledger.stages(Some(StageState::Staged)).await?;
        let mut visited = vec![live.profile.digest()];
        let mut base = live;
        let mut built_on = None;
        for _ in 0..MAX_CHAIN {
            let digest = base.profile.digest();
            let mut on_base = staged.iter().filter(|s| s.base_digest == digest);
            let (Some(only), None) = (on_base.next(), on_base.next()) else {
                break;
            };
            let stage = self.ledger.stage(only.id).await?;
            // A win back to a profile already on the chain (the live one, or
            // one between) would walk in a circle: the chain ends before it.
            if visited.contains(&stage.candidate_digest) {
                break;
            }
            visited.push(stage.candidate_digest.clone());
            match self.staged_profile(&stage.candidate_digest, &stage.candidate_profile) {
                Ok(next) => {
                    // Every cycle while it waits: the cycle line says it too.
                    tracing::debug!(
                        stage = %stage.id,
                        "building on the staged win that waits for approval (profile {})",
                        stage.candidate_digest.short()
                    );
                    base = next;
                    built_on = Some(stage.id);
                }
                Err(why) => {
                    tracing::warn!(stage = %stage.id, "not building on the staged win: {why}");
                    break;
                }
            }
        }
        Ok((base, built_on))
    }

    /// Every A/B of the menu, and the floors that judge them, run the bench
    /// (a proposed `remeasure` on such a base is a bench A/A too, see
    /// [`CycleRunner::floor_scorer`]).
    fn bench_measures_everything(&self) -> bool {
        let bench = |s: Option<StackScorer>| matches!(s, Some(StackScorer::Bench(_)));
        let methods = self.candidate_methods();
        !methods.is_empty()
            && methods.iter().all(|&m| bench(self.scorers.for_live(m)))
            && self
                .menu
                .entries()
                .iter()
                .filter(|e| e.id != MenuId::Remeasure)
                .all(|e| bench(self.scorers.for_candidate(e.method)))
    }

    /// The scorer of a proposed `remeasure` (an A/A of the cycle's base)
    /// under `method`: the menu's, except on a waiting win's candidate,
    /// which the live server does not serve: there it is the bench.
    pub(super) fn floor_scorer(
        &self,
        method: Method,
        built_on_staged: bool,
    ) -> Option<StackScorer> {
        if built_on_staged {
            return self.scorers.for_live(Method::Bench);
        }
        self.scorers.for_live(method)
    }

    /// The staged candidate as a file next to the live profile, where its
    /// own A/B wrote it (the planner names candidates by digest; written
    /// again when it is gone), so the bench runs it and its relative paths
    /// mean the same.
    ///
    /// Refused when its pin list is gone: every A/B on it would fail, and
    /// approving it would be refused for the same reason (`apply`).
    fn staged_profile(&self, digest: &Digest, text: &str) -> Result<ProfileFile, String> {
        let path = profiles_dir(&self.config.stack.live_profile).join(format!("{digest}.toml"));
        let pins_missing = |profile: &Profile| {
            profile
                .pins_path(&path)
                .filter(|pins| !pins.exists())
                .map(|pins| format!("its pin list {} is missing", pins.display()))
        };
        if let Ok(file) = ProfileFile::load(&path)
            && file.profile.digest() == *digest
        {
            return pins_missing(&file.profile).map_or(Ok(file), Err);
        }
        let profile = Profile::parse(text, &path).map_err(|e| e.to_string())?;
        if profile.digest() != *digest {
            return Err(format!(
                "its stored profile does not match its digest {}; the ledger may be damaged",
                digest.short()
            ));
        }
        if let Some(why) = pins_missing(&profile) {
            return Err(why);
        }
        crate::atomic_file::write(&path, profile.canonical().as_bytes())
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        Ok(ProfileFile { path, profile })
    }
}
