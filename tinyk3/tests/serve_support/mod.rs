//! Shared by the `serve_*` tests: a tiny checkpoint, a real `tinyk3 serve`
//! process on a free loopback port, a minimal HTTP/1.1 client, an SSE splitter,
//! a strict Prometheus text parser and an independent JSON Schema checker.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_tinyk3")
}

/// A tiny model (a few hundred KB) and a profile for it, in a fresh temp dir.
pub struct Model {
    pub dir: tempfile::TempDir,
    pub model: PathBuf,
    pub profile: PathBuf,
}

pub fn tiny_model() -> Model {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("model");
    let out = Command::new(bin())
        .args(["init", "--out"])
        .arg(&model)
        .args([
            "--layers",
            "4",
            "--experts",
            "8",
            "--top-k",
            "2",
            "--d-model",
            "32",
            "--d-expert",
            "64",
            "--d-dense",
            "64",
            "--heads",
            "2",
            "--vocab",
            "256",
            "--seed",
            "7",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "init: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let profile = dir.path().join("profile.toml");
    std::fs::write(
        &profile,
        "[memory]\nbudget_gb = 1\ntrunk_gb = 0.5\ncache_gb = 0.01\n",
    )
    .unwrap();
    Model {
        dir,
        model,
        profile,
    }
}

/// A running `tinyk3 serve`, killed when dropped.
pub struct Server {
    pub child: Child,
    pub addr: String,
    pub stderr: Arc<Mutex<String>>,
}

impl Server {
    /// Starts the server on a free loopback port and waits for its "listening on" line.
    pub fn start(m: &Model, extra: &[&str]) -> Server {
        Server::start_profile(m, &m.profile, extra)
    }

    /// [`Server::start`] under another profile.
    pub fn start_profile(m: &Model, profile: &std::path::Path, extra: &[&str]) -> Server {
        let mut child = Command::new(bin())
            .arg("serve")
            .arg(&m.model)
            .arg("--profile")
            .arg(profile)
            .args(["--listen", "127.0.0.1:0"])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stderr.take().unwrap());
        let mut addr = None;
        let stderr = Arc::new(Mutex::new(String::new()));
        let mut line = String::new();
        while lines.read_line(&mut line).unwrap() > 0 {
            stderr.lock().unwrap().push_str(&line);
            if let Some(a) = line.trim().strip_prefix("listening on http://") {
                addr = Some(a.to_string());
                break;
            }
            line.clear();
        }
        let addr =
            addr.unwrap_or_else(|| panic!("server did not start: {}", stderr.lock().unwrap()));
        let sink = stderr.clone();
        std::thread::spawn(move || {
            let mut rest = String::new();
            let _ = lines.read_to_string(&mut rest);
            sink.lock().unwrap().push_str(&rest);
        });
        Server {
            child,
            addr,
            stderr,
        }
    }

    pub fn get(&self, path: &str) -> Reply {
        http(&self.addr, "GET", path, None)
    }

    pub fn post(&self, path: &str, body: &[u8]) -> Reply {
        http(&self.addr, "POST", path, Some(body))
    }

    pub fn chat(&self, body: &Value) -> Reply {
        self.post("/v1/chat/completions", body.to_string().as_bytes())
    }

    /// Sends SIGTERM and waits for the exit.
    pub fn terminate(mut self) -> ExitStatus {
        let pid = self.child.id().to_string();
        assert!(
            Command::new("kill")
                .args(["-TERM", &pid])
                .status()
                .unwrap()
                .success()
        );
        let t0 = Instant::now();
        loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                return s;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "no exit after SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An HTTP response.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Reply {
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", self.text()))
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The `data:` payloads of a server-sent-event body.
    pub fn events(&self) -> Vec<String> {
        self.text()
            .split("\n\n")
            .filter(|e| !e.is_empty())
            .map(|e| {
                e.strip_prefix("data: ")
                    .unwrap_or_else(|| panic!("not an SSE data event: {e:?}"))
                    .to_string()
            })
            .collect()
    }
}

/// One HTTP/1.1 request on its own connection (`Connection: close`).
pub fn http(addr: &str, method: &str, path: &str, body: Option<&[u8]>) -> Reply {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let body = body.unwrap_or(b"");
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    s.write_all(head.as_bytes()).unwrap();
    s.write_all(body).unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a header block");
    let head = String::from_utf8(raw[..split].to_vec()).unwrap();
    let mut lines = head.split("\r\n");
    let status: u16 = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers: Vec<(String, String)> = lines
        .map(|l| {
            let (k, v) = l.split_once(':').unwrap();
            (k.trim().to_string(), v.trim().to_string())
        })
        .collect();
    let mut body = raw[split + 4..].to_vec();
    let chunked = headers
        .iter()
        .any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"));
    if chunked {
        body = dechunk(&body);
    }
    Reply {
        status,
        headers,
        body,
    }
}

fn dechunk(mut raw: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let eol = raw
            .windows(2)
            .position(|w| w == b"\r\n")
            .expect("a chunk size line");
        let size =
            usize::from_str_radix(std::str::from_utf8(&raw[..eol]).unwrap().trim(), 16).unwrap();
        raw = &raw[eol + 2..];
        if size == 0 {
            return out;
        }
        out.extend_from_slice(&raw[..size]);
        raw = &raw[size + 2..];
    }
}

/// A greedy chat request.
pub fn chat_body(content: &str, max_tokens: u64) -> Value {
    serde_json::json!({"model": "tinyk3", "messages": [{"role": "user", "content": content}], "max_tokens": max_tokens, "temperature": 0})
}

/// Parses Prometheus text exposition strictly: every sample's metric has a
/// TYPE line before it, names and labels are well formed, values are floats.
/// Returns `name{labels}` → value.
pub fn parse_prometheus(text: &str) -> BTreeMap<String, f64> {
    let mut types: BTreeMap<String, String> = BTreeMap::new();
    let mut samples = BTreeMap::new();
    let name_ok = |n: &str| {
        !n.is_empty()
            && n.chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
            && n.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
    };
    for line in text.lines() {
        if line.is_empty() {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# ") {
            let mut parts = rest.splitn(3, ' ');
            match (parts.next(), parts.next(), parts.next()) {
                (Some("HELP"), Some(n), Some(_)) => assert!(name_ok(n), "bad HELP line {line:?}"),
                (Some("TYPE"), Some(n), Some(t)) => {
                    assert!(
                        name_ok(n)
                            && ["counter", "gauge", "histogram", "summary", "untyped"].contains(&t),
                        "bad TYPE line {line:?}"
                    );
                    assert!(
                        types.insert(n.to_string(), t.to_string()).is_none(),
                        "TYPE twice for {n}"
                    );
                }
                _ => panic!("bad comment line {line:?}"),
            }
            continue;
        }
        let (series, value) = line
            .rsplit_once(' ')
            .unwrap_or_else(|| panic!("no value in {line:?}"));
        let name = series.split('{').next().unwrap();
        assert!(name_ok(name), "bad metric name in {line:?}");
        assert!(types.contains_key(name), "sample before its TYPE: {line:?}");
        if let Some(labels) = series.strip_prefix(name).filter(|l| !l.is_empty()) {
            let inner = labels
                .strip_prefix('{')
                .and_then(|l| l.strip_suffix('}'))
                .unwrap_or_else(|| panic!("bad labels {line:?}"));
            for pair in inner.split(',') {
                let (k, v) = pair
                    .split_once('=')
                    .unwrap_or_else(|| panic!("bad label {pair:?}"));
                assert!(
                    name_ok(k) && v.len() >= 2 && v.starts_with('"') && v.ends_with('"'),
                    "bad label {pair:?}"
                );
            }
        }
        let v: f64 = match value {
            "NaN" => f64::NAN,
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            v => v
                .parse()
                .unwrap_or_else(|_| panic!("bad value in {line:?}")),
        };
        assert!(
            samples.insert(series.to_string(), v).is_none(),
            "duplicate series {series}"
        );
    }
    samples
}

/// Checks `v` against `schema` (the subset the server supports), naming the first violation.
pub fn validate(schema: &Value, v: &Value, at: &str) -> Result<(), String> {
    let s = schema
        .as_object()
        .ok_or(format!("{at}: schema is not an object"))?;
    if let Some(alts) = s.get("anyOf") {
        let alts = alts.as_array().unwrap();
        return if alts.iter().any(|a| validate(a, v, at).is_ok()) {
            Ok(())
        } else {
            Err(format!("{at}: {v} matches no anyOf alternative"))
        };
    }
    if let Some(e) = s.get("enum") {
        if !e.as_array().unwrap().contains(v) {
            return Err(format!("{at}: {v} not in enum {e}"));
        }
    }
    if let Some(c) = s.get("const") {
        if c != v {
            return Err(format!("{at}: {v} is not const {c}"));
        }
    }
    let num = |k: &str| s.get(k).and_then(Value::as_f64);
    match s.get("type").and_then(Value::as_str) {
        None => {}
        Some("object") => {
            let o = v.as_object().ok_or(format!("{at}: {v} is not an object"))?;
            let props = s.get("properties").and_then(Value::as_object);
            for r in s
                .get("required")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if !o.contains_key(r.as_str().unwrap()) {
                    return Err(format!("{at}: missing required {r}"));
                }
            }
            for (k, val) in o {
                match props.and_then(|p| p.get(k)) {
                    Some(ps) => validate(ps, val, &format!("{at}/{k}"))?,
                    None if s.get("additionalProperties") == Some(&Value::Bool(false)) => {
                        return Err(format!("{at}: extra property {k}"));
                    }
                    None => {}
                }
            }
        }
        Some("string") => {
            let t = v.as_str().ok_or(format!("{at}: {v} is not a string"))?;
            let n = t.chars().count() as f64;
            if num("maxLength").is_some_and(|m| n > m) || num("minLength").is_some_and(|m| n < m) {
                return Err(format!("{at}: string length {n} out of bounds"));
            }
        }
        Some(t @ ("integer" | "number")) => {
            if t == "integer" && !(v.is_i64() || v.is_u64()) {
                return Err(format!("{at}: {v} is not an integer"));
            }
            let x = v.as_f64().ok_or(format!("{at}: {v} is not a number"))?;
            if num("minimum").is_some_and(|m| x < m)
                || num("maximum").is_some_and(|m| x > m)
                || num("exclusiveMinimum").is_some_and(|m| x <= m)
                || num("exclusiveMaximum").is_some_and(|m| x >= m)
            {
                return Err(format!("{at}: {x} out of bounds"));
            }
        }
        Some("boolean") => {
            v.as_bool().ok_or(format!("{at}: {v} is not a boolean"))?;
        }
        Some("null") if !v.is_null() => return Err(format!("{at}: {v} is not null")),
        Some("null") => {}
        Some("array") => {
            let a = v.as_array().ok_or(format!("{at}: {v} is not an array"))?;
            if num("maxItems").is_some_and(|m| a.len() as f64 > m)
                || num("minItems").is_some_and(|m| (a.len() as f64) < m)
            {
                return Err(format!("{at}: {} items out of bounds", a.len()));
            }
            if let Some(items) = s.get("items") {
                for (i, x) in a.iter().enumerate() {
                    validate(items, x, &format!("{at}/{i}"))?;
                }
            }
        }
        Some(other) => return Err(format!("{at}: checker does not know type {other}")),
    }
    Ok(())
}
