//! The two databases a ledger can live in, SQLite (the embedded default) and
//! PostgreSQL (one database for a fleet of hosts), behind one set of types:
//! a pool, a pooled connection, a borrowed connection and a write
//! transaction, each an enum of the two. Queries are written once inside
//! [`on_db!`] and compiled for both.
//!
//! # SQLite-only SQL and its PostgreSQL counterpart
//!
//! | SQLite                          | PostgreSQL                                            |
//! |---------------------------------|-------------------------------------------------------|
//! | `BEGIN IMMEDIATE` (one writer)  | `BEGIN` + `pg_advisory_xact_lock` on the ledger's writer key, waiting at most the busy timeout (`lock_timeout`) |
//! | `PRAGMA` WAL, synchronous, busy timeout, foreign keys | the server's own durability; FOREIGN KEYs are always on; `lock_timeout` |
//! | `max(a, b)` (scalar)            | `GREATEST(a, b)` ([`Backend::pick`])                  |
//! | `json_each(?)` for an id list   | `json_array_elements_text(?::json)`                   |
//! | `group_concat(x, ',')`          | `string_agg(x, ',')`                                  |
//! | `a IS NOT b`                    | `a IS DISTINCT FROM b` (both)                         |
//! | `max_size_mb` (`max_page_count`)| not on PostgreSQL: a config error (use the server's quotas) |
//! | `PRAGMA page_count` × `page_size` | `pg_database_size(current_database())`             |
//! | `PRAGMA integrity_check`, `foreign_key_check` | not run: the server checks its pages and always enforces foreign keys; every other `ledger --check` rule runs on both |
//! | `EXPLAIN QUERY PLAN`            | not on PostgreSQL ([`super::LedgerError::NotOnPostgres`]) |
//!
//! Timestamps are fixed-width UTC text on SQLite and `TIMESTAMPTZ` on
//! PostgreSQL (`codec::Ts` encodes each); booleans are 0/1 integers and
//! `BOOLEAN`; both read back as the same Rust values.

use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgConnection, PgPool};
use sqlx::sqlite::{SqliteConnection, SqlitePool};
use sqlx::{Postgres, Sqlite, Transaction};

/// Which database a ledger lives in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    Sqlite,
    Postgres,
}

impl Backend {
    /// The statement spelled for this backend, where the two differ.
    pub(crate) fn pick(self, sqlite: &'static str, postgres: &'static str) -> &'static str {
        match self {
            Backend::Sqlite => sqlite,
            Backend::Postgres => postgres,
        }
    }
}

/// A pool of connections to one ledger.
#[derive(Debug, Clone)]
pub(crate) enum Pool {
    Sqlite(SqlitePool),
    Postgres(PgPool),
}

impl Pool {
    pub(crate) fn backend(&self) -> Backend {
        match self {
            Pool::Sqlite(_) => Backend::Sqlite,
            Pool::Postgres(_) => Backend::Postgres,
        }
    }

    pub(crate) async fn acquire(&self) -> Result<PooledConn, sqlx::Error> {
        Ok(match self {
            Pool::Sqlite(p) => PooledConn::Sqlite(p.acquire().await?),
            Pool::Postgres(p) => PooledConn::Postgres(p.acquire().await?),
        })
    }

    /// A read-only transaction on one consistent snapshot (PostgreSQL's
    /// default isolation would let each statement see newer commits).
    pub(crate) async fn begin_read(&self) -> Result<Tx, sqlx::Error> {
        Ok(match self {
            Pool::Sqlite(p) => Tx::Sqlite(p.begin().await?),
            Pool::Postgres(p) => Tx::Postgres(
                p.begin_with("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
                    .await?,
            ),
        })
    }

    pub(crate) async fn close(&self) {
        match self {
            Pool::Sqlite(p) => p.close().await,
            Pool::Postgres(p) => p.close().await,
        }
    }
}

/// A connection taken from the pool (returned to it when dropped).
#[derive(Debug)]
pub(crate) enum PooledConn {
    Sqlite(PoolConnection<Sqlite>),
    Postgres(PoolConnection<Postgres>),
}

impl PooledConn {
    /// The connection, borrowed for one query function.
    pub(crate) fn conn(&mut self) -> Conn<'_> {
        match self {
            PooledConn::Sqlite(c) => Conn::Sqlite(c),
            PooledConn::Postgres(c) => Conn::Postgres(c),
        }
    }
}

/// A borrowed connection of either backend: what every query function takes.
#[derive(Debug)]
pub(crate) enum Conn<'a> {
    Sqlite(&'a mut SqliteConnection),
    Postgres(&'a mut PgConnection),
}

impl Conn<'_> {
    /// Borrows it again, for a function that runs several query functions.
    pub(crate) fn re(&mut self) -> Conn<'_> {
        match self {
            Conn::Sqlite(c) => Conn::Sqlite(c),
            Conn::Postgres(c) => Conn::Postgres(c),
        }
    }
}

impl<'a> From<&'a mut SqliteConnection> for Conn<'a> {
    fn from(c: &'a mut SqliteConnection) -> Self {
        Conn::Sqlite(c)
    }
}

impl<'a> From<&'a mut PgConnection> for Conn<'a> {
    fn from(c: &'a mut PgConnection) -> Self {
        Conn::Postgres(c)
    }
}

/// An open write transaction of either backend.
#[derive(Debug)]
pub(crate) enum Tx {
    Sqlite(Transaction<'static, Sqlite>),
    Postgres(Transaction<'static, Postgres>),
}

impl Tx {
    pub(crate) fn conn(&mut self) -> Conn<'_> {
        match self {
            Tx::Sqlite(t) => Conn::Sqlite(t),
            Tx::Postgres(t) => Conn::Postgres(t),
        }
    }

    pub(crate) async fn commit(self) -> Result<(), sqlx::Error> {
        match self {
            Tx::Sqlite(t) => t.commit().await,
            Tx::Postgres(t) => t.commit().await,
        }
    }

    pub(crate) async fn rollback(self) -> Result<(), sqlx::Error> {
        match self {
            Tx::Sqlite(t) => t.rollback().await,
            Tx::Postgres(t) => t.rollback().await,
        }
    }
}

/// The key of the transaction-scoped advisory lock every PostgreSQL write
/// transaction takes first: writers queue on it as SQLite's `BEGIN
/// IMMEDIATE` makes them queue, so read-then-write steps (the duplicate
/// check, a stage decision) see what the previous writer committed. Ledger
/// writes are short (no engine run happens inside one), so one queue for the
/// whole fleet costs little. ("orchledg" in ASCII.)
pub(crate) const PG_WRITER_LOCK: i64 = 0x6f72_6368_6c65_6467;
