//! A floor-refresh cycle: an A/A of the live profile (a `remeasure`,
//! scheduled when a floor is due or chosen by the proposer), the new noise
//! floor it stores, and the A/A's own verdict.

use serde_json::json;

use super::experiment::Origin;
use super::outcome::{Done, Judged, Tried};
use super::{CycleRunner, Stop, ab_stop};
use crate::clock::Clock;
use crate::judge::Floor;
use crate::judge::{self, Policy, Step};
use crate::ledger::{CycleId, ExperimentId, Interval, NewVerdict, ProposalId};
use crate::measure::ab::NoiseOutcome;
use crate::measure::ab::RecordedRun;
use crate::measure::by_protocol::StackScorer;
use crate::measure::scorer::Scorer;
use crate::menu::MenuId;
use crate::profile::ProfileFile;
use crate::progress::phase;
use crate::vocab::{Scheduled, VerdictKind};

/// A floor measured by a cycle: its A/A experiment, that A/A's recorded
/// verdict, and the floor to judge with, if it may be used.
pub(super) struct Refreshed {
    pub experiment_id: ExperimentId,
    pub verdict: NewVerdict,
    pub runs: Vec<RecordedRun>,
    /// The measured floor (clamped below by `min_noise_floor`), stored.
    pub measured: Option<Floor>,
    /// Why no floor may be judged with (failed, too noisy, too wide).
    pub unusable: Option<String>,
    /// The typical contention of the floor's runs: the reference of the
    /// interference rule for an A/B judged against this floor.
    pub contention: Option<f64>,
}

impl Refreshed {
    /// The floor to judge with.
    pub fn usable(&self) -> Option<Floor> {
        self.measured.filter(|_| self.unusable.is_none())
    }
}

impl<P, C: Clock> CycleRunner<'_, P, C> {
    /// An A/A of the cycle's base: a new noise floor, and a verdict on it.
    /// `scheduled` when the orchestrator chose it, not the proposer.
    pub(super) async fn remeasure(
        &mut self,
        id: CycleId,
        proposal_id: Option<ProposalId>,
        scheduled: Option<Scheduled>,
        base: &ProfileFile,
        scorer: &StackScorer,
    ) -> Result<Done, Stop> {
        let mut tried = Tried::experiment(scheduled, MenuId::Remeasure, json!({}));
        let f = match self
            .refresh_floor(id, proposal_id, base, scorer, |e| {
                tried.experiment_id = Some(e);
            })
            .await
        {
            Ok(f) => f,
            // The A/A's `failed` verdict is recorded already.
            Err(stop) => {
                return Err(stop.during(&Tried {
                    recorded: true,
                    ..tried
                }));
            }
        };
        let floor = f.measured.map(Floor::get);
        Ok(Done::new(
            tried,
            Judged::recorded(f.experiment_id, &f.verdict, floor, &f.runs),
        ))
    }

    /// Measures and stores a noise floor in an A/A experiment of cycle `id`
    /// (a `remeasure`), and records that A/A's own verdict. `created` is
    /// told the experiment as soon as it exists. A measurement cut short
    /// records the A/A `failed` before the stop goes on.
    pub(super) async fn refresh_floor(
        &self,
        id: CycleId,
        proposal_id: Option<ProposalId>,
        base: &ProfileFile,
        scorer: &StackScorer,
        created: impl FnOnce(ExperimentId),
    ) -> Result<Refreshed, Stop> {
        let digest = base.profile.digest();
        let experiment_id = self
            .ledger
            .insert_experiment(&self.new_experiment(
                id,
                Origin::FloorRefresh { proposal_id },
                scorer.method(),
                &base.profile,
                &base.profile,
            ))
            .await?;
        created(experiment_id);
        let (mut gate, runner) = self.measuring(scorer).await?;
        self.progress.phase(phase::MEASURE_FLOOR, scorer.label());
        tracing::debug!(experiment = %experiment_id, "phase measure");
        let result = runner
            .measure_noise_floor(experiment_id, base, &mut gate, self.policy)
            .await;
        tracing::debug!(experiment = %experiment_id, "phase judge");
        let report = match result.map_err(ab_stop) {
            Ok(report) => report,
            Err(stop) => {
                let why = match &stop {
                    Stop::Ledger(_) => None,
                    Stop::Aborted(why, _) => Some(format!("aborted: {why}")),
                    Stop::Failed(why, _) => Some(why.clone()),
                    Stop::Deferred(_, d, _) => Some(format!("deferred: {}", d.reason)),
                };
                if let Some(why) = why {
                    let v = NewVerdict::refusal(VerdictKind::Failed, &why, self.clock.now());
                    self.ledger.insert_verdict(experiment_id, &v).await?;
                }
                return Err(stop);
            }
        };
        let now = self.clock.now();
        let row = report.to_new_noise_floor(
            &super::floor::key(&self.config.stack.name, scorer.method()),
            &digest,
            now,
            Some(experiment_id),
        );
        let runs = report.runs;
        let (floor, pairs) = match report.outcome {
            NoiseOutcome::Measured { floor, pairs } => (floor, pairs),
            NoiseOutcome::Failed { reason } => {
                let v = NewVerdict::refusal(VerdictKind::Failed, &reason, now);
                self.ledger.insert_verdict(experiment_id, &v).await?;
                // A run of the live profile broke: as loud as a failed A/B
                // run, though the cycle goes on (an A/B waiting for this
                // floor ends undecided, naming this experiment).
                tracing::error!(
                    experiment = %experiment_id,
                    verdict = VerdictKind::Failed.as_str(),
                    "the noise floor could not be measured: {reason}"
                );
                return Ok(Refreshed {
                    experiment_id,
                    verdict: v,
                    runs,
                    measured: None,
                    unusable: Some(reason),
                    contention: None,
                });
            }
            NoiseOutcome::TooNoisy { reason, pairs } => {
                // No floor to judge with; the verdict still says what the
                // runs showed, against a floor from all of them.
                // Its scale is for the record only, so it may come from
                // fewer pairs than a floor needs (a bound of one discarded
                // block stops after two).
                let ratios: Vec<f64> = pairs.iter().map(|(a, b)| (b / a).ln()).collect();
                let scale = judge::noise::qn(&ratios).max(self.policy.min_floor.get());
                let v = match judge::Floor::try_from(scale.min(0.999)) {
                    Ok(f) => aa_verdict(&pairs, f, &self.policy, now, Some(&reason)),
                    Err(_) => NewVerdict::refusal(VerdictKind::Failed, &reason, now),
                };
                self.ledger.insert_verdict(experiment_id, &v).await?;
                return Ok(Refreshed {
                    experiment_id,
                    verdict: v,
                    runs,
                    measured: None,
                    unusable: Some(reason),
                    contention: None,
                });
            }
        };
        if let Some(row) = &row {
            self.ledger.insert_noise_floor(row).await?;
        }
        // Kept in the ledger (the report shows it), but too wide to judge
        // anything with: `CurrentFloor` calls it stale, so the next cycle
        // measures again.
        let too_wide = self
            .policy
            .max_floor
            .filter(|max| floor.value > *max)
            .map(|max| {
                format!(
                    "machine too noisy to decide: noise floor {} > [measure] max_noise_floor {max}; nothing is measured against it. Stop the competing work, or raise max_noise_floor",
                    floor.value
                )
            });
        // The A/A's own verdict: what the sequential test says of identical
        // profiles under the new floor (normally within_noise).
        let v = aa_verdict(&pairs, floor.value, &self.policy, now, too_wide.as_deref());
        self.ledger.insert_verdict(experiment_id, &v).await?;
        Ok(Refreshed {
            experiment_id,
            verdict: v,
            runs,
            measured: Some(floor.value),
            unusable: too_wide,
            contention: row.as_ref().and_then(|r| r.contention),
        })
    }
}

/// The verdict of an A/A's pairs under `floor`: never a direction. Both
/// arms ran the same profile, so a `win` or `loss` could only be noise
/// mistaken for an effect, and it would exclude that value on this live
/// profile for good. What an A/A yields is its floor: `within_noise` with
/// the A/A's interval for the record, or, with `too_noisy`, `inconclusive`
/// with that reason.
fn aa_verdict(
    pairs: &[(f64, f64)],
    floor: judge::Floor,
    policy: &Policy,
    now: chrono::DateTime<chrono::Utc>,
    too_noisy: Option<&str>,
) -> NewVerdict {
    let mut test = judge::SequentialTest::new(*policy, floor);
    let mut decided = None;
    for &(b, c) in pairs {
        match test.push(b, c) {
            Ok(Step::Decided(d)) => {
                decided = Some(d);
                break;
            }
            Ok(_) => {}
            Err(e) => return NewVerdict::refusal(VerdictKind::Failed, &e.to_string(), now),
        }
    }
    // Where the pairs stand: the decision's (over every block when the
    // machine was too noisy), else the accepted blocks so far.
    let stood = match decided {
        Some(d) => {
            (d.pairs > 0).then_some((d.estimate.log_ratio, d.reported, d.pairs, d.too_noisy))
        }
        None => test
            .estimate()
            .zip(test.reported())
            .map(|(e, r)| (e.log_ratio, r, test.pairs(), None)),
    };
    let Some((effect, reported, pairs, noisy)) = stood else {
        return NewVerdict::refusal(VerdictKind::Failed, "too few A/A blocks to judge", now);
    };
    let (kind, reason) = match (too_noisy, noisy) {
        (Some(why), _) => (VerdictKind::Inconclusive, Some(why.to_string())),
        (None, Some(n)) => (
            VerdictKind::Inconclusive,
            Some(crate::measure::ab::too_noisy_reason(&n)),
        ),
        (None, None) => (
            VerdictKind::WithinNoise,
            Some(
                "an A/A of the live profile: it measures the noise floor and has no direction; \
                 its interval is for the record"
                    .to_string(),
            ),
        ),
    };
    NewVerdict {
        kind,
        decided_at: now,
        effect: Some(effect),
        interval: Some(Interval {
            low: reported.0,
            high: reported.1,
        }),
        noise_floor: Some(floor.get()),
        floor_is_bound: false,
        pairs: u32::try_from(pairs).unwrap_or(u32::MAX),
        method: Some(judge::sequential::METHOD.to_string()),
        reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Pairs whose candidate arm ran 13% slower every time, as a burst
    /// that covered one arm of every pair would make them: the sequential
    /// test calls that a loss, the A/A may not.
    #[test]
    fn an_aa_is_never_a_win_or_a_loss() {
        let policy = Policy::default();
        let floor = judge::Floor::try_from(0.02).unwrap();
        let now = chrono::Utc::now();
        for factor in [1.13, 1.0 / 1.13] {
            let pairs: Vec<(f64, f64)> = (0..8)
                .map(|i| {
                    let b = 1.0 + 0.001 * f64::from(i % 3);
                    (b, b * factor)
                })
                .collect();
            let step = judge::decide(&pairs, floor, &policy).unwrap();
            assert!(
                matches!(step, Step::Decided(d) if d.kind != VerdictKind::WithinNoise),
                "premise: the test alone would take a direction: {step:?}"
            );
            let v = aa_verdict(&pairs, floor, &policy, now, None);
            assert_eq!(v.kind, VerdictKind::WithinNoise, "{v:?}");
            assert!(v.interval.is_some() && v.effect.is_some());
            let noisy = aa_verdict(&pairs, floor, &policy, now, Some("too noisy"));
            assert_eq!(noisy.kind, VerdictKind::Inconclusive);
        }
    }
}
