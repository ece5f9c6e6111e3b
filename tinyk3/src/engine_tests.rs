//! Batched passes equal token-by-token decoding bit for bit, and a reused
//! prompt prefix equals a fresh prefill.

use super::*;

/// A tiny checkpoint (a few hundred KB) opened with default settings and two
/// threads, so batches split their rows across threads.
pub(crate) fn tiny_engine() -> (tempfile::TempDir, Engine) {
    let dir = tempfile::tempdir().expect("temp dir");
    let shape = Shape {
        n_layers: 4,
        n_experts: 8,
        top_k: 2,
        d_model: 32,
        d_expert: 64,
        d_dense: 64,
        n_heads: 2,
        vocab: 256,
        draft_layers: 1,
        skew: 1.0,
        residual_scale: 0.015,
    };
    crate::checkpoint::write_checkpoint(dir.path(), &shape, 7).expect("write a tiny checkpoint");
    let settings = Settings {
        threads: 2,
        ..Settings::default()
    };
    let engine = Engine::open(dir.path(), &settings).expect("open the tiny checkpoint");
    (dir, engine)
}

fn bits(v: &[f32]) -> Vec<u32> {
    v.iter().map(|x| x.to_bits()).collect()
}

const PROMPT: &[u8] =
    b"<|system|>\nChoose one experiment from the menu.\n<|user|>\nheat 0.62\n<|assistant|>\n";

#[test]
fn batched_prefill_equals_token_by_token() {
    let (_d, mut e) = tiny_engine();
    let tokens = e.encode(std::str::from_utf8(PROMPT).unwrap());
    let batched = e.prefill(&tokens).unwrap();
    // Every position's keys and values too: the next step sees the same cache.
    let after_batched = e.step(b'{'.into()).unwrap();
    e.reset();
    let mut sequential = Vec::new();
    for &t in &tokens {
        sequential = e.step(t).unwrap();
    }
    let after_sequential = e.step(b'{'.into()).unwrap();
    assert_eq!(bits(&batched), bits(&sequential));
    assert_eq!(bits(&after_batched), bits(&after_sequential));
    // And a batch that starts mid-sequence (a jump-forward run) as well.
    e.reset();
    e.prefill(&tokens[..10]).unwrap();
    let split = e.prefill(&tokens[10..]).unwrap();
    assert_eq!(bits(&split), bits(&sequential));
}

#[test]
fn a_reused_prefix_equals_a_fresh_prefill() {
    let (_d, mut e) = tiny_engine();
    let a = e.encode("<|user|>\nwhich experts are hot?\n<|assistant|>\n");
    let b = e.encode("<|user|>\nwhich tier is far?\n<|assistant|>\n");
    let fresh = |e: &mut Engine, p: &[u32]| {
        e.reset();
        assert_eq!(e.resume(&p[..p.len() - 1], false).unwrap(), 0);
        let first = e.step(p[p.len() - 1]).unwrap();
        let next = e.step(argmax(&first) as u32).unwrap();
        (bits(&first), bits(&next))
    };
    let want_a = fresh(&mut e, &a);
    let want_b = fresh(&mut e, &b);
    // A, then B (sharing "<|user|>\nwhich "), then A again, then A once more.
    e.reset();
    for (p, want, shared) in [
        (&a, &want_a, 0),
        (&b, &want_b, 15),
        (&a, &want_a, 15),
        (&a, &want_a, a.len() - 1),
    ] {
        assert_eq!(e.resume(&p[..p.len() - 1], false).unwrap(), shared);
        let first = e.step(p[p.len() - 1]).unwrap();
        let next = e.step(argmax(&first) as u32).unwrap();
        assert_eq!((bits(&first), bits(&next)), *want);
    }
    // The draft's cache follows too, when asked.
    assert_eq!(e.resume(&b[..b.len() - 1], true).unwrap(), 15);
    assert_eq!(e.draft_seq, b[..b.len() - 1]);
}

#[test]
fn speculation_after_a_reused_prefix_gives_the_greedy_tokens() {
    let (_d, mut e) = tiny_engine();
    let p = e.encode("<|user|>\nspeculate on the far tier\n<|assistant|>\n");
    let plain = e
        .generate(
            &p,
            12,
            DecodeMode {
                incremental: true,
                draft_len: 0,
            },
        )
        .unwrap();
    let (head, last) = p.split_at(p.len() - 1);
    // Leave a longer sequence in both caches, then come back to the prompt.
    e.resume(&p, true).unwrap();
    e.resume(head, true).unwrap();
    let mut ids = Vec::new();
    let mut next = last[0];
    while ids.len() < 12 {
        next = e
            .speculate(next, 3.min(12 - ids.len() - 1), &mut ids, &mut |l, ids| {
                let t = argmax(l) as u32;
                ids.push(t);
                t
            })
            .unwrap();
    }
    assert_eq!(ids, plain.ids);
}
