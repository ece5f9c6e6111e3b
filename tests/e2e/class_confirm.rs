//! Hosts of one class confirm each other (issue #18 item 4), on the test
//! cluster of `scripts/postgres.sh`: a win of stack A (written through the
//! ledger API, as the loop records one, with no confirmation) is confirmed
//! by the real daemon of stack B, of A's class and on A's base profile,
//! with its own embedded tinyk3; the stage is A's and says it was
//! confirmed on B.
//!
//! The judge is the shipped one, loosened only as `bound_win` and
//! `fleet_race` loosen it: the menu narrowed to `stage_speculative`, whose
//! drafts make tinyk3 several times faster (so the confirmation is decided
//! against the bound `max_noise_floor`, without a noise floor), and
//! `max_pairs = 8`.

use std::path::PathBuf;
use std::process::Output;
use std::time::Duration;

use orchestrator::ledger::{Ledger, StackScope};
use orchestrator::menu::MenuId;
use orchestrator::profile::Profile;
use serde_json::{Value, json};
use sqlx::Connection;
use sqlx::postgres::{PgConnectOptions, PgConnection};

use crate::demo::Demo;
use crate::postgres_stack_lock::{PG_PASSWORD_VAR, fresh_database};
use crate::staged;

/// fleet_race's checkpoint and profile: no far tier (its address would be
/// a per-host port), so the hosts' live profiles are identical.
const INIT: &str = r#""--seed", "3", "--layers", "4", "--experts", "16", "--top-k", "2", "--d-model", "64", "--d-expert", "128", "--d-dense", "256", "--heads", "2", "--vocab", "512""#;
const PROFILE: &str = "[memory]\nbudget_gb = 0.01\ntrunk_gb = 0.001\ncache_gb = 0.004\n";
const CLASS: &str = "tiny";

/// One host: a demo directory whose config names the shared database,
/// this host's stack and the class.
struct Host {
    demo: Demo,
}

impl Host {
    fn new(url: &str, stack: &str) -> Host {
        Host::with(url, stack, 0)
    }

    /// A host whose `[stack] class_confirm_wait_s` is `wait_s`.
    fn with(url: &str, stack: &str, wait_s: i64) -> Host {
        let mut demo = Demo::new("bandit", PROFILE, INIT, 3 * 64 * 128 * 4, 8);
        demo.env.push((
            PG_PASSWORD_VAR.into(),
            std::env::var(PG_PASSWORD_VAR).unwrap_or_default(),
        ));
        let path = demo.path("config.toml");
        let mut config: toml::Table = std::fs::read_to_string(&path).unwrap().parse().unwrap();
        config.insert(
            "ledger".into(),
            toml::Value::Table(toml::toml! {
                url = url
                password_env = PG_PASSWORD_VAR
            }),
        );
        let s = config["stack"].as_table_mut().unwrap();
        s.insert("name".into(), stack.into());
        s.insert("class".into(), CLASS.into());
        s.insert("class_confirm_wait_s".into(), wait_s.into());
        s.insert(
            "unsupported".into(),
            toml::Value::Array(
                ["rerank_pins", "deepen_warm_set", "rebalance_trunk_cache"]
                    .map(Into::into)
                    .into(),
            ),
        );
        std::fs::write(&path, toml::to_string(&config).unwrap()).unwrap();
        // The live profile as the embedded stack first writes it.
        let live = demo.path("ledger/profiles/live.toml");
        std::fs::create_dir_all(live.parent().unwrap()).unwrap();
        std::fs::copy(demo.path("start.toml"), &live).unwrap();
        Host { demo }
    }

    fn live_path(&self) -> PathBuf {
        self.demo.path("ledger/profiles/live.toml")
    }

    fn live(&self) -> Profile {
        Profile::load(&self.live_path()).unwrap()
    }

    /// Sets `[stack] class_confirm_wait_s`.
    fn set_wait(&self, wait_s: i64) {
        let path = self.demo.path("config.toml");
        let mut config: toml::Table = std::fs::read_to_string(&path).unwrap().parse().unwrap();
        config["stack"]
            .as_table_mut()
            .unwrap()
            .insert("class_confirm_wait_s".into(), wait_s.into());
        std::fs::write(&path, toml::to_string(&config).unwrap()).unwrap();
    }

    fn run(&self, args: &[&str]) -> Output {
        self.demo.cmd().args(args).output().unwrap()
    }
}

fn text(out: &Output) -> String {
    format!(
        "stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// A handle on the shared ledger scoped to `stack` of the class.
async fn ledger_of(url: &str, stack: &str) -> Ledger {
    let password = std::env::var(PG_PASSWORD_VAR).ok();
    Ledger::open_postgres(url, password.as_deref(), Duration::from_secs(5))
        .await
        .unwrap()
        .scoped(StackScope {
            name: stack.into(),
            class: Some(CLASS.into()),
        })
}

/// Rows of `sql` on the shared database, each column as text.
async fn rows(url: &str, sql: &str) -> Vec<Vec<String>> {
    use sqlx::Row;
    let mut options: PgConnectOptions = url.parse().unwrap();
    if let Ok(p) = std::env::var(PG_PASSWORD_VAR) {
        options = options.password(&p);
    }
    let mut c = PgConnection::connect_with(&options).await.unwrap();
    let out = sqlx::query(sql)
        .fetch_all(&mut c)
        .await
        .unwrap()
        .iter()
        .map(|r| {
            (0..r.len())
                .map(|i| {
                    r.try_get::<Option<String>, _>(i)
                        .unwrap()
                        .unwrap_or_default()
                })
                .collect()
        })
        .collect();
    c.close().await.unwrap();
    out
}

/// A win of `candidate` over `base` of `stack`, written through the
/// ledger API as the loop records one, with no confirmation.
async fn unconfirmed_win(url: &str, stack: &str, base: &Profile, candidate: &Profile) {
    let ledger = ledger_of(url, stack).await;
    let win = staged::Win {
        menu_id: MenuId::StageSpeculative,
        parameters: json!({"draft_len": 4}),
        effect: (-0.5, -0.6, -0.4),
        ..Default::default()
    };
    staged::unconfirmed_win_on(&ledger, base, candidate, &win).await;
    ledger.close().await;
}

/// The live profile with speculation on: several times faster on tinyk3.
fn speculating(base: &Profile) -> Profile {
    let mut candidate = base.clone();
    candidate.speculative.draft_len = 4;
    candidate
}

#[test]
fn a_classmate_on_the_same_live_profile_confirms_a_win_and_the_stage_says_so() {
    let _heavy = crate::common::heavy();
    let url = fresh_database("class_confirm");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let b = Host::new(&url, "box-b");
    let base = b.live();
    let candidate = speculating(&base);

    // Stack A's win on the class's live profile, unconfirmed.
    rt.block_on(unconfirmed_win(&url, "box-a", &base, &candidate));

    // B has no win of its own: its first cycle confirms A's, on B's host.
    let out = b.run(&["run", "--cycles", "1"]);
    assert!(out.status.success(), "{}", text(&out));
    let log = text(&out);
    assert!(
        log.contains("confirming stack box-a's win #1 (class tiny) on this host"),
        "{log}"
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let at = stdout
        .find("STAGED #")
        .unwrap_or_else(|| panic!("nothing staged: {log}"));
    let id: String = stdout[at + 8..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();

    // The stage is A's (its base is A's live profile too), confirmed on B.
    let listed = b.run(&["stage", "list", "--json", "--stack", "box-a"]);
    assert!(listed.status.success(), "{}", text(&listed));
    let listed: Vec<Value> = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(listed.len(), 1, "{listed:#?}");
    assert_eq!(listed[0]["id"].to_string(), id);
    assert_eq!(listed[0]["stack"], "box-a");
    assert_eq!(listed[0]["confirmed_by_stack"], "box-b");
    assert_eq!(
        listed[0]["confirmed_on"],
        "confirmed on stack box-b (class tiny)"
    );
    let shown = b.run(&["stage", "show", &id]);
    assert!(shown.status.success(), "{}", text(&shown));
    assert!(
        String::from_utf8_lossy(&shown.stdout).contains("confirmed on stack box-b (class tiny)"),
        "{}",
        text(&shown)
    );
    let list = b.run(&["stage", "list"]);
    assert!(
        String::from_utf8_lossy(&list.stdout).contains("confirmed on stack box-b (class tiny)"),
        "{}",
        text(&list)
    );

    // The confirmation ran in B's cycle, under B's claim, and the stage
    // holds B's confirmation of A's win.
    let found = rt.block_on(rows(
        &url,
        "SELECT cw.stack, ck.stack, k.stack, s.stack, s.confirmed_by_stack FROM stages s \
         JOIN experiments w ON w.id = s.experiment_id JOIN cycles cw ON cw.id = w.cycle_id \
         JOIN experiments e ON e.id = s.confirmation_id JOIN cycles ck ON ck.id = e.cycle_id \
         JOIN confirmation_claims k ON k.win_experiment_id = w.id AND k.confirmation_id = e.id",
    ));
    assert_eq!(
        found,
        vec![
            vec!["box-a", "box-b", "box-b", "box-a", "box-b"]
                .into_iter()
                .map(String::from)
                .collect::<Vec<_>>()
        ],
    );
    // B's own live profile is untouched, and `ledger --check` accepts it.
    assert_eq!(b.live().digest(), base.digest());
    let (code, report) = staged::check(&b.demo.path("config.toml"));
    assert_eq!(code, 0, "{report}");
    drop(b);
}

#[test]
fn a_stack_leaves_its_own_win_to_its_classmates_for_the_wait_then_confirms_it_itself() {
    let _heavy = crate::common::heavy();
    let url = fresh_database("class_wait");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let b = Host::with(&url, "box-b", 3600);
    let base = b.live();
    rt.block_on(unconfirmed_win(&url, "box-b", &base, &speculating(&base)));

    // Within the wait its cycle refreshes the floor and leaves the win.
    let out = b.run(&["run", "--cycles", "1"]);
    let log = text(&out);
    assert!(out.status.success(), "{log}");
    assert!(
        log.contains("win #1 is left to this stack's classmates to confirm until"),
        "{log}"
    );
    assert!(!log.contains("STAGED #"), "{log}");
    let kinds = rt.block_on(rows(
        &url,
        "SELECT e.menu_id, coalesce(e.confirmation_of::text, '-') FROM experiments e ORDER BY e.id",
    ));
    assert_eq!(
        kinds,
        [["stage_speculative", "-"], ["remeasure", "-"]]
            .map(|r| r.map(String::from).to_vec())
            .to_vec(),
        "{log}"
    );
    assert!(
        rt.block_on(rows(&url, "SELECT stack FROM confirmation_claims"))
            .is_empty()
    );

    // Without a wait, its next cycle claims and confirms its own win. (Its
    // verdict is the machine's: the floor the waiting cycle measured may be
    // too noisy here to stage from, so only the claim and the A/B are
    // asserted; a staged win is checked to name no classmate.)
    b.set_wait(0);
    let out = b.run(&["run", "--cycles", "1"]);
    let log = text(&out);
    assert!(out.status.success(), "{log}");
    assert!(log.contains("[confirmation]"), "{log}");
    assert!(!log.contains("confirming stack"), "{log}");
    assert_eq!(
        rt.block_on(rows(
            &url,
            "SELECT k.stack, c.stack FROM confirmation_claims k \
             JOIN experiments e ON e.id = k.confirmation_id JOIN cycles c ON c.id = e.cycle_id \
             WHERE k.win_experiment_id = 1 AND e.confirmation_of = 1"
        )),
        vec![vec!["box-b".to_string(), "box-b".into()]],
        "{log}"
    );
    if log.contains("STAGED #") {
        let listed = b.run(&["stage", "list", "--json"]);
        let listed: Vec<Value> = serde_json::from_slice(&listed.stdout).unwrap();
        assert_eq!(listed[0]["confirmed_by_stack"], "box-b", "{listed:#?}");
        assert_eq!(listed[0]["confirmed_on"], Value::Null, "{listed:#?}");
    }
}

#[test]
fn a_stage_approved_for_the_class_is_applied_by_each_host_whose_live_profile_is_its_base() {
    let _heavy = crate::common::heavy();
    let url = fresh_database("class_approve");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let a = Host::new(&url, "box-a");
    let b = Host::new(&url, "box-b");
    let c = Host::new(&url, "box-c");
    let base = a.live();
    assert_eq!(b.live().digest(), base.digest());
    // box-c's live profile moved on: the stage's evidence is not about it.
    let moved = staged::variant(&base, 0.005);
    std::fs::write(c.live_path(), moved.canonical()).unwrap();
    let candidate = staged::variant(&base, 0.003);
    let id = rt.block_on(async {
        let ledger = ledger_of(&url, "box-a").await;
        let id = staged::stage_win_on(&ledger, &base, &candidate).await;
        ledger.close().await;
        id
    });

    let out = b.run(&[
        "stage",
        "approve",
        &id.to_string(),
        "--class",
        "--by",
        "alice",
    ]);
    let log = text(&out);
    assert!(out.status.success(), "{log}");
    assert!(log.contains("Approved for class tiny"), "{log}");
    assert_eq!(b.live().digest(), base.digest(), "the CLI writes no file");

    // Each daemon applies it at start: its own stack's, and a classmate's.
    for host in [&a, &b] {
        let out = host.run(&["run", "--cycles", "0"]);
        let log = text(&out);
        assert!(out.status.success(), "{log}");
        assert!(
            log.contains(&format!(
                "applied approved stage {id} (by alice, for class tiny)"
            )),
            "{log}"
        );
        assert_eq!(host.live().digest(), candidate.digest(), "{log}");
    }
    let out = c.run(&["run", "--cycles", "0"]);
    let log = text(&out);
    assert!(out.status.success(), "{log}");
    assert!(
        log.contains(&format!(
            "approved stage {id} (by alice, for class tiny) NOT applied"
        )),
        "{log}"
    );
    assert_eq!(c.live().digest(), moved.digest());
    // Settled once: a second start applies nothing.
    let again = b.run(&["run", "--cycles", "0"]);
    assert!(
        !text(&again).contains("applied approved stage"),
        "{}",
        text(&again)
    );

    // `stage show` lists each host's apply.
    let shown = c.run(&["stage", "show", &id.to_string()]);
    let shown = String::from_utf8_lossy(&shown.stdout).into_owned();
    for needed in [
        format!(
            "applied to {} by the daemon of stack box-a",
            a.live_path().display()
        ),
        "approved for class tiny: each other host of the class applies it".to_string(),
        format!(
            "box-b          applied to {} by the daemon of stack box-b",
            b.live_path().display()
        ),
        "box-c          NOT applied: the live profile changed".to_string(),
    ] {
        assert!(shown.contains(&needed), "{needed:?} missing:\n{shown}");
    }
    let json = c.run(&["stage", "show", &id.to_string(), "--json"]);
    let json: Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(json["approved_for_class"], "tiny");
    let states: Vec<(String, String)> = json["class_applies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            (
                h["stack"].as_str().unwrap().into(),
                h["apply"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert_eq!(
        states,
        vec![
            ("box-b".into(), "applied".into()),
            ("box-c".into(), "refused".into())
        ]
    );
    for host in [&a, &b, &c] {
        let (code, report) = staged::check(&host.demo.path("config.toml"));
        assert_eq!(code, 0, "{report}");
    }
}

#[test]
fn approving_for_the_class_on_a_sqlite_ledger_is_a_usage_error() {
    let demo = Demo::new("bandit", PROFILE, INIT, 3 * 64 * 128 * 4, 8);
    let base = Profile::load(&demo.path("start.toml")).unwrap();
    let id = staged::stage_win(
        &demo.path("ledger/orchestrator.db"),
        &base,
        &staged::variant(&base, 0.003),
    );
    let out = demo
        .cmd()
        .args([
            "stage",
            "approve",
            &id.to_string(),
            "--class",
            "--by",
            "alice",
        ])
        .output()
        .unwrap();
    let log = text(&out);
    assert_eq!(out.status.code(), Some(2), "{log}");
    assert!(
        log.contains("whose daemons share a PostgreSQL ledger")
            && log.contains("Approve it without --class. Nothing was recorded."),
        "{log}"
    );
    assert_eq!(staged::stages(&demo.path("config.toml"))[0].1, "staged");
}
