//! The sequential paired A/B: after every whole ABBA block, an interval
//! that stays valid when we stop as soon as it is decisive, and the verdict
//! it implies.
//!
//! Each pair is `(baseline, candidate)` seconds per token; each block of two
//! pairs gives one log ratio ([`super::interval::block_statistic`]);
//! negative is faster. The decision knows nothing else about the arms:
//! swapping them in every pair mirrors the interval and swaps `win` with
//! `loss`.

use super::JudgeError;
use super::interference::interfered;
use super::interval::{Blocks, Estimate, arm_gaps, block_statistic, discordant};
use super::policy::{Floor, Policy};
use crate::vocab::{Arm, VerdictKind};

/// Stable name of the interval method, stored in the ledger with each
/// verdict. v4: each arm's runs averaged (no per-arm outlier rule), a block
/// whose arms disagree within themselves or that a burst of competing work
/// hit (a run contended beyond its floor's, [`super::interference`]) is
/// re-run, and the interval's width is the experiment's own Student
/// interval, widened to the floor's. v3 was the same but re-ran blocks
/// with a run above an absolute PSI share (`max_pressure`). v2 verdicts
/// kept an arm's faster run and pooled the floor into the variance; v1 ran
/// ABBA blocks only.
/// v5 is v4 with the stored interval at the reported level
/// ([`super::interval::REPORTED_CONFIDENCE`]), not the decision's.
/// v6 is v5 with a first look at one block, whose own spread is its arms'
/// gaps and whose constant is Pocock's for every look from it
/// ([`super::Policy::boundary_at`]); the reported interval's constant
/// covers that look too.
/// v7 is v6 whose `win` or `loss` also needs its reported interval to
/// exclude zero on its side ([`agrees`]), so a verdict and the interval it
/// shows never contradict each other.
/// v8 is v7 whose own spread from two blocks on is the larger of the
/// blocks' spread and their arm gaps' pooled ([`super::interval`]).
/// v9 is v8 whose reported interval's spread pools the blocks' and their
/// arm gaps' into one estimate on `3m − 1` degrees of freedom
/// ([`super::interval::Blocks::pooled_spread`]); the decision's is v8's.
pub const METHOD: &str = "pocock-rci-own-spread-v9";

/// A final verdict with the statistics the ledger stores.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Decision {
    pub kind: VerdictKind,
    /// The estimate and the interval the decision was taken on (at the
    /// policy's confidence).
    pub estimate: Estimate,
    /// The interval shown and stored: over the same blocks, at
    /// [`super::interval::REPORTED_CONFIDENCE`] for the same looks.
    pub reported: (f64, f64),
    /// Pairs of the blocks the decision used (discarded blocks excluded);
    /// for a too-noisy one, every pair run, and `estimate` is over all of
    /// them, for the record only.
    pub pairs: usize,
    pub floor: Floor,
    /// [`METHOD`].
    pub method: &'static str,
    /// Set when the A/B ended `inconclusive` because too many of its blocks
    /// had to be discarded: the machine, not the profiles, decided it.
    pub too_noisy: Option<Discards>,
    /// `floor` is the largest floor the judge accepts (`max_noise_floor`),
    /// not a measured one: the verdict held against every smaller floor, so
    /// none was measured ([`super::schedule`]).
    pub against_bound: bool,
}

/// Why blocks were discarded, counted over one A/B.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Discards {
    /// Blocks with a run contended beyond the policy's rise over its floor's.
    pub interfered: usize,
    /// Blocks whose arms disagreed within themselves beyond the floor.
    pub discordant: usize,
    /// The largest contention rise over the floor's seen on a discarded run
    /// (a fraction: 0.5 is half as many tasks again per core).
    pub worst_rise: f64,
    /// Blocks during which the live server served its own users beyond
    /// `[daemon] stand_aside_above` (`measure::stand_aside`). Not counted
    /// in [`Discards::total`]: live users say nothing of the machine's
    /// noise, and the daemon bounds how often they may interrupt it.
    pub live: usize,
}

impl Discards {
    pub fn total(&self) -> usize {
        self.interfered + self.discordant
    }
}

/// One run as the judge sees it: its time and the machine's contention
/// during it (the mean runnable tasks per core, at least 1; `None` where
/// it could not be read).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Timed {
    pub seconds_per_token: f64,
    pub contention: Option<f64>,
}

impl Timed {
    /// A run with no contention reading.
    pub fn plain(seconds_per_token: f64) -> Timed {
        Timed {
            seconds_per_token,
            contention: None,
        }
    }
}

/// What to do after a pair.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Step {
    /// Measure another pair. `estimate` is `None` before the first block.
    Continue {
        pairs: usize,
        estimate: Option<Estimate>,
    },
    /// The block this pair completed was discarded: its four runs are not
    /// used, and the next pair starts a new block.
    Discarded {
        pairs: usize,
        discards: Discards,
    },
    Decided(Decision),
}

/// The log ratio of one pair, refusing a time no valid run can report.
pub fn log_ratio(baseline_spt: f64, candidate_spt: f64) -> Result<f64, JudgeError> {
    for (arm, value) in [
        (Arm::Baseline, baseline_spt),
        (Arm::Candidate, candidate_spt),
    ] {
        if !(value.is_finite() && value > 0.0) {
            return Err(JudgeError::InvalidTime { arm, value });
        }
    }
    Ok((candidate_spt / baseline_spt).ln())
}

/// The verdict an interval implies against `floor`, if it is decisive.
///
/// Wholly below `-floor`: `win`; wholly above `+floor`: `loss`; wholly
/// inside: `within_noise`. Strict inequalities, so an interval touching
/// a boundary waits for more pairs.
pub fn classify(interval: (f64, f64), floor: Floor) -> Option<VerdictKind> {
    let (lo, hi) = interval;
    let f = floor.get();
    if hi < -f {
        Some(VerdictKind::Win)
    } else if lo > f {
        Some(VerdictKind::Loss)
    } else if lo > -f && hi < f {
        Some(VerdictKind::WithinNoise)
    } else {
        None
    }
}

/// Whether the interval a verdict reports says what the verdict says: a
/// `win` only when the whole reported interval is faster (below zero), a
/// `loss` only when it is wholly slower, `within_noise` only when it
/// reaches inside the floor. The test decides on a narrower interval (the
/// policy's confidence) than the one it reports (90%, for every look at
/// once), so without this a win could be shown with an interval that
/// spans zero (`-2.4% [-8.85%, +4.24%]` was stored once): a directional
/// verdict then waits for the blocks that make its reported interval
/// agree, and at the last look it is `inconclusive`.
pub fn agrees(kind: VerdictKind, reported: (f64, f64), floor: Floor) -> bool {
    let (lo, hi) = reported;
    match kind {
        VerdictKind::Win => hi < 0.0,
        VerdictKind::Loss => lo > 0.0,
        VerdictKind::WithinNoise => lo < floor.get() && hi > -floor.get(),
        _ => true,
    }
}

/// Judges a sequence of `(baseline, candidate)` pairs as the sequential
/// test would, pair by pair: the first decision, or where it stands after
/// the last pair. Pairs after a decision are ignored (they would never have
/// been run). A pure function of the slice.
pub fn decide(pairs: &[(f64, f64)], floor: Floor, policy: &Policy) -> Result<Step, JudgeError> {
    let mut test = SequentialTest::new(*policy, floor);
    for &(b, c) in pairs {
        let step = test.push(b, c)?;
        if let Step::Decided(_) = step {
            return Ok(step);
        }
    }
    // Where it stands, even when the last block was discarded.
    Ok(Step::Continue {
        pairs: test.pairs(),
        estimate: test.estimate(),
    })
}

/// A sequential A/B in progress: push each pair, stop at `Decided`.
#[derive(Debug, Clone)]
pub struct SequentialTest {
    policy: Policy,
    floor: Floor,
    blocks: Blocks,
    /// Every completed block, discarded ones included: what a too-noisy
    /// verdict reports, so it still says what was seen.
    all: Blocks,
    /// The accepted blocks at each look so far (from `min_pairs` on): what
    /// [`Self::earlier_look_against`] asks of the earlier looks.
    looks: Vec<Blocks>,
    /// The first pair of the block in progress.
    pending: Option<(Timed, Timed)>,
    /// Pairs of accepted blocks.
    pairs: usize,
    /// Each accepted block's statistic, for [`Self::own_floor`].
    accepted: Vec<f64>,
    discards: Discards,
    decided: Option<Decision>,
    /// The block in progress was interrupted by live users: it is
    /// discarded when it completes ([`Self::interrupt`]).
    interrupted: bool,
}

impl SequentialTest {
    /// `floor` is the noise floor to judge against (already clamped by the
    /// policy's minimum, see [`super::noise::estimate`]).
    pub fn new(policy: Policy, floor: Floor) -> SequentialTest {
        SequentialTest {
            policy,
            floor,
            blocks: Blocks::default(),
            all: Blocks::default(),
            looks: Vec::new(),
            pending: None,
            pairs: 0,
            accepted: Vec::new(),
            discards: Discards::default(),
            decided: None,
            interrupted: false,
        }
    }

    /// Marks the block in progress (or the next one, between blocks) as
    /// interrupted by the live server's own users: when it completes it is
    /// discarded whole, both arms alike, and re-run, as an interfered block
    /// is. The run's time is never looked at, so no arm is favoured.
    pub fn interrupt(&mut self) {
        self.interrupted = true;
    }

    /// Pairs of the blocks accepted so far.
    pub fn pairs(&self) -> usize {
        self.pairs
    }

    /// The interval over the accepted blocks so far.
    pub fn estimate(&self) -> Option<Estimate> {
        self.blocks
            .estimate(self.floor, self.policy.boundary_at(self.blocks.n))
    }

    /// The interval a verdict on the accepted blocks so far would report
    /// ([`Decision::reported`]).
    pub fn reported(&self) -> Option<(f64, f64)> {
        self.blocks
            .reported_interval(self.floor, self.policy.report_boundary())
    }

    /// The noise floor the accepted blocks' own spread implies, on the
    /// floor's scale: a block's variance is `floor² / 2` on clean runs
    /// ([`Blocks::estimate`]), so `√2` times their spread, taken robustly
    /// (the scaled MAD), so one block a burst moved among three does not
    /// stand for the machine. Not `Qn`, the floor's own estimator: at two
    /// blocks, where most bound verdicts fall, its small-sample factor
    /// reads 25% above the plain spread and sent a third of the replay's
    /// big wins on its noisier traces to a floor (`judge_replay`, ×0.3:
    /// 29-34 runs all in against 22-30). Of a single block, `√2` times
    /// the spread its arm gaps give ([`Blocks::own_spread`]): the root mean
    /// square of the gaps, each of which is an A/A pair of its arm. `None`
    /// before a block was accepted.
    pub fn own_floor(&self) -> Option<f64> {
        use super::noise::{MAD_TO_SIGMA, mad};
        use std::f64::consts::SQRT_2;
        match self.accepted.len() {
            0 => None,
            1 => self.blocks.own_spread().map(|(s, _)| SQRT_2 * s),
            _ => Some(SQRT_2 * MAD_TO_SIGMA * mad(&self.accepted)),
        }
    }

    /// Takes back a decision this test reached, so that it goes on to its
    /// next look: for a verdict against the bound that its premise did not
    /// let stand ([`super::schedule::AbSchedule::against_bound`]).
    pub(crate) fn reopen(&mut self) {
        self.decided = None;
    }

    /// Whether the next look, one block on, would decide `win` or `loss`
    /// against `floor` if the estimate and the own spread stayed as they
    /// are: the half-width it would have, against the distance of the
    /// estimate beyond `floor`. What it would take for more pairs to be
    /// worth running against this floor; `false` before a block.
    pub fn next_look_may_decide(&self, floor: Floor) -> bool {
        let Some((s, _)) = self.blocks.own_spread() else {
            return false;
        };
        let next = self.blocks.n + 1;
        let z = self.policy.boundary_at(next);
        let own = super::interval::student_quantile(z, self.blocks.n as f64) * s;
        let half = own.max(z * floor.get() / std::f64::consts::SQRT_2) / (next as f64).sqrt();
        let mean = self.blocks.estimate(floor, z).map_or(0.0, |e| e.log_ratio);
        mean.abs() - half > floor.get()
    }

    /// Blocks discarded so far.
    pub fn discards(&self) -> Discards {
        self.discards
    }

    /// Looks taken so far (accepted blocks from `min_pairs` on).
    pub(crate) fn looks(&self) -> usize {
        self.looks.len()
    }

    /// A verdict other than `kind` that some floor in `[least, self.floor]`
    /// would have reached at a look before the last, on the same blocks:
    /// that look and verdict, or `None` when no such floor exists.
    ///
    /// Exact for the blocks as accepted, because each verdict is monotone
    /// in the floor `f`. The half-width is `max(A, c·f)` (`A` the own
    /// spread's, `c = z/√(2m)`), so `lo − f` and `−hi − f` fall as `f`
    /// grows: a `win` or `loss` at a look holds for every floor below one
    /// where it holds, and is easiest at the smallest floor, `least`.
    /// `within_noise` needs `|mean| + max(A, c·f) < f`, whose slack
    /// `f − max(A, c·f) − |mean|` grows with `f` (`c < 1` where it can hold
    /// at all): it is easiest at the largest floor, `self.floor`. So testing
    /// the two ends tests every floor between.
    pub fn earlier_look_against(
        &self,
        kind: VerdictKind,
        least: Floor,
    ) -> Option<(usize, VerdictKind)> {
        let earlier = self.looks.len().saturating_sub(1);
        for blocks in &self.looks[..earlier] {
            let z = self.policy.boundary_at(blocks.n);
            for f in [least, self.floor] {
                let other = blocks
                    .estimate(f, z)
                    .and_then(|e| classify(e.interval, f))
                    .filter(|k| *k != kind);
                if let Some(k) = other {
                    return Some((2 * blocks.n, k));
                }
            }
        }
        None
    }

    /// Adds one pair's seconds per token and says whether to go on.
    pub fn push(&mut self, baseline_spt: f64, candidate_spt: f64) -> Result<Step, JudgeError> {
        self.push_timed(Timed::plain(baseline_spt), Timed::plain(candidate_spt))
    }

    /// Adds one pair with the machine's contention during each run.
    pub fn push_timed(&mut self, baseline: Timed, candidate: Timed) -> Result<Step, JudgeError> {
        if let Some(d) = self.decided {
            return Err(JudgeError::AlreadyDecided {
                kind: d.kind,
                pairs: d.pairs,
            });
        }
        log_ratio(baseline.seconds_per_token, candidate.seconds_per_token)?;
        let Some(first) = self.pending.take() else {
            self.pending = Some((baseline, candidate));
            return Ok(Step::Continue {
                pairs: self.pairs,
                estimate: self
                    .blocks
                    .estimate(self.floor, self.policy.boundary_at(self.blocks.n)),
            });
        };
        let second = (baseline, candidate);
        let p = self.policy;
        let spt = |(b, c): (Timed, Timed)| (b.seconds_per_token, c.seconds_per_token);
        self.all.push(
            block_statistic(spt(first), spt(second)),
            arm_gaps(spt(first), spt(second)),
        );
        let runs = [first.0, first.1, second.0, second.1];
        if std::mem::take(&mut self.interrupted) {
            self.discards.live += 1;
            return Ok(Step::Discarded {
                pairs: self.pairs,
                discards: self.discards,
            });
        }
        if let Some(rise) = interfered(&runs, p.floor_contention, p.max_contention_rise) {
            self.discards.interfered += 1;
            self.discards.worst_rise = self.discards.worst_rise.max(rise);
            return self.discarded();
        }
        let (first, second) = (spt(first), spt(second));
        if discordant(first, second, self.floor).is_some() {
            self.discards.discordant += 1;
            return self.discarded();
        }
        let statistic = block_statistic(first, second);
        self.blocks.push(statistic, arm_gaps(first, second));
        self.accepted.push(statistic);
        self.pairs += 2;
        let pairs = self.pairs;
        if pairs >= p.min_pairs {
            self.looks.push(self.blocks);
        }
        let estimate = self
            .blocks
            .estimate(self.floor, p.boundary_at(self.blocks.n));
        // Decide only on whole ABBA blocks, where drift cancels.
        if let (true, Some(est)) = (pairs >= p.min_pairs, estimate) {
            let reported = self.reported().expect("a block was accepted");
            let kind = classify(est.interval, self.floor)
                .filter(|k| agrees(*k, reported, self.floor))
                .or((pairs >= p.max_pairs).then_some(VerdictKind::Inconclusive));
            if let Some(kind) = kind {
                return Ok(Step::Decided(self.decide(kind, est, reported, None)));
            }
        }
        Ok(Step::Continue { pairs, estimate })
    }

    fn decide(
        &mut self,
        kind: VerdictKind,
        estimate: Estimate,
        reported: (f64, f64),
        noisy: Option<Discards>,
    ) -> Decision {
        let d = Decision {
            kind,
            estimate,
            reported,
            pairs: self.pairs,
            floor: self.floor,
            method: METHOD,
            too_noisy: noisy,
            against_bound: false,
        };
        self.decided = Some(d);
        d
    }

    /// After a discarded block: go on, or give up when the policy's bound
    /// on discarded blocks is reached (`inconclusive`, the machine too
    /// noisy to decide).
    fn discarded(&mut self) -> Result<Step, JudgeError> {
        let discards = self.discards;
        if discards.total() > self.policy.max_discarded_blocks {
            let estimate = self
                .all
                .estimate(self.floor, self.policy.boundary_at(self.all.n))
                .expect("a discarded block was pushed to `all`");
            let reported = self
                .all
                .reported_interval(self.floor, self.policy.report_boundary())
                .expect("a discarded block was pushed to `all`");
            let mut d = self.decide(
                VerdictKind::Inconclusive,
                estimate,
                reported,
                Some(discards),
            );
            d.pairs = 2 * self.all.n;
            self.decided = Some(d);
            return Ok(Step::Decided(d));
        }
        Ok(Step::Discarded {
            pairs: self.pairs,
            discards,
        })
    }
}

/// Combines a first A/B with its independent replication.
///
/// A win may be staged only when both say `win`. A measurement failure in
/// either (`hash_mismatch`, then `failed`, then `rejected`) wins over
/// statistics; two agreeing verdicts stand; any other disagreement, a win
/// that did not replicate included, is `inconclusive`.
pub fn confirm(first: VerdictKind, second: VerdictKind) -> VerdictKind {
    use VerdictKind::*;
    for gate in [HashMismatch, Failed, Rejected] {
        if first == gate || second == gate {
            return gate;
        }
    }
    if first == second { first } else { Inconclusive }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::judge::policy::Confidence;
    use proptest::prelude::*;
    use rand::SeedableRng;
    use rand::rngs::StdRng;
    use rand_distr::{Distribution, Normal};

    fn floor(v: f64) -> Floor {
        Floor::try_from(v).unwrap()
    }

    fn policy(confidence: f64, min_pairs: usize, max_pairs: usize) -> Policy {
        Policy::new(
            Confidence::try_from(confidence).unwrap(),
            min_pairs,
            max_pairs,
            floor(0.001),
        )
        .unwrap()
    }

    /// Blocks whose statistic is each of `effects` (both pairs alike) into
    /// a test these never decide in (a floor of 0.99, the widest budget).
    fn own_floor_of(effects: &[f64]) -> Option<f64> {
        let mut t = SequentialTest::new(policy(0.05, 4, 60), floor(0.99));
        for x in effects {
            for _ in 0..2 {
                t.push(10.0, 10.0 * x.exp()).unwrap();
            }
        }
        t.own_floor()
    }

    #[test]
    fn the_own_floor_is_the_blocks_spread_robust_to_one_moved_block() {
        assert_eq!(own_floor_of(&[]), None);
        // One block whose arms repeat themselves exactly: no spread.
        assert_eq!(own_floor_of(&[-1.0]), Some(0.0));
        // One block: the root mean square of its two arm gaps, each an A/A
        // pair of its arm (baseline 10 then 11, candidate 5 then 5).
        let mut t = SequentialTest::new(policy(0.05, 4, 60), floor(0.99));
        t.push(10.0, 5.0).unwrap();
        t.push(11.0, 5.0).unwrap();
        let one = t.own_floor().unwrap();
        let gap = 1.1f64.ln();
        assert!((one - (gap * gap / 2.0).sqrt()).abs() < 1e-12, "{one}");
        // Two blocks: √2 · 1.4826 · |x1 − x2| / 2.
        let two = own_floor_of(&[-1.0, -1.4]).unwrap();
        assert!((two - 2f64.sqrt() * 1.482_602 * 0.2).abs() < 1e-5, "{two}");
        // One block of three moved by a burst: the other two speak.
        let moved = own_floor_of(&[-1.2, -1.21, -0.2]).unwrap();
        assert!(moved < 0.05, "{moved}");
        // All spread: the spread speaks.
        let spread = own_floor_of(&[-1.6, -1.0, -0.4]).unwrap();
        assert!(spread > 0.8, "{spread}");
    }

    /// Pairs whose candidate is `exp(x)` times a 10 s/token baseline.
    fn pairs(xs: &[f64]) -> Vec<(f64, f64)> {
        xs.iter().map(|x| (10.0, 10.0 * x.exp())).collect()
    }

    fn decided(step: Step) -> Decision {
        match step {
            Step::Decided(d) => d,
            other => panic!("expected a decision, got {other:?}"),
        }
    }

    #[test]
    fn log_ratio_refuses_impossible_times_and_names_the_arm() {
        assert!((log_ratio(10.0, 9.0).unwrap() - (0.9f64).ln()).abs() < 1e-15);
        for (b, c, arm) in [
            (0.0, 1.0, Arm::Baseline),
            (1.0, -2.0, Arm::Candidate),
            (f64::NAN, 1.0, Arm::Baseline),
            (1.0, f64::INFINITY, Arm::Candidate),
        ] {
            match log_ratio(b, c) {
                Err(JudgeError::InvalidTime { arm: got, .. }) => assert_eq!(got, arm),
                other => panic!("{b}, {c}: {other:?}"),
            }
        }
        let mut t = SequentialTest::new(Policy::default(), floor(0.03));
        let err = t.push(14.7, 0.0).unwrap_err();
        assert!(
            err.to_string().contains("candidate run reported 0"),
            "{err}"
        );
        assert_eq!(t.pairs(), 0, "a refused pair is not counted");
    }

    #[test]
    fn too_few_pairs_give_no_interval_and_no_decision() {
        let p = policy(0.8, 6, 20);
        assert_eq!(
            decide(&[], floor(0.03), &p).unwrap(),
            Step::Continue {
                pairs: 0,
                estimate: None
            }
        );
        assert_eq!(
            decide(&pairs(&[-0.5]), floor(0.03), &p).unwrap(),
            Step::Continue {
                pairs: 0,
                estimate: None
            }
        );
        // A huge, consistent effect still waits for min_pairs, even when
        // its interval is already decisive.
        for n in 2..6 {
            match decide(&pairs(&[-0.5; 5][..n]), floor(0.03), &p).unwrap() {
                Step::Continue {
                    pairs,
                    estimate: Some(e),
                } => {
                    assert_eq!(pairs, n / 2 * 2, "pairs of whole blocks");
                    if n >= 4 {
                        assert!(e.interval.1 < -0.03, "{n} pairs: {e:?}");
                    }
                }
                other => panic!("{n} pairs: {other:?}"),
            }
        }
        assert_eq!(
            decided(decide(&pairs(&[-0.5; 6]), floor(0.03), &p).unwrap()).kind,
            VerdictKind::Win
        );
    }

    #[test]
    fn decides_only_on_whole_abba_blocks() {
        let p = policy(0.8, 4, 20);
        let mut t = SequentialTest::new(p, floor(0.03));
        // Inconclusive noise for six pairs, then a decisive run of wins.
        for (b, c) in pairs(&[0.05, 0.05, -0.05, -0.05, 0.05, 0.05]) {
            assert!(matches!(t.push(b, c).unwrap(), Step::Continue { .. }));
        }
        let mut decided_at = None;
        for _ in 0..14 {
            if let Step::Decided(d) = t.push(10.0, 10.0 * (-0.3f64).exp()).unwrap() {
                decided_at = Some(d.pairs);
                break;
            }
        }
        let at = decided_at.expect("a run of -30% pairs decides");
        assert_eq!(at % 2, 0, "decided mid-block at {at}");
    }

    #[test]
    fn a_single_block_decides_only_when_its_own_arms_agree() {
        let p = Policy::default();
        assert_eq!(p.min_pairs, 2, "the first look is at one block");
        // An 11% win, twice a 6% floor, whose arms repeat themselves:
        // decided at one block.
        let d = decided(decide(&pairs(&[-0.12, -0.12]), floor(0.06), &p).unwrap());
        assert_eq!((d.kind, d.pairs), (VerdictKind::Win, 2));
        // The same statistic from a block whose baseline runs are 25%
        // apart (10 then 12.5, the candidate 11% under their mean; not
        // discordant, under 4 floors): its own spread, from that gap, is
        // too wide to decide at one block.
        let c = (10.0f64 * 12.5).sqrt() * (-0.12f64).exp();
        let mut t = SequentialTest::new(p, floor(0.06));
        assert!(matches!(t.push(10.0, c).unwrap(), Step::Continue { .. }));
        match t.push(12.5, c).unwrap() {
            Step::Continue {
                pairs: 2,
                estimate: Some(e),
            } => {
                assert!((e.log_ratio + 0.12).abs() < 1e-12);
                assert!(e.interval.1 > -0.06, "{e:?}");
            }
            other => panic!("one noisy block decided: {other:?}"),
        }
        // A policy may still ask for two blocks.
        let two = Policy::new(p.confidence, 4, 16, p.min_floor).unwrap();
        assert!(matches!(
            decide(&pairs(&[-0.5, -0.5]), floor(0.03), &two).unwrap(),
            Step::Continue { pairs: 2, .. }
        ));
        assert!(Policy::new(p.confidence, 0, 10, p.min_floor).is_err());
    }

    #[test]
    fn the_first_look_is_held_to_a_stricter_constant_than_the_later_ones() {
        let p = Policy::default();
        // Pocock's constant for looks 1..8 blocks, and for 2..8.
        let first = crate::judge::pocock::constant(1, 8, p.confidence.alpha());
        let later = crate::judge::pocock::constant(2, 8, p.confidence.alpha());
        assert!(first > later, "{first} {later}");
        assert_eq!(p.boundary_at(1), first);
        assert_eq!(p.boundary_at(2), later);
        assert_eq!(p.boundary_at(8), later);
        assert_eq!(p.boundary(), later);
        // The reported 90% interval is one Pocock family over every look.
        let reported = crate::judge::pocock::constant(1, 8, 0.10);
        assert_eq!(p.report_boundary(), reported);
        // With two blocks first, one constant for every look, as before.
        let two = Policy::new(p.confidence, 4, 16, p.min_floor).unwrap();
        assert_eq!(two.boundary_at(1), two.boundary_at(2));
    }

    #[test]
    fn zero_variance_gives_a_finite_interval_from_the_floor() {
        let p = policy(0.8, 6, 20);
        let d = decided(decide(&pairs(&[0.0; 6]), floor(0.03), &p).unwrap());
        assert_eq!(d.kind, VerdictKind::WithinNoise);
        let (lo, hi) = d.estimate.interval;
        assert!(
            lo.is_finite() && hi.is_finite() && lo < 0.0 && hi > 0.0,
            "{d:?}"
        );
        let w = decided(decide(&pairs(&[-0.2; 6]), floor(0.03), &p).unwrap());
        assert_eq!(w.kind, VerdictKind::Win);
        assert!((w.estimate.log_ratio + 0.2).abs() < 1e-12);
    }

    #[test]
    fn every_verdict_is_reachable() {
        let p = policy(0.8, 4, 12);
        let f = floor(0.03);
        let kind = |x: &[f64]| decided(decide(&pairs(x), f, &p).unwrap()).kind;
        // Blocks alternate by ±a around c.
        let wobble = |c: f64, a: f64| -> Vec<f64> {
            (0..12)
                .map(|i| c + if (i / 2) % 2 == 0 { a } else { -a })
                .collect()
        };
        assert_eq!(kind(&wobble(-0.10, 0.005)), VerdictKind::Win);
        assert_eq!(kind(&wobble(0.10, 0.005)), VerdictKind::Loss);
        assert_eq!(kind(&wobble(0.0, 0.005)), VerdictKind::WithinNoise);
        // Straddling the floor for the whole budget.
        assert_eq!(kind(&wobble(0.03, 0.03)), VerdictKind::Inconclusive);
        let d = decided(decide(&pairs(&wobble(0.03, 0.03)), f, &p).unwrap());
        assert_eq!(d.pairs, 12);
        assert_eq!((d.floor, d.method), (f, METHOD));
    }

    #[test]
    fn classify_boundaries_are_strict_and_mirrored() {
        let f = floor(0.03);
        assert_eq!(classify((-0.2, -0.031), f), Some(VerdictKind::Win));
        assert_eq!(classify((-0.2, -0.03), f), None);
        assert_eq!(classify((0.031, 0.2), f), Some(VerdictKind::Loss));
        assert_eq!(classify((0.03, 0.2), f), None);
        assert_eq!(classify((-0.029, 0.029), f), Some(VerdictKind::WithinNoise));
        assert_eq!(classify((-0.03, 0.0), f), None);
        assert_eq!(classify((-0.05, 0.05), f), None);
    }

    #[test]
    fn a_decided_test_refuses_more_pairs() {
        let mut t = SequentialTest::new(policy(0.8, 4, 8), floor(0.03));
        for _ in 0..4 {
            let _ = t.push(10.0, 6.0).unwrap();
        }
        let err = t.push(10.0, 6.0).unwrap_err();
        assert_eq!(
            err,
            JudgeError::AlreadyDecided {
                kind: VerdictKind::Win,
                pairs: 4
            }
        );
        assert!(err.to_string().contains("independent replication"));
    }

    #[test]
    fn a_win_needs_two_wins() {
        use VerdictKind::*;
        assert_eq!(confirm(Win, Win), Win);
        assert_eq!(confirm(Win, WithinNoise), Inconclusive);
        assert_eq!(confirm(Win, Loss), Inconclusive);
        assert_eq!(confirm(Win, Inconclusive), Inconclusive);
        assert_eq!(confirm(Loss, Loss), Loss);
        assert_eq!(confirm(Win, HashMismatch), HashMismatch);
        assert_eq!(confirm(Failed, Win), Failed);
        assert_eq!(confirm(Rejected, HashMismatch), HashMismatch);
        for a in VerdictKind::ALL {
            for b in VerdictKind::ALL {
                assert_eq!(confirm(*a, *b) == Win, *a == Win && *b == Win, "{a} {b}");
            }
        }
    }

    #[test]
    fn stopping_when_decisive_keeps_the_verdict_honest() {
        // Optional stopping at its most greedy: stop at the first decisive
        // look. The stopped interval must still cover the truth at the
        // stated level (it covers at every look at once).
        let n: Normal<f64> = Normal::new(0.0, 0.02).unwrap();
        let mut rng = StdRng::seed_from_u64(9);
        for conf in [0.4, 0.8] {
            let p = policy(conf, 4, 24);
            for theta in [0.0, -0.03, -0.06] {
                let mut covered = 0;
                let reps = 2000;
                for _ in 0..reps {
                    let mut t = SequentialTest::new(p, floor(0.0283));
                    let d = loop {
                        let b: f64 = n.sample(&mut rng).exp();
                        let c: f64 = (theta + n.sample(&mut rng)).exp();
                        if let Step::Decided(d) = t.push(b, c).unwrap() {
                            break d;
                        }
                    };
                    let (lo, hi) = d.estimate.interval;
                    covered += usize::from(lo <= theta && theta <= hi);
                }
                let c = covered as f64 / reps as f64;
                // 2000 reps: 3 standard errors are at most 3.3 points.
                assert!(
                    c >= conf - 0.033,
                    "{conf} theta {theta}: stopped coverage {c}"
                );
            }
        }
    }

    /// One block whose decision interval (the policy's 10%) lies beyond
    /// `-floor` while its reported 90% interval spans zero: the shape of a
    /// stored `win` shown as `[-8.85%, +4.24%]`. It must not be a win.
    #[test]
    fn a_win_whose_reported_interval_spans_zero_is_not_decided() {
        use crate::judge::interval::student_quantile;
        let f = 0.05;
        let p = policy(0.10, 2, 16);
        // Baseline runs equal; the candidate's two differ by 2h, so the
        // block's own spread is h (under the discordance limit of 4f).
        let h = 1.5 * f;
        let half = |z: f64| (student_quantile(z, 2.0) * h).max(z * f / std::f64::consts::SQRT_2);
        let decision = half(p.boundary_at(1));
        let reported = half(p.report_boundary());
        let m = -(f + decision) * 1.05;
        assert!(
            m + reported > 0.0,
            "the reported interval must span zero here"
        );
        let pairs = [(1.0, (m + h).exp()), (1.0, (m - h).exp())];
        // The decision's interval alone says win.
        assert_eq!(
            classify((m - decision, m + decision), floor(f)),
            Some(VerdictKind::Win)
        );
        match decide(&pairs, floor(f), &p).unwrap() {
            Step::Decided(d) => panic!("decided {:?} with reported {:?}", d.kind, d.reported),
            Step::Continue { .. } => {}
            Step::Discarded { .. } => panic!("the block was discarded"),
        }
    }

    /// Two A/A blocks 10% apart whose arms agree within themselves, judged
    /// against a floor of 9.2%: `within_noise` at the second look. With the
    /// blocks' own spread alone (one degree of freedom, a Student quantile
    /// of about 24 at the reported 90%) the interval it showed was 14
    /// floors wide on each side, the shape of a stored `+1.1% [-83.3%,
    /// +510.4%]`; pooled with the arm gaps it is about one.
    #[test]
    fn a_within_noise_verdict_at_two_blocks_reports_an_interval_near_the_floor() {
        let f = 0.088;
        let p = policy(0.10, 2, 16);
        // (baseline, candidate) pairs: each arm's two runs of a block 2%
        // apart, the blocks' statistics +6% and -4%.
        let e = f64::exp;
        let pairs = [
            (1.0, e(0.06)),
            (e(0.02), e(0.08)),
            (1.0, e(-0.04)),
            (e(0.02), e(-0.02)),
        ];
        let d = match decide(&pairs, floor(f), &p).unwrap() {
            Step::Decided(d) => d,
            other => panic!("{other:?}"),
        };
        assert_eq!((d.kind, d.pairs), (VerdictKind::WithinNoise, 4));
        let (lo, hi) = d.reported;
        assert!(lo < 0.01 && 0.01 < hi, "{:?}", d.reported);
        assert!(hi - lo < 2.0 * 1.5 * f, "reported {:?}", d.reported);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(200))]
        /// A verdict never contradicts the interval it reports: a win's
        /// lies below zero, a loss's above, a within-noise one reaches
        /// inside the floor; and it holds the decision's own interval.
        #[test]
        fn a_verdict_agrees_with_its_reported_interval(
            effect in -0.4f64..0.4,
            sigma in 0.001f64..0.2,
            f in 0.01f64..0.3,
            seed in any::<u64>(),
        ) {
            let mut rng = StdRng::seed_from_u64(seed);
            let noise = Normal::new(0.0, sigma).unwrap();
            let ts: Vec<(f64, f64)> = (0..16)
                .map(|_| {
                    let b: f64 = noise.sample(&mut rng);
                    let c: f64 = noise.sample(&mut rng);
                    (b.exp(), (effect + c).exp())
                })
                .collect();
            let p = policy(0.10, 2, 16);
            if let Step::Decided(d) = decide(&ts, floor(f), &p).unwrap() {
                prop_assert!(agrees(d.kind, d.reported, floor(f)), "{:?} {:?}", d.kind, d.reported);
                match d.kind {
                    VerdictKind::Win => prop_assert!(d.reported.1 < 0.0),
                    VerdictKind::Loss => prop_assert!(d.reported.0 > 0.0),
                    _ => {}
                }
                if d.too_noisy.is_none() {
                    prop_assert!(d.reported.0 <= d.estimate.interval.0 + 1e-12);
                    prop_assert!(d.reported.1 >= d.estimate.interval.1 - 1e-12);
                }
            }
        }


        #[test]
        fn swapped_arms_give_the_mirrored_verdict(
            ts in proptest::collection::vec((0.5f64..2.0, 0.5f64..2.0), 0..50),
            f in 0.005f64..0.2,
        ) {
            let p = policy(0.8, 4, 30);
            let a = decide(&ts, floor(f), &p).unwrap();
            let swapped: Vec<(f64, f64)> = ts.iter().map(|(b, c)| (*c, *b)).collect();
            let b = decide(&swapped, floor(f), &p).unwrap();
            let mirror = |e: Estimate| Estimate {
                log_ratio: -e.log_ratio,
                interval: (-e.interval.1, -e.interval.0),
            };
            let close = |x: Estimate, y: Estimate| {
                (x.log_ratio - y.log_ratio).abs() < 1e-12
                    && (x.interval.0 - y.interval.0).abs() < 1e-12
                    && (x.interval.1 - y.interval.1).abs() < 1e-12
            };
            match (a, b) {
                (Step::Continue { pairs: pa, estimate: ea }, Step::Continue { pairs: pb, estimate: eb }) => {
                    prop_assert_eq!(pa, pb);
                    match (ea, eb) {
                        (Some(x), Some(y)) => prop_assert!(close(mirror(x), y)),
                        (x, y) => prop_assert_eq!(x.is_none(), y.is_none()),
                    }
                }
                (Step::Decided(da), Step::Decided(db)) => {
                    let swapped = match da.kind {
                        VerdictKind::Win => VerdictKind::Loss,
                        VerdictKind::Loss => VerdictKind::Win,
                        k => k,
                    };
                    prop_assert_eq!(swapped, db.kind);
                    prop_assert!(close(mirror(da.estimate), db.estimate));
                    prop_assert_eq!(da.pairs, db.pairs);
                }
                (a, b) => prop_assert!(false, "{:?} vs {:?}", a, b),
            }
        }

        #[test]
        fn incremental_test_agrees_with_the_pure_function(
            ts in proptest::collection::vec((0.5f64..2.0, 0.5f64..2.0), 1..40),
        ) {
            let p = policy(0.9, 4, 40);
            let mut t = SequentialTest::new(p, floor(0.03));
            let mut last = None;
            for (i, &(b, c)) in ts.iter().enumerate() {
                let step = t.push(b, c).unwrap();
                // `decide` reports a discarded last block as where it stands.
                let expect = match step {
                    Step::Discarded { pairs, .. } => Step::Continue { pairs, estimate: t.estimate() },
                    s => s,
                };
                prop_assert_eq!(expect, decide(&ts[..=i], floor(0.03), &p).unwrap());
                if matches!(step, Step::Decided(_)) {
                    last = Some(step);
                    break;
                }
            }
            if let Some(Step::Decided(d)) = last {
                // A decision on whole blocks within the budget, or the
                // machine too noisy (discarded blocks, bounded).
                prop_assert!(
                    d.too_noisy.is_some() || (d.pairs >= 4 && d.pairs % 2 == 0 && d.pairs <= 40)
                );
            }
        }

        #[test]
        fn interval_contains_the_estimate_and_narrows_with_agreeing_data(
            c in -0.2f64..0.2, blocks in 1usize..15,
        ) {
            let p = policy(0.8, 60, 60);
            let est = |n: usize| match decide(&pairs(&vec![c; n]), floor(0.03), &p).unwrap() {
                Step::Continue { estimate: Some(e), .. } => e,
                other => panic!("{other:?}"),
            };
            let (a, b) = (est(2 * blocks), est(2 * blocks + 2));
            prop_assert!(a.interval.0 <= a.log_ratio && a.log_ratio <= a.interval.1);
            prop_assert!(b.interval.1 - b.interval.0 < a.interval.1 - a.interval.0);
        }
    }
}
