//! Tests of the bandit: grids, rewards, UCB1's exploration, determinism,
//! duplicates and the remeasure schedule.

use std::collections::BTreeSet;
use std::time::Duration;

use proptest::prelude::*;
use rand::SeedableRng;
use serde_json::json;

use super::*;
use crate::brain::double::{Decided, measured_on, repo_menu};
use crate::brain::levers::TokenShares;
use crate::brain::{NoiseFloorState, params_value};
use crate::observe::LiveMetrics;
use crate::vocab::Digest;

fn fresh_floor() -> NoiseFloorState {
    NoiseFloorState::Current {
        value: 0.01,
        pairs: 8,
        age: Duration::from_secs(60),
        stale: false,
    }
}

fn measured(id: i64, p: &Proposal, verdict: VerdictKind) -> ExperimentOutcome {
    measured_on(id, p, verdict, Digest::of(b"base"))
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// One proposal of a bandit seeded `seed`, with everything else fixed.
fn propose_with(
    bandit: &mut BanditProposer,
    menu: &Menu,
    floor: &NoiseFloorState,
    history: &[ExperimentOutcome],
    check: &(impl DuplicateCheck + Sync),
) -> Outcome {
    let metrics = LiveMetrics::default();
    let s = crate::brain::double::situation(menu, &metrics, floor, history);
    rt().block_on(bandit.propose(&s, check))
}

fn chosen(o: &Outcome) -> Proposal {
    match &o.decision {
        Decision::Chosen(p) => p.clone(),
        other => panic!("expected a choice, got {other:?}"),
    }
}

fn bandit(seed: u64) -> BanditProposer {
    BanditProposer::new(BanditAlgorithm::Ucb1, StdRng::seed_from_u64(seed))
}

#[test]
fn grids_follow_the_menu_steps() {
    let menu = repo_menu();
    let g = |id: MenuId| grid(&menu.entry(id).unwrap().params[0].kind);
    let pins = g(MenuId::RerankPins);
    assert_eq!(pins.len(), 33, "0..=512 by 16");
    assert_eq!(pins[1], ParamValue::Integer(16));
    assert_eq!(pins[32], ParamValue::Integer(512));
    let split = g(MenuId::RebalanceTrunkCache);
    assert_eq!(split.len(), 21, "0..=1 by 0.05");
    assert_eq!(
        split[7],
        ParamValue::Number(0.35),
        "rounded, no float noise"
    );
    assert_eq!(split[20], ParamValue::Number(1.0));
    assert_eq!(g(MenuId::StageSpeculative).len(), 9);
}

#[test]
fn grids_without_step_use_quartiles_and_wide_ranges_are_thinned() {
    let q = grid(&ParamKind::Number {
        min: 2.0,
        max: 4.0,
        step: None,
    });
    assert_eq!(
        q,
        [2.0, 2.5, 3.0, 3.5, 4.0].map(ParamValue::Number).to_vec()
    );
    let wide = grid(&ParamKind::Integer {
        min: 0,
        max: 1_000_000,
        step: 1,
    });
    assert_eq!(wide.len(), MAX_GRID_POINTS);
    assert_eq!(wide[0], ParamValue::Integer(0));
    assert_eq!(wide[MAX_GRID_POINTS - 1], ParamValue::Integer(1_000_000));
    let odd = grid(&ParamKind::Integer {
        min: 0,
        max: 10,
        step: 4,
    });
    assert_eq!(
        odd,
        [0, 4, 8, 10].map(ParamValue::Integer).to_vec(),
        "max kept"
    );
    let one = grid(&ParamKind::Enum {
        values: vec!["a".into(), "b".into()],
    });
    assert_eq!(one.len(), 2);
}

#[test]
fn remeasure_is_not_an_arm_and_every_arm_validates() {
    let menu = repo_menu();
    let all = arms(&menu);
    assert_eq!(all.len(), 33 + 33 + 9 + 21);
    assert!(all.iter().all(|a| a.experiment != MenuId::Remeasure));
    let distinct: BTreeSet<String> = all
        .iter()
        .map(|a| format!("{}{}", a.experiment, a.params_json()))
        .collect();
    assert_eq!(distinct.len(), all.len());
}

#[test]
fn rewards_count_only_measured_verdicts() {
    assert_eq!(reward(VerdictKind::Win), Some(1.0));
    assert_eq!(reward(VerdictKind::Loss), Some(0.0));
    assert_eq!(reward(VerdictKind::WithinNoise), Some(0.0));
    assert_eq!(reward(VerdictKind::Inconclusive), Some(0.0));
    assert_eq!(reward(VerdictKind::HashMismatch), Some(0.0));
    assert_eq!(reward(VerdictKind::Failed), None);
    assert_eq!(reward(VerdictKind::Rejected), None);
    let menu = repo_menu();
    let all = arms(&menu);
    let a = &all[3];
    let history = vec![
        measured(1, a, VerdictKind::Win),
        measured(2, a, VerdictKind::Loss),
        measured(3, a, VerdictKind::Failed),
    ];
    let s = stats(&all, &history);
    assert_eq!(
        s[3],
        ArmStats {
            pulls: 2,
            reward: 1.0
        }
    );
    assert_eq!(s.iter().map(|s| s.pulls).sum::<u32>(), 2);
}

#[test]
fn a_model_written_number_matches_its_grid_arm() {
    let menu = repo_menu();
    let all = arms(&menu);
    let i = all
        .iter()
        .position(|a| a.experiment == MenuId::RebalanceTrunkCache)
        .unwrap()
        + 7;
    let mut e = measured(1, &all[i], VerdictKind::Win);
    e.parameters = json!({"trunk_fraction": 0.35000000000000003});
    assert!(is_arm(&all[i], &e));
    e.parameters = json!({"trunk_fraction": 0.36});
    assert!(!is_arm(&all[i], &e));
}

#[test]
fn ucb1_plays_every_arm_once_before_exploiting() {
    let menu = repo_menu();
    let all = arms(&menu);
    let winner = all[40].clone();
    let mut b = bandit(11);
    let mut history: Vec<ExperimentOutcome> = Vec::new();
    let mut seen = BTreeSet::new();
    // Nothing is a duplicate here (as if each cycle had a new base), so the
    // exploration below is UCB1's own, not the duplicate rule's.
    let none = Decided::default();
    for n in 0..all.len() {
        let p = chosen(&propose_with(
            &mut b,
            &menu,
            &fresh_floor(),
            &history,
            &none,
        ));
        assert!(
            seen.insert(format!("{}{}", p.experiment, p.params_json())),
            "cycle {n} replayed an arm before trying them all"
        );
        let verdict = if p == winner {
            VerdictKind::Win
        } else {
            VerdictKind::Loss
        };
        // Newest first, as the ledger returns them.
        history.insert(0, measured(n as i64 + 1, &p, verdict));
    }
    assert_eq!(seen.len(), all.len());
    // Now exploit: the only arm that ever won has the highest index.
    let p = chosen(&propose_with(
        &mut b,
        &menu,
        &fresh_floor(),
        &history,
        &none,
    ));
    assert_eq!(p, winner);
}

#[test]
fn the_first_untried_arm_is_chosen_at_random_but_deterministically() {
    let menu = repo_menu();
    let pick = |seed| {
        chosen(&propose_with(
            &mut bandit(seed),
            &menu,
            &fresh_floor(),
            &[],
            &Decided::default(),
        ))
    };
    assert_eq!(pick(1), pick(1));
    let distinct: BTreeSet<String> = (0..16)
        .map(|s| pick(s).params_json() + pick(s).experiment.as_str())
        .collect();
    assert!(distinct.len() > 1, "the tie-break must depend on the seed");
}

#[test]
fn a_missing_or_stale_floor_schedules_remeasure() {
    let menu = repo_menu();
    for floor in [
        NoiseFloorState::Missing,
        NoiseFloorState::Current {
            value: 0.01,
            pairs: 8,
            age: Duration::from_secs(999_999),
            stale: true,
        },
    ] {
        let o = propose_with(&mut bandit(3), &menu, &floor, &[], &Decided::default());
        assert_eq!(chosen(&o).experiment, MenuId::Remeasure);
        assert_eq!(o.proposer, ProposerKind::Bandit);
        assert_eq!(o.attempts.len(), 1);
        assert_eq!(o.attempts[0].prompt, None);
        assert_eq!(o.attempts[0].raw_answer, None);
        assert_eq!(
            o.attempts[0].parsed,
            Some(json!({"experiment": "remeasure", "params": {}}))
        );
    }
}

#[test]
fn when_every_arm_is_decided_the_bandit_remeasures() {
    let menu = repo_menu();
    let decided = arms(&menu)
        .iter()
        .enumerate()
        .fold(Decided::default(), |d, (i, a)| d.with(a, i as i64));
    let o = propose_with(&mut bandit(5), &menu, &fresh_floor(), &[], &decided);
    assert_eq!(chosen(&o).experiment, MenuId::Remeasure);
}

#[test]
fn thompson_prefers_the_winning_arm() {
    let menu = repo_menu();
    let all = arms(&menu);
    let winner = all[10].clone();
    let mut history = Vec::new();
    for i in 0..20 {
        history.push(measured(i, &winner, VerdictKind::Win));
    }
    for (i, a) in all.iter().enumerate().filter(|(i, _)| *i != 10) {
        history.push(measured(100 + i as i64, a, VerdictKind::Loss));
        history.push(measured(1000 + i as i64, a, VerdictKind::Loss));
    }
    let mut b = BanditProposer::new(BanditAlgorithm::Thompson, StdRng::seed_from_u64(9));
    let wins = (0..20)
        .filter(|_| {
            let o = rt().block_on(b.propose(
                &Situation {
                    live_digest: None,
                    token_shares: None,
                    menu: &menu,
                    stack: &crate::brain::double::MOE_STACK,
                    live_knobs: &[],
                    target_seconds_per_token: 1.0,
                    metrics: &LiveMetrics::default(),
                    noise_floor: &fresh_floor(),
                    history: &history,
                },
                &Decided::default(),
            ));
            chosen(&o) == winner
        })
        .count();
    assert!(
        wins >= 18,
        "Thompson chose the 20-0 arm only {wins} times of 20"
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Whatever the history, seed and decided set: the same seed gives the
    /// same choice, the choice validates against the menu, and it is never
    /// one already decided on the base.
    #[test]
    fn choices_are_deterministic_valid_and_never_duplicates(
        seed in any::<u64>(),
        thompson in any::<bool>(),
        past in proptest::collection::vec((0usize..96, 0usize..7), 0..60),
        decided_arms in proptest::collection::btree_set(0usize..96, 0..96),
    ) {
        let menu = repo_menu();
        let all = arms(&menu);
        let verdicts = VerdictKind::ALL;
        let history: Vec<ExperimentOutcome> = past
            .iter()
            .enumerate()
            .map(|(i, (a, v))| measured(i as i64, &all[*a], verdicts[*v]))
            .collect();
        let decided = decided_arms
            .iter()
            .fold(Decided::default(), |d, i| d.with(&all[*i], *i as i64));
        let algorithm = if thompson { BanditAlgorithm::Thompson } else { BanditAlgorithm::Ucb1 };
        let mut one = BanditProposer::new(algorithm, StdRng::seed_from_u64(seed));
        let mut two = BanditProposer::new(algorithm, StdRng::seed_from_u64(seed));
        let a = chosen(&propose_with(&mut one, &menu, &fresh_floor(), &history, &decided));
        let b = chosen(&propose_with(&mut two, &menu, &fresh_floor(), &history, &decided));
        prop_assert_eq!(&a, &b);
        let answer = json!({"experiment": a.experiment, "params": params_value(&a), "rationale": ""});
        prop_assert_eq!(menu.validate_value(&answer), Ok(a.clone()));
        let key = (a.experiment, a.params_json());
        prop_assert!(!decided.0.contains_key(&key), "proposed a decided arm {:?}", key);
        if decided_arms.len() == all.len() {
            prop_assert_eq!(a.experiment, MenuId::Remeasure);
        } else {
            prop_assert!(a.experiment != MenuId::Remeasure);
        }
    }
}

/// The bandit never proposes the live profile's own value: with the live
/// values excluded (a 50/50 split, no speculation), `trunk_fraction` 0.5
/// and `draft_len` 0 are no arms, their neighbours are, and whatever the
/// seed, the bandit's choices never include them.
#[test]
fn the_live_value_is_no_arm() {
    let live = crate::profile::Profile::parse(
        "[memory]\nbudget_gb = 8.0\ntrunk_gb = 2.0\ncache_gb = 2.0\n\
         [far]\naddr = \"127.0.0.1:1\"\nwarm_set = 64\n",
        std::path::Path::new("live.toml"),
    )
    .unwrap();
    let menu = repo_menu().excluding(crate::menu::exclusions::base_values(
        crate::plan::unchanged(&live),
    ));
    let all = arms(&repo_menu());
    let left = arms(&menu);
    let split = |x: f64| Proposal {
        experiment: MenuId::RebalanceTrunkCache,
        params: [("trunk_fraction".to_string(), ParamValue::Number(x))].into(),
    };
    let draft = |n: i64| Proposal {
        experiment: MenuId::StageSpeculative,
        params: [("draft_len".to_string(), ParamValue::Integer(n))].into(),
    };
    let warm = |n: i64| Proposal {
        experiment: MenuId::DeepenWarmSet,
        params: [("warm_set".to_string(), ParamValue::Integer(n))].into(),
    };
    for p in [split(0.5), draft(0), warm(64)] {
        assert!(all.contains(&p), "{p:?} is on the full grid");
        assert!(!left.contains(&p), "{p:?} is the live value");
    }
    // No pins: a re-rank of none is the live profile too.
    let pins = |n: i64| Proposal {
        experiment: MenuId::RerankPins,
        params: [("pin_count".to_string(), ParamValue::Integer(n))].into(),
    };
    assert!(all.contains(&pins(0)) && !left.contains(&pins(0)));
    for p in [split(0.45), split(0.55), draft(1), warm(32)] {
        assert!(left.contains(&p), "{p:?} is still an arm");
    }
    assert!(
        left.iter()
            .any(|p| p.experiment == MenuId::RerankPins && *p != pins(0)),
        "other pin counts are still arms"
    );
    assert_eq!(left.len(), all.len() - 4);
    for seed in 0..20 {
        let o = propose_with(
            &mut bandit(seed),
            &menu,
            &fresh_floor(),
            &[],
            &Decided::default(),
        );
        let p = chosen(&o);
        assert!(![split(0.5), draft(0), warm(64)].contains(&p), "{p:?}");
    }
}

/// The demo's slow start as its runs measure it: no KV cache, so the trunk
/// is most of a token.
const TRUNK_BOUND: TokenShares = TokenShares {
    trunk: 0.85,
    expert: 0.1,
    far_hit: Some(0.2),
};

fn choose_with_shares(
    b: &mut BanditProposer,
    menu: &Menu,
    history: &[ExperimentOutcome],
    shares: Option<TokenShares>,
) -> Proposal {
    let metrics = LiveMetrics::default();
    let floor = fresh_floor();
    let s = Situation {
        live_digest: None,
        menu,
        stack: &crate::brain::double::MOE_STACK,
        live_knobs: &[],
        target_seconds_per_token: 1.0,
        metrics: &metrics,
        noise_floor: &floor,
        history,
        token_shares: shares,
    };
    chosen(&rt().block_on(b.propose(&s, &Decided::default())))
}

#[test]
fn untried_arms_follow_the_largest_measured_part_of_the_token() {
    let menu = repo_menu();
    for seed in 0..16 {
        let mut b = bandit(seed);
        let mut history = Vec::new();
        let mut entries = Vec::new();
        for n in 0..4 {
            let p = choose_with_shares(&mut b, &menu, &history, Some(TRUNK_BOUND));
            entries.push(p.experiment);
            history.insert(0, measured(n + 1, &p, VerdictKind::Loss));
        }
        // The draft saves whole passes (0.95 of the token), the split acts
        // on the trunk (0.85); the next draft length comes once the split's
        // lead is shared too; the expert tiers (0.1) wait.
        assert_eq!(
            entries,
            vec![
                MenuId::StageSpeculative,
                MenuId::RebalanceTrunkCache,
                MenuId::StageSpeculative,
                MenuId::RebalanceTrunkCache
            ],
            "seed {seed}"
        );
    }
}

#[test]
fn without_measured_parts_the_entries_take_turns() {
    let menu = repo_menu();
    let entries = menu
        .entries()
        .iter()
        .filter(|e| e.id != MenuId::Remeasure)
        .count();
    for seed in 0..8 {
        let mut b = bandit(seed);
        let mut history = Vec::new();
        let mut seen = BTreeSet::new();
        for n in 0..entries {
            let p = choose_with_shares(&mut b, &menu, &history, None);
            seen.insert(p.experiment);
            history.insert(0, measured(n as i64 + 1, &p, VerdictKind::Loss));
        }
        // Before, an entry with many grid points (the split's 21 fractions)
        // took most of the first choices.
        assert_eq!(seen.len(), entries, "seed {seed}: {seen:?}");
        // The draft acts on the whole token whatever its parts: first.
        let first = choose_with_shares(&mut bandit(seed), &menu, &[], None);
        assert_eq!(first.experiment, MenuId::StageSpeculative, "seed {seed}");
    }
}

fn withheld() -> crate::menu::Withheld {
    crate::menu::Withheld {
        experiment: MenuId::Remeasure,
        why: "the bench noise floor is fresh".into(),
    }
}

/// With its floor fresh, `remeasure` is withheld: the bandit schedules it
/// neither for a floor it is told is stale nor when every arm is decided.
#[test]
fn a_withheld_remeasure_is_never_scheduled() {
    let menu = repo_menu().withholding(withheld());
    let o = propose_with(
        &mut bandit(3),
        &menu,
        &NoiseFloorState::Missing,
        &[],
        &Decided::default(),
    );
    assert_ne!(chosen(&o).experiment, MenuId::Remeasure);
    let decided = arms(&menu)
        .iter()
        .enumerate()
        .fold(Decided::default(), |d, (i, a)| d.with(a, i as i64));
    let o = propose_with(&mut bandit(5), &menu, &fresh_floor(), &[], &decided);
    match o.decision {
        Decision::Failed(e @ BrainError::NothingWorthMeasuring) => {
            assert!(e.to_string().contains("the loop has converged"), "{e}");
        }
        other => panic!("expected nothing to propose, got {other:?}"),
    }
}

/// The situation on the double's live profile, its token trunk-bound.
fn on_the_live_profile<'a>(
    menu: &'a Menu,
    history: &'a [ExperimentOutcome],
    digest: &'a Digest,
    metrics: &'a LiveMetrics,
    floor: &'a NoiseFloorState,
) -> Situation<'a> {
    Situation {
        live_digest: Some(digest),
        token_shares: Some(crate::brain::double::TRUNK_BOUND),
        menu,
        stack: &crate::brain::double::MOE_STACK,
        live_knobs: &[],
        target_seconds_per_token: 1.0,
        metrics,
        noise_floor: floor,
        history,
    }
}

/// The line search plays only what it expects to tell something new: once
/// every line is done and the pins tried (on a pinned profile, where they
/// have no line), it proposes no other value of a done line (UCB1 would
/// walk them all).
#[test]
fn the_line_search_plays_only_arms_worth_measuring() {
    use crate::brain::double::{OnLive, live_digest, pinned_start};
    let live = pinned_start();
    let mut on = OnLive::flat_lines();
    let pins: Vec<Proposal> = arms(&on.menu(&live))
        .into_iter()
        .filter(|a| a.experiment == MenuId::RerankPins)
        .collect();
    // All but one pin count decided: that one is the only arm worth a cycle.
    let (last, rest) = pins.split_last().unwrap();
    for p in rest {
        on = on.decided(p, VerdictKind::WithinNoise);
    }
    let menu = on.menu(&live).withholding(withheld());
    let (metrics, digest, floor) = (LiveMetrics::default(), live_digest(), fresh_floor());
    let s = on_the_live_profile(&menu, &on.history, &digest, &metrics, &floor);
    for seed in 0..8 {
        let mut b = BanditProposer::new(BanditAlgorithm::LineSearch, StdRng::seed_from_u64(seed));
        let o = rt().block_on(b.propose(&s, &Decided::default()));
        assert_eq!(&chosen(&o), last, "seed {seed}");
    }
    // UCB1 alone still walks every untried arm, the done lines' too.
    let mut ucb = bandit(1);
    let o = rt().block_on(ucb.propose(&s, &Decided::default()));
    assert!(arms(&menu).contains(&chosen(&o)));
}

/// A planning check double: the arms `refuse` names are refused as the
/// cycle's planner would refuse them (costing no engine time), the rest
/// plan; duplicates as `decided` says.
struct RefusingPlanner<'a> {
    decided: &'a Decided,
    refuse: fn(&Proposal) -> bool,
}

impl DuplicateCheck for RefusingPlanner<'_> {
    async fn previous(
        &self,
        p: &Proposal,
    ) -> Result<Option<crate::ledger::ExperimentId>, crate::ledger::LedgerError> {
        self.decided.previous(p).await
    }

    fn planner_refusal(&self, p: &Proposal) -> Option<String> {
        (self.refuse)(p).then(|| format!("{}: both hold every expert", p.describe()))
    }
}

fn warm_set_above_128(p: &Proposal) -> bool {
    p.experiment == MenuId::DeepenWarmSet
        && p.params
            .values()
            .any(|v| matches!(v, ParamValue::Integer(n) if *n > 128))
}

/// A choice the planner refuses is recorded as refused (`not_measured`,
/// what later cycles exclude) and the bandit chooses again in the same
/// cycle, rather than spending a whole cycle (`interval_s`) on each: on
/// landscape B of the shoot-out the line search walked inwards from the
/// largest warm set through 28 cycles of warm sets that all held every
/// expert. Here it walks them in one cycle and settles on the first the
/// planner would measure.
#[test]
fn a_choice_the_planner_refuses_is_recorded_and_another_chosen_in_the_cycle() {
    use crate::brain::double::{OnLive, draft, live_digest, slow_start, split};
    let live = slow_start();
    // The draft's and the split's lines are done and every pin count is
    // decided: the warm set's line is the only one left.
    let mut on = OnLive::default()
        .decided(&draft(8), VerdictKind::WithinNoise)
        .decided(&split(1.0), VerdictKind::WithinNoise)
        .decided(&split(0.3), VerdictKind::WithinNoise);
    for p in arms(&on.menu(&live))
        .into_iter()
        .filter(|a| a.experiment == MenuId::RerankPins)
    {
        on = on.decided(&p, VerdictKind::WithinNoise);
    }
    let menu = on.menu(&live).withholding(withheld());
    let (metrics, digest, floor) = (LiveMetrics::default(), live_digest(), fresh_floor());
    let s = on_the_live_profile(&menu, &on.history, &digest, &metrics, &floor);
    let decided = Decided::default();
    let check = RefusingPlanner {
        decided: &decided,
        refuse: warm_set_above_128,
    };
    let mut b = BanditProposer::new(BanditAlgorithm::LineSearch, StdRng::seed_from_u64(1));
    let o = rt().block_on(b.propose(&s, &check));
    let p = chosen(&o);
    assert_eq!(p.experiment, MenuId::DeepenWarmSet, "{p:?}");
    assert_eq!(p.params["warm_set"], ParamValue::Integer(128), "{p:?}");
    let (last, refused) = o.attempts.split_last().expect("an attempt");
    assert_eq!(last.rejection, None, "{o:?}");
    assert_eq!(last.parsed, Some(proposal_value(&p)));
    // 1024 down to 160 by 32, each refused once, in that order.
    let walked: Vec<serde_json::Value> = refused
        .iter()
        .map(|a| {
            let r = a.rejection.as_ref().expect("refused");
            assert_eq!(r.kind(), "not_measured", "{r}");
            assert!(r.to_string().contains("both hold every expert"), "{r}");
            a.parsed.as_ref().unwrap()["params"]["warm_set"].clone()
        })
        .collect();
    let expected: Vec<serde_json::Value> = (5..=32).rev().map(|k| json!(k * 32)).collect();
    assert_eq!(walked, expected);
    for (i, a) in o.attempts.iter().enumerate() {
        assert_eq!(a.number as usize, i + 1, "numbered in order");
    }
}

/// When the planner refuses every arm left, the cycle is `rejected` with
/// each refusal recorded (no arm is chosen, nothing fails), so the next
/// cycle excludes them and finds the loop converged.
#[test]
fn when_the_planner_refuses_every_arm_left_the_cycle_is_rejected() {
    let menu = repo_menu().withholding(withheld());
    let decided = arms(&menu)
        .iter()
        .enumerate()
        .filter(|(_, a)| !warm_set_above_128(a))
        .fold(Decided::default(), |d, (i, a)| d.with(a, i as i64));
    let check = RefusingPlanner {
        decided: &decided,
        refuse: warm_set_above_128,
    };
    let left = arms(&menu).iter().filter(|a| warm_set_above_128(a)).count();
    assert!((1..=MAX_SCREENED).contains(&left), "{left}");
    let o = propose_with(&mut bandit(2), &menu, &fresh_floor(), &[], &check);
    assert!(matches!(o.decision, Decision::Rejected), "{:?}", o.decision);
    assert_eq!(o.attempts.len(), left);
    assert!(o.attempts.iter().all(|a| a.rejection.is_some()));
}
