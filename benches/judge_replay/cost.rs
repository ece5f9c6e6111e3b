//! The cost goal: our A/B runs per decision against the cheapest fixed
//! protocol that meets the same targets, over all real traces at once and
//! on each trace by itself (a trace replayed alone, `-- --trace FILE`, is
//! held to the protocol that suffices there, which is often cheaper than
//! the one the noisiest trace of a corpus needs).

use orchestrator::judge::Policy;

use super::replay::Judge;
use super::table::{self, Cell, Cost, Targets};
use super::trace::Trace;

/// At most this share of the cheapest fixed protocol's A/B runs.
pub const GOAL: f64 = 0.5;

/// Every fixed protocol of the grid, replayed on every real trace.
pub struct Fixed {
    pub grid: Vec<(Judge, Vec<Vec<Cell>>)>,
}

impl Fixed {
    /// The cheapest protocol (by A/B runs) meeting every target on the
    /// traces `which` (indices into `traces`), and its cost there.
    pub fn cheapest(
        &self,
        traces: &[Trace],
        which: &[usize],
        targets: &Targets,
        policy: Policy,
    ) -> Option<(Judge, Cost)> {
        let mut best: Option<(Judge, Cost)> = None;
        for (judge, cells) in &self.grid {
            let ok = which
                .iter()
                .all(|&i| targets.check(&traces[i], policy, &cells[i]).is_empty());
            let picked: Vec<Vec<Cell>> = which.iter().map(|&i| cells[i].clone()).collect();
            let cost = table::cost(&picked);
            if ok && best.is_none_or(|(_, c)| cost.ab < c.ab) {
                best = Some((*judge, cost));
            }
        }
        best
    }
}

/// Prints the comparison, over all traces and per trace, and returns every
/// goal it misses (each naming the trace).
pub fn report(
    traces: &[Trace],
    ours: &[Vec<Cell>],
    fixed: &Fixed,
    targets: &Targets,
    policy: Policy,
) -> Vec<String> {
    let mut missed = Vec::new();
    println!("### Cost against the cheapest fixed protocol\n");
    // A machine too noisy to judge on costs what refusing costs; it is no
    // measure of a decision's price.
    let all: Vec<usize> = (0..traces.len())
        .filter(|&i| !table::too_noisy(&traces[i], policy))
        .collect();
    if all.is_empty() {
        println!("Every trace is too noisy for the daemon to judge on: no cost to compare.\n");
        return missed;
    }
    let judged: Vec<Vec<Cell>> = all.iter().map(|&i| ours[i].clone()).collect();
    let our_cost = table::cost(&judged);
    match fixed.cheapest(traces, &all, targets, policy) {
        Some((judge, cost)) => {
            println!(
                "Ours: **{:.1} A/B runs per decision** ({:.1} with a floor per A/B). The cheapest fixed protocol meeting the same targets on every real trace the daemon judges on is {}: {:.1} A/B runs ({:.1} with its floors). **Ratio {:.2}** on A/B runs (goal ≤ {GOAL}), {:.2} all in.\n",
                our_cost.ab,
                our_cost.all,
                judge.label(),
                cost.ab,
                cost.all,
                our_cost.ab / cost.ab,
                our_cost.all / cost.all
            );
            missed.extend(over("every real trace", our_cost, cost));
        }
        None => {
            println!(
                "Ours: **{:.1} A/B runs per decision** ({:.1} with a floor per A/B); no fixed protocol of the grid (t-interval on 4-40 pairs at 95/80/50%, median of 3-31 per arm) meets the targets on every real trace it judges on.\n",
                our_cost.ab, our_cost.all
            );
            missed.push(
                "cost: no fixed protocol of the grid meets the targets on every real trace, so the cost goal cannot be judged".into(),
            );
        }
    }
    println!(
        "Each trace by itself, against the cheapest fixed protocol meeting the targets on it:\n"
    );
    println!(
        "| trace | ours: A/B runs (all in) | cheapest fixed protocol on it | its A/B runs (all in) | ratio on A/B runs | all in |"
    );
    println!("|---|---|---|---|---|---|");
    for (i, t) in traces.iter().enumerate() {
        let mine = table::cost(std::slice::from_ref(&ours[i]));
        if table::too_noisy(t, policy) {
            println!(
                "| {} | {:.1} ({:.1}) | none: the daemon refuses to judge on this machine | - | - | - |",
                t.name, mine.ab, mine.all
            );
            continue;
        }
        match fixed.cheapest(traces, &[i], targets, policy) {
            Some((judge, cost)) => {
                println!(
                    "| {} | {:.1} ({:.1}) | {} | {:.1} ({:.1}) | **{:.2}** | {:.2} |",
                    t.name,
                    mine.ab,
                    mine.all,
                    judge.label(),
                    cost.ab,
                    cost.all,
                    mine.ab / cost.ab,
                    mine.all / cost.all
                );
                missed.extend(over(&t.name, mine, cost));
            }
            None => {
                println!(
                    "| {} | {:.1} ({:.1}) | none of the grid meets the targets | - | - | - |",
                    t.name, mine.ab, mine.all
                );
                missed.push(format!(
                    "{}: cost: no fixed protocol of the grid meets the targets on it, so the cost goal cannot be judged",
                    t.name
                ));
            }
        }
    }
    println!();
    missed
}

/// The cost goal on `what`, if missed.
fn over(what: &str, ours: Cost, fixed: Cost) -> Option<String> {
    (ours.ab / fixed.ab > GOAL).then(|| {
        format!(
            "{what}: cost: {:.1} A/B runs per decision against the cheapest fixed protocol's {:.1}, ratio {:.2} > {GOAL}",
            ours.ab,
            fixed.ab,
            ours.ab / fixed.ab
        )
    })
}
