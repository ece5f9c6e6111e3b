//! Riding out a PostgreSQL ledger that went away under the running daemon
//! (a server restart, a broken connection): the one ledger error the daemon
//! waits out instead of stopping on ([`LedgerError::is_transient`]).
//!
//! The daemon says so at error level, naming the database and what failed,
//! then backs off ([`super::backoff`], with jitter, capped by `[cycle]
//! backoff_max_s`) and tries again: first its stack's advisory lock (the
//! restart ended the session holding it; another daemon may have taken the
//! stack meanwhile, which stops this one with exit 2 as at start), then,
//! holding it and before anything else is written, it closes the cycle the
//! outage cut short as `aborted`, with a `failed` verdict for its open
//! experiment, as a start after a crash does. Nothing runs meanwhile, so no
//! measurement is made that could not be recorded. A shutdown signal during
//! the wait stops the daemon at once; the cycle left `running` is then
//! closed by the next start.

use std::time::{Duration, Instant};

use anyhow::Context;
use chrono::Utc;

use crate::config::Config;
use crate::cycle::CycleSummary;
use crate::ledger::{Ledger, LedgerError, StackLock};
use crate::process::cancel::Cancel;
use crate::vocab::VerdictKind;

use super::{RunSummary, backoff};

/// The first wait before reconnecting, doubled at each failed attempt: a
/// restart takes seconds, so the first attempts come soon whatever the
/// cycle interval.
const RECONNECT_BASE: Duration = Duration::from_secs(1);

/// How riding out an outage ended.
pub(super) enum Outage {
    /// The ledger is back, the stack's lock held again, and this many
    /// interrupted cycles (0 when the cycle never got its row) closed.
    Resumed { closed: u64 },
    /// A shutdown signal came first.
    Interrupted,
}

impl Outage {
    /// Counts the closed cycles into the run's summary (aborted, like a
    /// shutdown's, neither failed nor a success); false when the loop stops.
    pub(super) fn go_on(self, summary: &mut RunSummary) -> bool {
        match self {
            Outage::Resumed { closed } => {
                summary.cycles += closed;
                summary.aborted += closed;
                if closed > 0 {
                    summary.last_failed = false;
                }
                true
            }
            Outage::Interrupted => {
                summary.interrupted = true;
                false
            }
        }
    }
}

/// Makes sure the daemon still holds its stack's lock before a cycle (the
/// server may have restarted between two writes); `Ok(())` on SQLite, whose
/// lock is the file's and cannot be lost.
pub(super) async fn check_lock(
    lock: &mut Option<StackLock>,
    ledger: &Ledger,
) -> Result<(), LedgerError> {
    let Some(lock) = lock else {
        return Ok(());
    };
    if lock.regain(ledger).await? {
        tracing::warn!(
            database = %ledger.path().display(),
            "the session holding the stack's lock had ended (the PostgreSQL server restarted between two writes); took the lock again"
        );
    }
    Ok(())
}

/// After a ledger error: stops the daemon on a fatal one, as ever; waits
/// out a transient one (see the module's comment).
pub(super) async fn ride_out(
    error: LedgerError,
    ledger: &Ledger,
    lock: &mut Option<StackLock>,
    config: &Config,
    cancel: &Cancel,
) -> anyhow::Result<Outage> {
    if let LedgerError::StackLocked { .. } = error {
        return Err(error).context(
            "the session holding this daemon's stack lock had ended (a database restart), and another daemon took the stack",
        );
    }
    if !error.is_transient() {
        return Err(error).context(
            "the ledger could not be written, so the daemon stops rather than run unrecorded",
        );
    }
    let url = ledger.path().display().to_string();
    tracing::error!(
        database = %url,
        "{error}; no cycle runs until it is back: backing off, then reconnecting and taking the stack's lock again"
    );
    let lost = Instant::now();
    let mut attempt = 0u32;
    loop {
        let wait = backoff(
            attempt,
            RECONNECT_BASE,
            config.cycle.backoff_max_s.duration(),
        );
        attempt = attempt.saturating_add(1);
        tracing::warn!(
            attempt,
            "backing off {:.1} s before reconnecting to the PostgreSQL ledger {url}",
            wait.as_secs_f64()
        );
        let tried = tokio::select! {
            biased;
            _ = cancel.cancelled() => return Ok(Outage::Interrupted),
            r = async {
                tokio::time::sleep(wait).await;
                reconnect(ledger, lock).await
            } => r,
        };
        match tried {
            Ok(closed) => {
                tracing::warn!(
                    database = %url,
                    closed,
                    "the PostgreSQL ledger is back ({:.0} s after the write that failed): the stack's lock is held again and the interrupted cycle is closed as aborted; resuming",
                    lost.elapsed().as_secs_f64()
                );
                print_aborted(ledger, closed, config).await;
                return Ok(Outage::Resumed { closed });
            }
            Err(e) if e.is_transient() => {
                tracing::warn!(database = %url, "still no ledger: {e}");
            }
            Err(e) => {
                return Err(e)
                    .context("the PostgreSQL ledger came back, but the daemon cannot go on");
            }
        }
    }
}

/// The stdout line of each cycle the outage cut short, as every finished
/// cycle gets one: read back from the ledger (the newest rows of this
/// stack, which the abort just closed), so the line shows what was stored.
async fn print_aborted(ledger: &Ledger, closed: u64, config: &Config) {
    if closed == 0 {
        return;
    }
    let limit = u32::try_from(closed).unwrap_or(u32::MAX);
    match ledger.recent_cycles(limit).await {
        Ok(cycles) => {
            for c in cycles.iter().rev() {
                let mut line = CycleSummary::new(c.cycle.id);
                line.status = Some(c.cycle.status);
                // Its open experiment was closed `failed`, which shows
                // the reason; the status reads `aborted`.
                line.verdict = Some(VerdictKind::Failed);
                line.reason.clone_from(&c.cycle.error);
                if let Some(v) = c.verdicts.first() {
                    line.menu_id = v.menu_id;
                    line.params.clone_from(&v.parameters);
                }
                line.target = config.objective.target_seconds_per_token.get();
                if let Some(end) = c.cycle.ended_at {
                    line.seconds = (end - c.cycle.started_at).as_seconds_f64();
                }
                println!("{line}");
            }
        }
        Err(e) => {
            tracing::warn!("could not read back the aborted cycles for their lines: {e}");
            println!("{closed} cycle(s) aborted: {WHY}");
        }
    }
}

/// Why the cycle an outage cut short is closed, in its row.
const WHY: &str = "the PostgreSQL ledger became unreachable mid-cycle; the daemon closed the cycle when it came back";

/// One attempt: the stack's lock first, and only then the one write that
/// closes what the outage left open.
async fn reconnect(ledger: &Ledger, lock: &mut Option<StackLock>) -> Result<u64, LedgerError> {
    if let Some(lock) = lock {
        lock.regain(ledger).await?;
    }
    ledger.abort_running_cycles(WHY, Utc::now()).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_closed_cycle_counts_as_aborted_and_a_signal_stops_the_loop() {
        let mut s = RunSummary {
            cycles: 3,
            failed: 1,
            last_failed: true,
            ..RunSummary::default()
        };
        assert!(Outage::Resumed { closed: 0 }.go_on(&mut s));
        assert_eq!(
            (s.cycles, s.aborted, s.last_failed),
            (3, 0, true),
            "no row, not counted"
        );
        assert!(Outage::Resumed { closed: 1 }.go_on(&mut s));
        assert_eq!((s.cycles, s.aborted, s.failed), (4, 1, 1));
        assert!(!s.last_failed, "an aborted cycle did not fail");
        assert!(!s.interrupted);
        assert!(!Outage::Interrupted.go_on(&mut s));
        assert!(s.interrupted);
        assert_eq!(s.cycles, 4, "the cycle left running is the next start's");
    }
}
