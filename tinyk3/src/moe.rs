//! The routed-experts step of one layer: resolve each selected expert to a tier,
//! compute it, and combine the outputs in one canonical order.
//!
//! Order of work: experts held locally (pinned, cached) are classified first; the
//! rest are sent to the far tier in one request, and the local ones are computed
//! while that request is on the wire; whatever the far tier reports `missing` (or
//! everything, if it died) is read cold from disk and computed here, the read of
//! the next cold expert overlapping the compute of the previous one. Outputs are
//! combined per position in ascending expert id, whoever computed them.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use crate::aligned::AlignedBuf;
use crate::error::Result;
use crate::far::FarClient;
use crate::heat::Heat;
use crate::manifest::Shape;
use crate::math::gated_mlp;
use crate::model::Route;
use crate::phases::{PhaseSeconds, timed};
use crate::tiers::{ExpertStore, TierHits};

/// The mutable state the MoE step uses.
pub struct MoeCtx<'a> {
    pub shape: &'a Shape,
    pub store: &'a mut ExpertStore,
    pub far: Option<&'a mut FarClient>,
    pub heat: &'a mut Heat,
    pub hits: &'a mut TierHits,
    /// Where the step's wall time is added (`expert` and its tiers).
    pub phases: &'a mut PhaseSeconds,
    pub threads: usize,
}

/// Outputs of one expert for the positions that selected it.
type ExpertOut = (usize, Vec<Vec<f32>>);

fn run_expert(shape: &Shape, w: &AlignedBuf, ms: &[Vec<f32>], users: &[usize]) -> Vec<Vec<f32>> {
    let xs: Vec<&[f32]> = users.iter().map(|&p| ms[p].as_slice()).collect();
    gated_mlp(w, shape.d_model, shape.d_expert, &xs)
}

/// Computes several experts, spread round-robin over `threads` threads.
fn run_many(
    shape: &Shape,
    jobs: &[(usize, Arc<AlignedBuf>)],
    ms: &[Vec<f32>],
    users: &BTreeMap<usize, Vec<usize>>,
    threads: usize,
) -> Vec<ExpertOut> {
    if threads <= 1 || jobs.len() <= 1 {
        return jobs
            .iter()
            .map(|(e, w)| (*e, run_expert(shape, w, ms, &users[e])))
            .collect();
    }
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads.min(jobs.len()))
            .map(|t| {
                s.spawn(move || {
                    jobs.iter()
                        .skip(t)
                        .step_by(threads)
                        .map(|(e, w)| (*e, run_expert(shape, w, ms, &users[e])))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("expert worker"))
            .collect()
    })
}

/// Reads cold experts and computes them, overlapping each read with the previous compute.
fn run_cold(
    ctx: &mut MoeCtx,
    l: usize,
    cold: &[usize],
    ms: &[Vec<f32>],
    users: &BTreeMap<usize, Vec<usize>>,
) -> Result<Vec<ExpertOut>> {
    let shape = ctx.shape;
    let mut outs = Vec::with_capacity(cold.len());
    if ctx.threads <= 1 {
        for &e in cold {
            let w = Arc::new(ctx.store.load_cold((l, e))?);
            ctx.store.insert((l, e), w.clone());
            outs.push((e, run_expert(shape, &w, ms, &users[&e])));
        }
        return Ok(outs);
    }
    let store = &mut *ctx.store;
    std::thread::scope(|s| -> Result<()> {
        let mut pending = None;
        for &e in cold {
            let w = Arc::new(store.load_cold((l, e))?);
            store.insert((l, e), w.clone());
            let u = &users[&e];
            let next = s.spawn(move || (e, run_expert(shape, &w, ms, u)));
            if let Some(h) = pending.replace(next) {
                outs.push(h.join().expect("cold expert worker"));
            }
        }
        if let Some(h) = pending {
            outs.push(h.join().expect("cold expert worker"));
        }
        Ok(())
    })?;
    Ok(outs)
}

/// Waits for the far tier's answer while reading and computing remote experts
/// locally in order, so a slow or cold far tier never leaves the engine idle.
/// Returns the answer (if the tier is alive) and the experts done locally meanwhile.
#[expect(
    clippy::type_complexity,
    reason = "a private pair of results, named at the call site"
)]
fn race_far<'a>(
    ctx: &mut MoeCtx<'a>,
    far: &'a mut FarClient,
    l: usize,
    remote: &[usize],
    n_items: usize,
    ms: &[Vec<f32>],
    users: &BTreeMap<usize, Vec<usize>>,
) -> Result<(Option<Vec<Option<Vec<f32>>>>, Vec<ExpertOut>)> {
    let shape = ctx.shape;
    let store = &mut *ctx.store;
    let (answers, raced, far) = std::thread::scope(|s| -> Result<_> {
        let waiter = s.spawn(move || {
            let answers = far.recv(l, n_items, shape.d_model);
            (answers, far)
        });
        let mut raced = Vec::new();
        for &e in remote {
            if waiter.is_finished() {
                break;
            }
            let w = Arc::new(store.load_cold((l, e))?);
            store.insert((l, e), w.clone());
            raced.push((e, run_expert(shape, &w, ms, &users[&e])));
        }
        let (answers, far) = waiter.join().expect("far waiter");
        Ok((answers, raced, far))
    })?;
    ctx.far = Some(far);
    Ok((answers, raced))
}

/// Runs layer `l`'s experts for every position; returns what to add to each position.
pub fn moe_layer(
    ctx: &mut MoeCtx,
    l: usize,
    ms: &[Vec<f32>],
    routes: &[Route],
) -> Result<Vec<Vec<f32>>> {
    let t0 = std::time::Instant::now();
    let out = moe_step(ctx, l, ms, routes);
    ctx.phases.expert += t0.elapsed().as_secs_f64();
    out
}

fn moe_step(
    ctx: &mut MoeCtx,
    l: usize,
    ms: &[Vec<f32>],
    routes: &[Route],
) -> Result<Vec<Vec<f32>>> {
    let shape = ctx.shape;
    let d = shape.d_model;
    let mut users: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for (p, r) in routes.iter().enumerate() {
        for &(e, _) in &r.experts {
            users.entry(e).or_default().push(p);
            ctx.heat.record(l, e);
        }
    }
    let mut local = Vec::new();
    let mut remote = Vec::new();
    for &e in users.keys() {
        match ctx.store.local((l, e)) {
            Some((pinned, w)) => {
                if pinned {
                    ctx.hits.pinned += 1;
                } else {
                    ctx.hits.cache += 1;
                }
                local.push((e, w));
            }
            None => remote.push(e),
        }
    }
    let items: Vec<(usize, usize)> = remote
        .iter()
        .flat_map(|&e| users[&e].iter().map(move |&p| (p, e)))
        .collect();
    let sent = match ctx.far.as_deref_mut() {
        Some(far) if !remote.is_empty() && far.available() => {
            let vecs: Vec<&[f32]> = ms.iter().map(|m| m.as_slice()).collect();
            timed(&mut ctx.phases.expert_far, || far.send(l, &vecs, &items))
        }
        _ => false,
    };
    let threads = ctx.threads;
    let mut outs: HashMap<usize, Vec<Vec<f32>>> = timed(&mut ctx.phases.expert_local, || {
        run_many(shape, &local, ms, &users, threads)
    })
    .into_iter()
    .collect();
    let mut cold = remote.clone();
    if sent {
        let far = ctx.far.take().expect("sent implies a far tier");
        let t = std::time::Instant::now();
        let raced = race_far(ctx, far, l, &remote, items.len(), ms, &users);
        ctx.phases.expert_far += t.elapsed().as_secs_f64();
        let (answers, raced) = raced?;
        let far = ctx.far.as_deref_mut().expect("returned by race_far");
        ctx.hits.cold += raced.len() as u64;
        cold.clear();
        let mut at = 0;
        let mut raced: HashMap<usize, Vec<Vec<f32>>> = raced.into_iter().collect();
        for &e in &remote {
            let n = users[&e].len();
            let got: Option<Vec<Vec<f32>>> = answers
                .as_ref()
                .and_then(|a| a[at..at + n].iter().cloned().collect());
            at += n;
            if let Some(v) = raced.remove(&e) {
                // Read locally while the answer was on the wire; the far tier was too late.
                outs.insert(e, v);
                continue;
            }
            if answers.is_some() {
                far.count(got.is_some());
            }
            match got {
                Some(v) => {
                    ctx.hits.far += 1;
                    outs.insert(e, v);
                }
                None => cold.push(e),
            }
        }
    }
    ctx.hits.cold += cold.len() as u64;
    let t = std::time::Instant::now();
    let cold_outs = run_cold(ctx, l, &cold, ms, &users);
    ctx.phases.expert_cold += t.elapsed().as_secs_f64();
    outs.extend(cold_outs?);
    // Canonical combine: per position, ascending expert id, gate-weighted.
    let mut cursor: HashMap<usize, usize> = HashMap::new();
    let mut ys = vec![vec![0f32; d]; routes.len()];
    for (p, r) in routes.iter().enumerate() {
        for &(e, gate) in &r.experts {
            let k = cursor.entry(e).or_insert(0);
            let out = &outs[&e][*k];
            *k += 1;
            debug_assert_eq!(users[&e][*k - 1], p);
            for (y, o) in ys[p].iter_mut().zip(out) {
                *y += gate * o;
            }
        }
    }
    Ok(ys)
}
