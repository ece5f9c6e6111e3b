//! `rebalance_trunk_cache`: split the RAM of the resident trunk and the expert
//! cache anew, the total fixed; pinned experts keep their bytes.

use serde_json::json;

use super::replay::{self, Lookups};
use super::{
    Plan, PlanContext, PlanRefusal, Planner, cache_gb_holding, cache_slots, gb_to_bytes, number,
};
use crate::heat::Expert;
use crate::menu::{MenuId, ParamValue, Proposal};
use crate::profile::Profile;

/// The trunk share is rounded to whole MB (10^6 bytes) so candidates read
/// well and near-equal fractions collapse into one profile.
const MB: u64 = 1_000_000;

/// The `rebalance_trunk_cache` planner.
pub struct RebalanceTrunkCache;

impl Planner for RebalanceTrunkCache {
    fn id(&self) -> MenuId {
        MenuId::RebalanceTrunkCache
    }

    fn plan(&self, ctx: &PlanContext<'_>, proposal: &Proposal) -> Result<Plan, PlanRefusal> {
        let fraction = number(proposal, "trunk_fraction")?;
        if !(0.0..=1.0).contains(&fraction) {
            return Err(PlanRefusal::Invalid {
                why: format!("trunk_fraction = {fraction} must be within 0 to 1"),
            });
        }
        let live = ctx.live;
        let total = gb_to_bytes(live.memory.trunk_gb) + gb_to_bytes(live.memory.cache_gb);
        let trunk_of = |fraction: f64| {
            ((fraction * total as f64 / MB as f64).round() as u64 * MB).min(total / MB * MB)
        };
        let trunk = trunk_of(fraction);
        let cache = total - trunk;
        let eb = ctx.expert_bytes;
        // Unknown top-k (no pin list, a trace it cannot be read from) is
        // still at least one: a candidate with no expert cache at all is one
        // no engine runs, so it is refused here rather than failing a cycle.
        let top_k = ctx.top_k().unwrap_or((1, "the least any router picks"));
        if let (Some(eb), (k, _)) = (eb, top_k) {
            let (min_slots, min_said) = ctx.min_cache_slots(k);
            if cache / eb < min_slots {
                let works = |f: f64| (total - trunk_of(f)) / eb >= min_slots;
                return Err(PlanRefusal::Invalid {
                    why: format!(
                        "trunk_fraction {fraction} leaves {} GB of cache, fewer than {min_said} \
                         experts of {eb} bytes, which the engine refuses; {}",
                        cache as f64 / 1e9,
                        what_works(ctx, total, min_slots * eb, eb, works)
                    ),
                });
            }
        }
        let mut candidate = live.clone();
        candidate.memory.trunk_gb = trunk as f64 / 1e9;
        candidate.memory.cache_gb = cache_gb_holding(cache, eb);
        let mut notes = json!({
            "trunk_gb": { "from": live.memory.trunk_gb, "to": candidate.memory.trunk_gb },
            "cache_gb": { "from": live.memory.cache_gb, "to": candidate.memory.cache_gb },
        });
        if let Some(eb) = eb {
            notes["cache_slots"] = json!({
                "from": cache_slots(live.memory.cache_gb, eb),
                "to": cache_slots(candidate.memory.cache_gb, eb),
            });
            notes["predicted_cache_hit_rate"] = predicted(ctx, eb, candidate.memory.cache_gb);
        }
        ctx.finish(candidate, Vec::new(), notes)
    }

    /// The live split, rounded as the bandit's grid and a person write
    /// fractions (nine decimals): 0.5 for a 50/50 split.
    fn unchanged(&self, live: &Profile) -> Option<(&'static str, ParamValue)> {
        let total = gb_to_bytes(live.memory.trunk_gb) + gb_to_bytes(live.memory.cache_gb);
        if total == 0 {
            return None;
        }
        let fraction = gb_to_bytes(live.memory.trunk_gb) as f64 / total as f64;
        let rounded = (fraction * 1e9).round() / 1e9;
        Some(("trunk_fraction", ParamValue::Number(rounded)))
    }

    /// Half a MB of the split's total: the trunk is planned in whole MB, so
    /// fractions that close to one another plan the same sizes.
    fn same_within(&self, live: &Profile) -> Option<(&'static str, f64)> {
        let total = gb_to_bytes(live.memory.trunk_gb) + gb_to_bytes(live.memory.cache_gb);
        (total > 0).then(|| ("trunk_fraction", 0.5 * MB as f64 / total as f64))
    }
}

/// The largest `trunk_fraction` that leaves the engine its cache, said as a
/// search would propose it: on the menu entry's grid when the menu gives
/// one (a refusal naming 0.975 sends a search off its 0.05 grid), else to
/// three decimals; or that none does, when even all of the RAM as cache
/// holds too few experts (a wrong `[stack] expert_bytes`, most likely).
fn what_works(
    ctx: &PlanContext<'_>,
    total: u64,
    need: u64,
    eb: u64,
    works: impl Fn(f64) -> bool,
) -> String {
    if total < need || !works(0.0) {
        return format!(
            "no trunk_fraction works: all {} GB as cache holds {} of them (check [stack] \
             expert_bytes against the checkpoint with `orchestrator check`)",
            total as f64 / 1e9,
            total / eb
        );
    }
    let exact = (total - need) as f64 / total as f64;
    match ctx.grid(MenuId::RebalanceTrunkCache, "trunk_fraction") {
        Some(grid) => match grid.largest_working(exact, &works) {
            Some(v) => format!(
                "the largest trunk_fraction on the menu's grid (steps of {} from {}) that works \
                 is {v}",
                grid.step, grid.min
            ),
            None => format!(
                "no trunk_fraction on the menu's grid (steps of {} from {}) works; the largest \
                 that does is {:.3}",
                grid.step,
                grid.min,
                (exact * 1000.0).floor() / 1000.0
            ),
        },
        None => {
            let largest = (total - need) / MB * MB;
            format!(
                "the largest trunk_fraction that works is {:.3}",
                (largest as f64 / total as f64 * 1000.0).floor() / 1000.0
            )
        }
    }
}

/// The replayed hit rate of the live pins with the old and the new cache.
/// Only the expert side: what a smaller resident trunk costs in re-reads is
/// for the measurement to show.
fn predicted(ctx: &PlanContext<'_>, eb: u64, new_cache_gb: f64) -> serde_json::Value {
    let Some(trace) = ctx.trace else {
        return json!({ "skipped": "no request trace to replay" });
    };
    let count = ctx.live.pins.count as usize;
    let pins: Vec<Expert> = match ctx.current_pins {
        Some(list) if list.shape == trace.shape() && list.rows.len() >= count => {
            list.pinned(count).iter().map(|r| r.0).collect()
        }
        _ if count == 0 => Vec::new(),
        _ => return json!({ "skipped": "the live pin list is missing or does not fit the trace" }),
    };
    let lookups = Lookups::of_trace(trace);
    let at = |gb: f64| replay::pinned_lru(&lookups, &pins, cache_slots(gb, eb) as usize).hit_rate();
    json!({ "from": at(ctx.live.memory.cache_gb), "to": at(new_cache_gb), "lookups": lookups.len() })
}
