//! The dense part of the forward pass: embedding, attention with a KV cache,
//! the dense block and router, and the head.
//!
//! Every function takes a batch of consecutive positions and computes each one
//! with exactly the arithmetic of a single-token step (the same `dot` calls in the
//! same order), so a batched verify or prefill equals token-by-token decoding.

use crate::error::Result;
use crate::manifest::{SegmentKind, Shape};
use crate::math::{add_into, dot, matvec_multi, rmsnorm, silu};
use crate::trunk::Trunk;

/// Per-layer keys and values of every position seen so far.
#[derive(Debug, Clone)]
pub struct KvCache {
    keys: Vec<Vec<f32>>,
    values: Vec<Vec<f32>>,
    d: usize,
}

impl KvCache {
    /// An empty cache for `layers` layers of width `d`.
    pub fn new(layers: usize, d: usize) -> KvCache {
        KvCache {
            keys: vec![Vec::new(); layers],
            values: vec![Vec::new(); layers],
            d,
        }
    }

    /// Positions held (all layers advance together between batches).
    pub fn len(&self) -> usize {
        self.keys.first().map_or(0, |k| k.len() / self.d)
    }

    /// Whether nothing has been seen yet.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Forgets positions from `len` on (rejected draft tokens).
    pub fn truncate(&mut self, len: usize) {
        for (k, v) in self.keys.iter_mut().zip(&mut self.values) {
            k.truncate(len * self.d);
            v.truncate(len * self.d);
        }
    }
}

/// A router decision: experts ascending by id with their gates.
#[derive(Debug, Clone, PartialEq)]
pub struct Route {
    pub experts: Vec<(usize, f32)>,
}

fn refs(v: &[Vec<f32>]) -> Vec<&[f32]> {
    v.iter().map(|x| x.as_slice()).collect()
}

/// Causal multi-head attention of one query over `len` cached positions.
fn attend(q: &[f32], keys: &[f32], values: &[f32], len: usize, heads: usize) -> Vec<f32> {
    let d = q.len();
    let hd = d / heads;
    let scale = 1.0 / (hd as f32).sqrt();
    let mut out = vec![0f32; d];
    let mut scores = vec![0f32; len];
    for h in 0..heads {
        let qh = &q[h * hd..(h + 1) * hd];
        let mut max = f32::NEG_INFINITY;
        for (j, s) in scores.iter_mut().enumerate() {
            *s = dot(qh, &keys[j * d + h * hd..j * d + (h + 1) * hd]) * scale;
            max = max.max(*s);
        }
        let mut sum = 0f32;
        for s in scores.iter_mut() {
            *s = (*s - max).exp();
            sum += *s;
        }
        let oh = &mut out[h * hd..(h + 1) * hd];
        for (j, s) in scores.iter().enumerate() {
            let a = s / sum;
            for (o, v) in oh
                .iter_mut()
                .zip(&values[j * d + h * hd..j * d + (h + 1) * hd])
            {
                *o += a * v;
            }
        }
    }
    out
}

/// Adds layer `l`'s attention to each position of `xs`, appending to the KV cache.
pub fn attention(
    trunk: &mut Trunk,
    shape: &Shape,
    l: usize,
    xs: &mut [Vec<f32>],
    kv: &mut KvCache,
    threads: usize,
) -> Result<()> {
    let d = shape.d_model;
    let t = trunk.tensors(SegmentKind::Attn(l))?;
    let (g, wq, wk, wv, wo) = (t[0], t[1], t[2], t[3], t[4]);
    let hs: Vec<Vec<f32>> = xs.iter().map(|x| rmsnorm(x, g)).collect();
    let q = matvec_multi(wq, d, d, &refs(&hs), threads);
    let k = matvec_multi(wk, d, d, &refs(&hs), threads);
    let v = matvec_multi(wv, d, d, &refs(&hs), threads);
    let base = kv.keys[l].len() / d;
    for p in 0..xs.len() {
        kv.keys[l].extend_from_slice(&k[p]);
        kv.values[l].extend_from_slice(&v[p]);
    }
    let att: Vec<Vec<f32>> = (0..xs.len())
        .map(|p| {
            attend(
                &q[p],
                &kv.keys[l],
                &kv.values[l],
                base + p + 1,
                shape.n_heads,
            )
        })
        .collect();
    let o = matvec_multi(wo, d, d, &refs(&att), threads);
    for (x, o) in xs.iter_mut().zip(&o) {
        add_into(x, o);
    }
    Ok(())
}

/// Picks the top-k experts (ties to the lower id) and softmaxes their logits in id order.
pub fn top_k(logits: &[f32], k: usize) -> Route {
    let mut idx: Vec<usize> = (0..logits.len()).collect();
    idx.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]).then(a.cmp(&b)));
    idx.truncate(k);
    idx.sort_unstable();
    let max = idx
        .iter()
        .map(|&e| logits[e])
        .fold(f32::NEG_INFINITY, f32::max);
    let w: Vec<f32> = idx.iter().map(|&e| (logits[e] - max).exp()).collect();
    let mut sum = 0f32;
    for v in &w {
        sum += v;
    }
    Route {
        experts: idx.iter().zip(&w).map(|(&e, v)| (e, v / sum)).collect(),
    }
}

/// Adds layer `l`'s dense block to `xs`; returns the MoE inputs and the routes.
pub fn dense_and_route(
    trunk: &mut Trunk,
    shape: &Shape,
    l: usize,
    xs: &mut [Vec<f32>],
    threads: usize,
) -> Result<(Vec<Vec<f32>>, Vec<Route>)> {
    let (d, dd, e) = (shape.d_model, shape.d_dense, shape.n_experts);
    let t = trunk.tensors(SegmentKind::Dense(l))?;
    let (g, w1, w3, w2, g_moe, router, bias) = (t[0], t[1], t[2], t[3], t[4], t[5], t[6]);
    let hs: Vec<Vec<f32>> = xs.iter().map(|x| rmsnorm(x, g)).collect();
    let a = matvec_multi(w1, dd, d, &refs(&hs), threads);
    let b = matvec_multi(w3, dd, d, &refs(&hs), threads);
    let act: Vec<Vec<f32>> = a
        .iter()
        .zip(&b)
        .map(|(a, b)| a.iter().zip(b).map(|(a, b)| silu(*a) * b).collect())
        .collect();
    let o = matvec_multi(w2, d, dd, &refs(&act), threads);
    for (x, o) in xs.iter_mut().zip(&o) {
        add_into(x, o);
    }
    let ms: Vec<Vec<f32>> = xs.iter().map(|x| rmsnorm(x, g_moe)).collect();
    let r = matvec_multi(router, e, d, &refs(&ms), threads);
    let routes = r
        .iter()
        .map(|r| {
            let logits: Vec<f32> = r.iter().zip(bias).map(|(r, b)| r + b).collect();
            top_k(&logits, shape.top_k)
        })
        .collect();
    Ok((ms, routes))
}

/// Final norm and head: logits of each position in `xs`.
pub fn head(
    trunk: &mut Trunk,
    shape: &Shape,
    xs: &[&[f32]],
    threads: usize,
) -> Result<Vec<Vec<f32>>> {
    let t = trunk.tensors(SegmentKind::Head)?;
    let (g, w) = (t[0], t[1]);
    let hs: Vec<Vec<f32>> = xs.iter().map(|x| rmsnorm(x, g)).collect();
    Ok(matvec_multi(
        w,
        shape.vocab,
        shape.d_model,
        &refs(&hs),
        threads,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_k_orders_by_id_and_normalises() {
        let r = top_k(&[0.1, 2.0, -1.0, 2.0, 0.5], 3);
        let ids: Vec<usize> = r.experts.iter().map(|e| e.0).collect();
        assert_eq!(ids, vec![1, 3, 4]);
        let sum: f32 = r.experts.iter().map(|e| e.1).sum();
        assert!((sum - 1.0).abs() < 1e-6);
    }
}
