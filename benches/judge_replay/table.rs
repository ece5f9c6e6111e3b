//! Tallies of replayed decisions, the targets they are held to, and the
//! Markdown the README quotes.

use orchestrator::judge::Policy;
use orchestrator::vocab::VerdictKind;

use super::replay::{Outcome, true_floor};
use super::trace::Trace;

/// The decisions of one (trace, effect) cell.
#[derive(Debug, Clone)]
pub struct Cell {
    pub label: String,
    pub theta: f64,
    pub n: usize,
    single: [usize; 4],
    confirmed_win: usize,
    noisy: usize,
    runs: f64,
    ab_runs: f64,
    /// Reported intervals, and those that held the injected effect.
    intervals: usize,
    covered: usize,
}

/// Index of a statistical verdict in the tallies.
fn index(kind: VerdictKind) -> usize {
    match kind {
        VerdictKind::Win => 0,
        VerdictKind::Loss => 1,
        VerdictKind::WithinNoise => 2,
        _ => 3,
    }
}

impl Cell {
    pub fn new(label: String, theta: f64) -> Cell {
        Cell {
            label,
            theta,
            n: 0,
            single: [0; 4],
            confirmed_win: 0,
            noisy: 0,
            runs: 0.0,
            ab_runs: 0.0,
            intervals: 0,
            covered: 0,
        }
    }

    pub fn add(&mut self, o: &Outcome) {
        self.n += 1;
        self.single[index(o.single)] += 1;
        self.confirmed_win += usize::from(o.confirmed == VerdictKind::Win);
        self.noisy += usize::from(o.noisy);
        self.runs += o.runs;
        self.ab_runs += o.ab_runs;
        self.intervals += o.intervals;
        self.covered += o.covered;
    }

    /// The share of reported intervals that held the injected effect, and
    /// its Wilson interval; `None` when no A/B reported one.
    pub fn coverage(&self) -> Option<(f64, (f64, f64))> {
        (self.intervals > 0).then(|| {
            (
                self.covered as f64 / self.intervals as f64,
                wilson(self.covered, self.intervals),
            )
        })
    }

    pub fn rate(&self, kind: VerdictKind) -> f64 {
        self.single[index(kind)] as f64 / self.n as f64
    }

    pub fn confirmed_win(&self) -> f64 {
        self.confirmed_win as f64 / self.n as f64
    }

    pub fn wilson(&self, count: usize) -> (f64, f64) {
        wilson(count, self.n)
    }

    pub fn runs_per_decision(&self) -> f64 {
        self.runs / self.n as f64
    }

    pub fn ab_runs_per_decision(&self) -> f64 {
        self.ab_runs / self.n as f64
    }

    fn is_aa(&self) -> bool {
        self.theta == 0.0
    }
}

/// The Wilson score interval at 95% (Wilson 1927, "Probable inference, the
/// law of succession, and statistical inference", JASA 22).
pub fn wilson(k: usize, n: usize) -> (f64, f64) {
    if n == 0 {
        return (0.0, 1.0);
    }
    let z = 1.959_963_984_540_054f64;
    let (k, n) = (k as f64, n as f64);
    let p = k / n;
    let d = 1.0 + z * z / n;
    let c = (p + z * z / (2.0 * n)) / d;
    let h = z * (p * (1.0 - p) / n + z * z / (4.0 * n * n)).sqrt() / d;
    ((c - h).max(0.0), (c + h).min(1.0))
}

/// The targets of the judge issue, per trace.
#[derive(Debug, Clone, Copy)]
pub struct Targets {
    pub confirmed_false_win: f64,
    pub confirmed_false_win_upper: f64,
    pub single_false_win: f64,
    pub false_loss: f64,
    pub power_two_floors: f64,
    /// The least share of reported intervals that hold the injected
    /// effect: the level they claim.
    pub coverage: f64,
}

impl Default for Targets {
    fn default() -> Targets {
        Targets {
            confirmed_false_win: 0.01,
            confirmed_false_win_upper: 0.02,
            single_false_win: 0.05,
            false_loss: 0.05,
            power_two_floors: 0.90,
            coverage: orchestrator::judge::interval::REPORTED_CONFIDENCE,
        }
    }
}

impl Targets {
    /// Every target the cells of one trace miss, each naming the trace.
    ///
    /// On a trace noisier than `max_noise_floor` the daemon must not decide
    /// at all: there the power target is replaced by "at least 90% of A/As
    /// end inconclusive, the machine too noisy", and the false-win targets
    /// stand.
    pub fn check(&self, t: &Trace, policy: Policy, cells: &[Cell]) -> Vec<String> {
        let trace = t.name.as_str();
        let mut missed = Vec::new();
        let too_noisy = too_noisy(t, policy);
        for c in cells {
            if let Some((share, (lo, hi))) = c.coverage()
                && share < self.coverage
            {
                missed.push(format!(
                    "{trace}, {}: the reported intervals held the injected effect in {:.1}% [{:.1}, {:.1}] of A/Bs < {:.0}%, the level they claim",
                    c.label,
                    100.0 * share,
                    100.0 * lo,
                    100.0 * hi,
                    100.0 * self.coverage
                ));
            }
            if c.is_aa() {
                let cw = c.confirmed_win();
                let (_, up) = c.wilson(c.confirmed_win);
                if cw > self.confirmed_false_win || up > self.confirmed_false_win_upper {
                    missed.push(format!(
                        "{trace}, {}: confirmed false wins {:.2}% (Wilson upper {:.2}%) > {:.0}% ({:.0}%)",
                        c.label,
                        100.0 * cw,
                        100.0 * up,
                        100.0 * self.confirmed_false_win,
                        100.0 * self.confirmed_false_win_upper
                    ));
                }
                for (kind, limit, what) in [
                    (
                        VerdictKind::Win,
                        self.single_false_win,
                        "single A/B false wins",
                    ),
                    (VerdictKind::Loss, self.false_loss, "false losses"),
                ] {
                    let rate = c.rate(kind);
                    if rate > limit {
                        missed.push(format!(
                            "{trace}, {}: {what} {:.2}% > {:.0}%",
                            c.label,
                            100.0 * rate,
                            100.0 * limit
                        ));
                    }
                }
            }
        }
        if too_noisy {
            if let Some(c) = cells.iter().find(|c| c.label == "A/A") {
                let share = c.noisy as f64 / c.n as f64;
                if share < self.power_two_floors {
                    missed.push(format!(
                        "{trace}: the machine is too noisy to judge (its noise above max_noise_floor, or most of its blocks contended beyond max_contention_rise), but only {:.1}% of A/As ended `inconclusive` for a noisy machine (< {:.0}%)",
                        100.0 * share,
                        100.0 * self.power_two_floors
                    ));
                }
            }
            return missed;
        }
        for (label, kind) in [("−2F", VerdictKind::Win), ("+2F", VerdictKind::Loss)] {
            if let Some(c) = cells.iter().find(|c| c.label == label) {
                let p = c.rate(kind);
                if p < self.power_two_floors {
                    missed.push(format!(
                        "{trace}, {label}: power {:.1}% < {:.0}%",
                        100.0 * p,
                        100.0 * self.power_two_floors
                    ));
                }
            }
        }
        missed
    }
}

/// Whether the daemon must refuse to judge on this trace: its noise is
/// above `max_noise_floor`, or most of its blocks would be re-run for
/// contention.
pub fn too_noisy(t: &Trace, policy: Policy) -> bool {
    policy
        .max_floor
        .is_some_and(|max| true_floor(t) > max.get())
        || contended_block_share(t, policy.max_contention_rise) > 0.5
}

/// The share of four-run windows (a block) of the trace with a run
/// contended beyond `rise` over the trace's median contention (the floor's
/// typical run): where most blocks would be re-run, the machine is too
/// unsteady for the daemon to judge, whatever the judge. 0 for a trace
/// without a `contention` column.
pub fn contended_block_share(t: &Trace, rise: Option<f64>) -> f64 {
    let readings: Vec<f64> = t.runs.iter().filter_map(|r| r.contention).collect();
    let reference = orchestrator::judge::noise::median(&readings);
    let w: Vec<bool> = t
        .runs
        .windows(4)
        .map(|w| {
            let timed: Vec<_> = w
                .iter()
                .map(|r| orchestrator::judge::Timed {
                    seconds_per_token: r.seconds_per_token,
                    contention: r.contention,
                })
                .collect();
            orchestrator::judge::interference::interfered(&timed, reference, rise).is_some()
        })
        .collect();
    w.iter().filter(|&&b| b).count() as f64 / w.len().max(1) as f64
}

/// What a decision costs, averaged over the A/A and ±2-floor cells of every
/// trace: all runs with the floors' (a floor per A/B), and the A/B runs
/// alone (first A/B and confirmation), which is where protocols differ.
#[derive(Debug, Clone, Copy)]
pub struct Cost {
    pub all: f64,
    pub ab: f64,
}

pub fn cost(results: &[Vec<Cell>]) -> Cost {
    let picked: Vec<&Cell> = results
        .iter()
        .flatten()
        .filter(|c| ["A/A", "−2F", "+2F"].contains(&c.label.as_str()))
        .collect();
    let n = picked.len().max(1) as f64;
    Cost {
        all: picked.iter().map(|c| c.runs_per_decision()).sum::<f64>() / n,
        ab: picked.iter().map(|c| c.ab_runs_per_decision()).sum::<f64>() / n,
    }
}

/// The cost of a decision at every injected effect, per trace: all runs
/// (a floor per A/B), and the A/B runs alone in parentheses.
pub fn cost_by_effect(traces: &[Trace], results: &[Vec<Cell>]) {
    let Some(first) = results.first() else {
        return;
    };
    let labels: Vec<&str> = first
        .iter()
        .map(|c| c.label.as_str())
        .filter(|l| !l.contains("shared"))
        .collect();
    println!("| trace | {} |", labels.join(" | "));
    println!("|---|{}", "---|".repeat(labels.len()));
    for (t, cells) in traces.iter().zip(results) {
        let row: Vec<String> = labels
            .iter()
            .map(|l| match cells.iter().find(|c| c.label == *l) {
                Some(c) => format!(
                    "{:.1} ({:.1})",
                    c.runs_per_decision(),
                    c.ab_runs_per_decision()
                ),
                None => "-".into(),
            })
            .collect();
        println!("| {} | {} |", t.name, row.join(" | "));
    }
    println!();
}

pub fn traces(traces: &[Trace], rise: Option<f64>) {
    println!(
        "| trace | runs | median s/token | true floor | lag-1 autocorrelation | runs with pressure > 0.5 | blocks with a run contended beyond max_contention_rise |"
    );
    println!("|---|---|---|---|---|---|---|");
    for t in traces {
        let pressed = t
            .runs
            .iter()
            .filter(|r| r.pressure.is_some_and(|p| p > 0.5))
            .count();
        println!(
            "| {} | {} | {:.4} | {:.2}% | {:.2} | {} | {} |",
            t.name,
            t.runs.len(),
            t.median(),
            100.0 * true_floor(t).exp_m1(),
            t.lag1(),
            pressed,
            if t.runs.iter().any(|r| r.contention.is_some()) {
                format!("{:.0}%", 100.0 * contended_block_share(t, rise))
            } else {
                "not recorded".into()
            }
        );
    }
    println!();
}

fn pct(x: f64) -> String {
    format!("{:.1}%", 100.0 * x)
}

fn pct_ci(c: &Cell, count: usize) -> String {
    let (lo, hi) = c.wilson(count);
    format!(
        "{:.1}% [{:.1}, {:.1}]",
        100.0 * count as f64 / c.n as f64,
        100.0 * lo,
        100.0 * hi
    )
}

pub fn cells(trace: &Trace, label: &str, cells: &[Cell]) {
    println!("### {} ({label})\n", trace.name);
    println!(
        "| candidate | win | loss | within noise | inconclusive (too noisy) | confirmed win | 90% interval holds the effect | runs per decision (A/B runs) |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for c in cells {
        println!(
            "| {} | {} | {} | {} | {} ({}) | {} | {} | {:.1} ({:.1}) |",
            c.label,
            pct_ci(c, c.single[0]),
            pct_ci(c, c.single[1]),
            pct(c.rate(VerdictKind::WithinNoise)),
            pct(c.rate(VerdictKind::Inconclusive)),
            pct(c.noisy as f64 / c.n as f64),
            pct_ci(c, c.confirmed_win),
            match c.coverage() {
                Some((share, (lo, hi))) => format!(
                    "{:.1}% [{:.1}, {:.1}] of {}",
                    100.0 * share,
                    100.0 * lo,
                    100.0 * hi,
                    c.intervals
                ),
                None => "none reported".into(),
            },
            c.runs_per_decision(),
            c.ab_runs_per_decision()
        );
    }
    println!();
}

pub fn grid_row(
    label: &str,
    results: &[Vec<Cell>],
    targets: &Targets,
    traces: &[Trace],
    policy: Policy,
) {
    let all: Vec<&Cell> = results.iter().flatten().collect();
    let aa = || all.iter().filter(|c| c.is_aa());
    let worst = |f: &dyn Fn(&Cell) -> f64, it: &mut dyn Iterator<Item = &&Cell>| {
        it.map(|c| f(c)).fold(0.0f64, f64::max)
    };
    let cw = worst(&|c| c.confirmed_win(), &mut aa());
    let fw = worst(&|c| c.rate(VerdictKind::Win), &mut aa());
    let fl = worst(&|c| c.rate(VerdictKind::Loss), &mut aa());
    let power = all
        .iter()
        .filter_map(|c| match c.label.as_str() {
            "−2F" => Some(c.rate(VerdictKind::Win)),
            "+2F" => Some(c.rate(VerdictKind::Loss)),
            _ => None,
        })
        .fold(1.0f64, f64::min);
    let ok = traces
        .iter()
        .zip(results)
        .all(|(t, c)| targets.check(t, policy, c).is_empty());
    let c = cost(results);
    println!(
        "| {label} | {:.1} ({:.1}) | {} | {} | {} | {} | {} |",
        c.all,
        c.ab,
        if ok { "yes" } else { "no" },
        pct(cw),
        pct(fw),
        pct(fl),
        pct(power)
    );
}
