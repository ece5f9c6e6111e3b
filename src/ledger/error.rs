//! The ledger's typed errors: each names the database file and says what to do.
//!
//! Raw SQLite errors are classified here (busy, read-only, disk full, damaged,
//! constraint) so that callers and people get an actionable message instead
//! of `database is locked` or `(code: 13) database or disk is full`. On
//! PostgreSQL a lost or refused connection is its own kind,
//! [`LedgerError::Unreachable`]: the one error a running daemon waits out
//! ([`LedgerError::is_transient`]) instead of stopping on.

use std::path::{Path, PathBuf};
use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::migrate::MigrateError;

use super::backend::Backend;
use super::ids::{CycleId, ExperimentId, StageId};
use crate::vocab::{CycleStatus, StageState, VerdictKind};

/// Everything that can go wrong in the ledger.
#[derive(Debug, thiserror::Error)]
pub enum LedgerError {
    #[error(
        "cannot create the directory {} for the ledger {}: {source}; create it by hand or point `ledger.path` in config.toml somewhere writable",
        dir.display(), path.display()
    )]
    CreateDir {
        path: PathBuf,
        dir: PathBuf,
        source: std::io::Error,
    },

    #[error(
        "cannot open the ledger {}: {source}; check that it is a SQLite database written by orchestrator and that this user may read and write it and its directory",
        path.display()
    )]
    Open { path: PathBuf, source: sqlx::Error },

    #[error("cannot connect to the PostgreSQL ledger {url}: {source}")]
    OpenPostgres {
        url: String,
        source: super::connect::ConnectError,
    },

    #[error(
        "another orchestrator daemon is running the stack {stack:?} on this PostgreSQL ledger ({holder}); stop it first, or give this host's stack its own `[stack] name`"
    )]
    StackLocked { stack: String, holder: String },

    #[error(
        "lost the PostgreSQL ledger {} while trying to {op}: {source}; the server is down, restarting or unreachable: check it (a running daemon backs off and resumes by itself)",
        path.display()
    )]
    Unreachable {
        path: PathBuf,
        op: &'static str,
        source: sqlx::Error,
    },

    #[error(
        "the stack {stack:?} is still locked by this daemon's own earlier session ({holder}), which the PostgreSQL server has not yet noticed is gone; retrying until it does"
    )]
    StackLockLingering { stack: String, holder: String },

    #[error(
        "{what} exists only on a PostgreSQL ledger ({}); a SQLite ledger uses the daemon's lock file beside it",
        path.display()
    )]
    PostgresOnly { path: PathBuf, what: &'static str },

    #[error(
        "the PostgreSQL ledger {url} needs its password in the environment variable {var} (`[ledger] password_env`), which is not set; export it for this process and retry"
    )]
    PasswordUnset { url: String, var: String },

    #[error(
        "{what} is not available on a PostgreSQL ledger ({}); it exists only for SQLite ledgers (`[ledger] path`)",
        path.display()
    )]
    NotOnPostgres { path: PathBuf, what: &'static str },

    #[error("cannot bring the ledger {} up to date: {}", path.display(), migrate_hint(source))]
    Migrate { path: PathBuf, source: MigrateError },

    #[error(
        "the ledger {} stayed locked by another writer for more than {} s while trying to {op}; another orchestrator process is holding a long write: wait for it to finish (or stop it) and retry",
        path.display(), timeout.as_secs_f64()
    )]
    Locked {
        path: PathBuf,
        op: &'static str,
        timeout: Duration,
        #[source]
        source: sqlx::Error,
    },

    #[error(
        "the ledger {} is read-only (while trying to {op}); give this user write permission on the file and on its directory (or remount its filesystem read-write), since SQLite creates {}-wal and {}-shm next to it",
        path.display(), path.display(), path.display()
    )]
    ReadOnly {
        path: PathBuf,
        op: &'static str,
        #[source]
        source: sqlx::Error,
    },

    #[error(
        "the ledger {} cannot grow: its disk is full or it reached `[ledger] max_size_mb` (while trying to {op}); the change was rolled back, nothing is half-written: free some space (or raise the cap) and retry",
        path.display()
    )]
    DiskFull {
        path: PathBuf,
        op: &'static str,
        #[source]
        source: sqlx::Error,
    },

    #[error(
        "the ledger {} is damaged or not a ledger (while trying to {op}): {source}; run `sqlite3 {} 'PRAGMA integrity_check'` and restore it from a backup",
        path.display(), path.display()
    )]
    Corrupt {
        path: PathBuf,
        op: &'static str,
        source: sqlx::Error,
    },

    #[error(
        "the ledger {} refused to {op} because it breaks the schema's rules: {source}; this is a bug in orchestrator, please report it with this message",
        path.display()
    )]
    Constraint {
        path: PathBuf,
        op: &'static str,
        source: sqlx::Error,
    },

    #[error(
        "no connection to the ledger {} became free within {} s (while trying to {op}); with an in-memory ledger, read through the open write transaction instead of the Ledger",
        path.display(), timeout.as_secs_f64()
    )]
    PoolTimedOut {
        path: PathBuf,
        op: &'static str,
        timeout: Duration,
    },

    #[error("the ledger {} failed to {op}: {source}", path.display())]
    Query {
        path: PathBuf,
        op: &'static str,
        source: sqlx::Error,
    },

    #[error(
        "{what} {id} does not exist in the ledger {}; list what exists with `orchestrator ledger` or `orchestrator stage list --all`",
        path.display()
    )]
    NotFound {
        path: PathBuf,
        what: &'static str,
        id: i64,
    },

    #[error(
        "stage {id} was already {state} by {by} at {at}; a stage is decided exactly once, so nothing was changed (see `orchestrator stage show {id}`)"
    )]
    StageAlreadyDecided {
        id: StageId,
        state: StageState,
        by: String,
        at: DateTime<Utc>,
    },

    #[error("stage {id} was not rejected: a rejection must say why; pass `--reason TEXT`")]
    RejectionNeedsReason { id: StageId },

    #[error(
        "experiment {experiment_id} already has its verdict ({existing}); each experiment gets exactly one, so the new verdict was not recorded"
    )]
    VerdictExists {
        experiment_id: ExperimentId,
        existing: VerdictKind,
    },

    #[error(
        "cycle {id} is already {status}; only a running cycle can be closed, so nothing was changed"
    )]
    CycleNotRunning { id: CycleId, status: CycleStatus },

    #[error(
        "experiment {experiment_id} cannot be staged on experiment {confirmation_id}: the ledger does not hold them as a win and its confirmation (an experiment whose confirmation_of is the win, on the same two profiles) with the verdicts given; only a win confirmed by an independent second A/B may be staged, with the statistics its verdicts recorded"
    )]
    NotStageable {
        experiment_id: ExperimentId,
        confirmation_id: ExperimentId,
    },

    #[error(
        "{what} is recorded for a stack, but this ledger handle names none (only a daemon's, scoped to its `[stack] name`, does); nothing was recorded"
    )]
    Unscoped { what: &'static str },

    #[error(
        "the experiment claiming win {win}'s confirmation does not confirm it (it confirms {names}); nothing was recorded"
    )]
    NotItsConfirmation { win: ExperimentId, names: String },

    #[error("{what} must be a JSON object, not {found}; nothing was recorded")]
    NotAnObject {
        what: &'static str,
        found: &'static str,
    },
}

impl LedgerError {
    /// Whether the error is one a running daemon waits out: the PostgreSQL
    /// server went away (or its stack lock's old session lingers on it), so
    /// the same write can succeed once it is back. Everything else (a full
    /// disk, the size cap, a constraint, any SQLite error) is fatal.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            LedgerError::Unreachable { .. } | LedgerError::StackLockLingering { .. }
        )
    }
}

/// Whether a PostgreSQL error means the connection is gone or cannot be
/// made now: a socket error (refused, reset, closed), no connection within
/// the pool's timeout, a closed pool, or the server saying it is shutting
/// down or starting (SQLSTATE 57P01 admin_shutdown, 57P02 crash_shutdown,
/// 57P03 cannot_connect_now) or that the connection failed (class 08).
fn connection_lost(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed => true,
        sqlx::Error::Database(d) => d
            .code()
            .is_some_and(|c| matches!(&*c, "57P01" | "57P02" | "57P03") || c.starts_with("08")),
        _ => false,
    }
}

/// The advice for each way a migration can fail.
fn migrate_hint(e: &MigrateError) -> String {
    match e {
        MigrateError::VersionMissing(v) => format!(
            "it holds migration {v}, which this build does not know: it was written by a newer orchestrator; use that version, or move the file aside to start a new ledger"
        ),
        MigrateError::VersionMismatch(v) => format!(
            "migration {v} was changed after this ledger applied it; applied migrations are never edited: restore migrations/ from version control and add a new migration instead"
        ),
        MigrateError::Dirty(v) => {
            format!("migration {v} was left half-applied; restore the ledger from a backup")
        }
        other => format!("{other}; check that the file is writable and not damaged"),
    }
}

/// SQLite primary result codes we give their own message.
/// See <https://www.sqlite.org/rescode.html>.
const SQLITE_BUSY: u32 = 5;
const SQLITE_LOCKED: u32 = 6;
const SQLITE_READONLY: u32 = 8;
const SQLITE_CORRUPT: u32 = 11;
const SQLITE_FULL: u32 = 13;
const SQLITE_CONSTRAINT: u32 = 19;
const SQLITE_NOTADB: u32 = 26;

/// Where an error happened, to be named in its message.
#[derive(Debug, Clone)]
pub(crate) struct Ctx {
    pub(crate) path: std::sync::Arc<Path>,
    pub(crate) busy_timeout: Duration,
    pub(crate) backend: Backend,
    /// The stack this handle writes for (`scope`); `None` sees every stack.
    pub(crate) scope: Option<std::sync::Arc<super::scope::StackScope>>,
}

/// The class of a PostgreSQL SQLSTATE we give its own message.
/// See <https://www.postgresql.org/docs/current/errcodes-appendix.html>.
fn postgres_class(code: &str) -> Option<ErrorClass> {
    Some(match code {
        // lock_not_available (lock_timeout), deadlock, serialization failure
        "55P03" | "40P01" | "40001" => ErrorClass::Busy,
        // read_only_sql_transaction (a hot standby), insufficient privilege
        "25006" | "42501" => ErrorClass::ReadOnly,
        // disk_full, out of memory, program limit (a quota)
        "53100" | "53200" | "54000" => ErrorClass::Full,
        // data_corrupted, index_corrupted
        "XX001" | "XX002" => ErrorClass::Corrupt,
        // integrity constraint violations, and data exceptions: a value the
        // column's type refuses (a malformed timestamp), which SQLite's
        // CHECKs refuse as constraints
        c if c.starts_with("23") || c.starts_with("22") => ErrorClass::Constraint,
        _ => return None,
    })
}

/// The kinds of database error both backends share a message for.
enum ErrorClass {
    Busy,
    ReadOnly,
    Full,
    Corrupt,
    Constraint,
}

impl Ctx {
    /// Classifies a sqlx error raised while trying to `op`.
    pub(crate) fn classify(&self, op: &'static str, source: sqlx::Error) -> LedgerError {
        let path = self.path.to_path_buf();
        if self.backend == Backend::Postgres && connection_lost(&source) {
            return LedgerError::Unreachable { path, op, source };
        }
        if matches!(source, sqlx::Error::PoolTimedOut) {
            return LedgerError::PoolTimedOut {
                path,
                op,
                timeout: self.busy_timeout,
            };
        }
        let code = source.as_database_error().and_then(|d| d.code());
        let kind = match self.backend {
            Backend::Sqlite => code
                .and_then(|c| c.parse::<u32>().ok())
                .and_then(|extended| match extended & 0xff {
                    SQLITE_BUSY | SQLITE_LOCKED => Some(ErrorClass::Busy),
                    SQLITE_READONLY => Some(ErrorClass::ReadOnly),
                    SQLITE_FULL => Some(ErrorClass::Full),
                    SQLITE_CORRUPT | SQLITE_NOTADB => Some(ErrorClass::Corrupt),
                    SQLITE_CONSTRAINT => Some(ErrorClass::Constraint),
                    _ => None,
                }),
            Backend::Postgres => code.as_deref().and_then(postgres_class),
        };
        match kind {
            Some(ErrorClass::Busy) => LedgerError::Locked {
                path,
                op,
                timeout: self.busy_timeout,
                source,
            },
            Some(ErrorClass::ReadOnly) => LedgerError::ReadOnly { path, op, source },
            Some(ErrorClass::Full) => LedgerError::DiskFull { path, op, source },
            Some(ErrorClass::Corrupt) => LedgerError::Corrupt { path, op, source },
            Some(ErrorClass::Constraint) => LedgerError::Constraint { path, op, source },
            None => LedgerError::Query { path, op, source },
        }
    }

    /// `classify` as a closure, for `map_err`.
    pub(crate) fn err(&self, op: &'static str) -> impl FnOnce(sqlx::Error) -> LedgerError + '_ {
        move |e| self.classify(op, e)
    }

    pub(crate) fn not_on_postgres(&self, what: &'static str) -> LedgerError {
        LedgerError::NotOnPostgres {
            path: self.path.to_path_buf(),
            what,
        }
    }

    pub(crate) fn not_on_postgres_only(&self, what: &'static str) -> LedgerError {
        LedgerError::PostgresOnly {
            path: self.path.to_path_buf(),
            what,
        }
    }

    pub(crate) fn not_found(&self, what: &'static str, id: i64) -> LedgerError {
        LedgerError::NotFound {
            path: self.path.to_path_buf(),
            what,
            id,
        }
    }
}

/// Whether a sqlx error is a UNIQUE violation (used to turn a second verdict
/// into [`LedgerError::VerdictExists`]).
pub(crate) fn is_unique_violation(e: &sqlx::Error) -> bool {
    e.as_database_error()
        .is_some_and(|d| d.kind() == sqlx::error::ErrorKind::UniqueViolation)
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;
    use std::error::Error as StdError;

    use super::*;

    /// A database error with a chosen SQLSTATE (or SQLite code), as the
    /// server would send it; sqlx builds its own only from a live server.
    #[derive(Debug)]
    struct ServerSaid(&'static str);

    impl std::fmt::Display for ServerSaid {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "the server answered {}", self.0)
        }
    }

    impl StdError for ServerSaid {}

    impl sqlx::error::DatabaseError for ServerSaid {
        fn message(&self) -> &str {
            "the server answered with an error"
        }
        fn code(&self) -> Option<Cow<'_, str>> {
            Some(Cow::Borrowed(self.0))
        }
        fn as_error(&self) -> &(dyn StdError + Send + Sync + 'static) {
            self
        }
        fn as_error_mut(&mut self) -> &mut (dyn StdError + Send + Sync + 'static) {
            self
        }
        fn into_error(self: Box<Self>) -> Box<dyn StdError + Send + Sync + 'static> {
            self
        }
        fn kind(&self) -> sqlx::error::ErrorKind {
            sqlx::error::ErrorKind::Other
        }
    }

    fn ctx(backend: Backend) -> Ctx {
        Ctx {
            path: std::sync::Arc::from(Path::new("postgres://orchestrator@db.lan/ledger")),
            busy_timeout: Duration::from_secs(10),
            backend,
            scope: None,
        }
    }

    fn io(kind: std::io::ErrorKind) -> sqlx::Error {
        sqlx::Error::Io(std::io::Error::from(kind))
    }

    fn transient(backend: Backend, e: sqlx::Error) -> bool {
        ctx(backend).classify("record a run", e).is_transient()
    }

    #[test]
    fn a_lost_postgres_connection_is_transient_and_nothing_else_is() {
        use std::io::ErrorKind::{BrokenPipe, ConnectionRefused, ConnectionReset, UnexpectedEof};
        let pg = Backend::Postgres;
        for kind in [
            ConnectionRefused,
            ConnectionReset,
            BrokenPipe,
            UnexpectedEof,
        ] {
            assert!(transient(pg, io(kind)), "{kind:?}");
        }
        assert!(transient(pg, sqlx::Error::PoolTimedOut));
        assert!(transient(pg, sqlx::Error::PoolClosed));
        // admin_shutdown, crash_shutdown, cannot_connect_now, and class 08
        for code in [
            "57P01", "57P02", "57P03", "08000", "08003", "08006", "08P01",
        ] {
            let e = sqlx::Error::Database(Box::new(ServerSaid(code)));
            assert!(transient(pg, e), "{code}");
        }
        // A full disk, a quota, a constraint, a lock wait, a query canceled
        // by statement_timeout (57014: class 57, not a shutdown): fatal.
        for code in [
            "53100", "54000", "23505", "22007", "55P03", "57014", "42P01",
        ] {
            let e = sqlx::Error::Database(Box::new(ServerSaid(code)));
            assert!(!transient(pg, e), "{code}");
        }
        assert!(!transient(pg, sqlx::Error::RowNotFound));
        // SQLite: a file is there or not; every error stays fatal.
        let lite = Backend::Sqlite;
        assert!(!transient(lite, io(ConnectionRefused)));
        assert!(!transient(lite, sqlx::Error::PoolTimedOut));
        for code in ["13", "8", "5", "2067"] {
            let e = sqlx::Error::Database(Box::new(ServerSaid(code)));
            assert!(!transient(lite, e), "{code}");
        }
    }

    #[test]
    fn a_lost_postgres_ledger_names_the_database_and_what_failed() {
        let e = ctx(Backend::Postgres).classify("record a run", sqlx::Error::PoolTimedOut);
        let text = e.to_string();
        assert!(
            text.contains("lost the PostgreSQL ledger postgres://orchestrator@db.lan/ledger")
                && text.contains("while trying to record a run")
                && text.contains("resumes by itself"),
            "{text}"
        );
        // On SQLite a pool timeout keeps its own message and stays fatal.
        let e = ctx(Backend::Sqlite).classify("record a run", sqlx::Error::PoolTimedOut);
        assert!(matches!(e, LedgerError::PoolTimedOut { .. }), "{e:?}");
    }
}
