//! Tests of the line search: the big step first on the favoured side,
//! bisection after a wall, one step at a time on the other side, a flat side
//! left alone, and the bandit choosing through it on the live profile.

use rand::SeedableRng;
use rand::rngs::StdRng;

use super::*;
use crate::brain::bandit::{BanditAlgorithm, BanditProposer, arms};
use crate::brain::double::{
    EXPERT_BOUND, OnLive, TRUNK_BOUND, draft, live_digest, most_pins, pinned_start, pins,
    slow_start, split, warm,
};

#[test]
fn the_big_step_on_the_favoured_side_comes_first() {
    let next = OnLive::default().next(&slow_start(), Some(&TRUNK_BOUND));
    // The draft acts on the whole token, the split on the trunk: the
    // longest draft first, then the largest trunk share; the expert tiers
    // take their deepest values after.
    assert_eq!(&next[..2], &[draft(8), split(1.0)]);
    assert!(next.contains(&warm(1024)), "{next:?}");
    // With no pins, a re-rank of none is the live profile: the pins' line
    // leaps to the most pins the menu offers.
    let most = most_pins(&OnLive::default().menu(&slow_start()));
    assert!(most > 0 && next.contains(&pins(most)), "{next:?}");
    // Pinned, a re-rank at the live count is an experiment of its own (new
    // heat, new list): no count is the live value, no line: UCB1's.
    let pinned = OnLive::default().next(&pinned_start(), Some(&TRUNK_BOUND));
    assert!(pinned.starts_with(&[draft(8), split(1.0)]), "{pinned:?}");
    assert!(
        pinned.iter().all(|p| p.experiment != MenuId::RerankPins),
        "{pinned:?}"
    );
    // An expert-bound token moves the split towards the cache.
    let down = OnLive::default().next_of(
        &slow_start(),
        Some(&EXPERT_BOUND),
        MenuId::RebalanceTrunkCache,
    );
    assert_eq!(down, Some(split(0.0)));
}

#[test]
fn a_refusal_steps_inwards_and_a_wall_is_bisected_towards_the_last_win() {
    let live = slow_start();
    let shares = Some(&TRUNK_BOUND);
    let id = MenuId::RebalanceTrunkCache;
    // The planner refuses the whole RAM for the trunk: the next value
    // inwards, as asking costs no engine time.
    let on = OnLive::default().refused(&split(1.0));
    assert_eq!(on.next_of(&live, shares, id), Some(split(0.95)));
    // The engine refused it (a failure, no exclusion): a wall, halfway
    // between the live third and it, never offered again on this profile.
    let on = OnLive::default().failed(&split(1.0));
    let next = on.next_of(&live, shares, id).unwrap();
    assert_eq!(next, split(0.65), "{next:?}");
    // That lost too: halfway again.
    let on = on.decided(&split(0.65), VerdictKind::Loss);
    assert_eq!(on.next_of(&live, shares, id), Some(split(0.5)));
    // A win at 0.5 with the wall at 0.65: between them.
    let on = on.decided(&split(0.5), VerdictKind::Win);
    assert_eq!(on.next_of(&live, shares, id), Some(split(0.55)));
    // A win beyond every mark goes on to the farthest untried value.
    let on = OnLive::default().decided(&split(0.5), VerdictKind::Win);
    assert_eq!(on.next_of(&live, shares, id), Some(split(1.0)));
}

#[test]
fn a_flat_side_is_left_and_the_other_side_is_stepped() {
    let live = slow_start();
    let shares = Some(&TRUNK_BOUND);
    // The deepest warm set changed nothing: no shallower one is tried.
    let on = OnLive::default().decided(&warm(1024), VerdictKind::WithinNoise);
    assert_eq!(on.next_of(&live, shares, MenuId::DeepenWarmSet), None);
    // The split's favoured side is flat: the other side one step, then the
    // next while each wins, and nothing after a loss.
    let id = MenuId::RebalanceTrunkCache;
    let on = OnLive::default().decided(&split(1.0), VerdictKind::Inconclusive);
    assert_eq!(on.next_of(&live, shares, id), Some(split(0.3)));
    let on = on.decided(&split(0.3), VerdictKind::Win);
    assert_eq!(on.next_of(&live, shares, id), Some(split(0.25)));
    let on = on.decided(&split(0.25), VerdictKind::Loss);
    assert_eq!(on.next_of(&live, shares, id), None);
}

#[test]
fn a_draft_at_its_longest_is_only_shortened_one_step_after_the_other_knobs_leaps() {
    let mut live = slow_start();
    live.speculative.draft_len = 8;
    let on = OnLive::default();
    assert_eq!(
        on.next_of(&live, Some(&TRUNK_BOUND), MenuId::StageSpeculative),
        Some(draft(7))
    );
    // That step goes after the split's leap, though the draft acts on the
    // whole token and the split on its trunk part.
    let next = on.next(&live, Some(&TRUNK_BOUND));
    assert_eq!(&next[..2], &[split(1.0), draft(7)], "{next:?}");
    let on = on.decided(&draft(7), VerdictKind::WithinNoise);
    assert_eq!(
        on.next_of(&live, Some(&TRUNK_BOUND), MenuId::StageSpeculative),
        None
    );
}

#[test]
fn the_bandit_chooses_the_line_searchs_arm_first_and_ucb1_after() {
    let live = slow_start();
    let on = OnLive::default();
    let mut b = BanditProposer::new(BanditAlgorithm::LineSearch, StdRng::seed_from_u64(3));
    let ranked = b.ranked(
        &on.menu(&live),
        &on.history,
        Some(&live_digest()),
        Some(&TRUNK_BOUND),
    );
    assert_eq!(ranked[0].0, draft(8));
    assert_eq!(ranked[1].0, split(1.0));
    // Every line done, the pins' too: the flat warm set's shallower values
    // and the smaller pin counts are still arms, in UCB1's order.
    let most = most_pins(&on.menu(&live));
    let on = OnLive::flat_lines().decided(&pins(most), VerdictKind::WithinNoise);
    let menu = on.menu(&live);
    let ranked = b.ranked(&menu, &on.history, Some(&live_digest()), Some(&TRUNK_BOUND));
    let next = next_arms(
        &arms(&menu),
        &menu,
        &on.history,
        Some(&live_digest()),
        Some(&TRUNK_BOUND),
    );
    assert!(next.is_empty(), "{next:?}");
    assert!(ranked.iter().any(|(p, _)| *p == warm(128)));
    assert!(
        ranked
            .iter()
            .any(|(p, _)| p.experiment == MenuId::RerankPins && *p != pins(most))
    );
    assert_eq!(ranked.len(), arms(&menu).len());
    // None of them was measured anywhere: UCB1 plays each once.
    assert!(ranked.iter().all(|(_, s)| s.is_infinite()));
}

/// A win its confirmation did not repeat is never staged: its side is not
/// passed (the line would be done there, and the loop converge on a win it
/// cannot stage), but bisected below it. A win still waiting for its
/// confirmation, or confirmed, passes.
#[test]
fn a_win_its_confirmation_did_not_repeat_is_bisected_below() {
    let live = slow_start();
    let on = OnLive::default().decided(&draft(8), VerdictKind::Win);
    assert_eq!(on.next_of(&live, None, MenuId::StageSpeculative), None);
    let first = on.history[0].experiment_id;
    let confirmed = |verdict| {
        let mut on = OnLive {
            excluded: on.excluded.clone(),
            history: on.history.clone(),
        };
        let mut c = crate::brain::double::measured_on(99, &draft(8), verdict, live_digest());
        c.confirmation_of = Some(first);
        on.history.insert(0, c);
        on.next_of(&live, None, MenuId::StageSpeculative)
    };
    assert_eq!(confirmed(VerdictKind::Win), None);
    assert_eq!(
        confirmed(VerdictKind::Failed),
        None,
        "a failed confirmation is run again"
    );
    for verdict in [
        VerdictKind::Inconclusive,
        VerdictKind::WithinNoise,
        VerdictKind::Loss,
    ] {
        assert_eq!(confirmed(verdict), Some(draft(4)), "{verdict:?}");
    }
}

/// The ranges each line closes: a done side whole, the values up to a win,
/// and beyond a wall; what is left open is where the line search looks.
#[test]
fn done_ranges_close_a_flat_side_the_way_to_a_win_and_beyond_a_wall() {
    let live = slow_start();
    let base = live_digest();
    let ranges = |on: &OnLive| {
        let menu = on.menu(&live);
        let mut r: Vec<(MenuId, f64, f64)> = done_ranges(&menu, &on.history, Some(&base))
            .into_iter()
            .map(|c| (c.experiment, c.lo, c.hi))
            .collect();
        r.sort_by(|a, b| a.1.total_cmp(&b.1));
        r
    };
    assert!(ranges(&OnLive::default()).is_empty());
    // A warm set off the grid, within noise: the whole side above the live 0.
    let on = OnLive::default().decided(&warm(731), VerdictKind::WithinNoise);
    assert_eq!(ranges(&on), vec![(MenuId::DeepenWarmSet, 0.0, 1024.0)]);
    let why = &done_ranges(&on.menu(&live), &on.history, Some(&base))[0].why;
    assert_eq!(
        why,
        "is on the side above the live 0 where the line search is done on this profile \
         (warm_set 731 was within noise or inconclusive: a nearer move shows even less, a \
         farther one is the next line on a new live profile)"
    );
    // A draft of 5 lost, then 2 won: closed up to the win and from the wall.
    let on = OnLive::default()
        .decided(&draft(5), VerdictKind::Loss)
        .decided(&draft(2), VerdictKind::Win);
    assert_eq!(
        ranges(&on),
        vec![
            (MenuId::StageSpeculative, 0.0, 2.0),
            (MenuId::StageSpeculative, 5.0, 8.0)
        ]
    );
    let menu = on.closed_menu(&live);
    for (n, open) in [
        (1, false),
        (2, false),
        (3, true),
        (4, true),
        (5, false),
        (8, false),
    ] {
        let answer = serde_json::json!({"experiment": "stage_speculative",
            "params": {"draft_len": n}, "rationale": ""});
        assert_eq!(menu.validate_value(&answer).is_ok(), open, "draft {n}");
    }
    // The line search's next draft lies in what is left open.
    assert_eq!(
        on.next_of(&live, None, MenuId::StageSpeculative),
        Some(draft(3))
    );
    // The planner refused the whole RAM for the trunk: from there up; the
    // split's other side is untouched.
    let on = OnLive::default().refused(&split(0.9));
    let r = ranges(&on);
    assert_eq!(r.len(), 1);
    assert_eq!(
        (r[0].0, r[0].1, r[0].2),
        (MenuId::RebalanceTrunkCache, 0.9, 1.0)
    );
}

/// Whatever was measured, every arm the line search offers is open on the
/// closed menu: the closed ranges leave out only what it would not try.
#[test]
fn the_line_searchs_next_arms_stay_open_on_the_closed_menu() {
    use rand::Rng;
    let live = slow_start();
    let verdicts = [
        VerdictKind::Win,
        VerdictKind::Loss,
        VerdictKind::WithinNoise,
        VerdictKind::Inconclusive,
        VerdictKind::HashMismatch,
    ];
    let mut rng = StdRng::seed_from_u64(30);
    for _ in 0..300 {
        let mut on = OnLive::default();
        for _ in 0..rng.random_range(0..6) {
            let p = match rng.random_range(0..3) {
                0 => draft(rng.random_range(1..=8)),
                1 => warm(rng.random_range(1..=1024)),
                _ => split(f64::from(rng.random_range(0..=100u32)) / 100.0),
            };
            if on.menu(&live).validate_value(&answer_of(&p)).is_err() {
                continue;
            }
            on = match rng.random_range(0..7) {
                5 => on.refused(&p),
                6 => on.failed(&p),
                v => on.decided(&p, verdicts[v]),
            };
        }
        let closed = on.closed_menu(&live);
        for p in on.next(&live, Some(&TRUNK_BOUND)) {
            assert!(
                closed.validate_value(&answer_of(&p)).is_ok(),
                "{p:?} is the line search's next arm but closed: {:?}",
                closed.closed()
            );
        }
    }
}

fn answer_of(p: &Proposal) -> serde_json::Value {
    serde_json::json!({"experiment": p.experiment, "params": p.params, "rationale": ""})
}
