//! A cycle that stands aside for the live server's users: it waits for them
//! before it asks the proposer or measures anything
//! ([`crate::measure::stand_aside`]), and when they keep the server busy
//! longer than `[daemon] stand_aside_max_wait_s`, at its start or between
//! two runs, it is deferred: closed `aborted` with a `failed` verdict (it
//! judged nothing, so a confirmation cut short is run again) and a
//! `cycle_deferrals` row that says so, why and after how long a wait.

use super::outcome::{Done, Tried};
use super::{CycleRunner, Stop};
use crate::clock::Clock;
use crate::ledger::{CycleDeferral, CycleId, LedgerError};
use crate::measure::stand_aside::{Deferral, Gate};
use crate::progress::phase;
use crate::vocab::DeferredAt;

// No proposer needed: a manual comparison ([`super::manual`]) closes its
// cycles here too.
impl<P, C: Clock> CycleRunner<'_, P, C> {
    /// Waits until the live server's users leave it quiet; a cycle that
    /// cannot start within the bound is deferred.
    pub(super) async fn stand_aside_at_start(&self) -> Result<(), Stop> {
        let Some(sa) = self.stand_aside else {
            return Ok(());
        };
        self.progress
            .phase(phase::STAND_ASIDE, "for the live server's users");
        match sa.wait_clear(&self.cancel).await {
            Gate::Clear(_) => Ok(()),
            Gate::Cancelled => Err(Stop::aborted(
                "shutdown while standing aside for the live server's users",
            )),
            Gate::Deferred(d) => Err(Stop::Deferred(DeferredAt::Start, d, Tried::default())),
        }
    }

    /// Records the deferral of cycle `id`, with the `failed` verdict of
    /// what it had under way (`tried`): the cycle's error, and what it did.
    pub(super) async fn record_deferral(
        &self,
        id: CycleId,
        at: DeferredAt,
        d: &Deferral,
        tried: Tried,
    ) -> Result<(String, Done), LedgerError> {
        let why = format!("deferred: {}", d.reason);
        let done = self.record_failure(id, tried, &why, &why).await?;
        self.ledger
            .insert_deferral(&CycleDeferral {
                cycle_id: id,
                deferred_at: self.clock.now(),
                during: at,
                reason: d.reason.clone(),
                waited_s: d.waited.as_secs_f64(),
                live_requests: d.live_requests,
            })
            .await?;
        tracing::warn!(cycle = %id, "cycle deferred ({at}): {}", d.reason);
        Ok((why, done))
    }
}
