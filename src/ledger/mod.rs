//! The experiment ledger, in a SQLite file (the default) or a PostgreSQL
//! database (`[ledger] url`, see `backend` for what differs): every cycle,
//! proposal, experiment, run, verdict, noise floor, reference hash and stage
//! decision. All SQL of the program lives under this module; callers use the
//! typed functions, the same on both backends.
//!
//! # Writing
//!
//! A multi-row change is one transaction owned by the caller:
//! [`Ledger::begin_write`] returns a [`WriteTx`] begun `IMMEDIATE`, so the
//! write lock is taken up front and two writers queue on the busy timeout
//! instead of deadlocking on a read-to-write upgrade (which SQLite reports as
//! `database is locked` at once, whatever the timeout). On PostgreSQL the
//! transaction takes the ledger's writer advisory lock first, to the same
//! effect. Dropping a `WriteTx`
//! without [`WriteTx::commit`] rolls it back. Single-row writes also exist as
//! methods on [`Ledger`]; they run as one autocommit statement.
//!
//! Timestamps are passed in by the caller (an injected clock), never read
//! from the system here, so tests and benchmark fixtures can backdate rows.
//!
//! # Indexes: which query uses which
//!
//! | query ([`NamedQuery`])        | index                                     |
//! |-------------------------------|-------------------------------------------|
//! | `AbortRunningCycles`          | `cycles_running` (partial, status = running) |
//! | `RecentCycles`                | `cycles_by_start`                         |
//! | `CycleVerdicts`               | `verdicts_by_cycle`                       |
//! | `RecentExperiments`           | primary key (rowid order, newest first), then `cycles`' for the stack |
//! | `DuplicateDecided`            | `experiments_by_identity`                 |
//! | `Confirmations`               | `experiments_by_confirmation`             |
//! | `ClassmateWins`               | `experiments_by_base`, then primary and unique keys |
//! | `ExperimentRuns`              | `sqlite_autoindex_runs_1` (experiment_id, order_index) |
//! | `ExperimentVerdict`           | `sqlite_autoindex_verdicts_1` (experiment_id) |
//! | `LatestNoiseFloor`            | `noise_floors_by_stack`                   |
//! | `CurrentReferenceHash`        | `reference_hashes_current`                |
//! | `StagesByState`               | `stages_by_state`                         |
//! | `AllStages`                   | `stages_by_time`                          |
//! | `CompositionsOn`              | `compositions_by_base`                    |
//! | `CompositeParts`              | `sqlite_autoindex_compositions_1` (experiment_id), then primary keys |
//! | `StagedCompositesOfPart`      | `stages_by_state`, then unique keys       |
//! | `ReportCycles`, `ReportVerdicts`, `ReportProposals` | `cycles_by_start` |
//! | `ReportRuns`                  | `experiments_by_time`, then `sqlite_autoindex_runs_1` |
//! | `ReportNoiseFloors`           | `noise_floors_by_stack`                   |
//! | `ReportStages`                | `stages_by_time`                          |
//! | `ReportLeverRuns`             | `sqlite_autoindex_runs_1` (experiment_id, order_index) |
//! | `LiveStages`                  | `stages_by_state`, then `stage_reverts`' primary key |
//! | `StageRealizations`           | `realizations_by_stage`, then primary keys |
//! | `EngineRuns`, `ReportEngineRuns` | `runs_by_start`, then primary and unique keys |
//! | `RecentWaits`                 | `waits_by_start`                          |
//! | `RecentLiveMetric`            | primary key (newest first, bounded by the limit), then `cycles`' |
//!
//! [`Ledger::query_plan`] returns SQLite's `EXPLAIN QUERY PLAN` for each, and
//! a test asserts that none of them scans a whole table (the PostgreSQL
//! schema has the same indexes under the same names).
//!
//! # Files
//!
//! `error` (typed errors), `ids` (row id newtypes), `codec` (stored forms),
//! `backend` (the two pools), `target` (a PostgreSQL URL), `connect`
//! (connecting to PostgreSQL, and why it failed), `schema` (whether the
//! schema is migrated, read only), `scope` (the
//! stack a handle writes and reads for), `stack_lock` (PostgreSQL's
//! one-daemon-per-stack lock), then one file per table family: `cycles`
//! (cycles, observations, the `orchestrator ledger` listing), `proposals`,
//! `experiments` (with the history and duplicate queries), `runs`, `parts`
//! (a profile's measured parts of a token), `verdicts`, `noise`,
//! `references`, `stages`, `staging` (a
//! confirmed win staged from its two recorded wins, in one guarded insert),
//! `claims` (which stack confirms a win),
//! `class_applies` (a stage approved for its class, applied by each
//! classmate), `applies` (whether an approved stage reached its stack's
//! live profile), `reverts` (a stage's replaced profile put back, and
//! the restarts run after a write), `realizations` (what an applied stage
//! realized on the live server, and why one is not realized yet),
//! `compositions` (which staged wins a composite applies),
//! `report` (the report's period queries, per stack), `check` (`ledger
//! --check`), `query_plan` (the named queries and their plans), and `costs` (each cycle's wall
//! time against its engine runs' time, for the soak benchmark).

/// A stored row is its id plus the new row the caller recorded (its
/// `recorded` field); it reads as that new row, so `experiment.menu_id`
/// means the same on both. One impl per table, from here.
macro_rules! reads_as_recorded {
    ($stored:ty => $new:ty) => {
        impl std::ops::Deref for $stored {
            type Target = $new;
            fn deref(&self) -> &$new {
                &self.recorded
            }
        }
    };
}

/// Runs `$body` once per backend with `$c` bound to that backend's
/// connection (`&mut SqliteConnection` or `&mut PgConnection`), so each
/// query's text and row type are written once and compiled for both. The
/// two-name form also binds `$d` to the [`Backend`], for the few statements
/// whose spelling differs (see [`Backend::pick`]).
macro_rules! on_db {
    ($conn:expr, |$c:ident| $body:expr) => {
        match $conn {
            $crate::ledger::Conn::Sqlite($c) => $body,
            $crate::ledger::Conn::Postgres($c) => $body,
        }
    };
    ($conn:expr, |$c:ident, $d:ident| $body:expr) => {
        match $conn {
            $crate::ledger::Conn::Sqlite($c) => {
                let $d = $crate::ledger::Backend::Sqlite;
                $body
            }
            $crate::ledger::Conn::Postgres($c) => {
                let $d = $crate::ledger::Backend::Postgres;
                $body
            }
        }
    };
}

/// A hand-written `FromRow` for both backends' rows from one body.
macro_rules! from_row {
    ($t:ty, |$row:ident| $body:expr) => {
        impl sqlx::FromRow<'_, sqlx::sqlite::SqliteRow> for $t {
            fn from_row($row: &sqlx::sqlite::SqliteRow) -> Result<Self, sqlx::Error> {
                $body
            }
        }
        impl sqlx::FromRow<'_, sqlx::postgres::PgRow> for $t {
            fn from_row($row: &sqlx::postgres::PgRow) -> Result<Self, sqlx::Error> {
                $body
            }
        }
    };
}

/// A cycle row's columns. Its `proposer` is the one whose proposals the
/// cycle recorded: the stored `cycles.proposer` is the proposer the daemon
/// was configured with, asked or not, so a cycle that never got a proposal
/// (a floor refresh, a confirmation, a composition, one that ended before
/// proposing) reads as having none. The lookup walks `proposals`' unique
/// `(cycle_id, attempt)` index.
macro_rules! cycle_columns {
    () => {
        "id, started_at, ended_at, status, error, \
         (SELECT p.proposer FROM proposals p WHERE p.cycle_id = cycles.id \
          ORDER BY p.attempt LIMIT 1) AS proposer, stack, class"
    };
}

mod applies;
mod backend;
mod check;
mod claims;
mod class_applies;
mod codec;
mod compositions;
mod connect;
mod costs;
mod cycles;
mod deferrals;
mod engine_time;
mod error;
mod experiments;
mod ids;
mod manual;
mod noise;
mod parts;
mod query_plan;
mod proposals;
mod realizations;
mod references;
mod report;
mod reverts;
mod runs;
mod schema;
mod scope;
mod stack_lock;
mod stage_counts;
mod stage_expiry;
mod stages;
mod staging;
mod target;
mod verdicts;
mod waits;

#[cfg(test)]
pub(crate) mod tests;

use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use sqlx::Connection;
use sqlx::migrate::Migrator;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions, SqliteSynchronous};

pub use backend::Backend;
pub(crate) use backend::Conn;
use backend::{Pool, PooledConn, Tx};

pub use applies::{ApplyOutcome, StageApply};
pub use check::{CheckContext, Rule, Violation};
pub use claims::ConfirmationClaim;
pub use class_applies::HostApply;
pub use compositions::{Composition, NewComposition, StagePart, stage_label};
pub use connect::{CONNECT_TIMEOUT, ConnectError};
pub use costs::CycleCost;
pub use cycles::{
    CycleOutcome, CycleRecord, CycleSummary, CycleVerdict, NewObservation, Observation,
};
pub use deferrals::CycleDeferral;
pub use engine_time::{EngineRun, EngineSeconds};
pub use error::LedgerError;
pub use experiments::{DecidedOn, Experiment, ExperimentOutcome, NewExperiment, PriorDecision};
pub use ids::{
    CompositionId, CycleId, ExperimentId, NoiseFloorId, ObservationId, ProposalId, ReferenceHashId,
    RunId, StageId, VerdictId, WaitId,
};
pub use manual::{MANUAL, NewManualExperiment};
pub use noise::{NewNoiseFloor, NoiseFloor};
pub use parts::MeasuredToken;
pub use proposals::{NewProposal, Proposal, ProposalRejection};
pub use query_plan::NamedQuery;
pub use realizations::{
    MAX_ATTEMPTS as MAX_REALIZATION_ATTEMPTS, RealizationAttempt, RealizationNote, Realized,
    StageRealization,
};
pub use references::{NewReferenceHash, ReferenceHash};
pub use report::{LeverRun, ReportProposal, ReportRun, ReportStack, ReportStage, ReportVerdict};
pub use reverts::{Restarted, RevertStatus, StageRevert};
pub use runs::{NewRun, Run, RunPressure, TimingSource, TokenParts};
pub use schema::SchemaState;
pub use scope::{Adopted, StackScope};
pub use stack_lock::StackLock;
pub use stage_counts::StageCounts;
pub use stages::{Stage, StageDecision, StageDetail, StageSummary};
pub use staging::RecordedWin;
pub use target::PostgresTarget;
pub use verdicts::{NewVerdict, Verdict};
pub use waits::{NewWait, Wait};

use error::Ctx;

/// How long a writer waits for another writer before giving up. Long enough
/// for any single ledger transaction (they hold no engine runs), short enough
/// that a stuck process is reported rather than waited on forever.
pub const DEFAULT_BUSY_TIMEOUT: Duration = Duration::from_secs(10);

/// Connections per file ledger: WAL lets readers run beside the one writer.
const FILE_POOL_SIZE: u32 = 4;

/// The migrations under `migrations/`, embedded at build time (`build.rs`
/// reruns the build when they change).
static MIGRATOR: Migrator = sqlx::migrate!();

/// The same schema in PostgreSQL's types, under `migrations/postgres/`, one
/// file per SQLite migration with the same version.
static PG_MIGRATOR: Migrator = sqlx::migrate!("migrations/postgres");

/// Connections per PostgreSQL ledger (per process).
const PG_POOL_SIZE: u32 = 4;

pub type Result<T, E = LedgerError> = std::result::Result<T, E>;

/// A confidence interval of an effect, as a log ratio candidate/baseline.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Interval {
    pub low: f64,
    pub high: f64,
}

/// An open ledger: a small pool of connections to one SQLite file or one
/// PostgreSQL database.
#[derive(Debug, Clone)]
pub struct Ledger {
    pool: Pool,
    ctx: Ctx,
}

/// A write transaction holding the ledger's write lock (SQLite: begun
/// `IMMEDIATE`; PostgreSQL: the writer advisory lock) until
/// [`WriteTx::commit`] or until it is dropped (which rolls back).
#[derive(Debug)]
pub struct WriteTx {
    tx: Tx,
    ctx: Ctx,
}

impl Ledger {
    /// Opens (creating if missing) the ledger at `path` and applies any
    /// pending migrations, with the default busy timeout.
    pub async fn open(path: impl AsRef<Path>) -> Result<Ledger> {
        Ledger::open_with(path, DEFAULT_BUSY_TIMEOUT).await
    }

    /// [`Ledger::open`] with a chosen busy timeout (how long a writer waits
    /// for another one).
    pub async fn open_with(path: impl AsRef<Path>, busy_timeout: Duration) -> Result<Ledger> {
        Ledger::open_capped(path, busy_timeout, None).await
    }

    /// [`Ledger::open_with`] with an optional size cap in bytes: every
    /// connection sets SQLite's `max_page_count`, so a write that would grow
    /// the file beyond it fails with `SQLITE_FULL` ([`LedgerError::DiskFull`])
    /// and is rolled back, exactly like a full disk.
    pub async fn open_capped(
        path: impl AsRef<Path>,
        busy_timeout: Duration,
        max_bytes: Option<u64>,
    ) -> Result<Ledger> {
        Ledger::connect(path.as_ref(), busy_timeout, max_bytes, true, true).await
    }

    /// Opens the ledger at `path` only if it exists (and applies pending
    /// migrations): never creates a file or a directory, so a command that
    /// only reads or decides cannot leave an empty ledger behind a mistyped
    /// path. Callers refuse a missing file first, with the fix; this is the
    /// guarantee when the file vanishes in between.
    pub async fn open_existing(path: impl AsRef<Path>) -> Result<Ledger> {
        Ledger::connect(path.as_ref(), DEFAULT_BUSY_TIMEOUT, None, false, true).await
    }

    /// Opens the ledger at `path` only if it exists, and never migrates it
    /// (so writes nothing): for `orchestrator check`, which reads it only
    /// when [`Ledger::schema_state`] says it is current.
    pub async fn open_unmigrated(path: impl AsRef<Path>) -> Result<Ledger> {
        Ledger::connect(path.as_ref(), DEFAULT_BUSY_TIMEOUT, None, false, false).await
    }

    async fn connect(
        path: &Path,
        busy_timeout: Duration,
        max_bytes: Option<u64>,
        create: bool,
        migrate: bool,
    ) -> Result<Ledger> {
        let ctx = Ctx {
            path: Arc::from(path),
            busy_timeout,
            backend: Backend::Sqlite,
            scope: None,
        };
        if let Some(dir) = path
            .parent()
            .filter(|d| create && !d.as_os_str().is_empty())
        {
            std::fs::create_dir_all(dir).map_err(|source| LedgerError::CreateDir {
                path: path.to_path_buf(),
                dir: dir.to_path_buf(),
                source,
            })?;
        }
        let options = SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(create)
            .journal_mode(SqliteJournalMode::Wal)
            // NORMAL is durable across application crashes in WAL mode and
            // only risks the last commits on power loss; FULL would fsync on
            // every run row for no benefit to the loop.
            .synchronous(SqliteSynchronous::Normal)
            .busy_timeout(busy_timeout)
            .foreign_keys(true);
        let connect = || {
            SqlitePoolOptions::new()
                .max_connections(FILE_POOL_SIZE)
                .acquire_timeout(busy_timeout + Duration::from_secs(1))
                .after_connect(move |conn, _meta| {
                    Box::pin(async move {
                        if let Some(bytes) = max_bytes {
                            let page: i64 = sqlx::query_scalar("PRAGMA page_size")
                                .fetch_one(&mut *conn)
                                .await?;
                            let pages = (bytes as i64 / page.max(512)).max(1);
                            sqlx::query(&format!("PRAGMA max_page_count = {pages}"))
                                .execute(&mut *conn)
                                .await?;
                        }
                        Ok(())
                    })
                })
                .connect_with(options.clone())
        };
        // Several processes creating one ledger at once: the first
        // connection switches the new file to WAL, and SQLite answers a
        // connection that arrives during that switch with SQLITE_BUSY at
        // once, without calling the busy handler. So retry the connection
        // itself, within the same busy timeout (seen 4 times in 40 runs of
        // `processes_opening_a_fresh_ledger_at_once_migrate_it_once`).
        let deadline = std::time::Instant::now() + busy_timeout;
        let pool = loop {
            let source = match connect().await {
                Ok(pool) => break pool,
                Err(source) => source,
            };
            return Err(match ctx.classify("open", source) {
                LedgerError::Locked { .. } if std::time::Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    continue;
                }
                // SQLite says only "unable to open database file" when it
                // cannot create the WAL index next to a read-only ledger.
                LedgerError::Query { path, source, .. } if read_only(&path) => {
                    LedgerError::ReadOnly {
                        path,
                        op: "open it",
                        source,
                    }
                }
                LedgerError::Query { path, source, .. } => LedgerError::Open { path, source },
                other => other,
            });
        };
        let ledger = Ledger {
            pool: Pool::Sqlite(pool),
            ctx,
        };
        if migrate {
            ledger.migrate().await?;
        }
        Ok(ledger)
    }

    /// Opens the PostgreSQL ledger at `url` (which must carry no password:
    /// it is passed apart, from the environment) and applies pending
    /// migrations. `busy_timeout` bounds how long a writer waits for
    /// another (`lock_timeout`). A failed connection says why
    /// ([`ConnectError`]), at once when nothing listens.
    pub async fn open_postgres(
        url: &str,
        password: Option<&str>,
        busy_timeout: Duration,
    ) -> Result<Ledger> {
        let login = connect::Login {
            url,
            password,
            password_env: None,
            busy_timeout,
        };
        Ledger::open_login(&login, true).await
    }

    /// Connects to a PostgreSQL ledger, migrating it when `migrate` (else
    /// only connecting, for `check`).
    async fn open_login(login: &connect::Login<'_>, migrate: bool) -> Result<Ledger> {
        let (ledger, mut first) = connect::connect(login).await?;
        if migrate {
            // sqlx's migrator takes its own advisory lock on PostgreSQL, so
            // hosts starting at once apply each migration exactly once.
            let ran = PG_MIGRATOR.run(&mut first).await;
            let _ = first.close().await;
            ran.map_err(|source| ledger.migrate_error(source))?;
        } else {
            let _ = first.close().await;
        }
        Ok(ledger)
    }

    /// Which database this ledger lives in.
    pub fn backend(&self) -> Backend {
        self.pool.backend()
    }

    /// A private, migrated in-memory ledger for tests. It has a single
    /// connection (each connection to `:memory:` would be its own database),
    /// so while a [`WriteTx`] is open, read through the transaction.
    pub async fn open_in_memory() -> Result<Ledger> {
        let ctx = Ctx {
            path: Arc::from(Path::new(":memory:")),
            busy_timeout: Duration::from_secs(5),
            backend: Backend::Sqlite,
            scope: None,
        };
        let options = SqliteConnectOptions::from_str("sqlite::memory:")
            .map_err(|source| LedgerError::Open {
                path: ctx.path.to_path_buf(),
                source,
            })?
            .foreign_keys(true);
        let pool = SqlitePoolOptions::new()
            .max_connections(1)
            .min_connections(1)
            // The database lives only as long as its connection.
            .idle_timeout(None)
            .max_lifetime(None)
            .acquire_timeout(ctx.busy_timeout)
            .connect_with(options)
            .await
            .map_err(|source| LedgerError::Open {
                path: ctx.path.to_path_buf(),
                source,
            })?;
        let ledger = Ledger {
            pool: Pool::Sqlite(pool),
            ctx,
        };
        ledger.migrate().await?;
        Ok(ledger)
    }

    /// The database file (`:memory:` for an in-memory ledger; the URL,
    /// which holds no password, for PostgreSQL).
    pub fn path(&self) -> &Path {
        &self.ctx.path
    }

    /// Begins a write transaction, waiting up to the busy timeout for another
    /// writer to finish; never fails with a bare `database is locked`.
    pub async fn begin_write(&self) -> Result<WriteTx> {
        let op = "begin a write transaction";
        let tx = match &self.pool {
            Pool::Sqlite(p) => Tx::Sqlite(
                p.begin_with("BEGIN IMMEDIATE")
                    .await
                    .map_err(self.ctx.err(op))?,
            ),
            Pool::Postgres(p) => {
                let mut tx = p.begin().await.map_err(self.ctx.err(op))?;
                sqlx::query("SELECT pg_advisory_xact_lock($1)")
                    .bind(backend::PG_WRITER_LOCK)
                    .execute(&mut *tx)
                    .await
                    .map_err(self.ctx.err(op))?;
                Tx::Postgres(tx)
            }
        };
        Ok(WriteTx {
            tx,
            ctx: self.ctx.clone(),
        })
    }

    /// Closes every connection, checkpointing the WAL into the main file.
    pub async fn close(self) {
        self.pool.close().await;
    }

    async fn conn(&self, op: &'static str) -> Result<PooledConn> {
        self.pool.acquire().await.map_err(self.ctx.err(op))
    }

    /// Applies pending migrations. The common case (up to date) only reads,
    /// so a read-only ledger can still be listed; otherwise the migrations run
    /// inside one `IMMEDIATE` transaction, so two processes opening a fresh
    /// ledger at once apply them exactly once.
    async fn migrate(&self) -> Result<()> {
        let Pool::Sqlite(pool) = &self.pool else {
            unreachable!("a PostgreSQL ledger migrates on its first connection");
        };
        let mut conn = pool
            .acquire()
            .await
            .map_err(self.ctx.err("read the schema version"))?;
        if schema::state(Conn::Sqlite(&mut conn), &self.ctx, &MIGRATOR)
            .await?
            .is_current()
        {
            return Ok(());
        }
        // A migration may rebuild a table other tables refer to (SQLite's
        // procedure for changing a constraint: create, copy, drop, rename),
        // which needs foreign keys off; the pragma is a no-op inside a
        // transaction, so it is set around it, and the keys are checked
        // before the commit instead.
        sqlx::query("PRAGMA foreign_keys = OFF")
            .execute(&mut *conn)
            .await
            .map_err(self.ctx.err("migrate"))?;
        let migrated = self.migrate_on(&mut conn).await;
        let restored = sqlx::query("PRAGMA foreign_keys = ON")
            .execute(&mut *conn)
            .await
            .map_err(self.ctx.err("migrate"));
        migrated.and(restored.map(drop))
    }

    /// The migrations in one `IMMEDIATE` transaction, committed only when
    /// they broke no foreign key (a reference broken before them, which
    /// `ledger --check` reports, is not theirs to refuse).
    async fn migrate_on(&self, conn: &mut sqlx::SqliteConnection) -> Result<()> {
        let mut tx = conn
            .begin_with("BEGIN IMMEDIATE")
            .await
            .map_err(self.ctx.err("lock the ledger to migrate it"))?;
        let broken_before = self.broken_references(&mut tx).await?;
        MIGRATOR
            .run_direct(&mut *tx)
            .await
            .map_err(|source| self.migrate_error(source))?;
        let broken = self.broken_references(&mut tx).await?;
        if broken > broken_before {
            return Err(LedgerError::Migrate {
                path: self.ctx.path.to_path_buf(),
                source: sqlx::migrate::MigrateError::Source(
                    format!(
                        "migrating would leave {} row(s) referring to rows that do not exist; nothing was changed",
                        broken - broken_before
                    )
                    .into(),
                ),
            });
        }
        tx.commit()
            .await
            .map_err(self.ctx.err("commit the migrations"))
    }

    /// How many rows refer to a row that does not exist.
    async fn broken_references(&self, c: &mut sqlx::SqliteConnection) -> Result<i64> {
        sqlx::query_scalar("SELECT count(*) FROM pragma_foreign_key_check")
            .fetch_one(&mut *c)
            .await
            .map_err(self.ctx.err("check the ledger's foreign keys"))
    }

    fn migrate_error(&self, source: sqlx::migrate::MigrateError) -> LedgerError {
        match source {
            sqlx::migrate::MigrateError::Execute(e) => self.ctx.classify("migrate", e),
            source => LedgerError::Migrate {
                path: self.ctx.path.to_path_buf(),
                source,
            },
        }
    }
}

/// How this process names itself to a PostgreSQL server: its sessions in
/// `pg_stat_activity`, and so the holder a stack lock's refusal names.
fn application_name() -> String {
    format!("orchestrator pid {} on {}", std::process::id(), hostname())
}

/// This machine's name, for the server's view of our sessions.
fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "an unknown host".into())
}

/// Whether an existing ledger file, or its directory, may not be written by
/// this process (permissions, or a read-only filesystem: `access(2)` says
/// `EROFS` even to root).
fn read_only(path: &Path) -> bool {
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    [path, dir]
        .iter()
        .any(|p| p.exists() && nix::unistd::access(*p, nix::unistd::AccessFlags::W_OK).is_err())
}

impl WriteTx {
    /// Makes every change of this transaction durable and releases the lock.
    pub async fn commit(self) -> Result<()> {
        let WriteTx { tx, ctx } = self;
        tx.commit().await.map_err(ctx.err("commit"))
    }

    /// Drops every change of this transaction (dropping it does the same).
    pub async fn rollback(self) -> Result<()> {
        let WriteTx { tx, ctx } = self;
        tx.rollback().await.map_err(ctx.err("roll back"))
    }

    fn parts(&mut self) -> (Conn<'_>, &Ctx) {
        (self.tx.conn(), &self.ctx)
    }
}
