//! `remeasure`: an A/A of the live profile, which refreshes the noise floor
//! and the baseline trend.

use serde_json::json;

use super::{Plan, PlanContext, PlanRefusal, Planner};
use crate::menu::{MenuId, Proposal};

/// The `remeasure` planner.
pub struct Remeasure;

impl Planner for Remeasure {
    fn id(&self) -> MenuId {
        MenuId::Remeasure
    }

    fn plan(&self, ctx: &PlanContext<'_>, _proposal: &Proposal) -> Result<Plan, PlanRefusal> {
        // Both arms are the live profile as it is, from its own file: a copy
        // elsewhere would resolve a relative pins.file differently.
        Ok(Plan {
            candidate: ctx.live.clone(),
            candidate_path: ctx.live_path.to_path_buf(),
            files: Vec::new(),
            notes: json!({ "a_a": true, "profile": ctx.live.digest() }),
            candidate_is_live: true,
        })
    }
}
