//! Tests of the line search: the big step first on the favoured side,
//! bisection after a wall, one step at a time on the other side, a flat side
//! left alone, and the bandit choosing through it on the live profile.

use std::path::Path;

use rand::SeedableRng;
use rand::rngs::StdRng;

use super::*;
use crate::brain::bandit::{BanditAlgorithm, BanditProposer, arms};
use crate::brain::double::{measured_on, repo_menu};
use crate::menu::Excluded;
use crate::profile::Profile;
use crate::vocab::Digest;

/// The demo's slow start in miniature: a third of the RAM for the trunk,
/// nothing pinned or warm, no draft.
fn slow_start() -> Profile {
    Profile::parse(
        "[memory]\nbudget_gb = 8.0\ntrunk_gb = 1.0\ncache_gb = 2.0\n\
         [far]\naddr = \"127.0.0.1:1\"\nwarm_set = 0\n",
        Path::new("live.toml"),
    )
    .unwrap()
}

fn live_digest() -> Digest {
    Digest::of(b"live")
}

const TRUNK_BOUND: TokenShares = TokenShares {
    trunk: 0.85,
    expert: 0.1,
    far_hit: Some(0.2),
};

const EXPERT_BOUND: TokenShares = TokenShares {
    trunk: 0.2,
    expert: 0.7,
    far_hit: Some(0.9),
};

fn proposal(id: MenuId, param: &str, v: ParamValue) -> Proposal {
    Proposal {
        experiment: id,
        params: [(param.to_string(), v)].into(),
    }
}

fn split(x: f64) -> Proposal {
    proposal(
        MenuId::RebalanceTrunkCache,
        "trunk_fraction",
        ParamValue::Number(x),
    )
}

fn draft(n: i64) -> Proposal {
    proposal(
        MenuId::StageSpeculative,
        "draft_len",
        ParamValue::Integer(n),
    )
}

fn warm(n: i64) -> Proposal {
    proposal(MenuId::DeepenWarmSet, "warm_set", ParamValue::Integer(n))
}

/// The live profile's ledger as the cycle shows it to a proposer: the menu
/// with the live values and everything decided or refused on the live
/// profile excluded, and the decided experiments' verdicts in the history.
#[derive(Default)]
struct OnLive {
    excluded: Vec<Excluded>,
    history: Vec<ExperimentOutcome>,
}

impl OnLive {
    fn decided(mut self, p: &Proposal, verdict: VerdictKind) -> OnLive {
        let id = self.history.len() as i64 + 1;
        self.excluded.extend(crate::menu::exclusions::of_proposal(
            p,
            &Why::Decided { experiment: id },
        ));
        self.history
            .insert(0, measured_on(id, p, verdict, live_digest()));
        self
    }

    /// A failed experiment is no decision: in the history only.
    fn failed(mut self, p: &Proposal) -> OnLive {
        let before = self.excluded.len();
        self = self.decided(p, VerdictKind::Failed);
        self.excluded.truncate(before);
        self
    }

    fn refused(mut self, p: &Proposal) -> OnLive {
        self.excluded.extend(crate::menu::exclusions::of_proposal(
            p,
            &Why::RefusedByPlanner { cycle: Some(1) },
        ));
        self
    }

    fn menu(&self, live: &Profile) -> Menu {
        repo_menu()
            .excluding(crate::menu::exclusions::base_values(
                crate::plan::unchanged(live),
            ))
            .excluding(self.excluded.clone())
    }

    /// Each entry's next arm, the entry with the larger lead first.
    fn next(&self, live: &Profile, shares: Option<&TokenShares>) -> Vec<Proposal> {
        let menu = self.menu(live);
        let arms = arms(&menu);
        let mut next = next_arms(&arms, &menu, &self.history, Some(&live_digest()), shares);
        next.sort_by(|a, b| b.1.total_cmp(&a.1));
        next.into_iter().map(|(i, _)| arms[i].clone()).collect()
    }

    fn next_of(
        &self,
        live: &Profile,
        shares: Option<&TokenShares>,
        id: MenuId,
    ) -> Option<Proposal> {
        self.next(live, shares)
            .into_iter()
            .find(|p| p.experiment == id)
    }
}

#[test]
fn the_big_step_on_the_favoured_side_comes_first() {
    let next = OnLive::default().next(&slow_start(), Some(&TRUNK_BOUND));
    // The draft acts on the whole token, the split on the trunk: the
    // longest draft first, then the largest trunk share; the expert tiers
    // take their deepest values after.
    assert_eq!(&next[..2], &[draft(8), split(1.0)]);
    assert!(next.contains(&warm(1024)), "{next:?}");
    // Re-ranking at the live count is an experiment of its own (new heat,
    // new list), so the pins have no live value and no line: UCB1's.
    assert!(
        next.iter().all(|p| p.experiment != MenuId::RerankPins),
        "{next:?}"
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
    // Every line done: the flat warm set's shallower values are still arms,
    // in UCB1's order.
    let on = OnLive::default()
        .decided(&draft(8), VerdictKind::WithinNoise)
        .decided(&split(1.0), VerdictKind::WithinNoise)
        .decided(&split(0.3), VerdictKind::WithinNoise)
        .decided(&warm(1024), VerdictKind::WithinNoise);
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
    assert_eq!(ranked.len(), arms(&menu).len());
    // None of them was measured anywhere: UCB1 plays each once.
    assert!(ranked.iter().all(|(_, s)| s.is_infinite()));
}
