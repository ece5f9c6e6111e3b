//! The engine thread: owns the one engine, runs one generation at a time from
//! the queue, streams text deltas back, and publishes counters and heat after each.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::time::Instant;

use tokio::sync::mpsc::UnboundedSender;

use super::admission::Ticket;
use super::constrain::{Constraint, END_BYTE};
use super::metrics::Live;
use super::openai::{ApiError, Timings};
use super::sample::Sampler;
use super::schema::Grammar;
use super::text::TextOut;
use crate::engine::{Engine, FNV_OFFSET, fnv1a};
use crate::error::Result;
use crate::profile::Settings;

/// One generation to run.
pub struct Job {
    /// The rendered chat prompt (byte-level tokens).
    pub prompt: String,
    pub max_tokens: usize,
    pub temperature: f32,
    pub seed: u64,
    pub stop: Vec<String>,
    /// Reuse the KV cache of the prompt prefix shared with the previous request.
    pub cache_prompt: bool,
    /// The schema constraint, if the answer must be JSON.
    pub grammar: Option<Arc<Grammar>>,
    pub events: UnboundedSender<Event>,
    /// Holds the request's place in the queue until the job is done.
    pub ticket: Ticket,
}

/// What the engine thread sends back for a job.
#[derive(Debug)]
pub enum Event {
    Delta(String),
    Done {
        finish_reason: &'static str,
        timings: Timings,
    },
    Failed(ApiError),
}

/// Flags the HTTP side sets at shutdown.
#[derive(Debug, Default)]
pub struct Stop {
    /// Refuse queued jobs (a SIGTERM arrived).
    pub draining: AtomicBool,
    /// Cut the running generation short (the grace period is over).
    pub cut: AtomicBool,
}

/// Starts the engine thread: opens the engine (reporting the outcome on `ready`),
/// then serves jobs until the sender side is dropped.
pub fn spawn(
    model: PathBuf,
    settings: Settings,
    live: Arc<Live>,
    stop: Arc<Stop>,
    jobs: mpsc::Receiver<Job>,
    ready: std::sync::mpsc::SyncSender<Result<()>>,
) -> std::thread::JoinHandle<()> {
    std::thread::Builder::new()
        .name("tinyk3-engine".into())
        .spawn(move || {
            let mut engine = match Engine::open(&model, &settings) {
                Ok(e) => e,
                Err(e) => {
                    let _ = ready.send(Err(e));
                    return;
                }
            };
            publish(&mut engine, &live, None);
            let _ = ready.send(Ok(()));
            for job in jobs {
                if stop.draining.load(Ordering::SeqCst) {
                    let _ = job.events.send(Event::Failed(ApiError::other(
                        503,
                        "server_error",
                        "shutting_down",
                        "the server is shutting down; retry on another instance",
                    )));
                    continue;
                }
                live.in_flight.store(1, Ordering::SeqCst);
                let result = generate(&mut engine, settings.draft_len, &job, &stop.cut);
                let timings = match &result {
                    Ok(Some((_, timings))) => Some(timings),
                    _ => None,
                };
                // The work done counts in the metrics whatever became of the
                // request (a client that went away included).
                publish(&mut engine, &live, timings);
                // The slot is free before the client hears the end, so a
                // client that reads the metrics once it has its answer (an
                // orchestrator standing aside for live users) never sees
                // its own finished request still queued.
                let Job { events, ticket, .. } = job;
                drop(ticket);
                live.in_flight.store(0, Ordering::SeqCst);
                match result {
                    Ok(Some((finish_reason, timings))) => {
                        let _ = events.send(Event::Done {
                            finish_reason,
                            timings,
                        });
                    }
                    Ok(None) => {}
                    Err(e) => {
                        let _ = events.send(Event::Failed(ApiError::other(
                            500,
                            "server_error",
                            "engine_error",
                            format!("generation failed: {e}"),
                        )));
                    }
                }
            }
        })
        .expect("spawn the engine thread")
}

/// Publishes counters, the histogram and the drained trace.
fn publish(engine: &mut Engine, live: &Live, timings: Option<&Timings>) {
    let counters = engine.counters();
    let hist = engine.heat().hist_json();
    let trace = engine.heat_mut().drain_trace();
    let mut s = live.snapshot.lock().expect("metrics lock");
    s.counters = Some(counters);
    s.expert_stride = engine.manifest().experts.stride;
    s.hist_json = hist;
    s.ring.extend(trace);
    if let Some(t) = timings {
        s.prompt_cached_tokens += t.cache_n as u64;
        s.served(
            (t.prompt_n as u64, t.prompt_ms / 1e3),
            (t.predicted_n as u64, t.predicted_ms / 1e3),
        );
    }
}

/// The bytes of a token: a byte for ids below 256, the engine's `<N>` text above.
fn token_bytes(engine: &Engine, id: u32) -> Vec<u8> {
    match u8::try_from(id) {
        Ok(b) => vec![b],
        Err(_) => engine.decode(&[id]).into_bytes(),
    }
}

/// Runs one job. `Ok(None)` when the client stopped listening.
///
/// As in `tinyk3 bench`, all prompt tokens but the last are prefilled (reusing
/// the cached prefix shared with the previous request unless the job says not
/// to), and each decode step feeds one token and picks the next, so
/// `predicted_ms` covers exactly the steps that produced the answer's tokens.
fn generate(
    engine: &mut Engine,
    draft_len: usize,
    job: &Job,
    cut: &AtomicBool,
) -> Result<Option<(&'static str, Timings)>> {
    let prompt = engine.encode(&job.prompt);
    let (head, last) = prompt.split_at(prompt.len() - 1);
    // Speculation verifies against the draft's own greedy guesses; a schema
    // constraint feeds forced bytes in batches, which the draft does not follow.
    let speculate = draft_len > 0 && job.grammar.is_none();
    if !job.cache_prompt {
        engine.reset();
    }
    let t0 = Instant::now();
    let cached = engine.resume(head, speculate)?;
    let prompt_ms = t0.elapsed().as_secs_f64() * 1e3;
    let draft_before = engine.counters().draft;
    let mut sampler = Sampler::new(job.temperature, job.seed);
    let stops = if job.grammar.is_some() {
        Vec::new()
    } else {
        job.stop.clone()
    };
    let mut out = TextOut::new(stops);
    let t1 = Instant::now();
    let mut n = 0usize;
    let mut finish = "length";
    // Sends a token's text; false when the client is gone.
    let emit = |engine: &Engine, out: &mut TextOut, id: u32| -> bool {
        let delta = out.push(&token_bytes(engine, id));
        delta.is_empty() || job.events.send(Event::Delta(delta)).is_ok()
    };
    if let Some(g) = &job.grammar {
        let mut c = Constraint::new(g.clone());
        let Some(answer) = constrained(
            engine,
            &mut c,
            last[0],
            job.max_tokens,
            &mut sampler,
            Forced::JumpForward,
            cut,
            &mut |engine, id| emit(engine, &mut out, id),
        )?
        else {
            return Ok(None);
        };
        (finish, n) = (answer.finish, answer.tokens);
    } else if speculate {
        let mut next = last[0];
        let mut ids: Vec<u32> = Vec::new();
        'spec: while ids.len() < job.max_tokens && !cut.load(Ordering::SeqCst) {
            let before = ids.len();
            let k = draft_len.min(job.max_tokens - ids.len() - 1);
            next = engine.speculate(next, k, &mut ids, &mut |logits, ids| {
                let t = sampler.pick(logits);
                ids.push(t);
                t
            })?;
            for &t in &ids[before..] {
                n += 1;
                if !emit(engine, &mut out, t) {
                    return Ok(None);
                }
                if out.stopped {
                    finish = "stop";
                    break 'spec;
                }
            }
        }
    } else {
        let mut next = last[0];
        while n < job.max_tokens && !cut.load(Ordering::SeqCst) {
            let logits = engine.step(next)?;
            next = sampler.pick(&logits);
            n += 1;
            if !emit(engine, &mut out, next) {
                return Ok(None);
            }
            if out.stopped {
                finish = "stop";
                break;
            }
        }
    }
    let predicted_ms = t1.elapsed().as_secs_f64() * 1e3;
    let tail = out.finish();
    if !tail.is_empty() && job.events.send(Event::Delta(tail)).is_err() {
        return Ok(None);
    }
    let draft_after = engine.counters().draft;
    let timings = Timings {
        prompt_n: prompt.len() - cached,
        cache_n: cached,
        prompt_ms,
        predicted_n: n,
        predicted_ms,
        draft: speculate.then(|| {
            (
                draft_after.proposed - draft_before.proposed,
                draft_after.accepted - draft_before.accepted,
            )
        }),
    };
    Ok(Some((finish, timings)))
}

/// How a constrained answer feeds the bytes its schema forces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Forced {
    /// Jump-forward decoding (SGLang's compressed finite-state machine: Zheng
    /// et al., "SGLang: Efficient Execution of Structured Language Model
    /// Programs", NeurIPS 2024): a run of bytes the schema forces (keys,
    /// punctuation, the rest of an enum value once it is decided) needs no
    /// choice, so it gets no decode step of its own; it is fed to the model
    /// with the chosen byte before it in one batched pass.
    JumpForward,
    /// One decode step per byte, forced or not: the reference the tests hold
    /// jump-forward to.
    OneByOne,
}

/// A finished constrained answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    pub finish: &'static str,
    /// Tokens of the answer (forced ones included).
    pub tokens: usize,
    /// FNV-1a 64 of every logit vector a byte was picked from.
    pub logits_digest: u64,
}

/// Decodes a schema-constrained answer after the input token `first`, within
/// `max_tokens`; `emit` gets every byte as it is decided and returns false
/// when the client is gone (then `Ok(None)`).
///
/// Every pick is the sampler's choice among the bytes the constraint allows,
/// from the logits of the full model: the same logits whether the forced bytes
/// before it came in one batched pass or one by one.
#[expect(
    clippy::too_many_arguments,
    reason = "one decoding loop's inputs, all distinct"
)]
pub fn constrained(
    engine: &mut Engine,
    c: &mut Constraint,
    first: u32,
    max_tokens: usize,
    sampler: &mut Sampler,
    forced: Forced,
    cut: &AtomicBool,
    emit: &mut dyn FnMut(&Engine, u32) -> bool,
) -> Result<Option<Answer>> {
    let mut n = 0usize;
    let mut digest = FNV_OFFSET;
    let mut pending = vec![first];
    loop {
        // Bytes the schema forces cost no choice.
        loop {
            if !c.can_continue() {
                return Ok(Some(Answer {
                    finish: "stop",
                    tokens: n,
                    logits_digest: digest,
                }));
            }
            let ch = c.choices(max_tokens - n);
            match ch.bytes.as_slice() {
                [b] if !ch.may_end => {
                    c.advance(*b);
                    pending.push(u32::from(*b));
                    n += 1;
                    if !emit(engine, u32::from(*b)) {
                        return Ok(None);
                    }
                }
                _ => break,
            }
        }
        if cut.load(Ordering::SeqCst) {
            return Ok(Some(Answer {
                finish: "length",
                tokens: n,
                logits_digest: digest,
            }));
        }
        let logits = match forced {
            Forced::JumpForward if pending.len() > 1 => engine.prefill(&pending)?,
            _ => {
                let mut logits = Vec::new();
                for &t in &pending {
                    logits = engine.step(t)?;
                }
                logits
            }
        };
        pending.clear();
        digest = fnv1a(digest, crate::math::as_bytes(&logits));
        let ch = c.choices(max_tokens - n);
        let mut allowed: Vec<u32> = ch.bytes.iter().map(|b| u32::from(*b)).collect();
        if ch.may_end {
            allowed.push(u32::from(END_BYTE));
        }
        if allowed.is_empty() {
            return Err(crate::Error::Runtime(
                "constrained decoding reached a state with no allowed byte".into(),
            ));
        }
        let t = sampler.pick_among(&logits, &allowed);
        n += 1;
        if ch.may_end && t == u32::from(END_BYTE) {
            return Ok(Some(Answer {
                finish: "stop",
                tokens: n,
                logits_digest: digest,
            }));
        }
        c.advance(t as u8);
        pending.push(t);
        if !emit(engine, t) {
            return Ok(None);
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::engine::tests::tiny_engine;
    use crate::serve::json::Json;

    fn menu_grammar() -> Arc<Grammar> {
        let entry = |id: &str, params: serde_json::Value, required: &[&str]| {
            json!({"type": "object", "properties": {
                "experiment": {"type": "string", "enum": [id]},
                "params": {"type": "object", "properties": params, "required": required, "additionalProperties": false},
                "rationale": {"type": "string", "maxLength": 40}},
             "required": ["experiment", "params", "rationale"], "additionalProperties": false})
        };
        let schema = json!({"anyOf": [
            entry("rerank_pins", json!({"pin_count": {"type": "integer", "minimum": 0, "maximum": 512}}), &["pin_count"]),
            entry("rebalance_trunk_cache", json!({"trunk_fraction": {"type": "number", "minimum": 0.0, "maximum": 1.0}}), &["trunk_fraction"]),
            entry("remeasure", json!({}), &[]),
        ]});
        let schema: Json = serde_json::from_value(schema).unwrap();
        Arc::new(Grammar::from_schema(&schema).unwrap())
    }

    /// Runs one constrained answer after `prompt`; returns its text and digest.
    fn answer(
        engine: &mut Engine,
        prompt: &str,
        temperature: f32,
        seed: u64,
        max_tokens: usize,
        forced: Forced,
    ) -> (String, Answer) {
        let p = engine.encode(prompt);
        engine.reset();
        engine.resume(&p[..p.len() - 1], false).unwrap();
        let mut c = Constraint::new(menu_grammar());
        let mut text = Vec::new();
        let a = constrained(
            engine,
            &mut c,
            p[p.len() - 1],
            max_tokens,
            &mut Sampler::new(temperature, seed),
            forced,
            &AtomicBool::new(false),
            &mut |_, id| {
                text.push(id as u8);
                true
            },
        )
        .unwrap()
        .unwrap();
        assert!(c.is_complete());
        (String::from_utf8(text).unwrap(), a)
    }

    #[test]
    fn jump_forward_equals_stepping_one_byte_at_a_time() {
        let (_d, mut e) = tiny_engine();
        let prompt = "<|system|>\nChoose.\n<|user|>\nheat 0.62, far tier down\n<|assistant|>\n";
        for (temperature, seed, max_tokens) in [(0.0, 0, 90), (0.9, 1, 90), (1.5, 2, 120)] {
            let jumped = answer(
                &mut e,
                prompt,
                temperature,
                seed,
                max_tokens,
                Forced::JumpForward,
            );
            let stepped = answer(
                &mut e,
                prompt,
                temperature,
                seed,
                max_tokens,
                Forced::OneByOne,
            );
            assert_eq!(jumped, stepped, "temperature {temperature}, seed {seed}");
            let v: serde_json::Value = serde_json::from_str(&jumped.0).unwrap();
            assert!(v["experiment"].is_string(), "{}", jumped.0);
            assert_eq!(jumped.1.tokens, jumped.0.len());
        }
    }
}
