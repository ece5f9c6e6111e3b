//! The surface scorer: fixed greedy requests to an OpenAI-compatible
//! `/v1/chat/completions`, the way users meet the stack.
//!
//! Every request streams, with `temperature: 0` and a fixed `max_tokens`,
//! and `cache_prompt: false` when configured (llama.cpp: a cached prefix
//! changes both rounding and timing). Seconds per token come from the
//! server's `timings.predicted_per_token_ms` when every answer carries it
//! (llama.cpp does), otherwise from the arrival times of streamed tokens,
//! measured here, for every prompt alike; the ledger says which. The output
//! hash covers the generated texts of all prompts, in order.

use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};

use super::output::OutputHash;
use super::scorer::{MeasureError, RunFailure, RunOutcome, Scorer};
use crate::config::{Config, Surface};
use crate::ledger::{TimingSource, TokenParts};
use crate::process::cancel::Cancel;
use crate::profile::ProfileFile;
use crate::vocab::Method;

/// How long to wait for a TCP connection to the server.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Bytes of an error body kept in a message.
const BODY_SNIPPET: usize = 300;

/// Measures an OpenAI-compatible server with the configured prompt set.
#[derive(Debug, Clone)]
pub struct SurfaceScorer {
    client: reqwest::Client,
    endpoint: reqwest::Url,
    pub model: String,
    pub prompts: Vec<String>,
    pub max_tokens: u32,
    pub send_cache_prompt_false: bool,
    /// Bound on one whole measurement (all prompts).
    pub timeout: Duration,
    /// Which server this measures, for messages: the live one, or a shadow.
    pub server: ServerKind,
}

/// Which server a surface scorer measures; says what to check when it is
/// unreachable.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerKind {
    /// The live stack, which a person runs.
    Live,
    /// A shadow this process started.
    Shadow,
}

impl ServerKind {
    fn unreachable_hint(self) -> &'static str {
        match self {
            ServerKind::Live => {
                "the live server is not answering: is it running? (start the stack, or fix [stack.surface] base_url)"
            }
            ServerKind::Shadow => {
                "the shadow this daemon started stopped answering (see its stderr tail)"
            }
        }
    }
}

/// One prompt's answer, as measured.
#[derive(Debug, Clone, PartialEq)]
struct Answer {
    text: String,
    /// Generated tokens (the server's count when it gives one).
    tokens: u64,
    /// The server's own ms per generated token, if reported.
    server_ms_per_token: Option<f64>,
    /// Client-side decode time and the token intervals it spans.
    client: Option<(Duration, u64)>,
    /// Tokens the server's draft model proposed (llama.cpp `timings.draft_n`,
    /// present only when it speculated).
    draft_n: Option<u64>,
    /// Of those, the ones the target accepted (`timings.draft_n_accepted`).
    draft_accepted: Option<u64>,
}

/// `…/v1/chat/completions` under `base` (which may or may not end in `/v1`).
pub fn chat_url(base: &reqwest::Url) -> reqwest::Url {
    let mut url = base.clone();
    let path = base.path().trim_end_matches('/');
    let path = if path.ends_with("/v1") {
        format!("{path}/chat/completions")
    } else {
        format!("{path}/v1/chat/completions")
    };
    url.set_path(&path);
    url
}

impl SurfaceScorer {
    /// `model` is sent as the request's `model` (llama.cpp ignores it).
    pub fn new(surface: &Surface, model: &str, timeout: Duration) -> SurfaceScorer {
        // A fresh connection per run. A server closes an idle keep-alive
        // connection on its own clock (cpp-httplib, under llama-server, after
        // 5 s); when that lands just as the next run reuses it, the request
        // dies as "error sending request" and a good run fails for nothing
        // (seen once in a CI run, on the 19th run of an A/A). A loopback
        // connect costs microseconds against seconds per token.
        let client = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .timeout(timeout)
            .pool_max_idle_per_host(0)
            .build()
            .expect("a client with timeouts only always builds");
        SurfaceScorer {
            client,
            endpoint: chat_url(&surface.base_url),
            model: if model.is_empty() {
                "default".into()
            } else {
                model.into()
            },
            prompts: surface.prompts.clone(),
            max_tokens: surface.max_tokens,
            send_cache_prompt_false: surface.send_cache_prompt_false,
            timeout,
            server: ServerKind::Live,
        }
    }

    /// The live server's scorer, if the config has a `[stack.surface]`.
    pub fn from_config(config: &Config) -> Option<SurfaceScorer> {
        config.stack.surface.as_ref().map(|s| {
            SurfaceScorer::new(
                s,
                &config.model.name,
                config.measure.run_timeout_s.duration(),
            )
        })
    }

    /// The same measurement against another server (a shadow instance).
    pub fn at(&self, base_url: &reqwest::Url) -> SurfaceScorer {
        SurfaceScorer {
            endpoint: chat_url(base_url),
            server: ServerKind::Shadow,
            ..self.clone()
        }
    }

    pub fn endpoint(&self) -> &reqwest::Url {
        &self.endpoint
    }

    /// Measures the server as it is now.
    pub async fn measure(&self, cancel: &Cancel) -> Result<RunOutcome, RunFailure> {
        self.measure_within(cancel, self.timeout).await
    }

    /// As [`SurfaceScorer::measure`], ending at `deadline` if sooner.
    pub async fn measure_within(
        &self,
        cancel: &Cancel,
        deadline: Duration,
    ) -> Result<RunOutcome, RunFailure> {
        let timeout = deadline.min(self.timeout);
        let t0 = Instant::now();
        let fail = |error| RunFailure {
            error,
            exit_code: None,
            duration: t0.elapsed(),
            stderr_tail: String::new(),
        };
        let answers = tokio::select! {
            biased;
            () = cancel.cancelled() => return Err(fail(MeasureError::Cancelled)),
            r = tokio::time::timeout(timeout, self.ask_all()) => match r {
                Err(_) => return Err(fail(MeasureError::Timeout { after: timeout })),
                Ok(r) => r.map_err(fail)?,
            },
        };
        let (spt, source) = self.seconds_per_token(&answers).map_err(fail)?;
        let texts: Vec<&str> = answers.iter().map(|a| a.text.as_str()).collect();
        let mut extras = Map::new();
        extras.insert(
            "answers".into(),
            answers
                .iter()
                .map(|a| {
                    json!({
                        "tokens": a.tokens,
                        "server_ms_per_token": a.server_ms_per_token,
                        "client_decode_s": a.client.map(|c| c.0.as_secs_f64()),
                        "draft_n": a.draft_n,
                        "draft_n_accepted": a.draft_accepted,
                    })
                })
                .collect(),
        );
        Ok(RunOutcome {
            seconds_per_token: spt,
            tokens: Some(answers.iter().map(|a| a.tokens).sum()),
            output_hash: OutputHash::of_texts(&texts),
            exit_code: None,
            duration: t0.elapsed(),
            stderr_tail: String::new(),
            timing_source: source,
            // The serving surface reports no parts of a token, only how
            // well drafting went when the server speculated.
            parts: TokenParts {
                draft_acceptance: draft_acceptance(&answers),
                ..TokenParts::default()
            },
            extras,
            memory_limit: None,
        })
    }

    /// Token-weighted mean over the prompts, from one source for all.
    fn seconds_per_token(&self, answers: &[Answer]) -> Result<(f64, TimingSource), MeasureError> {
        let bad = |problem: String| MeasureError::BadResponse {
            url: self.endpoint.to_string(),
            problem,
        };
        let spt = if answers.iter().all(|a| a.server_ms_per_token.is_some()) {
            let (ms, n) = answers.iter().fold((0.0, 0u64), |(ms, n), a| {
                let t = a.tokens.max(1);
                (ms + a.server_ms_per_token.unwrap_or(0.0) * t as f64, n + t)
            });
            (ms / n as f64 / 1000.0, TimingSource::Server)
        } else {
            let mut total = Duration::ZERO;
            let mut intervals = 0;
            for (i, a) in answers.iter().enumerate() {
                let (d, k) = a.client.ok_or_else(|| {
                    bad(format!(
                        "answer {} has no server timings and too few streamed tokens ({}) to time them here; raise [stack.surface] max_tokens to at least 2",
                        i + 1,
                        a.tokens
                    ))
                })?;
                total += d;
                intervals += k;
            }
            (total.as_secs_f64() / intervals as f64, TimingSource::Client)
        };
        if !(spt.0.is_finite() && spt.0 > 0.0) {
            return Err(bad(format!(
                "timings give {} s/token; expected a finite number > 0",
                spt.0
            )));
        }
        Ok(spt)
    }

    async fn ask_all(&self) -> Result<Vec<Answer>, MeasureError> {
        let mut answers = Vec::with_capacity(self.prompts.len());
        for prompt in &self.prompts {
            answers.push(self.ask(prompt).await?);
        }
        Ok(answers)
    }

    async fn ask(&self, prompt: &str) -> Result<Answer, MeasureError> {
        let url = self.endpoint.to_string();
        let http = |source| MeasureError::Http {
            url: url.clone(),
            source,
        };
        let bad = |problem: String| MeasureError::BadResponse {
            url: url.clone(),
            problem,
        };
        let mut body = json!({
            "model": self.model,
            "messages": [{"role": "user", "content": prompt}],
            "temperature": 0,
            "max_tokens": self.max_tokens,
            "stream": true,
            "stream_options": {"include_usage": true},
        });
        if self.send_cache_prompt_false {
            body["cache_prompt"] = Value::Bool(false);
        }
        let mut resp = self
            .client
            .post(self.endpoint.clone())
            .json(&body)
            .send()
            .await
            .map_err(|source| {
                if source.is_connect() {
                    MeasureError::Unreachable {
                        url: url.clone(),
                        hint: self.server.unreachable_hint(),
                        source,
                    }
                } else {
                    http(source)
                }
            })?;
        let status = resp.status();
        if !status.is_success() {
            let text = resp.text().await.unwrap_or_default();
            return Err(MeasureError::HttpStatus {
                url: url.clone(),
                status: status.as_u16(),
                body: text.chars().take(BODY_SNIPPET).collect(),
            });
        }
        let streamed = resp
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"));
        if !streamed {
            // A server that ignores `stream`: one JSON answer, no arrivals.
            let v: Value = resp
                .json()
                .await
                .map_err(|e| bad(format!("not JSON ({e})")))?;
            let text = v["choices"][0]["message"]["content"]
                .as_str()
                .ok_or_else(|| bad("no choices[0].message.content".into()))?
                .to_string();
            let mut a = Answer {
                text,
                tokens: 0,
                server_ms_per_token: None,
                client: None,
                draft_n: None,
                draft_accepted: None,
            };
            read_counts(&v, &mut a);
            return Ok(a);
        }
        let mut a = Answer {
            text: String::new(),
            tokens: 0,
            server_ms_per_token: None,
            client: None,
            draft_n: None,
            draft_accepted: None,
        };
        let (mut first, mut last, mut pieces) = (None::<Instant>, None::<Instant>, 0u64);
        let mut buf: Vec<u8> = Vec::new();
        let mut done = false;
        while !done {
            let Some(chunk) = resp.chunk().await.map_err(http)? else {
                break;
            };
            let now = Instant::now();
            buf.extend_from_slice(&chunk);
            while let Some(nl) = buf.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = buf.drain(..=nl).collect();
                let line = String::from_utf8_lossy(&line);
                let Some(data) = line.trim().strip_prefix("data:") else {
                    continue;
                };
                let data = data.trim();
                if data == "[DONE]" {
                    done = true;
                    break;
                }
                let v: Value = serde_json::from_str(data)
                    .map_err(|e| bad(format!("a stream event is not JSON ({e}): {data:.80}")))?;
                if let Some(piece) = v["choices"][0]["delta"]["content"].as_str() {
                    if !piece.is_empty() {
                        a.text.push_str(piece);
                        pieces += 1;
                        first.get_or_insert(now);
                        last = Some(now);
                    }
                }
                read_counts(&v, &mut a);
            }
        }
        a.tokens = a.tokens.max(pieces);
        if let (Some(f), Some(l)) = (first, last) {
            // The first token carries the prompt's prefill; decode speed is
            // the spacing of the ones after it.
            if a.tokens >= 2 && l > f {
                a.client = Some((l - f, a.tokens - 1));
            }
        }
        Ok(a)
    }
}

/// Tokens drafted over all answers of a measurement (`timings.draft_n`
/// summed; absent counts as 0), read back from its extras.
pub fn drafted_tokens(extras: &Map<String, Value>) -> u64 {
    extras
        .get("answers")
        .and_then(Value::as_array)
        .map(|answers| answers.iter().filter_map(|a| a["draft_n"].as_u64()).sum())
        .unwrap_or(0)
}

/// Accepted over drafted tokens across the answers, when any were drafted.
fn draft_acceptance(answers: &[Answer]) -> Option<f64> {
    let drafted: u64 = answers.iter().filter_map(|a| a.draft_n).sum();
    let accepted: u64 = answers.iter().filter_map(|a| a.draft_accepted).sum();
    (drafted > 0).then(|| (accepted.min(drafted)) as f64 / drafted as f64)
}

/// Reads `timings` (llama.cpp) and `usage` into `a`, when present.
fn read_counts(v: &Value, a: &mut Answer) {
    let t = &v["timings"];
    if let Some(ms) = t["predicted_per_token_ms"].as_f64() {
        a.server_ms_per_token = Some(ms);
    }
    if let Some(n) = t["predicted_n"].as_u64() {
        a.tokens = a.tokens.max(n);
    }
    if let Some(n) = t["draft_n"].as_u64() {
        a.draft_n = Some(a.draft_n.unwrap_or(0).max(n));
    }
    if let Some(n) = t["draft_n_accepted"].as_u64() {
        a.draft_accepted = Some(a.draft_accepted.unwrap_or(0).max(n));
    }
    if let Some(n) = v["usage"]["completion_tokens"].as_u64() {
        a.tokens = a.tokens.max(n);
    }
}

impl Scorer for SurfaceScorer {
    fn sends_to_live_server(&self) -> bool {
        self.server == ServerKind::Live
    }

    fn method(&self) -> Method {
        Method::Surface
    }

    /// Measures the live server as it is; `profile` is what it is believed
    /// to run (`remeasure`). Candidates go through a shadow instance.
    async fn score(
        &self,
        _profile: &ProfileFile,
        cancel: &Cancel,
    ) -> Result<RunOutcome, RunFailure> {
        self.measure(cancel).await
    }

    async fn score_within(
        &self,
        _profile: &ProfileFile,
        cancel: &Cancel,
        deadline: Duration,
    ) -> Result<RunOutcome, RunFailure> {
        self.measure_within(cancel, deadline).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chat_url_accepts_a_base_with_or_without_v1() {
        for (base, want) in [
            (
                "http://127.0.0.1:8181",
                "http://127.0.0.1:8181/v1/chat/completions",
            ),
            (
                "http://127.0.0.1:8181/",
                "http://127.0.0.1:8181/v1/chat/completions",
            ),
            ("http://h:1/v1", "http://h:1/v1/chat/completions"),
            ("http://h:1/api/v1/", "http://h:1/api/v1/chat/completions"),
        ] {
            assert_eq!(chat_url(&base.parse().unwrap()).as_str(), want);
        }
    }
}
