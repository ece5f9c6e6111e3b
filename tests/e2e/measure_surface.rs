//! The surface scorer against a real HTTP server on a loopback port, and
//! shadow instances started, health-checked and stopped as real processes.
//!
//! `FakeOpenAiServer` is a test double: `tinyk3 serve` does not exist yet.
//! It speaks just enough OpenAI-compatible streaming chat completions over a
//! real TCP socket, and records each request so the test can check what the
//! scorer sent. Replace it with `tinyk3 serve` once that lands.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common;
use crate::common::{alive, profile_file};
use orchestrator::config::{Seconds, Surface};
use orchestrator::ledger::TimingSource;
use orchestrator::measure::output::OutputHash;
use orchestrator::measure::scorer::MeasureError;
use orchestrator::measure::shadow::ShadowScorer;
use orchestrator::measure::surface::SurfaceScorer;
use orchestrator::process::cancel::Cancel;
use orchestrator::process::template::{ArgvTemplate, Special};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

#[derive(Clone, Copy)]
enum Mode {
    /// Streams tokens and ends with llama.cpp-style `timings`.
    WithTimings,
    /// Streams tokens only: the client must time them.
    NoTimings,
    /// As `WithTimings`, with llama.cpp's drafting counts (8 drafted, 6
    /// accepted per answer).
    Drafting,
    /// Answers 500.
    Broken,
}

/// Test double of an OpenAI-compatible server (see the module comment).
struct FakeOpenAiServer {
    url: reqwest::Url,
    requests: Arc<Mutex<Vec<Value>>>,
}

/// The words the double generates for a prompt: deterministic, per prompt.
fn answer_words(prompt: &str) -> Vec<String> {
    prompt
        .split_whitespace()
        .rev()
        .map(|w| format!("{w} "))
        .collect()
}

impl FakeOpenAiServer {
    async fn start(mode: Mode) -> FakeOpenAiServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap())
            .parse()
            .unwrap();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&requests);
        tokio::spawn(async move {
            loop {
                let (mut sock, _) = listener.accept().await.unwrap();
                let seen = Arc::clone(&seen);
                tokio::spawn(async move {
                    let body = read_request(&mut sock).await;
                    let req: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
                    seen.lock().unwrap().push(req.clone());
                    if matches!(mode, Mode::Broken) {
                        let msg = "model exploded";
                        let head = format!(
                            "HTTP/1.1 500 Internal Server Error\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                            msg.len()
                        );
                        let _ = sock.write_all(format!("{head}{msg}").as_bytes()).await;
                        return;
                    }
                    let prompt = req["messages"][0]["content"]
                        .as_str()
                        .unwrap_or("")
                        .to_string();
                    let _ = sock
                        .write_all(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n")
                        .await;
                    let words = answer_words(&prompt);
                    for w in &words {
                        let ev = json!({"choices": [{"delta": {"content": w}, "index": 0}]});
                        let _ = sock.write_all(format!("data: {ev}\n\n").as_bytes()).await;
                        tokio::time::sleep(Duration::from_millis(15)).await;
                    }
                    let mut last = json!({"choices": [{"delta": {}, "finish_reason": "length", "index": 0}],
                                          "usage": {"completion_tokens": words.len()}});
                    if matches!(mode, Mode::WithTimings | Mode::Drafting) {
                        last["timings"] =
                            json!({"predicted_per_token_ms": 40.0, "predicted_n": words.len()});
                    }
                    if matches!(mode, Mode::Drafting) {
                        last["timings"]["draft_n"] = json!(8);
                        last["timings"]["draft_n_accepted"] = json!(6);
                    }
                    let _ = sock
                        .write_all(format!("data: {last}\n\ndata: [DONE]\n\n").as_bytes())
                        .await;
                });
            }
        });
        FakeOpenAiServer { url, requests }
    }
}

/// Reads one HTTP/1.1 request and returns its body.
async fn read_request(sock: &mut tokio::net::TcpStream) -> Vec<u8> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = sock.read(&mut chunk).await.unwrap();
        if n == 0 {
            return Vec::new();
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map_or(0, |v| v.trim().parse().unwrap());
            while buf.len() < end + 4 + len {
                let n = sock.read(&mut chunk).await.unwrap();
                buf.extend_from_slice(&chunk[..n]);
            }
            return buf[end + 4..end + 4 + len].to_vec();
        }
    }
}

const PROMPTS: [&str; 2] = ["which experts stay pinned", "describe the far tier now"];

fn surface(url: &reqwest::Url, cache_false: bool) -> SurfaceScorer {
    let s = Surface {
        base_url: url.clone(),
        prompts: PROMPTS.iter().map(|p| p.to_string()).collect(),
        max_tokens: 16,
        send_cache_prompt_false: cache_false,
        health_profile_sha256: None,
    };
    SurfaceScorer::new(&s, "tinyk3", Duration::from_secs(10))
}

fn expected_hash() -> OutputHash {
    let texts: Vec<String> = PROMPTS.iter().map(|p| answer_words(p).concat()).collect();
    OutputHash::of_texts(&texts)
}

#[tokio::test]
async fn server_timings_are_used_when_every_answer_has_them() {
    let server = FakeOpenAiServer::start(Mode::WithTimings).await;
    let o = surface(&server.url, true)
        .measure(&Cancel::never())
        .await
        .unwrap();
    assert_eq!(o.timing_source, TimingSource::Server);
    assert!(
        (o.seconds_per_token - 0.040).abs() < 1e-12,
        "{}",
        o.seconds_per_token
    );
    assert_eq!(o.tokens, Some(9), "4 + 5 words");
    assert_eq!(o.output_hash, expected_hash());
    let reqs = server.requests.lock().unwrap().clone();
    assert_eq!(reqs.len(), 2);
    for (r, p) in reqs.iter().zip(PROMPTS) {
        assert_eq!(r["messages"][0]["content"], p);
        assert_eq!(r["temperature"], 0);
        assert_eq!(r["max_tokens"], 16);
        assert_eq!(r["stream"], true);
        assert_eq!(r["cache_prompt"], false);
        assert_eq!(r["model"], "tinyk3");
    }
}

#[tokio::test]
async fn without_server_timings_tokens_are_timed_as_they_stream() {
    let _heavy = crate::common::heavy_async().await;
    let server = FakeOpenAiServer::start(Mode::NoTimings).await;
    let o = surface(&server.url, false)
        .measure(&Cancel::never())
        .await
        .unwrap();
    assert_eq!(o.timing_source, TimingSource::Client);
    // The double spaces tokens by 15 ms; loopback adds little.
    assert!(
        o.seconds_per_token > 0.010 && o.seconds_per_token < 0.5,
        "{}",
        o.seconds_per_token
    );
    assert_eq!(o.output_hash, expected_hash());
    let reqs = server.requests.lock().unwrap().clone();
    assert!(reqs.iter().all(|r| r.get("cache_prompt").is_none()));
}

#[tokio::test]
async fn http_errors_and_unreachable_servers_are_typed_failures() {
    let server = FakeOpenAiServer::start(Mode::Broken).await;
    let f = surface(&server.url, false)
        .measure(&Cancel::never())
        .await
        .unwrap_err();
    assert!(
        matches!(f.error, MeasureError::HttpStatus { status: 500, .. }),
        "{f}"
    );
    assert!(f.to_string().contains("model exploded"), "{f}");
    // A port nobody listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}").parse().unwrap();
    let f = surface(&url, false)
        .measure(&Cancel::never())
        .await
        .unwrap_err();
    // Found on llama-server: a down live server read as a bare "error
    // sending request"; it now says what is down and what to check.
    assert!(matches!(f.error, MeasureError::Unreachable { .. }), "{f}");
    let msg = f.to_string();
    assert!(
        msg.contains("the live server is not answering: is it running?")
            && msg.contains("refused the connection")
            && msg.contains(&format!("127.0.0.1:{port}")),
        "{msg}"
    );
    let f = surface(&"http://127.0.0.1:1".parse().unwrap(), false)
        .at(&url)
        .measure(&Cancel::never())
        .await
        .unwrap_err();
    assert!(f.to_string().contains("the shadow"), "{f}");
}

/// Found on llama-server: every run's draft acceptance was NULL though the
/// answers carried `timings.draft_n` and `draft_n_accepted`.
#[tokio::test]
async fn drafting_counts_are_stored_as_the_runs_draft_acceptance() {
    let server = FakeOpenAiServer::start(Mode::Drafting).await;
    let o = surface(&server.url, false)
        .measure(&Cancel::never())
        .await
        .unwrap();
    assert_eq!(o.parts.draft_acceptance, Some(0.75));
    let plain = FakeOpenAiServer::start(Mode::WithTimings).await;
    let o = surface(&plain.url, false)
        .measure(&Cancel::never())
        .await
        .unwrap();
    assert_eq!(o.parts.draft_acceptance, None, "no drafts, no acceptance");
}

fn shadow(
    argv: &[&str],
    health: &str,
    start_timeout_s: f64,
    surface_url: &reqwest::Url,
) -> ShadowScorer {
    let argv: Vec<String> = argv.iter().map(|s| s.to_string()).collect();
    ShadowScorer {
        argv: ArgvTemplate::parse(&argv, &[], &[Special::Port, Special::Profile]).unwrap(),
        env: Default::default(),
        health_path: health.into(),
        start_timeout: Seconds::try_from(start_timeout_s).unwrap().duration(),
        cwd: std::env::temp_dir(),
        headroom_gb: 0.1,
        surface: surface(surface_url, false),
        require_drafts: false,
        drafted_series: None,
        metrics_path: "/metrics".into(),
        pool: Default::default(),
    }
}

#[tokio::test]
async fn a_shadow_is_started_on_a_free_port_found_healthy_and_stopped() {
    let tmp = tempfile::tempdir().unwrap();
    let p = profile_file(tmp.path(), "candidate.toml");
    let any: reqwest::Url = "http://127.0.0.1:1".parse().unwrap();
    // A real HTTP server as the shadow process (python's, answering 200 on /).
    let s = shadow(
        &[
            "python3",
            "-m",
            "http.server",
            "--bind",
            "127.0.0.1",
            "{port}",
        ],
        "/",
        20.0,
        &any,
    );
    let running = s.start(&p, &Cancel::never()).await.unwrap();
    let pid = running.pid();
    assert!(alive(pid));
    let health = reqwest::get(running.base_url().clone()).await.unwrap();
    assert!(health.status().is_success());
    running.stop().await;
    assert!(!alive(pid), "the shadow survived stop");
}

#[tokio::test]
async fn a_shadow_that_exits_or_never_gets_healthy_fails_and_leaves_nothing() {
    let _heavy = crate::common::heavy_async().await;
    let tmp = tempfile::tempdir().unwrap();
    let p = profile_file(tmp.path(), "candidate.toml");
    let any: reqwest::Url = "http://127.0.0.1:1".parse().unwrap();
    let f = shadow(&["false"], "/health", 10.0, &any)
        .start(&p, &Cancel::never())
        .await
        .unwrap_err();
    assert!(matches!(f.error, MeasureError::ShadowExited { .. }), "{f}");
    let t0 = Instant::now();
    let pidfile = tmp.path().join("pid");
    let script = common::script(
        tmp.path(),
        "deaf-shadow-double",
        &format!("echo $$ > {}; exec sleep 100", pidfile.display()),
    );
    let f = shadow(&[script.to_str().unwrap(), "{port}"], "/health", 1.0, &any)
        .start(&p, &Cancel::never())
        .await
        .unwrap_err();
    assert!(
        matches!(f.error, MeasureError::ShadowUnhealthy { .. }),
        "{f}"
    );
    assert!(f.to_string().contains("start_timeout_s"), "{f}");
    assert!(t0.elapsed() < Duration::from_secs(5));
    let pid: i32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(!alive(pid), "the unhealthy shadow survived");
}
