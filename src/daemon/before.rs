//! The look before each cycle: the engine-time budget, then whether the
//! loop is converged; it waits while either holds and says what the loop
//! does next.

use chrono::Utc;

use super::metrics::DaemonMetrics;
use super::{RunOptions, budget, wait};
use crate::cycle::CycleRunner;
use crate::ledger::{Ledger, LedgerError};

/// What the loop does after its look before a cycle.
pub(super) enum Before {
    /// Run the cycle.
    Run,
    /// It waited: look again (after the next tick).
    Again,
    /// It waited and the config or menu changed: load them again.
    Reload,
    /// A shutdown while waiting, or `--once` with nothing to run.
    Stop,
}

/// The budget, then the look ([`CycleRunner::converged`]): waits while over
/// budget or converged, and says what the loop does next. A bounded run
/// never waits: it says why it stops.
pub(super) async fn before_cycle<P: crate::brain::Proposer, C: crate::clock::Clock>(
    budget: &budget::Budget,
    cycle: &CycleRunner<'_, P, C>,
    waits: &mut wait::Waits<'_>,
    metrics: &DaemonMetrics,
    last_cycle: Option<crate::ledger::CycleId>,
    opts: RunOptions,
) -> Result<Before, LedgerError> {
    use crate::vocab::WaitKind;
    use wait::Woke;
    let ledger = cycle.ledger;
    let woke = |w: Woke| match w {
        Woke::Shutdown => Before::Stop,
        Woke::LookAgain => Before::Again,
        Woke::Changed(_) => Before::Again,
    };
    if let budget::Look::Over { until, reason, .. } = budget.read(ledger, Utc::now()).await? {
        metrics.set_waiting(Some(WaitKind::Budget));
        if opts.bounded() {
            println!("stop        budget: {reason} (a bounded run does not wait)");
            return Ok(Before::Stop);
        }
        return waits.budget(&reason, until, last_cycle).await.map(woke);
    }
    if waits.waiting() == Some(WaitKind::Budget) {
        waits
            .end("the window's engine time has room for a cycle again")
            .await?;
    }
    waits.before_look().await?;
    let Some(converged) = cycle.converged().await? else {
        if waits.waiting() == Some(WaitKind::Converged) {
            waits
                .end("a look found an experiment worth measuring")
                .await?;
        }
        metrics.set_waiting(None);
        return Ok(Before::Run);
    };
    metrics.set_waiting(Some(WaitKind::Converged));
    if opts.bounded() {
        println!(
            "stop        converged: {} (a bounded run does not wait)",
            converged.reason
        );
        return Ok(Before::Stop);
    }
    match waits.converged(&converged, last_cycle).await? {
        Woke::Changed(wake) => {
            waits.end(&wake.to_string()).await?;
            metrics.set_waiting(None);
            Ok(if wake.reloads() {
                Before::Reload
            } else {
                Before::Again
            })
        }
        other => Ok(woke(other)),
    }
}

/// The window's engine time and the last day's by use, onto the metrics
/// endpoint; returns the text the cycle line ends with.
pub(super) async fn engine_accounts(
    budget: &budget::Budget,
    ledger: &Ledger,
    metrics: &DaemonMetrics,
) -> Result<String, LedgerError> {
    let now = Utc::now();
    let look = budget.read(ledger, now).await?;
    let day = ledger
        .engine_runs(now - chrono::Duration::days(1), now)
        .await?;
    let day = crate::ledger::EngineSeconds::of(&day);
    metrics.set_engine(look.spent().share(), day);
    Ok(format!("{}, last 24h {day}", look.spent()))
}
