//! The metrics endpoint when the daemon runs out of file descriptors: its
//! `RLIMIT_NOFILE` lowered (prlimit(2)) to a few above what it holds, then
//! a flood of silent connections makes `accept` fail with EMFILE. The
//! daemon must not spin on the failing `accept` (its CPU time over a window
//! from `/proc/PID/stat`), must serve again once the connections close,
//! and its cycles must go on.
//!
//! The cycles are a minute apart and the window sits between two, so the
//! CPU measured is the endpoint's: a cycle's own work (and its failing for
//! want of descriptors, which the loop records and backs off from) is not
//! what this test is about.

use std::net::TcpStream;
use std::time::{Duration, Instant};

use crate::faults::{Daemon, edit_config, wait_for};

use super::{output, scrape, scrape_after_first_cycle, tiny_demo};

/// Descriptors the daemon may open beyond those it holds when the limit is
/// lowered: the endpoint takes these and then meets EMFILE.
const HEADROOM: u64 = 16;
/// Silent connections: many more than the headroom, so the backlog stays
/// full of connections the daemon cannot accept.
const FLOOD: usize = 200;
/// The window the daemon's CPU time is measured over, while exhausted.
/// Shorter than the endpoint's 5 s head timeout, after which it lets the
/// accepted silent connections go (and takes the next from the backlog).
const WINDOW: Duration = Duration::from_secs(4);
/// The most CPU the daemon may use in the window, as a share of one core.
/// A failing `accept` retried at once holds a core (1.0 on an idle
/// machine, its fair share 2/(L+1) on a 2-core one at load L: still 10%
/// at a load of 19); the idle daemon between cycles uses well under 1%.
const MAX_CPU_SHARE: f64 = 0.05;

fn open_fds(pid: i32) -> u64 {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count() as u64
}

/// User plus system CPU seconds of the whole process (every thread), from
/// fields 14 and 15 of `/proc/PID/stat`.
fn cpu_seconds(pid: i32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // After "pid (comm) ": field 3 (state) is index 0, so 14 is index 11.
    let rest = stat.rsplit_once(')').unwrap().1;
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: u64 = f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap();
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    ticks as f64 / hz as f64
}

/// Lowers `pid`'s soft descriptor limit to `soft`.
fn lower_nofile(pid: i32, soft: u64) {
    let mut old = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: prlimit(2) with valid pointers; a null new limit only reads.
    assert_eq!(
        unsafe { libc::prlimit(pid, libc::RLIMIT_NOFILE, std::ptr::null(), &raw mut old) },
        0
    );
    let new = libc::rlimit {
        rlim_cur: soft,
        rlim_max: old.rlim_max,
    };
    // SAFETY: as above; lowering the soft limit of our own child.
    let rc = unsafe {
        libc::prlimit(
            pid,
            libc::RLIMIT_NOFILE,
            &raw const new,
            std::ptr::null_mut(),
        )
    };
    assert_eq!(rc, 0, "prlimit: {}", std::io::Error::last_os_error());
}

#[test]
fn the_metrics_endpoint_rides_out_descriptor_exhaustion() {
    let _heavy = crate::common::heavy();
    let demo = tiny_demo();
    edit_config(&demo, |t| t.replace("interval_s = 0.01", "interval_s = 60"));
    let mut daemon = Daemon::start_as_service(&demo, &[]);
    let pid = daemon.pid();
    assert!(
        scrape_after_first_cycle(&demo, &mut daemon).contains("\norchestrator_cycle_running 0\n"),
        "between two cycles"
    );

    let held = open_fds(pid);
    lower_nofile(pid, held + HEADROOM);
    let clients: Vec<TcpStream> = (0..FLOOD)
        .map(|_| TcpStream::connect(("127.0.0.1", demo.metrics)).unwrap())
        .collect();
    let exhausted = "the metrics endpoint cannot accept connections: Too many open files";
    let stderr = daemon.stderr_path.clone();
    let log = move || std::fs::read_to_string(&stderr).unwrap_or_default();
    wait_for(
        Duration::from_secs(20),
        "EMFILE on accept",
        &mut daemon,
        || log().contains(exhausted).then_some(()),
    );

    let (cpu0, t0) = (cpu_seconds(pid), Instant::now());
    std::thread::sleep(WINDOW);
    let share = (cpu_seconds(pid) - cpu0) / t0.elapsed().as_secs_f64();
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    eprintln!(
        "daemon CPU while out of descriptors: {:.1}% of a core over {WINDOW:?} (load {})",
        share * 100.0,
        load.trim()
    );
    assert!(
        share < MAX_CPU_SHARE,
        "the daemon used {:.0}% of a core while accept failed: it spins\n{}",
        share * 100.0,
        output(&daemon)
    );
    assert!(
        scrape(&demo).is_none(),
        "still out of descriptors while the flood holds them"
    );

    drop(clients);
    wait_for(
        Duration::from_secs(30),
        "a scrape after the connections closed",
        &mut daemon,
        || scrape(&demo),
    );
    assert!(
        log().contains("the metrics endpoint accepts connections again"),
        "{}",
        output(&daemon)
    );

    // Cycles go on: one that started after the recovery (a cycle running
    // through the exhaustion may fail for want of descriptors) ends, and
    // completes, under the lowered limit.
    let recovered = chrono::Utc::now();
    let after = wait_for(
        Duration::from_secs(900),
        "a cycle started after the recovery to end",
        &mut daemon,
        || {
            demo.ledger().into_iter().find(|c| {
                let started = c["cycle"]["started_at"].as_str().unwrap_or_default();
                chrono::DateTime::parse_from_rfc3339(started).is_ok_and(|t| t > recovered)
                    && c["cycle"]["status"] != "running"
            })
        },
    );
    assert_eq!(after["cycle"]["status"], "completed", "{after:#}");
    assert!(
        open_fds(pid) <= held + HEADROOM,
        "the daemon lives within its lowered limit"
    );
    let status = daemon.stop(Duration::from_secs(120));
    assert!(status.success(), "{status}\n{}", output(&daemon));
}
