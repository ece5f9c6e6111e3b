//! `stage_speculative`: set the speculative draft length (0 = off).

use serde_json::json;

use super::{Plan, PlanContext, PlanRefusal, Planner, integer};
use crate::menu::{MenuId, ParamValue, Proposal};
use crate::profile::Profile;

/// The `stage_speculative` planner.
pub struct StageSpeculative;

impl Planner for StageSpeculative {
    fn id(&self) -> MenuId {
        MenuId::StageSpeculative
    }

    fn plan(&self, ctx: &PlanContext<'_>, proposal: &Proposal) -> Result<Plan, PlanRefusal> {
        let draft_len = integer(proposal, "draft_len")?;
        let mut candidate = ctx.live.clone();
        candidate.speculative.draft_len = draft_len;
        // Whether drafting pays depends on acceptance, which only a run shows:
        // nothing to predict here, the measurement decides.
        let notes = json!({
            "draft_len": { "from": ctx.live.speculative.draft_len, "to": draft_len },
        });
        ctx.finish(candidate, Vec::new(), notes)
    }

    fn unchanged(&self, live: &Profile) -> Option<(&'static str, ParamValue)> {
        let n = i64::try_from(live.speculative.draft_len).ok()?;
        Some(("draft_len", ParamValue::Integer(n)))
    }
}
