//! The realization scorer: what an approved stage realized is the live
//! server, now on the stage's profile, against a shadow of the profile it
//! replaced. One scorer measures both arms of that A/B: the live profile
//! (by digest) on the live server as it is, any other profile in a shadow
//! instance started for it ([`super::shadow`]), so the A/B runner, the
//! hash gate and the judge treat it as every other A/B.

use std::time::Duration;

use super::scorer::{RunFailure, RunOutcome, Scorer};
use super::shadow::ShadowScorer;
use super::surface::SurfaceScorer;
use crate::process::cancel::Cancel;
use crate::profile::ProfileFile;
use crate::vocab::{Digest, Method};

/// The live server for the live profile, a shadow for the other one.
#[derive(Debug, Clone)]
pub struct LiveBesideShadow {
    pub live: SurfaceScorer,
    /// With a pool of its own (one A/B's, see [`ShadowScorer::for_one_ab`]).
    pub shadow: ShadowScorer,
    /// The profile the live server runs (checked before the A/B starts).
    pub live_digest: Digest,
}

impl LiveBesideShadow {
    pub fn new(
        live: SurfaceScorer,
        shadow: &ShadowScorer,
        live_digest: Digest,
    ) -> LiveBesideShadow {
        LiveBesideShadow {
            live,
            shadow: shadow.for_one_ab(),
            live_digest,
        }
    }

    fn is_live(&self, profile: &ProfileFile) -> bool {
        profile.profile.digest() == self.live_digest
    }
}

impl Scorer for LiveBesideShadow {
    fn method(&self) -> Method {
        Method::Surface
    }

    /// Its live arm's requests are the daemon's own, not the users'.
    fn sends_to_live_server(&self) -> bool {
        self.live.sends_to_live_server()
    }

    async fn score(
        &self,
        profile: &ProfileFile,
        cancel: &Cancel,
    ) -> Result<RunOutcome, RunFailure> {
        if self.is_live(profile) {
            self.live.score(profile, cancel).await
        } else {
            self.shadow.score(profile, cancel).await
        }
    }

    async fn score_within(
        &self,
        profile: &ProfileFile,
        cancel: &Cancel,
        deadline: Duration,
    ) -> Result<RunOutcome, RunFailure> {
        if self.is_live(profile) {
            self.live.score_within(profile, cancel, deadline).await
        } else {
            self.shadow.score_within(profile, cancel, deadline).await
        }
    }

    async fn finish(&self) {
        self.shadow.finish().await;
    }
}
