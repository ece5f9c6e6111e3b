//! `FaultyHttpServer`: a test double, a real HTTP/1.1 server on loopback
//! that stands in for the served model (`/v1/chat/completions`) or the
//! stack's metrics endpoint, answering from a script the test feeds: good
//! answers, HTTP errors, non-JSON, slow answers, or no listener at all.

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// One scripted answer.
#[derive(Debug, Clone)]
pub enum Reply {
    /// 200 with this body and content type.
    Body(&'static str, String),
    /// 200 with an OpenAI chat completion whose message content is this.
    Chat(String),
    /// This status with this body.
    Status(u16, String),
    /// The answer after a pause.
    Slow(Duration, Box<Reply>),
}

/// One request received: its request line and headers (what the tests
/// check; the body is read to its end and dropped).
#[derive(Debug, Clone)]
pub struct Received {
    pub head: String,
}

type Fallback = Box<dyn FnMut(&Received) -> Reply + Send>;

struct Shared {
    script: Mutex<VecDeque<Reply>>,
    fallback: Mutex<Fallback>,
    received: Mutex<Vec<Received>>,
    down: AtomicBool,
    stop: AtomicBool,
}

pub struct FaultyHttpServer {
    pub port: u16,
    shared: Arc<Shared>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl FaultyHttpServer {
    /// Starts on a free loopback port; when the script is empty, answers
    /// with `fallback`.
    pub fn start(fallback: impl FnMut(&Received) -> Reply + Send + 'static) -> FaultyHttpServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let shared = Arc::new(Shared {
            script: Mutex::new(VecDeque::new()),
            fallback: Mutex::new(Box::new(fallback)),
            received: Mutex::new(Vec::new()),
            down: AtomicBool::new(false),
            stop: AtomicBool::new(false),
        });
        let s = Arc::clone(&shared);
        let thread = std::thread::spawn(move || serve(listener, port, &s));
        FaultyHttpServer {
            port,
            shared,
            thread: Some(thread),
        }
    }

    /// Queues answers for the next requests.
    pub fn script(&self, replies: impl IntoIterator<Item = Reply>) {
        self.shared.script.lock().unwrap().extend(replies);
    }

    pub fn script_is_empty(&self) -> bool {
        self.shared.script.lock().unwrap().is_empty()
    }

    /// Down: nothing listens on the port (connections are refused).
    pub fn set_down(&self, down: bool) {
        self.shared.down.store(down, Ordering::SeqCst);
        // Give the accept loop time to close or reopen the listener.
        std::thread::sleep(Duration::from_millis(150));
    }

    pub fn received(&self) -> Vec<Received> {
        self.shared.received.lock().unwrap().clone()
    }
}

impl Drop for FaultyHttpServer {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn serve(listener: TcpListener, port: u16, s: &Arc<Shared>) {
    let mut listener = Some(listener);
    while !s.stop.load(Ordering::SeqCst) {
        if s.down.load(Ordering::SeqCst) {
            listener = None;
            std::thread::sleep(Duration::from_millis(20));
            continue;
        }
        let l = listener.get_or_insert_with(|| {
            loop {
                match TcpListener::bind(("127.0.0.1", port)) {
                    Ok(l) => break l,
                    Err(_) => std::thread::sleep(Duration::from_millis(20)),
                }
            }
        });
        l.set_nonblocking(true).unwrap();
        match l.accept() {
            Ok((stream, _)) => {
                let s = Arc::clone(s);
                std::thread::spawn(move || handle(stream, &s));
            }
            Err(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
}

fn handle(mut stream: TcpStream, s: &Shared) {
    stream.set_nonblocking(false).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut buf = Vec::new();
    let mut chunk = [0u8; 8192];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let len: usize = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse().ok())?
        })
        .unwrap_or(0);
    while buf.len() < head_end + len {
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    let received = Received { head };
    let next = s.script.lock().unwrap().pop_front();
    let reply = next.unwrap_or_else(|| (s.fallback.lock().unwrap())(&received));
    s.received.lock().unwrap().push(received);
    respond(&mut stream, reply);
}

fn respond(stream: &mut TcpStream, reply: Reply) {
    let (status, ctype, body) = match reply {
        Reply::Slow(pause, then) => {
            std::thread::sleep(pause);
            return respond(stream, *then);
        }
        Reply::Body(ctype, body) => (200, ctype, body),
        Reply::Chat(content) => (
            200,
            "application/json",
            serde_json::json!({
                "id": "chatcmpl-faulty",
                "object": "chat.completion",
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": content}}],
            })
            .to_string(),
        ),
        Reply::Status(code, body) => (code, "text/plain", body),
    };
    let text = format!(
        "HTTP/1.1 {status} X\r\ncontent-type: {ctype}\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(text.as_bytes());
}
