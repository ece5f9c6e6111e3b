//! `Type=notify` end to end: the real daemon on the embedded default, with
//! a real `NOTIFY_SOCKET` (a Unix datagram socket this test binds and
//! reads, as systemd's manager does) and `WATCHDOG_USEC`, sends READY=1
//! once its metrics endpoint answers, WATCHDOG=1 every half the watchdog
//! time, and STOPPING=1 on SIGTERM; no child inherits the socket.

use std::os::unix::net::UnixDatagram;
use std::time::{Duration, Instant};

use crate::faults::Daemon;

use super::{output, scrape, tiny_demo};

/// The watchdog time the test hands the daemon: pings every 1.5 s.
const WATCHDOG: Duration = Duration::from_secs(3);

/// One datagram as the daemon sent it, and when it arrived.
struct Message {
    at: Instant,
    text: String,
}

fn receive(socket: &UnixDatagram, limit: Duration) -> Option<Message> {
    socket.set_read_timeout(Some(limit)).unwrap();
    let mut buf = [0u8; 4096];
    let n = socket.recv(&mut buf).ok()?;
    Some(Message {
        at: Instant::now(),
        text: String::from_utf8_lossy(&buf[..n]).into_owned(),
    })
}

/// Reads datagrams until one holds `assignment` (a line of it), keeping
/// every one read; fails after `limit`.
fn until(
    socket: &UnixDatagram,
    daemon: &mut Daemon,
    assignment: &str,
    limit: Duration,
    seen: &mut Vec<Message>,
) -> Instant {
    let deadline = Instant::now() + limit;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        assert!(
            !left.is_zero(),
            "no {assignment} within {limit:?}; got {:?}\n{}",
            seen.iter().map(|m| &m.text).collect::<Vec<_>>(),
            output(daemon)
        );
        if let Some(m) = receive(socket, left.min(Duration::from_millis(500))) {
            let at = m.at;
            let hit = m.text.lines().any(|l| l == assignment);
            seen.push(m);
            if hit {
                return at;
            }
        } else if !daemon.running() {
            panic!("the daemon exited before {assignment}:\n{}", output(daemon));
        }
    }
}

/// The daemon's direct children, from `/proc/*/stat`.
fn children(pid: i32) -> Vec<i32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(child) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{child}/stat")) else {
            continue;
        };
        // pid (comm) state ppid ...: comm may hold spaces, so split after ')'.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<i32>().ok());
        if ppid == Some(pid) {
            out.push(child);
        }
    }
    out
}

#[test]
fn the_daemon_speaks_systemds_notify_protocol() {
    let _heavy = crate::common::heavy();
    let demo = tiny_demo();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("notify.sock");
    let socket = UnixDatagram::bind(&path).unwrap();
    let usec = WATCHDOG.as_micros().to_string();
    let mut daemon = Daemon::start_as_service(
        &demo,
        &[
            ("NOTIFY_SOCKET", path.to_str().unwrap()),
            ("WATCHDOG_USEC", &usec),
        ],
    );
    let mut seen = Vec::new();

    until(
        &socket,
        &mut daemon,
        "READY=1",
        Duration::from_secs(600),
        &mut seen,
    );
    assert!(
        scrape(&demo).is_some(),
        "READY=1 came before the metrics endpoint answered:\n{}",
        output(&daemon)
    );
    assert!(
        seen.iter().all(|m| !m.text.contains("WATCHDOG=1")),
        "no watchdog ping before READY"
    );

    // Four pings after READY, each within the watchdog time of the last
    // and none sooner than a second (half of 3 s, with slack).
    let mut pings = Vec::new();
    while pings.len() < 4 {
        pings.push(until(
            &socket,
            &mut daemon,
            "WATCHDOG=1",
            WATCHDOG * 2,
            &mut seen,
        ));
    }
    for gap in pings.windows(2).map(|w| w[1] - w[0]) {
        assert!(
            gap >= Duration::from_secs(1) && gap < WATCHDOG,
            "pings {gap:?} apart (the watchdog time is {WATCHDOG:?})"
        );
    }

    // Its children (the embedded stack) inherit neither variable.
    let kids = children(daemon.pid());
    assert!(!kids.is_empty(), "the embedded stack runs as children");
    for kid in kids {
        if let Ok(environ) = std::fs::read(format!("/proc/{kid}/environ")) {
            let environ = String::from_utf8_lossy(&environ);
            for var in ["NOTIFY_SOCKET=", "WATCHDOG_USEC="] {
                assert!(
                    !environ.split('\0').any(|kv| kv.starts_with(var)),
                    "child {kid} inherited {var}"
                );
            }
        }
    }

    assert!(
        seen.iter().all(|m| !m.text.contains("STOPPING=1")),
        "STOPPING=1 before any signal: {:?}",
        seen.iter().map(|m| &m.text).collect::<Vec<_>>()
    );
    // SAFETY: kill(2) on our own child's pid.
    assert_eq!(unsafe { libc::kill(daemon.pid(), libc::SIGTERM) }, 0);
    until(
        &socket,
        &mut daemon,
        "STOPPING=1",
        Duration::from_secs(30),
        &mut seen,
    );
    // Said on the signal itself, not only once the loop has wound down.
    let stopping = &seen.last().unwrap().text;
    assert!(
        stopping.contains("STATUS=stopping: SIGTERM"),
        "{stopping:?}"
    );
    let status = daemon.wait(Duration::from_secs(120));
    assert!(
        status.success(),
        "an unbounded run stopped by SIGTERM exits 0 ({status}):\n{}",
        output(&daemon)
    );
    demo.assert_children_gone();
}
