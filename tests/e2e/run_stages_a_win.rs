//! Acceptance of the loop: from a deliberately slow profile (tiny cache, no
//! pins, a cold far tier, no speculation) the real daemon finds, confirms and
//! stages a win within 20 cycles, builds on it while it waits, and `stage
//! approve` applies it.

use crate::demo::Demo;
use orchestrator::ledger::{Ledger, StageId};
use orchestrator::vocab::Digest;

#[test]
fn from_a_slow_profile_the_loop_stages_a_win_and_approve_applies_it() {
    let _heavy = crate::common::heavy();
    // Big enough that tiers matter (experts of 384 KiB, cold reads from
    // disk), small enough to measure in a fraction of a second.
    let init = r#""--seed", "2", "--layers", "8", "--experts", "32", "--top-k", "4", "--d-model", "128", "--d-expert", "256", "--d-dense", "512", "--heads", "4", "--vocab", "512""#;
    // The RAM is in the wrong place: a trunk budget far above the trunk's
    // size and an expert cache of ten experts.
    let start = "[memory]\nbudget_gb = 0.05\ntrunk_gb = 0.03\ncache_gb = 0.004\n[far]\naddr = \"FAR\"\nwarm_set = 0\n";
    let demo = Demo::new("bandit", start, init, 3 * 128 * 256 * 4, 16);
    let mut staged = None;
    let mut lines = String::new();
    for _ in 0..20 {
        let out = demo.cmd().args(["run", "--once"]).output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        lines.push_str(&stdout);
        if let Some(at) = stdout.find("STAGED #") {
            let id: String = stdout[at + 8..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            staged = Some(id);
            break;
        }
    }
    let id = staged.unwrap_or_else(|| panic!("no win was staged within 20 cycles:\n{lines}"));

    // While it waits, the loop measures on top of it (`[cycle]
    // build_on_staged`, as shipped): the next experiments' base is the
    // staged candidate, not the live profile an approval replaces.
    let db = demo.path("ledger/orchestrator.db");
    let (candidate, last) = newest(&db, &id);
    let mut after_stage = Vec::new();
    for _ in 0..4 {
        demo.cmd().args(["run", "--once"]).output().unwrap();
        after_stage = newest(&db, &id)
            .1
            .into_iter()
            .filter(|(e, _)| !last.iter().any(|(l, _)| l == e))
            .collect();
        if !after_stage.is_empty() {
            break;
        }
    }
    assert!(
        !after_stage.is_empty(),
        "no experiment in 4 cycles after the stage"
    );
    assert!(
        after_stage.iter().all(|(_, base)| *base == candidate),
        "measured on the old live profile while stage {id} waits: {after_stage:?}"
    );

    let before = std::fs::read_to_string(demo.path("ledger/profiles/live.toml")).unwrap();
    let out = demo
        .cmd()
        .args(["stage", "approve", &id, "--by", "test"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let after = std::fs::read_to_string(demo.path("ledger/profiles/live.toml")).unwrap();
    assert_ne!(before, after, "the live profile was rewritten");
    assert!(after.contains(&format!("stage approve {id}")), "{after}");
    demo.assert_children_gone();
}

/// Stage `id`'s candidate digest, and every experiment's (id, base digest).
fn newest(db: &std::path::Path, id: &str) -> (Digest, Vec<(i64, Digest)>) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let ledger = Ledger::open(db).await.unwrap();
        let stage = ledger.stage(StageId(id.parse().unwrap())).await.unwrap();
        let all = ledger.recent_experiments(1000).await.unwrap();
        (
            stage.candidate_digest,
            all.into_iter()
                .map(|e| (e.experiment_id.0, e.base_digest))
                .collect(),
        )
    })
}
