//! Noise-floor estimates: the smallest relative change distinguishable from
//! repeating the same profile, measured from A/A pairs, per stack.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::FromRow;

use super::Conn;
use super::codec::ts;
use super::error::Ctx;
use super::ids::{ExperimentId, NoiseFloorId};
use super::{Ledger, Result, WriteTx};
use crate::vocab::Digest;

/// A noise floor about to be recorded.
#[derive(Debug, Clone, PartialEq, Serialize, FromRow)]
pub struct NewNoiseFloor {
    /// The serving stack's name in the config.
    pub stack: String,
    /// The live profile it was measured on.
    pub profile_digest: Digest,
    /// As a log ratio, like verdict effects; the measured value, before any
    /// configured minimum clamp.
    pub value: f64,
    /// How many A/A pairs it rests on.
    #[sqlx(try_from = "i64")]
    pub n: u32,
    /// The estimator, cited.
    pub method: String,
    pub measured_at: DateTime<Utc>,
    /// The A/A experiment it came from, when there was one.
    pub experiment_id: Option<ExperimentId>,
    /// The median 1-minute load average over its runs.
    pub load1: Option<f64>,
    /// The median CPU stall share (0..1) over its runs.
    pub cpu_pressure: Option<f64>,
    /// The median contention (runnable tasks per core, at least 1) over its
    /// runs: what an A/B judged against it calls a burst is a rise over this.
    pub contention: Option<f64>,
}

/// A stored noise floor: its id and the floor as recorded.
#[derive(Debug, Clone, PartialEq, Serialize, FromRow)]
pub struct NoiseFloor {
    pub id: NoiseFloorId,
    #[sqlx(flatten)]
    #[serde(flatten)]
    pub recorded: NewNoiseFloor,
}

reads_as_recorded!(NoiseFloor => NewNoiseFloor);

pub(crate) const SQL_LATEST_NOISE_FLOOR: &str = "SELECT * FROM noise_floors WHERE stack = $1 \
     ORDER BY measured_at DESC, id DESC LIMIT 1";

async fn insert(c: Conn<'_>, cx: &Ctx, f: &NewNoiseFloor) -> Result<NoiseFloorId> {
    on_db!(c, |c| {
        sqlx::query_scalar(
            "INSERT INTO noise_floors (stack, profile_digest, value, n, method, measured_at, \
             experiment_id, load1, cpu_pressure, contention) \
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) RETURNING id",
        )
        .bind(&f.stack)
        .bind(&f.profile_digest)
        .bind(f.value)
        .bind(i64::from(f.n))
        .bind(&f.method)
        .bind(ts(&f.measured_at))
        .bind(f.experiment_id)
        .bind(f.load1)
        .bind(f.cpu_pressure)
        .bind(f.contention)
        .fetch_one(c)
        .await
        .map_err(cx.err("record a noise floor"))
    })
}

async fn latest(c: Conn<'_>, cx: &Ctx, stack: &str) -> Result<Option<NoiseFloor>> {
    on_db!(c, |c| {
        sqlx::query_as(SQL_LATEST_NOISE_FLOOR)
            .bind(stack)
            .fetch_optional(c)
            .await
            .map_err(cx.err("read the latest noise floor"))
    })
}

impl WriteTx {
    pub async fn insert_noise_floor(&mut self, f: &NewNoiseFloor) -> Result<NoiseFloorId> {
        let (c, cx) = self.parts();
        insert(c, cx, f).await
    }
}

impl Ledger {
    /// [`WriteTx::insert_noise_floor`] as its own transaction.
    pub async fn insert_noise_floor(&self, f: &NewNoiseFloor) -> Result<NoiseFloorId> {
        let mut c = self.conn("record a noise floor").await?;
        insert(c.conn(), &self.ctx, f).await
    }

    /// The most recent noise floor measured for `stack`, if any.
    pub async fn latest_noise_floor(&self, stack: &str) -> Result<Option<NoiseFloor>> {
        let mut c = self.conn("read the latest noise floor").await?;
        latest(c.conn(), &self.ctx, stack).await
    }
}
