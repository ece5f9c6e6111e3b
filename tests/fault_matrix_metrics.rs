//! The fault matrix, metrics side: the stack's metrics endpoint replaced by
//! `FaultyHttpServer` (a test double that can be down or answer garbage).
//! With `[stack.metrics] required = false` the cycle goes on with what it
//! could read and says so in the log and the ledger; with `required = true`
//! it fails loudly. Either way the next cycle runs normally once the
//! endpoint is back.

mod common;
mod demo;
mod faults;

use std::time::{Duration, Instant};

use demo::Demo;
use faults::server::{FaultyHttpServer, Reply};
use faults::*;

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
    let t0 = Instant::now();
    let metrics = FaultyHttpServer::start(|_| {
        Reply::Body(
            "text/plain; version=0.0.4",
            "# TYPE tinyk3_seconds_per_token gauge\ntinyk3_seconds_per_token 0.0425\n".into(),
        )
    });
    let demo = Demo::new("bandit", TINY_START, TINY_INIT, TINY_EXPERT_BYTES, 4);
    let serve = demo.serve;
    edit_config(&demo, |t| {
        t.replace(
            &format!("url = \"http://127.0.0.1:{serve}/metrics\""),
            &format!("url = \"http://127.0.0.1:{}/metrics\"", metrics.port),
        )
    });
    let db = demo.path("ledger/orchestrator.db");
    let minute = Duration::from_secs(60);

    // required = false: down, then garbage, then good.
    metrics.set_down(true);
    let mut daemon = Daemon::start(&demo, &["--cycles", "100"], &[]);
    let down = wait_for(
        3 * minute,
        "a cycle with the metrics down",
        &mut daemon,
        || closed_after(&demo, 0).into_iter().next(),
    );
    metrics.set_down(false);
    metrics.script([Reply::Body("text/plain", GARBAGE.into())]);
    let id = down["cycle"]["id"].as_i64().unwrap();
    assert_eq!(down["cycle"]["status"], "completed", "proceeds: {down:#}");
    let g = gaps(&db, id);
    assert!(
        g.contains("metrics:") && g.contains("goes on without them"),
        "{g}"
    );
    let garbage = wait_for(
        2 * minute,
        "a cycle with garbage metrics",
        &mut daemon,
        || closed_after(&demo, id).into_iter().next(),
    );
    let id = garbage["cycle"]["id"].as_i64().unwrap();
    assert_eq!(
        garbage["cycle"]["status"], "completed",
        "proceeds: {garbage:#}"
    );
    let g = gaps(&db, id);
    assert!(
        g.contains("line 1") && g.contains("goes on without them"),
        "{g}"
    );
    let good = wait_for(2 * minute, "a cycle with good metrics", &mut daemon, || {
        closed_after(&demo, id).into_iter().next()
    });
    let id = good["cycle"]["id"].as_i64().unwrap();
    assert_eq!(good["cycle"]["status"], "completed", "{good:#}");
    assert!(!gaps(&db, id).contains("metrics:"), "{}", gaps(&db, id));
    let read = ledger::observations(&db);
    assert_eq!(
        read.last().unwrap().1["seconds_per_token"],
        0.0425,
        "{read:?}"
    );
    daemon.stop(minute);
    let log = daemon.stderr();
    let warned: Vec<&str> = log
        .lines()
        .filter(|l| l.contains(" WARN ") && l.contains("goes on without them"))
        .collect();
    assert_eq!(warned.len(), 2, "one WARN per degraded cycle:\n{log}");
    assert!(error_lines(&log).is_empty(), "nothing failed:\n{log}");

    // required = true: down, then garbage, fail loudly; then good runs.
    edit_config(&demo, |t| t.replace("required = false", "required = true"));
    metrics.set_down(true);
    let mut daemon = Daemon::start(&demo, &["--cycles", "100"], &[]);
    let down = wait_for(
        3 * minute,
        "a required-metrics cycle, down",
        &mut daemon,
        || closed_after(&demo, id).into_iter().next(),
    );
    metrics.set_down(false);
    metrics.script([Reply::Body("text/plain", GARBAGE.into())]);
    let garbage = wait_for(
        2 * minute,
        "a required-metrics cycle, garbage",
        &mut daemon,
        || {
            closed_after(&demo, down["cycle"]["id"].as_i64().unwrap())
                .into_iter()
                .next()
        },
    );
    let good = wait_for(
        2 * minute,
        "a required-metrics cycle, good",
        &mut daemon,
        || {
            closed_after(&demo, garbage["cycle"]["id"].as_i64().unwrap())
                .into_iter()
                .next()
        },
    );
    daemon.stop(minute);
    let log = daemon.stderr();
    for (what, c) in [("down", &down), ("garbage", &garbage)] {
        assert_eq!(c["cycle"]["status"], "failed", "{what}: {c:#}");
        let (kind, reason) = only_verdict(c);
        assert_eq!(kind, "failed", "{what}: {c:#}");
        assert!(reason.contains("required = true"), "{what}: {reason}");
        let cid = c["cycle"]["id"].as_i64().unwrap();
        assert!(
            error_lines(&log)
                .iter()
                .any(|l| l.contains(&format!("cycle={cid}")) && l.contains("required = true")),
            "{what}: no ERROR line for cycle {cid}:\n{log}"
        );
    }
    assert!(
        only_verdict(&garbage).1.contains("line 1"),
        "the parse error is named: {garbage:#}"
    );
    assert_eq!(good["cycle"]["status"], "completed", "{good:#}");
    let dir = demo.dir.path().to_string_lossy().to_string();
    assert!(processes_mentioning(&dir).is_empty());
    eprintln!("metrics fault matrix: {:.1}s", t0.elapsed().as_secs_f64());
}
