//! The non-model proposer: a multi-armed bandit over the menu, for stacks
//! with no model and as a yardstick for the model's choices. By default it
//! plays the arms a line search along each knob picks on the live profile
//! first ([`BanditAlgorithm::LineSearch`]), and UCB1's once no line has one.
//!
//! An arm is one menu entry with one value for each of its parameters, taken
//! from the parameter's grid ([`grid`]). `remeasure` is not an arm: an A/A
//! cannot win, so it is scheduled instead, whenever the caller says the
//! noise floor is missing or stale, and when every arm has already been
//! decided on the current base profile, in both cases only while the menu
//! offers it (it is withheld while its floor is fresh). The line search
//! plays only the arms worth measuring ([`convergence`]); with none, and
//! no remeasure offered, it has nothing to propose (the daemon waits
//! before asking, `daemon::wait`).
//!
//! Rewards come from the verdicts in the history ([`reward`]): a `win` is 1;
//! `loss`, `within_noise`, `inconclusive` and `hash_mismatch` are 0 (the arm
//! was measured and gave nothing worth staging; a hash mismatch means the
//! setting breaks the engine); `failed` and `rejected` are not counted at
//! all (nothing was measured, so they say nothing about the arm), nor is an
//! experiment still being measured. Every measured experiment counts, whoever
//! proposed it, confirmations included: each is real evidence about its arm.
//!
//! Deterministic given the injected RNG's seed and the inputs.

use std::cmp::Ordering;

use rand::Rng;
use rand::rngs::StdRng;
use rand_distr::{Beta, Distribution};
use serde_json::{Map, Value, json};

use super::convergence;
use super::error::BrainError;
use super::levers::{self, TokenShares};
use super::line_search;
use super::{
    Attempt, Decision, DuplicateCheck, Outcome, Proposer, Situation, duplicate_of, planner_screen,
    proposal_value,
};
use crate::ledger::ExperimentOutcome;
use crate::menu::{Menu, MenuId, ParamKind, ParamValue, Proposal, Rejection};
use crate::vocab::{Digest, ProposerKind, VerdictKind};

/// At most this many grid points per parameter: a wide integer range with
/// step 1 would otherwise give thousands of arms, each needing a cycle.
pub const MAX_GRID_POINTS: usize = 64;

/// The quantiles of a number parameter that has no step.
const QUANTILES: [f64; 5] = [0.0, 0.25, 0.5, 0.75, 1.0];

/// Grid values are rounded to this many decimals, so `0.05 * 7` is `0.35`
/// and matches what a person or the model would write.
const DECIMALS: i32 = 9;

/// Which bandit algorithm chooses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BanditAlgorithm {
    /// A line search along each knob first ([`line_search`]): each cycle the
    /// next value of the entry acting on the largest measured part of the
    /// token, from what was measured on the live profile; UCB1 over the
    /// rest once every line is done.
    #[default]
    LineSearch,
    /// UCB1 (P. Auer, N. Cesa-Bianchi, P. Fischer, "Finite-time Analysis of
    /// the Multiarmed Bandit Problem", Machine Learning 47, 2002): play
    /// every arm once, then the arm maximising `mean + sqrt(2 ln n / n_i)`.
    /// Ties are broken by the RNG.
    Ucb1,
    /// Thompson sampling with Beta(1, 1) priors (W. R. Thompson, Biometrika
    /// 25, 1933; S. Agrawal, N. Goyal, "Analysis of Thompson Sampling for the
    /// Multi-armed Bandit Problem", COLT 2012): draw each arm's win rate from
    /// Beta(1 + wins, 1 + non-wins) and play the largest draw.
    Thompson,
}

impl BanditAlgorithm {
    pub fn as_str(self) -> &'static str {
        match self {
            BanditAlgorithm::LineSearch => "line_search",
            BanditAlgorithm::Ucb1 => "ucb1",
            BanditAlgorithm::Thompson => "thompson",
        }
    }
}

/// The reward of a verdict, or `None` when it does not count as a pull.
pub fn reward(verdict: VerdictKind) -> Option<f64> {
    match verdict {
        VerdictKind::Win => Some(1.0),
        VerdictKind::Loss
        | VerdictKind::WithinNoise
        | VerdictKind::Inconclusive
        | VerdictKind::HashMismatch => Some(0.0),
        VerdictKind::Failed | VerdictKind::Rejected => None,
    }
}

/// The values a parameter's arms take: integers from `min` by `step` (plus
/// `max` when the steps miss it); numbers by `step`, or the quartiles when
/// there is none; every enum value. At most [`MAX_GRID_POINTS`], evenly
/// thinned, ends kept.
pub fn grid(kind: &ParamKind) -> Vec<ParamValue> {
    let points: Vec<ParamValue> = match kind {
        ParamKind::Integer { min, max, step } => {
            let step = (*step).max(1);
            let mut v = Vec::new();
            let mut x = *min;
            while x <= *max {
                v.push(x);
                match x.checked_add(step) {
                    Some(next) => x = next,
                    None => break,
                }
            }
            if v.last() != Some(max) {
                v.push(*max);
            }
            v.into_iter().map(ParamValue::Integer).collect()
        }
        ParamKind::Number { min, max, step } => {
            let mut v: Vec<f64> = match step {
                Some(s) if *s > 0.0 => {
                    // Bounded before the cast: thinning happens below anyway.
                    let n = ((max - min) / s + 1e-9).floor().min(1e6) as u64;
                    (0..=n)
                        .map(|i| round(min + i as f64 * s).min(*max))
                        .collect()
                }
                _ => QUANTILES
                    .iter()
                    .map(|q| round(min + q * (max - min)))
                    .collect(),
            };
            if v.last().is_some_and(|l| *l < *max) {
                v.push(*max);
            }
            v.dedup();
            v.into_iter().map(ParamValue::Number).collect()
        }
        ParamKind::Enum { values } => values.iter().cloned().map(ParamValue::Choice).collect(),
    };
    thin(points)
}

fn round(x: f64) -> f64 {
    let scale = 10f64.powi(DECIMALS);
    (x * scale).round() / scale
}

fn thin<T: Clone>(v: Vec<T>) -> Vec<T> {
    if v.len() <= MAX_GRID_POINTS {
        return v;
    }
    let last = v.len() - 1;
    let mut out: Vec<T> = Vec::with_capacity(MAX_GRID_POINTS);
    let mut prev = None;
    for i in 0..MAX_GRID_POINTS {
        let at = i * last / (MAX_GRID_POINTS - 1);
        if prev != Some(at) {
            out.push(v[at].clone());
            prev = Some(at);
        }
    }
    out
}

/// Every arm of the menu, in menu order then grid order; `remeasure` is not
/// one. Each arm is passed through [`Menu::validate_value`], so the bandit
/// can propose nothing the validator would refuse: a value the menu
/// excludes on the live profile (its own value, one decided or refused on
/// it) is no arm.
pub fn arms(menu: &Menu) -> Vec<Proposal> {
    let mut out = Vec::new();
    for entry in menu.entries().iter().filter(|e| e.id != MenuId::Remeasure) {
        let mut combos: Vec<Map<String, Value>> = vec![Map::new()];
        for p in &entry.params {
            let values = grid(&p.kind);
            combos = combos
                .into_iter()
                .flat_map(|c| {
                    values.iter().map(move |v| {
                        let mut c = c.clone();
                        c.insert(p.name.clone(), json!(v));
                        c
                    })
                })
                .collect();
        }
        for params in combos {
            let answer = json!({"experiment": entry.id, "params": params, "rationale": ""});
            match menu.validate_value(&answer) {
                Ok(p) => out.push(p),
                // The live value, what was decided or refused on the live
                // profile and the sides of a line the search is done with
                // are not arms this cycle.
                Err(Rejection::Excluded { .. } | Rejection::Closed { .. }) => {}
                Err(r) => {
                    debug_assert!(false, "a grid arm of {} failed validation: {r}", entry.id);
                }
            }
        }
    }
    out
}

/// The `remeasure` proposal.
pub fn remeasure() -> Proposal {
    Proposal {
        experiment: MenuId::Remeasure,
        params: Default::default(),
    }
}

/// How often an arm was measured, and how often it won.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct ArmStats {
    pub pulls: u32,
    pub reward: f64,
}

/// Whether a stored experiment is this arm: same id, same parameter names,
/// equal values (numbers within rounding).
pub fn is_arm(arm: &Proposal, e: &ExperimentOutcome) -> bool {
    if arm.experiment != e.menu_id {
        return false;
    }
    let Some(stored) = e.parameters.as_object() else {
        return false;
    };
    stored.len() == arm.params.len()
        && arm.params.iter().all(|(name, v)| {
            stored.get(name).is_some_and(|s| match v {
                ParamValue::Integer(n) => s.as_i64() == Some(*n),
                ParamValue::Number(x) => s
                    .as_f64()
                    .is_some_and(|y| (x - y).abs() <= 1e-9 * x.abs().max(1.0)),
                ParamValue::Choice(c) => s.as_str() == Some(c.as_str()),
            })
        })
}

/// The statistics of every arm from the history.
pub fn stats(arms: &[Proposal], history: &[ExperimentOutcome]) -> Vec<ArmStats> {
    let mut out = vec![ArmStats::default(); arms.len()];
    for e in history {
        let Some(r) = e.verdict.and_then(reward) else {
            continue;
        };
        if let Some(i) = arms.iter().position(|a| is_arm(a, e)) {
            out[i].pulls += 1;
            out[i].reward += r;
        }
    }
    out
}

/// The bandit proposer.
#[derive(Debug)]
pub struct BanditProposer<R = StdRng> {
    algorithm: BanditAlgorithm,
    rng: R,
}

impl<R: Rng + Send> BanditProposer<R> {
    pub fn new(algorithm: BanditAlgorithm, rng: R) -> Self {
        BanditProposer { algorithm, rng }
    }

    pub fn algorithm(&self) -> BanditAlgorithm {
        self.algorithm
    }

    /// Every arm, best first by the algorithm's index; one draw of the RNG
    /// per arm (tie-break key or Thompson sample), so the order is a
    /// function of the seed and the inputs.
    ///
    /// The line search puts each entry's next value on the live profile
    /// first ([`line_search::next_arms`]), the entry with the larger lead
    /// first; every other arm follows in UCB1's order.
    ///
    /// UCB1 plays every arm once before its index means anything; the arms
    /// not yet measured are ordered by [`levers::priority`]: the entry
    /// acting on the largest measured part of the live token first, each
    /// entry's lead shared over its arms already measured (without parts,
    /// entries take turns), then the RNG. Thompson sampling draws every arm
    /// from its record and ignores the parts.
    pub fn ranked(
        &mut self,
        menu: &Menu,
        history: &[ExperimentOutcome],
        live_digest: Option<&Digest>,
        shares: Option<&TokenShares>,
    ) -> Vec<(Proposal, f64)> {
        let arms = arms(menu);
        let stats = stats(&arms, history);
        let total: u32 = stats.iter().map(|s| s.pulls).sum();
        let measured_arms = |id: MenuId| {
            arms.iter()
                .zip(&stats)
                .filter(|(a, s)| a.experiment == id && s.pulls > 0)
                .count() as u32
        };
        // The line search's arms sort before all others (tier 1 over 0),
        // by their entry's lead.
        let mut line_lead: Vec<Option<f64>> = vec![None; arms.len()];
        if self.algorithm == BanditAlgorithm::LineSearch {
            for (i, lead) in line_search::next_arms(&arms, menu, history, live_digest, shares) {
                line_lead[i] = Some(lead);
            }
        }
        let lead: Vec<f64> = arms
            .iter()
            .zip(&stats)
            .map(|(a, s)| match s.pulls {
                0 => levers::priority(shares, a.experiment, measured_arms(a.experiment)),
                _ => 0.0,
            })
            .collect();
        let mut scored: Vec<(Proposal, f64, (f64, f64, f64))> = arms
            .into_iter()
            .zip(&stats)
            .zip(lead)
            .zip(line_lead)
            .map(|(((arm, s), lead), line)| {
                let (score, key) = match (self.algorithm, line) {
                    (BanditAlgorithm::LineSearch, Some(line)) => {
                        (f64::INFINITY, (1.0, line, self.rng.random::<f64>()))
                    }
                    (BanditAlgorithm::LineSearch | BanditAlgorithm::Ucb1, _) => {
                        (ucb1(*s, total), (0.0, lead, self.rng.random::<f64>()))
                    }
                    (BanditAlgorithm::Thompson, _) => {
                        let wins = s.reward;
                        let losses = f64::from(s.pulls) - s.reward;
                        let beta =
                            Beta::new(1.0 + wins, 1.0 + losses).expect("Beta parameters are >= 1");
                        (beta.sample(&mut self.rng), (0.0, 0.0, 0.0))
                    }
                };
                (arm, score, key)
            })
            .collect();
        scored.sort_by(|a, b| {
            b.2.0
                .total_cmp(&a.2.0)
                .then(b.1.partial_cmp(&a.1).unwrap_or(Ordering::Equal))
                .then(b.2.1.total_cmp(&a.2.1))
                .then(b.2.2.total_cmp(&a.2.2))
        });
        scored.into_iter().map(|(p, s, _)| (p, s)).collect()
    }

    async fn choose<D: DuplicateCheck + Sync>(
        &mut self,
        s: &Situation<'_>,
        duplicates: &D,
    ) -> Result<Proposal, BrainError> {
        let remeasure_offered = s.menu.offers(MenuId::Remeasure);
        if s.noise_floor.needs_remeasure() && remeasure_offered {
            tracing::info!(
                algorithm = self.algorithm.as_str(),
                "noise floor missing or stale: the bandit schedules remeasure"
            );
            return Ok(remeasure());
        }
        // The line search plays only what it expects to tell something
        // new (`convergence`): a done line's other values are no arms.
        let worth = (self.algorithm == BanditAlgorithm::LineSearch).then(|| {
            convergence::worth_measuring(s.menu, s.history, s.live_digest, s.token_shares.as_ref())
        });
        for (arm, score) in self.ranked(s.menu, s.history, s.live_digest, s.token_shares.as_ref()) {
            if worth.as_ref().is_some_and(|w| !w.contains(&arm)) {
                continue;
            }
            match duplicate_of(duplicates, &arm).await {
                Err(source) => return Err(BrainError::DuplicateCheck { source }),
                Ok(Some(_)) => continue,
                Ok(None) => {
                    tracing::info!(
                        algorithm = self.algorithm.as_str(),
                        experiment = %arm.experiment,
                        params = %arm.params_json(),
                        score,
                        "the bandit chose"
                    );
                    return Ok(arm);
                }
            }
        }
        if !remeasure_offered {
            return Err(BrainError::NothingWorthMeasuring);
        }
        tracing::info!(
            algorithm = self.algorithm.as_str(),
            "every arm is decided on this base profile: the bandit schedules remeasure"
        );
        Ok(remeasure())
    }
}

/// The most choices the planner may refuse in one cycle before the bandit
/// settles on its next choice unscreened (refused then as before, a cycle
/// `rejected`): a whole line's grid, so one edge walked inwards never
/// reaches it, and a bound on the planning a cycle does.
pub const MAX_SCREENED: usize = MAX_GRID_POINTS;

/// The UCB1 index; an arm never measured comes first.
fn ucb1(s: ArmStats, total: u32) -> f64 {
    if s.pulls == 0 {
        return f64::INFINITY;
    }
    let n = f64::from(s.pulls);
    s.reward / n + (2.0 * f64::from(total).ln() / n).sqrt()
}

impl<R: Rng + Send> Proposer for BanditProposer<R> {
    fn kind(&self) -> ProposerKind {
        ProposerKind::Bandit
    }

    /// Each choice is screened by the planner as the served model's answers
    /// are: a value it would not measure (the stack cannot run it, or it is
    /// predicted to change nothing) is recorded as refused (`not_measured`,
    /// excluded on this base in later cycles too) and the next arm is
    /// chosen in the same cycle. A refusal costs no engine time but, chosen
    /// alone, a whole cycle of wall time: a line search walking inwards
    /// from an edge the stack refuses spent 28 cycles in a row on warm sets
    /// that all held every expert (the shoot-out's landscape B, where
    /// `interval_s = 30` would have made that 14 minutes). At most
    /// [`MAX_SCREENED`] refusals a cycle; every arm refused ends the cycle
    /// `rejected` with each refusal recorded, so the next one finds the
    /// loop converged.
    async fn propose<D: DuplicateCheck + Sync>(
        &mut self,
        situation: &Situation<'_>,
        duplicates: &D,
    ) -> Outcome {
        let mut attempts: Vec<Attempt> = Vec::new();
        let mut narrowed: Option<Menu> = None;
        let decision = loop {
            let s = Situation {
                menu: narrowed.as_ref().unwrap_or(situation.menu),
                ..*situation
            };
            let number = attempts.len() as u32 + 1;
            let p = match self.choose(&s, duplicates).await {
                Ok(p) => p,
                Err(BrainError::NothingWorthMeasuring) if !attempts.is_empty() => {
                    break Decision::Rejected;
                }
                Err(e) => break Decision::Failed(e),
            };
            let screened = (p.experiment != MenuId::Remeasure && attempts.len() < MAX_SCREENED)
                .then(|| planner_screen(duplicates, &p))
                .flatten();
            let (rejection, out) = screened.unzip();
            attempts.push(Attempt {
                number,
                prompt: None,
                raw_answer: None,
                parsed: Some(proposal_value(&p)),
                rejection,
            });
            let Some(out) = out else {
                break Decision::Chosen(p);
            };
            tracing::info!(
                algorithm = self.algorithm.as_str(),
                experiment = %p.experiment,
                params = %p.params_json(),
                "the planner refused the bandit's choice; choosing again in this cycle"
            );
            narrowed = Some(s.menu.clone().excluding(out));
        };
        Outcome {
            proposer: ProposerKind::Bandit,
            attempts,
            decision,
            note: None,
        }
    }
}

#[cfg(test)]
#[path = "bandit_tests.rs"]
mod tests;
