//! Tests of the trace replay: engine semantics on hand-made traces, and
//! Belady's MIN against an exhaustive search and against every online policy.

use std::collections::HashMap;

use proptest::prelude::*;

use super::*;

fn e(layer: u32, expert: u32) -> Expert {
    Expert { layer, expert }
}

fn shape(l: u32, x: u32) -> Shape {
    Shape::new(l.into(), x.into(), "test").unwrap()
}

/// One-token passes over `layers` layers, one expert list per layer.
fn passes(layers: &[&[u32]], n: usize) -> Vec<Expert> {
    let mut out = Vec::new();
    for _ in 0..n {
        for (l, xs) in layers.iter().enumerate() {
            out.extend(xs.iter().map(|x| e(l as u32, *x)));
        }
    }
    out
}

#[test]
fn blocks_are_layer_runs_with_distinct_sorted_experts() {
    let s = shape(2, 8);
    // A two-position prefill (layer 0 asks 3 and 1, then 1 again), then a step.
    let reqs = vec![
        e(0, 3),
        e(0, 1),
        e(0, 1),
        e(1, 5),
        e(1, 5),
        e(0, 2),
        e(1, 5),
    ];
    let lk = Lookups::of_requests(s, &reqs);
    assert_eq!(lk.blocks(), 4);
    assert_eq!(lk.len(), 5);
    assert_eq!(lk.requests(), 7);
    assert_eq!(lk.widest_block(), 2);
    assert_eq!(lk.ids, vec![1, 3, 13, 2, 13]);
}

#[test]
fn hits_are_judged_against_the_cache_as_the_layer_started() {
    // Two slots hold (0,5) (least recent) and (1,3) when layer 0 asks for
    // experts 1 and 5. A cache taking them one by one would insert 1 first,
    // evicting 5, and miss both; the engine looks both up first, so 5 hits.
    let s = shape(2, 8);
    let reqs = vec![e(0, 5), e(1, 3), e(0, 1), e(0, 5)];
    let lk = Lookups::of_requests(s, &reqs);
    let out = lru(&lk, 2);
    assert_eq!(out.hits, 1, "{out:?}");
}

#[test]
fn lru_thrashes_on_a_loop_one_larger_than_the_cache_and_min_does_not() {
    // Six experts, one per block, in a loop: LRU with five slots always
    // evicts the one needed next.
    let s = shape(6, 2);
    let reqs = passes(&[&[0], &[0], &[0], &[1], &[1], &[1]], 50);
    let lk = Lookups::of_requests(s, &reqs);
    assert_eq!(lru(&lk, 5).hits, 0);
    let min = belady_min(&lk, 5);
    assert!(min.hit_rate() > 0.75, "{min:?}");
    // Pinning three and caching three serves all but the first touch of each
    // cached expert; MIN with the same six slots serves everything.
    let pins = [e(0, 0), e(1, 0), e(2, 0)];
    let out = pinned_lru(&lk, &pins, 3);
    assert_eq!(out.hits, lk.len() as u64 - 3);
    assert_eq!(out.pinned_hits, 150);
    assert_eq!(belady_min(&lk, 6).hits, lk.len() as u64);
}

#[test]
fn zero_slots_cache_nothing() {
    let s = shape(2, 4);
    let lk = Lookups::of_requests(s, &passes(&[&[0], &[1]], 10));
    assert_eq!(lru(&lk, 0).hits, 0);
    assert_eq!(belady_min(&lk, 0).hits, 0);
    assert_eq!(pinned_lru(&lk, &[e(1, 1)], 0).hits, 10);
}

#[test]
fn held_out_cuts_at_a_block_boundary_near_the_middle() {
    let s = shape(2, 4);
    let reqs = passes(&[&[0, 1], &[2]], 5); // 15 requests, blocks of 2 and 1
    let trace = Trace::from_requests(s, reqs).unwrap();
    let (heat, second) = held_out(&trace);
    assert_eq!(heat.total() as usize + second.requests(), 15);
    // Boundaries at 6 and 8 are equally near 7; the first one wins.
    assert_eq!(heat.total(), 6);
    assert_eq!(second.blocks(), 6);
}

#[test]
fn one_layer_models_replay_each_request_alone() {
    let s = shape(1, 4);
    let lk = Lookups::of_requests(s, &[e(0, 1), e(0, 1), e(0, 2)]);
    assert_eq!(lk.blocks(), 3);
    assert_eq!(lru(&lk, 1).hits, 1);
}

/// The best hit count of any policy with `slots` (admit or bypass each miss),
/// by exhaustive search over every choice of victim (states are bit sets of dense ids).
fn brute_force_best(lk: &Lookups, slots: usize) -> u64 {
    // Any starting content of at most `slots` ids, loaded free (like pins).
    let n = lk.shape.total() as u32;
    (0u32..1 << n)
        .filter(|m| m.count_ones() as usize <= slots)
        .map(|m| best_from(lk, m, slots))
        .max()
        .unwrap_or(0)
}

fn best_from(lk: &Lookups, start: u32, slots: usize) -> u64 {
    fn go(
        lk: &Lookups,
        b: usize,
        mask: u32,
        slots: usize,
        memo: &mut HashMap<(usize, u32), u64>,
    ) -> u64 {
        if b == lk.blocks() {
            return 0;
        }
        if let Some(v) = memo.get(&(b, mask)) {
            return *v;
        }
        let ids = &lk.ids[lk.bounds[b]..lk.bounds[b + 1]];
        let hits = ids.iter().filter(|&&id| mask & (1 << id) != 0).count() as u64;
        let misses: Vec<u32> = ids
            .iter()
            .copied()
            .filter(|&id| mask & (1 << id) == 0)
            .collect();
        let mut states = vec![mask];
        if slots > 0 {
            for id in misses {
                let mut next = Vec::new();
                for m in states {
                    next.push(m); // bypass: not admitted
                    if (m.count_ones() as usize) < slots {
                        next.push(m | (1 << id));
                    } else {
                        for v in (0..32).filter(|v| m & (1 << v) != 0) {
                            next.push((m & !(1 << v)) | (1 << id));
                        }
                    }
                }
                next.sort_unstable();
                next.dedup();
                states = next;
            }
        }
        let best = states
            .into_iter()
            .map(|m| go(lk, b + 1, m, slots, memo))
            .max()
            .unwrap_or(0);
        memo.insert((b, mask), hits + best);
        hits + best
    }
    go(lk, 0, start, slots, &mut HashMap::new())
}

fn requests(s: Shape, max_len: usize) -> impl Strategy<Value = Vec<Expert>> {
    prop::collection::vec((0..s.n_layers, 0..s.n_experts), 0..max_len)
        .prop_map(|v| v.into_iter().map(|(l, x)| e(l, x)).collect())
}

proptest! {
    // The exhaustive search is exponential; fewer, small cases keep it quick.
    #![proptest_config(ProptestConfig::with_cases(96))]
    #[test]
    fn min_is_the_optimum_on_small_traces(reqs in requests(shape(2, 3), 24), slots in 0usize..5) {
        let lk = Lookups::of_requests(shape(2, 3), &reqs);
        prop_assert_eq!(belady_min(&lk, slots).hits, brute_force_best(&lk, slots), "{:?}", lk);
    }

}

proptest! {
    #[test]
    fn no_online_policy_beats_min(
        reqs in requests(shape(3, 6), 300),
        slots in 0usize..12,
        pin_ids in prop::collection::btree_set(0u32..18, 0..8),
    ) {
        let s = shape(3, 6);
        let lk = Lookups::of_requests(s, &reqs);
        let min = belady_min(&lk, slots);
        let plain = lru(&lk, slots);
        prop_assert!(plain.hits <= min.hits, "LRU {plain:?} > MIN {min:?}");
        let pins: Vec<Expert> = pin_ids.iter().map(|&i| s.expert(i as usize)).take(slots).collect();
        let mixed = pinned_lru(&lk, &pins, slots - pins.len());
        prop_assert!(mixed.hits <= min.hits, "pins+LRU {mixed:?} > MIN {min:?}");
        prop_assert!(mixed.pinned_hits <= mixed.hits && min.hits <= min.lookups);
    }

    #[test]
    fn a_cache_holding_every_expert_misses_at_most_first_touches(reqs in requests(shape(3, 6), 200)) {
        let s = shape(3, 6);
        let lk = Lookups::of_requests(s, &reqs);
        let distinct = reqs.iter().collect::<std::collections::HashSet<_>>().len() as u64;
        prop_assert_eq!(lru(&lk, 18).hits, lk.len() as u64 - distinct);
        prop_assert_eq!(belady_min(&lk, 18).hits, lk.len() as u64, "all preloaded");
    }
}

#[test]
fn top_k_comes_from_the_decode_steps_whatever_the_prompt_step_lists() {
    let s = shape(3, 32);
    // kimi-k3-in-c's dump: the prompt step lists each layer's distinct
    // experts (17, 14, 17 here, no multiple of k), then one-token decode
    // steps list exactly top-4 per layer.
    let mut reqs = Vec::new();
    for (l, n) in [(0u32, 17u32), (1, 14), (2, 17)] {
        reqs.extend((0..n).map(|x| e(l, x)));
    }
    reqs.extend(passes(&[&[1, 2, 3, 4], &[5, 6, 7, 8], &[9, 10, 11, 12]], 7));
    let trace = Trace::from_requests(s, reqs).unwrap();
    assert_eq!(infer_top_k(&trace), Some(4));
    // A prefill-dominated trace says nothing.
    let mut reqs = Vec::new();
    for _ in 0..3 {
        for l in 0..3u32 {
            reqs.extend((0..17u32).map(|x| e(l, x)));
        }
    }
    reqs.extend(passes(&[&[1, 2, 3, 4], &[5, 6, 7, 8], &[9, 10, 11, 12]], 1));
    let trace = Trace::from_requests(s, reqs).unwrap();
    assert_eq!(infer_top_k(&trace), None);
}

#[test]
fn top_k_survives_speculative_steps_that_run_several_positions() {
    // tinyk3 with a draft: each layer's block lists every position's four
    // experts (distinct within a position, two hot experts in all of them):
    // a 26-position prompt step, then verify steps of 8 positions. No
    // block is one position long, and the shortest (32) dominates, which
    // the decode-step rule alone read as top-k = 32.
    let s = shape(4, 32);
    let position = |p: u32| [p % 5, 5 + p % 3, 10, 20];
    let mut reqs = Vec::new();
    for positions in [26u32, 8, 8, 8] {
        for l in 0..4u32 {
            for p in 0..positions {
                reqs.extend(position(p).map(|x| e(l, x)));
            }
        }
    }
    let trace = Trace::from_requests(s, reqs).unwrap();
    assert_eq!(infer_top_k(&trace), Some(4));
}
