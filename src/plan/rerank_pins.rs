//! `rerank_pins`: pin the `pin_count` hottest experts of the heat histogram,
//! paying for them out of the expert cache, and measure the candidate only if
//! a replay of the recorded trace predicts it beats the current pins, or
//! when it trades pins for a cache the trace cannot value (no reuse in it).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde_json::json;

use super::replay::{self, Lookups, Outcome};
use super::{
    Infeasible, PinList, Plan, PlanContext, PlanRefusal, Planner, StackSizes, cache_gb_holding,
    cache_slots, gb_to_bytes, integer,
};
use crate::heat::{Expert, Heat, Trace};
use crate::menu::{MenuId, ParamValue, Proposal};
use crate::profile::{Pins, Profile};
use crate::vocab::Digest;

/// The `rerank_pins` planner.
pub struct RerankPins;

impl Planner for RerankPins {
    fn id(&self) -> MenuId {
        MenuId::RerankPins
    }

    /// A profile with no pins: a re-rank of none is that profile, so
    /// `pin_count 0` leaves the menu as the live value, the origin of the
    /// pins' line (`brain::line_search`). At any other count a re-rank at the
    /// live count is an experiment (other pins, as many), so nothing is
    /// the live value. Without it the menu offered `pin_count 0` on a
    /// profile with none, the convergence look counted it as an arm left,
    /// and the served model's answer naming it was refused by the planner,
    /// the last value on the menu (the shoot-out's B, 2026-12-07).
    fn unchanged(&self, live: &Profile) -> Option<(&'static str, ParamValue)> {
        (live.pins.count == 0).then_some(("pin_count", ParamValue::Integer(0)))
    }

    /// More pins than the live cache and pins can pay for while the cache
    /// keeps the least slots the engine runs with (top-k, or at least 1
    /// when unknown, plus the spare ones): [`Planner::plan`] refuses each
    /// such count whatever the heat (with top-k unknown, a few more).
    fn infeasible_from(&self, live: &Profile, sizes: &StackSizes) -> Option<Infeasible> {
        let eb = sizes.expert_bytes.filter(|&b| b > 0)?;
        let k = sizes.top_k.unwrap_or(1).max(1);
        let least = u64::from(k) + u64::from(sizes.cache_spare_slots);
        let (pool, most) = pin_room(live, eb, least);
        let top_k = match sizes.top_k {
            Some(k) => format!("top-k = {k}"),
            None => "top-k, at least 1".into(),
        };
        Some(Infeasible {
            param: "pin_count",
            from: (most + 1) as f64,
            why: format!(
                "is more than the {most} pins the live cache and pins ({:.6} GB, experts of {eb} \
                 bytes) can pay for while the cache keeps {least} slots ({top_k}, plus [stack] \
                 cache_spare_slots): the planner refuses it whatever the heat",
                pool as f64 / 1e9
            ),
        })
    }

    fn plan(&self, ctx: &PlanContext<'_>, proposal: &Proposal) -> Result<Plan, PlanRefusal> {
        let n = integer(proposal, "pin_count")? as usize;
        // No pins, re-ranked: the live profile, whatever the heat says.
        if n == 0 && ctx.live.pins.count == 0 {
            return Err(PlanRefusal::NoChange);
        }
        let (heat, trace, eb) = inputs(ctx)?;
        let shape = heat.shape();
        let current = current_pins(ctx, heat)?;
        let (top_k, top_k_from) = ctx.top_k().ok_or_else(|| PlanRefusal::MissingInput {
            what: "the model's top-k (experts per token per layer), needed in the pin list header"
                .into(),
            fix: "pass it to the planner (tinyk3: shape.top_k in the checkpoint's manifest.json), \
                  or record a trace of ordinary decoding it can be read from"
                .into(),
        })?;

        let ranked = heat.ranked();
        if n > ranked.len() {
            return Err(PlanRefusal::Invalid {
                why: format!(
                    "pin_count {n} exceeds the {} experts with recorded heat; pinning experts that \
                     were never requested only takes RAM from the cache: choose pin_count <= {}",
                    ranked.len(),
                    ranked.len()
                ),
            });
        }
        let new: Vec<Expert> = ranked[..n].iter().map(|r| r.0).collect();

        // Pinned bytes come out of the cache so the budget stays fixed.
        let (min_slots, min_said) = ctx.min_cache_slots(top_k);
        let (pool, max_pins) = pin_room(ctx.live, eb, min_slots);
        let new_cache_bytes = pool
            .checked_sub(n as u64 * eb)
            .filter(|b| b / eb >= min_slots)
            .ok_or_else(|| PlanRefusal::Invalid {
                why: format!(
                    "pinning {n} experts of {eb} bytes leaves the cache fewer than {min_said} \
                     experts ({} GB of cache and current pins to share); choose pin_count <= {max_pins}",
                    pool as f64 / 1e9
                ),
            })?;
        let same_set = new.iter().collect::<BTreeSet<_>>() == current.iter().collect();
        if n == current.len() && same_set {
            return Err(PlanRefusal::NoChange);
        }

        let mut candidate = ctx.live.clone();
        candidate.memory.cache_gb = cache_gb_holding(new_cache_bytes, Some(eb));
        let mut files = Vec::new();
        candidate.pins = if n == 0 {
            Pins::default()
        } else {
            let list = PinList {
                shape,
                top_k,
                // The whole ranking, not only the pinned rows: the far tier
                // warms the rows after `pins.count` first.
                rows: ranked,
            };
            let (name, bytes) = named(&list);
            files = placements(ctx, &name, bytes);
            Pins {
                file: name,
                count: n as u64,
            }
        };

        let new_slots = (new_cache_bytes / eb) as usize;
        let current_slots = cache_slots(ctx.live.memory.cache_gb, eb) as usize;
        let replayed = Replayed::run(trace, &new, new_slots, &current, current_slots);
        let mut notes = replayed.notes(heat, &new, &current);
        notes["top_k"] = json!({ "value": top_k, "from": top_k_from });
        notes["expert_bytes"] = json!(eb);
        // Fewer pins give their bytes to the cache. A trace in which no
        // expert comes back within reach of a cache of these bytes (plain
        // LRU over all of them serves nothing: a bench of 8 tokens with a
        // draft of 8 is two forward passes) shows the pins' preloading and
        // nothing of that cache, so on it fewer pins lose by construction.
        // Such a refusal would be the replay's model, not evidence: in the
        // shoot-out's landscape B it refused pin_count 0, which the ground
        // truth measured faster. The candidate is measured instead.
        let cache_unseen = n < current.len() && replayed.lru.hits == 0;
        if cache_unseen {
            notes["replay_cannot_value_the_cache"] = json!(format!(
                "no lookup of the {} recorded comes back within {} slots (plain LRU hits 0), so \
                 the replay cannot value the cache that {} fewer pins would add: measured, not \
                 refused",
                replayed.lookups.len(),
                replayed.slots,
                current.len() - n
            ));
        }
        if replayed.new.hits <= replayed.current.hits && !cache_unseen {
            return Err(PlanRefusal::NotPredictedToHelp {
                why: format!(
                    "replaying the {} recorded lookups, {n} new pins would hit {:.2}% against {:.2}% \
                     for the {} current ones",
                    replayed.lookups.len(),
                    100.0 * replayed.new.hit_rate(),
                    100.0 * replayed.current.hit_rate(),
                    current.len()
                ),
                notes,
            });
        }
        ctx.finish(candidate, files, notes)
    }
}

/// The bytes the live cache and pins share (pinned bytes come out of the
/// cache), and the most experts of `eb` bytes they can pin while the cache
/// keeps `least` slots: what [`Planner::plan`] refuses beyond, and what
/// [`Planner::infeasible_from`] closes.
fn pin_room(live: &Profile, eb: u64, least: u64) -> (u64, u64) {
    let pool = gb_to_bytes(live.memory.cache_gb) + live.pins.count * eb;
    (pool, (pool / eb).saturating_sub(least))
}

/// The histogram, the trace and the expert size, or what to do to get them.
fn inputs<'a>(ctx: &PlanContext<'a>) -> Result<(&'a Heat, &'a Trace, u64), PlanRefusal> {
    let heat = ctx.heat.ok_or_else(|| PlanRefusal::MissingInput {
        what: "the expert heat histogram (expert_hist.json)".into(),
        fix: "set [stack.metrics] heat to where the stack publishes it (tinyk3: /heat, or \
              `bench --dump-cache-trace DIR`)"
            .into(),
    })?;
    let trace = ctx.trace.ok_or_else(|| PlanRefusal::MissingInput {
        what: "the request trace (expert_trace.bin) that rerank_pins replays before measuring"
            .into(),
        fix: "set [stack.metrics] heat_trace to the file the stack dumps (tinyk3: `bench \
              --dump-cache-trace DIR`)"
            .into(),
    })?;
    if trace.requests().is_empty() {
        return Err(PlanRefusal::MissingInput {
            what: "recorded requests: the trace is empty".into(),
            fix: "let the stack serve some tokens, then dump the trace again".into(),
        });
    }
    if trace.shape() != heat.shape() {
        return Err(PlanRefusal::Invalid {
            why: format!(
                "the trace ({}) and the heat histogram ({}) describe different models; dump both \
                 from the same stack",
                trace.shape(),
                heat.shape()
            ),
        });
    }
    let eb = ctx.expert_bytes.ok_or_else(|| PlanRefusal::MissingInput {
        what: "the size of one routed expert".into(),
        fix: "set [stack] expert_bytes in the configuration (tinyk3's default checkpoint: 1572864)"
            .into(),
    })?;
    Ok((heat, trace, eb))
}

/// The experts the live profile pins, checked against the heat's model.
fn current_pins(ctx: &PlanContext<'_>, heat: &Heat) -> Result<Vec<Expert>, PlanRefusal> {
    let count = ctx.live.pins.count as usize;
    if count == 0 {
        return Ok(Vec::new());
    }
    let path = ctx.live.pins_path(ctx.live_path).unwrap_or_default();
    let list = ctx.current_pins.ok_or_else(|| PlanRefusal::MissingInput {
        what: format!("the live pin list {}", path.display()),
        fix: "load it into the plan context (PinList::load); if the file is gone, restore it or \
              set pins.count = 0 in the live profile"
            .into(),
    })?;
    if list.shape != heat.shape() {
        return Err(PlanRefusal::Invalid {
            why: format!(
                "the live pin list {} is for {}, but the heat is for {}",
                path.display(),
                list.shape,
                heat.shape()
            ),
        });
    }
    if list.rows.len() < count {
        return Err(PlanRefusal::Invalid {
            why: format!(
                "the live profile pins {count} rows but its pin list {} has {}; the engine refuses it too",
                path.display(),
                list.rows.len()
            ),
        });
    }
    Ok(list.pinned(count).iter().map(|r| r.0).collect())
}

/// The pin list's file name (its content digest) and bytes.
fn named(list: &PinList) -> (String, Vec<u8>) {
    let text = list.render();
    let digest = Digest::of(text.as_bytes());
    (
        format!("pins-{}.k3experts", digest.short()),
        text.into_bytes(),
    )
}

/// Where the pin list is written. `pins.file` is relative to the profile's
/// directory: the candidate is read from the profiles directory when it is
/// measured, and from the live profile's directory once approved, so the
/// list goes into both (the same name, the same content).
fn placements(ctx: &PlanContext<'_>, name: &str, bytes: Vec<u8>) -> Vec<(PathBuf, Vec<u8>)> {
    let mut files = vec![(ctx.profiles_dir.join(name), bytes.clone())];
    let live_dir = ctx.live_path.parent().unwrap_or(Path::new("."));
    if live_dir != ctx.profiles_dir {
        files.push((live_dir.join(name), bytes));
    }
    files
}

/// The four replays `rerank_pins` records, all at the same bytes.
struct Replayed {
    lookups: Lookups,
    slots: usize,
    new: Outcome,
    current: Outcome,
    lru: Outcome,
    min: Outcome,
}

impl Replayed {
    fn run(
        trace: &Trace,
        new: &[Expert],
        new_slots: usize,
        current: &[Expert],
        current_slots: usize,
    ) -> Replayed {
        let lookups = Lookups::of_trace(trace);
        let slots = new.len() + new_slots;
        Replayed {
            new: replay::pinned_lru(&lookups, new, new_slots),
            current: replay::pinned_lru(&lookups, current, current_slots),
            lru: replay::lru(&lookups, slots),
            min: replay::belady_min(&lookups, slots),
            lookups,
            slots,
        }
    }

    fn notes(&self, heat: &Heat, new: &[Expert], current: &[Expert]) -> serde_json::Value {
        json!({
            "predicted_hit_rate": {
                "new_pins": self.new.hit_rate(),
                "current_pins": self.current.hit_rate(),
                "lru": self.lru.hit_rate(),
                "belady_min": self.min.hit_rate(),
            },
            "replay": {
                "requests": self.lookups.requests(),
                "lookups": self.lookups.len(),
                "blocks": self.lookups.blocks(),
                "widest_block": self.lookups.widest_block(),
                "slots": self.slots,
                "new_pins": self.new,
                "current_pins": self.current,
                "lru": self.lru,
                "belady_min": self.min,
            },
            "pins": { "new": new.len(), "current": current.len() },
            "heat_coverage": {
                "new_pins": heat.coverage(new),
                "current_pins": heat.coverage(current),
            },
        })
    }
}

#[cfg(test)]
#[path = "rerank_pins_tests.rs"]
mod tests;
