//! The expert cache against what the checkpoint says: `[stack]
//! expert_bytes` against the slot size the checkpoint declares, and the live
//! profile's `memory.cache_gb` against the top-k + `cache_spare_slots`
//! slots the engine refuses to start below.
//!
//! A checkpoint says its slot size in one of two files, found in the
//! directories the stack's command lines name (and the embedded default's
//! `model_dir`): tinyk3's `manifest.json` (`experts.stride`, the distance
//! the cache divides its bytes by, and `shape.top_k`), and the
//! `orchestrator.env` that `scripts/k3_checkpoint.py` writes beside a
//! kimi-k3-in-c checkpoint (`K3_EXPERT_BYTES`, `K3_TOP_K`). A kimi-k3-in-c
//! `config.json` gives top-k only (`num_experts_per_token`): the engine
//! sizes its slot from the tensors, which no small file declares.

use std::path::{Path, PathBuf};

use super::Findings;
use crate::config::Config;
use crate::plan::{self, PinList};
use crate::profile::Profile;

/// A figure a checkpoint declares, with the file and key it was read from.
#[derive(Debug, Clone, PartialEq)]
struct Said<T> {
    value: T,
    from: String,
}

/// What one checkpoint directory declares.
#[derive(Debug, Clone, Default, PartialEq)]
struct Declared {
    slot_bytes: Option<Said<u64>>,
    top_k: Option<Said<u32>>,
}

/// Reads the declarations of the checkpoint in `dir`, if it holds one.
fn declared(dir: &Path) -> Declared {
    let mut d = Declared::default();
    let manifest = dir.join("manifest.json");
    if let Some(m) = read_json(&manifest).filter(|m| m["format"] == "tinyk3") {
        let at = |key: &str| format!("{} {key}", manifest.display());
        d.slot_bytes = m["experts"]["stride"].as_u64().map(|v| Said {
            value: v,
            from: at("experts.stride"),
        });
        d.top_k = m["shape"]["top_k"]
            .as_u64()
            .and_then(|v| u32::try_from(v).ok())
            .map(|v| Said {
                value: v,
                from: at("shape.top_k"),
            });
        return d;
    }
    let env = dir.join("orchestrator.env");
    if let Ok(text) = std::fs::read_to_string(&env) {
        let get = |key: &str| {
            text.lines()
                .filter_map(|l| l.split_once('='))
                .find(|(k, _)| k.trim() == key)
                .and_then(|(_, v)| v.trim().parse::<u64>().ok())
        };
        let at = |key: &str| format!("{} {key}", env.display());
        d.slot_bytes = get("K3_EXPERT_BYTES").map(|v| Said {
            value: v,
            from: at("K3_EXPERT_BYTES"),
        });
        d.top_k = get("K3_TOP_K")
            .and_then(|v| u32::try_from(v).ok())
            .map(|v| Said {
                value: v,
                from: at("K3_TOP_K"),
            });
    }
    if d.top_k.is_none() {
        let config = dir.join("config.json");
        d.top_k = read_json(&config)
            .and_then(|c| c["num_experts_per_token"].as_u64())
            .and_then(|v| u32::try_from(v).ok())
            .map(|v| Said {
                value: v,
                from: format!("{} num_experts_per_token", config.display()),
            });
    }
    d
}

fn read_json(path: &Path) -> Option<serde_json::Value> {
    serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()
}

/// The directories the stack's command lines name, and the embedded
/// default's checkpoint: where a checkpoint may declare its shape.
fn checkpoint_dirs(config: &Config) -> Vec<PathBuf> {
    let argvs = [
        config.stack.bench.as_ref().map(|b| &b.argv),
        config.stack.shadow.as_ref().map(|s| &s.argv),
    ];
    let mut dirs: Vec<PathBuf> = argvs
        .into_iter()
        .flatten()
        .flat_map(|argv| super::argv_files::named_files(argv, &config.base_dir))
        .map(|f| f.resolved)
        .chain(config.embedded.as_ref().map(|e| e.model_dir.clone()))
        .filter(|d| d.is_dir())
        .collect();
    dirs.dedup();
    dirs
}

/// Checks `[stack] expert_bytes` against the checkpoint, and the live
/// profile's cache against the slots the engine needs. A profile the
/// engine refuses would fail every run; a wrong slot size makes every
/// planner's slot arithmetic wrong (on the real engine it refused every
/// rebalance).
pub fn check(config: &Config, live: Option<(&Profile, &Path)>, found: &mut Findings) {
    let stack = &config.stack;
    let mut slot_bytes: Option<Said<u64>> = None;
    let mut top_k: Option<Said<u32>> = None;
    for dir in checkpoint_dirs(config) {
        let d = declared(&dir);
        slot_bytes = slot_bytes.or(d.slot_bytes);
        top_k = top_k.or(d.top_k);
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tinyk3_manifest_and_a_k3_env_declare_slot_and_top_k() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("manifest.json"),
            r#"{"format":"tinyk3","shape":{"top_k":2},"experts":{"stride":24576}}"#,
        )
        .unwrap();
        let d = declared(dir.path());
        assert_eq!(d.slot_bytes.unwrap().value, 24576);
        assert_eq!(d.top_k.unwrap().value, 2);

        let k3 = tempfile::tempdir().unwrap();
        std::fs::write(
            k3.path().join("orchestrator.env"),
            "K3_TOP_K=4\nK3_EXPERT_BYTES=114688\n",
        )
        .unwrap();
        let d = declared(k3.path());
        let slot = d.slot_bytes.unwrap();
        assert_eq!(slot.value, 114688);
        assert!(
            slot.from.ends_with("orchestrator.env K3_EXPERT_BYTES"),
            "{slot:?}"
        );
        assert_eq!(d.top_k.unwrap().value, 4);

        // A real checkpoint's config.json says top-k, not the slot.
        let real = tempfile::tempdir().unwrap();
        std::fs::write(
            real.path().join("config.json"),
            r#"{"num_experts_per_token":16}"#,
        )
        .unwrap();
        let d = declared(real.path());
        assert_eq!((d.slot_bytes, d.top_k.map(|k| k.value)), (None, Some(16)));
    }
}
