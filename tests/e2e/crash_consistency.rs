//! Crash consistency: the real daemon on the embedded tiny stack, killed with
//! SIGKILL at 30 seeded points spread across the phases of its cycles, and
//! restarted each time on the same ledger. After every kill the ledger holds
//! nothing but recoverable `running` cycles; after every restart `ledger
//! --check` passes, no stage or approval is lost, the live profile is whole
//! (old or new, never torn, also while `stage approve` races the kill), and
//! every engine process the dead daemon started is gone.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::demo::Demo;
use crate::staged;
use crate::staged::Proc;
use orchestrator::profile::Profile;
use orchestrator::vocab::Digest;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const KILLS: usize = 30;
const SEED: u64 = 0x5eed_0009;
const PHASES: [&str; 7] = [
    "observe", "propose", "plan", "measure", "judge", "record", "stage",
];

const TINY_INIT: &str = r#""--seed", "1", "--layers", "4", "--experts", "16", "--top-k", "2", "--d-model", "64", "--d-expert", "128", "--d-dense", "256", "--heads", "2", "--vocab", "512""#;
const START: &str = "[memory]\nbudget_gb = 0.05\ntrunk_gb = 0.03\ncache_gb = 0.002\n[far]\naddr = \"FAR\"\nwarm_set = 0\n";

/// A running daemon and its stderr, line by line with arrival times.
struct Daemon {
    child: Child,
    lines: Receiver<String>,
    log: Arc<Mutex<String>>,
}

impl Daemon {
    fn start(config: &Path) -> Daemon {
        let mut child = Command::new(assert_cmd::cargo::cargo_bin("orchestrator"))
            .arg("--config")
            .arg(config)
            .args(["--log", "info,orchestrator::cycle=debug", "run"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (tx, rx) = channel();
        let log = Arc::new(Mutex::new(String::new()));
        let shared = Arc::clone(&log);
        let stderr = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let mut l = shared.lock().unwrap();
                l.push_str(&line);
                l.push('\n');
                let _ = tx.send(line);
            }
        });
        Daemon {
            child,
            lines: rx,
            log,
        }
    }

    /// Waits for a line containing `needle`; returns the last phase line
    /// seen on the way (or `None` on timeout or exit).
    fn wait_for(&self, needle: &str, limit: Duration, last_phase: &mut Option<String>) -> bool {
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    if let Some(p) = PHASES.iter().find(|p| line.contains(&format!("phase {p}"))) {
                        *last_phase = Some(p.to_string());
                    }
                    if line.contains(needle) {
                        return true;
                    }
                }
                Err(RecvTimeoutError::Timeout) | Err(RecvTimeoutError::Disconnected) => {
                    return false;
                }
            }
        }
    }

    fn kill(&mut self) {
        // SAFETY: kill(2) on our own child, which we have not reaped yet.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGKILL) };
        self.child.wait().unwrap();
    }

    fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }
}

fn digest_of(path: &Path) -> Digest {
    Profile::load(path)
        .unwrap_or_else(|e| panic!("the live profile is not whole: {e}"))
        .digest()
}

/// The paths every step reads: the config, the live profile, the ledger,
/// and the demo directory (in every argv of the stack it starts).
struct Paths {
    config: PathBuf,
    live: PathBuf,
    db: PathBuf,
    needle: String,
}

/// A thread that parses the live profile over and over for the whole test:
/// a torn file would fail to parse at least once.
struct TornReader {
    stop: Arc<AtomicBool>,
    reads: Arc<AtomicUsize>,
    torn: Arc<Mutex<Vec<String>>>,
    thread: std::thread::JoinHandle<()>,
}

impl TornReader {
    fn start(path: PathBuf) -> TornReader {
        let stop = Arc::new(AtomicBool::new(false));
        let reads = Arc::new(AtomicUsize::new(0));
        let torn = Arc::new(Mutex::new(Vec::<String>::new()));
        let thread = {
            let (stop, reads, torn) = (Arc::clone(&stop), Arc::clone(&reads), Arc::clone(&torn));
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    match std::fs::read_to_string(&path) {
                        Ok(text) => {
                            if let Err(e) = Profile::parse(&text, &path) {
                                torn.lock().unwrap().push(format!("{e}: {text:?}"));
                            }
                            reads.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => torn.lock().unwrap().push(format!("unreadable: {e}")),
                    }
                    std::thread::sleep(Duration::from_millis(3));
                }
            })
        };
        TornReader {
            stop,
            reads,
            torn,
            thread,
        }
    }

    /// Stops the thread; returns how many reads it made and the torn ones.
    fn finish(self) -> (usize, Vec<String>) {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap();
        let torn = self.torn.lock().unwrap().clone();
        (self.reads.load(Ordering::Relaxed), torn)
    }
}

/// Where the kills landed, for the spread checks at the end.
#[derive(Default)]
struct Tally {
    /// The seeded phase whose line appeared right before the kill.
    targeted: BTreeMap<&'static str, usize>,
    /// The last phase line the daemon printed before it died.
    killed_in: BTreeMap<String, usize>,
    orphans_reaped: usize,
    approvals: usize,
    unclosed_after_kill: usize,
}

/// The daemon under test and what the next kill carries over from the last.
struct Run {
    daemon: Daemon,
    /// The last phase line the current daemon printed.
    seen: Option<String>,
    rng: StdRng,
    /// The cache size of the last racing approval's candidate.
    cache_gb: f64,
    tally: Tally,
}

/// A `stage approve` started just before a kill: the stage, the approver.
type RacingApproval = (orchestrator::ledger::StageId, Child);

#[test]
fn thirty_sigkills_across_the_cycle_lose_nothing_and_leave_no_orphan() {
    let _heavy = crate::common::heavy();
    let t0 = Instant::now();
    let demo = Demo::new("bandit", START, TINY_INIT, 3 * 64 * 128 * 4, 8);
    // Departs from the shipped config: a floor stale by the next cycle keeps
    // `remeasure` offered, so the loop never converges and waits (which
    // runs no cycle phase to kill at) before the last of the 30 kills.
    let config = demo.path("config.toml");
    let text = std::fs::read_to_string(&config).unwrap();
    assert!(text.contains("noise_floor_max_age_s = 86400"), "{text}");
    std::fs::write(
        &config,
        text.replace(
            "noise_floor_max_age_s = 86400",
            "noise_floor_max_age_s = 0.001",
        ),
    )
    .unwrap();
    let paths = Paths {
        config: demo.path("config.toml"),
        live: demo.path("ledger/profiles/live.toml"),
        db: demo.path("ledger/orchestrator.db"),
        needle: demo.dir.path().display().to_string(),
    };
    // The live profile exists before the first start, so wins can be staged
    // on it (the daemon copies the starting profile only when it is missing).
    std::fs::create_dir_all(paths.live.parent().unwrap()).unwrap();
    std::fs::copy(demo.path("start.toml"), &paths.live).unwrap();
    let reader = TornReader::start(paths.live.clone());

    let mut run = Run {
        daemon: Daemon::start(&paths.config),
        seen: None,
        rng: StdRng::seed_from_u64(SEED),
        cache_gb: 0.002,
        tally: Tally::default(),
    };
    assert!(
        run.daemon
            .wait_for("phase observe", Duration::from_secs(300), &mut run.seen),
        "the first start never reached a cycle:\n{}",
        run.daemon.log()
    );
    for k in 0..KILLS {
        kill_once(k, &mut run, &paths);
    }

    let reads = stop_cleanly(run.daemon, reader, &paths);
    check_the_spread(&run.tally, reads, demo.ledger().len(), t0);
}

/// One kill: at a seeded phase (maybe with a win to stage, maybe racing a
/// `stage approve`), then the checks of the dead daemon's ledger and live
/// profile, the restart, and the checks that nothing was lost.
fn kill_once(k: usize, run: &mut Run, paths: &Paths) {
    let (phase, delay) = choose_kill_point(&mut run.rng);
    if phase == "stage" {
        leave_a_win_to_stage(paths);
    }
    let race_approval = k % 5 == 2;
    let before_live = digest_of(&paths.live);
    let mut approve: Option<RacingApproval> = None;
    let mut candidate_digest = None;
    if race_approval {
        let (racing, candidate) = race_an_approval(paths, &mut run.cache_gb);
        approve = Some(racing);
        candidate_digest = Some(candidate);
    }
    let (reached, last_phase) = wait_for_phase(&run.daemon, phase, delay, run.seen.clone());
    let stages_before = staged::stages(&paths.config);
    run.daemon.kill();
    if reached {
        *run.tally.targeted.entry(phase).or_default() += 1;
    }
    *run.tally
        .killed_in
        .entry(last_phase.clone().unwrap_or_else(|| "start-up".into()))
        .or_default() += 1;

    // The dead daemon's engines are still running now: remember them.
    let approver: Vec<i32> = approve.iter().map(|(_, c)| c.id() as i32).collect();
    let orphans: Vec<Proc> = staged::processes_mentioning(&paths.needle, &approver)
        .into_iter()
        .map(|(p, _)| p)
        .collect();
    run.tally.orphans_reaped += orphans.len();

    let approved = approve.map(|racing| finish_approval(k, racing, &mut run.tally));
    check_the_ledger_after_kill(k, paths, &last_phase, &mut run.tally);
    check_the_live_profile_after_kill(k, paths, &before_live, candidate_digest.as_ref(), approved);
    restart(k, run, paths, &orphans);
    check_no_stage_was_lost(k, paths, &stages_before, approved);
}

/// A seeded phase to kill in, and how long after its line.
fn choose_kill_point(rng: &mut StdRng) -> (&'static str, Duration) {
    let phase = PHASES[rng.random_range(0..PHASES.len())];
    // Mid-measurement for `measure` (a run is in flight for most of
    // it), a little after the line for the steps that take a while, at
    // once for the instants between the last run and the next cycle.
    let delay = match phase {
        "measure" => Duration::from_millis(rng.random_range(0..1500)),
        "observe" | "propose" | "plan" => Duration::from_millis(rng.random_range(0..20)),
        _ => Duration::ZERO,
    };
    (phase, delay)
}

/// A stage comes only from a confirmed win: leave the daemon an
/// unconfirmed win of a bigger expert cache (a real speedup on
/// this checkpoint) to confirm, by measuring it, and stage.
fn leave_a_win_to_stage(paths: &Paths) {
    let live = Profile::load(&paths.live).unwrap();
    let bigger = staged::variant(&live, 0.016);
    if bigger.digest() != live.digest() {
        staged::unconfirmed_win(&paths.db, &live, &bigger);
    }
}

/// Stages a win of a slightly bigger cache than the last one and starts
/// `stage approve` on it; returns the racing approval and the candidate's
/// digest.
fn race_an_approval(paths: &Paths, cache_gb: &mut f64) -> (RacingApproval, Digest) {
    let live = Profile::load(&paths.live).unwrap();
    *cache_gb += 0.001;
    let candidate = staged::variant(&live, *cache_gb);
    let candidate_digest = candidate.digest();
    let id = staged::stage_win(&paths.db, &live, &candidate);
    let child = Command::new(assert_cmd::cargo::cargo_bin("orchestrator"))
        .arg("--config")
        .arg(&paths.config)
        .args(["stage", "approve", &id.0.to_string(), "--by", "crash-test"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    ((id, child), candidate_digest)
}

/// Waits for `phase`'s line (a bounded time), then `delay`; returns whether
/// the line came and the last phase line seen, starting from `seen`.
fn wait_for_phase(
    daemon: &Daemon,
    phase: &str,
    delay: Duration,
    seen: Option<String>,
) -> (bool, Option<String>) {
    let mut last_phase = seen;
    // `stage` comes only with a confirmed win: wait a bounded time for
    // it, then kill wherever the timeline is.
    let limit = if phase == "stage" { 20 } else { 60 };
    let reached = daemon.wait_for(
        &format!("phase {phase}"),
        Duration::from_secs(limit),
        &mut last_phase,
    );
    std::thread::sleep(delay);
    // Lines that arrived during the delay still count for the phase.
    while let Ok(line) = daemon.lines.try_recv() {
        if let Some(p) = PHASES.iter().find(|p| line.contains(&format!("phase {p}"))) {
            last_phase = Some(p.to_string());
        }
    }
    (reached, last_phase)
}

/// The approval that raced the kill succeeded, without a raw lock error.
fn finish_approval(
    k: usize,
    (id, child): RacingApproval,
    tally: &mut Tally,
) -> orchestrator::ledger::StageId {
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        !stderr.contains("database is locked"),
        "kill {k}: approve saw a raw lock error: {stderr}"
    );
    assert!(out.status.success(), "kill {k}: approve failed: {stderr}");
    tally.approvals += 1;
    id
}

/// With no daemon, the only thing a kill may leave is an open cycle.
fn check_the_ledger_after_kill(
    k: usize,
    paths: &Paths,
    last_phase: &Option<String>,
    tally: &mut Tally,
) {
    let (code, report) = staged::check(&paths.config);
    let violations = report["violations"].as_array().unwrap();
    assert!(
        violations.iter().all(|v| v["rule"] == "unclosed_cycle"),
        "kill {k} in {last_phase:?}: {report:#}"
    );
    assert_eq!(code, if violations.is_empty() { 0 } else { 1 });
    tally.unclosed_after_kill += violations.len();
}

/// The live profile is whole and is the old one or the approved one.
fn check_the_live_profile_after_kill(
    k: usize,
    paths: &Paths,
    before_live: &Digest,
    candidate_digest: Option<&Digest>,
    approved: Option<orchestrator::ledger::StageId>,
) {
    let after_live = digest_of(&paths.live);
    let allowed: Vec<&Digest> = [Some(before_live), candidate_digest]
        .into_iter()
        .flatten()
        .collect();
    assert!(
        allowed.contains(&&after_live),
        "kill {k}: the live profile is neither the old nor the approved one"
    );
    if approved.is_some() {
        assert_eq!(Some(&after_live), candidate_digest);
    }
}

/// A new daemon on the same ledger reaches a cycle, the dead one's engines
/// are gone, and the ledger checks clean.
fn restart(k: usize, run: &mut Run, paths: &Paths, orphans: &[Proc]) {
    run.daemon = Daemon::start(&paths.config);
    run.seen = None;
    assert!(
        run.daemon
            .wait_for("phase observe", Duration::from_secs(120), &mut run.seen),
        "kill {k}: the restarted daemon never reached a cycle:\n{}",
        run.daemon.log()
    );
    let left = staged::wait_gone(orphans, Duration::from_secs(5));
    assert!(
        left.is_empty(),
        "kill {k}: engines of the dead daemon survived its successor: {left:?}\n{}",
        run.daemon.log()
    );
    let (code, report) = staged::check(&paths.config);
    assert_eq!(code, 0, "kill {k}: after restart: {report:#}");
}

/// No stage or decision is lost: every stage is still there, a
/// decision never changes, and the approval is recorded.
fn check_no_stage_was_lost(
    k: usize,
    paths: &Paths,
    stages_before: &[(i64, String, Option<String>)],
    approved: Option<orchestrator::ledger::StageId>,
) {
    let stages_after = staged::stages(&paths.config);
    for (id, state, by) in stages_before {
        let now = stages_after
            .iter()
            .find(|(i, _, _)| i == id)
            .unwrap_or_else(|| panic!("kill {k}: stage {id} vanished"));
        if state != "staged" {
            assert_eq!(
                (&now.1, &now.2),
                (state, by),
                "kill {k}: stage {id} changed"
            );
        }
    }
    if let Some(id) = approved {
        let s = stages_after.iter().find(|(i, _, _)| *i == id.0).unwrap();
        assert_eq!(
            (s.1.as_str(), s.2.as_deref()),
            ("approved", Some("crash-test")),
            "kill {k}: the approval of stage {id} was lost"
        );
    }
}

/// A clean stop at the end: SIGTERM, children stopped, ledger consistent,
/// no torn read of the live profile. Returns how many reads there were.
fn stop_cleanly(mut daemon: Daemon, reader: TornReader, paths: &Paths) -> usize {
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(daemon.child.id() as i32, libc::SIGTERM) };
    let status = daemon.child.wait().unwrap();
    assert!(status.success(), "{status:?}\n{}", daemon.log());
    let (reads, torn) = reader.finish();
    let (code, report) = staged::check(&paths.config);
    assert_eq!(code, 0, "{report:#}");
    let left = staged::processes_mentioning(&paths.needle, &[]);
    assert!(left.is_empty(), "left running: {left:?}");
    assert!(torn.is_empty(), "torn reads of the live profile: {torn:?}");
    reads
}

/// The kills hit enough phases, left orphans to reap and interrupted
/// cycles: otherwise the checks above proved little.
fn check_the_spread(tally: &Tally, reads: usize, cycles: usize, t0: Instant) {
    let Tally {
        targeted,
        killed_in,
        orphans_reaped,
        approvals,
        unclosed_after_kill,
    } = tally;
    let distinct = targeted.len();
    eprintln!(
        "{KILLS} kills at the line of {targeted:?}; by last phase line printed {killed_in:?}; \
         {orphans_reaped} orphans reaped; \
         {approvals} racing approvals; {unclosed_after_kill} cycles left running by kills; \
         {reads} live-profile reads; {cycles} cycles in the ledger; {:.0} s",
        t0.elapsed().as_secs_f64()
    );
    assert!(
        distinct >= 6,
        "kills spread over too few phases: {targeted:?}"
    );
    assert!(*orphans_reaped > 0, "no kill left an orphan to reap");
    assert!(*unclosed_after_kill > 0, "no kill interrupted a cycle");
}
