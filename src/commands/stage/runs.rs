//! A stage's evidence, run by run, as `stage show` prints it.

use crate::ledger::Run;

/// The pairs whose block the judge discarded (interference, discordance):
/// their runs are kept as evidence, but no verdict counts them.
pub(super) fn discarded_pairs(runs: &[Run]) -> Vec<u32> {
    let mut pairs: Vec<u32> = runs
        .iter()
        .filter(|r| r.discarded)
        .filter_map(|r| r.pair_index)
        .collect();
    pairs.sort_unstable();
    pairs.dedup();
    pairs
}

/// A run's marks after its row: evidence the verdict did not use.
fn run_marks(r: &Run) -> String {
    let mut marks = String::new();
    if r.refused {
        marks.push_str("  refused");
    }
    if r.discarded {
        marks.push_str("  discarded");
    }
    marks
}

pub(super) fn print_runs(runs: &[Run]) {
    println!(
        "  {:>5} {:<9} {:>4} {:>12} {:>6} {:<16} {:>4} {:>8}",
        "order", "arm", "pair", "s/token", "tokens", "output hash", "exit", "took"
    );
    for r in runs {
        println!(
            "  {:>5} {:<9} {:>4} {:>12} {:>6} {:<16} {:>4} {:>7.2}s{}",
            r.order_index,
            r.arm.as_str(),
            r.pair_index
                .map(|p| p.to_string())
                .unwrap_or_else(|| "-".into()),
            r.seconds_per_token
                .map(|x| format!("{x:.6}"))
                .unwrap_or_else(|| "-".into()),
            r.tokens
                .map(|t| t.to_string())
                .unwrap_or_else(|| "-".into()),
            r.output_hash.as_deref().unwrap_or("-"),
            r.exit_code
                .map(|c| c.to_string())
                .unwrap_or_else(|| "-".into()),
            r.duration_s,
            run_marks(r)
        );
    }
}
