//! The fault matrix, metrics side: the stack's metrics endpoint replaced by
//! `FaultyHttpServer` (a test double that can be down or answer garbage).
//! With `[stack.metrics] required = false` the cycle goes on with what it
//! could read and says so in the log and the ledger; with `required = true`
//! it fails loudly. Either way the next cycle runs normally once the
//! endpoint is back.

use std::time::{Duration, Instant};

use crate::demo::Demo;
use crate::faults::server::{FaultyHttpServer, Reply};
use crate::faults::*;

const GARBAGE: &str = "<html>502 Bad Gateway</html> {{{ not prometheus";

fn gaps(db: &std::path::Path, cycle: i64) -> String {
    ledger::observations(db)
        .into_iter()
        .find(|(c, _)| *c == cycle)
        .map(|(_, m)| m["gaps"].to_string())
        .unwrap_or_else(|| panic!("no observation for cycle {cycle}"))
}

#[test]
fn metrics_down_or_garbage_proceed_or_fail_as_configured() {
    let _heavy = crate::common::heavy();
    let t0 = Instant::now();
    let metrics = FaultyHttpServer::start(|_| {
        Reply::Body(
            "text/plain; version=0.0.4",
            "# TYPE tinyk3_seconds_per_token gauge\ntinyk3_seconds_per_token 0.0425\n".into(),
        )
    });
    let demo = Demo::new("bandit", TINY_START, TINY_INIT, TINY_EXPERT_BYTES, 4);
    let serve = demo.serve;
    // A floor is stale after a millisecond, so every cycle has a reason to
    // offer remeasure: the loop never converges (a converged bounded run
    // stops) and keeps running cycles for the test to switch the endpoint
    // under.
    // Not standing aside: its monitor polls the same endpoint and took
    // the one scripted garbage reply before a cycle's scrape could.
    edit_config(&demo, |t| {
        not_standing_aside(t)
            .replace(
                &format!("url = \"http://127.0.0.1:{serve}/metrics\""),
                &format!("url = \"http://127.0.0.1:{}/metrics\"", metrics.port),
            )
            .replace(
                "noise_floor_max_age_s = 86400",
                "noise_floor_max_age_s = 0.001",
            )
    });
    assert!(
        std::fs::read_to_string(demo.path("config.toml"))
            .unwrap()
            .contains("noise_floor_max_age_s = 0.001")
    );
    let db = demo.path("ledger/orchestrator.db");
    let minute = Duration::from_secs(60);

    // required = false: down, then garbage, then good. A cycle may start
    // before the test switches the endpoint, so cycles are found by what
    // they saw, not counted.
    metrics.set_down(true);
    // A bound the test never reaches: the tiny stack's cycles take a fraction
    // of a second since the one-block first look, and 100 of them were spent
    // before the test had switched the endpoint twice. The test stops it.
    let mut daemon = Daemon::start(&demo, &["--cycles", "100000"], &[]);
    let down = wait_for(
        3 * minute,
        "a cycle with the metrics down",
        &mut daemon,
        || closed_after(&demo, 0).into_iter().next(),
    );
    let id = down["cycle"]["id"].as_i64().unwrap();
    let g = gaps(&db, id);
    assert!(
        g.contains("metrics:") && g.contains("error sending request"),
        "{g}"
    );
    assert!(g.contains("goes on without them"), "{g}");
    metrics.script([Reply::Body("text/plain", GARBAGE.into())]);
    metrics.set_down(false);
    let garbage = wait_for(
        2 * minute,
        "a cycle with garbage metrics",
        &mut daemon,
        || {
            closed_after(&demo, id)
                .into_iter()
                .find(|c| gaps(&db, c["cycle"]["id"].as_i64().unwrap()).contains("metrics line 1"))
        },
    );
    let id = garbage["cycle"]["id"].as_i64().unwrap();
    assert!(
        gaps(&db, id).contains("goes on without them"),
        "{}",
        gaps(&db, id)
    );
    let good = wait_for(2 * minute, "a cycle with good metrics", &mut daemon, || {
        closed_after(&demo, id).into_iter().next()
    });
    let id = good["cycle"]["id"].as_i64().unwrap();
    assert!(!gaps(&db, id).contains("metrics:"), "{}", gaps(&db, id));
    let read = ledger::observations(&db);
    let good_obs = read.iter().find(|(c, _)| *c == id).unwrap();
    assert_eq!(good_obs.1["seconds_per_token"], 0.0425, "{read:?}");
    daemon.stop(minute);
    let all = cycles(&demo);
    // Every cycle up to the good one proceeded (a later one may have been
    // aborted by the SIGTERM that stopped the daemon).
    for c in all
        .iter()
        .filter(|c| c["cycle"]["id"].as_i64().unwrap() <= id)
    {
        assert_eq!(c["cycle"]["status"], "completed", "proceeds: {c:#}");
    }
    let degraded = read
        .iter()
        .filter(|(_, m)| m["gaps"].to_string().contains("goes on without them"))
        .count();
    assert!(degraded >= 2);
    let log = daemon.stderr();
    let warned = log
        .lines()
        .filter(|l| l.contains(" WARN ") && l.contains("goes on without them"))
        .count();
    assert_eq!(warned, degraded, "one WARN per degraded cycle:\n{log}");
    assert!(error_lines(&log).is_empty(), "nothing failed:\n{log}");
    let last_proceeding = all.last().unwrap()["cycle"]["id"].as_i64().unwrap();

    // required = true: down, then garbage, fail loudly; then good runs.
    edit_config(&demo, |t| t.replace("required = false", "required = true"));
    metrics.set_down(true);
    let mut daemon = Daemon::start(&demo, &["--cycles", "100000"], &[]);
    let down = wait_for(
        3 * minute,
        "a required-metrics cycle, down",
        &mut daemon,
        || closed_after(&demo, last_proceeding).into_iter().next(),
    );
    metrics.script([Reply::Body("text/plain", GARBAGE.into())]);
    metrics.set_down(false);
    let down_id = down["cycle"]["id"].as_i64().unwrap();
    let garbage = wait_for(
        2 * minute,
        "a required-metrics cycle, garbage",
        &mut daemon,
        || {
            closed_after(&demo, down_id)
                .into_iter()
                .find(|c| only_verdict(c).1.contains("metrics line 1"))
        },
    );
    let garbage_id = garbage["cycle"]["id"].as_i64().unwrap();
    let good = wait_for(
        2 * minute,
        "a required-metrics cycle, good",
        &mut daemon,
        || closed_after(&demo, garbage_id).into_iter().next(),
    );
    daemon.stop(minute);
    let log = daemon.stderr();
    for c in closed_after(&demo, last_proceeding) {
        let cid = c["cycle"]["id"].as_i64().unwrap();
        if cid > garbage_id {
            continue;
        }
        assert_eq!(c["cycle"]["status"], "failed", "{c:#}");
        let (kind, reason) = only_verdict(&c);
        assert_eq!(kind, "failed", "{c:#}");
        assert!(reason.contains("required = true"), "{reason}");
        assert!(
            error_lines(&log)
                .iter()
                .any(|l| l.contains(&format!("cycle={cid}")) && l.contains("required = true")),
            "no ERROR line for cycle {cid}:\n{log}"
        );
    }
    assert_eq!(good["cycle"]["status"], "completed", "{good:#}");
    let dir = demo.dir.path().to_string_lossy().to_string();
    assert!(processes_mentioning(&dir).is_empty());
    eprintln!("metrics fault matrix: {:.1}s", t0.elapsed().as_secs_f64());
}
