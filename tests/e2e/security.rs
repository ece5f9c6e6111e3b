//! Security: the served model's strings reach no argv, no path and no SQL
//! (only validated enum values and bounded numbers travel on; the raw answer
//! round-trips verbatim into its one column); the API key from the
//! environment reaches no ledger, log or report; the orchestrator's metrics
//! endpoint and `tinyk3 serve` bind loopback unless told otherwise.
//!
//! The served model is `FaultyHttpServer`, a test double answering hostile
//! text; everything else is the real daemon, the real tinyk3 stack, the
//! real SQLite ledger.

use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use crate::common;
use crate::demo::Demo;
use crate::faults::server::{FaultyHttpServer, Reply};
use crate::faults::*;

/// In every hostile answer: found anywhere but the raw-answer column, a
/// string of the model went somewhere it must not.
const MARKER: &str = "HOSTILE-7e1d";
const KEY_VAR: &str = "ORCHESTRATOR_API_KEY";

fn hostile_answers() -> Vec<String> {
    let m = MARKER;
    vec![
        // An id that is a shell command and a path.
        format!(
            r#"{{"experiment":"{m}; rm -rf / #../../etc/passwd","params":{{}},"rationale":"x"}}"#
        ),
        // SQL in a parameter that must be a number.
        format!(
            r#"{{"experiment":"rebalance_trunk_cache","params":{{"trunk_fraction":"0.5'); DROP TABLE cycles; -- {m}"}},"rationale":"x"}}"#
        ),
        // A path and an argv flag in an extra parameter.
        format!(
            r#"{{"experiment":"rebalance_trunk_cache","params":{{"trunk_fraction":0.4,"pins.file":"../../{m}","--out":"/tmp/{m}"}},"rationale":"x"}}"#
        ),
        // A valid choice whose rationale is instructions, quotes and $(...).
        format!(
            r#"{{"experiment":"rebalance_trunk_cache","params":{{"trunk_fraction":0.45}},"rationale":"{m} \"; DROP TABLE proposals; -- $(touch /tmp/{m}) `id` ../../{m} --out /tmp/{m}"}}"#
        ),
    ]
}

fn good_answer(n: u32) -> String {
    format!(r#"{{"experiment":"remeasure","params":{{}},"rationale":"refresh {n}"}}"#)
}

/// Every file under `dir`: (path, bytes).
fn files(dir: &Path) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            let ft = e.file_type().unwrap();
            if ft.is_dir() {
                stack.push(p);
            } else if ft.is_file() {
                out.push((p.clone(), std::fs::read(&p).unwrap_or_default()));
            }
        }
    }
    out
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// Local addresses of the listening TCP sockets on `port` (from /proc/net).
fn listening_on(port: u16) -> Vec<String> {
    let mut out = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let text = std::fs::read_to_string(table).unwrap_or_default();
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 4 || f[3] != "0A" {
                continue;
            }
            let (addr, p) = f[1].split_once(':').unwrap();
            if u16::from_str_radix(p, 16).unwrap() == port {
                out.push(addr.to_string());
            }
        }
    }
    out
}

#[test]
fn model_strings_reach_no_argv_path_or_sql_and_the_key_no_record() {
    let _heavy = crate::common::heavy();
    let t0 = Instant::now();
    let key = format!(
        "sk-secret-{}-{}",
        std::process::id(),
        t0.elapsed().as_nanos() ^ 0x5eed
    );
    let counter = AtomicU32::new(0);
    let model = FaultyHttpServer::start(move |_| {
        Reply::Chat(good_answer(counter.fetch_add(1, Ordering::SeqCst)))
    });
    let demo = Demo::new("model", TINY_START, TINY_INIT, TINY_EXPERT_BYTES, 4);
    wrap_bench(&demo);
    use_model_double(&demo, model.port);
    // The model's good answer is a remeasure: a floor stale by the next
    // cycle keeps it offered, so each such cycle is measured, and an A/A
    // through the bench is offered from the first cycle (departs from the
    // shipped menu, whose remeasure measures the live server).
    bench_remeasure_menu(&demo);
    edit_config(&demo, |t| {
        t.replace(
            "# api_key_env = \"ORCHESTRATOR_API_KEY\"",
            &format!("api_key_env = {KEY_VAR:?}"),
        )
        .replace(
            "noise_floor_max_age_s = 86400",
            "noise_floor_max_age_s = 0.001",
        )
    });
    let answers = hostile_answers();
    script_hostile_answers(&model, &key, &answers);
    let mut daemon = Daemon::start(&demo, &["--cycles", "100"], &[(KEY_VAR, key.as_str())]);
    let minute = Duration::from_secs(60);

    let hit = wait_past_the_hostile_rationale(&demo, &mut daemon, &answers[3]);
    assert_listening_on_loopback_only(&demo);
    daemon.stop(minute);

    assert_model_strings_stayed_in_the_raw_answer(&demo, &daemon, &answers, &hit);
    assert_the_key_reached_no_record(&demo, &model, &key);
    eprintln!("security: {:.1}s", t0.elapsed().as_secs_f64());
}

/// The first model cycle: a server error quoting the key back, then two
/// hostile answers (all refused). The second: an extra-parameter answer,
/// then the valid one with the hostile rationale.
fn script_hostile_answers(model: &FaultyHttpServer, key: &str, answers: &[String]) {
    model.script([
        Reply::Status(
            500,
            format!("upstream said: Authorization: Bearer {key} is invalid"),
        ),
        Reply::Chat(answers[0].clone()),
        Reply::Chat(answers[1].clone()),
        Reply::Chat(answers[2].clone()),
        Reply::Chat(answers[3].clone()),
    ]);
}

/// Waits until the valid hostile answer's cycle and the one after it
/// closed; returns the hostile answer's cycle.
fn wait_past_the_hostile_rationale(
    demo: &Demo,
    daemon: &mut Daemon,
    last_hostile: &str,
) -> serde_json::Value {
    let db = demo.path("ledger/orchestrator.db");
    let minute = Duration::from_secs(60);
    let hit = wait_for(
        4 * minute,
        "the cycle of the hostile rationale",
        daemon,
        || {
            let cycle = ledger::proposals(&db)
                .into_iter()
                .find(|(_, raw, _)| raw.as_deref() == Some(last_hostile))?
                .0;
            closed_after(demo, cycle - 1)
                .into_iter()
                .find(|c| c["cycle"]["id"] == cycle)
        },
    );
    let hit_id = hit["cycle"]["id"].as_i64().unwrap();
    // The loop goes on asking the model: a later cycle's proposal, once that
    // cycle closed. Not simply the next cycle, which confirms instead when
    // the hostile answer's A/B happened to say `win`.
    wait_for(4 * minute, "a model proposal after it", daemon, || {
        let later = ledger::proposals(&db)
            .into_iter()
            .find(|(cycle, _, _)| *cycle > hit_id)?
            .0;
        closed_after(demo, later - 1)
            .into_iter()
            .find(|c| c["cycle"]["id"] == later)
    });
    hit
}

/// Loopback: the daemon's metrics endpoint, tinyk3 serve and the expert
/// server listen on 127.0.0.1 only.
fn assert_listening_on_loopback_only(demo: &Demo) {
    let metrics_port: u16 = std::fs::read_to_string(demo.path("config.toml"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("metrics_listen = \"127.0.0.1:"))
        .and_then(|p| p.trim_end_matches('"').parse().ok())
        .unwrap();
    for port in [metrics_port, demo.serve, demo.far] {
        let addrs = listening_on(port);
        assert!(!addrs.is_empty(), "nothing listens on {port}");
        assert!(
            addrs.iter().all(|a| a == "0100007F"),
            "port {port} binds {addrs:?}"
        );
    }
}

/// The hostile answers round-trip verbatim into the raw-answer column...
fn assert_model_strings_stayed_in_the_raw_answer(
    demo: &Demo,
    daemon: &Daemon,
    answers: &[String],
    hit: &serde_json::Value,
) {
    let db = demo.path("ledger/orchestrator.db");
    let proposals = ledger::proposals(&db);
    for a in answers {
        assert!(
            proposals
                .iter()
                .any(|(_, raw, _)| raw.as_deref() == Some(a.as_str())),
            "not stored verbatim: {a}"
        );
    }
    // The proposed experiment's verdict (the cycle may also hold the A/A of
    // the floor its A/B measured, which no proposal made).
    assert!(
        hit["verdicts"]
            .as_array()
            .unwrap()
            .iter()
            .any(|v| !v["proposal_id"].is_null() && v["menu_id"] == "rebalance_trunk_cache"),
        "{hit:#}"
    );
    // ...and nowhere else: no other column, no SQL ran (both tables the
    // answers tried to drop are there and full), no log, no argv, no path.
    let places = ledger::cells_containing(&db, MARKER);
    assert!(!places.is_empty());
    assert!(
        places
            .iter()
            .all(|(t, c)| t == "proposals" && c == "raw_answer"),
        "a model string left the raw-answer column: {places:?}"
    );
    assert!(cycles(demo).len() >= 3);
    assert!(
        proposals.len() > answers.len(),
        "{} proposals: {proposals:?}",
        proposals.len()
    );
    let log = daemon.stderr() + &daemon.stdout();
    assert!(!log.contains(MARKER), "a model string reached the log");
    let invocations = wrapper_log(demo);
    assert!(invocations.len() > 10, "the bench ran: {invocations:?}");
    for (_, _, argv) in &invocations {
        assert!(!argv.iter().any(|a| a.contains(MARKER)), "{argv:?}");
    }
    for (path, _) in files(demo.dir.path()) {
        assert!(
            !path.to_string_lossy().contains(MARKER),
            "{}",
            path.display()
        );
    }
    assert!(!Path::new(&format!("/tmp/{MARKER}")).exists());
}

/// The key was used (the double saw it) and reached no record: not the
/// ledger (database, WAL, shared memory), not the log, not a report.
fn assert_the_key_reached_no_record(demo: &Demo, model: &FaultyHttpServer, key: &str) {
    let received = model.received();
    assert!(
        received
            .iter()
            .all(|r| r.head.contains(&format!("Bearer {key}"))),
        "every request carried the key"
    );
    let report = demo
        .cmd()
        .env(KEY_VAR, key)
        .args(["report", "--since", "2020-01-01", "--out"])
        .arg(demo.path("report-week.md"))
        .output()
        .unwrap();
    assert!(
        report.status.success(),
        "{}",
        String::from_utf8_lossy(&report.stderr)
    );
    let html = demo
        .cmd()
        .env(KEY_VAR, key)
        .args(["report", "--since", "2020-01-01", "--format", "html"])
        .output()
        .unwrap();
    assert!(
        html.status.success(),
        "{}",
        String::from_utf8_lossy(&html.stderr)
    );
    assert!(
        std::fs::metadata(demo.path("report-week.md"))
            .unwrap()
            .len()
            > 100
    );
    assert!(
        !contains(&html.stdout, key.as_bytes()),
        "the key is in the HTML report"
    );
    assert!(!contains(&html.stderr, key.as_bytes()));
    assert!(!contains(&report.stderr, key.as_bytes()));
    let all = files(demo.dir.path());
    assert!(all.iter().any(|(p, _)| p.ends_with("orchestrator.db")));
    for (path, bytes) in &all {
        assert!(
            !contains(bytes, key.as_bytes()),
            "the API key is in {}",
            path.display()
        );
    }
}

#[test]
fn non_loopback_addresses_are_refused_without_the_allow_flag() {
    let demo = Demo::new("bandit", TINY_START, TINY_INIT, TINY_EXPERT_BYTES, 4);
    edit_config(&demo, |t| {
        let from = t
            .lines()
            .find(|l| l.starts_with("metrics_listen = "))
            .unwrap()
            .to_string();
        t.replace(&from, "metrics_listen = \"0.0.0.0:9464\"")
    });
    let out = demo.cmd().args(["run", "--once"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("0.0.0.0:9464") && err.contains("allow_remote"),
        "{err}"
    );
    assert!(listening_on(9464).is_empty() || !err.is_empty());

    let (dir, model) = common::tiny_model(3);
    let profile = common::profile_file(dir.path(), "p.toml");
    let out = std::process::Command::new(common::tinyk3_bin())
        .arg("serve")
        .arg(&model)
        .arg("--profile")
        .arg(&profile.path)
        .args(["--listen", "0.0.0.0:0"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--allow-remote") && err.contains("loopback"),
        "{err}"
    );
}
