//! The cycle's [`DuplicateCheck`]: the ledger's duplicates, and the planner
//! asked before a model's answer is settled on, so a proposal it would not
//! measure is refused and asked again within the cycle. The plan of the
//! proposal that passes is kept, so the cycle does not plan it twice.

use std::sync::Mutex;

use crate::brain::{DuplicateCheck, LedgerDuplicates};
use crate::ledger::{CycleId, ExperimentId, LedgerError};
use crate::menu::Proposal;
use crate::plan::{self, Plan, PlanContext, PlanRefusal};

pub struct PlanningDuplicateCheck<'a> {
    pub duplicates: LedgerDuplicates<'a>,
    pub ctx: &'a PlanContext<'a>,
    /// The last proposal that planned, with its plan.
    planned: Mutex<Option<(Proposal, Plan)>>,
}

impl<'a> PlanningDuplicateCheck<'a> {
    pub fn new(
        duplicates: LedgerDuplicates<'a>,
        ctx: &'a PlanContext<'a>,
    ) -> PlanningDuplicateCheck<'a> {
        PlanningDuplicateCheck {
            duplicates,
            ctx,
            planned: Mutex::new(None),
        }
    }

    /// The plan of `proposal`: the one made while screening it, else a new one.
    pub fn plan(&self, proposal: &Proposal) -> Result<Plan, PlanRefusal> {
        let kept = self.planned.lock().expect("not poisoned").take();
        match kept {
            Some((p, plan)) if p == *proposal => Ok(plan),
            _ => plan::plan(self.ctx, proposal),
        }
    }
}

/// The planner's refusal in our own words: the proposal (its bounded
/// values), the refusal, and the planner's predictions when it made some.
pub fn refusal_text(proposal: &Proposal, refusal: &PlanRefusal) -> String {
    match refusal.notes() {
        Some(notes) => format!(
            "{}: {refusal} (planner notes: {notes})",
            proposal.describe()
        ),
        None => format!("{}: {refusal}", proposal.describe()),
    }
}

impl DuplicateCheck for PlanningDuplicateCheck<'_> {
    async fn previous(&self, proposal: &Proposal) -> Result<Option<ExperimentId>, LedgerError> {
        self.duplicates.previous(proposal).await
    }

    async fn refused_by_planner(
        &self,
        proposal: &Proposal,
    ) -> Result<Option<CycleId>, LedgerError> {
        self.duplicates.refused_by_planner(proposal).await
    }

    fn planner_refusal(&self, proposal: &Proposal) -> Option<String> {
        match plan::plan(self.ctx, proposal) {
            Ok(plan) => {
                *self.planned.lock().expect("not poisoned") = Some((proposal.clone(), plan));
                None
            }
            Err(refusal) => Some(refusal_text(proposal, &refusal)),
        }
    }
}
