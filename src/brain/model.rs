//! The model proposer: asks the served model, validates the answer with
//! [`Menu::validate`](crate::menu::Menu::validate), refuses duplicates and
//! what the planner would not measure, and asks again (showing our own
//! refusal messages, with a planner-refused value left out of the schema)
//! up to `max_attempts`.
//! Transient HTTP failures are retried inside the same budget after an
//! exponential backoff with full jitter.

use std::time::Duration;

use rand::Rng;
use rand::rngs::StdRng;

use super::bandit::BanditProposer;
use super::client::ChatClient;
use super::error::BrainError;
use super::fallback::{Fallback, no_win_in_a_row};
use super::{
    Attempt, Decision, DuplicateCheck, Outcome, Proposer, Situation, duplicate_of, planner_screen,
    prompt, proposal_value,
};
use crate::ledger::ExperimentOutcome;
use crate::menu::Rejection;
use crate::vocab::ProposerKind;

/// Exponential backoff with "full jitter": before retry `k` (0-based) sleep
/// a uniform time in `[0, min(cap, base * 2^k)]` (M. Brooker, "Exponential
/// Backoff And Jitter", AWS Architecture Blog, 2015): spreading retries
/// evenly avoids many clients hammering a restarting server in lockstep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    pub base: Duration,
    pub cap: Duration,
}

impl Default for Backoff {
    fn default() -> Backoff {
        Backoff {
            base: Duration::from_millis(500),
            cap: Duration::from_secs(10),
        }
    }
}

impl Backoff {
    /// The ceiling of retry `k`: `min(cap, base * 2^k)`.
    pub fn ceiling(&self, retry: u32) -> Duration {
        let factor = 2u32.saturating_pow(retry.min(31));
        self.base.saturating_mul(factor).min(self.cap)
    }

    /// The pause before retry `k`, drawn from `rng`.
    pub fn delay(&self, retry: u32, rng: &mut impl Rng) -> Duration {
        self.ceiling(retry).mul_f64(rng.random::<f64>())
    }
}

/// Asks the served model through a [`ChatClient`].
#[derive(Debug)]
pub struct ModelProposer<R = StdRng> {
    client: ChatClient,
    max_attempts: u32,
    backoff: Backoff,
    /// Only draws backoff jitter; injected so tests are deterministic.
    rng: R,
    fallback: Option<Fallback<R>>,
}

impl<R: Rng + Send> ModelProposer<R> {
    /// `max_attempts` (at least 1) counts every request of a cycle: refused
    /// answers and transient failures alike.
    pub fn new(client: ChatClient, max_attempts: u32, backoff: Backoff, rng: R) -> Self {
        ModelProposer {
            client,
            max_attempts: max_attempts.max(1),
            backoff,
            rng,
            fallback: None,
        }
    }

    /// Hands one cycle to `bandit` after `after_rejected` (at least 1)
    /// cycles in a row in which every answer was refused (`[model]
    /// bandit_fallback_after`), or after `after_no_win` of the model's own
    /// experiments in a row decided no win (`[model] bandit_after_no_win`;
    /// 0: never). That cycle is recorded as the bandit's, with a note saying
    /// why; the model chooses again after it ([`Fallback`]).
    pub fn with_fallback(
        mut self,
        bandit: BanditProposer<R>,
        after_rejected: u32,
        after_no_win: u32,
    ) -> Self {
        self.fallback = Some(Fallback::new(bandit, after_rejected, after_no_win));
        self
    }

    async fn run<D: DuplicateCheck + Sync>(
        &mut self,
        s: &Situation<'_>,
        duplicates: &D,
    ) -> (Vec<Attempt>, Decision) {
        // What the planner refuses in this cycle leaves the menu for the
        // next request: its schema, its validator and its prompt.
        let mut menu = s.menu.clone();
        let mut attempts = Vec::new();
        let mut refusals: Vec<Rejection> = Vec::new();
        let mut retries = 0u32;
        for number in 1..=self.max_attempts {
            // Every value this cycle's refusals left out: nothing to ask
            // for, and the cycle ends with the answers refused so far.
            if !menu.offers_anything() {
                tracing::info!(
                    attempt = number,
                    "nothing is left on the menu after this cycle's refusals; the model is not asked again"
                );
                break;
            }
            let situation = Situation { menu: &menu, ..*s };
            let schema = menu.json_schema();
            let messages = prompt::messages(&situation, &refusals);
            let raw = match self.client.complete(&messages, &schema).await {
                Ok(raw) => raw,
                Err(e) if e.is_transient() && number < self.max_attempts => {
                    let pause = self.backoff.delay(retries, &mut self.rng);
                    retries += 1;
                    tracing::warn!(
                        attempt = number,
                        error = %e,
                        pause_ms = pause.as_millis() as u64,
                        "the served model failed; retrying after a pause"
                    );
                    tokio::time::sleep(pause).await;
                    continue;
                }
                Err(mut e) => {
                    // A body that is no chat completion is the model
                    // server's words: kept as the raw answer and only there;
                    // the error describes it.
                    if let BrainError::NotChatCompletion {
                        bytes,
                        content_type,
                        why,
                        body,
                        ..
                    } = &mut e
                    {
                        attempts.push(Attempt {
                            number,
                            prompt: Some(prompt::render(&messages)),
                            raw_answer: Some(std::mem::take(body)),
                            parsed: None,
                            rejection: Some(Rejection::NotChatCompletion {
                                description: format!(
                                    "{bytes}-byte {content_type} body, not a chat completion: {why}"
                                ),
                            }),
                        });
                    }
                    return (attempts, Decision::Failed(e));
                }
            };
            let prompt = Some(prompt::render(&messages));
            let refusal = match menu.validate(&raw) {
                Err(rejection) => {
                    attempts.push(Attempt {
                        number,
                        prompt,
                        raw_answer: Some(raw),
                        parsed: None,
                        rejection: Some(rejection.clone()),
                    });
                    rejection
                }
                Ok(proposal) => match duplicate_of(duplicates, &proposal).await {
                    Err(source) => {
                        return (
                            attempts,
                            Decision::Failed(BrainError::DuplicateCheck { source }),
                        );
                    }
                    Ok(None)
                        if let Some((refusal, out)) = planner_screen(duplicates, &proposal) =>
                    {
                        attempts.push(Attempt {
                            number,
                            prompt,
                            raw_answer: Some(raw),
                            parsed: Some(proposal_value(&proposal)),
                            rejection: Some(refusal.clone()),
                        });
                        menu = menu.excluding(out);
                        refusal
                    }
                    Ok(None) => {
                        attempts.push(Attempt {
                            number,
                            prompt,
                            raw_answer: Some(raw),
                            parsed: Some(proposal_value(&proposal)),
                            rejection: None,
                        });
                        tracing::info!(
                            attempt = number,
                            experiment = %proposal.experiment,
                            params = %proposal.params_json(),
                            "the served model chose"
                        );
                        return (attempts, Decision::Chosen(proposal));
                    }
                    Ok(Some(duplicate)) => {
                        attempts.push(Attempt {
                            number,
                            prompt,
                            raw_answer: Some(raw),
                            parsed: Some(proposal_value(&proposal)),
                            rejection: Some(duplicate.clone()),
                        });
                        duplicate
                    }
                },
            };
            // Our own message (it never echoes the model's strings).
            tracing::warn!(
                attempt = number,
                kind = refusal.kind(),
                reason = %refusal,
                "the served model's answer was refused"
            );
            refusals.push(refusal);
        }
        (attempts, Decision::Rejected)
    }
}

impl<R: Rng + Send> Proposer for ModelProposer<R> {
    /// The bandit's when its fallback cycle is due: the cycle is opened
    /// (and recorded) under the proposer that will choose in it.
    fn kind(&self) -> ProposerKind {
        match &self.fallback {
            Some(f) if f.due().is_some() => ProposerKind::Bandit,
            _ => ProposerKind::Model,
        }
    }

    fn prepare(&mut self, history: &[ExperimentOutcome]) {
        if let Some(f) = &mut self.fallback {
            f.no_win_in_a_row = no_win_in_a_row(history);
        }
    }

    async fn propose<D: DuplicateCheck + Sync>(
        &mut self,
        situation: &Situation<'_>,
        duplicates: &D,
    ) -> Outcome {
        if let Some((f, why)) = self
            .fallback
            .as_mut()
            .and_then(|f| f.due().map(|why| (f, why)))
        {
            let note = format!("fallback to the bandit: {why}; the model chooses again next cycle");
            tracing::warn!("{note}");
            f.taken();
            let mut outcome = f.bandit.propose(situation, duplicates).await;
            outcome.note = Some(note);
            return outcome;
        }
        let (attempts, decision) = self.run(situation, duplicates).await;
        if let Some(f) = &mut self.fallback {
            match decision {
                Decision::Rejected => f.rejected_in_a_row += 1,
                Decision::Chosen(_) => f.rejected_in_a_row = 0,
                // Unreachable or too slow: says nothing of its answers.
                Decision::Failed(_) => {}
            }
        }
        Outcome {
            proposer: ProposerKind::Model,
            attempts,
            decision,
            note: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn backoff_grows_to_its_cap_and_jitters_below_the_ceiling() {
        let b = Backoff {
            base: Duration::from_millis(100),
            cap: Duration::from_millis(700),
        };
        let ceilings: Vec<u128> = (0..5).map(|k| b.ceiling(k).as_millis()).collect();
        assert_eq!(ceilings, [100, 200, 400, 700, 700]);
        assert_eq!(b.ceiling(u32::MAX), Duration::from_millis(700));
        let mut rng = StdRng::seed_from_u64(7);
        let delays: Vec<Duration> = (0..200).map(|_| b.delay(3, &mut rng)).collect();
        assert!(delays.iter().all(|d| *d <= Duration::from_millis(700)));
        // Jitter: not all the same.
        assert!(delays.iter().any(|d| *d != delays[0]));
        let mut again = StdRng::seed_from_u64(7);
        assert_eq!(
            b.delay(3, &mut again),
            delays[0],
            "deterministic for a seed"
        );
    }
}
