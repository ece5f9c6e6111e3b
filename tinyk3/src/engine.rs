//! The engine: a checkpoint opened under a set of tiers, with greedy decoding,
//! speculative decoding and the counters a bench or server reports.

use std::path::Path;
use std::time::Instant;

use serde::Serialize;

use crate::error::{Error, Result};
use crate::far::{FarClient, FarStatus};
use crate::heat::Heat;
use crate::manifest::{Manifest, Shape};
use crate::math::argmax;
use crate::model::{self, KvCache};
use crate::moe::{MoeCtx, moe_layer};
use crate::phases::{PhaseSeconds, timed};
use crate::pins::PinList;
use crate::profile::{GB, Settings};
use crate::tiers::{ExpertId, ExpertStore, TierHits};
use crate::trunk::Trunk;

/// Draft proposals and how many the full model accepted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct DraftCounts {
    pub proposed: u64,
    pub accepted: u64,
}

/// What is held in RAM, per tier.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct Residency {
    pub pinned_experts: u64,
    pub pinned_bytes: u64,
    pub cache_experts: u64,
    pub cache_bytes: u64,
    pub cache_capacity_experts: u64,
    pub trunk_resident_bytes: u64,
    pub trunk_total_bytes: u64,
}

/// The engine's counters, all measured from its own work.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Counters {
    pub hits: TierHits,
    /// Bytes read from disk around the page cache (experts + trunk re-reads).
    pub disk_bytes_read: u64,
    pub expert_bytes_read: u64,
    pub trunk_bytes_read: u64,
    pub far: FarStatus,
    pub draft: DraftCounts,
    pub residency: Residency,
    pub cold_read_mode: &'static str,
    /// Seconds spent in each part of the forward pass (see [`PhaseSeconds`]).
    pub phases: PhaseSeconds,
}

/// How `generate` decodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecodeMode {
    /// Keep a KV cache; otherwise every token recomputes the whole sequence.
    pub incremental: bool,
    /// Draft tokens per verification (needs `incremental`); 0 = off.
    pub draft_len: usize,
}

/// The result of `generate`.
#[derive(Debug, Clone, PartialEq)]
pub struct Generation {
    pub ids: Vec<u32>,
    pub prefill_seconds: f64,
    /// Wall time of the decode steps only.
    pub decode_seconds: f64,
    /// FNV-1a 64 of the bits of every logit vector a token was chosen from.
    pub logits_digest: u64,
    /// Seconds of the decode steps spent in each part of the forward pass.
    pub decode_phases: PhaseSeconds,
    /// Expert lookups of the decode steps, by the tier that served them.
    pub decode_hits: TierHits,
}

/// FNV-1a 64 over bytes, continuing from `h`.
pub fn fnv1a(mut h: u64, bytes: &[u8]) -> u64 {
    for b in bytes {
        h ^= *b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01B3);
    }
    h
}

/// FNV-1a 64 offset basis.
pub const FNV_OFFSET: u64 = 0xCBF2_9CE4_8422_2325;

/// A tiered MoE engine over one checkpoint.
pub struct Engine {
    manifest: Manifest,
    trunk: Trunk,
    store: ExpertStore,
    far: Option<FarClient>,
    heat: Heat,
    hits: TierHits,
    draft: DraftCounts,
    phases: PhaseSeconds,
    kv: KvCache,
    /// The tokens whose keys and values `kv` holds, in order: what a later
    /// prompt may share as a prefix.
    seq: Vec<u32>,
    draft_kv: KvCache,
    /// The same for the draft's cache, which lags when a request did not speculate.
    draft_seq: Vec<u32>,
    threads: usize,
    cache_capacity: usize,
}

/// GB with enough digits to be usable as a flag value, rounded up.
fn gb_up(bytes: u64) -> String {
    format!("{:.4}", (bytes as f64 / GB * 1e4).ceil() / 1e4)
}

impl Engine {
    /// Opens `model_dir` under `settings`: checks the budget, loads pins and the
    /// resident trunk, connects and warms the far tier.
    pub fn open(model_dir: &Path, settings: &Settings) -> Result<Engine> {
        let m = Manifest::load(model_dir)?;
        let shape = m.shape.clone();
        let stride = m.experts.stride;
        let cache_capacity = (settings.cache_gb * GB / stride as f64).floor() as usize;
        if cache_capacity < shape.top_k {
            return Err(Error::Usage(format!(
                "cache_gb = {} holds {cache_capacity} experts of {stride} bytes, but a token needs top-k = {} at once; the smallest cache that works is {} GB",
                settings.cache_gb,
                shape.top_k,
                gb_up(shape.top_k as u64 * stride)
            )));
        }
        let pin_rows = match &settings.pins_file {
            Some(path) => PinList::load(path, &shape)?.rows,
            None if settings.pin_count > 0 => {
                return Err(Error::Usage(format!(
                    "pin count {} given without a pin list; pass --pins FILE (or pins.file in the profile)",
                    settings.pin_count
                )));
            }
            None => Vec::new(),
        };
        if settings.pin_count > pin_rows.len() {
            return Err(Error::Usage(format!(
                "pin count {} exceeds the {} rows of the pin list; use at most {}",
                settings.pin_count,
                pin_rows.len(),
                pin_rows.len()
            )));
        }
        let pins: Vec<ExpertId> = pin_rows[..settings.pin_count].iter().map(|r| r.0).collect();
        let trunk_bytes = match settings.trunk_gb {
            Some(gb) => (gb * GB) as u64,
            None => u64::MAX,
        };
        if let Some(budget_gb) = settings.budget_gb {
            let pinned = pins.len() as u64 * stride;
            let cache = (settings.cache_gb * GB) as u64;
            let need = trunk_bytes.saturating_add(cache).saturating_add(pinned);
            if need as f64 > budget_gb * GB {
                return Err(Error::Usage(format!(
                    "budget_gb = {budget_gb} is too small: trunk_gb + cache_gb + {} pinned experts need {} GB; the smallest budget that works is {} GB (or shrink trunk_gb, cache_gb or pins.count)",
                    pins.len(),
                    gb_up(need),
                    gb_up(need)
                )));
            }
        }
        let store = ExpertStore::open(model_dir, &m, cache_capacity, &pins)?;
        let trunk = Trunk::open(model_dir, &m, trunk_bytes)?;
        let mut far = settings.far_addr.as_deref().map(FarClient::connect);
        if let Some(client) = far
            .as_mut()
            .filter(|c| c.available() && settings.far_warm_set > 0)
        {
            let list = warm_list(&trunk, &shape, &pin_rows, &pins, settings.far_warm_set)?;
            client.warm(&list);
        }
        Ok(Engine {
            heat: Heat::new(shape.n_layers, shape.n_experts),
            kv: KvCache::new(shape.n_layers, shape.d_model),
            draft_kv: KvCache::new(shape.draft_layers, shape.d_model),
            seq: Vec::new(),
            draft_seq: Vec::new(),
            manifest: m,
            trunk,
            store,
            far,
            hits: TierHits::default(),
            draft: DraftCounts::default(),
            phases: PhaseSeconds::default(),
            threads: settings.threads.max(1),
            cache_capacity,
        })
    }

    /// The checkpoint's manifest.
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// The model's shape.
    pub fn shape(&self) -> &Shape {
        &self.manifest.shape
    }

    /// Every expert request so far.
    pub fn heat(&self) -> &Heat {
        &self.heat
    }

    /// The heat record, for a server that drains its trace into a bounded ring.
    pub fn heat_mut(&mut self) -> &mut Heat {
        &mut self.heat
    }

    /// Positions in the KV cache.
    pub fn position(&self) -> usize {
        self.kv.len()
    }

    /// Forgets the sequence (KV caches); counters and tiers are kept.
    pub fn reset(&mut self) {
        self.truncate_kv(0);
        self.truncate_draft_kv(0);
    }

    fn truncate_kv(&mut self, len: usize) {
        self.kv.truncate(len);
        self.seq.truncate(len);
    }

    fn truncate_draft_kv(&mut self, len: usize) {
        self.draft_kv.truncate(len);
        self.draft_seq.truncate(len);
    }

    /// Feeds `tokens` (a prompt without its last token) after reusing the KV
    /// cache of the longest prefix they share with the tokens fed before, as
    /// llama.cpp's `cache_prompt` and vLLM's automatic prefix caching do (Kwon
    /// et al., "Efficient Memory Management for Large Language Model Serving
    /// with PagedAttention", SOSP 2023). Returns how many positions were reused.
    ///
    /// Exact, not approximate: a position's keys and values depend only on the
    /// tokens up to it, and every position is computed with the single-token
    /// arithmetic whatever batch it came in, so the reused entries are the bits
    /// a fresh prefill would write. `draft` also brings the draft's cache along.
    pub fn resume(&mut self, tokens: &[u32], draft: bool) -> Result<usize> {
        let shared = common_prefix(&self.seq, tokens);
        self.truncate_kv(shared);
        if shared < tokens.len() {
            self.forward(&tokens[shared..], 0)?;
        }
        if draft {
            let d = common_prefix(&self.draft_seq, tokens);
            self.truncate_draft_kv(d);
            if d < tokens.len() {
                self.draft_forward(&tokens[d..], 0)?;
            }
        }
        Ok(shared)
    }

    /// Byte-level tokens of a text prompt.
    pub fn encode(&self, text: &str) -> Vec<u32> {
        text.bytes().map(u32::from).collect()
    }

    /// Text of byte-level tokens; ids above 255 render as `<N>`.
    pub fn decode(&self, ids: &[u32]) -> String {
        let mut bytes = Vec::new();
        for &id in ids {
            match u8::try_from(id) {
                Ok(b) => bytes.push(b),
                Err(_) => bytes.extend_from_slice(format!("<{id}>").as_bytes()),
            }
        }
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// The counters as of now.
    pub fn counters(&self) -> Counters {
        let (pinned, cached, stride) = self.store.residency();
        Counters {
            hits: self.hits,
            disk_bytes_read: self.store.bytes_read() + self.trunk.bytes_read(),
            expert_bytes_read: self.store.bytes_read(),
            trunk_bytes_read: self.trunk.bytes_read(),
            far: self
                .far
                .as_ref()
                .map(|f| f.status().clone())
                .unwrap_or_default(),
            draft: self.draft,
            residency: Residency {
                pinned_experts: pinned as u64,
                pinned_bytes: pinned as u64 * stride,
                cache_experts: cached as u64,
                cache_bytes: cached as u64 * stride,
                cache_capacity_experts: self.cache_capacity as u64,
                trunk_resident_bytes: self.trunk.resident_bytes(),
                trunk_total_bytes: self.trunk.total_bytes(),
            },
            cold_read_mode: self.store.cold_mode().name(),
            phases: self.phases,
        }
    }

    /// Runs the full model on `tokens` at the next positions; returns logits of the last `want` positions.
    ///
    /// On an error the cache is cut back to where it was, so it never holds a
    /// position that only some layers have seen.
    fn forward(&mut self, tokens: &[u32], want: usize) -> Result<Vec<Vec<f32>>> {
        let start = self.kv.len();
        let out = self.forward_layers(tokens, want);
        if out.is_err() {
            self.truncate_kv(start);
        }
        out
    }

    fn forward_layers(&mut self, tokens: &[u32], want: usize) -> Result<Vec<Vec<f32>>> {
        let shape = self.manifest.shape.clone();
        let mut xs = Vec::with_capacity(tokens.len());
        let trunk = &mut self.trunk;
        timed(&mut self.phases.trunk, || -> Result<()> {
            for &t in tokens {
                xs.push(trunk.embed_row(t as usize)?);
            }
            Ok(())
        })?;
        self.seq.extend_from_slice(tokens);
        for l in 0..shape.n_layers {
            let (ms, routes) = timed(&mut self.phases.trunk, || {
                model::attention(
                    &mut self.trunk,
                    &shape,
                    l,
                    &mut xs,
                    &mut self.kv,
                    self.threads,
                )?;
                model::dense_and_route(&mut self.trunk, &shape, l, &mut xs, self.threads)
            })?;
            let mut ctx = MoeCtx {
                shape: &shape,
                store: &mut self.store,
                far: self.far.as_mut(),
                heat: &mut self.heat,
                hits: &mut self.hits,
                phases: &mut self.phases,
                threads: self.threads,
            };
            let ys = moe_layer(&mut ctx, l, &ms, &routes)?;
            for (x, y) in xs.iter_mut().zip(&ys) {
                crate::math::add_into(x, y);
            }
        }
        if want == 0 {
            return Ok(Vec::new());
        }
        let last: Vec<&[f32]> = xs[xs.len() - want..].iter().map(|x| x.as_slice()).collect();
        timed(&mut self.phases.trunk, || {
            model::head(&mut self.trunk, &shape, &last, self.threads)
        })
    }

    /// Feeds a prompt (one batched pass); returns the logits after its last token.
    pub fn prefill(&mut self, tokens: &[u32]) -> Result<Vec<f32>> {
        if tokens.is_empty() {
            return Err(Error::Usage(
                "the prompt is empty; pass at least one token".into(),
            ));
        }
        Ok(self.forward(tokens, 1)?.pop().expect("one logit vector"))
    }

    /// Feeds one token; returns the logits for the next (for greedy or constrained picking).
    pub fn step(&mut self, token: u32) -> Result<Vec<f32>> {
        Ok(self.forward(&[token], 1)?.pop().expect("one logit vector"))
    }

    /// Feeds tokens whose logits are not needed, to the full model and, when
    /// `draft` (speculating), to the draft too: a server's prompt prefill.
    pub fn feed(&mut self, tokens: &[u32], draft: bool) -> Result<()> {
        self.forward(tokens, 0)?;
        if draft {
            self.draft_forward(tokens, 0)?;
        }
        Ok(())
    }

    /// The draft: embedding, the bottom `draft_layers` attention blocks, the head.
    fn draft_forward(&mut self, tokens: &[u32], want: usize) -> Result<Vec<Vec<f32>>> {
        let t = Instant::now();
        let start = self.draft_kv.len();
        let out = self.draft_layers(tokens, want);
        if out.is_err() {
            self.truncate_draft_kv(start);
        }
        self.phases.draft += t.elapsed().as_secs_f64();
        out
    }

    fn draft_layers(&mut self, tokens: &[u32], want: usize) -> Result<Vec<Vec<f32>>> {
        let shape = self.manifest.shape.clone();
        let mut xs = Vec::with_capacity(tokens.len());
        for &t in tokens {
            xs.push(self.trunk.embed_row(t as usize)?);
        }
        self.draft_seq.extend_from_slice(tokens);
        for l in 0..shape.draft_layers {
            model::attention(
                &mut self.trunk,
                &shape,
                l,
                &mut xs,
                &mut self.draft_kv,
                self.threads,
            )?;
        }
        if want == 0 {
            return Ok(Vec::new());
        }
        let last: Vec<&[f32]> = xs[xs.len() - want..].iter().map(|x| x.as_slice()).collect();
        model::head(&mut self.trunk, &shape, &last, self.threads)
    }

    /// Greedy generation of `n` tokens after `prompt`, timing the decode steps.
    ///
    /// All but the last prompt token are prefilled; each decode step feeds one token
    /// and picks the next, so `n` decode steps give `n` tokens.
    pub fn generate(&mut self, prompt: &[u32], n: usize, mode: DecodeMode) -> Result<Generation> {
        if prompt.is_empty() {
            return Err(Error::Usage(
                "the prompt is empty; pass --ids or --prompt".into(),
            ));
        }
        if mode.draft_len > 0 && !mode.incremental {
            return Err(Error::Usage(
                "speculative decoding needs incremental decoding (--incremental)".into(),
            ));
        }
        self.reset();
        let (head, last) = prompt.split_at(prompt.len() - 1);
        let t0 = Instant::now();
        if mode.incremental && !head.is_empty() {
            self.forward(head, 0)?;
            if mode.draft_len > 0 {
                self.draft_forward(head, 0)?;
            }
        }
        let prefill_seconds = t0.elapsed().as_secs_f64();
        let (phases0, hits0) = (self.phases, self.hits);
        let t1 = Instant::now();
        let mut ids = Vec::with_capacity(n);
        let mut digest = FNV_OFFSET;
        let mut pick = |logits: &[f32], ids: &mut Vec<u32>| {
            digest = fnv1a(digest, crate::math::as_bytes(logits));
            let t = argmax(logits) as u32;
            ids.push(t);
            t
        };
        if !mode.incremental {
            let mut seq = prompt.to_vec();
            while ids.len() < n {
                self.reset();
                let logits = self.forward(&seq, 1)?;
                seq.push(pick(&logits[0], &mut ids));
            }
        } else if mode.draft_len == 0 {
            let mut next = last[0];
            while ids.len() < n {
                let logits = self.step(next)?;
                next = pick(&logits, &mut ids);
            }
        } else {
            let mut next = last[0];
            while ids.len() < n {
                next = self.speculate(
                    next,
                    mode.draft_len.min(n - ids.len() - 1),
                    &mut ids,
                    &mut pick,
                )?;
            }
        }
        let decode_seconds = t1.elapsed().as_secs_f64();
        let h = self.hits;
        Ok(Generation {
            ids,
            prefill_seconds,
            decode_seconds,
            logits_digest: digest,
            decode_phases: self.phases - phases0,
            decode_hits: TierHits {
                pinned: h.pinned - hits0.pinned,
                cache: h.cache - hits0.cache,
                far: h.far - hits0.far,
                cold: h.cold - hits0.cold,
            },
        })
    }

    /// One draft-and-verify round starting from input `t`; returns the next input token.
    ///
    /// Public for servers that drive decoding themselves (after [`Engine::feed`]
    /// with `draft = true`): `pick` chooses each token from exact full-model logits.
    pub fn speculate(
        &mut self,
        t: u32,
        k: usize,
        ids: &mut Vec<u32>,
        pick: &mut impl FnMut(&[f32], &mut Vec<u32>) -> u32,
    ) -> Result<u32> {
        let pos = self.kv.len();
        let mut inputs = vec![t];
        for _ in 0..k {
            let cur = *inputs.last().expect("non-empty");
            let logits = self.draft_forward(&[cur], 1)?;
            inputs.push(argmax(&logits[0]) as u32);
        }
        let logits = self.forward(&inputs, inputs.len())?;
        self.draft.proposed += k as u64;
        let mut accepted = 0;
        let mut next = 0;
        for (i, l) in logits.iter().enumerate() {
            next = pick(l, ids);
            if i < k && next == inputs[i + 1] {
                accepted += 1;
            } else {
                break;
            }
        }
        self.draft.accepted += accepted as u64;
        // Keep the inputs whose outputs were used: t and the accepted proposals.
        let keep = pos + accepted + 1;
        self.truncate_kv(keep);
        if self.draft_kv.len() > keep {
            self.truncate_draft_kv(keep);
        }
        while self.draft_kv.len() < keep {
            let i = self.draft_kv.len() - pos;
            self.draft_forward(&[inputs[i]], 0)?;
        }
        Ok(next)
    }
}

/// How many leading tokens `a` and `b` share.
fn common_prefix(a: &[u32], b: &[u32]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// Experts to hold warm in the far tier: the pin list's rows not pinned locally,
/// then each layer's experts by router-bias rank (the popularity prior).
fn warm_list(
    trunk: &Trunk,
    shape: &Shape,
    rows: &[(ExpertId, u64)],
    pins: &[ExpertId],
    n: usize,
) -> Result<Vec<ExpertId>> {
    let mut seen: std::collections::HashSet<ExpertId> = pins.iter().copied().collect();
    let mut list: Vec<ExpertId> = Vec::new();
    for (id, _) in rows {
        if list.len() < n && seen.insert(*id) {
            list.push(*id);
        }
    }
    if list.len() < n {
        let mut ranked = Vec::with_capacity(shape.n_layers);
        for l in 0..shape.n_layers {
            let bias = trunk.router_bias(l)?;
            let mut order: Vec<usize> = (0..shape.n_experts).collect();
            order.sort_by(|&a, &b| bias[b].total_cmp(&bias[a]).then(a.cmp(&b)));
            ranked.push(order);
        }
        'fill: for r in 0..shape.n_experts {
            for (l, order) in ranked.iter().enumerate() {
                if list.len() >= n {
                    break 'fill;
                }
                if seen.insert((l, order[r])) {
                    list.push((l, order[r]));
                }
            }
        }
    }
    Ok(list)
}

#[cfg(test)]
#[path = "engine_tests.rs"]
pub(crate) mod tests;
