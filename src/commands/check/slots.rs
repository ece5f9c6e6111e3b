//! The expert cache against what the checkpoint says: `[stack]
//! expert_bytes` against the slot size the checkpoint declares, and the live
//! profile's `memory.cache_gb` against the top-k + `cache_spare_slots`
//! slots the engine refuses to start below.
//!
//! What the checkpoint declares, and where it says it, is
//! `plan::checkpoint`'s.

use std::path::Path;

use super::Findings;
use crate::config::Config;
use crate::plan::checkpoint::{Declared, Said, declared_by};
use crate::plan::{self, PinList};
use crate::profile::Profile;

/// Checks `[stack] expert_bytes` against the checkpoint, and the live
/// profile's cache against the slots the engine needs. A profile the
/// engine refuses would fail every run; a wrong slot size makes every
/// planner's slot arithmetic wrong (on the real engine it refused every
/// rebalance).
pub fn check(config: &Config, live: Option<(&Profile, &Path)>, found: &mut Findings) {
    let stack = &config.stack;
    let Declared {
        slot_bytes, top_k, ..
    } = declared_by(config);
    match (stack.expert_bytes, &slot_bytes) {
        (Some(eb), Some(s)) if eb != s.value => found.fail(
            "slots",
            "expert_bytes",
            &format!(
                "[stack] expert_bytes = {eb}, but {} says the engine's slot for one expert is {} \
                 bytes: every cache and pin count the planners work out would be wrong; set \
                 expert_bytes = {} in {}",
                s.from,
                s.value,
                s.value,
                config.path.display()
            ),
        ),
        (Some(eb), Some(s)) => println!("slots    [stack] expert_bytes = {eb}: as {} says", s.from),
        (None, Some(s)) => println!(
            "slots    warning: [stack] expert_bytes is not set, so the planners cannot count \
             cache slots; {} says {}: set expert_bytes = {}",
            s.from, s.value, s.value
        ),
        (Some(eb), None) => println!(
            "slots    [stack] expert_bytes = {eb} (no checkpoint file the command lines name \
             declares its slot size to compare it with)"
        ),
        (None, None) => {}
    }
    let Some((profile, path)) = live else {
        return;
    };
    // The checkpoint's own figure when it has one: it is what the engine uses.
    let Some(slot) = slot_bytes.as_ref().map(|s| s.value).or(stack.expert_bytes) else {
        return;
    };
    let top_k = top_k.or_else(|| {
        let pins = profile.pins_path(path)?;
        PinList::load(&pins).ok().map(|p| Said {
            value: p.top_k,
            from: format!("the pin list {}", pins.display()),
        })
    });
    let Some(k) = top_k else {
        println!(
            "cache    top-k unknown (no checkpoint file or pin list declares it): the slots of \
             memory.cache_gb are not checked"
        );
        return;
    };
    let spare = stack.cache_spare_slots;
    let need = u64::from(k.value) + u64::from(spare);
    let said = if spare == 0 {
        format!("top-k = {} ({})", k.value, k.from)
    } else {
        format!(
            "top-k = {} ({}) + {spare} spare ([stack] cache_spare_slots)",
            k.value, k.from
        )
    };
    let cache_gb = profile.memory.cache_gb;
    let slots = plan::cache_slots(cache_gb, slot);
    if slots < need {
        found.fail(
            "cache",
            "cache slots",
            &format!(
                "{}: memory.cache_gb = {cache_gb} holds {slots} slot(s) of {slot} bytes, fewer \
                 than the {need} of {said} the engine needs, so it refuses every run; raise \
                 memory.cache_gb to at least {} (or check [stack] expert_bytes)",
                path.display(),
                plan::cache_gb_holding(need * slot, Some(slot))
            ),
        );
    } else {
        println!(
            "cache    {cache_gb} GB holds {slots} slots of {slot} bytes: ok ({said} needs {need})"
        );
    }
}
