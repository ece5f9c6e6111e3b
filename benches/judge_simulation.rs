//! Simulation benchmark of the judgement: prints the Markdown table for the README.
//!
//! `cargo bench --bench judge_simulation` (about a minute on two cores).
//! `JUDGE_SIM_TRIALS` overrides the trials per effect (default 10000).

use std::time::Instant;

use orchestrator::judge::simulate::{self, Config, NoiseModel, Protocol};
use orchestrator::judge::{Floor, Policy};

fn main() {
    // `cargo bench` passes `--bench`; any other argument is a filter we do not have.
    let trials = std::env::var("JUDGE_SIM_TRIALS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000);
    let policy = Policy::default();
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
    // Scaled-up versions of today's habits, to find the cheapest fixed
    // sample that meets the same targets.
    for runs in [15, 20, 30, 40, 60] {
        protocols.push(Protocol::Welch {
            runs,
            warmups: 1,
            alpha: 0.05,
        });
    }
    for pairs in [10, 20, 30, 40, 60] {
        protocols.push(Protocol::FixedPaired {
            pairs,
            warmups_per_arm: 1,
            alpha: 0.10,
        });
    }
    // Tuning grid, for the record of how the default policy was chosen.
    if std::env::var_os("JUDGE_SIM_GRID").is_some() {
        protocols.clear();
        for confidence in [0.70, 0.80, 0.90] {
            for (min_pairs, max_pairs) in [(4, 40), (6, 40), (6, 50)] {
                let policy = Policy::new(
                    confidence.try_into().expect("valid confidence"),
                    min_pairs,
                    max_pairs,
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
    }
    let config = Config {
        seed: 20_260_529,
        trials,
        model: NoiseModel::FIGURES,
        aa_pairs: 20,
        min_floor: Floor::try_from(0.005).expect("valid floor"),
        protocols,
        threads: std::thread::available_parallelism().map_or(2, |n| n.get()),
    };
    let started = Instant::now();
    let report = simulate::run(config);
    println!("{}", report.to_markdown());
    eprintln!("simulated in {:.1} s", started.elapsed().as_secs_f64());
}
