//! Whether the loop's search expects anything new on the profile it builds
//! on: the arms worth measuring there, and when there is none, why the loop
//! is converged.
//!
//! An arm is worth measuring on a base when it is
//!
//! - the next value of a knob's line ([`line_search::next_arms`]): the line
//!   search is the loop's judgement of which moves can still show an
//!   effect (a side whose move lost, broke the output or failed is
//!   bisected, a side whose move showed nothing is done); or
//! - an arm of an entry that has no line (`rerank_pins` on a pinned
//!   profile, whose re-ranking at the live count is an experiment of its
//!   own; with no pins, `pin_count 0` is live and the pins are a line)
//!   not yet decided, refused or failed on the base; or
//! - `remeasure`, while the menu offers it (its floor is missing or stale,
//!   or the live metrics moved since it was measured:
//!   `cycle::remeasure_offer`; the proposal menu withholds it when no
//!   floor was measured on the base only, the loop measured something
//!   there and nothing drifted, a floor no decision waits for:
//!   `remeasure_idle`).
//!
//! The loop is **converged** on a base when no arm is worth measuring
//! there. That is the loop's own judgement, whoever proposes: a served
//! model may still name an untried value between two a line has passed,
//! but the search expects nothing new of it, so the daemon waits instead
//! of asking (`daemon::wait`), until a change gives it something to look at.

use super::bandit;
use super::levers::TokenShares;
use super::line_search;
use crate::ledger::ExperimentOutcome;
use crate::menu::{Menu, MenuId, Proposal};
use crate::vocab::{Digest, VerdictKind};

/// The arms worth measuring on the base `base` (see the module's doc), in
/// the bandit's grid order, `remeasure` last when it is offered.
pub fn worth_measuring(
    menu: &Menu,
    history: &[ExperimentOutcome],
    base: Option<&Digest>,
    shares: Option<&TokenShares>,
) -> Vec<Proposal> {
    let arms = bandit::arms(menu);
    let next: Vec<usize> = line_search::next_arms(&arms, menu, history, base, shares)
        .into_iter()
        .map(|(i, _)| i)
        .collect();
    let failed_here = |a: &Proposal| {
        history.iter().any(|e| {
            Some(&e.base_digest) == base
                && e.verdict == Some(VerdictKind::Failed)
                && bandit::is_arm(a, e)
        })
    };
    let mut out: Vec<Proposal> = arms
        .iter()
        .enumerate()
        .filter(|(i, a)| {
            next.contains(i) || (!line_search::has_line(menu, a.experiment) && !failed_here(a))
        })
        .map(|(_, a)| a.clone())
        .collect();
    if menu.offers(MenuId::Remeasure) {
        out.push(bandit::remeasure());
    }
    out
}

/// Why the loop is converged on `base`, or `None` when some arm is worth
/// measuring there.
pub fn converged(
    menu: &Menu,
    history: &[ExperimentOutcome],
    base: Option<&Digest>,
    shares: Option<&TokenShares>,
) -> Option<String> {
    if !worth_measuring(menu, history, base, shares).is_empty() {
        return None;
    }
    let (lines, others): (Vec<MenuId>, Vec<MenuId>) = menu
        .entries()
        .iter()
        .map(|e| e.id)
        .filter(|id| *id != MenuId::Remeasure)
        .partition(|id| line_search::has_line(menu, *id));
    let names = |ids: &[MenuId]| {
        ids.iter()
            .map(|m| m.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let decided = menu
        .excluded()
        .iter()
        .filter(|x| x.why != crate::menu::Why::Live)
        .count();
    let mut parts = Vec::new();
    if !lines.is_empty() {
        parts.push(format!("the line search is done on {}", names(&lines)));
    }
    if !others.is_empty() {
        parts.push(format!("every value of {} was tried", names(&others)));
    }
    let remeasure = match menu.withheld(MenuId::Remeasure) {
        Some(w) => format!("remeasure is not offered ({})", w.why),
        None => "remeasure is not on this stack's menu".to_string(),
    };
    parts.push(remeasure);
    Some(format!(
        "no experiment on this profile is expected to tell anything new ({decided} value(s) decided or refused on it): {}",
        parts.join("; ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::brain::double::{
        OnLive, TRUNK_BOUND, live_digest, measured_on, most_pins, pinned_start, pins, repo_menu,
        slow_start, warm,
    };
    use crate::menu::{Excluded, Why, Withheld};

    fn fresh() -> Withheld {
        Withheld {
            experiment: MenuId::Remeasure,
            why: "the surface noise floor is fresh".into(),
        }
    }

    /// Every arm of the repository's menu decided on `base` (within
    /// noise), as the cycle's exclusions and history say it.
    fn all_decided(menu: &Menu, base: &Digest) -> (Menu, Vec<ExperimentOutcome>) {
        let arms = bandit::arms(menu);
        let history: Vec<ExperimentOutcome> = arms
            .iter()
            .enumerate()
            .map(|(i, a)| measured_on(i as i64 + 1, a, VerdictKind::WithinNoise, base.clone()))
            .collect();
        let excluded: Vec<Excluded> = arms
            .iter()
            .enumerate()
            .flat_map(|(i, a)| {
                crate::menu::exclusions::of_proposal(
                    a,
                    &Why::Decided {
                        experiment: i as i64 + 1,
                    },
                )
            })
            .collect();
        (menu.clone().excluding(excluded), history)
    }

    #[test]
    fn a_fresh_base_is_not_converged_and_remeasure_counts_only_while_offered() {
        let menu = repo_menu();
        let base = Digest::of(b"base");
        assert!(converged(&menu, &[], Some(&base), None).is_none());
        let (done, history) = all_decided(&menu, &base);
        // Every arm decided, but the floor may be measured: not converged.
        let worth = worth_measuring(&done, &history, Some(&base), None);
        assert_eq!(worth, vec![bandit::remeasure()]);
        assert!(converged(&done, &history, Some(&base), None).is_none());
        // The floor is fresh: nothing left.
        let done = done.withholding(fresh());
        let why = converged(&done, &history, Some(&base), None).expect("converged");
        assert!(
            why.contains("remeasure is not offered (the surface noise floor is fresh)"),
            "{why}"
        );
        assert!(why.contains("every value of rerank_pins, "), "{why}");
    }

    /// A served model names values off the bandit's grid, of any entry the
    /// schema admits. On a landscape where nothing shows (every move within
    /// noise), each of its values closes a side of its line on the closed
    /// menu, so it measures one A/B per side (six) and the lines are done;
    /// on the menu with values excluded one by one it went on measuring
    /// values of done sides, an A/B within noise each (the shoot-out's
    /// 95-119 warm-set A/Bs per seed, #30). The planner refuses each pin
    /// count here (no heat, as on the shoot-out's stack), which costs a
    /// cycle and no engine time and closes the pins' side beyond it.
    #[test]
    fn a_model_naming_values_off_the_grid_measures_one_ab_per_side_on_the_closed_menu() {
        use rand::{Rng, SeedableRng};
        let live = slow_start();
        let base = live_digest();
        let ids = [
            MenuId::RerankPins,
            MenuId::DeepenWarmSet,
            MenuId::StageSpeculative,
            MenuId::RebalanceTrunkCache,
        ];
        // (A/Bs measured, whether the lines were done) after 200 cycles.
        let run = |closing: bool, seed: u64| {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            let mut on = OnLive::default();
            let mut abs = 0;
            for _ in 0..200 {
                let menu = if closing {
                    on.closed_menu(&live)
                } else {
                    on.menu(&live)
                }
                .withholding(fresh());
                // A constrained decoder samples the schema: a uniform value
                // of an entry's parameter that the menu admits.
                let Some(proposal) = (0..100_000).find_map(|_| {
                    let id = ids[rng.random_range(0..ids.len())];
                    let p = &menu.entry(id).unwrap().params[0];
                    let v = match p.kind {
                        crate::menu::ParamKind::Integer { min, max, .. } => {
                            serde_json::json!(rng.random_range(min..=max))
                        }
                        crate::menu::ParamKind::Number { min, max, .. } => {
                            serde_json::json!(rng.random_range(min..=max))
                        }
                        crate::menu::ParamKind::Enum { .. } => unreachable!(),
                    };
                    let answer = serde_json::json!({"experiment": id,
                        "params": {p.name.clone(): v}, "rationale": ""});
                    menu.validate_value(&answer).ok()
                }) else {
                    break;
                };
                on = if proposal.experiment == MenuId::RerankPins {
                    on.refused(&proposal)
                } else {
                    abs += 1;
                    on.decided(&proposal, VerdictKind::WithinNoise)
                };
            }
            let menu = on.closed_menu(&live).withholding(fresh());
            let lines_done = worth_measuring(&menu, &on.history, Some(&base), Some(&TRUNK_BOUND))
                .iter()
                .all(|p| p.experiment == MenuId::RerankPins);
            (abs, lines_done)
        };
        for seed in 0..5 {
            let (abs, done) = run(true, seed);
            assert!(
                abs <= 6 && done,
                "seed {seed}: {abs} A/Bs, lines done {done}"
            );
            let (abs, _) = run(false, seed);
            assert!(abs > 50, "seed {seed}: {abs} A/Bs without the closed sides");
        }
    }

    /// A line whose moves showed nothing is done, though its grid still
    /// has untried values: the loop does not walk them one by one. The
    /// entries without a line (the pins on a pinned profile) are tried
    /// value by value.
    #[test]
    fn a_done_line_leaves_its_untried_values_and_the_pins_are_tried_each() {
        let live = pinned_start();
        let on = OnLive::flat_lines();
        let menu = on.menu(&live).withholding(fresh());
        let base = live_digest();
        let worth = worth_measuring(&menu, &on.history, Some(&base), Some(&TRUNK_BOUND));
        assert!(!worth.is_empty());
        assert!(
            worth.iter().all(|p| p.experiment == MenuId::RerankPins),
            "only the pins, which have no line, are left: {worth:?}"
        );
        assert!(
            bandit::arms(&menu).contains(&warm(128)),
            "an arm, not worth a cycle"
        );
        // Every pin count tried (one failed: no decision, still tried).
        let mut on = on;
        for (i, p) in worth.iter().enumerate() {
            on = if i == 0 {
                on.failed(p)
            } else {
                on.decided(p, VerdictKind::WithinNoise)
            };
        }
        let menu = on.menu(&live).withholding(fresh());
        let why =
            converged(&menu, &on.history, Some(&base), Some(&TRUNK_BOUND)).expect("converged");
        assert!(
            why.contains("the line search is done on deepen_warm_set, stage_speculative, rebalance_trunk_cache"),
            "{why}"
        );
        // Measured on another base, the same history says nothing here.
        let other = Digest::of(b"another base");
        assert!(converged(&menu, &on.history, Some(&other), Some(&TRUNK_BOUND)).is_none());
    }

    /// On a profile with no pins, a re-rank of none is the live profile,
    /// and the pins are a line like the other knobs: its leap to the most
    /// pins within noise is done with the side, and the loop converges
    /// without walking the smaller counts (a served model measured seven
    /// of them on the shoot-out's A, each within noise).
    #[test]
    fn on_a_profile_with_no_pins_the_pins_line_ends_with_its_leap() {
        let live = slow_start();
        let base = live_digest();
        let on = OnLive::flat_lines();
        let menu = on.menu(&live).withholding(fresh());
        let most = most_pins(&menu);
        let worth = worth_measuring(&menu, &on.history, Some(&base), Some(&TRUNK_BOUND));
        assert_eq!(worth, vec![pins(most)], "the pins' leap only");
        let on = on.decided(&pins(most), VerdictKind::WithinNoise);
        let menu = on.menu(&live).withholding(fresh());
        let why =
            converged(&menu, &on.history, Some(&base), Some(&TRUNK_BOUND)).expect("converged");
        assert!(why.contains("rerank_pins"), "{why}");
        assert!(!why.contains("every value of"), "{why}");
        // The closed menu every proposer is handed offers no pin count.
        let closed = on.closed_menu(&live).withholding(fresh());
        assert!(
            bandit::arms(&closed)
                .iter()
                .all(|p| p.experiment != MenuId::RerankPins),
            "a served model is offered no other pin count"
        );
    }
}
