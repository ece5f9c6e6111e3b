//! Start-up refusals, determinism across a restart, and graceful shutdown.

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::serve_support::{Server, bin, chat_body, http, parse_prometheus, tiny_model};

#[test]
fn non_loopback_listen_is_refused_with_exit_2() {
    let m = tiny_model();
    let out = Command::new(bin())
        .arg("serve")
        .arg(&m.model)
        .arg("--profile")
        .arg(&m.profile)
        .args(["--listen", "0.0.0.0:0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("not a loopback address") && err.contains("--allow-remote"),
        "{err}"
    );
    // A missing profile is a usage error too, naming the file.
    let out = Command::new(bin())
        .arg("serve")
        .arg(&m.model)
        .args(["--profile", "/nonexistent/p.toml"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/p.toml"));
}

#[test]
fn same_request_same_text_across_a_restart() {
    let m = tiny_model();
    let schema = json!({"type": "object", "properties": {"pick": {"type": "string", "enum": ["alpha", "beta", "gamma"]}, "n": {"type": "integer", "minimum": -20, "maximum": 300}}, "required": ["pick", "n"], "additionalProperties": false});
    let mut constrained = chat_body("choose", 64);
    constrained["response_format"] = json!({"type": "json_schema", "json_schema": {"name": "c", "schema": schema, "strict": true}});
    let mut sampled = chat_body("sample", 24);
    sampled["temperature"] = json!(0.9);
    sampled["seed"] = json!(42);
    let requests = [chat_body("determinism", 24), constrained, sampled];
    let answers = |s: &Server| -> Vec<String> {
        requests
            .iter()
            .map(|b| {
                s.chat(b).json()["choices"][0]["message"]["content"]
                    .as_str()
                    .unwrap()
                    .to_string()
            })
            .collect()
    };
    let first = answers(&Server::start(&m, &[]));
    let again = Server::start(&m, &[]);
    // The same server twice, then a fresh process: all the same text.
    assert_eq!(answers(&again), first);
    drop(again);
    assert_eq!(answers(&Server::start(&m, &[])), first);
    // A different seed is a different draw (the sampler really samples).
    let mut other = requests[2].clone();
    other["seed"] = json!(43);
    let s = Server::start(&m, &[]);
    assert_ne!(
        s.chat(&other).json()["choices"][0]["message"]["content"]
            .as_str()
            .unwrap(),
        first[2]
    );
}

#[test]
fn a_reused_prompt_prefix_gives_the_same_text_as_a_fresh_server() {
    let m = tiny_model();
    // Prompts with a long shared prefix, as the orchestrator's (instructions first).
    let system = "You choose the next experiment for a tiered MoE stack. Menu: rerank_pins, deepen_warm_set, remeasure.";
    let schema = json!({"type": "object", "properties": {"pick": {"type": "string", "enum": ["rerank_pins", "deepen_warm_set", "remeasure"]}, "n": {"type": "integer", "minimum": 0, "maximum": 512}, "why": {"type": "string", "maxLength": 12}}, "required": ["pick", "n", "why"], "additionalProperties": false});
    let body = |user: &str| {
        let mut b = chat_body(user, 60);
        b["messages"] =
            json!([{"role": "system", "content": system}, {"role": "user", "content": user}]);
        b["response_format"] = json!({"type": "json_schema", "json_schema": {"name": "c", "schema": schema, "strict": true}});
        b
    };
    let (a, b) = (
        body("heat 0.62, far tier up"),
        body("heat 0.71, far tier down"),
    );
    let text = |v: &Value| {
        v["choices"][0]["message"]["content"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let cold_a = text(&Server::start(&m, &[]).chat(&a).json());
    let cold_b = text(&Server::start(&m, &[]).chat(&b).json());
    let prompt_len =
        format!("<|system|>\n{system}\n<|user|>\nheat 0.62, far tier up\n<|assistant|>\n").len();
    let shared = format!("<|system|>\n{system}\n<|user|>\nheat 0.").len();
    let mut no_cache = a.clone();
    no_cache["cache_prompt"] = json!(false);
    let s = Server::start(&m, &[]);
    // cache_n: nothing, the shared prefix, the same, everything but the last token, nothing.
    for (req, want, cache_n) in [
        (&a, &cold_a, 0),
        (&b, &cold_b, shared),
        (&a, &cold_a, shared),
        (&a, &cold_a, prompt_len - 1),
        (&no_cache, &cold_a, 0),
    ] {
        let v = s.chat(req).json();
        assert_eq!(&text(&v), want, "{}", v["timings"]);
        let (t, u) = (&v["timings"], &v["usage"]);
        assert_eq!(t["cache_n"].as_u64(), Some(cache_n as u64), "{t}");
        assert_eq!(
            t["cache_n"].as_u64().unwrap() + t["prompt_n"].as_u64().unwrap(),
            u["prompt_tokens"].as_u64().unwrap()
        );
        assert_eq!(u["prompt_tokens_details"]["cached_tokens"], t["cache_n"]);
    }
}

#[test]
fn sigterm_finishes_the_running_generation_and_exits_0() {
    let m = tiny_model();
    let s = Server::start(&m, &[]);
    assert_eq!(s.chat(&chat_body("warm up", 4)).status, 200);
    let addr = s.addr.clone();
    let running = std::thread::spawn(move || {
        http(
            &addr,
            "POST",
            "/v1/chat/completions",
            Some(chat_body("long", 300).to_string().as_bytes()),
        )
    });
    let t0 = Instant::now();
    while parse_prometheus(&s.get("/metrics").text())["tinyk3_requests_in_flight"] != 1.0 {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "the request never started"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let stderr = s.stderr.clone();
    let status = s.terminate();
    assert_eq!(status.code(), Some(0), "{}", stderr.lock().unwrap());
    let r = running.join().unwrap();
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.json()["usage"]["completion_tokens"], 300);
    assert!(stderr.lock().unwrap().contains("shutting down"));
}

/// `/health` names the profile file the server read (the sha256 of its
/// bytes, as `sha256sum` prints it), and the knobs the command line
/// overrode, which a restart on another file or without the flag changes.
#[test]
fn health_reports_the_profile_read_and_what_the_flags_overrode() {
    let m = tiny_model();
    let sha256sum = |path: &std::path::Path| -> String {
        let out = Command::new("sha256sum").arg(path).output().unwrap();
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .next()
            .unwrap()
            .to_string()
    };
    let s = Server::start(&m, &[]);
    let health = s.get("/health").json();
    assert_eq!(health["profile_sha256"], sha256sum(&m.profile), "{health}");
    assert_eq!(health["overridden"], json!([]), "{health}");
    drop(s);

    let other = m.dir.path().join("other.toml");
    std::fs::write(
        &other,
        "# another file\n[memory]\nbudget_gb = 1\ntrunk_gb = 0.5\ncache_gb = 0.02\n",
    )
    .unwrap();
    let s = Server::start_profile(&m, &other, &["--trunk-gb", "0", "--threads", "1"]);
    let health = s.get("/health").json();
    assert_eq!(health["profile_sha256"], sha256sum(&other), "{health}");
    assert_ne!(health["profile_sha256"], sha256sum(&m.profile));
    assert_eq!(
        health["overridden"],
        json!(["memory.trunk_gb", "compute.threads"]),
        "{health}"
    );
    // An override is checked as the flag of `bench` is.
    let out = Command::new(bin())
        .arg("serve")
        .arg(&m.model)
        .arg("--profile")
        .arg(&other)
        .args(["--threads", "0", "--listen", "127.0.0.1:0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--threads"));
}
