//! What a proposer may not propose on the live profile, as menu
//! [`Excluded`] values: the live profile's own values (the planner names
//! them) and what the ledger shows decided or refused by the planner on
//! that profile. The cycle puts them into the menu it hands the proposers,
//! so the schema leaves them out, the validator refuses them by name, the
//! prompt lists them, and the bandit's grid skips them.

use serde_json::{Value, json};

use super::LedgerDuplicates;
use crate::ledger::LedgerError;
use crate::menu::{Excluded, Menu, MenuId, ParamValue, Proposal, Why};

/// The live values, from [`crate::plan::unchanged`].
pub fn live(unchanged: Vec<(MenuId, &'static str, ParamValue)>) -> Vec<Excluded> {
    unchanged
        .into_iter()
        .map(|(experiment, param, value)| Excluded {
            experiment,
            param: param.to_string(),
            value,
            why: Why::Live,
        })
        .collect()
}

/// The values of `proposal`, excluded for `why`.
pub fn of_proposal(proposal: &Proposal, why: &Why) -> Vec<Excluded> {
    proposal
        .params
        .iter()
        .map(|(param, value)| Excluded {
            experiment: proposal.experiment,
            param: param.clone(),
            value: value.clone(),
            why: why.clone(),
        })
        .collect()
}

impl LedgerDuplicates<'_> {
    /// Everything decided or refused by the planner on this live profile,
    /// newest first, read back through the validator of `menu` (the menu
    /// before any exclusion): a stored row it no longer admits, after a
    /// menu edit, is skipped.
    pub async fn refused(&self, menu: &Menu) -> Result<Vec<Excluded>, LedgerError> {
        let menu = &menu.clone().with_rationale_max_chars(0);
        let mut out = Vec::new();
        for (id, menu_id, params) in self.ledger.decided_on(self.base_digest).await? {
            let answer = json!({"experiment": menu_id, "params": params});
            if let Some(p) = read_back(menu, answer) {
                out.extend(of_proposal(&p, &Why::Decided { experiment: id.0 }));
            }
        }
        for (cycle, parsed) in self.ledger.planner_refusals_on(self.base_digest).await? {
            if let Some(p) = read_back(menu, parsed) {
                let why = Why::RefusedByPlanner {
                    cycle: Some(cycle.0),
                };
                out.extend(of_proposal(&p, &why));
            }
        }
        Ok(out)
    }
}

/// A stored `{"experiment":..,"params":..}` as a proposal of `menu`.
fn read_back(menu: &Menu, mut stored: Value) -> Option<Proposal> {
    if stored.get("experiment") == Some(&json!(MenuId::Remeasure)) {
        return None;
    }
    stored
        .as_object_mut()?
        .insert("rationale".into(), json!(""));
    menu.validate_value(&stored).ok()
}
