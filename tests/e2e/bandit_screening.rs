//! The bandit's choices are screened by the planner within the cycle, as
//! the served model's answers are: the real daemon on the real tinyk3
//! stack, its menu narrowed to the trunk/cache split, from a profile whose
//! trunk is re-read every token (so the line search's favoured side is more
//! trunk, whose farthest values leave the cache fewer than top-k experts:
//! the planner refuses them). Before, each refusal was a cycle of its own
//! (`rejected`, a whole `interval_s` of wall time); now the first cycle
//! records them as refused proposals and measures the first value it can.

use crate::demo::Demo;

const INIT: &str = r#""--seed", "3", "--layers", "4", "--experts", "16", "--top-k", "2", "--d-model", "64", "--d-expert", "128", "--d-dense", "256", "--heads", "2", "--vocab", "512""#;

const ONLY_THE_SPLIT: &str =
    "[stack]\nunsupported = [\"rerank_pins\", \"deepen_warm_set\", \"stage_speculative\"]\n";

/// A small cache, a trunk mostly re-read: the split's favoured side is
/// more trunk, and `trunk_fraction = 1` leaves no cache at all.
const PROFILE: &str = "[memory]\nbudget_gb = 0.01\ntrunk_gb = 0.001\ncache_gb = 0.004\n[far]\naddr = \"FAR\"\nwarm_set = 0\n";

#[test]
fn a_choice_the_planner_refuses_does_not_cost_the_bandit_a_cycle() {
    let _heavy = crate::common::heavy();
    let demo = Demo::new("bandit", PROFILE, INIT, 3 * 64 * 128 * 4, 8);
    let config = demo.path("config.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    let narrowed = text.replacen("[stack]\n", ONLY_THE_SPLIT, 1);
    assert_ne!(narrowed, text, "the menu is narrowed");
    std::fs::write(&config, narrowed).unwrap();

    let out = demo.cmd().args(["run", "--once"]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let lines: Vec<&str> = stdout.lines().filter(|l| l.starts_with("cycle")).collect();
    assert_eq!(lines.len(), 1, "{stdout}");
    // One cycle, and it measured: an A/B of the split, not `rejected`.
    assert!(
        lines[0].contains("rebalance_trunk_cache") && !lines[0].contains("  rejected "),
        "{stdout}\n{stderr}"
    );

    let db = demo.path("ledger/orchestrator.db");
    let proposals = crate::faults::ledger::proposals(&db);
    let (last, refused) = proposals.split_last().expect("proposals recorded");
    assert!(
        !refused.is_empty(),
        "the favoured side's edge was refused first: {proposals:#?}\n{stderr}"
    );
    assert!(
        proposals.iter().all(|(cycle, _, _)| *cycle == 1),
        "all in the first cycle: {proposals:#?}"
    );
    assert!(
        refused
            .iter()
            .all(|(_, raw, kind)| raw.is_none() && kind.as_deref() == Some("not_measured")),
        "{proposals:#?}"
    );
    assert_eq!(last.2, None, "the last choice was measured: {proposals:#?}");
    let reasons = crate::faults::ledger::rejections(&db);
    assert_eq!(reasons.len(), refused.len(), "{reasons:#?}");
    assert!(
        reasons
            .iter()
            .all(|r| r.contains("rebalance_trunk_cache") && r.contains("top-k")),
        "the planner's own words, naming the cache it leaves: {reasons:#?}"
    );
    // The next cycle does not choose a refused value again: they are
    // excluded on this live profile.
    let out = demo.cmd().args(["run", "--once"]).output().unwrap();
    assert!(out.status.success());
    let again = crate::faults::ledger::proposals(&db);
    assert_eq!(
        again.iter().filter(|(_, _, k)| k.is_some()).count(),
        refused.len(),
        "no refused value is chosen again: {again:#?}"
    );
}
