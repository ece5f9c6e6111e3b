//! `tinyk3 bench`: open the engine under a profile, generate, report measured JSON.

use std::time::Instant;

use serde_json::json;

use crate::cli::BenchArgs;
use crate::engine::{DecodeMode, Engine, Generation};
use crate::error::{Error, Result};
use crate::phases::PhaseSeconds;
use crate::pins::PinList;
use crate::profile::{GB, Settings, check_gb, check_threads};

/// Merges the profile (if any) with explicit flags, which win.
fn settings(args: &BenchArgs) -> Result<Settings> {
    let mut s = match &args.profile {
        Some(p) => Settings::from_profile(p)?,
        None => Settings::default(),
    };
    if let Some(v) = args.cache_gb {
        s.cache_gb = check_gb("--cache-gb", v)?;
    }
    if let Some(v) = args.trunk_gb {
        s.trunk_gb = Some(check_gb("--trunk-gb", v)?);
    }
    if let Some(v) = args.budget_gb {
        s.budget_gb = Some(check_gb("--budget-gb", v)?);
    }
    if let Some(v) = args.threads {
        s.threads = check_threads("--threads", v)?;
    }
    if let Some(p) = &args.pins {
        s.pins_file = Some(p.clone());
        s.pin_count = 0;
    }
    if let Some(n) = args.pin_count {
        s.pin_count = n;
    } else if let Some(pins) = &args.pins {
        // --pins alone pins the whole list.
        let shape = crate::manifest::Manifest::load(&args.model)?.shape;
        s.pin_count = PinList::load(pins, &shape)?.rows.len();
    }
    if let Some(a) = &args.far {
        s.far_addr = (!a.is_empty()).then(|| a.clone());
    }
    if let Some(n) = args.far_warm_set {
        s.far_warm_set = n;
    }
    if let Some(n) = args.spec {
        if n > 0 && !args.incremental {
            return Err(Error::Usage(
                "--spec needs --incremental (speculation verifies against the KV cache)".into(),
            ));
        }
        s.draft_len = n;
    }
    Ok(s)
}

fn prompt(args: &BenchArgs) -> Result<Vec<u32>> {
    match (&args.ids, &args.prompt) {
        (Some(ids), _) => ids
            .split(',')
            .map(|t| {
                t.trim()
                    .parse::<u32>()
                    .map_err(|_| Error::Usage(format!("--ids {ids:?}: {t:?} is not a token id; pass comma-separated integers like 1,2,3")))
            })
            .collect(),
        (None, Some(text)) if !text.is_empty() => Ok(text.bytes().map(u32::from).collect()),
        _ => Err(Error::Usage("no prompt: pass --ids 1,2,3 or --prompt TEXT".into())),
    }
}

/// Peak resident set size of this process (VmHWM), in bytes.
pub fn peak_rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// The measured parts of one decode token, for the bench JSON.
struct DecodeParts {
    /// Seconds per decode token in each part of the forward pass.
    per_token: PhaseSeconds,
    /// `seconds_per_token` minus trunk, expert and draft: the time no timer
    /// covers (picking tokens, KV bookkeeping). Reported, never hidden.
    residual: f64,
    /// Share of the decode steps' expert lookups the far tier served; `None`
    /// when decoding made no lookup.
    far_hit_share: Option<f64>,
}

impl DecodeParts {
    fn of(g: &Generation, seconds_per_token: f64) -> DecodeParts {
        let per_token = g.decode_phases.per(g.ids.len());
        let h = g.decode_hits;
        let lookups = h.pinned + h.cache + h.far + h.cold;
        DecodeParts {
            residual: seconds_per_token - per_token.trunk - per_token.expert - per_token.draft,
            far_hit_share: (lookups > 0).then(|| h.far as f64 / lookups as f64),
            per_token,
        }
    }
}

/// Runs the bench; prints the JSON report and writes it to `--out`.
pub fn run(args: &BenchArgs) -> Result<()> {
    let s = settings(args)?;
    let ids = prompt(args)?;
    if let Some(t) = &args.trunk {
        eprintln!(
            "tinyk3: --trunk {} ignored: the trunk is part of the checkpoint in {} (use --trunk-gb to size its resident part)",
            t.display(),
            args.model.display()
        );
    }
    // A profile describes a served stack, which always decodes with a KV cache.
    let mode = DecodeMode {
        incremental: args.incremental || args.profile.is_some(),
        draft_len: s.draft_len,
    };
    if mode.draft_len > 0 && !mode.incremental {
        return Err(Error::Usage(
            "speculative.draft_len > 0 needs --incremental".into(),
        ));
    }
    let t0 = Instant::now();
    let mut engine = Engine::open(&args.model, &s)?;
    let startup_seconds = t0.elapsed().as_secs_f64();
    let before = engine.counters();
    let g = engine.generate(&ids, args.gen_tokens as usize, mode)?;
    let c = engine.counters();
    if let Some(dir) = &args.dump_cache_trace {
        engine.heat().write_dir(dir)?;
    }
    let r = &c.residency;
    let held = r.trunk_resident_bytes
        + r.cache_capacity_experts * engine.manifest().experts.stride
        + r.pinned_bytes;
    let budget_bytes = s.budget_gb.map_or(held, |b| (b * GB) as u64);
    let accept = (c.draft.proposed > 0).then(|| c.draft.accepted as f64 / c.draft.proposed as f64);
    let seconds_per_token = g.decode_seconds / g.ids.len() as f64;
    let parts = DecodeParts::of(&g, seconds_per_token);
    let report = json!({
        "generated_ids": g.ids,
        "seconds_per_token": seconds_per_token,
        "trunk_seconds_per_token": parts.per_token.trunk,
        "expert_seconds_per_token": parts.per_token.expert,
        "residual_seconds_per_token": parts.residual,
        "far_hit_share": parts.far_hit_share,
        "draft_acceptance": accept,
        "phases": {
            "trunk": parts.per_token.trunk,
            "expert": parts.per_token.expert,
            "expert_local": parts.per_token.expert_local,
            "expert_far": parts.per_token.expert_far,
            "expert_cold": parts.per_token.expert_cold,
            "draft": parts.per_token.draft,
            "residual": parts.residual,
        },
        "decode_hits": g.decode_hits,
        "tokens": g.ids.len(),
        "prompt_tokens": ids.len(),
        "hits": c.hits,
        "disk_bytes_read": c.disk_bytes_read - before.disk_bytes_read,
        "expert_bytes_read": c.expert_bytes_read - before.expert_bytes_read,
        "trunk_bytes_read": c.trunk_bytes_read - before.trunk_bytes_read,
        "startup_disk_bytes_read": before.disk_bytes_read,
        "startup_loaded_bytes": r.trunk_resident_bytes + r.pinned_bytes,
        "far": c.far,
        "draft": {"proposed": c.draft.proposed, "accepted": c.draft.accepted, "acceptance": accept},
        "peak_rss_bytes": peak_rss_bytes(),
        "budget_bytes": budget_bytes,
        "held_weight_bytes_limit": held,
        "residency": c.residency,
        "cold_read_mode": c.cold_read_mode,
        "logits_digest": format!("{:016x}", g.logits_digest),
        "seconds": {"startup": startup_seconds, "prefill": g.prefill_seconds, "decode": g.decode_seconds},
        "settings": {
            "threads": s.threads,
            "incremental": mode.incremental,
            "draft_len": mode.draft_len,
            "cache_gb": s.cache_gb,
            "trunk_gb": s.trunk_gb,
            "pin_count": s.pin_count,
            "far_addr": s.far_addr,
            "far_warm_set": s.far_warm_set,
        },
        "model_digest": engine.manifest().digest,
        "expert_requests": engine.heat().requests(),
    });
    let text = serde_json::to_string(&report).expect("report serialises");
    if let Some(out) = &args.out {
        std::fs::write(out, format!("{text}\n"))
            .map_err(|e| Error::io(format!("cannot write --out {}", out.display()), e))?;
    }
    println!("{text}");
    Ok(())
}
