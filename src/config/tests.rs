//! Tests of config loading: the default file, defaults, and every refusal.

use std::time::Duration;

use super::*;

fn default_text() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("config.toml")).unwrap()
}

fn parse(text: &str) -> Result<Config, ConfigError> {
    Config::parse(text, Path::new("/etc/orch/config.toml"))
}

fn err(text: &str) -> String {
    parse(text).expect_err("must be refused").to_string()
}

#[test]
fn the_default_config_loads() {
    let c = parse(&default_text()).unwrap();
    // The demo pins an objective tinyk3's checkpoint has to work for.
    assert_eq!(c.objective.target_seconds_per_token.get(), 0.05);
    assert_eq!(
        c.measure.run_timeout_s.duration(),
        Duration::from_secs(1800)
    );
    assert_eq!(c.ledger_path, Path::new("/etc/orch/ledger/orchestrator.db"));
    assert_eq!(
        c.stack.live_profile,
        Path::new("/etc/orch/ledger/profiles/live.toml")
    );
    assert_eq!(c.policy.confidence.get(), 0.10);
    assert_eq!(c.cycle.interval_s.duration(), Duration::from_secs(30));
    assert!(c.stack.bench.is_some() && c.stack.shadow.is_some());
}

#[test]
fn safe_defaults_fill_missing_keys() {
    let c = parse(
        "[stack]\nname = \"s\"\nlive_profile = \"p.toml\"\n[stack.bench]\nargv = [\"b\", \"{out}\"]\n\
         [cycle]\nproposer = \"bandit\"\n",
    )
    .unwrap();
    assert_eq!(c.objective.target_seconds_per_token.get(), 1.0);
    assert_eq!(c.policy.min_pairs, 2);
    assert_eq!(c.policy.floor_pairs, 20);
    assert_eq!(c.cycle.history, 8);
    assert!(c.daemon.metrics_listen.ip().is_loopback());
}

#[test]
fn an_unknown_key_gets_the_nearest_suggested_with_its_line() {
    let text = default_text().replace("interval_s = 30", "intervall_s = 30");
    let msg = err(&text);
    assert!(msg.contains("did you mean `interval_s`?"), "{msg}");
    assert!(msg.contains("config.toml:"), "{msg}");
    assert!(msg.contains("[cycle] intervall_s"), "{msg}");
}

#[test]
fn a_bad_value_names_the_key_and_the_range() {
    let msg = err(&default_text().replace("confidence = 0.10", "confidence = 1.5"));
    assert!(msg.contains("[measure] confidence"), "{msg}");
    assert!(msg.contains("strictly between 0 and 1"), "{msg}");
}

#[test]
fn a_missing_required_key_is_named() {
    let msg = err(&default_text().replace("name = \"tinyk3\"\n# The live", "# The live"));
    assert!(msg.contains("missing field `name`"), "{msg}");
}

#[test]
fn an_unknown_knob_in_the_bench_argv_is_refused() {
    let msg = err(&default_text().replace("{memory.cache_gb}", "{memory.cache_mb}"));
    assert!(msg.contains("[stack.bench] argv"), "{msg}");
    assert!(msg.contains("{memory.cache_mb}"), "{msg}");
}

#[test]
fn an_unknown_knob_in_an_optional_group_is_refused() {
    let msg = err(&default_text().replace("when = \"far.addr\"", "when = \"far.address\""));
    assert!(msg.contains("far.address"), "{msg}");
}

#[test]
fn a_pasted_api_key_is_refused_without_echoing_it() {
    let msg = err(&default_text().replace(
        "# api_key_env = \"ORCHESTRATOR_API_KEY\"",
        "api_key_env = \"sk-live-abc123secret\"",
    ));
    assert!(msg.contains("NAME of an environment variable"), "{msg}");
    assert!(!msg.contains("abc123secret"), "{msg}");
}

#[test]
fn the_secret_variables_are_the_ledger_password_and_the_model_key() {
    assert!(parse(&default_text()).unwrap().secret_vars().is_empty());
    let text = default_text()
        .replace(
            "# api_key_env = \"ORCHESTRATOR_API_KEY\"",
            "api_key_env = \"ORCHESTRATOR_API_KEY\"",
        )
        .replace(
            "path = \"ledger/orchestrator.db\"\n",
            "url = \"postgres://orch@127.0.0.1:5432/orch\"\npassword_env = \"ORCH_LEDGER_PASSWORD\"\n",
        );
    let mut vars = parse(&text).unwrap().secret_vars();
    vars.sort();
    assert_eq!(vars, ["ORCHESTRATOR_API_KEY", "ORCH_LEDGER_PASSWORD"]);
}

#[test]
fn min_pairs_above_max_pairs_is_refused() {
    assert!(default_text().contains("min_pairs = 2"));
    let msg = err(&default_text().replace("min_pairs = 2", "min_pairs = 60"));
    assert!(msg.contains("min_pairs (60)"), "{msg}");
    let msg = err(&default_text().replace("min_pairs = 2", "min_pairs = 5"));
    assert!(msg.contains("even"), "{msg}");
    // No verdict from less than one whole block: drift would not cancel.
    let msg = err(&default_text().replace("min_pairs = 2", "min_pairs = 1"));
    assert!(msg.contains("at least 2"), "{msg}");
}

#[test]
fn the_judges_machine_keys_are_checked() {
    let msg = err(&default_text().replace("floor_pairs = 20", "floor_pairs = 4"));
    assert!(
        msg.contains("floor_pairs must be between 10 and 200"),
        "{msg}"
    );
    let msg = err(&default_text().replace("max_noise_floor = 0.50", "max_noise_floor = 0.005"));
    assert!(
        msg.contains("max_noise_floor (0.005) must be above"),
        "{msg}"
    );
    for bad in ["0", "-0.5", "11", "nan"] {
        let msg = err(&default_text().replace(
            "max_contention_rise = 0.25",
            &format!("max_contention_rise = {bad}"),
        ));
        assert!(
            msg.contains("max_contention_rise must be a fraction in (0, 10]"),
            "{bad}: {msg}"
        );
    }
    assert_eq!(
        parse(&default_text()).unwrap().policy.max_contention_rise,
        Some(0.25)
    );
    let msg =
        err(&default_text().replace("floor_pressure_shift = 0.25", "floor_pressure_shift = 0"));
    assert!(
        msg.contains("floor_pressure_shift must be in (0, 1]"),
        "{msg}"
    );
}

#[test]
fn the_retired_max_pressure_is_refused_with_its_replacement_named() {
    // The old absolute PSI ceiling, as an older config.toml still says it.
    let old = default_text().replace(
        "max_contention_rise = 0.25",
        "max_contention_rise = 0.25\nmax_pressure = 0.97",
    );
    let msg = err(&old);
    assert!(msg.contains("[measure] max_pressure is retired"), "{msg}");
    assert!(msg.contains("Remove it"), "{msg}");
    assert!(msg.contains("max_contention_rise"), "{msg}");
}

#[test]
fn cache_spare_slots_defaults_to_none_and_is_bounded() {
    assert_eq!(parse(&default_text()).unwrap().stack.cache_spare_slots, 0);
    let with = |n: u32| {
        default_text().replacen(
            "[stack]\n",
            &format!("[stack]\ncache_spare_slots = {n}\n"),
            1,
        )
    };
    assert_eq!(parse(&with(1)).unwrap().stack.cache_spare_slots, 1);
    let msg = err(&with(65));
    assert!(
        msg.contains("cache_spare_slots = 65 is more than 64"),
        "{msg}"
    );
}

#[test]
fn the_class_confirm_wait_defaults_to_none_and_needs_a_class() {
    let stack = parse(&default_text()).unwrap().stack;
    assert!(stack.class_confirm_wait.is_zero());
    let with = |lines: &str| default_text().replacen("[stack]\n", &format!("[stack]\n{lines}"), 1);
    let stack = parse(&with("class = \"spark\"\nclass_confirm_wait_s = 90\n"))
        .unwrap()
        .stack;
    assert_eq!(stack.class_confirm_wait, std::time::Duration::from_secs(90));
    let msg = err(&with("class_confirm_wait_s = 90\n"));
    assert!(
        msg.contains("class_confirm_wait_s = 90 leaves wins to classmates, but the stack names no [stack] class"),
        "{msg}"
    );
}

#[test]
fn the_restart_command_is_an_optional_argv_template_of_knobs_and_the_profile() {
    assert!(parse(&default_text()).unwrap().stack.restart.is_none());
    let with = |lines: &str| default_text().replacen("[stack]\n", &format!("[stack]\n{lines}"), 1);
    let restart = parse(&with(
        "restart = [\"systemctl\", \"restart\", \"tinyk3\", \"{profile}\"]\nrestart_timeout_s = 30\n",
    ))
    .unwrap()
    .stack
    .restart
    .unwrap();
    assert_eq!(
        restart.timeout.duration(),
        std::time::Duration::from_secs(30)
    );
    assert!(
        restart
            .argv
            .uses(crate::process::template::Special::Profile)
    );
    // A shadow's port means nothing to a restart.
    let msg = err(&with("restart = [\"serve\", \"--port\", \"{port}\"]\n"));
    assert!(
        msg.contains("[stack] restart:") && msg.contains("{port}"),
        "{msg}"
    );
    assert!(err(&with("restart = []\n")).contains("[stack] restart: the command is empty"));
}

#[test]
fn a_non_loopback_metrics_address_needs_allow_remote() {
    let msg = err(&default_text().replace("127.0.0.1:9464", "0.0.0.0:9464"));
    assert!(msg.contains("not loopback"), "{msg}");
    let ok = default_text()
        .replace("127.0.0.1:9464", "0.0.0.0:9464")
        .replace("allow_remote = false", "allow_remote = true");
    assert!(parse(&ok).is_ok());
}

#[test]
fn a_bad_url_is_refused_with_an_example() {
    let msg = err(&default_text().replace("http://127.0.0.1:8181/v1", "localhost"));
    assert!(msg.contains("[model] base_url"), "{msg}");
    assert!(msg.contains("http://127.0.0.1:8080"), "{msg}");
}

#[test]
fn model_proposer_without_model_table_is_refused() {
    let msg = err("[stack]\nname = \"s\"\nlive_profile = \"p\"\n[stack.bench]\nargv = [\"b\"]\n");
    assert!(msg.contains("proposer = \"bandit\""), "{msg}");
}

#[test]
fn broken_toml_names_the_line() {
    let msg = err("[stack\nname = 1\n");
    assert!(msg.contains("config.toml:1"), "{msg}");
}

#[test]
fn an_unreadable_file_says_how_to_choose_another() {
    let e = Config::load(Path::new("/nonexistent/config.toml")).unwrap_err();
    assert!(e.to_string().contains("--config PATH"), "{e}");
}

#[test]
fn the_rationale_bound_defaults_to_400_and_is_capped() {
    let demo = parse(&default_text()).unwrap();
    assert_eq!(demo.model.rationale_max_chars, 0);
    let text = default_text().replace("rationale_max_chars = 0\n", "");
    assert_eq!(
        parse(&text).unwrap().model.rationale_max_chars,
        crate::menu::RATIONALE_MAX_CHARS
    );
    let msg = err(&default_text().replace("rationale_max_chars = 0", "rationale_max_chars = 9000"));
    assert!(msg.contains("[model] rationale_max_chars = 9000"), "{msg}");
    assert!(msg.contains("4000"), "{msg}");
}

#[test]
fn the_bandit_fallback_defaults_to_3_and_needs_at_least_1() {
    assert_eq!(
        parse(&default_text()).unwrap().model.bandit_fallback_after,
        3
    );
    let text = default_text().replace("bandit_fallback_after = 3\n", "");
    assert_ne!(text, default_text(), "config.toml documents the key");
    assert_eq!(parse(&text).unwrap().model.bandit_fallback_after, 3);
    let five = default_text().replace("bandit_fallback_after = 3", "bandit_fallback_after = 5");
    assert_eq!(parse(&five).unwrap().model.bandit_fallback_after, 5);
    let msg =
        err(&default_text().replace("bandit_fallback_after = 3", "bandit_fallback_after = 0"));
    assert!(msg.contains("[model] bandit_fallback_after = 0"), "{msg}");
    assert!(msg.contains("at least 1"), "{msg}");
    let msg =
        err(&default_text().replace("bandit_fallback_after = 3", "bandit_fallback_after = -1"));
    assert!(msg.contains("bandit_fallback_after"), "{msg}");
}

#[test]
fn an_unknown_key_is_matched_against_its_own_table_only() {
    // `interval_s` is a key of [cycle], not of [model]: no false "did you mean".
    let msg = err(&default_text().replace(
        "connect_timeout_s = 5",
        "interval_s = 3\nconnect_timeout_s = 5",
    ));
    assert!(
        msg.contains("[model] interval_s: unknown field `interval_s`"),
        "{msg}"
    );
    assert!(!msg.contains("did you mean"), "{msg}");
    assert!(msg.contains("remove it"), "{msg}");
    // A near key of the right table still wins over the same text elsewhere.
    let msg = err(&default_text().replace("when = \"far.addr\"", "wen = \"far.addr\""));
    assert!(msg.contains("[[stack.bench.optional]] wen:"), "{msg}");
    assert!(msg.contains("did you mean `when`?"), "{msg}");
}

#[test]
fn a_misspelled_table_is_named_by_its_own_header() {
    let msg = err(&default_text().replacen("[cycle]\n", "[cycel]\n", 1));
    assert!(msg.contains(": [cycel]: unknown field `cycel`"), "{msg}");
    assert!(msg.contains("did you mean `cycle`?"), "{msg}");
    let msg = err(&default_text().replacen(
        "[[stack.bench.optional]]\nwhen = \"far.addr\"",
        "[[stack.bench.optionl]]\nwhen = \"far.addr\"",
        1,
    ));
    assert!(
        msg.contains(": [[stack.bench.optionl]]: unknown field `optionl`"),
        "{msg}"
    );
    assert!(msg.contains("did you mean `optional`?"), "{msg}");
}

#[test]
fn every_key_of_the_default_file_is_suggested_for_its_typo() {
    // The hint's candidates come from serde's refusal of each table, so a
    // table whose type stops listing its keys (a `flatten`, a hand-written
    // Deserialize) would lose its hints silently; this walks every key the
    // default file sets, outside the free-form maps.
    let text = default_text();
    let mut table = String::new();
    let mut checked = 0;
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.starts_with('[') {
            table = line.to_string();
            continue;
        }
        let Some((key, _)) = line.split_once(" = ") else {
            continue;
        };
        if line.starts_with('#') || table == "[stack.metrics.names]" {
            continue;
        }
        let mut lines: Vec<&str> = text.lines().collect();
        let typo = format!("{key}x = {}", line.split_once(" = ").unwrap().1);
        lines[i] = &typo;
        let msg = err(&lines.join("\n"));
        assert!(
            msg.contains(&format!("did you mean `{key}`?")),
            "{table} {key}: {msg}"
        );
        checked += 1;
    }
    assert!(checked > 60, "only {checked} keys found in config.toml");
}

/// The default file with its `[ledger] path` line replaced by `lines`.
fn with_ledger(lines: &str) -> String {
    default_text().replace("path = \"ledger/orchestrator.db\"", lines)
}

#[test]
fn a_postgres_url_selects_the_postgres_ledger_and_path_stays_the_default() {
    let c = parse(&default_text()).unwrap();
    assert!(c.ledger_postgres.is_none(), "SQLite by default");
    let c = parse(&with_ledger(
        "url = \"postgres://orchestrator@db.lan:5432/ledger\"\npassword_env = \"ORCH_LEDGER_PASSWORD\"",
    ))
    .unwrap();
    let pg = c.ledger_postgres.expect("a PostgreSQL ledger");
    assert_eq!(pg.url(), "postgres://orchestrator@db.lan:5432/ledger");
    assert_eq!(pg.password_env(), Some("ORCH_LEDGER_PASSWORD"));
    // The local anchor of the daemon's lock stays where the file would be.
    assert_eq!(c.ledger_path, Path::new("/etc/orch/ledger/orchestrator.db"));
}

#[test]
fn a_url_carrying_a_password_is_refused_without_echoing_it() {
    for url in [
        "postgres://orchestrator:hunter2secret@db.lan/ledger",
        "postgres://orchestrator@db.lan/ledger?password=hunter2secret",
    ] {
        let msg = err(&with_ledger(&format!("url = \"{url}\"")));
        assert!(msg.contains("carries a password"), "{msg}");
        assert!(msg.contains("password_env"), "names the fix: {msg}");
        assert!(!msg.contains("hunter2secret"), "echoed the password: {msg}");
    }
}

#[test]
fn ledger_tables_that_mix_the_backends_are_refused_with_the_fix() {
    let both = err(&with_ledger(
        "path = \"ledger/orchestrator.db\"\nurl = \"postgres://o@db.lan/ledger\"",
    ));
    assert!(
        both.contains("both `path`") && both.contains("keep the one"),
        "{both}"
    );
    let capped = err(&with_ledger(
        "url = \"postgres://o@db.lan/ledger\"\nmax_size_mb = 100",
    ));
    assert!(
        capped.contains("max_size_mb") && capped.contains("not available on PostgreSQL"),
        "{capped}"
    );
    let orphan = err(&with_ledger("password_env = \"PW\""));
    assert!(orphan.contains("no `url` is set"), "{orphan}");
    let scheme = err(&with_ledger("url = \"mysql://o@db.lan/ledger\""));
    assert!(scheme.contains("must be a postgres:// URL"), "{scheme}");
    let no_db = err(&with_ledger("url = \"postgres://o@db.lan\""));
    assert!(no_db.contains("names no database"), "{no_db}");
    let bad_var = err(&with_ledger(
        "url = \"postgres://o@db.lan/ledger\"\npassword_env = \"MY PW\"",
    ));
    assert!(
        bad_var.contains("not an environment variable name"),
        "{bad_var}"
    );
}
