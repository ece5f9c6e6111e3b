//! A real live server and real users of it: a `tinyk3 serve` child on a
//! free loopback port, and clients sending it chat requests over plain
//! HTTP/1.1 from their own threads.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use crate::common;

/// A `tinyk3 serve` child, killed and reaped when dropped.
pub struct Serve {
    child: Child,
    /// `127.0.0.1:PORT`.
    pub addr: String,
}

impl Serve {
    pub fn start(model: &Path, profile: &Path) -> Serve {
        let mut child = Command::new(common::tinyk3_bin())
            .arg("serve")
            .arg(model)
            .arg("--profile")
            .arg(profile)
            .args(["--listen", "127.0.0.1:0"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn tinyk3 serve");
        let mut lines = BufReader::new(child.stderr.take().unwrap());
        let mut seen = String::new();
        let mut line = String::new();
        let addr = loop {
            line.clear();
            if lines.read_line(&mut line).unwrap() == 0 {
                let _ = child.kill();
                let _ = child.wait();
                panic!("tinyk3 serve did not start: {seen}");
            }
            seen.push_str(&line);
            if let Some(a) = line.trim().strip_prefix("listening on http://") {
                break a.to_string();
            }
        };
        // Keep draining stderr so the server never blocks on a full pipe.
        std::thread::spawn(move || {
            let _ = lines.read_to_string(&mut String::new());
        });
        Serve { child, addr }
    }
}

/// One unlabelled metric of the server at `addr`.
pub fn metric(addr: &str, name: &str) -> f64 {
    let (_, body) = http(addr, "GET", "/metrics", "");
    body.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("{name} not in /metrics:\n{body}"))
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One HTTP/1.1 request on a fresh connection: the status and the body.
pub fn http(addr: &str, method: &str, path: &str, body: &str) -> (u16, String) {
    let mut sock = std::net::TcpStream::connect(addr).expect("connect to the live server");
    sock.set_read_timeout(Some(Duration::from_secs(120)))
        .unwrap();
    write!(
        sock,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut raw = Vec::new();
    sock.read_to_end(&mut raw).unwrap();
    let text = String::from_utf8_lossy(&raw).to_string();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}

/// A user's chat request of `max_tokens` tokens; its HTTP status.
pub fn chat(addr: &str, max_tokens: u32) -> u16 {
    let body = format!(
        r#"{{"messages":[{{"role":"user","content":"a live user's question"}}],"max_tokens":{max_tokens}}}"#
    );
    http(addr, "POST", "/v1/chat/completions", &body).0
}

/// A user who keeps the live server busy: requests back to back from a
/// thread of its own until dropped.
pub struct BusyUser {
    stop: Arc<AtomicBool>,
    /// Requests answered 200.
    pub served: Arc<AtomicUsize>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl BusyUser {
    pub fn start(addr: &str, max_tokens: u32) -> BusyUser {
        let stop = Arc::new(AtomicBool::new(false));
        let served = Arc::new(AtomicUsize::new(0));
        let (s, n, addr) = (stop.clone(), served.clone(), addr.to_string());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::SeqCst) {
                if chat(&addr, max_tokens) == 200 {
                    n.fetch_add(1, Ordering::SeqCst);
                }
            }
        });
        BusyUser {
            stop,
            served,
            thread: Some(thread),
        }
    }
}

impl Drop for BusyUser {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
