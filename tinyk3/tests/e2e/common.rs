//! Helpers shared by the end-to-end tests: tiny checkpoints, bench runs, expert servers.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_tinyk3")
}

/// Writes a tiny checkpoint (a few hundred KB) into `dir`.
pub fn init_tiny(dir: &Path, seed: u64) {
    let out = Command::new(bin())
        .args(["init", "--out"])
        .arg(dir)
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
        ])
        .arg(seed.to_string())
        .output()
        .expect("run tinyk3 init");
    assert!(
        out.status.success(),
        "init failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A tiny model in a fresh temp dir.
pub fn tiny_model() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let model = dir.path().join("model");
    init_tiny(&model, 7);
    (dir, model)
}

/// Runs `tinyk3 <args>`.
pub fn run(args: &[&str]) -> Output {
    Command::new(bin()).args(args).output().expect("run tinyk3")
}

/// Runs a bench that must succeed and returns its JSON report.
pub fn bench_ok(model: &Path, extra: &[&str]) -> serde_json::Value {
    let mut args = vec![
        "bench",
        model.to_str().unwrap(),
        "--ids",
        "5,17,99,3",
        "--gen",
        "12",
    ];
    args.extend_from_slice(extra);
    let out = run(&args);
    assert!(
        out.status.success(),
        "bench {extra:?} exited {:?}: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("bench prints JSON")
}

/// An expert server child, killed when dropped.
pub struct Server {
    pub child: Child,
    pub addr: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `tinyk3 expert-server` on a free loopback port.
pub fn start_server(model: &Path, warm_set: usize, extra: &[&str]) -> Server {
    let mut child = Command::new(bin())
        .args(["expert-server", "--model"])
        .arg(model)
        .args([
            "--listen",
            "127.0.0.1:0",
            "--warm-set",
            &warm_set.to_string(),
        ])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn expert-server");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .trim()
        .strip_prefix("listening on ")
        .expect("server announces its address")
        .to_string();
    Server { child, addr }
}
