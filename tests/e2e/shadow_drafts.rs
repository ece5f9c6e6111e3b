//! A speculative candidate measured on a shadow must show that it drafted
//! (`[stack.shadow] require_drafts`), against real `tinyk3 serve` shadows,
//! which report `timings.draft_n` and `tinyk3_draft_proposed_total` the way
//! llama-server reports `timings.draft_n` and its `spec_decode` counters.
//! The llama-server tier (tests/llama_server.rs) checks the same on llama.cpp.

use std::path::Path;

use crate::common::{alive, tiny_model, tinyk3_bin};
use orchestrator::config::Config;
use orchestrator::measure::scorer::{MeasureError, Scorer};
use orchestrator::measure::shadow::ShadowScorer;
use orchestrator::measure::surface::drafted_tokens;
use orchestrator::process::cancel::Cancel;
use orchestrator::profile::{Profile, ProfileFile};

const TINY: &str =
    "[memory]\nbudget_gb = 0.01\ntrunk_gb = 0.002\ncache_gb = 0.002\n[compute]\nthreads = 1\n";

/// A shadow of `tinyk3 serve`; `pass_profile` false starts it with a fixed
/// profile that does not speculate instead of the candidate's (a draft that
/// never reached the server).
fn shadow(
    dir: &Path,
    model: &Path,
    pass_profile: bool,
    drafted_series: Option<&str>,
) -> ShadowScorer {
    let profile_args = if pass_profile {
        r#""--profile", "{profile}","#.to_string()
    } else {
        let plain = dir.join("plain.toml");
        std::fs::write(&plain, TINY).unwrap();
        format!(r#""--profile", {:?},"#, plain.display().to_string())
    };
    let series = drafted_series
        .map(|s| format!("drafted_series = {s:?}"))
        .unwrap_or_default();
    let text = format!(
        r#"
[stack]
name = "tinyk3-shadow"
live_profile = "live.toml"
[stack.surface]
base_url = "http://127.0.0.1:1"
prompts = ["tiers"]
max_tokens = 8
[stack.shadow]
argv = [{bin:?}, "serve", {model:?}, {profile_args} "--listen", "127.0.0.1:{{port}}"]
require_drafts = true
{series}
[cycle]
proposer = "bandit"
[measure]
memory_headroom_gb = 0.1
run_timeout_s = 120
"#,
        bin = tinyk3_bin().display().to_string(),
        model = model.display().to_string(),
    );
    let path = dir.join("config.toml");
    std::fs::write(&path, &text).unwrap();
    let config = Config::load(&path).unwrap_or_else(|e| panic!("{e}\n{text}"));
    ShadowScorer::from_config(&config).unwrap()
}

fn candidate(dir: &Path, draft_len: u64) -> ProfileFile {
    let mut p = Profile::parse(TINY, Path::new("c")).unwrap();
    p.speculative.draft_len = draft_len;
    ProfileFile::write(&dir.join(format!("c{draft_len}.toml")), p).unwrap()
}

#[tokio::test]
async fn a_shadow_that_speculates_passes_and_one_that_drafts_nothing_fails() {
    let _heavy = crate::common::heavy_async().await;
    let (tmp, model) = tiny_model(21);
    let spec = candidate(tmp.path(), 2);

    let ok = shadow(
        tmp.path(),
        &model,
        true,
        Some("tinyk3_draft_proposed_total"),
    )
    .score(&spec, &Cancel::never())
    .await
    .unwrap_or_else(|f| panic!("{f}\n{}", f.stderr_tail));
    assert!(drafted_tokens(&ok.extras) > 0, "{:?}", ok.extras);

    let s = shadow(
        tmp.path(),
        &model,
        false,
        Some("tinyk3_draft_proposed_total"),
    );
    let f = s.score(&spec, &Cancel::never()).await.unwrap_err();
    assert!(
        matches!(f.error, MeasureError::NoDrafts { draft_len: 2, .. }),
        "{f}"
    );
    let msg = f.to_string();
    assert!(msg.contains("timings.draft_n is absent or 0"), "{msg}");
    assert!(
        msg.contains("tinyk3_draft_proposed_total is still 0"),
        "{msg}"
    );
    assert!(msg.contains("plain server"), "{msg}");

    // Without a counter the answers' timings alone decide.
    let f = shadow(tmp.path(), &model, false, None)
        .score(&spec, &Cancel::never())
        .await
        .unwrap_err();
    assert!(matches!(f.error, MeasureError::NoDrafts { .. }), "{f}");

    // A candidate that does not speculate needs no drafts.
    s.score(&candidate(tmp.path(), 0), &Cancel::never())
        .await
        .unwrap();
}

/// Found on llama-server, where a model load per run cost more than the
/// run: a shadow now serves every run of its profile within one A/B, is
/// restarted only when it died, and is stopped when the A/B finishes. Each
/// run must still show its own drafts (the counter must rise, not merely be
/// above 0 from an earlier run), and its drafting evidence is stored as the
/// run's draft acceptance.
#[tokio::test]
async fn one_shadow_serves_every_run_of_its_profile_until_the_ab_finishes() {
    let _heavy = crate::common::heavy_async().await;
    let (tmp, model) = tiny_model(22);
    let spec = candidate(tmp.path(), 2);
    let s = shadow(
        tmp.path(),
        &model,
        true,
        Some("tinyk3_draft_proposed_total"),
    )
    .for_one_ab();
    let first = s.score(&spec, &Cancel::never()).await.unwrap();
    let pids = s.pool.pids().await;
    assert_eq!(pids.len(), 1, "one shadow for one profile");
    let acceptance = first
        .parts
        .draft_acceptance
        .expect("drafting evidence stored");
    assert!((0.0..=1.0).contains(&acceptance), "{acceptance}");
    let second = s
        .score(&spec, &Cancel::never())
        .await
        .unwrap_or_else(|f| panic!("the reused shadow's run must show its own drafts: {f}"));
    assert_eq!(
        s.pool.pids().await,
        pids,
        "the same shadow served the second run"
    );
    assert!(drafted_tokens(&second.extras) > 0);

    // A shadow that died is replaced, not measured.
    // SAFETY: kill(2) on a process group this test's scorer started.
    unsafe { libc::kill(-pids[0], libc::SIGKILL) };
    for _ in 0..100 {
        if !alive(pids[0]) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    s.score(&spec, &Cancel::never()).await.unwrap();
    let restarted = s.pool.pids().await;
    assert_eq!(restarted.len(), 1);
    assert_ne!(restarted, pids, "a fresh shadow after the first died");

    // Another profile gets its own; finishing stops both.
    let plain = candidate(tmp.path(), 0);
    s.score(&plain, &Cancel::never()).await.unwrap();
    let all = s.pool.pids().await;
    assert_eq!(all.len(), 2);
    s.finish().await;
    assert!(s.pool.pids().await.is_empty());
    for pid in all {
        assert!(!alive(pid), "shadow {pid} outlived its A/B");
    }
}
