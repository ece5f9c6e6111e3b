//! The run schedules of an A/B and of a noise-floor A/A, as pure state
//! machines: which profile runs next, and what each measured run changes.
//!
//! The daemon's measurer (`measure::ab`) and the replay benchmark
//! (`benches/judge_replay`) drive the same machines, so the replay judges a
//! trace exactly as the daemon would have judged those runs: warmups, the
//! alternating ABBA/BAAB order ([`super::protocol`]), blocks discarded for
//! interference ([`super::interference`]) or discordance and re-run, the sequential test, and the floor.

use super::JudgeError;
use super::interference;
use super::noise::{self, NoiseError, NoiseFloor};
use super::policy::{Floor, Policy};
use super::protocol::{Slot, pair_order};
use super::sequential::{Decision, Discards, SequentialTest, Step, Timed};
use crate::vocab::Arm;

/// What the schedule wants after a run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Next {
    /// Run [`AbSchedule::slot`] next.
    Run,
    /// The block just completed was discarded (its runs are evidence, not
    /// data); run the next slot, which starts a new block.
    Discarded(Discards),
    /// The A/B is over.
    Decided(Decision),
}

/// The order both schedules share: warmups, then pairs in the alternating
/// block order, each pair handed on as `(baseline slot, candidate slot)`.
#[derive(Debug, Clone)]
struct Pairing {
    warmups_per_arm: usize,
    /// Runs recorded so far, warmups included.
    runs: usize,
    /// Pairs run so far, discarded ones included: the run order alternates
    /// in time, whatever happened to the blocks.
    pairs_run: usize,
    half: Option<Timed>,
}

impl Pairing {
    fn new(warmups_per_arm: usize) -> Pairing {
        Pairing {
            warmups_per_arm,
            runs: 0,
            pairs_run: 0,
            half: None,
        }
    }

    /// The run to do next.
    fn slot(&self) -> Slot {
        let warm = 2 * self.warmups_per_arm;
        if self.runs < warm {
            return super::slot(self.warmups_per_arm, self.runs);
        }
        let within = (self.runs - warm) % 2;
        Slot {
            profile: pair_order(self.pairs_run)[within],
            warmup: false,
            pair: Some(self.pairs_run),
        }
    }

    /// Records the run [`Self::slot`] asked for; the pair it completed, if
    /// it did. A time no valid run reports is refused and not counted.
    fn record(&mut self, run: Timed) -> Result<Option<(Timed, Timed)>, JudgeError> {
        let slot = self.slot();
        super::log_ratio(run.seconds_per_token, run.seconds_per_token)?;
        self.runs += 1;
        if slot.warmup {
            return Ok(None);
        }
        let Some(first) = self.half.take() else {
            self.half = Some(run);
            return Ok(None);
        };
        self.pairs_run += 1;
        Ok(Some(match slot.profile {
            Arm::Candidate => (first, run),
            _ => (run, first),
        }))
    }
}

/// A paired A/B of a candidate against the live profile.
#[derive(Debug, Clone)]
pub struct AbSchedule {
    pairing: Pairing,
    test: SequentialTest,
}

impl AbSchedule {
    pub fn new(policy: Policy, floor: Floor, warmups_per_arm: usize) -> AbSchedule {
        AbSchedule {
            pairing: Pairing::new(warmups_per_arm),
            test: SequentialTest::new(policy, floor),
        }
    }

    /// The run to do next.
    pub fn slot(&self) -> Slot {
        self.pairing.slot()
    }

    /// Runs recorded so far.
    pub fn runs(&self) -> usize {
        self.pairing.runs
    }

    /// Records the run [`Self::slot`] asked for.
    pub fn record(&mut self, run: Timed) -> Result<Next, JudgeError> {
        let Some((baseline, candidate)) = self.pairing.record(run)? else {
            return Ok(Next::Run);
        };
        Ok(match self.test.push_timed(baseline, candidate)? {
            Step::Continue { .. } => Next::Run,
            Step::Discarded { discards, .. } => Next::Discarded(discards),
            Step::Decided(d) => Next::Decided(d),
        })
    }
}

/// How a noise-floor measurement ended.
#[derive(Debug, Clone, PartialEq)]
pub enum FloorEnd {
    /// The floor, the accepted A/A pairs `(first, second)` in run order,
    /// and the median contention of their runs (`None` without readings):
    /// what an A/B judged against this floor calls a burst is a rise over it.
    Measured {
        floor: NoiseFloor,
        pairs: Vec<(f64, f64)>,
        contention: Option<f64>,
    },
    /// Too many blocks were interfered with; no floor was estimated. `pairs`
    /// are all the A/A pairs run, discarded ones included, for the record.
    TooNoisy {
        discards: Discards,
        pairs: Vec<(f64, f64)>,
    },
    /// The runs gave no floor (too few, zero spread).
    Unusable(NoiseError),
}

/// What the floor schedule wants after a run.
#[derive(Debug, Clone, PartialEq)]
pub enum FloorNext {
    Run,
    /// The block just completed was interfered with and is re-run.
    Discarded(Discards),
    Done(FloorEnd),
}

/// A/A pairs of the live profile, in the A/B's own order, for its floor.
///
/// A block with a run contended beyond `max_contention_rise` over the
/// floor's own runs before it (warmups included; there is no floor yet to
/// compare with) is re-run, as in an A/B; a block that is merely
/// discordant is kept, since the floor must contain whatever noise the
/// protocol lets through.
#[derive(Debug, Clone)]
pub struct FloorSchedule {
    policy: Policy,
    pairing: Pairing,
    pairs_wanted: usize,
    /// The contention of every run before the block in progress.
    before: Vec<f64>,
    block: Vec<(Timed, Timed)>,
    accepted: Vec<(f64, f64)>,
    /// The contention of the accepted pairs' runs.
    accepted_contention: Vec<f64>,
    every: Vec<(f64, f64)>,
    discards: Discards,
}

impl FloorSchedule {
    /// `policy.floor_pairs` pairs, raised to the estimator's minimum and to
    /// whole blocks.
    pub fn new(policy: Policy, warmups_per_arm: usize) -> FloorSchedule {
        FloorSchedule {
            policy,
            pairing: Pairing::new(warmups_per_arm),
            pairs_wanted: policy.floor_pairs.max(noise::MIN_PAIRS).next_multiple_of(2),
            before: Vec::new(),
            block: Vec::with_capacity(2),
            accepted: Vec::new(),
            accepted_contention: Vec::new(),
            every: Vec::new(),
            discards: Discards::default(),
        }
    }

    /// The run to do next (both slots run the live profile).
    pub fn slot(&self) -> Slot {
        self.pairing.slot()
    }

    /// Pairs the floor is estimated from.
    pub fn pairs_wanted(&self) -> usize {
        self.pairs_wanted
    }

    /// Records the run [`Self::slot`] asked for.
    pub fn record(&mut self, run: Timed) -> Result<FloorNext, JudgeError> {
        let warmup = self.pairing.slot().warmup;
        // (the baseline slot's run, the candidate slot's run)
        let Some(pair) = self.pairing.record(run)? else {
            if warmup {
                self.before.extend(run.contention);
            }
            return Ok(FloorNext::Run);
        };
        self.block.push(pair);
        if self.block.len() < 2 {
            return Ok(FloorNext::Run);
        }
        let block: Vec<(Timed, Timed)> = std::mem::take(&mut self.block);
        self.every.extend(
            block
                .iter()
                .map(|(a, b)| (a.seconds_per_token, b.seconds_per_token)),
        );
        let runs: Vec<Timed> = block.iter().flat_map(|&(a, b)| [a, b]).collect();
        let reference = interference::running_reference(&self.before);
        let hit = interference::interfered(&runs, reference, self.policy.max_contention_rise);
        self.before.extend(runs.iter().filter_map(|r| r.contention));
        if let Some(rise) = hit {
            self.discards.interfered += 1;
            self.discards.worst_rise = self.discards.worst_rise.max(rise);
            if self.discards.total() > self.policy.max_discarded_blocks {
                return Ok(FloorNext::Done(FloorEnd::TooNoisy {
                    discards: self.discards,
                    pairs: std::mem::take(&mut self.every),
                }));
            }
            return Ok(FloorNext::Discarded(self.discards));
        }
        self.accepted.extend(
            block
                .iter()
                .map(|(a, b)| (a.seconds_per_token, b.seconds_per_token)),
        );
        self.accepted_contention
            .extend(runs.iter().filter_map(|r| r.contention));
        if self.accepted.len() < self.pairs_wanted {
            return Ok(FloorNext::Run);
        }
        let log_ratios: Vec<f64> = self.accepted.iter().map(|(a, b)| (b / a).ln()).collect();
        Ok(FloorNext::Done(
            match noise::estimate(&log_ratios, self.policy.min_floor) {
                Ok(floor) => FloorEnd::Measured {
                    floor,
                    pairs: std::mem::take(&mut self.accepted),
                    contention: noise::median(&self.accepted_contention),
                },
                Err(e) => FloorEnd::Unusable(e),
            },
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::judge::policy::Confidence;
    use crate::vocab::VerdictKind;

    fn policy() -> Policy {
        let mut p = Policy::new(
            Confidence::try_from(0.2).unwrap(),
            4,
            12,
            Floor::try_from(0.005).unwrap(),
        )
        .unwrap();
        p.max_contention_rise = Some(0.5);
        p.max_discarded_blocks = 2;
        // The floor's runs: four runnable tasks a core, a busy machine.
        p.against_floor(Some(4.0))
    }

    fn floor() -> Floor {
        Floor::try_from(0.03).unwrap()
    }

    /// Drives an A/B whose candidate is `ratio` times the baseline, with
    /// the contention of each run from `contention(run index)`.
    fn drive(
        ratio: f64,
        contention: impl Fn(usize) -> Option<f64>,
        warmups: usize,
    ) -> (Decision, Vec<Slot>, usize) {
        let mut s = AbSchedule::new(policy(), floor(), warmups);
        let mut slots = Vec::new();
        let mut discarded = 0;
        loop {
            let slot = s.slot();
            slots.push(slot);
            let i = slots.len() - 1;
            // A little deterministic wobble so the blocks have a spread.
            let wobble = 1.0 + 0.004 * ((i * 7919) % 5) as f64 / 5.0;
            let spt = match slot.profile {
                Arm::Candidate => 10.0 * ratio * wobble,
                _ => 10.0 * wobble,
            };
            match s
                .record(Timed {
                    seconds_per_token: spt,
                    contention: contention(i),
                })
                .unwrap()
            {
                Next::Run => {}
                Next::Discarded(_) => discarded += 1,
                Next::Decided(d) => return (d, slots, discarded),
            }
        }
    }

    #[test]
    fn warmups_then_alternating_blocks_then_a_decision() {
        // As busy as the floor's runs were, and a little busier: judged.
        let (d, slots, discarded) = drive(0.8, |i| Some(4.0 + 0.5 * (i % 3) as f64), 1);
        assert_eq!(d.kind, VerdictKind::Win);
        assert_eq!(discarded, 0);
        assert!(slots[0].warmup && slots[1].warmup);
        let arms: String = slots[2..]
            .iter()
            .map(|s| if s.profile == Arm::Baseline { 'B' } else { 'C' })
            .collect();
        assert!(arms.starts_with("BCCBCBBC"), "{arms}");
        assert_eq!(d.pairs, 4, "two blocks decide a 20% win, never one");
    }

    #[test]
    fn a_block_contended_beyond_the_floor_is_rerun_for_both_arms() {
        // Run 3 (the first block's second run) meets a burst: eight tasks a
        // core against the floor's four.
        let (d, slots, discarded) = drive(0.8, |i| Some(if i == 3 { 8.0 } else { 4.0 }), 1);
        assert_eq!(discarded, 1);
        assert_eq!(d.kind, VerdictKind::Win);
        assert_eq!(d.pairs, 4, "the discarded block's pairs are not counted");
        assert_eq!(slots.len(), 2 + 4 + 8, "one block re-run");
        // The re-run block continues the alternation in time (BAAB next).
        let rerun: String = slots[6..10]
            .iter()
            .map(|s| if s.profile == Arm::Baseline { 'B' } else { 'C' })
            .collect();
        assert_eq!(rerun, "CBBC");
    }

    #[test]
    fn a_steady_load_however_high_is_judged_when_the_floor_was_measured_under_it() {
        // 12.5 tasks a core (16 busy loops on 2 cores, every run's PSI share
        // at 1.0, which the old absolute gate discarded entirely), in the
        // floor's runs and the A/B's alike.
        let mut s = AbSchedule::new(policy().against_floor(Some(12.5)), floor(), 1);
        let mut discarded = 0;
        let d = loop {
            let spt = if s.slot().profile == Arm::Candidate {
                8.0
            } else {
                10.0
            };
            let wobble = 1.0 + 0.001 * (s.runs() % 3) as f64;
            match s
                .record(Timed {
                    seconds_per_token: spt * wobble,
                    contention: Some(12.5 * wobble),
                })
                .unwrap()
            {
                Next::Run => {}
                Next::Discarded(_) => discarded += 1,
                Next::Decided(d) => break d,
            }
        };
        assert_eq!(discarded, 0);
        assert_eq!(d.kind, VerdictKind::Win);
    }

    #[test]
    fn a_machine_busier_than_its_floor_throughout_ends_inconclusive_and_says_why() {
        let (d, slots, discarded) = drive(0.8, |_| Some(8.0), 0);
        assert_eq!(d.kind, VerdictKind::Inconclusive);
        let noisy = d.too_noisy.expect("the machine decided it");
        assert_eq!(noisy.interfered, 3);
        assert_eq!(discarded, 2);
        assert!((noisy.worst_rise - 1.0).abs() < 1e-12);
        assert_eq!(slots.len(), 12, "bounded: three blocks, then stop");
        // Nothing was judged, but the verdict still says what was seen.
        assert_eq!(d.pairs, 6, "every pair run, for the record");
        assert!(d.estimate.interval.0 <= d.estimate.log_ratio);
    }

    #[test]
    fn without_contention_readings_nothing_is_discarded_for_contention() {
        let (d, _, discarded) = drive(1.0, |_| None, 1);
        assert_eq!(discarded, 0);
        assert_eq!(d.kind, VerdictKind::WithinNoise);
        // Nor against a floor that has no reading.
        let mut s = AbSchedule::new(policy().against_floor(None), floor(), 0);
        let d = loop {
            let t = Timed {
                seconds_per_token: 10.0 + 0.01 * (s.runs() % 3) as f64,
                contention: Some(50.0),
            };
            match s.record(t).unwrap() {
                Next::Run => {}
                Next::Discarded(ds) => panic!("discarded without a reference: {ds:?}"),
                Next::Decided(d) => break d,
            }
        };
        assert_eq!(d.kind, VerdictKind::WithinNoise);
    }

    #[test]
    fn a_discordant_block_is_discarded_whichever_arm_it_hits() {
        for arm in [Arm::Baseline, Arm::Candidate] {
            let mut s = AbSchedule::new(policy(), floor(), 0);
            let mut discarded = 0;
            let mut first_block = true;
            let d = loop {
                let slot = s.slot();
                // A 30% burst on the first run of this arm in the first block.
                let hit = first_block && slot.profile == arm && s.runs() < 2;
                let spt = if hit { 13.0 } else { 10.0 };
                match s.record(Timed::plain(spt)).unwrap() {
                    Next::Run => {}
                    Next::Discarded(ds) => {
                        assert_eq!(ds.discordant, 1);
                        discarded += 1;
                        first_block = false;
                    }
                    Next::Decided(d) => break d,
                }
                if s.runs() >= 4 {
                    first_block = false;
                }
            };
            assert_eq!(discarded, 1, "{arm}");
            assert_eq!(d.kind, VerdictKind::WithinNoise, "{arm}");
        }
    }

    #[test]
    fn the_floor_schedule_measures_the_configured_pairs_and_reruns_a_burst() {
        let mut p = policy();
        p.floor_pairs = 12;
        let mut s = FloorSchedule::new(p, 1);
        assert_eq!(s.pairs_wanted(), 12);
        let mut runs = 0usize;
        let mut discarded = 0;
        let end = loop {
            let wobble = 1.0 + 0.01 * ((runs * 7919) % 7) as f64 / 7.0;
            // A steady load of 12 tasks a core, and a burst (20) during the
            // second block: judged against the runs before it.
            let contention = if (6..10).contains(&runs) { 20.0 } else { 12.0 };
            runs += 1;
            match s
                .record(Timed {
                    seconds_per_token: 10.0 * wobble,
                    contention: Some(contention),
                })
                .unwrap()
            {
                FloorNext::Run => {}
                FloorNext::Discarded(_) => discarded += 1,
                FloorNext::Done(end) => break end,
            }
        };
        assert_eq!(discarded, 1);
        assert_eq!(runs, 2 + 2 * 12 + 4);
        match end {
            FloorEnd::Measured {
                floor,
                pairs,
                contention,
            } => {
                assert_eq!(pairs.len(), 12);
                assert_eq!(floor.n, 12);
                assert_eq!(contention, Some(12.0), "the burst's runs are not in it");
            }
            other => panic!("{other:?}"),
        }
    }
}
