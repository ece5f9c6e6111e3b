//! The HTTP routes: chat completions (whole or streamed), health, models,
//! metrics and heat. Every refusal is an OpenAI-style error body.

use std::convert::Infallible;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{Value, json};
use tokio::sync::mpsc::{UnboundedReceiver, unbounded_channel};

use super::admission::admit;
use super::body::{Body, done, event};
use super::metrics::{Live, render};
use super::openai::{ApiError, ChatRequest, Envelope, Format};
use super::schema::Grammar;
use super::worker::{Event, Job, Stop};

/// Largest request body accepted.
const MAX_BODY_BYTES: usize = 4 << 20;

/// What every handler shares.
pub struct State {
    pub live: Arc<Live>,
    /// The engine thread's queue; taken at shutdown so the thread can end.
    pub jobs: Mutex<Option<mpsc::Sender<Job>>>,
    pub stop: Arc<Stop>,
    /// The engine is open.
    pub ready: AtomicBool,
    pub queue: usize,
    pub max_prompt_tokens: usize,
    /// The model's context for a prompt: only its last N tokens are fed (0 = all).
    pub context_tokens: usize,
    pub dump_dir: Option<PathBuf>,
    pub model_name: String,
    pub model_digest: String,
    /// The profile it runs: the file's sha256, and what the flags overrode.
    pub served: super::Served,
    pub next_id: AtomicU64,
}

fn json_response(status: u16, v: &Value) -> Response<Body> {
    Response::builder()
        .status(status)
        .header("content-type", "application/json")
        .body(Body::full(v.to_string()))
        .expect("a valid response")
}

fn error(e: &ApiError) -> Response<Body> {
    json_response(e.status, &e.body())
}

/// The entry point hyper calls for each request.
pub async fn handle(
    state: Arc<State>,
    req: Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    let resp = route(&state, req).await;
    state.live.count_response(resp.status().as_u16());
    Ok(resp)
}

async fn route(state: &Arc<State>, req: Request<Incoming>) -> Response<Body> {
    let path = req.uri().path().to_owned();
    match (req.method().clone(), path.as_str()) {
        (Method::GET, "/health") => {
            if !state.ready.load(Ordering::SeqCst) {
                let e = ApiError::other(
                    503,
                    "unavailable_error",
                    "loading",
                    "the model is still loading",
                );
                return json_response(
                    503,
                    &json!({"status": "loading", "error": e.body()["error"]}),
                );
            }
            json_response(
                200,
                &json!({
                    "status": "ok",
                    "profile_sha256": state.served.profile_sha256,
                    "overridden": state.served.overridden,
                }),
            )
        }
        (Method::GET, "/v1/models" | "/models") => json_response(
            200,
            &json!({"object": "list", "data": [{"id": state.model_name, "object": "model", "created": 0, "owned_by": "tinyk3", "meta": {"digest": state.model_digest}}]}),
        ),
        (Method::POST, "/v1/chat/completions" | "/chat/completions") => {
            match chat(state, req).await {
                Ok(r) => r,
                Err(e) => error(&e),
            }
        }
        (Method::GET, "/metrics") => Response::builder()
            .status(200)
            .header("content-type", "text/plain; version=0.0.4; charset=utf-8")
            .body(Body::full(render(&state.live)))
            .expect("a valid response"),
        (Method::GET, "/heat") => {
            let hist = state
                .live
                .snapshot
                .lock()
                .expect("metrics lock")
                .hist_json
                .clone();
            Response::builder()
                .status(200)
                .header("content-type", "application/json")
                .body(Body::full(hist))
                .expect("a valid response")
        }
        (Method::POST, "/heat/flush") => match flush(state, req.uri().query()).await {
            Ok(v) => json_response(200, &v),
            Err(e) => error(&e),
        },
        (
            _,
            "/health"
            | "/v1/models"
            | "/models"
            | "/v1/chat/completions"
            | "/chat/completions"
            | "/metrics"
            | "/heat"
            | "/heat/flush",
        ) => error(&ApiError::other(
            405,
            "invalid_request_error",
            "method_not_allowed",
            format!("{} is not allowed on {path}", req.method()),
        )),
        _ => error(&ApiError::other(
            404,
            "invalid_request_error",
            "not_found",
            format!(
                "no route {path}; see /v1/chat/completions, /v1/models, /health, /metrics, /heat"
            ),
        )),
    }
}

/// Writes the histogram and the trace ring into the `--dump-cache-trace` directory.
async fn flush(state: &Arc<State>, query: Option<&str>) -> Result<Value, ApiError> {
    if query.is_some_and(|q| !q.is_empty()) {
        return Err(ApiError::invalid(
            None,
            "POST /heat/flush takes no parameters: the directory is fixed by --dump-cache-trace at start",
        ));
    }
    let Some(dir) = state.dump_dir.clone() else {
        return Err(ApiError::other(
            409,
            "invalid_request_error",
            "no_trace_dir",
            "no trace directory: start the server with --dump-cache-trace DIR to enable POST /heat/flush",
        ));
    };
    let (hist, trace, entries, dropped) = {
        let s = state.live.snapshot.lock().expect("metrics lock");
        (
            s.hist_json.clone(),
            s.ring.to_bytes(),
            s.ring.len(),
            s.ring.dropped,
        )
    };
    let written = dir.clone();
    tokio::task::spawn_blocking(move || -> std::io::Result<()> {
        std::fs::create_dir_all(&dir)?;
        crate::heat::write_atomic(&dir.join("expert_hist.json"), hist.as_bytes())?;
        crate::heat::write_atomic(&dir.join("expert_trace.bin"), &trace)
    })
    .await
    .expect("the flush task does not panic")
    .map_err(|e| {
        ApiError::other(
            500,
            "server_error",
            "write_failed",
            format!(
                "cannot write the heat files into {}: {e}",
                written.display()
            ),
        )
    })?;
    Ok(
        json!({"dir": written, "files": ["expert_hist.json", "expert_trace.bin"], "trace_entries": entries, "trace_dropped": dropped}),
    )
}

async fn chat(state: &Arc<State>, req: Request<Incoming>) -> Result<Response<Body>, ApiError> {
    if state.stop.draining.load(Ordering::SeqCst) {
        return Err(ApiError::other(
            503,
            "server_error",
            "shutting_down",
            "the server is shutting down",
        ));
    }
    if !state.ready.load(Ordering::SeqCst) {
        return Err(ApiError::other(
            503,
            "unavailable_error",
            "loading",
            "the model is still loading; poll GET /health",
        ));
    }
    let body = match Limited::new(req.into_body(), MAX_BODY_BYTES)
        .collect()
        .await
    {
        Ok(b) => b.to_bytes(),
        Err(e)
            if e.downcast_ref::<http_body_util::LengthLimitError>()
                .is_some() =>
        {
            return Err(ApiError::other(
                413,
                "invalid_request_error",
                "body_too_large",
                format!("request body is over {MAX_BODY_BYTES} bytes"),
            ));
        }
        Err(e) => {
            return Err(ApiError::invalid(
                None,
                format!("cannot read the request body: {e}"),
            ));
        }
    };
    let r = ChatRequest::parse(&body)?;
    let mut prompt = r.prompt();
    // The tokenizer is byte-level: one token per byte of the rendered prompt.
    if prompt.len() > state.max_prompt_tokens {
        return Err(ApiError::invalid(
            Some("messages"),
            format!(
                "the prompt is {} tokens (bytes, with the chat template), over this server's --max-prompt-tokens {}",
                prompt.len(),
                state.max_prompt_tokens
            ),
        ));
    }
    // A small context window, as small-context servers have: the model reads
    // the prompt's end (where the chat template puts the question), and
    // `timings.prompt_n` reports how much it read.
    if state.context_tokens > 0 && prompt.len() > state.context_tokens {
        let mut cut = prompt.len() - state.context_tokens;
        while !prompt.is_char_boundary(cut) {
            cut += 1;
        }
        prompt.drain(..cut);
    }
    let grammar = match &r.format {
        Format::Text => None,
        Format::JsonObject => Some(Grammar::json_object()),
        Format::JsonSchema(s) => Some(Grammar::from_schema(s).map_err(|e| {
            ApiError::invalid(Some("response_format.json_schema.schema"), e.to_string())
        })?),
    };
    if let Some(g) = &grammar {
        let shortest = g.min_len[g.root];
        if shortest > r.max_tokens {
            return Err(ApiError::invalid(
                Some("max_tokens"),
                format!(
                    "the shortest answer the schema admits is {shortest} tokens, more than max_tokens = {}",
                    r.max_tokens
                ),
            ));
        }
    }
    let Some(ticket) = admit(&state.live, state.queue) else {
        return Err(ApiError::other(
            429,
            "rate_limit_error",
            "rate_limit_exceeded",
            format!(
                "server busy: one generation running and {} queued (--queue {}); retry later",
                state.queue, state.queue
            ),
        ));
    };
    let (tx, rx) = unbounded_channel();
    let job = Job {
        prompt,
        max_tokens: r.max_tokens,
        temperature: r.temperature,
        seed: r.seed,
        stop: r.stop.clone(),
        cache_prompt: r.cache_prompt,
        grammar: grammar.map(Arc::new),
        events: tx,
        ticket,
    };
    let sent = state
        .jobs
        .lock()
        .expect("queue lock")
        .as_ref()
        .map(|q| q.send(job));
    if !matches!(sent, Some(Ok(()))) {
        return Err(ApiError::other(
            503,
            "server_error",
            "shutting_down",
            "the server is shutting down",
        ));
    }
    let env = Envelope {
        id: format!("chatcmpl-{}", state.next_id.fetch_add(1, Ordering::SeqCst)),
        created: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        model: state.model_name.clone(),
    };
    if r.stream {
        return Ok(stream(env, rx, r.include_usage));
    }
    collect(env, rx).await
}

async fn collect(
    env: Envelope,
    mut rx: UnboundedReceiver<Event>,
) -> Result<Response<Body>, ApiError> {
    let mut content = String::new();
    while let Some(ev) = rx.recv().await {
        match ev {
            Event::Delta(d) => content.push_str(&d),
            Event::Done {
                finish_reason,
                timings,
            } => {
                return Ok(json_response(
                    200,
                    &env.completion(&content, finish_reason, &timings),
                ));
            }
            Event::Failed(e) => return Err(e),
        }
    }
    Err(ApiError::other(
        500,
        "server_error",
        "engine_gone",
        "the engine thread ended before answering",
    ))
}

fn stream(env: Envelope, mut rx: UnboundedReceiver<Event>, include_usage: bool) -> Response<Body> {
    let (out, body) = unbounded_channel::<Bytes>();
    tokio::spawn(async move {
        // A send fails only when the client has gone; dropping `rx` then stops the generation.
        if out
            .send(event(&env.chunk(
                &json!({"role": "assistant", "content": ""}),
                None,
                None,
            )))
            .is_err()
        {
            return;
        }
        while let Some(ev) = rx.recv().await {
            let sent = match ev {
                Event::Delta(d) => out.send(event(&env.chunk(&json!({"content": d}), None, None))),
                Event::Done {
                    finish_reason,
                    timings,
                } => {
                    let _ = out.send(event(&env.chunk(
                        &json!({}),
                        Some(finish_reason),
                        Some(&timings),
                    )));
                    if include_usage {
                        let _ = out.send(event(&env.usage_chunk(&timings)));
                    }
                    break;
                }
                Event::Failed(e) => {
                    let _ = out.send(event(&e.body()));
                    break;
                }
            };
            if sent.is_err() {
                return;
            }
        }
        let _ = out.send(done());
    });
    Response::builder()
        .status(StatusCode::OK)
        .header("content-type", "text/event-stream")
        .header("cache-control", "no-cache")
        .body(Body::Events(body))
        .expect("a valid response")
}
