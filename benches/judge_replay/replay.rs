//! One replayed decision: a stream of runs drawn from a trace by a circular
//! block bootstrap, fed through the daemon's judging path (or a fixed
//! protocol), with a true effect injected into the candidate's runs.

use orchestrator::judge::{
    self, AbSchedule, FloorEnd, FloorNext, FloorSchedule, Next, Policy, Timed,
};
use orchestrator::judge::{Floor, confirm};
use orchestrator::vocab::{Arm, VerdictKind};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::trace::{Run, Trace};

/// Runs of one bootstrap block. Bursts on this machine last a few runs and
/// consecutive runs correlate at 0.4-0.7 under load, dying out within about
/// ten: blocks of 32 keep that dependence (and any slower load change
/// inside a block) while giving many distinct streams.
pub const BLOCK: usize = 32;

/// An endless stream of runs: blocks of [`BLOCK`] consecutive runs from
/// random starts, wrapping at the trace's end (Politis & Romano 1992, "A
/// circular block-resampling procedure for stationary data"). Time only
/// moves forward: every run the protocol asks for is the next one.
pub struct Stream<'a> {
    runs: &'a [Run],
    rng: StdRng,
    at: usize,
    left: usize,
    /// Runs taken so far: the cost of a decision.
    pub taken: usize,
}

impl<'a> Stream<'a> {
    pub fn new(trace: &'a Trace, seed: u64) -> Stream<'a> {
        Stream {
            runs: &trace.runs,
            rng: StdRng::seed_from_u64(seed),
            at: 0,
            left: 0,
            taken: 0,
        }
    }

    pub fn next_run(&mut self) -> Run {
        if self.left == 0 {
            self.at = self.rng.random_range(0..self.runs.len());
            self.left = BLOCK;
        }
        let r = self.runs[self.at % self.runs.len()];
        self.at += 1;
        self.left -= 1;
        self.taken += 1;
        r
    }

    /// The next run as the given arm of an A/B whose candidate is
    /// `exp(theta)` times the trace (an A/A when `theta` is 0).
    fn timed(&mut self, arm: Arm, theta: f64) -> Timed {
        let r = self.next_run();
        let shift = if arm == Arm::Candidate {
            theta.exp()
        } else {
            1.0
        };
        Timed {
            seconds_per_token: r.seconds_per_token * shift,
            contention: r.contention,
        }
    }
}

/// The noise the trace really has: `Qn` of the log ratios of consecutive
/// pairs of runs over the whole trace. Effects are injected in units of it.
pub fn true_floor(trace: &Trace) -> f64 {
    let ratios: Vec<f64> = trace
        .runs
        .chunks_exact(2)
        .map(|p| (p[1].seconds_per_token / p[0].seconds_per_token).ln())
        .collect();
    judge::noise::estimate(&ratios, Floor::try_from(1e-6).expect("valid"))
        .map(|f| f.measured)
        .unwrap_or(0.0)
}

/// How an A/B decides.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Judge {
    /// The daemon's sequential test, as configured.
    Ours(Policy),
    /// `pairs` pairs in our order, a t-interval at `1 - alpha` on the block
    /// statistics that must lie wholly beyond or inside the floor.
    FixedPaired { pairs: usize, alpha: f64 },
    /// The autotune habit: `runs` of the baseline, then `runs` of the
    /// candidate, medians compared against the floor.
    MedianOf { runs: usize },
}

impl Judge {
    pub fn label(&self) -> String {
        match self {
            Judge::Ours(p) => format!(
                "**ours**: sequential, {:.0}% RCI, {}-{} pairs, floor of {} pairs",
                100.0 * p.confidence.get(),
                p.min_pairs,
                p.max_pairs,
                p.floor_pairs
            ),
            Judge::FixedPaired { pairs, alpha } => format!(
                "fixed {pairs} ABBA pairs, t-interval {:.0}% vs floor",
                100.0 * (1.0 - alpha)
            ),
            Judge::MedianOf { runs } => format!("median of {runs} per arm vs floor"),
        }
    }
}

/// How floors are shared between A/Bs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum FloorUse {
    /// A fresh floor before every A/B.
    Each,
    /// One floor serves this many A/Bs in a row, as `noise_floor_max_age_s
    /// = 86400` allows; a confirmation measures its own first only with
    /// `confirmation_new_floor`.
    Shared(usize),
}

/// One replayed decision.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Outcome {
    pub single: VerdictKind,
    pub confirmed: VerdictKind,
    /// The A/B said inconclusive because the machine was too noisy (or the
    /// floor was above the limit).
    pub noisy: bool,
    /// Runs this decision cost, its share of shared floors included.
    pub runs: f64,
    /// The runs of its A/Bs alone (first and confirmation), floors left out.
    pub ab_runs: f64,
    /// The intervals its A/Bs reported (first and confirmation), and how
    /// many of them held the injected effect.
    pub intervals: usize,
    pub covered: usize,
}

/// Tally of reported intervals against the injected effect `theta`.
#[derive(Debug, Clone, Copy, Default)]
struct Coverage {
    intervals: usize,
    covered: usize,
}

impl Coverage {
    fn add(&mut self, reported: Option<(f64, f64)>, theta: f64) {
        if let Some((lo, hi)) = reported {
            self.intervals += 1;
            self.covered += usize::from(lo <= theta && theta <= hi);
        }
    }
}

/// The replay of `decisions` consecutive A/Bs of a candidate `theta` on one
/// stream, floors as `floors` says.
///
/// Our judge with a bound (`max_floor`) runs as the daemon does: an A/B
/// with no valid floor (the first, one whose floor aged out, every
/// confirmation) is judged against the bound first and measures its floor
/// only when the bound cannot decide ([`AbSchedule::against_bound`]).
/// Without a bound, and for the fixed protocols, the floor comes first.
pub fn replay(
    stream: &mut Stream,
    judge: Judge,
    policy: Policy,
    warmups: usize,
    theta: f64,
    floors: FloorUse,
) -> Vec<Outcome> {
    let decisions = match floors {
        FloorUse::Each => 1,
        FloorUse::Shared(k) => k,
    };
    match judge {
        Judge::Ours(p) if p.max_floor.is_some() => {
            replay_bound_first(stream, p, warmups, theta, decisions)
        }
        _ => replay_floor_first(stream, judge, policy, warmups, theta, decisions),
    }
}

/// [`replay`] with the floor measured before the A/Bs that need one.
fn replay_floor_first(
    stream: &mut Stream,
    judge: Judge,
    policy: Policy,
    warmups: usize,
    theta: f64,
    decisions: usize,
) -> Vec<Outcome> {
    let start = stream.taken;
    let mut floor = measure_floor(stream, policy, warmups);
    let mut out = Vec::with_capacity(decisions);
    for _ in 0..decisions {
        let Some(f) = floor else {
            // No usable floor: the cycle ends inconclusive, nothing staged.
            out.push(Outcome {
                single: VerdictKind::Inconclusive,
                confirmed: VerdictKind::Inconclusive,
                noisy: true,
                runs: 0.0,
                ab_runs: 0.0,
                intervals: 0,
                covered: 0,
            });
            floor = measure_floor(stream, policy, warmups);
            continue;
        };
        let before = stream.taken;
        let mut coverage = Coverage::default();
        let (single, noisy, reported) = ab(stream, judge, policy, warmups, f, theta);
        coverage.add(reported, theta);
        let mut ab_runs = stream.taken - before;
        let confirmed = if single == VerdictKind::Win {
            // The confirmation measures a floor of its own only as the
            // shipped policy says (`confirmation_new_floor`), for every
            // protocol alike.
            if policy.confirmation_new_floor {
                floor = measure_floor(stream, policy, warmups);
            }
            match floor {
                Some(f2) => {
                    let before = stream.taken;
                    let (second, _, reported) = ab(stream, judge, policy, warmups, f2, theta);
                    coverage.add(reported, theta);
                    ab_runs += stream.taken - before;
                    confirm(single, second)
                }
                None => VerdictKind::Inconclusive,
            }
        } else {
            single
        };
        out.push(Outcome {
            single,
            confirmed,
            noisy,
            runs: 0.0,
            ab_runs: ab_runs as f64,
            intervals: coverage.intervals,
            covered: coverage.covered,
        });
    }
    share_runs(&mut out, stream.taken - start);
    out
}

/// [`replay`] as the daemon runs our judge with a bound: the floor is
/// measured inside an A/B, and only when the bound cannot decide it. A
/// floor measured serves the next `decisions` A/Bs in all (the shared
/// floor's age) and their confirmations, unless the policy asks for a
/// confirmation's floor measured after its win (`confirmation_new_floor`).
fn replay_bound_first(
    stream: &mut Stream,
    policy: Policy,
    warmups: usize,
    theta: f64,
    decisions: usize,
) -> Vec<Outcome> {
    let start = stream.taken;
    let mut floor: Option<Floor> = None;
    let mut out = Vec::with_capacity(decisions);
    for _ in 0..decisions {
        let first = bounded_ab(stream, policy, warmups, floor, theta);
        if let Some(measured) = first.measured {
            floor = measured;
        }
        let mut coverage = Coverage::default();
        coverage.add(first.reported, theta);
        let mut ab_runs = first.ab_runs;
        let confirmed = if first.kind == VerdictKind::Win {
            // A floor still valid judges the confirmation too, unless the
            // policy asks for one measured after the win.
            let valid = floor.filter(|_| !policy.confirmation_new_floor);
            let second = bounded_ab(stream, policy, warmups, valid, theta);
            if let Some(measured) = second.measured {
                floor = measured;
            }
            ab_runs += second.ab_runs;
            coverage.add(second.reported, theta);
            confirm(first.kind, second.kind)
        } else {
            first.kind
        };
        out.push(Outcome {
            single: first.kind,
            confirmed,
            noisy: first.noisy,
            runs: 0.0,
            ab_runs: ab_runs as f64,
            intervals: coverage.intervals,
            covered: coverage.covered,
        });
    }
    share_runs(&mut out, stream.taken - start);
    out
}

/// Every decision's share of the runs taken, floors included.
fn share_runs(out: &mut [Outcome], taken: usize) {
    let per = taken as f64 / out.len() as f64;
    for o in out {
        o.runs = per;
    }
}

/// One A/B of ours as the daemon runs it.
struct Bounded {
    kind: VerdictKind,
    noisy: bool,
    /// A floor measured inside it: `Some(None)` when one was measured but
    /// came out unusable.
    measured: Option<Option<Floor>>,
    /// Its runs, the floor's left out.
    ab_runs: usize,
    /// The interval it reported, if it measured a block.
    reported: Option<(f64, f64)>,
}

/// An A/B judged against `floor` when there is a valid one, else against
/// the bound first, measuring the floor only when the bound cannot decide.
fn bounded_ab(
    stream: &mut Stream,
    policy: Policy,
    warmups: usize,
    floor: Option<Floor>,
    theta: f64,
) -> Bounded {
    let before = stream.taken;
    let mut s = match floor {
        Some(f) => AbSchedule::new(policy, f, warmups),
        None => AbSchedule::against_bound(policy, warmups).expect("a policy with a bound"),
    };
    let mut floor_runs = 0;
    let mut measured = None;
    loop {
        let slot = s.slot();
        let t = stream.timed(slot.profile, theta);
        let next = match s.record(t).expect("trace times are valid") {
            Next::NeedsFloor => {
                let at = stream.taken;
                let f = measure_floor(stream, policy, warmups);
                floor_runs += stream.taken - at;
                measured = Some(f.map(|(floor, _)| floor));
                match f {
                    Some((f, contention)) => {
                        s.resume(f, contention).expect("waiting for its floor").next
                    }
                    // No usable floor: inconclusive, nothing staged.
                    None => {
                        return Bounded {
                            kind: VerdictKind::Inconclusive,
                            noisy: true,
                            measured,
                            ab_runs: stream.taken - before - floor_runs,
                            // As the daemon records it: where the pairs
                            // stood against the bound.
                            reported: s.without_floor().map(|d| d.reported),
                        };
                    }
                }
            }
            next => next,
        };
        if let Next::Decided(d) = next {
            return Bounded {
                kind: d.kind,
                noisy: d.too_noisy.is_some(),
                measured,
                ab_runs: stream.taken - before - floor_runs,
                reported: (d.pairs > 0).then_some(d.reported),
            };
        }
    }
}

/// A floor as the daemon measures one, and its runs' typical contention;
/// `None` when the machine was too noisy (interference, or a floor above
/// `max_floor`) or the runs gave none.
fn measure_floor(
    stream: &mut Stream,
    policy: Policy,
    warmups: usize,
) -> Option<(Floor, Option<f64>)> {
    let mut s = FloorSchedule::new(policy, warmups);
    loop {
        let slot = s.slot();
        let t = stream.timed(slot.profile, 0.0);
        match s.record(t).expect("trace times are valid") {
            FloorNext::Run | FloorNext::Discarded(_) => {}
            FloorNext::Done(FloorEnd::Measured {
                floor, contention, ..
            }) => {
                return match policy.max_floor {
                    Some(max) if floor.value > max => None,
                    _ => Some((floor.value, contention)),
                };
            }
            FloorNext::Done(_) => return None,
        }
    }
}

/// One A/B: its verdict, whether the machine decided it, and the 90%
/// interval it reported. Every protocol reports one, since the targets it
/// is held to include that interval's coverage: ours its repeated
/// confidence interval, the fixed paired protocol the Student interval of
/// its blocks at 90% (widened to the floor as ours is), the median habit
/// the distribution-free interval of the shift between its two samples.
fn ab(
    stream: &mut Stream,
    judge: Judge,
    policy: Policy,
    warmups: usize,
    (floor, contention): (Floor, Option<f64>),
    theta: f64,
) -> (VerdictKind, bool, Option<(f64, f64)>) {
    match judge {
        Judge::Ours(p) => {
            let mut s = AbSchedule::new(p.against_floor(contention), floor, warmups);
            loop {
                let slot = s.slot();
                let t = stream.timed(slot.profile, theta);
                if let Next::Decided(d) = s.record(t).expect("trace times are valid") {
                    return (
                        d.kind,
                        d.too_noisy.is_some(),
                        (d.pairs > 0).then_some(d.reported),
                    );
                }
            }
        }
        Judge::FixedPaired { pairs, alpha } => {
            // Our order and warmups; interfered blocks are not re-run.
            let _ = policy;
            for i in 0..2 * warmups {
                stream.timed(
                    if i % 2 == 0 {
                        Arm::Baseline
                    } else {
                        Arm::Candidate
                    },
                    theta,
                );
            }
            let mut x = Vec::with_capacity(pairs / 2);
            let mut block = Vec::with_capacity(2);
            for k in 0..pairs {
                let order = judge::pair_order(k);
                let a = stream.timed(order[0], theta).seconds_per_token;
                let b = stream.timed(order[1], theta).seconds_per_token;
                let pair = if order[0] == Arm::Baseline {
                    (a, b)
                } else {
                    (b, a)
                };
                block.push(pair);
                if block.len() == 2 {
                    let (p, q) = (block[0], block[1]);
                    x.push(0.5 * (p.1.ln() + q.1.ln()) - 0.5 * (p.0.ln() + q.0.ln()));
                    block.clear();
                }
            }
            (
                t_interval(&x, alpha, floor),
                false,
                Some(reported_t(&x, floor)),
            )
        }
        Judge::MedianOf { runs } => {
            let b: Vec<f64> = (0..runs)
                .map(|_| stream.timed(Arm::Baseline, theta).seconds_per_token)
                .collect();
            let c: Vec<f64> = (0..runs)
                .map(|_| stream.timed(Arm::Candidate, theta).seconds_per_token)
                .collect();
            let est = (median(&c) / median(&b)).ln();
            let f = floor.get();
            let kind = if est < -f {
                VerdictKind::Win
            } else if est > f {
                VerdictKind::Loss
            } else {
                VerdictKind::WithinNoise
            };
            (kind, false, Some(shift_interval(&b, &c)))
        }
    }
}

/// The 90% Student interval of a fixed number of blocks, widened to the
/// floor as ours is: what a fixed-sample protocol would report.
fn reported_t(x: &[f64], floor: Floor) -> (f64, f64) {
    use statrs::distribution::{ContinuousCDF, Normal, StudentsT};
    let m = x.len() as f64;
    let mean = x.iter().sum::<f64>() / m;
    let s = (x.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (m - 1.0)).sqrt();
    let level = orchestrator::judge::interval::REPORTED_CONFIDENCE;
    let tail = 1.0 - (1.0 - level) / 2.0;
    let t = StudentsT::new(0.0, 1.0, m - 1.0)
        .map(|d| d.inverse_cdf(tail))
        .unwrap_or(f64::INFINITY);
    let z = Normal::standard().inverse_cdf(tail);
    let half = (t * s).max(z * floor.get() / std::f64::consts::SQRT_2) / m.sqrt();
    (mean - half, mean + half)
}

/// The distribution-free interval for the shift of the candidate's log
/// times over the baseline's (Lehmann 1975, "Nonparametrics", §2.6): the
/// `k`-th smallest and largest of the `n·n` differences, `k` the largest
/// with `P(U < k) ≤ 5%` under the Mann-Whitney null, so it holds the shift
/// with at least 90% when the runs are exchangeable.
fn shift_interval(b: &[f64], c: &[f64]) -> (f64, f64) {
    let mut d: Vec<f64> = c
        .iter()
        .flat_map(|ci| b.iter().map(move |bj| ci.ln() - bj.ln()))
        .collect();
    d.sort_by(f64::total_cmp);
    thread_local! {
        static K: std::cell::RefCell<std::collections::HashMap<(usize, usize), usize>> =
            std::cell::RefCell::new(std::collections::HashMap::new());
    }
    let key = (b.len(), c.len());
    let k = K.with(|m| {
        *m.borrow_mut()
            .entry(key)
            .or_insert_with(|| mann_whitney_k(key.0, key.1, 0.05))
    });
    (d[k - 1], d[d.len() - k])
}

/// The largest `k ≥ 1` with `P(U ≤ k − 1) ≤ tail` for the Mann-Whitney
/// statistic of samples of `n` and `m` under the null (exact, by counting
/// the arrangements), or 1 when none is.
fn mann_whitney_k(n: usize, m: usize, tail: f64) -> usize {
    // ways[i][j][u]: arrangements of i and j values with statistic u.
    let most = n * m;
    let mut ways = vec![vec![vec![0f64; most + 1]; m + 1]; n + 1];
    for row in ways.iter_mut() {
        row[0][0] = 1.0;
    }
    for by_u in ways[0].iter_mut() {
        by_u[0] = 1.0;
    }
    for i in 1..=n {
        for j in 1..=m {
            for u in 0..=most {
                let a = if u >= j { ways[i - 1][j][u - j] } else { 0.0 };
                ways[i][j][u] = a + ways[i][j - 1][u];
            }
        }
    }
    let total: f64 = ways[n][m].iter().sum();
    let mut below = 0.0;
    let mut k = 1;
    for (u, w) in ways[n][m].iter().enumerate() {
        below += w / total;
        if below > tail + 1e-12 {
            break;
        }
        k = u + 1;
    }
    k.max(1)
}

fn median(v: &[f64]) -> f64 {
    judge::noise::median(v).unwrap_or(f64::NAN)
}

/// A fixed-sample t-interval on block statistics, widened to the floor as
/// ours is, classified against the floor.
fn t_interval(x: &[f64], alpha: f64, floor: Floor) -> VerdictKind {
    use statrs::distribution::{ContinuousCDF, StudentsT};
    let m = x.len() as f64;
    let mean = x.iter().sum::<f64>() / m;
    let s = (x.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (m - 1.0)).sqrt();
    let t = StudentsT::new(0.0, 1.0, m - 1.0)
        .map(|d| d.inverse_cdf(1.0 - alpha / 2.0))
        .unwrap_or(f64::INFINITY);
    let z = statrs::distribution::Normal::standard().inverse_cdf(1.0 - alpha / 2.0);
    let half = (t * s).max(z * floor.get() / std::f64::consts::SQRT_2) / m.sqrt();
    judge::classify((mean - half, mean + half), floor).unwrap_or(VerdictKind::Inconclusive)
}
