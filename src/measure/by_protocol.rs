//! Which scorer measures an experiment, by protocol: the bench command, the
//! live surface (for an A/A of the live stack) or a shadow instance (a
//! candidate measured through the serving surface). One enum so the A/B
//! runner stays generic; it lives with the scorers it chooses among.

use crate::config::Config;
use crate::measure::bench::BenchScorer;
use crate::measure::gate;
use crate::measure::realization::LiveBesideShadow;
use crate::measure::scorer::{RunFailure, RunOutcome, Scorer};
use crate::measure::shadow::ShadowScorer;
use crate::measure::surface::SurfaceScorer;
use crate::process::cancel::Cancel;
use crate::profile::ProfileFile;
use crate::vocab::Method;

/// The scorers a config provides.
#[derive(Debug, Clone)]
pub struct Scorers {
    pub bench: Option<BenchScorer>,
    pub surface: Option<SurfaceScorer>,
    pub shadow: Option<ShadowScorer>,
}

/// One chosen scorer.
#[derive(Debug, Clone)]
pub enum StackScorer {
    Bench(BenchScorer),
    /// The live server as it is (an A/A of the live profile).
    Live(SurfaceScorer),
    Shadow(ShadowScorer),
    /// The live server for the live profile, a shadow for the one an
    /// applied stage replaced: what the stage realized.
    Realization(LiveBesideShadow),
}

impl Scorers {
    pub fn from_config(config: &Config) -> Scorers {
        Scorers {
            bench: BenchScorer::from_config(config),
            surface: SurfaceScorer::from_config(config),
            shadow: ShadowScorer::from_config(config),
        }
    }

    /// The scorer for an A/B with a candidate profile: the bench when the
    /// menu says bench (or when no shadow can be started), else a shadow.
    pub fn for_candidate(&self, method: Method) -> Option<StackScorer> {
        let bench = self.bench.clone().map(StackScorer::Bench);
        let shadow = self
            .shadow
            .as_ref()
            .map(|s| StackScorer::Shadow(s.for_one_ab()));
        match method {
            Method::Bench => bench.or(shadow),
            Method::Surface => shadow.or(bench),
        }
    }

    /// The scorer of a realization A/B (the live server, running the
    /// profile `live`, against a shadow of the replaced one), or why this
    /// stack has none.
    pub fn for_realization(&self, live: crate::vocab::Digest) -> Result<StackScorer, &'static str> {
        match (&self.surface, &self.shadow) {
            (Some(surface), Some(shadow)) => Ok(StackScorer::Realization(LiveBesideShadow::new(
                surface.clone(),
                shadow,
                live,
            ))),
            (None, _) => Err(
                "the config has no [stack.surface]: the live server cannot be measured, so what an \
                 approval realized there is not measured",
            ),
            (Some(_), None) => Err(
                "the config has no [stack.shadow]: no shadow of the replaced profile can run beside \
                 the live server, so what an approval realized there is not measured",
            ),
        }
    }

    /// The scorer for an A/A of the live profile under `method`'s protocol:
    /// the live server for `surface`, the bench command for `bench`.
    pub fn for_live(&self, method: Method) -> Option<StackScorer> {
        let bench = self.bench.clone().map(StackScorer::Bench);
        let live = self.surface.clone().map(StackScorer::Live);
        match method {
            Method::Bench => bench.or(live),
            Method::Surface => live.or(bench),
        }
    }
}

impl StackScorer {
    /// The prompt set the hash gate pins a reference for.
    pub fn prompt_set(&self, config: &Config) -> String {
        match self {
            StackScorer::Bench(_) => config
                .stack
                .bench
                .as_ref()
                .map(gate::bench_prompt_set)
                .unwrap_or_default(),
            StackScorer::Live(_) | StackScorer::Shadow(_) | StackScorer::Realization(_) => config
                .stack
                .surface
                .as_ref()
                .map(gate::surface_prompt_set)
                .unwrap_or_default(),
        }
    }

    /// A short label for logs and the ledger's verdict method.
    pub fn label(&self) -> &'static str {
        match self {
            StackScorer::Bench(_) => "bench",
            StackScorer::Live(_) => "live surface",
            StackScorer::Shadow(_) => "shadow surface",
            StackScorer::Realization(_) => "live surface beside a shadow",
        }
    }
}

impl Scorer for StackScorer {
    fn method(&self) -> Method {
        match self {
            StackScorer::Bench(s) => s.method(),
            StackScorer::Live(s) => s.method(),
            StackScorer::Shadow(s) => s.method(),
            StackScorer::Realization(s) => s.method(),
        }
    }

    async fn score(
        &self,
        profile: &ProfileFile,
        cancel: &Cancel,
    ) -> Result<RunOutcome, RunFailure> {
        match self {
            StackScorer::Bench(s) => s.score(profile, cancel).await,
            StackScorer::Live(s) => s.score(profile, cancel).await,
            StackScorer::Shadow(s) => s.score(profile, cancel).await,
            StackScorer::Realization(s) => s.score(profile, cancel).await,
        }
    }

    async fn score_within(
        &self,
        profile: &ProfileFile,
        cancel: &Cancel,
        deadline: std::time::Duration,
    ) -> Result<RunOutcome, RunFailure> {
        match self {
            StackScorer::Bench(s) => s.score_within(profile, cancel, deadline).await,
            StackScorer::Live(s) => s.score_within(profile, cancel, deadline).await,
            StackScorer::Shadow(s) => s.score_within(profile, cancel, deadline).await,
            StackScorer::Realization(s) => s.score_within(profile, cancel, deadline).await,
        }
    }

    fn sends_to_live_server(&self) -> bool {
        match self {
            StackScorer::Bench(s) => s.sends_to_live_server(),
            StackScorer::Live(s) => s.sends_to_live_server(),
            StackScorer::Shadow(s) => s.sends_to_live_server(),
            StackScorer::Realization(s) => s.sends_to_live_server(),
        }
    }

    async fn finish(&self) {
        match self {
            StackScorer::Bench(s) => s.finish().await,
            StackScorer::Live(s) => s.finish().await,
            StackScorer::Shadow(s) => s.finish().await,
            StackScorer::Realization(s) => s.finish().await,
        }
    }
}
