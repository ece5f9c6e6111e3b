//! What an approved stage realized on its stack's live server: the A/Bs of
//! the live server (on the stage's profile) against a shadow of the profile
//! it replaced, as ordinary experiments named by `realizations`, and the
//! daemon's note on why a stage is not realized yet (`realization_notes`).
//!
//! A stage's realized effect is the verdict of its first realization that
//! decided: `win`, `within_noise` or `loss`. An attempt that failed, was
//! too noisy to decide, or saw the output change is tried again, up to
//! [`MAX_ATTEMPTS`] attempts that ran to their end (one cut short by a
//! shutdown does not count), each after a back-off
//! ([`StageRealization::retry_at`]): what spoiled one attempt (a noisy
//! hour, a burst of users) spoils the next one started at once, at full
//! cost, and would give the stage up within minutes.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::Row;

use super::codec::{opt_int_col, ts};
use super::experiments::NewExperiment;
use super::ids::{CycleId, ExperimentId, StageId};
use super::stages::Stage;
use super::{Interval, Ledger, LedgerError, Result};
use crate::vocab::{CycleStatus, Digest, VerdictKind};

/// Attempts (that ran to their end without deciding) after which a stage
/// is left unrealized, with its last attempt's reason.
pub const MAX_ATTEMPTS: usize = 3;

/// One realization A/B of a stage, with its verdict once it has one.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RealizationAttempt {
    pub stage_id: StageId,
    pub experiment_id: ExperimentId,
    pub cycle_id: CycleId,
    pub cycle_status: CycleStatus,
    pub created_at: DateTime<Utc>,
    /// `None` while it is being measured.
    pub verdict: Option<VerdictKind>,
    /// Log ratio live/replaced of seconds per token; negative is faster.
    pub effect: Option<f64>,
    pub interval: Option<Interval>,
    pub noise_floor: Option<f64>,
    /// `noise_floor` is the bound `max_noise_floor`, not a measured floor.
    pub floor_is_bound: bool,
    pub pairs: Option<u32>,
    pub decided_at: Option<DateTime<Utc>>,
    pub reason: Option<String>,
}

from_row!(RealizationAttempt, |row| {
    let low: Option<f64> = row.try_get("interval_low")?;
    let high: Option<f64> = row.try_get("interval_high")?;
    let bound: Option<bool> = row.try_get("floor_is_bound")?;
    Ok(RealizationAttempt {
        stage_id: row.try_get("stage_id")?,
        experiment_id: row.try_get("experiment_id")?,
        cycle_id: row.try_get("cycle_id")?,
        cycle_status: row.try_get("cycle_status")?,
        created_at: row.try_get("created_at")?,
        verdict: row.try_get("kind")?,
        effect: row.try_get("effect")?,
        interval: low.zip(high).map(|(low, high)| Interval { low, high }),
        noise_floor: row.try_get("noise_floor")?,
        floor_is_bound: bound.unwrap_or(false),
        pairs: opt_int_col(row, "pairs")?,
        decided_at: row.try_get("decided_at")?,
        reason: row.try_get("reason")?,
    })
});

impl RealizationAttempt {
    /// It decided what the stage realized.
    pub fn decided(&self) -> bool {
        matches!(
            self.verdict,
            Some(VerdictKind::Win | VerdictKind::WithinNoise | VerdictKind::Loss)
        )
    }

    /// It ran to its end without deciding (failed, too noisy, the output
    /// changed); one cut short by a shutdown or a crash did not.
    pub fn spent(&self) -> bool {
        self.verdict.is_some() && !self.decided() && self.cycle_status != CycleStatus::Aborted
    }
}

#[cfg(test)]
impl RealizationAttempt {
    /// A decided attempt of stage `stage`: `kind`, `effect` ± 0.05, 8 pairs
    /// against a 2% floor, decided `secs` after now (tests only).
    pub(crate) fn example(stage: i64, kind: VerdictKind, effect: f64, secs: i64) -> Self {
        let now = Utc::now();
        RealizationAttempt {
            stage_id: StageId(stage),
            experiment_id: ExperimentId(100 + stage),
            cycle_id: CycleId(50 + stage),
            cycle_status: CycleStatus::Completed,
            created_at: now,
            verdict: Some(kind),
            effect: Some(effect),
            interval: Some(Interval {
                low: effect - 0.05,
                high: effect + 0.05,
            }),
            noise_floor: Some(0.02),
            floor_is_bound: false,
            pairs: Some(8),
            decided_at: Some(now + chrono::Duration::seconds(secs)),
            reason: None,
        }
    }
}

/// The daemon's latest word on why a stage is not realized (yet).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RealizationNote {
    pub stage_id: StageId,
    pub noted_at: DateTime<Utc>,
    pub note: String,
}

from_row!(RealizationNote, |row| {
    Ok(RealizationNote {
        stage_id: row.try_get("stage_id")?,
        noted_at: row.try_get("noted_at")?,
        note: row.try_get("note")?,
    })
});

/// Everything recorded about one stage's realization.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct StageRealization {
    /// Oldest first.
    pub attempts: Vec<RealizationAttempt>,
    pub note: Option<RealizationNote>,
}

impl StageRealization {
    /// The attempt that decided what the stage realized.
    pub fn realized(&self) -> Option<&RealizationAttempt> {
        self.attempts.iter().find(|a| a.decided())
    }

    /// Whether the daemon gave up on it: [`MAX_ATTEMPTS`] attempts spent.
    pub fn given_up(&self) -> bool {
        self.realized().is_none()
            && self.attempts.iter().filter(|a| a.spent()).count() >= MAX_ATTEMPTS
    }

    /// Whether another attempt is due (none decided, not given up).
    pub fn open(&self) -> bool {
        self.realized().is_none() && !self.given_up()
    }

    /// When an open realization whose latest attempt ran to its end
    /// without deciding may be tried again: `backoff` after that attempt
    /// ended, with the attempt. `None` when it is not open, or its latest
    /// attempt did not spend itself (none yet, one measuring, one cut
    /// short by a shutdown): then nothing holds the next one back.
    pub fn retry_at(
        &self,
        backoff: chrono::Duration,
    ) -> Option<(DateTime<Utc>, &RealizationAttempt)> {
        if !self.open() {
            return None;
        }
        let last = self.attempts.last().filter(|a| a.spent())?;
        let ended = last.decided_at.unwrap_or(last.created_at);
        Some((ended + backoff, last))
    }
}

/// Where an approved stage's realization stands.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Realized<'a> {
    /// Not applied (not approved, refused, waiting for its daemon): its
    /// profile never ran, so there is nothing to realize.
    NotApplied,
    /// Measured: the attempt whose verdict is `win`, `within_noise` or `loss`.
    Measured(&'a RealizationAttempt),
    /// An attempt is being measured now.
    Measuring,
    /// [`MAX_ATTEMPTS`] attempts ended without deciding; the last one says why.
    GivenUp(&'a RealizationAttempt),
    /// Not measured yet; the daemon's note says why, if it wrote one.
    Waiting(Option<&'a RealizationNote>),
}

impl Realized<'_> {
    /// Its name in JSON: the verdict of a measured one (`win`,
    /// `within_noise`, `loss`), else `measuring`, `given_up` or
    /// `unrealized`; `None` when not applied.
    pub fn status(&self) -> Option<&'static str> {
        match self {
            Realized::NotApplied => None,
            Realized::Measured(a) => a.verdict.map(VerdictKind::as_str),
            Realized::Measuring => Some("measuring"),
            Realized::GivenUp(_) => Some("given_up"),
            Realized::Waiting(_) => Some("unrealized"),
        }
    }
}

impl StageRealization {
    /// Where stage `stage`'s realization stands.
    pub fn of<'a>(&'a self, stage_applied: bool) -> Realized<'a> {
        if let Some(a) = self.realized() {
            return Realized::Measured(a);
        }
        if !stage_applied {
            return Realized::NotApplied;
        }
        if self.given_up()
            && let Some(last) = self.attempts.iter().rev().find(|a| a.spent())
        {
            return Realized::GivenUp(last);
        }
        if self
            .attempts
            .iter()
            .any(|a| a.verdict.is_none() && a.cycle_status == CycleStatus::Running)
        {
            return Realized::Measuring;
        }
        Realized::Waiting(self.note.as_ref())
    }
}

/// The attempt's columns, then `$rest` (the condition and order).
macro_rules! concat_attempts {
    ($rest:literal) => {
        concat!(
            "SELECT z.stage_id, e.id AS experiment_id, e.cycle_id, \
             c.status AS cycle_status, e.created_at, v.kind, v.effect, v.interval_low, \
             v.interval_high, v.noise_floor, v.floor_is_bound, v.pairs, v.decided_at, v.reason \
             FROM realizations z JOIN experiments e ON e.id = z.experiment_id \
             JOIN cycles c ON c.id = e.cycle_id LEFT JOIN verdicts v ON v.experiment_id = e.id",
            $rest
        )
    };
}

/// One stage's attempts, oldest first (through `realizations_by_stage`,
/// whose rows are in experiment id order).
pub(crate) const SQL_ATTEMPTS_OF_STAGE: &str =
    concat_attempts!(" WHERE z.stage_id = $1 ORDER BY z.experiment_id");

/// Every attempt of a stack's stages (every stack's, unscoped).
const SQL_ALL_ATTEMPTS: &str = concat_attempts!(
    " JOIN stages s ON s.id = z.stage_id \
     WHERE CAST($1 AS TEXT) IS NULL OR s.stack = $1 ORDER BY z.experiment_id"
);

const SQL_NOTE: &str = "SELECT * FROM realization_notes WHERE stage_id = $1";
const SQL_ALL_NOTES: &str = "SELECT n.* FROM realization_notes n JOIN stages s ON s.id = n.stage_id \
     WHERE CAST($1 AS TEXT) IS NULL OR s.stack = $1 ORDER BY n.stage_id";

/// A new note, or a changed one; the same note again keeps its first time.
const SQL_UPSERT_NOTE: &str = "INSERT INTO realization_notes (stage_id, noted_at, note) \
     VALUES ($1, $2, $3) ON CONFLICT (stage_id) DO UPDATE \
     SET noted_at = excluded.noted_at, note = excluded.note \
     WHERE realization_notes.note <> excluded.note";

/// The applied stages whose profile is the live one (`$1`), of this
/// handle's stack, that no revert undid or is undoing (a refused revert
/// left it live): the stage a realization measures is the latest applied
/// of them (chosen by the caller, so the query reads `stages_by_state`
/// without a sort; two stages rarely reach one profile).
pub(crate) const SQL_LIVE_STAGES: &str = "SELECT s.* FROM stages s \
     WHERE s.state = 'approved' AND s.applied_at IS NOT NULL AND s.candidate_digest = $1 \
       AND (CAST($2 AS TEXT) IS NULL OR s.stack = $2) \
       AND NOT EXISTS (SELECT 1 FROM stage_reverts r WHERE r.stage_id = s.id AND r.refusal IS NULL)";

impl Ledger {
    /// Records a realization A/B of stage `stage`: the experiment (the
    /// profile the stage replaced as its base, the stage's own as its
    /// candidate) and its `realizations` row, in one transaction.
    pub async fn insert_realization(
        &self,
        stage: &Stage,
        e: &NewExperiment,
    ) -> Result<ExperimentId> {
        if e.base_digest != stage.base_digest || e.candidate_digest != stage.candidate_digest {
            return Err(LedgerError::NotItsRealization {
                stage: stage.id,
                why: format!(
                    "its experiment measures {} against {} (the stage's: {} against {})",
                    e.candidate_digest.short(),
                    e.base_digest.short(),
                    stage.candidate_digest.short(),
                    stage.base_digest.short()
                ),
            });
        }
        let mut tx = self.begin_write().await?;
        let id = tx.insert_experiment(e).await?;
        let (c, cx) = tx.parts();
        on_db!(c, |c| {
            sqlx::query("INSERT INTO realizations (experiment_id, stage_id) VALUES ($1, $2)")
                .bind(id)
                .bind(stage.id)
                .execute(c)
                .await
                .map(|_| ())
                .map_err(cx.err("record a realization"))
        })?;
        tx.commit().await?;
        Ok(id)
    }

    /// Stage `id`'s realization attempts and note.
    pub async fn stage_realization(&self, id: StageId) -> Result<StageRealization> {
        let op = "read a stage's realization";
        let mut c = self.conn(op).await?;
        let attempts = on_db!(c.conn(), |c| {
            sqlx::query_as(SQL_ATTEMPTS_OF_STAGE)
                .bind(id)
                .fetch_all(c)
                .await
                .map_err(self.ctx.err(op))
        })?;
        let note = on_db!(c.conn(), |c| {
            sqlx::query_as(SQL_NOTE)
                .bind(id)
                .fetch_optional(c)
                .await
                .map_err(self.ctx.err(op))
        })?;
        Ok(StageRealization { attempts, note })
    }

    /// Every realization of this handle's stack's stages (every stack's,
    /// unscoped), by stage: for `stage list`, the report and the metrics.
    pub async fn realizations(
        &self,
    ) -> Result<std::collections::BTreeMap<StageId, StageRealization>> {
        let op = "read the realizations";
        let mut c = self.conn(op).await?;
        let attempts: Vec<RealizationAttempt> = on_db!(c.conn(), |c| {
            sqlx::query_as(SQL_ALL_ATTEMPTS)
                .bind(self.ctx.stack())
                .fetch_all(c)
                .await
                .map_err(self.ctx.err(op))
        })?;
        let notes: Vec<RealizationNote> = on_db!(c.conn(), |c| {
            sqlx::query_as(SQL_ALL_NOTES)
                .bind(self.ctx.stack())
                .fetch_all(c)
                .await
                .map_err(self.ctx.err(op))
        })?;
        let mut out: std::collections::BTreeMap<StageId, StageRealization> = Default::default();
        for a in attempts {
            out.entry(a.stage_id).or_default().attempts.push(a);
        }
        for n in notes {
            let stage = n.stage_id;
            out.entry(stage).or_default().note = Some(n);
        }
        Ok(out)
    }

    /// Notes why stage `id` is not realized (yet); `true` when the note is
    /// new or changed (the same note again changes nothing).
    pub async fn note_realization(
        &self,
        id: StageId,
        note: &str,
        at: DateTime<Utc>,
    ) -> Result<bool> {
        let op = "note why a stage is not realized";
        let mut c = self.conn(op).await?;
        on_db!(c.conn(), |c| {
            let done = sqlx::query(SQL_UPSERT_NOTE)
                .bind(id)
                .bind(ts(&at))
                .bind(note)
                .execute(c)
                .await
                .map_err(self.ctx.err(op))?;
            Ok(done.rows_affected() == 1)
        })
    }

    /// The applied, unreverted stage of this handle's stack whose profile
    /// is `live`, the latest applied (see [`SQL_LIVE_STAGES`]).
    pub async fn live_stage(&self, live: &Digest) -> Result<Option<Stage>> {
        let op = "look for the applied stage that is live";
        let mut c = self.conn(op).await?;
        let stages: Vec<Stage> = on_db!(c.conn(), |c| {
            sqlx::query_as(SQL_LIVE_STAGES)
                .bind(live)
                .bind(self.ctx.stack())
                .fetch_all(c)
                .await
                .map_err(self.ctx.err(op))
        })?;
        Ok(stages.into_iter().max_by_key(|s| (s.applied_at, s.id)))
    }
}
