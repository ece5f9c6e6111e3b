//! Compositions: which staged wins a combined candidate is made of, and why
//! one was refused. The composite itself is an ordinary experiment (and,
//! once confirmed, an ordinary stage); this file links it to its parts.

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use sqlx::Row;

use super::codec::{json_col, ts};
use super::error::Ctx;
use super::ids::{CompositionId, CycleId, ExperimentId, StageId};
use super::{Conn, Interval, Ledger, Result, WriteTx};
use crate::menu::MenuId;
use crate::vocab::Digest;

/// A composition about to be recorded: measured (`experiment_id`) or
/// refused before measuring (`refusal`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct NewComposition {
    pub cycle_id: CycleId,
    pub created_at: DateTime<Utc>,
    pub base_digest: Digest,
    pub experiment_id: Option<ExperimentId>,
    pub refusal: Option<String>,
    /// The staged wins it applies, best first.
    pub parts: Vec<StageId>,
}

/// A stored composition.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Composition {
    pub id: CompositionId,
    pub experiment_id: Option<ExperimentId>,
    pub refusal: Option<String>,
    /// Best first.
    pub parts: Vec<StageId>,
}

/// One part of a composite stage, as `stage list/show` and the report show
/// it: the staged win and its confirmed effect.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StagePart {
    pub stage_id: StageId,
    pub menu_id: MenuId,
    pub parameters: Value,
    pub effect: f64,
    pub interval: Interval,
}

/// What a stage applies, for people: its menu entry, or for a composite its
/// parts (`composite of #3 rerank_pins + #5 stage_speculative`).
pub fn stage_label(menu_id: MenuId, parts: &[StagePart]) -> String {
    if parts.is_empty() {
        return menu_id.as_str().to_string();
    }
    let named: Vec<String> = parts
        .iter()
        .map(|p| format!("#{} {}", p.stage_id, p.menu_id))
        .collect();
    format!("composite of {}", named.join(" + "))
}

from_row!(StagePart, |row| {
    Ok(StagePart {
        stage_id: row.try_get("stage_id")?,
        menu_id: row.try_get("menu_id")?,
        parameters: json_col(row, "parameters")?,
        effect: row.try_get("effect")?,
        interval: Interval {
            low: row.try_get("interval_low")?,
            high: row.try_get("interval_high")?,
        },
    })
});

/// A composition row before its parts are read.
struct CompositionRow {
    id: CompositionId,
    experiment_id: Option<ExperimentId>,
    refusal: Option<String>,
}

from_row!(CompositionRow, |row| {
    Ok(CompositionRow {
        id: row.try_get("id")?,
        experiment_id: row.try_get("experiment_id")?,
        refusal: row.try_get("refusal")?,
    })
});

pub(crate) const SQL_PARTS_OF_EXPERIMENT: &str = "SELECT p.stage_id, e.menu_id, e.parameters, s.effect, \
     s.interval_low, s.interval_high \
     FROM compositions c JOIN composition_parts p ON p.composition_id = c.id \
     JOIN stages s ON s.id = p.stage_id JOIN experiments e ON e.id = s.experiment_id \
     WHERE c.experiment_id = $1 ORDER BY p.position";

pub(crate) const SQL_STAGED_COMPOSITES_OF_PART: &str = "SELECT s.id FROM composition_parts p \
     JOIN compositions c ON c.id = p.composition_id \
     JOIN stages s ON s.experiment_id = c.experiment_id \
     WHERE p.stage_id = $1 AND s.state = 'staged'";

/// A scoped handle sees the compositions its own stack's cycles tried.
pub(crate) const SQL_COMPOSITIONS_ON: &str = "SELECT m.id, m.experiment_id, m.refusal FROM compositions m \
     JOIN cycles c ON c.id = m.cycle_id \
     WHERE m.base_digest = $1 AND (CAST($2 AS TEXT) IS NULL OR c.stack = $2) ORDER BY m.id";

const SQL_COMPOSITION_OF: &str = "SELECT m.id, m.experiment_id, m.refusal FROM compositions m \
     JOIN cycles c ON c.id = m.cycle_id \
     WHERE m.experiment_id = $1 AND (CAST($2 AS TEXT) IS NULL OR c.stack = $2)";

async fn insert(c: Conn<'_>, cx: &Ctx, n: &NewComposition) -> Result<CompositionId> {
    on_db!(c, |c| {
        let id: CompositionId = sqlx::query_scalar(
            "INSERT INTO compositions (cycle_id, created_at, base_digest, experiment_id, refusal) \
             VALUES ($1, $2, $3, $4, $5) RETURNING id",
        )
        .bind(n.cycle_id)
        .bind(ts(&n.created_at))
        .bind(&n.base_digest)
        .bind(n.experiment_id)
        .bind(n.refusal.as_deref())
        .fetch_one(&mut *c)
        .await
        .map_err(cx.err("record a composition"))?;
        for (position, stage) in n.parts.iter().enumerate() {
            sqlx::query(
                "INSERT INTO composition_parts (composition_id, stage_id, position) \
                 VALUES ($1, $2, $3)",
            )
            .bind(id)
            .bind(stage)
            .bind(position as i64)
            .execute(&mut *c)
            .await
            .map_err(cx.err("record a composition's part"))?;
        }
        Ok(id)
    })
}

async fn with_parts(
    mut c: Conn<'_>,
    cx: &Ctx,
    rows: Vec<CompositionRow>,
) -> Result<Vec<Composition>> {
    let op = "read a composition";
    let mut out = Vec::with_capacity(rows.len());
    for row in rows {
        let parts = on_db!(c.re(), |c| {
            sqlx::query_scalar(
            "SELECT stage_id FROM composition_parts WHERE composition_id = $1 ORDER BY position",
        )
        .bind(row.id)
        .fetch_all(c)
        .await
        .map_err(cx.err(op))
        })?;
        out.push(Composition {
            id: row.id,
            experiment_id: row.experiment_id,
            refusal: row.refusal,
            parts,
        });
    }
    Ok(out)
}

/// The parts of the composite whose first A/B is `experiment_id`, best
/// first; empty for any other experiment.
pub(crate) async fn parts_of_experiment(
    c: Conn<'_>,
    cx: &Ctx,
    experiment_id: ExperimentId,
) -> Result<Vec<StagePart>> {
    on_db!(c, |c| sqlx::query_as(SQL_PARTS_OF_EXPERIMENT)
        .bind(experiment_id)
        .fetch_all(c)
        .await
        .map_err(cx.err("read a composite's parts")))
}

impl WriteTx {
    /// The staged composites that apply the staged win `part`.
    pub async fn staged_composites_of(&mut self, part: StageId) -> Result<Vec<StageId>> {
        let (c, cx) = self.parts();
        let mut ids: Vec<StageId> =
            on_db!(c, |c| sqlx::query_scalar(SQL_STAGED_COMPOSITES_OF_PART)
                .bind(part)
                .fetch_all(c)
                .await
                .map_err(cx.err("find the composites of a stage")))?;
        ids.sort();
        Ok(ids)
    }

    /// The parts of the composite staged from the experiment `experiment_id`.
    pub async fn parts_of(&mut self, experiment_id: ExperimentId) -> Result<Vec<StagePart>> {
        let (c, cx) = self.parts();
        parts_of_experiment(c, cx, experiment_id).await
    }
}

impl Ledger {
    /// Records a composition and its parts in one transaction.
    pub async fn insert_composition(&self, n: &NewComposition) -> Result<CompositionId> {
        let mut tx = self.begin_write().await?;
        let (c, cx) = tx.parts();
        let id = insert(c, cx, n).await?;
        tx.commit().await?;
        Ok(id)
    }

    /// Records why a measured composition goes no further (it did not beat
    /// its best part, or a part is no longer staged).
    pub async fn refuse_composition(&self, id: CompositionId, why: &str) -> Result<()> {
        let op = "record why a composition is not staged";
        let mut c = self.conn(op).await?;
        on_db!(c.conn(), |c| sqlx::query(
            "UPDATE compositions SET refusal = $2 WHERE id = $1"
        )
        .bind(id)
        .bind(why)
        .execute(c)
        .await
        .map(|_| ())
        .map_err(self.ctx.err(op)))
    }

    /// Every composition tried on the base profile `base`, oldest first.
    pub async fn compositions_on(&self, base: &Digest) -> Result<Vec<Composition>> {
        let op = "list the compositions of a profile";
        let mut c = self.conn(op).await?;
        let rows = on_db!(c.conn(), |c| sqlx::query_as(SQL_COMPOSITIONS_ON)
            .bind(base)
            .bind(self.ctx.stack())
            .fetch_all(c)
            .await
            .map_err(self.ctx.err(op)))?;
        with_parts(c.conn(), &self.ctx, rows).await
    }

    /// The composition measured by the experiment `experiment_id`, if any.
    pub async fn composition_of(&self, experiment_id: ExperimentId) -> Result<Option<Composition>> {
        let op = "read a composition";
        let mut c = self.conn(op).await?;
        let rows = on_db!(c.conn(), |c| sqlx::query_as(SQL_COMPOSITION_OF)
            .bind(experiment_id)
            .bind(self.ctx.stack())
            .fetch_all(c)
            .await
            .map_err(self.ctx.err(op)))?;
        Ok(with_parts(c.conn(), &self.ctx, rows).await?.pop())
    }
}
