//! The combined candidate of confirmed wins on different menu entries, all
//! measured against the same live profile: each win's knob changes applied
//! to the live profile at once, under the planners' budget rules.
//!
//! Memory is one pool, so memory knobs combine as byte deltas: a win that
//! pins experts paid for them out of the cache, a win that rebalances the
//! split moved bytes between trunk and cache, and applying both moves both.
//! Any other knob is set by at most one part (two parts setting it to
//! different values is a conflict, refused). The result must still be a
//! valid profile whose cache holds the experts a token needs.

use serde_json::json;

use super::{Plan, PlanContext, PlanRefusal, cache_gb_holding, cache_slots, gb_to_bytes};
use crate::menu::MenuId;
use crate::profile::{Knob, Profile};

/// One staged win to apply: its label for messages (e.g. `stage #3
/// (rerank_pins)`), its menu entry and its candidate profile.
#[derive(Debug, Clone, Copy)]
pub struct Part<'a> {
    pub label: &'a str,
    pub menu_id: MenuId,
    pub candidate: &'a Profile,
}

/// The memory knobs, combined as deltas of bytes rather than set.
const MEMORY: [Knob; 3] = [
    Knob::MemoryBudgetGb,
    Knob::MemoryTrunkGb,
    Knob::MemoryCacheGb,
];

/// Why parts cannot be combined. Each message names the parts and the rule.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ComposeRefusal {
    #[error("a composition needs wins on at least two different menu entries; {why}")]
    TooFew { why: String },
    #[error(
        "{first} sets {knob} to {first_value} and {second} to {second_value}: they change the same \
         knob, so their effects do not add up; approve the better one alone"
    )]
    SameKnob {
        knob: Knob,
        first: String,
        first_value: String,
        second: String,
        second_value: String,
    },
    #[error("{why}")]
    Budget { why: String },
}

/// Builds the combined candidate of `parts` on `ctx.live`, or says why the
/// combination is refused.
pub fn compose(ctx: &PlanContext<'_>, parts: &[Part<'_>]) -> Result<Plan, ComposeRefusal> {
    let mut entries: Vec<MenuId> = parts.iter().map(|p| p.menu_id).collect();
    entries.sort_by_key(|m| m.as_str());
    entries.dedup();
    if parts.len() < 2 || entries.len() != parts.len() {
        return Err(ComposeRefusal::TooFew {
            why: format!("got {} part(s) on {} entr(ies)", parts.len(), entries.len()),
        });
    }
    let live = ctx.live;
    let mut candidate = live.clone();
    let mut set_by: Vec<(Knob, usize)> = Vec::new();
    let (mut budget, mut trunk, mut cache) = (
        signed(live.memory.budget_gb),
        signed(live.memory.trunk_gb),
        signed(live.memory.cache_gb),
    );
    let mut changes = Vec::new();
    for (i, part) in parts.iter().enumerate() {
        let diff = live.diff(part.candidate);
        changes.push(json!({
            "part": part.label,
            "menu_id": part.menu_id,
            "changes": diff.iter().map(ToString::to_string).collect::<Vec<_>>(),
        }));
        let m = &part.candidate.memory;
        budget += signed(m.budget_gb) - signed(live.memory.budget_gb);
        trunk += signed(m.trunk_gb) - signed(live.memory.trunk_gb);
        cache += signed(m.cache_gb) - signed(live.memory.cache_gb);
        for change in diff.iter().filter(|c| !MEMORY.contains(&c.knob)) {
            if let Some(&(_, j)) = set_by.iter().find(|(k, _)| *k == change.knob) {
                let earlier = parts[j].candidate.get(change.knob);
                if earlier != change.to {
                    return Err(ComposeRefusal::SameKnob {
                        knob: change.knob,
                        first: parts[j].label.to_string(),
                        first_value: earlier.to_string(),
                        second: part.label.to_string(),
                        second_value: change.to.to_string(),
                    });
                }
                continue;
            }
            set_by.push((change.knob, i));
            set(&mut candidate, part.candidate, change.knob);
        }
    }
    for (knob, bytes) in [
        (Knob::MemoryBudgetGb, budget),
        (Knob::MemoryTrunkGb, trunk),
        (Knob::MemoryCacheGb, cache),
    ] {
        if bytes < 0 {
            return Err(ComposeRefusal::Budget {
                why: format!(
                    "applied together, the parts' memory changes leave {knob} at {} GB, below zero",
                    bytes as f64 / 1e9
                ),
            });
        }
    }
    candidate.memory.budget_gb = budget as f64 / 1e9;
    candidate.memory.trunk_gb = trunk as f64 / 1e9;
    candidate.memory.cache_gb = cache_gb_holding(cache as u64, ctx.expert_bytes);
    let mut notes = json!({ "parts": changes });
    if let Some(eb) = ctx.expert_bytes {
        let slots = cache as u64 / eb;
        notes["cache_slots"] = json!({
            "from": cache_slots(live.memory.cache_gb, eb),
            "to": slots,
        });
        if let Some((k, _)) = ctx.top_k() {
            let (min_slots, min_said) = ctx.min_cache_slots(k);
            if slots < min_slots {
                return Err(ComposeRefusal::Budget {
                    why: format!(
                        "applied together, the parts leave the expert cache {slots} slot(s) of \
                         {eb} bytes, fewer than {min_said}, which the engine refuses (pins paid \
                         out of a cache another part shrank)"
                    ),
                });
            }
        }
    }
    ctx.finish(candidate, Vec::new(), notes).map_err(|r| match r {
        PlanRefusal::NoChange => ComposeRefusal::Budget {
            why: "applied together, the parts' changes cancel out: the candidate is the live profile"
                .into(),
        },
        other => ComposeRefusal::Budget {
            why: other.to_string(),
        },
    })
}

/// GB as signed bytes, so deltas may go below zero before they are checked.
fn signed(gb: f64) -> i64 {
    gb_to_bytes(gb) as i64
}

/// Copies one non-memory knob's value from `from` into `to`.
fn set(to: &mut Profile, from: &Profile, knob: Knob) {
    match knob {
        Knob::PinsFile => to.pins.file.clone_from(&from.pins.file),
        Knob::PinsCount => to.pins.count = from.pins.count,
        Knob::FarAddr => to.far.addr.clone_from(&from.far.addr),
        Knob::FarWarmSet => to.far.warm_set = from.far.warm_set,
        Knob::SpeculativeDraftLen => to.speculative.draft_len = from.speculative.draft_len,
        Knob::ComputeThreads => to.compute.threads = from.compute.threads,
        Knob::ComputeBatchSize => to.compute.batch_size = from.compute.batch_size,
        Knob::ComputeUbatchSize => to.compute.ubatch_size = from.compute.ubatch_size,
        Knob::MemoryBudgetGb | Knob::MemoryTrunkGb | Knob::MemoryCacheGb => {}
    }
}

#[cfg(test)]
#[path = "compose_tests.rs"]
mod tests;
