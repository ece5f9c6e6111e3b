//! What a checkpoint declares about itself: the engine's slot size for one
//! routed expert, top-k and the routed experts in all, read from the
//! directories the stack's command lines name (and the embedded default's
//! `model_dir`). `check` compares the first two with `[stack] expert_bytes`
//! and the live cache; the planners take top-k from here when no pin list
//! says it, so a first cycle does not propose a split whose cache holds
//! fewer than top-k experts (the engine refuses such a run with exit 2:
//! every seed of the shoot-out's B, whose start has no pin list, failed its
//! first cycle so, 2026-12-07). The experts in all bound the warm sets that
//! differ from the live one before any heat is recorded
//! (`DeepenWarmSet::infeasible_from`).
//!
//! A checkpoint says its slot size in one of two files: tinyk3's
//! `manifest.json` (`experts.stride`, the distance the cache divides its
//! bytes by, `shape.top_k`, and `shape.n_layers` times `shape.n_experts`), and the `orchestrator.env` that
//! `scripts/k3_checkpoint.py` writes beside a kimi-k3-in-c checkpoint
//! (`K3_EXPERT_BYTES`, `K3_TOP_K`). A kimi-k3-in-c `config.json` gives
//! top-k only (`num_experts_per_token`): the engine sizes its slot from the
//! tensors, which no small file declares.

use std::path::{Path, PathBuf};

use crate::config::Config;

/// A figure a checkpoint declares, with the file and key it was read from.
#[derive(Debug, Clone, PartialEq)]
pub struct Said<T> {
    pub value: T,
    /// The file and key it was read from.
    pub from: String,
}

/// What one checkpoint directory declares.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Declared {
    pub slot_bytes: Option<Said<u64>>,
    pub top_k: Option<Said<u32>>,
    /// Routed experts in the whole model (layers times experts a layer):
    /// tinyk3's manifest declares its shape; a kimi-k3-in-c checkpoint mixes
    /// dense layers in, which no small file counts.
    pub experts: Option<Said<u64>>,
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
        let layers = m["shape"]["n_layers"].as_u64();
        d.experts = layers
            .zip(m["shape"]["n_experts"].as_u64())
            .and_then(|(l, e)| l.checked_mul(e))
            .map(|v| Said {
                value: v,
                from: at("shape.n_layers x shape.n_experts"),
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
        .flat_map(|argv| crate::process::argv_files::named_files(argv, &config.base_dir))
        .map(|f| f.resolved)
        .chain(config.embedded.as_ref().map(|e| e.model_dir.clone()))
        .filter(|d| d.is_dir())
        .collect();
    dirs.dedup();
    dirs
}

/// What the checkpoints the config names declare, the first directory
/// that says a figure giving it. Reads a few small files: cheap enough for
/// every cycle, so a checkpoint made after the daemon started counts.
pub fn declared_by(config: &Config) -> Declared {
    checkpoint_dirs(config)
        .iter()
        .map(|dir| declared(dir))
        .fold(Declared::default(), |acc, d| Declared {
            slot_bytes: acc.slot_bytes.or(d.slot_bytes),
            top_k: acc.top_k.or(d.top_k),
            experts: acc.experts.or(d.experts),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tinyk3_manifest_and_a_k3_env_declare_slot_and_top_k() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("manifest.json"),
            r#"{"format":"tinyk3","shape":{"top_k":2,"n_layers":4,"n_experts":32},"experts":{"stride":24576}}"#,
        )
        .unwrap();
        let d = declared(dir.path());
        assert_eq!(d.slot_bytes.unwrap().value, 24576);
        assert_eq!(d.top_k.unwrap().value, 2);
        assert_eq!(d.experts.unwrap().value, 128);

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
