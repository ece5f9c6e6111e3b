//! systemd's notify protocol, for `Type=notify`
//! (`deploy/systemd/orchestrator.service`), through the `sd-notify` crate:
//! `READY=1` once the first cycle can start, `WATCHDOG=1` from the loop's
//! own task every half `WATCHDOG_USEC`, `STOPPING=1` on SIGINT/SIGTERM, and
//! `STATUS=` with the last cycle's line (`systemctl status` shows it).
//! Without `NOTIFY_SOCKET` (not started by systemd) each is a no-op.
//!
//! The watchdog ping is polled beside the loop in one task, not spawned
//! apart from it: a loop stuck in a blocking call (a deadlock, a thread
//! blocked on a lock) stops the pings, and systemd restarts the daemon.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use sd_notify::NotifyState;
use tokio::time::MissedTickBehavior;

/// The variables of the protocol. No child inherits them: a child that
/// speaks it would otherwise talk for the daemon (systemd drops its
/// messages under `NotifyAccess=main`, but the socket is not the child's).
const PROTOCOL_VARS: [&str; 3] = ["NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"];

/// Whether a failed send was logged already (a broken socket would
/// otherwise log every ping).
static SEND_FAILED: AtomicBool = AtomicBool::new(false);

/// The watchdog systemd asked for, read from the environment at start.
#[derive(Debug, Clone, Copy)]
pub struct Watchdog {
    /// How often to ping: half the watchdog timeout (sd_watchdog_enabled(3)).
    ping_every: Option<Duration>,
}

impl Watchdog {
    /// Reads `WATCHDOG_USEC` (honoured only when `WATCHDOG_PID` is unset or
    /// this process) and withholds the protocol's variables from children.
    pub fn from_env() -> Watchdog {
        let watchdog = sd_notify::watchdog_enabled().filter(|d| !d.is_zero());
        crate::process::secrets::withhold(PROTOCOL_VARS);
        if let Some(d) = watchdog {
            tracing::info!(
                "systemd watchdog: {:.1} s; pinging every {:.1} s",
                d.as_secs_f64(),
                d.as_secs_f64() / 2.0
            );
        }
        Watchdog {
            ping_every: watchdog.map(|d| d / 2),
        }
    }

    /// Runs `work` to its end, pinging the watchdog every
    /// [`Watchdog::ping_every`] while it runs, from this same task.
    pub async fn keep_alive<F: Future>(&self, work: F) -> F::Output {
        let Some(every) = self.ping_every else {
            return work.await;
        };
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        tokio::pin!(work);
        loop {
            tokio::select! {
                out = &mut work => return out,
                _ = tick.tick() => send(&[NotifyState::Watchdog]),
            }
        }
    }
}

/// The first cycle can start: the ledger is open, the metrics endpoint
/// bound and the stack (on the embedded default) started.
pub fn ready() {
    send(&[
        NotifyState::Ready,
        NotifyState::Status("running: the first cycle starts"),
    ]);
}

/// The last cycle's line, as `systemctl status` shows it.
pub fn status(line: &str) {
    // One line: the protocol separates assignments by newlines.
    let line = line.lines().next().unwrap_or_default();
    send(&[NotifyState::Status(line)]);
}

/// The daemon is stopping: a signal, or the loop ended.
pub fn stopping(why: &str) {
    send(&[NotifyState::Stopping, NotifyState::Status(why)]);
}

fn send(states: &[NotifyState]) {
    if let Err(e) = sd_notify::notify(states) {
        if !SEND_FAILED.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                "cannot notify systemd through $NOTIFY_SOCKET: {e} (logged once; \
                 a missed watchdog ping gets the service restarted)"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Without a watchdog, `keep_alive` is the work itself.
    #[tokio::test]
    async fn without_a_watchdog_the_work_runs_unwrapped() {
        let n = Watchdog { ping_every: None };
        assert_eq!(n.keep_alive(async { 7 }).await, 7);
    }
}
