//! A noise floor carried over a stage.
//!
//! A floor describes the runs of the profile it was measured on, the
//! cycle's base, so a stage, whose profile becomes the base once it is
//! approved (or while it waits for approval, when a cycle builds on it,
//! `cycle/base.rs`), leaves it stale, and the next A/B there the bound
//! cannot decide measured `2 × floor_pairs + 2` runs of the new profile
//! (42 by default). But the stage's own A/B and its confirmation already
//! ran the new profile, twice in every block, and were judged by that
//! floor: each block's two runs of the new profile are an A/A pair of it
//! ([`crate::judge::noise::of_arm_gaps`]). So where both were judged by the
//! latest floor, measured on the profile the stage replaces, that floor
//! carries over to the new profile as the larger of itself and what those
//! A/A pairs say: never lower than either, so a new profile noisier than
//! the old one gets the wider floor, and one no noisier keeps the floor it
//! was judged by. Every other rule (age, the machine's pressure and
//! contention, `max_noise_floor`) applies to it as to the floor it
//! carries. Nothing is written: the floor is carried each time it is read,
//! from the rows that justify it, and a verdict judged by it records the
//! value it used.

use crate::clock::Clock;
use crate::judge::{interval::arm_gaps, noise};
use crate::ledger::{ExperimentId, LedgerError, NoiseFloor, Run, Stage};
use crate::vocab::{Arm, Digest, Method, StageState};

use super::CycleRunner;

/// What a carried floor rests on.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Carried {
    /// The carried floor: the larger of the two below.
    pub value: f64,
    /// What the new profile's own A/A pairs in the stage's A/Bs say.
    pub own: f64,
    /// How many of them.
    pub gaps: usize,
    pub stage: crate::ledger::StageId,
}

impl Carried {
    /// The estimator, cited, as the floor's row records it.
    pub(super) fn method(&self, floor: &NoiseFloor) -> String {
        format!(
            "{} carried over stage #{}: the larger of it and {:.2}% from {} A/A pairs of the new \
             profile in the stage's A/B and confirmation",
            floor.method,
            self.stage,
            100.0 * self.own.exp_m1(),
            self.gaps
        )
    }
}

impl<P, C: Clock> CycleRunner<'_, P, C> {
    /// The floor `latest` (of protocol `method`) carried over to `live` (the
    /// cycle's base), when `live` is the profile of a stage from the profile
    /// `latest` was measured on, applied or waiting for approval, whose A/B
    /// and confirmation, both of `method`, were both judged by `latest` (not
    /// by the bound).
    pub(super) async fn carry_floor(
        &self,
        method: Method,
        latest: &NoiseFloor,
        live: &Digest,
    ) -> Result<Option<Carried>, LedgerError> {
        let Some(stage) = self.stage_onto(live, &latest.profile_digest).await? else {
            return Ok(None);
        };
        // The value a verdict judged by `latest` records: after the clamp.
        let used = latest.value.max(self.policy.min_floor.get());
        let mut gaps = Vec::new();
        for id in [stage.experiment_id, stage.confirmation_id] {
            match self.judged_by(id, method, used, &stage).await? {
                Some(g) => gaps.extend(g),
                None => return Ok(None),
            }
        }
        let Some(own) = noise::of_arm_gaps(&gaps) else {
            return Ok(None);
        };
        Ok(Some(Carried {
            value: latest.value.max(own),
            own,
            gaps: gaps.len(),
            stage: stage.id,
        }))
    }

    /// The stage from `from` to `profile`: applied and live, or staged and
    /// waiting for approval (a cycle builds on it then, `cycle/base.rs`).
    async fn stage_onto(
        &self,
        profile: &Digest,
        from: &Digest,
    ) -> Result<Option<Stage>, LedgerError> {
        if let Some(stage) = self.ledger.live_stage(profile).await?
            && &stage.base_digest == from
        {
            return Ok(Some(stage));
        }
        for waiting in self.ledger.stages(Some(StageState::Staged)).await? {
            if &waiting.base_digest != from {
                continue;
            }
            let stage = self.ledger.stage(waiting.id).await?;
            if &stage.candidate_digest == profile {
                return Ok(Some(stage));
            }
        }
        Ok(None)
    }

    /// The candidate arm's gaps in experiment `id`'s accepted blocks, when
    /// it compared `stage`'s profiles under `method` and its verdict was
    /// judged by a measured floor of value `used`.
    async fn judged_by(
        &self,
        id: ExperimentId,
        method: Method,
        used: f64,
        stage: &Stage,
    ) -> Result<Option<Vec<f64>>, LedgerError> {
        let experiment = self.ledger.experiment(id).await?;
        if experiment.method != method
            || experiment.base_digest != stage.base_digest
            || experiment.candidate_digest != stage.candidate_digest
        {
            return Ok(None);
        }
        let Some(verdict) = self.ledger.verdict(id).await? else {
            return Ok(None);
        };
        let by_it = !verdict.floor_is_bound
            && verdict
                .noise_floor
                .is_some_and(|f| (f - used).abs() <= 1e-12 * used.max(1.0));
        if !by_it {
            return Ok(None);
        }
        Ok(Some(candidate_gaps(&self.ledger.runs(id).await?)))
    }
}

/// The candidate arm's log gap in each whole accepted ABBA block of `runs`
/// (pairs `2k` and `2k + 1`; warmups, refused runs and discarded blocks
/// left out).
fn candidate_gaps(runs: &[Run]) -> Vec<f64> {
    use std::collections::BTreeMap;
    let mut pairs: BTreeMap<u32, (Option<f64>, Option<f64>)> = BTreeMap::new();
    for r in runs.iter().filter(|r| !r.refused && !r.discarded) {
        let (Some(pair), Some(spt)) = (r.pair_index, r.seconds_per_token) else {
            continue;
        };
        let slot = pairs.entry(pair).or_default();
        match r.arm {
            Arm::Baseline => slot.0 = Some(spt),
            Arm::Candidate => slot.1 = Some(spt),
            Arm::Warmup => {}
        }
    }
    let whole = |p: u32| match pairs.get(&p) {
        Some(&(Some(b), Some(c))) => Some((b, c)),
        _ => None,
    };
    pairs
        .keys()
        .filter(|p| *p % 2 == 0)
        .filter_map(|&p| Some(arm_gaps(whole(p)?, whole(p + 1)?).1))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::{NewRun, RunId, RunPressure, TokenParts};

    fn run(arm: Arm, pair: Option<u32>, spt: f64, discarded: bool) -> Run {
        Run {
            id: RunId(1),
            recorded: NewRun {
                experiment_id: ExperimentId(1),
                arm,
                order_index: 0,
                pair_index: pair,
                started_at: chrono::Utc::now(),
                seconds_per_token: Some(spt),
                timing_source: None,
                tokens: Some(32),
                output_hash: None,
                exit_code: Some(0),
                duration_s: 1.0,
                stderr_tail: String::new(),
                refused: false,
                error: None,
                parts: TokenParts::default(),
                pressure: RunPressure::default(),
            },
            discarded,
        }
    }

    #[test]
    fn a_blocks_candidate_gap_is_an_aa_pair_of_the_new_profile() {
        use Arm::{Baseline as B, Candidate as C};
        let runs = vec![
            // Warmups: no pair.
            run(B, None, 9.0, false),
            run(C, None, 9.0, false),
            // Block 0 (pairs 0 and 1): candidate 2.0 then 2.2.
            run(B, Some(0), 4.0, false),
            run(C, Some(0), 2.0, false),
            run(C, Some(1), 2.2, false),
            run(B, Some(1), 4.1, false),
            // Block 1, discarded whole: left out.
            run(B, Some(2), 4.0, true),
            run(C, Some(2), 1.0, true),
            run(C, Some(3), 3.0, true),
            run(B, Some(3), 4.0, true),
            // Block 2: candidate 2.1 then 2.0.
            run(C, Some(4), 2.1, false),
            run(B, Some(4), 4.0, false),
            run(B, Some(5), 4.0, false),
            run(C, Some(5), 2.0, false),
            // Half a block (cancelled): left out.
            run(B, Some(6), 4.0, false),
            run(C, Some(6), 2.0, false),
        ];
        let gaps = candidate_gaps(&runs);
        assert_eq!(gaps.len(), 2, "{gaps:?}");
        assert!((gaps[0] - (2.0f64 / 2.2).ln()).abs() < 1e-12);
        assert!((gaps[1] - (2.1f64 / 2.0).ln()).abs() < 1e-12);
    }
}
