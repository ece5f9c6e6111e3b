//! `deepen_warm_set`: grow or shrink the far tier's warm set.

use serde_json::json;

use super::{Infeasible, Plan, PlanContext, PlanRefusal, Planner, StackSizes, integer};
use crate::menu::{MenuId, ParamValue, Proposal};
use crate::profile::Profile;

/// The `deepen_warm_set` planner.
pub struct DeepenWarmSet;

impl Planner for DeepenWarmSet {
    fn id(&self) -> MenuId {
        MenuId::DeepenWarmSet
    }

    fn plan(&self, ctx: &PlanContext<'_>, proposal: &Proposal) -> Result<Plan, PlanRefusal> {
        let warm_set = integer(proposal, "warm_set")?;
        let live = ctx.live;
        if live.far.addr.is_empty() {
            return Err(PlanRefusal::NotApplicable {
                why: "the live profile has no far tier (far.addr is empty), so it has no warm set \
                      to change"
                    .into(),
            });
        }
        let mut candidate = live.clone();
        candidate.far.warm_set = warm_set;
        let mut notes = json!({ "warm_set": { "from": live.far.warm_set, "to": warm_set } });
        // The far tier is asked only for experts not pinned locally; past
        // that many, a bigger warm set holds nothing more.
        if let Some(heat) = ctx.heat {
            let askable = (heat.shape().total() as u64).saturating_sub(live.pins.count);
            notes["experts_not_pinned"] = json!(askable);
            if warm_set != live.far.warm_set
                && warm_set.min(askable) == live.far.warm_set.min(askable)
            {
                return Err(PlanRefusal::NotPredictedToHelp {
                    why: format!(
                        "warm sets of {} and {warm_set} both hold all {askable} experts the far tier \
                         can be asked for",
                        live.far.warm_set
                    ),
                    notes,
                });
            }
        }
        ctx.finish(candidate, Vec::new(), notes)
    }

    fn unchanged(&self, live: &Profile) -> Option<(&'static str, ParamValue)> {
        let n = i64::try_from(live.far.warm_set).ok()?;
        Some(("warm_set", ParamValue::Integer(n)))
    }

    /// A live warm set that holds every expert the far tier can be asked
    /// for (those not pinned, of the experts the checkpoint declares):
    /// every warm set from that many on is the live profile again. The
    /// planner refuses each once a heat is recorded ([`Planner::plan`]);
    /// before one is, the shoot-out's B (2026-12-07, a live 128 of 128)
    /// measured `warm_set 1024` as a first A/B, and its served model named
    /// 31 warm sets above 128 a seed, refused over 10 of its 15-16 cycles.
    fn infeasible_from(&self, live: &Profile, sizes: &StackSizes) -> Option<Infeasible> {
        if live.far.addr.is_empty() {
            return None;
        }
        let experts = sizes.experts?;
        let askable = experts.saturating_sub(live.pins.count);
        (live.far.warm_set >= askable).then(|| Infeasible {
            param: "warm_set",
            from: askable as f64,
            why: format!(
                "holds all {askable} experts the far tier can be asked for ({experts} in the \
                 checkpoint, {} pinned), as the live warm set of {} does: the live profile again",
                live.pins.count, live.far.warm_set
            ),
        })
    }
}
