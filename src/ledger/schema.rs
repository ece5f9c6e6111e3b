//! Whether a ledger's schema is migrated, read without migrating it: what
//! `_sqlx_migrations` holds against the migrations this build embeds. A
//! SQLite open skips the migrator when it is current (a read-only ledger
//! can still be listed); `orchestrator check` reports it for PostgreSQL.

use sqlx::migrate::Migrator;

use super::error::Ctx;
use super::{Conn, Ledger, Result};

/// The schema of a ledger against this build's migrations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SchemaState {
    /// Every migration this build knows is applied, unchanged, and no other.
    Current { applied: usize },
    /// Some are not applied yet (all of them on a new database); the first
    /// command that opens the ledger (any but `check`) applies them.
    Pending { applied: usize, pending: usize },
    /// It holds a migration this build does not know: a newer orchestrator
    /// wrote it.
    Newer { version: i64 },
    /// An applied migration differs from this build's.
    Changed { version: i64 },
    /// A migration was left half-applied.
    Dirty { version: i64 },
}

impl SchemaState {
    pub fn is_current(&self) -> bool {
        matches!(self, SchemaState::Current { .. })
    }
}

impl Ledger {
    /// The schema's state, read only: never migrates.
    pub async fn schema_state(&self) -> Result<SchemaState> {
        let mut c = self.conn("read the schema version").await?;
        let migrator = match self.backend() {
            super::Backend::Sqlite => &super::MIGRATOR,
            super::Backend::Postgres => &super::PG_MIGRATOR,
        };
        state(c.conn(), &self.ctx, migrator).await
    }
}

/// The schema's state on `conn`, against `migrator`'s migrations.
pub(super) async fn state(conn: Conn<'_>, cx: &Ctx, migrator: &Migrator) -> Result<SchemaState> {
    let op = "read the schema version";
    let (tables, applied): (i64, Vec<(i64, Vec<u8>, bool)>) = on_db!(conn, |c, d| {
        let tables: i64 = sqlx::query_scalar(d.pick(
            "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = '_sqlx_migrations'",
            "SELECT count(*) FROM pg_tables WHERE schemaname = current_schema() \
             AND tablename = '_sqlx_migrations'",
        ))
        .fetch_one(&mut *c)
        .await
        .map_err(cx.err(op))?;
        let applied = if tables == 0 {
            Vec::new()
        } else {
            sqlx::query_as(
                "SELECT version, checksum, success FROM _sqlx_migrations ORDER BY version",
            )
            .fetch_all(&mut *c)
            .await
            .map_err(cx.err(op))?
        };
        (tables, applied)
    });
    let known: Vec<_> = migrator
        .iter()
        .filter(|m| !m.migration_type.is_down_migration())
        .collect();
    if tables == 0 {
        return Ok(SchemaState::Pending {
            applied: 0,
            pending: known.len(),
        });
    }
    for (version, checksum, success) in &applied {
        let Some(m) = known.iter().find(|m| m.version == *version) else {
            return Ok(SchemaState::Newer { version: *version });
        };
        if !success {
            return Ok(SchemaState::Dirty { version: *version });
        }
        if *m.checksum != **checksum {
            return Ok(SchemaState::Changed { version: *version });
        }
    }
    Ok(if applied.len() == known.len() {
        SchemaState::Current {
            applied: applied.len(),
        }
    } else {
        SchemaState::Pending {
            applied: applied.len(),
            pending: known.len() - applied.len(),
        }
    })
}
