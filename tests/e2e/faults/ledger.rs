//! Reads the ledger (read-only, while the daemon may be writing), so a test
//! can follow the cycles and say where a string landed. Before the daemon
//! has created and migrated it, every read is empty.

use std::future::Future;
use std::path::Path;

use sqlx::sqlite::{SqliteConnectOptions, SqlitePool, SqlitePoolOptions};
use sqlx::{Column, Row, TypeInfo};

/// Runs `f` on a read-only pool of `db`; `None` when it cannot be read yet.
fn read<T, F: Future<Output = Result<T, sqlx::Error>>>(
    db: &Path,
    f: impl FnOnce(SqlitePool) -> F,
) -> Option<T> {
    if !db.exists() {
        return None;
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let opts = SqliteConnectOptions::new().filename(db).read_only(true);
        let pool = SqlitePoolOptions::new()
            .max_connections(1)
            .connect_with(opts)
            .await
            .ok()?;
        let out = f(pool.clone()).await.ok();
        pool.close().await;
        out
    })
}

/// One text cell: (table, column, text).
pub type Cell = (String, String, String);

/// Every non-NULL text (or blob, read as UTF-8) cell of every table.
pub fn text_cells(db: &Path) -> Vec<Cell> {
    read(db, |pool| async move {
        let tables: Vec<String> = sqlx::query_scalar(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'",
        )
        .fetch_all(&pool)
        .await?;
        let mut out = Vec::new();
        for table in tables {
            // Table names come from sqlite_master, not from any input.
            let rows = sqlx::query(&format!("SELECT * FROM \"{table}\""))
                .fetch_all(&pool)
                .await?;
            for row in rows {
                for (i, col) in row.columns().iter().enumerate() {
                    let text = match col.type_info().name() {
                        "BLOB" => row
                            .try_get::<Option<Vec<u8>>, _>(i)
                            .ok()
                            .flatten()
                            .map(|b| String::from_utf8_lossy(&b).to_string()),
                        _ => row.try_get::<Option<String>, _>(i).ok().flatten(),
                    };
                    if let Some(t) = text {
                        out.push((table.clone(), col.name().to_string(), t));
                    }
                }
            }
        }
        Ok(out)
    })
    .expect("the ledger can be read")
}

/// Where `needle` occurs: (table, column) pairs, with repeats.
pub fn cells_containing(db: &Path, needle: &str) -> Vec<(String, String)> {
    text_cells(db)
        .into_iter()
        .filter(|(_, _, t)| t.contains(needle))
        .map(|(t, c, _)| (t, c))
        .collect()
}

/// `SELECT cycle_id, raw_answer, rejection_kind FROM proposals`.
pub fn proposals(db: &Path) -> Vec<(i64, Option<String>, Option<String>)> {
    read(db, |pool| async move {
        sqlx::query_as("SELECT cycle_id, raw_answer, rejection_kind FROM proposals ORDER BY id")
            .fetch_all(&pool)
            .await
    })
    .unwrap_or_default()
}

/// The refusal message of every refused proposal, in order.
pub fn rejections(db: &Path) -> Vec<String> {
    read(db, |pool| async move {
        sqlx::query_scalar(
            "SELECT rejection FROM proposals WHERE rejection IS NOT NULL ORDER BY id",
        )
        .fetch_all(&pool)
        .await
    })
    .unwrap_or_default()
}

/// `SELECT cycle_id, metrics FROM observations`, as JSON.
pub fn observations(db: &Path) -> Vec<(i64, serde_json::Value)> {
    let rows: Vec<(i64, String)> = read(db, |pool| async move {
        sqlx::query_as("SELECT cycle_id, metrics FROM observations ORDER BY id")
            .fetch_all(&pool)
            .await
    })
    .unwrap_or_default();
    rows.into_iter()
        .map(|(c, m)| (c, serde_json::from_str(&m).unwrap()))
        .collect()
}

/// (cycle, experiment) of the first bench run after cycle `after` whose
/// stderr carries `fault-wrapper: fault=KIND`: the experiment the fault
/// hit, which may be a noise floor's A/A measured within another
/// experiment's cycle.
pub fn experiment_of_fault(db: &Path, kind: &str, after: i64) -> Option<(i64, i64)> {
    let needle = format!("fault-wrapper: fault={kind}\n");
    read(db, |pool| async move {
        sqlx::query_as(
            "SELECT e.cycle_id, e.id FROM runs r JOIN experiments e ON r.experiment_id = e.id
             WHERE e.cycle_id > ? AND instr(r.stderr_tail, ?) > 0 ORDER BY r.id LIMIT 1",
        )
        .bind(after)
        .bind(needle)
        .fetch_optional(&pool)
        .await
    })
    .flatten()
}

/// A noise floor's A/A under way within another experiment's cycle (an
/// A/B the bound did not decide, waiting for it): (its id, the runs it has
/// recorded so far).
pub fn open_floor(db: &Path) -> Option<(i64, i64)> {
    read(db, |pool| async move {
        sqlx::query_as(
            "SELECT e.id, (SELECT count(*) FROM runs r WHERE r.experiment_id = e.id)
             FROM experiments e
             WHERE e.menu_id = 'remeasure'
               AND NOT EXISTS (SELECT 1 FROM verdicts v WHERE v.experiment_id = e.id)
               AND EXISTS (SELECT 1 FROM experiments ab
                           WHERE ab.cycle_id = e.cycle_id AND ab.id < e.id
                             AND ab.menu_id <> 'remeasure')
             ORDER BY e.id DESC LIMIT 1",
        )
        .fetch_optional(&pool)
        .await
    })
    .flatten()
}

/// The method (`bench`, `surface`) of each experiment of `menu_id`, in order.
pub fn methods_of(db: &Path, menu_id: &str) -> Vec<String> {
    read(db, |pool| async move {
        sqlx::query_scalar("SELECT method FROM experiments WHERE menu_id = ? ORDER BY id")
            .bind(menu_id)
            .fetch_all(&pool)
            .await
    })
    .unwrap_or_default()
}

/// How many experiments of this menu entry the ledger holds.
pub fn experiments_of(db: &Path, menu_id: &str) -> i64 {
    read(db, |pool| async move {
        sqlx::query_scalar("SELECT count(*) FROM experiments WHERE menu_id = ?")
            .bind(menu_id)
            .fetch_one(&pool)
            .await
    })
    .unwrap_or_default()
}

/// The floor each verdict of `menu_id`'s experiments was judged by, and
/// whether that was the bound, in order.
pub fn verdict_floors_of(db: &Path, menu_id: &str) -> Vec<(Option<f64>, bool)> {
    read(db, |pool| async move {
        sqlx::query_as(
            "SELECT v.noise_floor, v.floor_is_bound FROM verdicts v \
             JOIN experiments e ON e.id = v.experiment_id WHERE e.menu_id = ? ORDER BY e.id",
        )
        .bind(menu_id)
        .fetch_all(&pool)
        .await
    })
    .unwrap_or_default()
}

/// How many noise floors are stored under `key` (`STACK/PROTOCOL`).
pub fn floors_of(db: &Path, key: &str) -> i64 {
    read(db, |pool| async move {
        sqlx::query_scalar("SELECT count(*) FROM noise_floors WHERE stack = ?")
            .bind(key)
            .fetch_one(&pool)
            .await
    })
    .unwrap_or_default()
}
