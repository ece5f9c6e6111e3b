//! The simulation's summary numbers and the Markdown table for the README.

use std::fmt::Write as _;

use orchestrator::vocab::VerdictKind;

use super::simulate::{Protocol, Report, Tally};

/// Index of each effect in [`Report::effects`].
const AA: usize = 0;
const NEG_HALF: usize = 1;
const POWER: [(usize, VerdictKind); 4] = [
    (3, VerdictKind::Win),
    (4, VerdictKind::Loss),
    (5, VerdictKind::Win),
    (6, VerdictKind::Loss),
];

/// One protocol's headline numbers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Summary {
    pub false_win: f64,
    pub false_loss: f64,
    /// Wins at a true effect of −floor/2: smaller than the floor, so refused.
    pub sub_floor_win: f64,
    /// The least power over ±2×floor and ±10%.
    pub min_power: f64,
    pub power: [f64; 4],
    /// Mean runs per decision over all seven effects, equally weighted.
    pub mean_runs: f64,
}

impl Summary {
    /// The error targets: false wins ≤ 1%, power ≥ 90%.
    pub fn meets_error_targets(&self) -> bool {
        self.false_win <= 0.01 && self.min_power >= 0.90
    }
}

impl Report {
    pub fn summary(&self, p: usize) -> Summary {
        let t = &self.tallies[p];
        let power = POWER.map(|(e, kind)| {
            let c = &t[e];
            c.rate(if kind == VerdictKind::Win {
                c.win
            } else {
                c.loss
            })
        });
        Summary {
            false_win: t[AA].rate(t[AA].win),
            false_loss: t[AA].rate(t[AA].loss),
            sub_floor_win: t[NEG_HALF].rate(t[NEG_HALF].win),
            min_power: power.iter().copied().fold(1.0, f64::min),
            power,
            mean_runs: t.iter().map(Tally::mean_runs).sum::<f64>() / t.len() as f64,
        }
    }

    /// The cheapest fixed-sample protocol meeting the error targets, if any.
    pub fn cheapest_fixed(&self) -> Option<usize> {
        self.cheapest_fixed_where(|_, s| s.meets_error_targets())
    }

    /// The cheapest fixed-sample protocol satisfying `keep`, if any.
    pub fn cheapest_fixed_where(
        &self,
        keep: impl Fn(&Protocol, &Summary) -> bool,
    ) -> Option<usize> {
        (0..self.tallies.len())
            .filter(|&p| {
                let proto = &self.config.protocols[p];
                proto.is_fixed() && keep(proto, &self.summary(p))
            })
            .min_by(|&a, &b| {
                self.summary(a)
                    .mean_runs
                    .total_cmp(&self.summary(b).mean_runs)
            })
    }

    /// The whole report as Markdown.
    pub fn to_markdown(&self) -> String {
        let c = &self.config;
        let m = &c.model;
        let pct = |v: f64| format!("{:.1}%", 100.0 * v);
        let mut s = String::new();
        let _ = writeln!(
            s,
            "Noise per run: s/token = {} · exp(N(0, {}²)), slowed by U({:.0}%, {:.0}%) in {:.0}% of runs; \
             drift {:+.2}% per run within an A/B. \
             Population noise floor F = {:.2}% (scaled MAD of A/A pair log ratios). \
             Each trial re-estimates the floor from {} A/A pairs (min floor {:.1}%); \
             that refresh costs {} runs per live profile and is **not** in the run counts below. \
             {} trials per effect, seed {}.\n",
            m.base_spt,
            m.body_sigma,
            100.0 * m.spike.0,
            100.0 * m.spike.1,
            100.0 * m.spike_prob,
            100.0 * m.drift_per_run,
            100.0 * self.floor.exp_m1(),
            c.aa_pairs,
            100.0 * c.min_floor.relative(),
            2 * c.aa_pairs + 2,
            c.trials,
            c.seed,
        );
        s.push_str(
            "| protocol | runs/decision | false win (A/A) | false loss (A/A) | win at −F/2 | \
             power −2F | power +2F | power −10% | power +10% | error targets |\n\
             |---|---:|---:|---:|---:|---:|---:|---:|---:|---|\n",
        );
        for p in 0..self.tallies.len() {
            let sm = self.summary(p);
            let _ = writeln!(
                s,
                "| {} | {:.1} | {} | {} | {} | {} | {} | {} | {} | {} |",
                c.protocols[p].label(),
                sm.mean_runs,
                pct(sm.false_win),
                pct(sm.false_loss),
                pct(sm.sub_floor_win),
                pct(sm.power[0]),
                pct(sm.power[1]),
                pct(sm.power[2]),
                pct(sm.power[3]),
                if sm.meets_error_targets() {
                    "met"
                } else {
                    "**not met**"
                },
            );
        }
        s.push_str("\nRuns per decision count every engine run of the A/B, warmups included, averaged over the seven effects with equal weight.\n");
        for p in (0..self.tallies.len()).filter(|&p| !c.protocols[p].is_fixed()) {
            let _ = writeln!(
                s,
                "\nVerdicts of {}:\n\n| true effect | win | loss | within_noise | inconclusive | mean runs |\n|---|---:|---:|---:|---:|---:|",
                c.protocols[p].label()
            );
            for (e, t) in self.effects.iter().zip(&self.tallies[p]) {
                let _ = writeln!(
                    s,
                    "| {} ({:+.2}%) | {} | {} | {} | {} | {:.1} |",
                    e.name,
                    100.0 * e.theta.exp_m1(),
                    pct(t.rate(t.win)),
                    pct(t.rate(t.loss)),
                    pct(t.rate(t.within_noise)),
                    pct(t.rate(t.inconclusive)),
                    t.mean_runs()
                );
            }
        }
        s.push_str("\nTargets:\n\n");
        for p in (0..self.tallies.len()).filter(|&p| !c.protocols[p].is_fixed()) {
            let sm = self.summary(p);
            let _ = writeln!(
                s,
                "- {}: false win {} (≤ 1%: {}), least power {} (≥ 90%: {})",
                c.protocols[p].label(),
                pct(sm.false_win),
                yes(sm.false_win <= 0.01),
                pct(sm.min_power),
                yes(sm.min_power >= 0.90),
            );
            // Three readings of "the cheapest fixed-sample protocol that
            // reaches the same false-win rate and power", from the most to
            // the least favourable to the fixed protocols.
            let readings: [(&str, Option<usize>); 3] = [
                ("meeting the targets (≤ 1%, ≥ 90%)", self.cheapest_fixed()),
                (
                    "meeting the targets with our decision rule (interval vs floor)",
                    self.cheapest_fixed_where(|proto, f| {
                        matches!(proto, Protocol::FixedPaired { .. }) && f.meets_error_targets()
                    }),
                ),
                (
                    "matching our measured false-win rate (+0.1 point) and least power",
                    self.cheapest_fixed_where(|_, f| {
                        f.false_win <= sm.false_win + 0.001 && f.min_power >= sm.min_power
                    }),
                ),
            ];
            for (reading, cheapest) in readings {
                match cheapest {
                    Some(f) => {
                        let fr = self.summary(f).mean_runs;
                        let _ = writeln!(
                            s,
                            "  - cheapest fixed protocol {reading}: {} at {:.1} runs; ours {:.1}, ratio {:.2} (≤ 0.50: {})",
                            c.protocols[f].label(),
                            fr,
                            sm.mean_runs,
                            sm.mean_runs / fr,
                            yes(sm.mean_runs <= 0.5 * fr),
                        );
                    }
                    None => {
                        let _ = writeln!(
                            s,
                            "  - no fixed protocol in the table qualifies ({reading})"
                        );
                    }
                }
            }
        }
        s
    }
}

fn yes(b: bool) -> &'static str {
    if b { "met" } else { "**not met**" }
}
