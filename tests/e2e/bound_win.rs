//! Issue #16 end to end: a win large enough to be decided against the
//! bound `max_noise_floor` costs no noise floor. The real daemon on the
//! real tinyk3 stack, from a profile without speculation (each token
//! recomputes the whole sequence) where the only supported experiment is
//! `stage_speculative` (a KV cache and drafts: several times faster).

use crate::demo::Demo;

const INIT: &str = r#""--seed", "3", "--layers", "4", "--experts", "16", "--top-k", "2", "--d-model", "64", "--d-expert", "128", "--d-dense", "256", "--heads", "2", "--vocab", "512""#;

const ONLY_SPECULATION: &str =
    "[stack]\nunsupported = [\"rerank_pins\", \"deepen_warm_set\", \"rebalance_trunk_cache\"]\n";

const PROFILE: &str = "[memory]\nbudget_gb = 0.01\ntrunk_gb = 0.001\ncache_gb = 0.004\n[far]\naddr = \"FAR\"\nwarm_set = 0\n";

#[test]
fn a_big_win_is_judged_against_the_bound_and_staged_without_measuring_a_floor() {
    let _heavy = crate::common::heavy();
    let demo = Demo::new("bandit", PROFILE, INIT, 3 * 64 * 128 * 4, 8);
    // Only stage_speculative may be proposed.
    let config = demo.path("config.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    let text = text.replacen("[stack]\n", ONLY_SPECULATION, 1);
    assert!(
        text.contains("rebalance_trunk_cache\"]"),
        "the menu is narrowed"
    );
    // The shipped interference gate (contention relative to the floor's)
    // is kept: a steady load, however high, discards nothing.
    std::fs::write(&config, text).unwrap();

    // Each `run --once` is one cycle; keep what each printed.
    let mut logs: Vec<String> = Vec::new();
    let mut staged = None;
    for _ in 0..8 {
        let out = demo.cmd().args(["run", "--once"]).output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        logs.push(format!("{stdout}{}", String::from_utf8_lossy(&out.stderr)));
        if let Some(at) = stdout.find("STAGED #") {
            staged = Some(
                stdout[at + 8..]
                    .chars()
                    .take_while(char::is_ascii_digit)
                    .collect::<String>(),
            );
            break;
        }
    }
    let id = staged.unwrap_or_else(|| {
        panic!(
            "no win was staged in 8 cycles:\n{}\n{:#?}",
            logs.concat(),
            demo.ledger()
        )
    });

    // The staged win and its confirmation: the last two cycles, each one
    // A/B and no floor's A/A, both wins judged against the bound. (An
    // earlier cycle may have measured a floor: on a loaded machine the
    // bound can be left undecided.)
    let cycles = demo.ledger();
    assert!(cycles.len() >= 2, "{cycles:#?}");
    for c in &cycles[..2] {
        let vs = c["verdicts"].as_array().unwrap();
        // Where the A/B's own spread read above the bound (its premise,
        // `AbSchedule::within_the_bound`), the floor was measured in the
        // cycle and decided: said out loud, and that win is against it.
        if vs.len() == 2 && vs[0]["menu_id"] == "remeasure" {
            let v = &vs[1]["verdict"];
            assert_eq!(vs[1]["menu_id"], "stage_speculative", "{c:#}");
            assert_eq!(v["kind"], "win", "{v:#}");
            assert_eq!(v["floor_is_bound"], false, "{v:#}");
            eprintln!(
                "the bound's premise did not hold here: a floor was measured in cycle {}",
                c["cycle"]["id"]
            );
            continue;
        }
        assert_eq!(vs.len(), 1, "one verdict, no floor's A/A: {c:#}");
        assert_eq!(vs[0]["menu_id"], "stage_speculative", "{c:#}");
        let v = &vs[0]["verdict"];
        assert_eq!(v["kind"], "win", "{v:#}");
        assert_eq!(v["floor_is_bound"], true, "{v:#}");
        let reason = v["reason"].as_str().unwrap_or("");
        assert!(reason.contains("judged against the bound"), "{v:#}");
        // The bound is max_noise_floor = 0.50, as a log ratio.
        let floor = v["noise_floor"].as_f64().unwrap();
        assert!((floor - 1.5f64.ln()).abs() < 1e-9, "{v:#}");
        assert!(v["interval"]["high"].as_f64().unwrap() < -floor, "{v:#}");
    }
    assert_eq!(
        cycles[0]["verdicts"][0]["confirmation_of"],
        cycles[1]["verdicts"][0]["verdict"]["experiment_id"],
        "the second confirms the first"
    );
    for log in &logs[logs.len() - 2..] {
        assert!(
            !log.contains("measure noise floor"),
            "the win and its confirmation measured no floor:\n{log}"
        );
    }

    // `stage show` does not present the bound as a measured floor.
    let out = demo.cmd().args(["stage", "show", &id]).output().unwrap();
    let show = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{show}");
    assert!(
        show.contains("floor none measured (judged against the bound ±50.0%)"),
        "stage show presents the bound as no floor:\n{show}"
    );
    let out = demo.cmd().args(["ledger", "--check"]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    demo.assert_children_gone();
}
