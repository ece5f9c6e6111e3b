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

/// How many fresh demos the scenario may take to see the bound path.
const ATTEMPTS: usize = 3;

#[test]
fn a_big_win_is_judged_against_the_bound_and_staged_without_measuring_a_floor() {
    let _heavy = crate::common::heavy();
    // A noisy moment can break the bound's premise in both the win's cycle
    // and its confirmation's: each is then judged by a floor measured for
    // it, correctly, and checked as such below, but the bound path this
    // test is for was not taken. Seen once in a full e2e run (the win's
    // cycle measured a floor, its confirmation used it). So the scenario
    // runs again on a fresh demo, loudly, at most ATTEMPTS times.
    for attempt in 1..=ATTEMPTS {
        if a_win_is_staged_and_checked() {
            return;
        }
        eprintln!(
            "attempt {attempt} of {ATTEMPTS}: neither the win nor its confirmation was judged \
             against the bound (each held against a measured floor); again on a fresh demo"
        );
    }
    panic!(
        "in {ATTEMPTS} attempts, neither the win nor its confirmation was judged against the bound"
    );
}

/// One demo to a staged win, every check made on it; `false` when neither
/// the win nor its confirmation took the bound path.
fn a_win_is_staged_and_checked() -> bool {
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

    // The staged win and its confirmation: the newest two cycles (the
    // ledger lists newest first), each one A/B of stage_speculative, a win.
    // Each A/B is judged against the bound when its own spread is within
    // the bound (its premise, `AbSchedule::within_the_bound`); where it is
    // not (a loaded machine), the floor is measured in that cycle by a
    // remeasure first, and the win must hold against that floor instead.
    // Both paths are checked for what each promises; the test asks that at
    // least one of the two cycles took the bound path, so the path this
    // test is for cannot silently stop being exercised.
    let cycles = demo.ledger();
    assert!(cycles.len() >= 2, "{cycles:#?}");
    let mut judged_against_bound = [false; 2];
    let mut ab_verdicts = Vec::new();
    for (i, c) in cycles[..2].iter().enumerate() {
        let vs = c["verdicts"].as_array().unwrap();
        let ab = vs
            .iter()
            .find(|v| v["menu_id"] == "stage_speculative")
            .unwrap_or_else(|| panic!("no stage_speculative A/B: {c:#}"));
        let v = &ab["verdict"];
        assert_eq!(v["kind"], "win", "{v:#}");
        let floor = v["noise_floor"].as_f64().unwrap();
        // The test decided on its own interval, wholly beyond the floor;
        // the one stored is the wider 90% interval over the same blocks,
        // which holds the estimate and says faster.
        let (effect, low, high) = (
            v["effect"].as_f64().unwrap(),
            v["interval"]["low"].as_f64().unwrap(),
            v["interval"]["high"].as_f64().unwrap(),
        );
        assert!(effect < -floor, "{v:#}");
        assert!(low < effect && effect < high && high < 0.0, "{v:#}");
        if v["floor_is_bound"] == true {
            assert_eq!(vs.len(), 1, "one verdict, no floor's A/A: {c:#}");
            let reason = v["reason"].as_str().unwrap_or("");
            assert!(reason.contains("judged against the bound"), "{v:#}");
            // The bound is max_noise_floor = 0.50, as a log ratio.
            assert!((floor - 1.5f64.ln()).abs() < 1e-9, "{v:#}");
            judged_against_bound[i] = true;
        } else {
            // The premise failed: a floor measured in this very cycle
            // (its A/A first), or, for the confirmation (cycles[0]), the
            // one the win's cycle measured, which is still valid.
            let measured_here = vs.len() == 2 && vs[0]["menu_id"] == "remeasure";
            let the_wins =
                i == 0 && vs.len() == 1 && cycles[1]["verdicts"][0]["menu_id"] == "remeasure";
            assert!(measured_here || the_wins, "{c:#}");
            assert!(
                floor < 1.5f64.ln(),
                "a measured floor below the bound: {v:#}"
            );
            eprintln!(
                "the bound's premise did not hold: a floor was measured in cycle {}",
                c["cycle"]["id"]
            );
        }
        ab_verdicts.push(ab.clone());
    }
    if !judged_against_bound.contains(&true) {
        eprintln!("neither cycle was judged against the bound: {cycles:#?}");
        demo.assert_children_gone();
        return false;
    }
    assert_eq!(
        ab_verdicts[0]["confirmation_of"], ab_verdicts[1]["verdict"]["experiment_id"],
        "the second confirms the first"
    );
    // logs[last] is the confirmation's cycle (cycles[0]), the one before
    // it the win's (cycles[1]).
    let n = logs.len();
    for (log, bound) in [
        (&logs[n - 1], judged_against_bound[0]),
        (&logs[n - 2], judged_against_bound[1]),
    ] {
        if bound {
            assert!(
                !log.contains("measure noise floor"),
                "a cycle judged against the bound measured no floor:\n{log}"
            );
        }
    }

    // `stage show` does not present the bound as a measured floor, nor a
    // measured floor as the bound.
    let out = demo.cmd().args(["stage", "show", &id]).output().unwrap();
    let show = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{show}");
    // Its headline floor is the confirmation's (cycles[0]); each verdict's
    // own line says how that verdict was judged.
    let headline = show
        .lines()
        .find(|l| l.starts_with("effect"))
        .unwrap_or_else(|| panic!("no effect line:\n{show}"));
    assert_eq!(
        headline.contains("floor none measured (judged against the bound ±50.0%)"),
        judged_against_bound[0],
        "stage show tells the bound from a measured floor:\n{show}"
    );
    let bound_lines = show
        .lines()
        .filter(|l| l.contains("verdict win") && l.contains("floor none measured"))
        .count();
    assert_eq!(
        bound_lines,
        judged_against_bound.iter().filter(|b| **b).count(),
        "{show}"
    );
    let out = demo.cmd().args(["ledger", "--check"]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    demo.assert_children_gone();
    true
}
