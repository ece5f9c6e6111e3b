//! Simulation benchmark of the judgement: prints the Markdown table for the README.
//!
//! `cargo bench --bench judge_simulation` (a few minutes on two cores).
//! `JUDGE_SIM_TRIALS` overrides the trials per effect (default 10000) and
//! `JUDGE_SIM_SEED` the seed (default 20260529);
//! `JUDGE_SIM_GRID=1` prints instead the policy grid the default was chosen from;
//! `JUDGE_SIM_GRID_CONFIDENCE` and `JUDGE_SIM_GRID_MAX_PAIRS` (comma-separated)
//! replace its axes.
//!
//! The comparator of the cost target is searched, not picked: for each
//! fixed-sample family (today's habits scaled up, and our own decision rule
//! at a fixed size) the smallest size that meets the error targets under the
//! same noise, seed and trials; the cheapest of those is the comparator.

mod simulate;
mod table;

use std::time::Instant;

use orchestrator::judge::{Floor, Policy};
use simulate::{Config, NoiseModel, Protocol};
use table::Summary;

/// A number from the environment; `None` when unset or not a number.
fn env_number<T: std::str::FromStr>(name: &str) -> Option<T> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

/// A comma-separated list of numbers from the environment, or `default`.
fn env_list(name: &str, default: &[f64]) -> Vec<f64> {
    match std::env::var(name) {
        Ok(v) => v
            .split(',')
            .map(|x| {
                x.trim()
                    .parse()
                    .unwrap_or_else(|_| panic!("{name}: {x:?} is not a number"))
            })
            .collect(),
        Err(_) => default.to_vec(),
    }
}

fn main() {
    let trials = env_number("JUDGE_SIM_TRIALS").unwrap_or(10_000);
    let seed = env_number("JUDGE_SIM_SEED").unwrap_or(20_260_529);
    let grid = std::env::var_os("JUDGE_SIM_GRID").is_some();
    let policy = Policy::default();
    let base = Config {
        seed,
        trials,
        model: NoiseModel::FIGURES,
        aa_pairs: 20,
        population_pairs: 400_000,
        min_floor: Floor::try_from(0.005).expect("valid floor"),
        protocols: Vec::new(),
        threads: std::thread::available_parallelism().map_or(2, |n| n.get()),
    };
    let started = Instant::now();
    if grid {
        tuning_grid(&base, policy);
        eprintln!("simulated in {:.1} s", started.elapsed().as_secs_f64());
        return;
    }
    let (cheapest, comparator) = search_cheapest(&base);
    compare(&base, policy, cheapest, comparator);
    eprintln!("simulated in {:.1} s", started.elapsed().as_secs_f64());
}

/// Every confidence level against every pair budget, all from the least
/// minimum: the record of how the default policy was chosen.
fn tuning_grid(base: &Config, policy: Policy) {
    {
        // Tuning grid, for the record of how the default policy was chosen:
        // every level against every pair budget, all from the least minimum.
        let mut protocols = Vec::new();
        let confidences = env_list("JUDGE_SIM_GRID_CONFIDENCE", &[0.10, 0.20, 0.30, 0.40]);
        let budgets = env_list("JUDGE_SIM_GRID_MAX_PAIRS", &[6.0, 8.0, 10.0, 12.0, 16.0]);
        for confidence in confidences {
            for &max_pairs in &budgets {
                let policy = Policy::new(
                    confidence.try_into().expect("valid confidence"),
                    Policy::LEAST_MIN_PAIRS,
                    max_pairs as usize,
                    policy.min_floor,
                )
                .expect("valid policy");
                protocols.push(Protocol::Sequential {
                    policy,
                    warmups_per_arm: 1,
                    confirm: true,
                });
            }
        }
        let config = Config {
            protocols,
            ..base.clone()
        };
        println!("{}", simulate::run(config).to_markdown());
    }
}

/// A family of fixed-sample protocols: its name, the protocol at a size,
/// the sizes tried in order.
type Family = (&'static str, Box<dyn Fn(usize) -> Protocol>, Vec<usize>);

/// The search for the cheapest fixed-sample protocol meeting the targets,
/// printed as a table: the cheapest of each family, and the cheapest of all
/// with its mean runs per decision (the comparator of the cost target).
fn search_cheapest(base: &Config) -> (Vec<Protocol>, Option<(Protocol, f64)>) {
    println!("### The cheapest fixed-sample protocol, searched\n");
    println!(
        "Each family is tried at increasing sizes under the same noise, seed and \
         trials; the first size meeting false win ≤ 1% and power ≥ 90% (±2×floor, ±10%) \
         is kept.\n"
    );
    println!("| family | tried | smallest meeting the targets | runs | false win | least power |");
    println!("|---|---|---|---:|---:|---:|");
    let mut cheapest: Vec<Protocol> = Vec::new();
    let mut comparator: Option<(Protocol, f64)> = None;
    for (name, family, sizes) in families() {
        let (lo, hi) = (sizes[0], *sizes.last().expect("sizes"));
        let mut tried = 0;
        let found = simulate::cheapest_in_family(base, family, sizes, |_, _| tried += 1);
        match found {
            Some((p, s)) => {
                println!(
                    "| {name} | {lo}..{} | {} | {:.1} | {:.2}% | {:.1}% |",
                    lo + tried - 1,
                    p.label(),
                    s.mean_runs,
                    100.0 * s.false_win,
                    100.0 * s.min_power
                );
                if comparator.as_ref().is_none_or(|(_, r)| s.mean_runs < *r) {
                    comparator = Some((p.clone(), s.mean_runs));
                }
                cheapest.push(p);
            }
            None => println!("| {name} | {lo}..{hi} | none | | | |"),
        }
    }
    println!();
    (cheapest, comparator)
}

/// The fixed-sample habits searched: autotune's median, hyperfine's Welch
/// test, pyperf, and our own rule at a fixed size.
fn families() -> Vec<Family> {
    let mut families: Vec<Family> = vec![(
        "median of n per arm vs floor (autotune scripts)",
        Box::new(|runs| Protocol::MedianOf { runs }),
        (3..=30).collect(),
    )];
    for alpha in [0.01, 0.05, 0.10] {
        families.push((
            match alpha {
                a if a < 0.02 => "n per arm, Welch t 99% (hyperfine's habit)",
                a if a < 0.07 => "n per arm, Welch t 95% (hyperfine's habit)",
                _ => "n per arm, Welch t 90% (hyperfine's habit)",
            },
            Box::new(move |runs| Protocol::Welch {
                runs,
                warmups: 0,
                alpha,
            }),
            (4..=40).collect(),
        ));
    }
    families.push((
        "pyperf: p processes × (1 warmup + 3), t-test 95%",
        Box::new(|processes| Protocol::Pyperf {
            processes,
            values: 3,
        }),
        (2..=20).collect(),
    ));
    for alpha in [0.2, 0.5] {
        families.push((
            if alpha < 0.3 {
                "fixed ABBA pairs, 80% t-interval vs floor (our rule, fixed size)"
            } else {
                "fixed ABBA pairs, 50% t-interval vs floor (our rule, fixed size)"
            },
            Box::new(move |pairs| Protocol::FixedPaired {
                pairs,
                warmups_per_arm: 1,
                alpha,
            }),
            (4..=40).step_by(2).collect(),
        ));
    }
    families
}

/// Ours (with and without confirmation) against today's habits and the
/// cheapest fixed-sample protocols, under stationary noise and with drift.
fn compare(
    base: &Config,
    policy: Policy,
    cheapest: Vec<Protocol>,
    comparator: Option<(Protocol, f64)>,
) {
    let mut protocols = vec![
        Protocol::Sequential {
            policy,
            warmups_per_arm: 1,
            confirm: true,
        },
        Protocol::Sequential {
            policy,
            warmups_per_arm: 1,
            confirm: false,
        },
        // The three habits the issue names, as they are used today.
        Protocol::MedianOf { runs: 3 },
        Protocol::Welch {
            runs: 10,
            warmups: 0,
            alpha: 0.05,
        },
        Protocol::Pyperf {
            processes: 20,
            values: 3,
        },
    ];
    protocols.extend(cheapest);
    let config = Config {
        protocols,
        ..base.clone()
    };
    println!("### Stationary noise\n");
    let report = simulate::run(config.clone());
    println!("{}", report.to_markdown());
    let ours: Summary = report.summary(0);
    // The comparator is the search's: the cheapest size that met the
    // targets there. The table above re-simulates it on another random
    // stream, where a protocol found on the 1% boundary may land just above.
    if let Some((p, fr)) = comparator {
        println!(
            "**Cost target**: ours {:.2} runs per decision; cheapest fixed-sample protocol \
             meeting the targets (searched above): {} at {:.2}; ratio {:.3}; target ≤ 0.50: {}.\n",
            ours.mean_runs,
            p.label(),
            fr,
            ours.mean_runs / fr,
            if ours.mean_runs <= 0.5 * fr {
                "met"
            } else {
                "**not met**"
            }
        );
    }

    // A warming page cache: each run 0.1% faster than the one before. Not a
    // target of the issue; it shows what ABBA ordering buys.
    let drifting = Config {
        model: NoiseModel {
            drift_per_run: -0.001,
            ..NoiseModel::FIGURES
        },
        ..config
    };
    println!("### With drift (not part of the targets)\n");
    println!("{}", simulate::run(drifting).to_markdown());
}
