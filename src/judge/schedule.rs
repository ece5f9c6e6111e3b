//! The run schedules of an A/B and of a noise-floor A/A, as pure state
//! machines: which profile runs next, and what each measured run changes.
//!
//! The daemon's measurer (`measure::ab`) and the replay benchmark
//! (`benches/judge_replay`) drive the same machines, so the replay judges a
//! trace exactly as the daemon would have judged those runs: warmups, the
//! alternating ABBA/BAAB order ([`super::protocol`]), blocks discarded for
//! interference ([`super::interference`]) or discordance and re-run, the
//! sequential test, and the floor.
//!
//! An A/B with no valid floor ([`AbSchedule::against_bound`]) does not wait
//! for one: it is judged first against the largest floor the judge accepts,
//! and measures a floor only when that cannot decide (see there).

use super::JudgeError;
use super::interference;
use super::noise::{self, NoiseError, NoiseFloor};
use super::policy::{Floor, Policy};
use super::protocol::{Slot, pair_order};
use super::sequential::{Decision, Discards, SequentialTest, Step, Timed};
use crate::vocab::{Arm, VerdictKind};

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
    /// Judged against the bound, the A/B could not decide: measure the
    /// noise floor now, then [`AbSchedule::resume`] with it.
    NeedsFloor,
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
        if self.runs < 2 * self.warmups_per_arm {
            return super::slot(self.warmups_per_arm, self.runs);
        }
        let within = usize::from(self.half.is_some());
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

/// The most looks an A/B with no valid floor is judged against the bound
/// before it measures one. A large effect decides at the first look (one
/// block with the default `min_pairs = 2`). After an undecided look the A/B
/// goes on against the bound only when the next look would decide if its
/// estimate and spread held ([`SequentialTest::next_look_may_decide`]);
/// any other effect is left to the measured floor at once, which may
/// decide it at that same look. Every pair run against a bound that
/// cannot decide is a pair a floor measured then might not have needed:
/// with two looks always, a 2-floor effect cost four runs more on the
/// replay's traces and could not stop at one block; with one look always,
/// an effect just beyond the bound on a machine whose floor is near it
/// measured floors that came out above the bound (too noisy) where a
/// second look would have decided it with none.
pub const BOUND_LOOKS: usize = 2;

/// A paired A/B of a candidate against the live profile.
#[derive(Debug, Clone)]
pub struct AbSchedule {
    policy: Policy,
    pairing: Pairing,
    test: SequentialTest,
    /// Every pair run so far, discarded blocks' included: what a floor
    /// measured later judges again from the first look.
    pairs: Vec<(Timed, Timed)>,
    phase: Phase,
    /// Looks judged against the bound before the floor is measured.
    bound_looks: usize,
    /// Blocks (pair index / 2) the live server's users interrupted: what
    /// [`Self::resume`] discards again.
    interrupted: Vec<usize>,
    /// Whether an undecided look asks for the floor early, when the next
    /// look could not decide against the bound either.
    early_floor: bool,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Phase {
    /// Judged against a measured floor.
    Floor,
    /// Judged against the bound (`max_noise_floor`), no floor yet.
    Bound,
    /// The bound could not decide; the floor is being measured.
    WaitingForFloor,
}

/// What [`AbSchedule::resume`] found when it judged the pairs so far again
/// against the measured floor.
#[derive(Debug, Clone, PartialEq)]
pub struct Resumed {
    /// [`Next::Decided`] when a look the bound had passed decides under the
    /// floor, else [`Next::Run`]: the next pair, with no warmups (see
    /// [`AbSchedule::resume`]).
    pub next: Next,
    /// Pairs (indices in run order) of the blocks the floor discards:
    /// those the bound discarded, and those too discordant for the floor.
    pub discarded_pairs: Vec<usize>,
}

impl AbSchedule {
    /// An A/B judged against the measured `floor`.
    pub fn new(policy: Policy, floor: Floor, warmups_per_arm: usize) -> AbSchedule {
        AbSchedule {
            policy,
            pairing: Pairing::new(warmups_per_arm),
            test: SequentialTest::new(policy, floor),
            pairs: Vec::new(),
            phase: Phase::Floor,
            bound_looks: BOUND_LOOKS,
            interrupted: Vec::new(),
            early_floor: true,
        }
    }

    /// An A/B of a live profile with no valid floor (none yet, aged out,
    /// measured under other pressure, or one a confirmation may not use),
    /// judged first against the largest floor the judge accepts,
    /// `policy.max_floor`; `None` when the policy has no such limit.
    ///
    /// Why the bound may decide: the interval's half-width is
    /// `max(own, z·floor/√2)/√m` and a win needs it wholly below `−floor`;
    /// both grow with the floor, so a `win` or `loss` at a look against the
    /// bound is one against every smaller floor at that look, and a floor
    /// above the bound would have ended the cycle as too noisy anyway. So a
    /// win or loss against the bound stands, marked
    /// [`Decision::against_bound`], and no floor is measured, unless:
    ///
    /// - an **earlier look** would have decided otherwise under some
    ///   smaller floor (the floor-first test stops at its first decisive
    ///   look, so a `loss` or `within_noise` there, hidden by the bound's
    ///   width, would have been the verdict). Each verdict is monotone in
    ///   the floor, so checking the smallest floor (`min_floor`, for the
    ///   opposite direction) and the bound (for `within_noise`) checks them
    ///   all ([`SequentialTest::earlier_look_against`]). Then the floor is
    ///   measured and decides.
    /// - the bound says `within_noise`: that is not decided for a smaller
    ///   floor (the same interval may lie wholly beyond it), so the floor is
    ///   measured. Likewise the bound's `inconclusive` at `max_pairs`.
    ///
    /// Otherwise, after [`BOUND_LOOKS`] undecided looks, [`Next::NeedsFloor`]:
    /// the caller measures the floor and calls [`Self::resume`], which
    /// judges the pairs already run again from the first look, exactly as
    /// if the floor had been measured first (the run order goes on in time
    /// whatever happens to the blocks, so the pairs are the same either
    /// way), and goes on as a measured-floor A/B.
    ///
    /// Two things are judged against the bound that a measured floor would
    /// judge otherwise. A block is discordant beyond 4 bounds rather than 4
    /// floors: kept blocks a small floor would have re-run. That gap is
    /// between an arm's own runs and cannot favour either arm; such a block
    /// widens the own spread, which carries the interval's coverage
    /// whatever the floor. And a machine too noisy for the bound (blocks
    /// under pressure, or discordant beyond 4 bounds) ends the A/B
    /// `inconclusive` without a floor, since a smaller floor discards every
    /// block the bound does: nothing is staged from it.
    pub fn against_bound(policy: Policy, warmups_per_arm: usize) -> Option<AbSchedule> {
        let bound = policy.max_floor?;
        let mut s = AbSchedule::new(policy, bound, warmups_per_arm);
        s.phase = Phase::Bound;
        Some(s)
    }

    /// Judges exactly `looks` looks against the bound (at least one)
    /// instead of at most [`BOUND_LOOKS`], whether or not the next look
    /// could decide: what the premise checks are tested with.
    pub fn with_bound_looks(mut self, looks: usize) -> AbSchedule {
        self.bound_looks = looks.max(1);
        self.early_floor = false;
        self
    }

    /// The run to do next.
    pub fn slot(&self) -> Slot {
        self.pairing.slot()
    }

    /// Runs recorded so far.
    pub fn runs(&self) -> usize {
        self.pairing.runs
    }

    /// The live server served its own users during the run [`Self::slot`]
    /// names (`measure::stand_aside`): its block is discarded whole when it
    /// completes and re-run ([`SequentialTest::interrupt`]). A warmup is
    /// discarded anyway; `false` then, and nothing changes.
    pub fn interrupt(&mut self) -> bool {
        let Some(pair) = self.slot().pair else {
            return false;
        };
        let block = pair / 2;
        if !self.interrupted.contains(&block) {
            self.interrupted.push(block);
        }
        self.test.interrupt();
        true
    }

    /// Records the run [`Self::slot`] asked for.
    pub fn record(&mut self, run: Timed) -> Result<Next, JudgeError> {
        if self.phase == Phase::WaitingForFloor {
            return Err(JudgeError::WaitsForFloor);
        }
        let Some((baseline, candidate)) = self.pairing.record(run)? else {
            return Ok(Next::Run);
        };
        self.pairs.push((baseline, candidate));
        let looks = self.test.looks();
        let step = self.test.push_timed(baseline, candidate)?;
        if self.phase == Phase::Bound {
            return Ok(self.against_the_bound(step, looks));
        }
        Ok(match step {
            Step::Continue { .. } => Next::Run,
            Step::Discarded { discards, .. } => Next::Discarded(discards),
            Step::Decided(d) => Next::Decided(d),
        })
    }

    /// What a step judged against the bound means (see [`Self::against_bound`]).
    fn against_the_bound(&mut self, step: Step, looks_before: usize) -> Next {
        let needs_floor = match step {
            Step::Discarded { discards, .. } => return Next::Discarded(discards),
            Step::Continue { .. } => {
                let looked = self.test.looks() > looks_before;
                let bound = self.policy.max_floor.expect("judged against a bound");
                looked
                    && (self.test.looks() >= self.bound_looks
                        || (self.early_floor && !self.test.next_look_may_decide(bound)))
            }
            Step::Decided(mut d) => {
                let decisive = matches!(d.kind, VerdictKind::Win | VerdictKind::Loss)
                    && self
                        .test
                        .earlier_look_against(d.kind, self.policy.min_floor)
                        .is_none();
                let premise = self.within_the_bound();
                if d.too_noisy.is_some() || (decisive && premise) {
                    d.against_bound = true;
                    return Next::Decided(d);
                }
                // The blocks' own spread, read above the bound, is what
                // held the verdict back. At one block that reading has two
                // degrees of freedom and reads above a floor somewhat under
                // the bound one time in three or four; a floor measured
                // there would often read above the bound too (too noisy)
                // where the next look, with one block more to read the
                // spread from, decides. So the next look is judged against
                // the bound, within its looks.
                if decisive && self.test.looks() < self.bound_looks {
                    self.test.reopen();
                    return Next::Run;
                }
                true
            }
        };
        if needs_floor {
            self.phase = Phase::WaitingForFloor;
            return Next::NeedsFloor;
        }
        Next::Run
    }

    /// Whether the A/B's own pairs are consistent with the bound's premise,
    /// that the machine's floor is at most the bound: the floor their own
    /// spread implies ([`SequentialTest::own_floor`]) is not above it.
    /// Where it is, a floor-first A/B would not have run at all (the floor
    /// would have been too noisy), so the bound may not decide: the floor
    /// is measured, and decides. Seen on real runs: under CPU hogs a
    /// same-speed candidate won and lost against the bound while the
    /// floors measured beside it were 55% and 138%
    /// (`noisy_machine::a_same_speed_candidate_under_cpu_hogs_is_never_staged`).
    fn within_the_bound(&self) -> bool {
        let bound = self.policy.max_floor.map_or(f64::INFINITY, |b| b.get());
        self.test.own_floor().is_none_or(|own| own <= bound)
    }

    /// The verdict when the floor this A/B waits for could not be measured:
    /// `inconclusive`, with where the pairs stood against the bound; `None`
    /// before a whole block was accepted.
    pub fn without_floor(&self) -> Option<Decision> {
        let estimate = self.test.estimate()?;
        Some(Decision {
            kind: VerdictKind::Inconclusive,
            estimate,
            reported: self.test.reported()?,
            pairs: self.test.pairs(),
            floor: self.policy.max_floor?,
            method: super::sequential::METHOD,
            too_noisy: None,
            against_bound: true,
        })
    }

    /// Goes on against the measured `floor`: the pairs run so far are judged
    /// again with the sequential test from its first look (as
    /// [`super::decide`] does, with their pressure readings), and the A/B
    /// goes on from where that leaves it.
    ///
    /// With no warmups: the floor ran the live profile from the same files
    /// the candidate reads (a bench run's cache is the operating system's,
    /// which those runs keep warm), and the measurer keeps what its scorer
    /// holds, a shadow's server, up while the floor is measured
    /// (`measure::ab`). Warming both arms again cost two runs an A/B that
    /// went on, a fifth of a 2-floor effect's A/B on the replay's traces.
    pub fn resume(
        &mut self,
        floor: Floor,
        floor_contention: Option<f64>,
    ) -> Result<Resumed, JudgeError> {
        if self.phase != Phase::WaitingForFloor {
            return Err(JudgeError::NotWaitingForFloor);
        }
        self.phase = Phase::Floor;
        // From here a run is interfered with when contended beyond the
        // floor's own runs (the bound had no floor to compare with).
        self.policy = self.policy.against_floor(floor_contention);
        self.test = SequentialTest::new(self.policy, floor);
        let mut discarded_pairs = Vec::new();
        for (i, &(b, c)) in self.pairs.iter().enumerate() {
            if self.interrupted.contains(&(i / 2)) {
                self.test.interrupt();
            }
            match self.test.push_timed(b, c)? {
                Step::Continue { .. } => {}
                Step::Discarded { .. } => discarded_pairs.extend([i - 1, i]),
                Step::Decided(d) => {
                    if d.too_noisy.is_some() {
                        discarded_pairs.extend([i - 1, i]);
                    }
                    return Ok(Resumed {
                        next: Next::Decided(d),
                        discarded_pairs,
                    });
                }
            }
        }
        Ok(Resumed {
            next: Next::Run,
            discarded_pairs,
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
    /// The block in progress was interrupted by live users.
    interrupted: bool,
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
            interrupted: false,
        }
    }

    /// As [`AbSchedule::interrupt`]: the block of the run [`Self::slot`]
    /// names is re-run; `false` for a warmup.
    pub fn interrupt(&mut self) -> bool {
        if self.slot().warmup {
            return false;
        }
        self.interrupted = true;
        true
    }

    /// The run to do next (both slots run the live profile).
    pub fn slot(&self) -> Slot {
        self.pairing.slot()
    }

    /// Pairs the floor is estimated from.
    pub fn pairs_wanted(&self) -> usize {
        self.pairs_wanted
    }

    /// Blocks a floor may re-run for interference before it ends too noisy:
    /// a quarter of its blocks (2 of the default 10), and never more than
    /// an A/B may (`max_discarded_blocks`).
    ///
    /// Why a quarter: a floor is the noise of the load the machine carries
    /// steadily, and a re-run block is one a change of load hit. When more
    /// than one block in four needs re-running, the load is not steady: a
    /// floor finished under it would describe a moment, not the machine,
    /// and the A/B judged against it would re-run its own blocks as often,
    /// at four runs each. So the floor stops and says the machine is too
    /// noisy, and a later cycle measures it when the load has settled.
    /// With the A/B's budget (8) a floor could take 74 runs instead of 42
    /// (seen in a newcomer's first cycle on a loaded machine); with this
    /// one it takes at most [`Self::most_runs`], 50 with the defaults.
    pub fn discard_budget(&self) -> usize {
        (self.pairs_wanted / 2 / 4).min(self.policy.max_discarded_blocks)
    }

    /// The most runs this floor can take, warmups and re-run blocks
    /// included: its accepted blocks and its discard budget, or, when the
    /// budget runs out first, one block fewer accepted and one more re-run.
    pub fn most_runs(&self) -> usize {
        2 * self.pairing.warmups_per_arm + 2 * self.pairs_wanted + 4 * self.discard_budget()
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
        if std::mem::take(&mut self.interrupted) {
            // Kept out of `before`: its contention is the live users'.
            self.discards.live += 1;
            return Ok(FloorNext::Discarded(self.discards));
        }
        let reference = interference::running_reference(&self.before);
        let hit = interference::interfered(&runs, reference, self.policy.max_contention_rise);
        self.before.extend(runs.iter().filter_map(|r| r.contention));
        if let Some(rise) = hit {
            self.discards.interfered += 1;
            self.discards.worst_rise = self.discards.worst_rise.max(rise);
            if self.discards.total() > self.discard_budget() {
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
                Next::NeedsFloor => panic!("a measured floor never asks for one"),
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
    fn a_block_live_users_interrupted_is_rerun_for_both_arms_and_not_counted_as_noise() {
        // Run 4 (the first run of the first block's second pair, after one
        // warmup per arm) saw a live request; its times are as clean as
        // the others', so only the mark can discard its block.
        let mut s = AbSchedule::new(policy(), floor(), 1);
        let mut slots = Vec::new();
        let mut discards = Vec::new();
        let d = loop {
            let slot = s.slot();
            slots.push(slot);
            let i = slots.len() - 1;
            if i == 4 {
                assert!(s.interrupt(), "a paired run's block is marked");
            }
            if i == 0 {
                assert!(!s.interrupt(), "a warmup is discarded anyway");
            }
            let spt = if slot.profile == Arm::Candidate {
                8.0
            } else {
                10.0
            };
            let wobble = 1.0 + 0.004 * ((i * 7919) % 5) as f64 / 5.0;
            match s.record(Timed::plain(spt * wobble)).unwrap() {
                Next::Run => {}
                Next::Discarded(ds) => discards.push((i, ds)),
                Next::Decided(d) => break d,
                Next::NeedsFloor => panic!("a measured floor never asks for one"),
            }
        };
        // Discarded when the block completed (run 5), whole, and re-run.
        assert_eq!(discards.len(), 1, "{discards:?}");
        let (at, ds) = discards[0];
        assert_eq!(at, 5);
        assert_eq!((ds.live, ds.interfered, ds.discordant), (1, 0, 0));
        assert_eq!(ds.total(), 0, "live users are no noise of the machine");
        assert_eq!(d.kind, VerdictKind::Win);
        assert_eq!(d.pairs, 4, "the interrupted block's pairs are not judged");
        assert_eq!(slots.len(), 2 + 4 + 8, "one block re-run");
        // Without the mark, the same runs decide one block sooner.
        let (plain, plain_slots, _) = drive(0.8, |_| None, 1);
        assert_eq!(plain.kind, VerdictKind::Win);
        assert_eq!(plain_slots.len(), 2 + 8);
    }

    #[test]
    fn an_interrupted_block_is_discarded_again_when_the_floor_rejudges_the_pairs() {
        // Against the bound, straddling it, the first block interrupted.
        let mut s = AbSchedule::against_bound(bounded(), 0).unwrap();
        let mut next = Next::Run;
        let mut live = 0;
        while matches!(next, Next::Run | Next::Discarded(_)) {
            let slot = s.slot();
            let b = slot.pair.unwrap() / 2;
            if b == 0 {
                s.interrupt();
            }
            let x: f64 = if b % 2 == 0 { 0.34 } else { 0.47 };
            let spt = match slot.profile {
                Arm::Candidate => 10.0 * x.exp(),
                _ => 10.0,
            };
            next = s.record(Timed::plain(spt)).unwrap();
            if let Next::Discarded(ds) = next {
                live = ds.live;
            }
        }
        assert_eq!(live, 1);
        assert_eq!(next, Next::NeedsFloor);
        let r = s.resume(floor(), None).unwrap();
        assert!(
            r.discarded_pairs.starts_with(&[0, 1]),
            "the interrupted block stays out: {r:?}"
        );
    }

    #[test]
    fn the_floor_schedule_reruns_a_block_live_users_interrupted() {
        let mut p = policy();
        p.floor_pairs = 12;
        let mut s = FloorSchedule::new(p, 1);
        let mut runs = 0usize;
        let mut live = 0;
        let end = loop {
            if runs == 7 {
                assert!(s.interrupt());
            }
            let wobble = 1.0 + 0.01 * ((runs * 7919) % 7) as f64 / 7.0;
            runs += 1;
            match s.record(Timed::plain(10.0 * wobble)).unwrap() {
                FloorNext::Run => {}
                FloorNext::Discarded(ds) => live = ds.live,
                FloorNext::Done(end) => break end,
            }
        };
        assert_eq!(live, 1);
        assert_eq!(runs, 2 + 2 * 12 + 4, "one block re-run");
        assert!(matches!(end, FloorEnd::Measured { ref pairs, .. } if pairs.len() == 12));
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
                Next::NeedsFloor => panic!("an A/B against a measured floor never asks for one"),
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
                Next::NeedsFloor => panic!("an A/B against a measured floor never asks for one"),
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
                    Next::NeedsFloor => panic!("a measured floor never asks for one"),
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

    /// `max_noise_floor = 0.50` as the policy holds it: ln 1.5.
    fn bounded() -> Policy {
        let mut p = policy();
        p.max_floor = Some(Floor::try_from(1.5f64.ln()).unwrap());
        p
    }

    /// [`bounded`] with room for 20 pairs: a verdict whose reported 90%
    /// interval must also agree with it needs more blocks after a turn.
    fn bounded_long() -> Policy {
        let mut p = Policy::new(
            Confidence::try_from(0.2).unwrap(),
            4,
            20,
            Floor::try_from(0.005).unwrap(),
        )
        .unwrap();
        p.max_contention_rise = Some(0.5);
        p.max_discarded_blocks = 2;
        let mut p = p.against_floor(Some(4.0));
        p.max_floor = Some(Floor::try_from(1.5f64.ln()).unwrap());
        p
    }

    /// What happened to an A/B judged against the bound.
    #[derive(Debug)]
    struct BoundRun {
        decision: Decision,
        /// Judged pairs run when the floor was asked for, if it was.
        floor_asked_at: Option<usize>,
        /// Runs after the floor was asked for: the warmups first.
        after: Vec<Slot>,
    }

    /// Drives an A/B against the bound whose block `b` has the candidate
    /// `exp(effect(b))` times a 10 s/token baseline, both pairs alike;
    /// when it asks for its floor, resumes with `floor`.
    fn drive_bound(s: AbSchedule, effect: impl Fn(usize) -> f64, floor: Floor) -> BoundRun {
        let mut s = s;
        let mut asked = None;
        let mut after = Vec::new();
        let mut pairs = 0;
        loop {
            let slot = s.slot();
            if asked.is_some() {
                after.push(slot);
            }
            let spt = match (slot.profile, slot.pair) {
                (Arm::Candidate, Some(k)) => 10.0 * effect(k / 2).exp(),
                _ => 10.0,
            };
            pairs += usize::from(slot.pair.is_some_and(|k| slot.profile == pair_order(k)[1]));
            match s.record(Timed::plain(spt)).unwrap() {
                Next::Run | Next::Discarded(_) => {}
                Next::Decided(decision) => {
                    return BoundRun {
                        decision,
                        floor_asked_at: asked,
                        after,
                    };
                }
                Next::NeedsFloor => {
                    assert!(asked.is_none(), "the floor is asked for once");
                    asked = Some(pairs);
                    // Waiting for the floor, it runs nothing more.
                    assert_eq!(
                        s.clone().record(Timed::plain(10.0)),
                        Err(JudgeError::WaitsForFloor)
                    );
                    let resumed = s.resume(floor, None).unwrap();
                    assert!(resumed.discarded_pairs.is_empty());
                    if let Next::Decided(decision) = resumed.next {
                        return BoundRun {
                            decision,
                            floor_asked_at: asked,
                            after,
                        };
                    }
                }
            }
        }
    }

    #[test]
    fn pairs_noisier_than_the_bound_do_not_decide_against_it() {
        // Block effects spread as a floor of about 0.57 would (> the bound,
        // ln 1.5 = 0.41), all far below zero: without the premise check the
        // bound calls this a win; a floor-first A/B would never have run.
        let effects = [-2.4, -1.6, -2.0, -2.2, -1.8, -2.1];
        let s = AbSchedule::against_bound(bounded(), 1).unwrap();
        let noisy = Floor::try_from(0.6).unwrap();
        let r = drive_bound(s, |b| effects[b % effects.len()], noisy);
        assert!(r.floor_asked_at.is_some(), "{r:?}");
        assert!(!r.decision.against_bound, "{r:?}");
        // The same blocks with the spread of a quiet machine win at once.
        let quiet = [-2.0, -2.02, -1.98, -2.01];
        let s = AbSchedule::against_bound(bounded(), 1).unwrap();
        let r = drive_bound(s, |b| quiet[b % quiet.len()], floor());
        assert_eq!(r.floor_asked_at, None, "{r:?}");
        assert!(r.decision.against_bound && r.decision.kind == VerdictKind::Win);
    }

    #[test]
    fn a_clear_win_is_decided_against_the_bound_at_the_first_look_with_no_floor() {
        let s = AbSchedule::against_bound(bounded(), 1).unwrap();
        // A candidate 70% faster, as a big speculative win is.
        let r = drive_bound(s, |_| 0.3f64.ln(), floor());
        assert_eq!(r.floor_asked_at, None, "no floor was measured");
        let d = r.decision;
        assert_eq!((d.kind, d.pairs), (VerdictKind::Win, 4));
        assert!(d.against_bound, "marked as judged against the bound");
        assert_eq!(d.floor, bounded().max_floor.unwrap());
        // Its interval is wholly below minus the bound, so below minus
        // every smaller floor.
        assert!(d.estimate.interval.1 < -d.floor.get());
        // And a mirrored big loss stands the same way.
        let s = AbSchedule::against_bound(bounded(), 1).unwrap();
        let r = drive_bound(s, |_| 3.0f64.ln(), floor());
        assert_eq!(
            (r.decision.kind, r.floor_asked_at),
            (VerdictKind::Loss, None)
        );
        // Without a bound there is nothing to judge against.
        assert!(AbSchedule::against_bound(policy(), 1).is_none());
    }

    #[test]
    fn a_small_effect_measures_the_floor_then_goes_on_from_the_pairs_run() {
        // Blocks alternate around a 3% win by ±2%: within the bound at
        // once (which a smaller floor need not be), undecided against a 1%
        // floor at first, a win after more blocks.
        let effect = |b: usize| -0.03 + if b % 2 == 0 { 0.02 } else { -0.02 };
        let small = Floor::try_from(0.01).unwrap();
        let s = AbSchedule::against_bound(bounded(), 1).unwrap();
        let r = drive_bound(s, effect, small);
        assert_eq!(r.floor_asked_at, Some(4), "asked at the first look");
        let d = r.decision;
        assert_eq!(d.kind, VerdictKind::Win);
        assert!(!d.against_bound);
        assert_eq!(d.floor, small);
        assert!(d.pairs > 4, "went on after the floor: {d:?}");
        // No warmups after the floor: its runs kept the files warm, and the
        // measurer keeps the candidate's server up. The next run is the
        // next pair, in the order the A/B left off.
        assert_eq!(
            r.after[0],
            Slot {
                profile: pair_order(4)[0],
                warmup: false,
                pair: Some(4)
            },
            "{:?}",
            r.after
        );
        assert!(r.after.iter().all(|s| !s.warmup));
        // The same verdict, at the same pairs, as a floor measured first.
        let pairs: Vec<(f64, f64)> = (0..d.pairs)
            .map(|k| (10.0, 10.0 * effect(k / 2).exp()))
            .collect();
        match crate::judge::decide(&pairs, small, &bounded()).unwrap() {
            Step::Decided(first) => {
                assert_eq!((first.kind, first.pairs), (d.kind, d.pairs));
                assert_eq!(first.estimate, d.estimate);
            }
            other => panic!("{other:?}"),
        }
    }

    /// The corner case: two blocks 49% slower, then blocks 78% faster. The
    /// bound (50%) is undecided at the first look and says `win` at a later
    /// one; but a 1% floor says `loss` at the first look, where a test
    /// with that floor measured first would have stopped.
    fn turning(b: usize) -> f64 {
        if b < 2 { 0.4 } else { -1.5 }
    }

    #[test]
    fn a_win_the_bound_sees_late_waits_for_the_floor_when_a_smaller_floor_said_loss_earlier() {
        let p = bounded_long();
        let bound = p.max_floor.unwrap();
        // Against the bound alone, the fifth look is a win.
        let pairs: Vec<(f64, f64)> = (0..20)
            .map(|k| (10.0, 10.0 * turning(k / 2).exp()))
            .collect();
        let alone = match crate::judge::decide(&pairs, bound, &p).unwrap() {
            Step::Decided(d) => d,
            other => panic!("{other:?}"),
        };
        assert_eq!(alone.kind, VerdictKind::Win);
        assert!(alone.pairs > 6, "a late look: {alone:?}");
        // A 0.5% floor (the smallest the policy accepts) says loss at 4.
        match crate::judge::decide(&pairs, p.min_floor, &p).unwrap() {
            Step::Decided(d) => assert_eq!((d.kind, d.pairs), (VerdictKind::Loss, 4)),
            other => panic!("{other:?}"),
        }
        // So the bound's win does not stand: the floor is measured, and
        // decides from the first look, as if it had been measured first.
        let small = Floor::try_from(0.01).unwrap();
        let s = AbSchedule::against_bound(p, 1).unwrap().with_bound_looks(9);
        let r = drive_bound(s, turning, small);
        assert_eq!(
            r.floor_asked_at,
            Some(alone.pairs),
            "the bound's win was held back"
        );
        assert_eq!((r.decision.kind, r.decision.pairs), (VerdictKind::Loss, 4));
        assert!(!r.decision.against_bound);
        // A floor large enough not to see the early loss keeps the win,
        // at the look where that floor first decides it (before the
        // bound's): the verdict a test with that floor measured first gives.
        let wide = Floor::try_from(0.35).unwrap();
        let s = AbSchedule::against_bound(p, 1).unwrap().with_bound_looks(9);
        let r = drive_bound(s, turning, wide);
        let first = match crate::judge::decide(&pairs, wide, &p).unwrap() {
            Step::Decided(d) => d,
            other => panic!("{other:?}"),
        };
        assert_eq!(first.kind, VerdictKind::Win);
        // At or before the bound's look: both wait for the reported interval to agree.
        assert!(first.pairs <= alone.pairs);
        assert_eq!(r.decision, first);
        // Without the early blocks the same late win stands on the bound.
        let s = AbSchedule::against_bound(p, 1).unwrap().with_bound_looks(9);
        let r = drive_bound(s, |_| -1.5, small);
        assert_eq!(r.floor_asked_at, None);
        assert!(r.decision.against_bound && r.decision.kind == VerdictKind::Win);
    }

    #[test]
    fn the_bound_ends_undecided_after_its_looks_and_the_floor_rejudges_discards() {
        // Straddling the bound: neither a decision nor within it.
        let p = bounded();
        let mut s = AbSchedule::against_bound(p, 0).unwrap();
        let mut next = Next::Run;
        let mut k = 0;
        while next == Next::Run {
            let slot = s.slot();
            // Blocks at +40%/+60% alternately; one baseline run of the
            // second block 20% off its partner: discordant for a 3% floor,
            // not for the bound.
            let b = slot.pair.unwrap() / 2;
            let x: f64 = if b % 2 == 0 { 0.34 } else { 0.47 };
            let spt = match slot.profile {
                Arm::Candidate => 10.0 * x.exp(),
                _ if k == 5 => 12.0,
                _ => 10.0,
            };
            k += 1;
            next = s.record(Timed::plain(spt)).unwrap();
        }
        assert_eq!(next, Next::NeedsFloor);
        // This policy's first look is at two blocks, and it asks for the
        // floor after it: straddling the bound, the next look could not
        // decide against it either.
        assert_eq!(BOUND_LOOKS, 2);
        assert_eq!(s.runs(), 8, "one look, at 2 blocks");
        let r = s.resume(floor(), None).unwrap();
        assert_eq!(r.discarded_pairs, vec![2, 3], "{r:?}");
    }

    /// The shipped shape: the first look at one block, the bound 50%.
    fn one_block_first() -> Policy {
        let mut p = Policy::default();
        p.max_floor = Some(Floor::try_from(1.5f64.ln()).unwrap());
        p
    }

    #[test]
    fn a_huge_effect_costs_one_block_and_its_warmups_and_no_floor() {
        // Runs wobbling by ±1% around a candidate 3.5 times faster: the
        // draft that the first pair already shows beyond doubt.
        let mut s = AbSchedule::against_bound(one_block_first(), 1).unwrap();
        let wobble = [1.0, 1.01, 0.99, 1.0, 1.005, 0.995];
        let d = loop {
            let i = s.runs();
            let spt = match s.slot().profile {
                Arm::Candidate => 10.0 / 3.5,
                _ => 10.0,
            } * wobble[i % wobble.len()];
            match s.record(Timed::plain(spt)).unwrap() {
                Next::Run => {}
                Next::Decided(d) => break d,
                other => panic!("{other:?}"),
            }
        };
        assert_eq!((d.kind, d.pairs), (VerdictKind::Win, 2));
        assert!(d.against_bound);
        assert_eq!(s.runs(), 2 + 4, "a warmup per arm and one block");
        assert!(d.estimate.interval.1 < -d.floor.get());
    }

    #[test]
    fn a_small_effect_asks_for_its_floor_after_one_block_and_may_stop_there() {
        // A 20% win, far inside the bound, runs wobbling by ±0.5%: the
        // bound cannot decide, the floor (2%) is asked for after the first
        // block, and that same block decides against it.
        let p = one_block_first();
        let mut s = AbSchedule::against_bound(p, 1).unwrap();
        let wobble = [1.0, 1.005, 0.995, 1.0];
        let asked = loop {
            let i = s.runs();
            let spt = match s.slot().profile {
                Arm::Candidate => 8.0,
                _ => 10.0,
            } * wobble[i % wobble.len()];
            match s.record(Timed::plain(spt)).unwrap() {
                Next::Run => {}
                Next::NeedsFloor => break s.runs(),
                other => panic!("{other:?}"),
            }
        };
        assert_eq!(asked, 2 + 4, "after the first block");
        let r = s.resume(Floor::try_from(0.02).unwrap(), None).unwrap();
        match r.next {
            Next::Decided(d) => {
                assert_eq!((d.kind, d.pairs), (VerdictKind::Win, 2));
                assert!(!d.against_bound);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_floor_under_changing_load_stops_within_its_own_budget() {
        // The default 20 pairs: two of its ten blocks may be re-run.
        let mut p = policy();
        p.floor_pairs = 20;
        p.max_discarded_blocks = 8;
        let mut s = FloorSchedule::new(p, 1);
        assert_eq!(s.discard_budget(), 2);
        assert_eq!(s.most_runs(), 2 + 40 + 8);
        // Every other block is hit by a burst (twice the contention).
        let mut runs = 0usize;
        let end = loop {
            let burst = runs >= 2 && ((runs - 2) / 4) % 2 == 1;
            runs += 1;
            let t = Timed {
                seconds_per_token: 10.0 * (1.0 + 0.01 * (runs % 3) as f64),
                contention: Some(if burst { 8.0 } else { 4.0 }),
            };
            match s.record(t).unwrap() {
                FloorNext::Run | FloorNext::Discarded(_) => {}
                FloorNext::Done(end) => break end,
            }
        };
        match end {
            FloorEnd::TooNoisy { discards, .. } => assert_eq!(discards.interfered, 3),
            other => panic!("{other:?}"),
        }
        // Three bursts in six blocks: 26 runs, not the 74 that the A/B's
        // own budget of eight re-runs would have allowed.
        assert_eq!(runs, 2 + 6 * 4);
        assert!(runs <= s.most_runs());
    }
}
