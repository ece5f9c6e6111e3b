//! The chat API, streaming, stop sequences, metrics, heat, bad requests and the queue.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::serve_support::{Server, chat_body, parse_prometheus, tiny_model};

fn prompt_len(content: &str) -> u64 {
    // The chat template: role markers around each message, then the assistant's marker.
    format!("<|user|>\n{content}\n<|assistant|>\n").len() as u64
}

#[test]
fn answer_has_consistent_usage_and_timings() {
    let m = tiny_model();
    let s = Server::start(&m, &[]);
    let r = s.chat(&chat_body("hello there", 24));
    assert_eq!(r.status, 200, "{}", r.text());
    let v = r.json();
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["choices"][0]["message"]["role"], "assistant");
    assert_eq!(v["choices"][0]["finish_reason"], "length");
    let (u, t) = (&v["usage"], &v["timings"]);
    assert_eq!(u["completion_tokens"], 24);
    assert_eq!(u["prompt_tokens"].as_u64(), Some(prompt_len("hello there")));
    assert_eq!(
        u["total_tokens"].as_u64(),
        Some(prompt_len("hello there") + 24)
    );
    assert_eq!(t["predicted_n"], u["completion_tokens"]);
    assert_eq!(t["prompt_n"], u["prompt_tokens"]);
    let (ms, per) = (
        t["predicted_ms"].as_f64().unwrap(),
        t["predicted_per_token_ms"].as_f64().unwrap(),
    );
    assert!(ms > 0.0 && (per - ms / 24.0).abs() < 1e-9, "{t}");
    assert!(t["prompt_ms"].as_f64().unwrap() >= 0.0);
    // No speculation in this profile: no draft fields.
    assert!(t.get("draft_n").is_none(), "{t}");
    // Every byte-level token is one byte of text (the tiny model's vocabulary is 256).
    let content = v["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(!content.is_empty());
}

#[test]
fn speculative_profile_reports_draft_counts_and_the_same_text() {
    let m = tiny_model();
    let plain = Server::start(&m, &[])
        .chat(&chat_body("speculate", 30))
        .json();
    let spec_profile = m.dir.path().join("spec.toml");
    std::fs::write(
        &spec_profile,
        "[memory]\nbudget_gb = 1\ntrunk_gb = 0.5\ncache_gb = 0.01\n[speculative]\ndraft_len = 3\n",
    )
    .unwrap();
    let s = Server::start_profile(&m, &spec_profile, &[]);
    let v = s.chat(&chat_body("speculate", 30)).json();
    assert_eq!(
        v["choices"][0]["message"]["content"], plain["choices"][0]["message"]["content"],
        "speculation changed the text"
    );
    let t = &v["timings"];
    assert!(t["draft_n"].as_u64().unwrap() > 0, "{t}");
    assert!(t["draft_n_accepted"].as_u64().unwrap() <= t["draft_n"].as_u64().unwrap());
    let metrics = parse_prometheus(&s.get("/metrics").text());
    assert_eq!(
        metrics["tinyk3_draft_proposed_total"],
        t["draft_n"].as_f64().unwrap()
    );
    assert_eq!(
        metrics["tinyk3_draft_accepted_total"],
        t["draft_n_accepted"].as_f64().unwrap()
    );
}

#[test]
fn stream_carries_the_same_text_and_usage() {
    let m = tiny_model();
    let s = Server::start(&m, &[]);
    let whole = s.chat(&chat_body("stream me", 20)).json();
    let mut body = chat_body("stream me", 20);
    body["stream"] = json!(true);
    body["stream_options"] = json!({"include_usage": true});
    let r = s.chat(&body);
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("text/event-stream"));
    let events = r.events();
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    let chunks: Vec<Value> = events[..events.len() - 1]
        .iter()
        .map(|e| serde_json::from_str(e).unwrap())
        .collect();
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let text: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(
        text,
        whole["choices"][0]["message"]["content"].as_str().unwrap()
    );
    let last = &chunks[chunks.len() - 2];
    assert_eq!(last["choices"][0]["finish_reason"], "length");
    assert_eq!(last["timings"]["predicted_n"], 20);
    let usage = &chunks[chunks.len() - 1];
    assert_eq!(usage["choices"], json!([]));
    for k in ["prompt_tokens", "completion_tokens", "total_tokens"] {
        assert_eq!(usage["usage"][k], whole["usage"][k], "{k}");
    }
    // The same prompt again: all but its last token come from the prompt cache.
    assert_eq!(
        usage["usage"]["prompt_tokens_details"]["cached_tokens"].as_u64(),
        Some(whole["usage"]["prompt_tokens"].as_u64().unwrap() - 1)
    );
}

#[test]
fn stop_sequence_cuts_the_answer() {
    let m = tiny_model();
    let s = Server::start(&m, &[]);
    let full = s.chat(&chat_body("stop here", 40)).json()["choices"][0]["message"]["content"]
        .as_str()
        .unwrap()
        .to_string();
    // A stop sequence taken from the middle of the greedy answer.
    let chars: Vec<char> = full.chars().collect();
    let stop: String = chars[chars.len() / 2..chars.len() / 2 + 2].iter().collect();
    let expected = &full[..full.find(&stop).unwrap()];
    let mut body = chat_body("stop here", 40);
    body["stop"] = json!([stop]);
    let v = s.chat(&body).json();
    assert_eq!(
        v["choices"][0]["message"]["content"].as_str().unwrap(),
        expected
    );
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    assert!(v["usage"]["completion_tokens"].as_u64().unwrap() < 40);
}

#[test]
fn metrics_parse_and_move_with_requests() {
    let m = tiny_model();
    let s = Server::start(&m, &[]);
    let before = parse_prometheus(&s.get("/metrics").text());
    for name in [
        "tinyk3_seconds_per_token",
        "tinyk3_heat_coverage",
        "tinyk3_far_available",
        "tinyk3_draft_proposed_total",
        "tinyk3_draft_accepted_total",
        "tinyk3_tokens_predicted_total",
        "tinyk3_tokens_predicted_seconds_total",
        "tinyk3_requests_in_flight",
        "tinyk3_requests_queued",
        "tinyk3_requests_total",
        "tinyk3_tier_experts{tier=\"pinned\"}",
        "tinyk3_tier_experts{tier=\"cache\"}",
        "tinyk3_tier_experts{tier=\"far\"}",
        "tinyk3_tier_bytes{tier=\"cache\"}",
        "tinyk3_tier_hits_total{tier=\"cold\"}",
    ] {
        assert!(before.contains_key(name), "missing {name}");
    }
    assert!(before["tinyk3_seconds_per_token"].is_nan());
    assert_eq!(before["tinyk3_tokens_predicted_total"], 0.0);
    assert_eq!(before["tinyk3_far_available"], 0.0);
    let t0 = std::time::Instant::now();
    let v = s.chat(&chat_body("count me", 16)).json();
    let wall = t0.elapsed().as_secs_f64();
    let after = parse_prometheus(&s.get("/metrics").text());
    assert_eq!(after["tinyk3_tokens_predicted_total"], 16.0);
    let secs = v["timings"]["predicted_ms"].as_f64().unwrap() / 1e3;
    assert!((after["tinyk3_tokens_predicted_seconds_total"] - secs).abs() < 1e-9);
    assert!((after["tinyk3_seconds_per_token"] - secs / 16.0).abs() < 1e-9);
    // The timed parts of the forward pass move with the work, and never
    // exceed the wall time they are part of (prefill included).
    let phase = |m: &std::collections::BTreeMap<String, f64>, p: &str| {
        m[&format!("tinyk3_phase_seconds_total{{phase=\"{p}\"}}")]
    };
    assert_eq!(phase(&before, "trunk"), 0.0);
    let (trunk, expert) = (phase(&after, "trunk"), phase(&after, "expert"));
    assert!(trunk > 0.0 && expert > 0.0, "{trunk} {expert}");
    assert!(trunk + expert <= wall, "{trunk} + {expert} > {wall}");
    let cov = after["tinyk3_heat_coverage"];
    assert!((0.0..=1.0).contains(&cov), "{cov}");
    let hits: f64 = ["pinned", "cache", "far", "cold"]
        .iter()
        .map(|t| after[&format!("tinyk3_tier_hits_total{{tier=\"{t}\"}}")])
        .sum();
    assert!(
        hits > before
            .iter()
            .filter(|(k, _)| k.starts_with("tinyk3_tier_hits_total"))
            .map(|(_, v)| v)
            .sum::<f64>()
    );
    assert!(after["tinyk3_tier_experts{tier=\"cache\"}"] > 0.0);
    assert_eq!(after["tinyk3_http_responses_total{code=\"200\"}"], 2.0);
    assert_eq!(after["tinyk3_requests_in_flight"], 0.0);
    assert_eq!(before["tinyk3_requests_total"], 0.0);
    assert_eq!(after["tinyk3_requests_total"], 1.0);
    // The client has its answer only once the slot is free: nothing of
    // its own request is left running or queued.
    assert_eq!(after["tinyk3_requests_queued"], 0.0);
}

#[test]
fn heat_endpoints_serve_and_flush_the_histogram_and_trace() {
    let m = tiny_model();
    let dump = m.dir.path().join("dump");
    let s = Server::start(&m, &["--dump-cache-trace", dump.to_str().unwrap()]);
    s.chat(&chat_body("heat", 12));
    let hist = s.get("/heat").json();
    assert_eq!(
        (hist["n_layers"].as_u64(), hist["n_experts"].as_u64()),
        (Some(4), Some(8))
    );
    let total: u64 = hist["counts"]
        .as_object()
        .unwrap()
        .values()
        .map(|c| c.as_u64().unwrap())
        .sum();
    assert!(total > 0);
    for key in hist["counts"].as_object().unwrap().keys() {
        let (l, e) = key.split_once(',').unwrap();
        assert!(
            l.parse::<u64>().unwrap() < 4 && e.parse::<u64>().unwrap() < 8,
            "{key}"
        );
    }
    let f = s.post("/heat/flush", b"");
    assert_eq!(f.status, 200, "{}", f.text());
    let written: Value =
        serde_json::from_slice(&std::fs::read(dump.join("expert_hist.json")).unwrap()).unwrap();
    assert_eq!(written, hist);
    let trace = std::fs::read(dump.join("expert_trace.bin")).unwrap();
    // Every request in the histogram is in the trace (nothing dropped from the ring yet).
    assert_eq!(trace.len() as u64, total * 8);
    assert_eq!(f.json()["trace_entries"].as_u64(), Some(total));
    // No client-chosen paths.
    let q = s.post("/heat/flush?dir=/tmp/elsewhere", b"");
    assert_eq!(q.status, 400, "{}", q.text());
    let no_dir = Server::start(&m, &[]);
    let c = no_dir.post("/heat/flush", b"");
    assert_eq!(c.status, 409);
    assert!(
        c.json()["error"]["message"]
            .as_str()
            .unwrap()
            .contains("--dump-cache-trace")
    );
}

#[test]
fn bad_requests_get_400_naming_the_problem_and_the_server_keeps_serving() {
    let m = tiny_model();
    let s = Server::start(&m, &["--max-prompt-tokens", "200"]);
    let good = chat_body("fine", 4);
    let with = |k: &str, v: Value| {
        let mut b = good.clone();
        b[k] = v;
        b.to_string()
    };
    let schema = |schema: Value| {
        with(
            "response_format",
            json!({"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}),
        )
    };
    let cases: Vec<(String, &str)> = vec![
        ("{\"messages\": [".to_string(), "not valid JSON"),
        ("[1, 2]".to_string(), "must be a JSON object"),
        (
            json!({"max_tokens": 3}).to_string(),
            "`messages` is required",
        ),
        (with("messages", json!("hi")), "`messages`"),
        (
            with("messages", json!([{"role": "user"}])),
            "messages[0].content",
        ),
        (with("max_tokens", json!("ten")), "`max_tokens`"),
        (with("max_tokens", json!(0)), "`max_tokens`"),
        (with("temperature", json!("hot")), "`temperature`"),
        (with("seed", json!(1.5)), "`seed`"),
        (with("stop", json!(7)), "`stop`"),
        (with("stream", json!("yes")), "`stream`"),
        (with("cache_prompt", json!("no")), "`cache_prompt`"),
        (with("n", json!(2)), "`n`"),
        (
            with("response_format", json!({"type": "xml"})),
            "response_format.type",
        ),
        (
            with(
                "messages",
                json!([{"role": "user", "content": "x".repeat(300)}]),
            ),
            "--max-prompt-tokens 200",
        ),
        (
            schema(json!({"type": "string", "pattern": "^a"})),
            "`pattern`",
        ),
        (schema(json!({"$ref": "#/defs/x"})), "`$ref`"),
        (
            schema(json!({"type": "integer", "minimum": 5, "maximum": 4})),
            "no integer",
        ),
        (
            schema(
                json!({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["b"]}),
            ),
            "\"b\"",
        ),
        (
            schema(json!({"type": "string", "enum": ["a-long-enum-value"]})),
            "shortest answer",
        ),
    ];
    for (body, needle) in &cases {
        let r = s.post("/v1/chat/completions", body.as_bytes());
        assert_eq!(r.status, 400, "{body} -> {}", r.text());
        let e = r.json();
        assert_eq!(e["error"]["type"], "invalid_request_error", "{e}");
        let msg = e["error"]["message"].as_str().unwrap();
        assert!(
            msg.contains(needle),
            "{body}: message {msg:?} does not name {needle:?}"
        );
    }
    // Extra fields other servers use are accepted and ignored.
    let mut extra = good.clone();
    extra["cache_prompt"] = json!(false);
    extra["mirostat"] = json!(2);
    let r = s.chat(&extra);
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(s.get("/nowhere").status, 404);
    assert_eq!(s.get("/v1/chat/completions").status, 405);
    let health = s.get("/health").json();
    assert_eq!(health["status"], "ok", "{health}");
    assert_eq!(health["overridden"], json!([]), "{health}");
    let models = s.get("/v1/models").json();
    assert_eq!(models["data"][0]["id"], "tinyk3");
    let metrics = parse_prometheus(&s.get("/metrics").text());
    assert_eq!(
        metrics["tinyk3_http_responses_total{code=\"400\"}"],
        cases.len() as f64
    );
}

#[test]
fn past_the_queue_requests_get_429() {
    let m = tiny_model();
    let s = Server::start(&m, &["--queue", "0"]);
    let addr = s.addr.clone();
    // A long generation holds the single slot.
    let long = std::thread::spawn(move || {
        crate::serve_support::http(
            &addr,
            "POST",
            "/v1/chat/completions",
            Some(chat_body("long", 600).to_string().as_bytes()),
        )
    });
    let t0 = Instant::now();
    loop {
        let m = parse_prometheus(&s.get("/metrics").text());
        if m["tinyk3_requests_in_flight"] == 1.0 {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "the long request never started"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let r = s.chat(&chat_body("one more", 4));
    assert_eq!(r.status, 429, "{}", r.text());
    let e = r.json();
    assert_eq!(e["error"]["code"], "rate_limit_exceeded");
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("--queue 0")
    );
    assert_eq!(long.join().unwrap().status, 200);
    // The engine thread lets go of the slot before the client hears the
    // end, so once it has its answer the server serves again at once.
    let m = parse_prometheus(&s.get("/metrics").text());
    assert_eq!(
        m["tinyk3_requests_in_flight"] + m["tinyk3_requests_queued"],
        0.0
    );
    assert_eq!(s.chat(&chat_body("again", 4)).status, 200);
}
