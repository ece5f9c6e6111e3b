//! Reads every text cell of the ledger (read-only, while the daemon may be
//! writing), so a test can say where a string landed.

use std::path::Path;

use sqlx::sqlite::{SqliteConnectOptions, SqlitePoolOptions};
use sqlx::{Column, Row, TypeInfo};

/// One text cell: (table, column, text).
pub type Cell = (String, String, String);

/// Every non-NULL text (or blob, read as UTF-8) cell of every table.
pub fn text_cells(db: &Path) -> Vec<Cell> {
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
            .unwrap();
        let tables: Vec<String> = sqlx::query_scalar(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'",
        )
        .fetch_all(&pool)
        .await
        .unwrap();
        let mut out = Vec::new();
        for table in tables {
            // Table names come from sqlite_master, not from any input.
            let rows = sqlx::query(&format!("SELECT * FROM \"{table}\""))
                .fetch_all(&pool)
                .await
                .unwrap();
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
        pool.close().await;
        out
    })
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
            .unwrap();
        let rows: Vec<(i64, Option<String>, Option<String>)> = sqlx::query_as(
            "SELECT cycle_id, raw_answer, rejection_kind FROM proposals ORDER BY id",
        )
        .fetch_all(&pool)
        .await
        .unwrap();
        pool.close().await;
        rows
    })
}

/// `SELECT cycle_id, metrics FROM observations`, as JSON.
pub fn observations(db: &Path) -> Vec<(i64, serde_json::Value)> {
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
            .unwrap();
        let rows: Vec<(i64, String)> =
            sqlx::query_as("SELECT cycle_id, metrics FROM observations ORDER BY id")
                .fetch_all(&pool)
                .await
                .unwrap();
        pool.close().await;
        rows.into_iter()
            .map(|(c, m)| (c, serde_json::from_str(&m).unwrap()))
            .collect()
    })
}

/// The cycle whose bench run's stderr carries `fault-wrapper: fault=KIND`.
pub fn cycle_of_fault(db: &Path, kind: &str) -> Option<i64> {
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
            .unwrap();
        let row: Option<(i64,)> = sqlx::query_as(
            "SELECT e.cycle_id FROM runs r JOIN experiments e ON r.experiment_id = e.id
             WHERE instr(r.stderr_tail, ?) > 0 ORDER BY r.id LIMIT 1",
        )
        .bind(format!("fault-wrapper: fault={kind}\n"))
        .fetch_optional(&pool)
        .await
        .unwrap();
        pool.close().await;
        row.map(|r| r.0)
    })
}
