//! The run order of a paired A/B: warmups, then pairs in ABBA blocks whose
//! orientation alternates, `B C C B | C B B C | B C C B | ...`.
//!
//! Within a block the two pairs run in opposite orders, so under a linear
//! drift of `d` per run one pair's log ratio gains `d` and the other's loses
//! it: every whole block cancels it exactly (the ABBA counterbalancing of
//! crossover designs; Cochran & Cox 1957, "Experimental Designs", ch. 4).
//! The sequential test therefore decides only after whole blocks.
//!
//! Blocks alternate ABBA and BAAB because one orientation alone is not
//! symmetric between the arms: the arm in the middle runs twice back to
//! back, the other at the block's two ends. Interference on a shared machine
//! comes in bursts longer than one run (on tinyk3's bench, consecutive runs'
//! log times correlate at 0.4-0.8), so a burst slows both middle runs alike
//! while it slows only one end run. With the v2 statistic, which kept an
//! arm's faster run when its two disagreed, that made A/A runs read `loss`
//! 37 times and `win` 10 times in two 300-cycle soaks with the candidate
//! always in the middle. The statistic now averages both arms alike and
//! discards a discordant block whole ([`super::interval`]), which is
//! unbiased in either orientation; blocks still alternate, because each arm
//! then sits in the middle of every other block and two blocks, `ABBA
//! BAAB`, are the start of the Prouhet-Thue-Morse sequence, which also
//! cancels quadratic drift.

use crate::vocab::Arm;

/// One run the measurer should do next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    /// Which profile to run: [`Arm::Baseline`] or [`Arm::Candidate`].
    pub profile: Arm,
    /// A warmup run: measured for the ledger, never judged.
    pub warmup: bool,
    /// The pair this run belongs to (`None` for warmups).
    pub pair: Option<usize>,
}

impl Slot {
    /// The arm to record in the ledger: warmups are marked as such.
    pub fn ledger_arm(&self) -> Arm {
        if self.warmup {
            Arm::Warmup
        } else {
            self.profile
        }
    }
}

/// The two profiles of pair `pair`, in run order: baseline first in the
/// first pair of an ABBA block and the second of a BAAB one.
pub fn pair_order(pair: usize) -> [Arm; 2] {
    let second_in_block = pair % 2 == 1;
    let baab_block = (pair / 2) % 2 == 1;
    if second_in_block == baab_block {
        [Arm::Baseline, Arm::Candidate]
    } else {
        [Arm::Candidate, Arm::Baseline]
    }
}

/// The run at position `run` (0-based, warmups included) of an A/B with
/// `warmups_per_arm` discarded warmups per arm, alternating baseline first.
pub fn slot(warmups_per_arm: usize, run: usize) -> Slot {
    let warm = 2 * warmups_per_arm;
    if run < warm {
        let profile = if run % 2 == 0 {
            Arm::Baseline
        } else {
            Arm::Candidate
        };
        return Slot {
            profile,
            warmup: true,
            pair: None,
        };
    }
    let k = (run - warm) / 2;
    Slot {
        profile: pair_order(k)[(run - warm) % 2],
        warmup: false,
        pair: Some(k),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The arms of the first `n` runs without warmups, `B` or `C` each.
    fn arms(n: usize) -> String {
        (0..n)
            .map(|r| match slot(0, r).profile {
                Arm::Baseline => 'B',
                _ => 'C',
            })
            .collect()
    }

    #[test]
    fn pairs_alternate_in_abba_blocks() {
        assert_eq!(arms(8), "BCCBCBBC");
        assert_eq!(slot(0, 5).pair, Some(2));
        // Each arm is in the middle of every other block.
        let seq = arms(16);
        let blocks: Vec<&str> = (0..4).map(|b| &seq[4 * b..4 * b + 4]).collect();
        assert_eq!(blocks, ["BCCB", "CBBC", "BCCB", "CBBC"]);
    }

    #[test]
    fn warmups_come_first_and_are_marked() {
        let s: Vec<Slot> = (0..6).map(|r| slot(2, r)).collect();
        assert!(
            s[..4]
                .iter()
                .all(|s| s.warmup && s.ledger_arm() == Arm::Warmup)
        );
        assert_eq!(s[0].profile, Arm::Baseline);
        assert_eq!(s[1].profile, Arm::Candidate);
        assert_eq!(
            s[4],
            Slot {
                profile: Arm::Baseline,
                warmup: false,
                pair: Some(0)
            }
        );
        assert_eq!(s[5].ledger_arm(), Arm::Candidate);
    }

    #[test]
    fn whole_blocks_cancel_linear_drift() {
        // Identical profiles whose log s/token drifts by 3% per run.
        let drift = |run: usize| 10f64.ln() + 0.03 * run as f64;
        let ratio = |k: usize| {
            let (b, c) = match pair_order(k) {
                [Arm::Baseline, _] => (2 * k, 2 * k + 1),
                _ => (2 * k + 1, 2 * k),
            };
            drift(c) - drift(b)
        };
        for blocks in 1..5 {
            let sum: f64 = (0..2 * blocks).map(ratio).sum();
            assert!(sum.abs() < 1e-12, "{blocks} blocks leave {sum}");
        }
        // Running baseline first every time would read the drift as a loss.
        assert!((ratio(0) - 0.03).abs() < 1e-12);
    }

    #[test]
    fn an_abba_baab_pair_of_blocks_cancels_quadratic_drift() {
        // The arms' run positions in the first two blocks, BCCB CBBC: equal
        // sums of positions and of their squares (Prouhet-Thue-Morse).
        let seq = arms(8);
        for power in [1, 2] {
            let sum = |arm: char| -> usize {
                seq.char_indices()
                    .filter(|&(_, a)| a == arm)
                    .map(|(run, _)| run.pow(power))
                    .sum()
            };
            assert_eq!(sum('B'), sum('C'), "power {power}");
        }
    }

    /// The block statistic's mean over `blocks` A/A blocks run in `order`,
    /// whose runs share interference bursts: a run starts a burst with
    /// probability 5%, a burst goes on to the next run with probability 60%
    /// and slows its runs by 20%, over a 2% log-normal body.
    fn bursty_aa_mean(order: fn(usize) -> [Arm; 2], blocks: usize) -> f64 {
        use crate::judge::interval::block_statistic;
        use rand::rngs::StdRng;
        use rand::{Rng, SeedableRng};
        use rand_distr::{Distribution, Normal};
        let mut rng = StdRng::seed_from_u64(11);
        let body: Normal<f64> = Normal::new(0.0, 0.02).unwrap();
        let mut burst = false;
        let mut sum = 0.0;
        for b in 0..blocks {
            let mut pairs = [(0.0, 0.0); 2];
            for (k, p) in pairs.iter_mut().enumerate() {
                for arm in order(2 * b + k) {
                    let go_on = if burst { 0.6 } else { 0.05 };
                    burst = rng.random::<f64>() < go_on;
                    let t = (body.sample(&mut rng) + if burst { 0.2 } else { 0.0 }).exp();
                    match arm {
                        Arm::Baseline => p.0 = t,
                        _ => p.1 = t,
                    }
                }
            }
            sum += block_statistic(pairs[0], pairs[1]);
        }
        sum / blocks as f64
    }

    #[test]
    fn bursts_that_span_two_runs_leave_the_averaged_block_statistic_unbiased() {
        let abba_only = |pair: usize| {
            if pair % 2 == 0 {
                [Arm::Baseline, Arm::Candidate]
            } else {
                [Arm::Candidate, Arm::Baseline]
            }
        };
        // With both arms averaged alike, a burst over a block's middle
        // slows one arm twice and a burst over its edge slows each arm
        // once, in either order: the A/A mean is zero within sampling
        // error (a block's σ is about 2.5%: 0.0001 is one SE). The v2
        // statistic, which kept an arm's faster run, leaned toward `loss`
        // by 0.75% under ABBA alone on the same bursts.
        let abba = bursty_aa_mean(abba_only, 100_000);
        let m = bursty_aa_mean(pair_order, 100_000);
        eprintln!("A/A block mean under bursts: ABBA only {abba:.5}, alternating {m:.5}");
        assert!(abba.abs() < 0.0004, "ABBA-only A/A mean {abba}");
        assert!(m.abs() < 0.0004, "alternating A/A mean {m}");
    }
}
