//! `stage approve` and `stage reject` from many processes at once, on
//! several stages, while the real daemon writes cycles to the same ledger:
//! nobody sees `database is locked`, each stage is decided exactly once, and
//! every loser is told which decision won and whose it was.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Instant;

use crate::demo::Demo;
use crate::staged;
use orchestrator::profile::Profile;

const TINY_INIT: &str = r#""--seed", "1", "--layers", "4", "--experts", "16", "--top-k", "2", "--d-model", "64", "--d-expert", "128", "--d-dense", "256", "--heads", "2", "--vocab", "512""#;
const START: &str = "[memory]\nbudget_gb = 0.05\ntrunk_gb = 0.03\ncache_gb = 0.002\n[far]\naddr = \"FAR\"\nwarm_set = 0\n";
const STAGES: usize = 8;

/// What one deciding process reported.
#[derive(Debug)]
pub enum Outcome {
    /// It recorded the decision (`approved`/`rejected`, or `expired` when
    /// its approval found the live profile changed under the stage).
    Won(&'static str),
    /// It was told the stage was already `state` by `by`.
    Lost { state: String, by: String },
}

pub fn outcome(by: &str, approve: bool, out: &std::process::Output) -> Outcome {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.to_lowercase().contains("database is locked"),
        "{by}: a raw lock error reached the user: {stderr}"
    );
    if out.status.success() {
        return Outcome::Won(if approve { "approved" } else { "rejected" });
    }
    assert_eq!(out.status.code(), Some(1), "{by}: {stderr}");
    if approve && stderr.contains("is expired and was not applied") {
        return Outcome::Won("expired");
    }
    // "stage N was already STATE by BY at T; ..."
    let rest = stderr
        .split_once("was already ")
        .unwrap_or_else(|| panic!("{by}: not told who won: {stderr}"))
        .1;
    let (state, rest) = rest.split_once(" by ").unwrap();
    let by_winner = rest.split_once(" at ").unwrap().0;
    Outcome::Lost {
        state: state.to_string(),
        by: by_winner.to_string(),
    }
}

#[test]
fn racing_approvals_and_rejections_decide_each_stage_exactly_once() {
    let _heavy = crate::common::heavy();
    let t0 = Instant::now();
    let demo = Demo::new("bandit", START, TINY_INIT, 3 * 64 * 128 * 4, 8);
    let config = demo.path("config.toml");
    let live_path = demo.path("ledger/profiles/live.toml");
    let db = demo.path("ledger/orchestrator.db");
    std::fs::create_dir_all(live_path.parent().unwrap()).unwrap();
    std::fs::copy(demo.path("start.toml"), &live_path).unwrap();

    let mut daemon = Command::new(assert_cmd::cargo::cargo_bin("orchestrator"))
        .arg("--config")
        .arg(&config)
        .args(["--log", "info,orchestrator::cycle=debug", "run"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(daemon.stderr.take().unwrap()).lines();
    // Wait until the daemon is measuring (writing a run row per run).
    let mut log = String::new();
    for line in lines.by_ref() {
        let line = line.unwrap();
        log.push_str(&line);
        log.push('\n');
        if line.contains("phase measure") {
            break;
        }
    }
    assert!(
        log.contains("phase measure"),
        "the daemon never measured:\n{log}"
    );
    let drain = std::thread::spawn(move || lines.map_while(Result::ok).collect::<Vec<_>>());

    let live = Profile::load(&live_path).unwrap();
    let mut candidates = Vec::new();
    let mut ids = Vec::new();
    for s in 0..STAGES {
        let candidate = staged::variant(&live, 0.003 + s as f64 * 0.001);
        ids.push(staged::stage_win(&db, &live, &candidate));
        candidates.push(candidate);
    }
    // Two approvers and two rejecters per stage, all started at once.
    let mut procs = Vec::new();
    for (s, id) in ids.iter().enumerate() {
        for j in 0..4 {
            let approve = j % 2 == 0;
            let by = format!("{}-{s}-{j}", if approve { "approver" } else { "rejecter" });
            let mut cmd = Command::new(assert_cmd::cargo::cargo_bin("orchestrator"));
            cmd.arg("--config").arg(&config).arg("stage");
            if approve {
                cmd.args(["approve", &id.0.to_string(), "--by", &by]);
            } else {
                cmd.args([
                    "reject",
                    &id.0.to_string(),
                    "--by",
                    &by,
                    "--reason",
                    "racing",
                ]);
            }
            let child = cmd
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            procs.push((s, by, approve, child));
        }
    }
    let results: Vec<(usize, String, Outcome)> = procs
        .into_iter()
        .map(|(s, by, approve, child)| {
            let out = child.wait_with_output().unwrap();
            let o = outcome(&by, approve, &out);
            (s, by, o)
        })
        .collect();

    let ledger = staged::stages(&config);
    let mut approved = None;
    for (s, id) in ids.iter().enumerate() {
        let (_, state, by) = ledger.iter().find(|(i, _, _)| *i == id.0).unwrap();
        let by = by
            .as_deref()
            .unwrap_or_else(|| panic!("stage {id} undecided"));
        let mine: Vec<&(usize, String, Outcome)> =
            results.iter().filter(|(t, _, _)| *t == s).collect();
        let winners: Vec<_> = mine
            .iter()
            .filter(|(_, _, o)| matches!(o, Outcome::Won(_)))
            .collect();
        assert!(winners.len() <= 1, "stage {id}: several winners: {mine:?}");
        match winners.first() {
            Some((_, who, Outcome::Won(what))) => {
                assert_eq!(state, what, "stage {id}: {mine:?}");
                let expected_by = if *what == "expired" {
                    "orchestrator"
                } else {
                    who.as_str()
                };
                assert_eq!(by, expected_by, "stage {id}: {mine:?}");
                if *what == "approved" {
                    assert!(approved.is_none(), "two approvals of one base: {results:?}");
                    approved = Some(s);
                }
            }
            // The daemon expired it first (an approval changed the live
            // profile and a cycle started): a decision no process made.
            _ => assert_eq!(
                (state.as_str(), by),
                ("expired", "orchestrator"),
                "{mine:?}"
            ),
        }
        for (_, who, o) in &mine {
            if let Outcome::Lost { state: s2, by: b2 } = o {
                assert_eq!(
                    (s2.as_str(), b2.as_str()),
                    (state.as_str(), by),
                    "stage {id}: {who} was told the wrong winner"
                );
            }
        }
    }
    let now = Profile::load(&live_path).unwrap();
    match approved {
        Some(s) => assert_eq!(now.digest(), candidates[s].digest()),
        None => assert_eq!(now.digest(), live.digest()),
    }
    let (code, report) = staged::check(&config);
    assert_eq!(code, 0, "with the daemon running: {report:#}");

    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(daemon.id() as i32, libc::SIGTERM) };
    let status = daemon.wait().unwrap();
    let rest = drain.join().unwrap().join("\n");
    assert!(status.success(), "{status:?}\n{log}{rest}");
    let (code, report) = staged::check(&config);
    assert_eq!(code, 0, "{report:#}");
    demo.assert_children_gone();
    eprintln!(
        "{} deciders on {STAGES} stages; approved: {approved:?}; {:.0} s",
        results.len(),
        t0.elapsed().as_secs_f64()
    );
}
