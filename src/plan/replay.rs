//! Trace replay: the recorded expert requests run through simulated caches
//! (pinned set + LRU, plain LRU, Belady's MIN) to predict hit rates before
//! anything is measured.
//!
//! The replay counts what the engine counts. A forward pass looks each distinct
//! expert of a layer up once, in ascending expert order, against the cache as
//! it was when the layer started; only then are the misses inserted, in the
//! same order (tinyk3 `moe_layer`). The trace records one request per position
//! and expert, without pass boundaries, so a *block* (one layer of one pass) is
//! recovered as a maximal run of requests of the same layer: layers go
//! 0..L-1 within a pass, so the layer changes between any two passes. With a
//! single-layer model passes cannot be told apart and every request is its own
//! block. Replaying the engine's own trace under the engine's own settings
//! therefore reproduces its measured pinned and cache hit counters exactly
//! (tests/e2e/plan_pins.rs checks that against a real run).

use std::collections::BTreeSet;

use crate::heat::{Expert, Heat, Shape, Trace};

/// The engine's lookups: distinct experts per block, as dense ids.
#[derive(Debug, Clone)]
pub struct Lookups {
    shape: Shape,
    ids: Vec<u32>,
    /// Start of each block in `ids`, plus `ids.len()` at the end.
    bounds: Vec<usize>,
    requests: usize,
}

impl Lookups {
    /// The lookups the engine makes for `requests` (see the module docs).
    pub fn of_requests(shape: Shape, requests: &[Expert]) -> Lookups {
        let mut ids = Vec::with_capacity(requests.len());
        let mut bounds = vec![0];
        for block in request_blocks(shape, requests) {
            let mut distinct: Vec<u32> = block.iter().map(|e| shape.index(*e) as u32).collect();
            distinct.sort_unstable();
            distinct.dedup();
            ids.extend(distinct);
            bounds.push(ids.len());
        }
        Lookups {
            shape,
            ids,
            bounds,
            requests: requests.len(),
        }
    }

    pub fn of_trace(trace: &Trace) -> Lookups {
        Lookups::of_requests(trace.shape(), trace.requests())
    }

    /// Lookups (the denominator of every hit rate).
    pub fn len(&self) -> usize {
        self.ids.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// Trace requests these lookups came from.
    pub fn requests(&self) -> usize {
        self.requests
    }

    /// Blocks (layers of forward passes).
    pub fn blocks(&self) -> usize {
        self.bounds.len() - 1
    }

    /// The largest block: a cache smaller than this cannot hold one layer's
    /// experts of one pass at once (recorded with the predictions).
    pub fn widest_block(&self) -> usize {
        self.bounds
            .windows(2)
            .map(|w| w[1] - w[0])
            .max()
            .unwrap_or(0)
    }

    fn block_ranges(&self) -> impl Iterator<Item = std::ops::Range<usize>> + '_ {
        self.bounds.windows(2).map(|w| w[0]..w[1])
    }
}

/// Splits requests into blocks (one layer of one forward pass each).
fn request_blocks(shape: Shape, requests: &[Expert]) -> Vec<&[Expert]> {
    if shape.n_layers == 1 {
        return requests.chunks(1).collect();
    }
    requests.chunk_by(|a, b| a.layer == b.layer).collect()
}

/// The held-out split: the heat of the first half of the trace, and the
/// lookups of the second half, cut at the block boundary nearest the middle
/// so no forward pass is torn. Pins chosen from the first half and judged on
/// the second cannot have seen the requests they are judged on.
pub fn held_out(trace: &Trace) -> (Heat, Lookups) {
    let requests = trace.requests();
    let half = requests.len() / 2;
    let mut cut = 0usize;
    let mut at = 0usize;
    for block in request_blocks(trace.shape(), requests) {
        if at.abs_diff(half) < cut.abs_diff(half) {
            cut = at;
        }
        at += block.len();
    }
    if at.abs_diff(half) < cut.abs_diff(half) {
        cut = at;
    }
    let (first, second) = requests.split_at(cut);
    (
        Heat::of_requests(trace.shape(), first),
        Lookups::of_requests(trace.shape(), second),
    )
}

/// top-k read off the trace, for when nothing else says it.
///
/// tinyk3 lists every position's k experts, distinct within a position, so
/// each layer's block is (positions x k) long and cut into runs of k it has
/// no repeat; runs of any larger length that divides every block (two
/// positions' lists) repeat an expert somewhere in a trace of any size. The
/// largest such length with no repeat is k. This holds with speculative
/// decoding, whose verify steps run several positions and leave no
/// one-position block at all.
///
/// kimi-k3-in-c lists each layer's *distinct* experts (blocks of 17, 14, 17
/// for top-4 in a prompt step), no multiple of k: in a one-token decode
/// step every layer requests exactly top-k experts, so the shortest block
/// is top-k when such steps dominate (at least half of the blocks). `None`
/// otherwise, or for a one-layer model whose blocks cannot be told apart.
pub fn infer_top_k(trace: &Trace) -> Option<u32> {
    if trace.shape().n_layers < 2 {
        return None;
    }
    let blocks = request_blocks(trace.shape(), trace.requests());
    let n_experts = trace.shape().n_experts as usize;
    if let Some(k) = per_position_k(&blocks, n_experts) {
        return Some(k);
    }
    let lens: Vec<usize> = blocks.iter().map(|b| b.len()).collect();
    let k = *lens.iter().min()?;
    let shortest = lens.iter().filter(|&&n| n == k).count();
    (2 * shortest >= lens.len() && k <= n_experts).then_some(k as u32)
}

/// The largest run length above 1 that divides every block and cuts each
/// into runs without a repeated expert, if any; at most `n_experts`.
fn per_position_k(blocks: &[&[Expert]], n_experts: usize) -> Option<u32> {
    let gcd = blocks.iter().map(|b| b.len()).fold(0, gcd);
    (2..=gcd.min(n_experts))
        .rev()
        .filter(|d| gcd % d == 0)
        .find(|&d| {
            blocks.iter().all(|b| {
                b.chunks(d).all(|run| {
                    let mut seen: Vec<u32> = run.iter().map(|e| e.expert).collect();
                    seen.sort_unstable();
                    seen.windows(2).all(|w| w[0] != w[1])
                })
            })
        })
        .map(|d| d as u32)
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 { a } else { gcd(b, a % b) }
}

/// What a simulated cache served.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Outcome {
    pub lookups: u64,
    /// Lookups served from RAM (pinned or cached).
    pub hits: u64,
    /// Of `hits`, those served by pinned experts.
    pub pinned_hits: u64,
}

impl Outcome {
    /// hits / lookups; 0 for an empty replay.
    pub fn hit_rate(&self) -> f64 {
        if self.lookups == 0 {
            0.0
        } else {
            self.hits as f64 / self.lookups as f64
        }
    }
}

/// Experts `pins` held in RAM for good plus an LRU cache of `cache_slots`
/// experts, as the engine runs them: a pinned expert never enters the cache,
/// and a cache of 0 slots caches nothing.
pub fn pinned_lru(lookups: &Lookups, pins: &[Expert], cache_slots: usize) -> Outcome {
    let shape = lookups.shape;
    let mut pinned = vec![false; shape.total()];
    for p in pins.iter().filter(|p| shape.contains(**p)) {
        pinned[shape.index(*p)] = true;
    }
    let mut cache = LruList::new(shape.total(), cache_slots);
    let (mut hits, mut pinned_hits) = (0, 0);
    let mut misses = Vec::new();
    for range in lookups.block_ranges() {
        misses.clear();
        for &id in &lookups.ids[range] {
            if pinned[id as usize] {
                pinned_hits += 1;
            } else if cache.touch(id) {
                hits += 1;
            } else {
                misses.push(id);
            }
        }
        for &id in &misses {
            cache.insert(id);
        }
    }
    Outcome {
        lookups: lookups.len() as u64,
        hits: hits + pinned_hits,
        pinned_hits,
    }
}

/// Plain LRU over `slots` experts, nothing pinned.
pub fn lru(lookups: &Lookups, slots: usize) -> Outcome {
    pinned_lru(lookups, &[], slots)
}

/// Belady's MIN over `slots` experts: on a miss with the cache full, evict the
/// expert whose next use is farthest in the future (or never). It knows the
/// future, so no online policy (LRU, pinning, any mix at the same bytes) can
/// serve more hits; it is the yardstick the others are reported against.
///
/// L. A. Belady, "A study of replacement algorithms for a virtual-storage
/// computer", IBM Systems Journal 5(2):78-101, 1966.
///
/// Two freedoms make it the optimum of what `slots` experts of RAM could do,
/// not only of an always-admitting cache: it starts with its slots holding
/// the experts needed soonest, free, as the engine loads pins before the
/// first token; and it may bypass, i.e. not admit a missed expert whose next
/// use is farther than every resident's, as pinning (which never caches the
/// experts it did not pin when the cache is small) effectively does. Next
/// uses are counted in blocks (the engine judges a layer's lookups against
/// the cache as the layer started), precomputed backwards in one pass; the
/// resident set is ordered by next use, so the whole replay is O(n log n).
pub fn belady_min(lookups: &Lookups, slots: usize) -> Outcome {
    const NEVER: u32 = u32::MAX;
    let n_blocks = lookups.blocks();
    // next[i]: the block of the next lookup of ids[i] after i's block.
    let mut next = vec![NEVER; lookups.len()];
    let mut seen_in = vec![NEVER; lookups.shape.total()];
    for b in (0..n_blocks).rev() {
        let range = lookups.bounds[b]..lookups.bounds[b + 1];
        for (n, &id) in next[range.clone()].iter_mut().zip(&lookups.ids[range]) {
            *n = seen_in[id as usize];
            seen_in[id as usize] = b as u32;
        }
    }
    let mut resident: BTreeSet<(u32, u32)> = BTreeSet::new();
    let mut key = vec![None::<u32>; lookups.shape.total()];
    // The first lookup of each id is where its "next use" starts: the first
    // `slots` distinct ids in lookup order are the soonest needed.
    for (b, range) in lookups.block_ranges().enumerate() {
        for &id in &lookups.ids[range] {
            if resident.len() < slots && key[id as usize].is_none() {
                resident.insert((b as u32, id));
                key[id as usize] = Some(b as u32);
            }
        }
        if resident.len() >= slots {
            break;
        }
    }
    let mut hits = 0;
    let mut misses = Vec::new();
    for range in lookups.block_ranges() {
        misses.clear();
        for i in range {
            let id = lookups.ids[i];
            match key[id as usize] {
                Some(k) => {
                    hits += 1;
                    resident.remove(&(k, id));
                    resident.insert((next[i], id));
                    key[id as usize] = Some(next[i]);
                }
                None => misses.push(i),
            }
        }
        if slots == 0 {
            continue;
        }
        for &i in &misses {
            if resident.len() >= slots {
                let &(farthest, victim) = resident.last().expect("full means non-empty");
                if next[i] >= farthest {
                    continue;
                }
                resident.pop_last();
                key[victim as usize] = None;
            }
            let id = lookups.ids[i];
            resident.insert((next[i], id));
            key[id as usize] = Some(next[i]);
        }
    }
    Outcome {
        lookups: lookups.len() as u64,
        hits,
        pinned_hits: 0,
    }
}

/// An LRU set of dense ids as an intrusive doubly linked list: O(1) per
/// lookup, since the planner may replay millions of lookups per policy.
struct LruList {
    capacity: usize,
    len: usize,
    prev: Vec<u32>,
    next: Vec<u32>,
    present: Vec<bool>,
    /// Most recently used; `NIL` when empty.
    head: u32,
    /// Least recently used.
    tail: u32,
}

const NIL: u32 = u32::MAX;

impl LruList {
    fn new(ids: usize, capacity: usize) -> LruList {
        LruList {
            capacity,
            len: 0,
            prev: vec![NIL; ids],
            next: vec![NIL; ids],
            present: vec![false; ids],
            head: NIL,
            tail: NIL,
        }
    }

    /// Marks `id` most recently used; false when it is not cached.
    fn touch(&mut self, id: u32) -> bool {
        if !self.present[id as usize] {
            return false;
        }
        self.unlink(id);
        self.push_front(id);
        true
    }

    /// Caches `id`, evicting the least recently used when full.
    fn insert(&mut self, id: u32) {
        if self.capacity == 0 || self.present[id as usize] {
            return;
        }
        if self.len >= self.capacity {
            let victim = self.tail;
            self.unlink(victim);
            self.present[victim as usize] = false;
            self.len -= 1;
        }
        self.push_front(id);
        self.present[id as usize] = true;
        self.len += 1;
    }

    fn unlink(&mut self, id: u32) {
        let (p, n) = (self.prev[id as usize], self.next[id as usize]);
        if p == NIL {
            self.head = n;
        } else {
            self.next[p as usize] = n;
        }
        if n == NIL {
            self.tail = p;
        } else {
            self.prev[n as usize] = p;
        }
    }

    fn push_front(&mut self, id: u32) {
        self.prev[id as usize] = NIL;
        self.next[id as usize] = self.head;
        if self.head == NIL {
            self.tail = id;
        } else {
            self.prev[self.head as usize] = id;
        }
        self.head = id;
    }
}

#[cfg(test)]
#[path = "replay_tests.rs"]
mod tests;
