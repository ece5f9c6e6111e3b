//! Staging a confirmed win: the two recorded wins a stage is built from
//! ([`RecordedWin`], values the caller holds), and the one guarded `INSERT`
//! that records the stage.
//!
//! The caller stages from the verdicts it recorded (the confirmation's, just
//! judged) or read once (the first A/B's, from an earlier cycle); nothing is
//! read back here to decide. The ledger still refuses a stage that disagrees
//! with its evidence, because the stage is what a person approves and what
//! `stage approve` writes live: the `INSERT … SELECT` below joins the first
//! experiment, its confirmation and both verdicts, and inserts nothing unless
//! the confirmation confirms that experiment on the same two profiles and
//! both stored verdicts are exactly the wins given. The check and the write
//! are one statement inside the caller's write transaction, so no writer can
//! slip between them, and a caller with the wrong values (a bench fixture, a
//! future kind of cycle) gets [`LedgerError::NotStageable`] instead of a
//! stage whose figures no verdict holds. Every join is on a primary or
//! unique key, so the guard costs no scan.

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::codec::ts;
use super::error::Ctx;
use super::ids::{ExperimentId, StageId};
use super::verdicts::NewVerdict;
use super::{Conn, Interval, Ledger, LedgerError, Result, WriteTx};
use crate::vocab::VerdictKind;

/// A `win` as its verdict records it: what a stage is built from. Only a
/// recorded win with its statistics is one ([`RecordedWin::of`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RecordedWin {
    experiment_id: ExperimentId,
    effect: f64,
    interval: Interval,
    noise_floor: f64,
}

impl RecordedWin {
    /// The verdict `v` recorded for experiment `experiment_id`, when it is a
    /// win; `None` for any other verdict (and for a win without the
    /// statistics the schema requires of it).
    pub fn of(experiment_id: ExperimentId, v: &NewVerdict) -> Option<RecordedWin> {
        if v.kind != VerdictKind::Win {
            return None;
        }
        Some(RecordedWin {
            experiment_id,
            effect: v.effect?,
            interval: v.interval?,
            noise_floor: v.noise_floor?,
        })
    }

    pub fn experiment_id(&self) -> ExperimentId {
        self.experiment_id
    }

    /// Log ratio candidate/baseline; negative is faster.
    pub fn effect(&self) -> f64 {
        self.effect
    }

    pub fn interval(&self) -> Interval {
        self.interval
    }

    /// As recorded: the floor it was judged against, or the bound
    /// `max_noise_floor` when its verdict's `floor_is_bound`.
    pub fn noise_floor(&self) -> f64 {
        self.noise_floor
    }
}

/// The stage row from the two wins, or no row when the ledger's experiments
/// and verdicts disagree with them (see the module's comment). The profiles
/// are the first experiment's, the statistics the confirmation's: the first
/// win's estimate was selected for being good (the winner's curse), the
/// independent second A/B's was not. Each stack column is its cycle's.
const SQL_INSERT_STAGE: &str = "INSERT INTO stages (experiment_id, confirmation_id, state, base_digest, \
     candidate_digest, candidate_profile, effect, interval_low, interval_high, noise_floor, created_at, \
     stack, confirmed_by_stack) \
     SELECT e.id, k.id, 'staged', e.base_digest, e.candidate_digest, e.candidate_profile, \
     vk.effect, vk.interval_low, vk.interval_high, vk.noise_floor, $11, ec.stack, kc.stack \
     FROM experiments e \
     JOIN cycles ec ON ec.id = e.cycle_id \
     JOIN verdicts ve ON ve.experiment_id = e.id \
     JOIN experiments k ON k.id = $2 \
     JOIN cycles kc ON kc.id = k.cycle_id \
     JOIN verdicts vk ON vk.experiment_id = k.id \
     WHERE e.id = $1 \
     AND k.confirmation_of = e.id \
     AND k.base_digest = e.base_digest AND k.candidate_digest = e.candidate_digest \
     AND ve.kind = 'win' AND ve.effect = $3 AND ve.interval_low = $4 AND ve.interval_high = $5 \
     AND ve.noise_floor = $6 \
     AND vk.kind = 'win' AND vk.effect = $7 AND vk.interval_low = $8 AND vk.interval_high = $9 \
     AND vk.noise_floor = $10 \
     RETURNING id";

async fn insert(
    c: Conn<'_>,
    cx: &Ctx,
    first: &RecordedWin,
    confirmation: &RecordedWin,
    created_at: DateTime<Utc>,
) -> Result<StageId> {
    let inserted: Option<StageId> = on_db!(c, |c| {
        sqlx::query_scalar(SQL_INSERT_STAGE)
            .bind(first.experiment_id)
            .bind(confirmation.experiment_id)
            .bind(first.effect)
            .bind(first.interval.low)
            .bind(first.interval.high)
            .bind(first.noise_floor)
            .bind(confirmation.effect)
            .bind(confirmation.interval.low)
            .bind(confirmation.interval.high)
            .bind(confirmation.noise_floor)
            .bind(ts(&created_at))
            .fetch_optional(c)
            .await
            .map_err(cx.err("stage a win"))
    })?;
    inserted.ok_or(LedgerError::NotStageable {
        experiment_id: first.experiment_id,
        confirmation_id: confirmation.experiment_id,
    })
}

impl WriteTx {
    /// Stages the win `first`, confirmed by the win `confirmation` (an
    /// experiment whose `confirmation_of` is `first`'s, on the same
    /// profiles), with the confirmation's statistics. Refuses with
    /// [`LedgerError::NotStageable`] when the stored rows are not these two
    /// wins.
    pub async fn insert_stage(
        &mut self,
        first: &RecordedWin,
        confirmation: &RecordedWin,
        created_at: DateTime<Utc>,
    ) -> Result<StageId> {
        let (c, cx) = self.parts();
        insert(c, cx, first, confirmation, created_at).await
    }
}

impl Ledger {
    /// [`WriteTx::insert_stage`] as its own transaction.
    pub async fn insert_stage(
        &self,
        first: &RecordedWin,
        confirmation: &RecordedWin,
        created_at: DateTime<Utc>,
    ) -> Result<StageId> {
        let mut tx = self.begin_write().await?;
        let id = tx.insert_stage(first, confirmation, created_at).await?;
        tx.commit().await?;
        Ok(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn verdict(kind: VerdictKind) -> NewVerdict {
        NewVerdict {
            kind,
            decided_at: Utc.with_ymd_and_hms(2026, 12, 4, 8, 0, 0).unwrap(),
            effect: Some(-0.2),
            interval: Some(Interval {
                low: -0.3,
                high: -0.1,
            }),
            noise_floor: Some(0.5),
            floor_is_bound: true,
            pairs: 4,
            method: Some("test".into()),
            reason: None,
        }
    }

    #[test]
    fn only_a_recorded_win_with_its_statistics_is_one() {
        let win = RecordedWin::of(ExperimentId(3), &verdict(VerdictKind::Win)).unwrap();
        assert_eq!(win.experiment_id(), ExperimentId(3));
        assert_eq!(win.effect(), -0.2);
        // The bound it was judged against is what the stage stores.
        assert_eq!(win.noise_floor(), 0.5);
        for kind in [
            VerdictKind::Loss,
            VerdictKind::WithinNoise,
            VerdictKind::Inconclusive,
        ] {
            assert_eq!(RecordedWin::of(ExperimentId(3), &verdict(kind)), None);
        }
        let bare = NewVerdict {
            effect: None,
            ..verdict(VerdictKind::Win)
        };
        assert_eq!(RecordedWin::of(ExperimentId(3), &bare), None);
    }
}
