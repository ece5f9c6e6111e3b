//! Which lever to try first: the one acting on the largest measured part of
//! the live profile's token (Amdahl's law: a lever can save at most the
//! share of the token it acts on). The bandit orders the arms it has never
//! measured by this; measured arms are ranked by their record alone.
//!
//! The shares are medians over the live profile's recent runs of the parts
//! the stack reports (`trunk_seconds_per_token`, `expert_seconds_per_token`,
//! `far_hit_share`), each over that run's seconds per token. Which part each
//! entry acts on is the report's projection model (`report::projection`):
//! pins and the warm set move where experts come from (the expert part; the
//! warm set only the far tier's share of it), the trunk/cache split moves
//! RAM between the two parts, and a draft saves whole passes of both.

use crate::judge::noise::median;
use crate::ledger::MeasuredToken;
use crate::menu::MenuId;

/// How many of the live profile's recent runs the shares are taken over.
pub const RUNS: u32 = 24;

/// The live profile's token as shares of its measured seconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TokenShares {
    /// The dense trunk's share (0..1).
    pub trunk: f64,
    /// The routed experts' share (0..1).
    pub expert: f64,
    /// The share of expert lookups the far tier served, when reported.
    pub far_hit: Option<f64>,
}

impl TokenShares {
    /// The medians over `runs` that report both the trunk and the expert
    /// part; `None` when none does (a stack that reports no parts).
    pub fn of_runs(runs: &[MeasuredToken]) -> Option<TokenShares> {
        let share = |part: fn(&MeasuredToken) -> Option<f64>| -> Vec<f64> {
            runs.iter()
                .filter(|r| r.seconds_per_token > 0.0)
                .filter(|r| {
                    r.parts.trunk_seconds_per_token.is_some()
                        && r.parts.expert_seconds_per_token.is_some()
                })
                .filter_map(|r| part(r).map(|x| (x / r.seconds_per_token).clamp(0.0, 1.0)))
                .collect()
        };
        let trunk = median(&share(|r| r.parts.trunk_seconds_per_token))?;
        let expert = median(&share(|r| r.parts.expert_seconds_per_token))?;
        let far: Vec<f64> = runs.iter().filter_map(|r| r.parts.far_hit_share).collect();
        Some(TokenShares {
            trunk,
            expert,
            far_hit: median(&far),
        })
    }

    /// The share of the token `entry` can act on (0..1).
    pub fn reach(&self, entry: MenuId) -> f64 {
        let r = match entry {
            MenuId::StageSpeculative => self.trunk + self.expert,
            MenuId::RebalanceTrunkCache => self.trunk.max(self.expert),
            MenuId::RerankPins => self.expert,
            MenuId::DeepenWarmSet => self.expert * self.far_hit.unwrap_or(1.0),
            MenuId::Remeasure => 0.0,
        };
        r.clamp(0.0, 1.0)
    }
}

/// The reach of an entry acting on one part of a token whose parts are
/// unknown: less than the draft's whole token, the same for every part, so
/// those entries take turns after the draft.
pub const UNKNOWN_PART: f64 = 0.9;

/// How far ahead an entry's unmeasured arms go: its reach, shared out over
/// the arms of it already measured, so one entry's many grid points do not
/// crowd out the rest. When the parts are unknown (a first cycle, a stack
/// that reports none), the draft still acts on the whole token, whatever its
/// parts, and every other entry on [`UNKNOWN_PART`] of it: a draft is tried
/// first, which also makes every later run cheaper when it wins.
pub fn priority(shares: Option<&TokenShares>, entry: MenuId, measured_arms: u32) -> f64 {
    let reach = match (shares, entry) {
        (Some(s), _) => s.reach(entry),
        (None, MenuId::StageSpeculative) => 1.0,
        (None, MenuId::Remeasure) => 0.0,
        (None, _) => UNKNOWN_PART,
    };
    reach / f64::from(1 + measured_arms)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ledger::TokenParts;

    fn run(spt: f64, trunk: f64, expert: f64, far: Option<f64>) -> MeasuredToken {
        MeasuredToken {
            seconds_per_token: spt,
            parts: TokenParts {
                trunk_seconds_per_token: Some(trunk),
                expert_seconds_per_token: Some(expert),
                far_hit_share: far,
                draft_acceptance: None,
            },
        }
    }

    #[test]
    fn shares_are_medians_of_each_runs_parts_over_its_token() {
        let runs = [
            run(1.0, 0.8, 0.1, Some(0.5)),
            run(2.0, 1.4, 0.4, Some(0.7)),
            run(1.0, 0.9, 0.05, None),
        ];
        let s = TokenShares::of_runs(&runs).unwrap();
        assert!((s.trunk - 0.8).abs() < 1e-12, "{s:?}");
        assert!((s.expert - 0.1).abs() < 1e-12, "{s:?}");
        assert_eq!(s.far_hit, Some(0.6));
        // A run reporting one part only says nothing about the split.
        let partial = MeasuredToken {
            seconds_per_token: 1.0,
            parts: TokenParts {
                trunk_seconds_per_token: Some(0.5),
                ..TokenParts::default()
            },
        };
        assert_eq!(TokenShares::of_runs(&[partial]), None);
        assert_eq!(TokenShares::of_runs(&[]), None);
    }

    #[test]
    fn a_trunk_bound_token_puts_the_draft_and_the_split_before_the_expert_tiers() {
        // The demo's slow start: no KV cache, so the trunk dominates.
        let s = TokenShares {
            trunk: 0.85,
            expert: 0.1,
            far_hit: Some(0.3),
        };
        let order = |s: &TokenShares| {
            let mut ids = vec![
                MenuId::RerankPins,
                MenuId::DeepenWarmSet,
                MenuId::RebalanceTrunkCache,
                MenuId::StageSpeculative,
            ];
            ids.sort_by(|a, b| s.reach(*b).total_cmp(&s.reach(*a)));
            ids
        };
        assert_eq!(
            order(&s),
            vec![
                MenuId::StageSpeculative,
                MenuId::RebalanceTrunkCache,
                MenuId::RerankPins,
                MenuId::DeepenWarmSet
            ]
        );
        // An expert-bound token served from the far tier: the tiers first
        // after the draft, which saves whole passes either way.
        let far = TokenShares {
            trunk: 0.1,
            expert: 0.85,
            far_hit: Some(0.9),
        };
        assert_eq!(order(&far)[0], MenuId::StageSpeculative);
        assert!(far.reach(MenuId::RerankPins) > far.reach(MenuId::DeepenWarmSet));
    }

    #[test]
    fn an_entrys_priority_is_shared_over_its_measured_arms() {
        let s = TokenShares {
            trunk: 0.8,
            expert: 0.15,
            far_hit: None,
        };
        let draft = |n| priority(Some(&s), MenuId::StageSpeculative, n);
        let split = |n| priority(Some(&s), MenuId::RebalanceTrunkCache, n);
        assert!(draft(0) > split(0));
        // Once one draft length was measured, the split's first arm comes next.
        assert!(split(0) > draft(1));
        // Unknown parts: the draft first, then the entries take turns.
        assert_eq!(priority(None, MenuId::StageSpeculative, 0), 1.0);
        assert_eq!(priority(None, MenuId::RerankPins, 0), UNKNOWN_PART);
        assert_eq!(priority(None, MenuId::DeepenWarmSet, 1), UNKNOWN_PART / 2.0);
        assert!(priority(None, MenuId::StageSpeculative, 1) < UNKNOWN_PART);
    }
}
