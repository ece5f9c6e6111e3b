//! The run order of a paired A/B: warmups, then pairs in ABBA blocks.
//!
//! Pair `k` runs baseline then candidate when `k` is even and candidate then
//! baseline when `k` is odd, so runs go `B C | C B | B C | C B ...`. Under a
//! linear drift of `d` per run (a heating chassis, a filling page cache) the
//! even pair's log ratio gains `+d` and the odd pair's loses `d`: every whole
//! block of two pairs cancels it exactly (the ABBA counterbalancing of
//! crossover designs; Cochran & Cox 1957, "Experimental Designs", ch. 4).
//! The sequential test therefore decides only after whole blocks.

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

/// The two profiles of pair `pair`, in run order.
pub fn pair_order(pair: usize) -> [Arm; 2] {
    if pair % 2 == 0 {
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

    #[test]
    fn pairs_alternate_in_abba_blocks() {
        let seq: String = (0..8)
            .map(|r| match slot(0, r).profile {
                Arm::Baseline => 'B',
                _ => 'C',
            })
            .collect();
        assert_eq!(seq, "BCCBBCCB");
        assert_eq!(slot(0, 5).pair, Some(2));
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
}
