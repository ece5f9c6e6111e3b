//! The proposer the config selects, as one type: the served model or the
//! bandit (the `Proposer` trait has generic methods, so no trait object).

use rand::SeedableRng;
use rand::rngs::StdRng;

use crate::brain::{
    BanditAlgorithm, BanditProposer, BrainError, ChatClient, DuplicateCheck, ModelProposer,
    Outcome, Proposer, Situation,
};
use crate::config::{Config, ProposerChoice};
use crate::vocab::ProposerKind;

pub enum AnyProposer {
    // Boxed: both carry RNG state; the enum stays small.
    Model(Box<ModelProposer<StdRng>>),
    Bandit(Box<BanditProposer<StdRng>>),
}

impl AnyProposer {
    /// Builds the configured proposer; a missing API key variable is an error here.
    pub fn from_config(config: &Config) -> Result<AnyProposer, BrainError> {
        let rng = StdRng::from_os_rng();
        Ok(match config.cycle.proposer {
            ProposerChoice::Model => AnyProposer::Model(Box::new(
                ModelProposer::new(
                    ChatClient::from_config(&config.model)?,
                    config.model.max_attempts,
                    Default::default(),
                    rng,
                )
                .with_fallback(
                    BanditProposer::new(BanditAlgorithm::default(), StdRng::from_os_rng()),
                    config.model.bandit_fallback_after,
                    config.model.bandit_after_no_win,
                ),
            )),
            ProposerChoice::Bandit => AnyProposer::Bandit(Box::new(BanditProposer::new(
                BanditAlgorithm::default(),
                rng,
            ))),
        })
    }
}

impl Proposer for AnyProposer {
    fn kind(&self) -> ProposerKind {
        match self {
            AnyProposer::Model(p) => p.kind(),
            AnyProposer::Bandit(p) => p.kind(),
        }
    }

    fn prepare(&mut self, history: &[crate::ledger::ExperimentOutcome]) {
        match self {
            AnyProposer::Model(p) => p.prepare(history),
            AnyProposer::Bandit(p) => p.prepare(history),
        }
    }

    async fn propose<D: DuplicateCheck + Sync>(
        &mut self,
        situation: &Situation<'_>,
        duplicates: &D,
    ) -> Outcome {
        match self {
            AnyProposer::Model(p) => p.propose(situation, duplicates).await,
            AnyProposer::Bandit(p) => p.propose(situation, duplicates).await,
        }
    }
}
