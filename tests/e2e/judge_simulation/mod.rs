//! The judge simulation's tests. The simulation lives beside its bench
//! (`benches/judge_simulation/`), whose `harness = false` program runs no
//! `#[test]`; this module includes the same files, so `cargo test` does.

#[path = "../../../benches/judge_simulation/simulate.rs"]
#[expect(
    dead_code,
    reason = "the bench's driver uses the rest (the protocol search); these tests need only part"
)]
mod simulate;
#[path = "../../../benches/judge_simulation/table.rs"]
mod table;

use orchestrator::judge::{Floor, Policy};
use orchestrator::vocab::VerdictKind;
use rand::SeedableRng;
use rand::rngs::StdRng;
use simulate::{Config, NoiseModel, Protocol, run, welch};

fn small(trials: u64) -> Config {
    Config {
        seed: 11,
        trials,
        model: NoiseModel::FIGURES,
        aa_pairs: 20,
        population_pairs: 20_000,
        min_floor: Floor::try_from(0.005).unwrap(),
        protocols: vec![
            Protocol::Sequential {
                policy: Policy::default(),
                warmups_per_arm: 1,
                confirm: true,
            },
            Protocol::MedianOf { runs: 3 },
            Protocol::Welch {
                runs: 10,
                warmups: 0,
                alpha: 0.05,
            },
        ],
        threads: 2,
    }
}

#[test]
fn seeded_runs_are_identical_and_the_table_is_markdown() {
    let a = run(small(30));
    let b = run(small(30));
    assert_eq!(a, b);
    let md = a.to_markdown();
    assert!(md.contains("| protocol | runs/decision |"), "{md}");
    assert!(md.contains("median of 3 per arm"));
    assert!(md.contains("Targets:"));
    // Every cell ran every trial.
    assert!(a.tallies.iter().flatten().all(|t| t.trials == 30));
}

#[test]
fn the_population_floor_reflects_the_body_not_the_spikes() {
    // Pairs of runs with a 2% lognormal body: σ ≈ 2.83%; spikes add a little.
    let f = NoiseModel::FIGURES.population_floor(1, 50_000);
    assert!((0.028..0.036).contains(&f), "{f}");
}

#[test]
fn ours_beats_the_median_of_three_on_false_wins() {
    let r = run(small(200));
    let (ours, median3) = (r.summary(0), r.summary(1));
    assert!(median3.false_win >= 0.02, "{median3:?}");
    assert!(ours.false_win < 0.01, "{ours:?}");
    assert_eq!(r.summary(2).mean_runs, 20.0);
    assert_eq!(median3.mean_runs, 6.0);
}

#[test]
fn welch_matches_a_worked_example() {
    // Means 3 and 5, both variances 2.5, n = 5: t = 2, df = 8, p = 0.0805.
    let b = [1.0, 2.0, 3.0, 4.0, 5.0];
    let c = [3.0, 4.0, 5.0, 6.0, 7.0];
    let f = Floor::try_from(0.01).unwrap();
    assert_eq!(welch(&b, &c, 0.10, f), VerdictKind::Loss);
    assert_eq!(welch(&b, &c, 0.05, f), VerdictKind::WithinNoise);
    assert_eq!(welch(&c, &b, 0.10, f), VerdictKind::Win);
}

#[test]
fn noise_spikes_only_slow_runs_down() {
    let m = NoiseModel {
        body_sigma: 1e-9,
        spike_prob: 0.5,
        ..NoiseModel::FIGURES
    };
    let mut rng = StdRng::seed_from_u64(5);
    let runs: Vec<f64> = (0..400)
        .map(|_| m.run(&mut rng, 0.0) / m.base_spt)
        .collect();
    assert!(runs.iter().all(|r| (0.999..1.31).contains(r)));
    let spiked = runs.iter().filter(|r| **r > 1.09).count();
    assert!((150..250).contains(&spiked), "{spiked}");
}
