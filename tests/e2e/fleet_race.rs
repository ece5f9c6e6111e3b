//! Issue #18, "many daemons, one database": four real daemons, each with its
//! own embedded tinyk3 (its own directory, live profile, `[stack] name` and
//! ports), write one fresh PostgreSQL ledger for a few dozen cycles while
//! other processes race `stage approve` and `stage reject` on every stage
//! as soon as it is staged, two deciders per stage. Afterwards: every
//! daemon's cycles are closed and carry its stack, no stage was decided
//! twice, no row is lost, and no daemon recovered, confirmed or expired
//! another stack's cycles or stages.
//!
//! The judge is the shipped one, loosened only as `bound_win` loosens it:
//! the menu narrowed to `stage_speculative` (from a profile without
//! speculation, whose drafts make tinyk3 several times faster, so its wins
//! are decided against the bound `max_noise_floor` without a noise floor
//! and every host stages within a few cycles) and `max_pairs = 8`.

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use sqlx::postgres::{PgConnectOptions, PgConnection};
use sqlx::{Connection, Row};

use crate::demo::Demo;
use crate::postgres_stack_lock::{PG_PASSWORD_VAR, fresh_database};
use crate::stage_concurrency::{Outcome, outcome};

/// bound_win's checkpoint and starting profile (no speculation yet), but
/// without a far tier: its address is a per-host port here, and without it
/// the four hosts' live profiles are identical, as on a fleet of identical
/// boxes. So their rows differ by stack only, and a read that is not kept
/// to its stack finds another host's win, duplicate or refusal as its own.
const INIT: &str = r#""--seed", "3", "--layers", "4", "--experts", "16", "--top-k", "2", "--d-model", "64", "--d-expert", "128", "--d-dense", "256", "--heads", "2", "--vocab", "512""#;
const PROFILE: &str = "[memory]\nbudget_gb = 0.01\ntrunk_gb = 0.001\ncache_gb = 0.004\n";
const HOSTS: usize = 4;
/// Closed cycles, all hosts together, after which the daemons may be
/// stopped.
const TARGET_CYCLES: usize = 36;
/// Stages a racer decided, after which the daemons may be stopped.
const TARGET_DECIDED: usize = 4;
/// How long the whole fleet waits converged, nothing left to decide,
/// before it is stopped early.
const SETTLED_FOR: Duration = Duration::from_secs(10);
/// The daemons run at most this long, whatever they reached.
const RUN_FOR: Duration = Duration::from_secs(170);

/// One host: a demo directory whose config names the shared database and
/// this host's stack, and its daemon once started.
struct Host {
    demo: Demo,
    stack: String,
    daemon: Option<Child>,
}

impl Host {
    fn new(i: usize, url: &str) -> Host {
        let demo = Demo::new("bandit", PROFILE, INIT, 3 * 64 * 128 * 4, 8);
        let stack = format!("box-{i}");
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
        s.insert("name".into(), stack.clone().into());
        s.insert("class".into(), "tiny".into());
        s.insert(
            "unsupported".into(),
            toml::Value::Array(
                ["rerank_pins", "deepen_warm_set", "rebalance_trunk_cache"]
                    .map(Into::into)
                    .into(),
            ),
        );
        std::fs::write(&path, toml::to_string(&config).unwrap()).unwrap();
        Host {
            demo,
            stack,
            daemon: None,
        }
    }

    fn config(&self) -> PathBuf {
        self.demo.path("config.toml")
    }

    fn start(&mut self) {
        let child = Command::new(assert_cmd::cargo::cargo_bin("orchestrator"))
            .arg("--config")
            .arg(self.config())
            .arg("run")
            // Files, not pipes: a full pipe would stall the daemon mid-line.
            .stdout(std::fs::File::create(self.demo.path("daemon.out")).unwrap())
            .stderr(std::fs::File::create(self.demo.path("daemon.log")).unwrap())
            .spawn()
            .unwrap();
        self.daemon = Some(child);
    }

    /// The daemon waits converged: its last line says so. A host whose
    /// drafts are all decided runs no cycle that can tell it nothing new.
    fn converged(&self) -> bool {
        let out = std::fs::read_to_string(self.demo.path("daemon.out")).unwrap_or_default();
        out.lines()
            .last()
            .is_some_and(|l| l.starts_with("wait        ") && l.contains("converged"))
    }

    fn log(&self) -> String {
        let tail = |name: &str| {
            let text = std::fs::read_to_string(self.demo.path(name)).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            lines[lines.len().saturating_sub(30)..].join("\n")
        };
        format!(
            "--- {} stdout\n{}\n--- stderr\n{}",
            self.stack,
            tail("daemon.out"),
            tail("daemon.log")
        )
    }

    /// SIGINT, then the daemon's exit; `None` when it was not running.
    fn stop(&mut self) -> Option<std::process::ExitStatus> {
        let mut child = self.daemon.take()?;
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return Some(status);
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "{} did not stop within 90 s of SIGINT\n{}",
                    self.stack,
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for Host {
    /// A failing test stops its daemons too (they stop their tinyk3).
    fn drop(&mut self) {
        if self.daemon.is_some() {
            let _ = self.stop();
        }
    }
}

/// The test's own connection to the shared ledger, for what no command
/// shows (which rows reference which).
struct Db {
    rt: tokio::runtime::Runtime,
    conn: PgConnection,
}

impl Db {
    fn connect(url: &str) -> Db {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let mut options: PgConnectOptions = url.parse().unwrap();
        if let Ok(p) = std::env::var(PG_PASSWORD_VAR) {
            options = options.password(&p);
        }
        let conn = rt.block_on(PgConnection::connect_with(&options)).unwrap();
        Db { rt, conn }
    }

    /// Every row of `sql`, each column read as text (NULL as "NULL").
    fn rows(&mut self, sql: &str) -> Vec<Vec<String>> {
        self.try_rows(sql).unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    fn try_rows(&mut self, sql: &str) -> Result<Vec<Vec<String>>, sqlx::Error> {
        let rows = self
            .rt
            .block_on(sqlx::query(sql).fetch_all(&mut self.conn))?;
        Ok(rows
            .iter()
            .map(|r| {
                (0..r.len())
                    .map(|i| {
                        // Text, or a count.
                        r.try_get::<Option<String>, _>(i)
                            .or_else(|_| {
                                r.try_get::<Option<i64>, _>(i)
                                    .map(|n| n.map(|n| n.to_string()))
                            })
                            .unwrap()
                            .unwrap_or_else(|| "NULL".into())
                    })
                    .collect()
            })
            .collect())
    }

    fn count(&mut self, sql: &str) -> usize {
        self.rows(sql)[0][0].parse().unwrap()
    }
}

/// Two deciders, an approver and a rejecter, started at once on `stage`
/// with its own stack's config (the live profile an approval writes is that
/// stack's); the thread returns what each reported.
fn race(config: PathBuf, stage: i64) -> std::thread::JoinHandle<Vec<(String, Outcome)>> {
    std::thread::spawn(move || {
        let id = stage.to_string();
        let deciders: Vec<(String, bool, Child)> = [true, false]
            .into_iter()
            .map(|approve| {
                let by = format!("{}-{stage}", if approve { "approver" } else { "rejecter" });
                let mut cmd = Command::new(assert_cmd::cargo::cargo_bin("orchestrator"));
                cmd.arg("--config").arg(&config).arg("stage");
                if approve {
                    cmd.args(["approve", &id, "--by", &by]);
                } else {
                    cmd.args(["reject", &id, "--by", &by, "--reason", "racing"]);
                }
                let child = cmd
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap();
                (by, approve, child)
            })
            .collect();
        deciders
            .into_iter()
            .map(|(by, approve, child)| {
                let out = child.wait_with_output().unwrap();
                let o = outcome(&by, approve, &out);
                (by, o)
            })
            .collect()
    })
}

/// What the two deciders of each raced stage reported, by stage id.
type Raced = Vec<(i64, Vec<(String, Outcome)>)>;

#[test]
fn four_daemons_on_one_postgres_ledger_keep_to_their_own_stacks_while_approvals_race() {
    let _heavy = crate::common::heavy();
    let t0 = Instant::now();
    let url = fresh_database("fleet_race");
    let mut hosts: Vec<Host> = (0..HOSTS).map(|i| Host::new(i, &url)).collect();
    let mut db = Db::connect(&url);
    start_fleet(&mut hosts, &mut db);
    let started = Instant::now();
    let raced = race_stages(&mut hosts, &mut db);

    // With all four daemons running, each host's `ledger --check` passes:
    // another stack's running cycle is legal while its daemon holds its lock.
    for h in &hosts {
        let (code, report) = crate::staged::check(&h.config());
        assert_eq!(code, 0, "{} while the fleet runs: {report:#}", h.stack);
    }
    // Stop the fleet: SIGINT, each ends or abandons its cycle cleanly.
    for h in &mut hosts {
        let status = h.stop().unwrap();
        assert!(status.success(), "{}: {status}\n{}", h.stack, h.log());
        let stderr = std::fs::read_to_string(h.demo.path("daemon.log")).unwrap();
        assert!(stderr.contains("stopped after"), "{}", h.log());
    }

    let total = assert_cycles_closed_per_stack(&hosts, &mut db);
    assert_nothing_across_stacks(&mut db);
    let decided = assert_decided_once(&raced, &mut db);
    assert!(
        decided >= 1,
        "no stage was staged and decided by a racer in {:.0} s: the race was never run\n{}",
        started.elapsed().as_secs_f64(),
        hosts.iter().map(Host::log).collect::<Vec<_>>().join("\n")
    );
    assert_no_lost_rows(&hosts, &mut db);
    for h in &hosts {
        h.demo.assert_children_gone();
    }
    eprintln!(
        "{total} cycles on {HOSTS} stacks; {} stages raced, {decided} decided by a racer; {:.0} s",
        raced.len(),
        t0.elapsed().as_secs_f64()
    );
}

/// Starts two hosts, and the other two once those are both mid-cycle, so
/// their start-up recovery (which aborts a dead daemon's `running` cycles)
/// runs beside other stacks' running cycles.
fn start_fleet(hosts: &mut [Host], db: &mut Db) {
    hosts[0].start();
    hosts[1].start();
    let deadline = Instant::now() + Duration::from_secs(120);
    // (The first daemon creates the tables: until then the query fails.)
    let measuring = "SELECT count(DISTINCT c.stack) FROM runs r \
         JOIN experiments e ON e.id = r.experiment_id \
         JOIN cycles c ON c.id = e.cycle_id WHERE c.status = 'running'";
    while db.try_rows(measuring).map_or(true, |r| r[0][0] != "2") {
        for h in &mut hosts[..2] {
            if let Some(status) = h.daemon.as_mut().unwrap().try_wait().unwrap() {
                panic!(
                    "{} exited ({status}) before measuring\n{}",
                    h.stack,
                    h.log()
                );
            }
        }
        assert!(
            Instant::now() < deadline,
            "the first two daemons never measured at once\n{}\n{}",
            hosts[0].log(),
            hosts[1].log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    hosts[2].start();
    hosts[3].start();
}

/// Races every stage the moment it is staged, until the fleet has run its
/// cycles and decided enough stages (or the time is up); then lets the
/// deciders still at work finish.
fn race_stages(hosts: &mut [Host], db: &mut Db) -> Raced {
    let config_of: BTreeMap<String, PathBuf> = hosts
        .iter()
        .map(|h| (h.stack.clone(), h.config()))
        .collect();
    let started = Instant::now();
    let mut raced: BTreeMap<i64, std::thread::JoinHandle<Vec<(String, Outcome)>>> = BTreeMap::new();
    let mut settled_since: Option<Instant> = None;
    loop {
        for row in db.rows("SELECT id::text, stack FROM stages WHERE state = 'staged' ORDER BY id")
        {
            let id: i64 = row[0].parse().unwrap();
            if let std::collections::btree_map::Entry::Vacant(e) = raced.entry(id) {
                let config = config_of
                    .get(&row[1])
                    .unwrap_or_else(|| panic!("stage {id} has no host's stack: {row:?}"));
                e.insert(race(config.clone(), id));
            }
        }
        for h in hosts.iter_mut() {
            if let Some(status) = h.daemon.as_mut().unwrap().try_wait().unwrap() {
                panic!("{} exited ({status}) while racing\n{}", h.stack, h.log());
            }
        }
        let closed = db.count("SELECT count(*) FROM cycles WHERE status <> 'running'");
        let decided = db.count(
            "SELECT count(*) FROM stages WHERE state IN ('approved', 'rejected') \
             AND decided_by <> 'orchestrator'",
        );
        // Every host waiting converged with no stage left to decide, for
        // longer than a waiting daemon takes to see a decision and wake
        // (its poll is a second or two): the fleet would run nothing more
        // until the time is up.
        let settled = hosts.iter().all(Host::converged)
            && db.count("SELECT count(*) FROM stages WHERE state = 'staged'") == 0;
        settled_since = settled.then(|| settled_since.unwrap_or_else(Instant::now));
        let quiet = settled_since.is_some_and(|t| t.elapsed() > SETTLED_FOR);
        if (closed >= TARGET_CYCLES && decided >= TARGET_DECIDED)
            || (quiet && decided >= 1)
            || started.elapsed() > RUN_FOR
        {
            break;
        }
        std::thread::sleep(Duration::from_millis(150));
    }
    raced
        .into_iter()
        .map(|(id, t)| (id, t.join().expect("a decider thread")))
        .collect()
}

/// Every daemon's cycles are closed, each carries its daemon's stack and
/// class, and as many are stored per stack as its daemon printed lines
/// for; returns how many cycles the fleet ran.
fn assert_cycles_closed_per_stack(hosts: &[Host], db: &mut Db) -> usize {
    assert_eq!(
        db.rows("SELECT id::text, stack FROM cycles WHERE status = 'running'"),
        Vec::<Vec<String>>::new(),
        "cycles left running"
    );
    assert_eq!(
        db.count(
            "SELECT count(*) FROM cycles WHERE stack IS NULL OR class IS DISTINCT FROM 'tiny'"
        ),
        0
    );
    let mut total = 0;
    for h in hosts {
        let printed = std::fs::read_to_string(h.demo.path("daemon.out"))
            .unwrap()
            .lines()
            .filter(|l| l.starts_with("cycle"))
            .count();
        let stored = db.count(&format!(
            "SELECT count(*) FROM cycles WHERE stack = '{}'",
            h.stack
        ));
        assert_eq!(
            stored,
            printed,
            "{}'s cycles in the ledger\n{}",
            h.stack,
            h.log()
        );
        // Two cycles each, unless a host's loop converged after one (on a
        // machine too noisy for its first A/B and floor: the draft's line
        // is done and the floor waits out its back-off), which it says.
        let waits = std::fs::read_to_string(h.demo.path("daemon.out"))
            .unwrap()
            .contains("wait        converged");
        assert!(
            stored >= 2 || (stored == 1 && waits),
            "{} ran {stored} cycle(s)\n{}",
            h.stack,
            h.log()
        );
        total += stored;
    }
    // Floors and reference hashes are kept per stack too.
    let keyed: HashSet<String> = db
        .rows("SELECT DISTINCT stack FROM reference_hashes")
        .into_iter()
        .map(|r| r[0].clone())
        .collect();
    let names: HashSet<String> = hosts.iter().map(|h| h.stack.clone()).collect();
    assert_eq!(keyed, names, "one reference hash per stack");
    total
}

/// No daemon recovered, confirmed or expired another stack's cycles or
/// stages.
fn assert_nothing_across_stacks(db: &mut Db) {
    // Only a stack's last cycle (the one SIGINT interrupted) may be
    // aborted, and none was closed by a starting daemon's recovery.
    assert_eq!(
        db.rows(
            "SELECT id::text, stack, error FROM cycles WHERE error LIKE '%found `running` at start%'"
        ),
        Vec::<Vec<String>>::new(),
        "a starting daemon aborted a running cycle"
    );
    let not_last_aborted = db.rows(
        "SELECT c.id::text, c.stack FROM cycles c WHERE c.status = 'aborted' \
         AND EXISTS (SELECT 1 FROM cycles n WHERE n.stack = c.stack AND n.id > c.id)",
    );
    assert!(
        not_last_aborted.is_empty(),
        "aborted cycles a later cycle of their stack followed: {not_last_aborted:?}"
    );
    // Every stage belongs to its win's stack and names the stack that
    // confirmed it; the four hosts share one class, so a classmate may
    // confirm another's win (#18 item 4), but only within the class and
    // under the win's one claim.
    assert_eq!(
        db.rows(
            "SELECT s.id::text, s.stack, cw.stack, cc.stack, s.confirmed_by_stack FROM stages s \
             JOIN experiments w ON w.id = s.experiment_id JOIN cycles cw ON cw.id = w.cycle_id \
             JOIN experiments k ON k.id = s.confirmation_id JOIN cycles cc ON cc.id = k.cycle_id \
             WHERE s.stack IS DISTINCT FROM cw.stack \
                OR coalesce(s.confirmed_by_stack, cw.stack) IS DISTINCT FROM cc.stack"
        ),
        Vec::<Vec<String>>::new(),
        "a stage not of its win's stack, or naming another confirmer"
    );
    assert_eq!(
        db.rows(
            "SELECT k.id::text, ck.stack, ck.class, cw.stack, cw.class FROM experiments k \
             JOIN cycles ck ON ck.id = k.cycle_id JOIN experiments w ON w.id = k.confirmation_of \
             JOIN cycles cw ON cw.id = w.cycle_id WHERE ck.stack IS DISTINCT FROM cw.stack \
               AND (cw.class IS NULL OR ck.class IS DISTINCT FROM cw.class)"
        ),
        Vec::<Vec<String>>::new(),
        "a daemon confirmed the win of a stack outside its class"
    );
    assert_eq!(
        db.rows(
            "SELECT s.id::text, s.confirmation_id::text, coalesce(cl.confirmation_id::text, 'none') \
             FROM stages s LEFT JOIN confirmation_claims cl ON cl.win_experiment_id = s.experiment_id \
             WHERE s.confirmation_id IS DISTINCT FROM cl.confirmation_id"
        ),
        Vec::<Vec<String>>::new(),
        "a stage whose confirmation is not its win's claimed one"
    );
    // No win was judged twice: one measured confirmation per win at most
    // (an interrupted one, `failed`, is retried).
    assert_eq!(
        db.rows(
            "SELECT k.confirmation_of::text, count(*)::text FROM experiments k \
             JOIN verdicts v ON v.experiment_id = k.id \
             WHERE k.confirmation_of IS NOT NULL \
               AND v.kind IN ('win', 'loss', 'within_noise', 'inconclusive') \
             GROUP BY k.confirmation_of HAVING count(*) > 1"
        ),
        Vec::<Vec<String>>::new(),
        "a win confirmed twice"
    );
    // An expired stage's own stack's live profile moved on, which only an
    // approval of one of that stack's stages does.
    assert_eq!(
        db.rows(
            "SELECT e.id::text, e.stack FROM stages e WHERE e.state = 'expired' \
             AND NOT EXISTS (SELECT 1 FROM stages a WHERE a.state = 'approved' \
               AND a.stack = e.stack AND a.decided_at <= e.decided_at)"
        ),
        Vec::<Vec<String>>::new(),
        "a stage expired although its own stack's live profile never changed"
    );
}

/// No stage was decided twice: per raced stage at most one decider won,
/// the ledger holds its decision, and the loser was told who won; every
/// decided stage was raced. Returns how many a racer decided.
fn assert_decided_once(raced: &Raced, db: &mut Db) -> usize {
    let stages: BTreeMap<i64, (String, String)> = db
        .rows("SELECT id::text, state, coalesce(decided_by, 'NULL') FROM stages")
        .into_iter()
        .map(|r| (r[0].parse().unwrap(), (r[1].clone(), r[2].clone())))
        .collect();
    let mut decided_by_racer = 0;
    for (id, results) in raced {
        let (state, by) = &stages[id];
        let winners: Vec<&(String, Outcome)> = results
            .iter()
            .filter(|(_, o)| matches!(o, Outcome::Won(_)))
            .collect();
        assert!(
            winners.len() <= 1,
            "stage {id}: two deciders won: {results:?}"
        );
        match winners.first() {
            Some((who, Outcome::Won(what))) => {
                assert_eq!(state, what, "stage {id}: {results:?}");
                let expected = if *what == "expired" {
                    "orchestrator"
                } else {
                    who.as_str()
                };
                assert_eq!(by, expected, "stage {id}: {results:?}");
                if *what != "expired" {
                    decided_by_racer += 1;
                }
            }
            // Its daemon expired it before either decider got to it.
            _ => assert_eq!(
                (state.as_str(), by.as_str()),
                ("expired", "orchestrator"),
                "stage {id}: {results:?}"
            ),
        }
        for (who, o) in results {
            if let Outcome::Lost { state: s, by: b } = o {
                assert_eq!(
                    (s.as_str(), b.as_str()),
                    (state.as_str(), by.as_str()),
                    "stage {id}: {who} was told the wrong winner"
                );
            }
        }
    }
    let unraced: Vec<_> = stages
        .iter()
        .filter(|(id, (state, _))| {
            !["staged", "expired"].contains(&state.as_str()) && !raced.iter().any(|(r, _)| r == *id)
        })
        .collect();
    assert!(
        unraced.is_empty(),
        "stages decided by nobody the test started: {unraced:?}"
    );
    decided_by_racer
}

/// No lost row: every verdict's cycle and experiment, every run's
/// experiment, every experiment's cycle exist, every cycle has a verdict;
/// then the ledger's own check, from every host.
fn assert_no_lost_rows(hosts: &[Host], db: &mut Db) {
    for (what, sql) in [
        (
            "verdicts without their cycle or experiment",
            "SELECT count(*) FROM verdicts v LEFT JOIN cycles c ON c.id = v.cycle_id \
             LEFT JOIN experiments e ON e.id = v.experiment_id \
             WHERE c.id IS NULL OR (v.experiment_id IS NOT NULL AND e.id IS NULL)",
        ),
        (
            "runs without their experiment",
            "SELECT count(*) FROM runs r LEFT JOIN experiments e ON e.id = r.experiment_id \
             WHERE e.id IS NULL",
        ),
        (
            "experiments without their cycle",
            "SELECT count(*) FROM experiments e LEFT JOIN cycles c ON c.id = e.cycle_id \
             WHERE c.id IS NULL",
        ),
        (
            "cycles without a verdict",
            "SELECT count(*) FROM cycles c WHERE NOT EXISTS \
             (SELECT 1 FROM verdicts v WHERE v.cycle_id = c.id)",
        ),
    ] {
        assert_eq!(db.count(sql), 0, "{what}");
    }
    for h in hosts {
        let (code, report) = crate::staged::check(&h.config());
        assert_eq!(code, 0, "{}: {report:#}", h.stack);
    }
}
