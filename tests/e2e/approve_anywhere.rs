//! Approval from anywhere (issue #18), on the test cluster of
//! `scripts/postgres.sh`: a stage of stack S approved by a CLI whose config
//! names another stack T, on another "host" (its own directory and live
//! profile), writes no file; S's real daemon applies it to S's live profile
//! when it starts, or at the start of its next cycle, once; and when S's
//! live profile moved on first, the daemon writes nothing and records why.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Output;
use std::time::{Duration, Instant};

use orchestrator::ledger::{Ledger, StackScope, StageId};
use orchestrator::profile::Profile;
use serde_json::Value;

use crate::common;
use crate::postgres_stack_lock::{PG_PASSWORD_VAR, fresh_database, host_config, orchestrator};
use crate::staged;

/// A bench double standing in for the engine: it answers at once with a
/// slightly varying s/token and the same output hash.
const BENCH: &str = r#"out=""
while [ $# -gt 0 ]; do
  if [ "$1" = "--out" ]; then out="$2"; fi
  shift
done
printf '{"seconds_per_token": 0.05%d, "output_hash": "00000000deadbeef"}' $(($$ % 10)) > "$out""#;

/// One host: its directory, its config for stack `name`, its live profile.
struct Host {
    dir: tempfile::TempDir,
    config: PathBuf,
    name: String,
}

impl Host {
    fn new(url: &str, name: &str) -> Host {
        let dir = tempfile::tempdir().unwrap();
        let bench = common::script(dir.path(), "bench-double.sh", BENCH);
        let config = host_config(dir.path(), url, name, &bench);
        Host {
            dir,
            config,
            name: name.to_string(),
        }
    }

    fn live_path(&self) -> PathBuf {
        self.dir.path().join("live.toml")
    }

    fn live(&self) -> Profile {
        Profile::load(&self.live_path()).unwrap()
    }

    fn run(&self, args: &[&str]) -> Output {
        orchestrator(&self.config).args(args).output().unwrap()
    }

    /// `stage show ID` as text and as JSON.
    fn show(&self, id: StageId) -> (String, Value) {
        let text = self.run(&["stage", "show", &id.to_string()]);
        assert!(text.status.success(), "{}", stderr(&text));
        let json = self.run(&["stage", "show", &id.to_string(), "--json"]);
        assert!(json.status.success(), "{}", stderr(&json));
        (stdout(&text), serde_json::from_slice(&json.stdout).unwrap())
    }

    /// Every file under the host's directory and its text.
    fn files(&self) -> BTreeMap<PathBuf, String> {
        let mut out = BTreeMap::new();
        let mut dirs = vec![self.dir.path().to_path_buf()];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(dir).unwrap() {
                let p = entry.unwrap().path();
                if p.is_dir() {
                    dirs.push(p);
                } else {
                    let text = String::from_utf8_lossy(&std::fs::read(&p).unwrap()).into_owned();
                    out.insert(p, text);
                }
            }
        }
        out
    }
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Stages a confirmed win of `candidate` over `base` for stack `stack`,
/// through the ledger API on the shared database.
fn stage_for(url: &str, stack: &str, base: &Profile, candidate: &Profile) -> StageId {
    let password = std::env::var(PG_PASSWORD_VAR).unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let ledger = Ledger::open_postgres(url, Some(&password), Duration::from_secs(5))
            .await
            .unwrap()
            .scoped(StackScope {
                name: stack.to_string(),
                class: None,
            });
        let id = staged::stage_win_on(&ledger, base, candidate).await;
        ledger.close().await;
        id
    })
}

/// Approves `id` from `host` (another stack's config) and checks that no
/// file of that host, and not the stack's live profile, changed (the
/// stack's daemon, if running, writes its own files meanwhile).
fn approve_from(host: &Host, stack_host: &Host, id: StageId) {
    let live = || std::fs::read_to_string(stack_host.live_path()).unwrap();
    let before = (host.files(), live());
    let out = host.run(&["stage", "approve", &id.to_string(), "--by", "alice"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains(&format!(
            "recorded in the ledger: the daemon of stack {} writes it",
            stack_host.name
        )),
        "{}",
        stdout(&out)
    );
    assert_eq!(
        (host.files(), live()),
        before,
        "an approval on a PostgreSQL ledger writes no file"
    );
}

fn apply_status(show: &Value) -> Option<&str> {
    show["apply"].as_str()
}

#[test]
fn an_approval_from_another_host_is_applied_once_by_its_stacks_daemon() {
    let _heavy = common::heavy();
    let url = fresh_database("approve_anywhere");
    let s = Host::new(&url, "spark-s");
    let t = Host::new(&url, "spark-t");
    let base = s.live();
    let candidate = staged::variant(&base, 0.003);
    let id = stage_for(&url, &s.name, &base, &candidate);

    // Any host lists it with its stack; --stack filters.
    let list = t.run(&["stage", "list"]);
    assert!(
        stdout(&list).contains("spark-s"),
        "{}{}",
        stdout(&list),
        stderr(&list)
    );
    let only = |stack: &str| {
        let out = t.run(&["stage", "list", "--json", "--stack", stack]);
        assert!(out.status.success(), "{}", stderr(&out));
        serde_json::from_slice::<Vec<Value>>(&out.stdout).unwrap()
    };
    assert_eq!(only("spark-s")[0]["stack"], "spark-s");
    assert!(only("spark-t").is_empty());

    approve_from(&t, &s, id);
    let (text, json) = t.show(id);
    assert!(
        text.contains("approved by alice at ")
            && text.contains("waiting for stack spark-s's daemon to apply it"),
        "{text}"
    );
    assert!(
        text.contains("the live profile of stack spark-s is on its host"),
        "T's live profile is not compared: {text}"
    );
    assert_eq!(apply_status(&json), Some("waiting"), "{json}");

    // S's daemon starts and applies it before its first cycle.
    let first = s.run(&["run", "--cycles", "1"]);
    let log = stderr(&first);
    assert!(
        log.contains(&format!("applied approved stage {id} (by alice)"))
            && log.contains("restart the engine with"),
        "{log}"
    );
    assert_eq!(s.live().digest(), candidate.digest());
    let written = std::fs::read_to_string(s.live_path()).unwrap();
    assert!(
        written.starts_with(&format!(
            "# live profile written by the daemon of stack spark-s for stage {id}"
        )),
        "{written}"
    );
    let (text, json) = t.show(id);
    assert!(
        text.contains(&format!(
            "; applied to {} by the daemon of stack spark-s on host ",
            s.live_path().display()
        )),
        "{text}"
    );
    assert_eq!(apply_status(&json), Some("applied"), "{json}");
    let applied_at = json["detail"]["stage"]["applied_at"].clone();
    assert!(applied_at.is_string(), "{json}");

    // A second start finds nothing to apply.
    let second = s.run(&["run", "--cycles", "1"]);
    assert!(
        !stderr(&second).contains("applied approved stage"),
        "{}",
        stderr(&second)
    );
    assert_eq!(std::fs::read_to_string(s.live_path()).unwrap(), written);
    assert_eq!(t.show(id).1["detail"]["stage"]["applied_at"], applied_at);
    let (code, report) = staged::check(&s.config);
    assert_eq!(code, 0, "{report}");
}

#[test]
fn a_live_profile_that_moved_on_is_not_overwritten_and_the_refusal_is_shown() {
    let _heavy = common::heavy();
    let url = fresh_database("approve_refused");
    let s = Host::new(&url, "spark-s");
    let t = Host::new(&url, "spark-t");
    let base = s.live();
    let id = stage_for(&url, &s.name, &base, &staged::variant(&base, 0.003));
    approve_from(&t, &s, id);

    // Someone changed S's live profile before its daemon saw the approval.
    let moved = staged::variant(&base, 0.004);
    std::fs::write(s.live_path(), moved.canonical()).unwrap();
    let run = s.run(&["run", "--cycles", "0"]);
    assert!(run.status.success(), "{}", stderr(&run));
    assert!(
        stderr(&run).contains(&format!("approved stage {id} (by alice) NOT applied")),
        "{}",
        stderr(&run)
    );
    assert_eq!(
        std::fs::read_to_string(s.live_path()).unwrap(),
        moved.canonical()
    );
    let (text, json) = t.show(id);
    let why = format!(
        "the live profile changed (now {}, was {} when measured)",
        moved.digest().short(),
        base.digest().short()
    );
    assert!(
        text.contains("approved by alice at ") && text.contains(&format!("; NOT applied: {why}")),
        "{text}"
    );
    assert_eq!(apply_status(&json), Some("refused"), "{json}");
    assert_eq!(json["detail"]["stage"]["apply_refusal"], why.as_str());

    // Settled: the next start does not try again.
    let again = s.run(&["run", "--cycles", "0"]);
    assert!(
        !stderr(&again).contains("NOT applied"),
        "{}",
        stderr(&again)
    );
    let (code, report) = staged::check(&s.config);
    assert_eq!(code, 0, "{report}");
}

#[test]
fn a_running_daemon_applies_an_approval_at_the_start_of_its_next_cycle() {
    let _heavy = common::heavy();
    let url = fresh_database("approve_running");
    let s = Host::new(&url, "spark-s");
    let t = Host::new(&url, "spark-t");
    let base = s.live();
    let candidate = staged::variant(&base, 0.003);
    let id = stage_for(&url, &s.name, &base, &candidate);

    let out_path = s.dir.path().join("daemon.out");
    let log_path = s.dir.path().join("daemon.log");
    let mut daemon = orchestrator(&s.config)
        .arg("run")
        .stdout(std::fs::File::create(&out_path).unwrap())
        // Files, not pipes: a full pipe would stall the daemon mid-log.
        .stderr(std::fs::File::create(&log_path).unwrap())
        .spawn()
        .unwrap();
    let log = || std::fs::read_to_string(&log_path).unwrap_or_default();
    // Its first cycle is done (a line on stdout): it is in its loop.
    let deadline = Instant::now() + Duration::from_secs(60);
    while std::fs::read_to_string(&out_path).map_or(true, |s| s.trim().is_empty()) {
        assert!(Instant::now() < deadline, "no cycle ended: {}", log());
        assert!(daemon.try_wait().unwrap().is_none(), "{}", log());
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(s.live().digest(), base.digest());

    approve_from(&t, &s, id);
    let deadline = Instant::now() + Duration::from_secs(60);
    while apply_status(&t.show(id).1) != Some("applied") {
        assert!(Instant::now() < deadline, "never applied: {}", log());
        assert!(daemon.try_wait().unwrap().is_none(), "{}", log());
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(s.live().digest(), candidate.digest());
    // SAFETY: kill(2) on our own child.
    unsafe {
        assert_eq!(libc::kill(daemon.id() as i32, libc::SIGTERM), 0);
    }
    let status = daemon.wait().unwrap();
    assert!(status.code().is_some(), "{status:?}: {}", log());
    assert!(
        log().contains(&format!("applied approved stage {id} (by alice)")),
        "{}",
        log()
    );
}

#[test]
fn of_two_hosts_approving_one_stage_at_once_exactly_one_wins() {
    let _heavy = common::heavy();
    let url = fresh_database("approve_race");
    let s = Host::new(&url, "spark-s");
    let hosts = [Host::new(&url, "spark-t"), Host::new(&url, "spark-u")];
    let base = s.live();
    for round in 0..3 {
        let id = stage_for(&url, &s.name, &base, &staged::variant(&base, 0.003));
        let racing: Vec<_> = hosts
            .iter()
            .enumerate()
            .map(|(i, h)| {
                orchestrator(&h.config)
                    .args(["stage", "approve", &id.to_string(), "--by"])
                    .arg(format!("person-{i}"))
                    .stdout(std::process::Stdio::piped())
                    .stderr(std::process::Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        let outs: Vec<Output> = racing
            .into_iter()
            .map(|c| c.wait_with_output().unwrap())
            .collect();
        let won: Vec<_> = outs.iter().filter(|o| o.status.success()).collect();
        assert_eq!(won.len(), 1, "round {round}: {outs:?}");
        let lost = outs.iter().find(|o| !o.status.success()).unwrap();
        assert_eq!(lost.status.code(), Some(1), "{}", stderr(lost));
        assert!(
            stderr(lost).contains(&format!("stage {id} was already approved by person-")),
            "{}",
            stderr(lost)
        );
    }
    let (code, report) = staged::check(&s.config);
    assert_eq!(code, 0, "{report}");
}
