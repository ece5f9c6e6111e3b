//! The one-daemon-per-stack lock of a PostgreSQL ledger: a session-level
//! advisory lock on the stack's name (`[stack] name`, unique in the fleet),
//! taken with `pg_try_advisory_lock` on a connection of its own that the
//! daemon holds for its whole life.
//!
//! The server drops the lock with the session, so a daemon that dies in any
//! way (SIGKILL included: the kernel closes its socket) releases it, and "is
//! a daemon running this stack?" has a truthful answer from any host. The
//! two-key form keeps these locks apart from the single-key writer lock of
//! [`super::backend`].
//!
//! A server restart ends the session too, and so the lock: the daemon asks
//! [`StackLock::regain`] before each cycle and after an outage, which takes
//! the lock again when its session is gone, or says that another daemon
//! took the stack meanwhile.

use sha2::{Digest as _, Sha256};
use sqlx::Connection;
use sqlx::postgres::PgConnection;

use super::backend::Pool;
use super::{Ledger, LedgerError, Result};

/// The first key of every stack lock ("orch" in ASCII).
const STACK_LOCK_CLASS: i32 = 0x6f72_6368;

/// The second key: 31 bits of the stack name's SHA-256, so that the value
/// PostgreSQL shows in `pg_locks.objid` (an unsigned oid) is the same number.
fn stack_key(stack: &str) -> i32 {
    let d = Sha256::digest(stack.as_bytes());
    i32::from_be_bytes([d[0] & 0x7f, d[1], d[2], d[3]])
}

/// Who holds a stack's lock: the holder's session as the server sees it.
const SQL_HOLDER: &str = "SELECT coalesce(nullif(a.application_name, ''), 'a session') || ' from ' || \
     coalesce(host(a.client_addr), 'a local socket') || ' (server pid ' || a.pid || ')' \
     FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid \
     WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2 \
       AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
       AND l.classid = $1::bigint::oid AND l.objid = $2::bigint::oid";

/// Takes the lock, and names the session that took it.
const SQL_TAKE: &str = "SELECT pg_try_advisory_lock($1, $2), pg_backend_pid(), \
     (SELECT backend_start::text FROM pg_stat_activity WHERE pid = pg_backend_pid())";

/// The session holding a stack's lock, as [`SQL_TAKE`] names it.
const SQL_HOLDER_SESSION: &str = "SELECT a.pid, a.backend_start::text \
     FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid \
     WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 2 \
       AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()) \
       AND l.classid = $1::bigint::oid AND l.objid = $2::bigint::oid";

/// Whether this session holds the stack's lock.
const SQL_HELD: &str = "SELECT EXISTS (SELECT 1 FROM pg_locks \
     WHERE locktype = 'advisory' AND granted AND objsubid = 2 AND pid = pg_backend_pid() \
       AND classid = $1::bigint::oid AND objid = $2::bigint::oid)";

/// How long [`StackLock::regain`] waits for the lock's session to answer: a
/// server that takes longer is as good as gone for a daemon about to measure.
const HELD_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// A server session: its backend pid and start time (a pid alone may be
/// reused by a later session).
type Session = (i32, Option<String>);

/// A held stack lock; dropping it (or the process dying) ends its session
/// and so releases it.
#[derive(Debug)]
pub struct StackLock {
    conn: PgConnection,
    stack: String,
    session: Session,
}

impl StackLock {
    /// Makes sure the lock is still held: when its session is gone (the
    /// server restarted, the connection broke), takes it again on a new
    /// one. Fails with [`LedgerError::StackLocked`] when another daemon
    /// took the stack meanwhile, with [`LedgerError::Unreachable`] while the
    /// server is away, and with [`LedgerError::StackLockLingering`] when the
    /// server still keeps our own old session holding it (both transient).
    /// Returns whether the lock had to be taken again.
    pub async fn regain(&mut self, ledger: &Ledger) -> Result<bool> {
        if self.held().await {
            return Ok(false);
        }
        match ledger.lock_stack(&self.stack).await {
            Ok(new) => {
                *self = new;
                Ok(true)
            }
            Err(LedgerError::StackLocked { stack, holder })
                if ledger.holder_session(&stack).await? == Some(self.session.clone()) =>
            {
                Err(LedgerError::StackLockLingering { stack, holder })
            }
            Err(e) => Err(e),
        }
    }

    /// Whether the lock's session is alive and holds it.
    async fn held(&mut self) -> bool {
        let key = stack_key(&self.stack);
        let ask = sqlx::query_scalar::<_, bool>(SQL_HELD)
            .bind(i64::from(STACK_LOCK_CLASS))
            .bind(i64::from(key))
            .fetch_one(&mut self.conn);
        matches!(tokio::time::timeout(HELD_TIMEOUT, ask).await, Ok(Ok(true)))
    }
}

impl Ledger {
    /// Takes the stack's daemon lock on a PostgreSQL ledger, or says who
    /// holds it ([`LedgerError::StackLocked`]). On SQLite the daemon's file
    /// lock beside the ledger is the lock; this refuses.
    pub async fn lock_stack(&self, stack: &str) -> Result<StackLock> {
        let op = "take the stack's daemon lock";
        let Pool::Postgres(pool) = &self.pool else {
            return Err(self.ctx.not_on_postgres_only("the advisory stack lock"));
        };
        // Detached: the session must stay ours, never go back to the pool.
        let mut conn = pool.acquire().await.map_err(self.ctx.err(op))?.detach();
        let (taken, pid, started): (bool, i32, Option<String>) = sqlx::query_as(SQL_TAKE)
            .bind(STACK_LOCK_CLASS)
            .bind(stack_key(stack))
            .fetch_one(&mut conn)
            .await
            .map_err(self.ctx.err(op))?;
        if taken {
            return Ok(StackLock {
                conn,
                stack: stack.to_string(),
                session: (pid, started),
            });
        }
        let holder = self.stack_lock_holder(stack).await?;
        let _ = conn.close().await;
        Err(LedgerError::StackLocked {
            stack: stack.to_string(),
            holder: holder.unwrap_or_else(|| "a daemon that just stopped".into()),
        })
    }

    /// Who holds the stack's daemon lock on a PostgreSQL ledger, if anyone.
    pub async fn stack_lock_holder(&self, stack: &str) -> Result<Option<String>> {
        let op = "look up the stack's daemon lock";
        let Pool::Postgres(pool) = &self.pool else {
            return Err(self.ctx.not_on_postgres_only("the advisory stack lock"));
        };
        sqlx::query_scalar(SQL_HOLDER)
            .bind(i64::from(STACK_LOCK_CLASS))
            .bind(i64::from(stack_key(stack)))
            .fetch_optional(pool)
            .await
            .map_err(self.ctx.err(op))
    }
}

impl Ledger {
    /// The session holding the stack's daemon lock, if any.
    async fn holder_session(&self, stack: &str) -> Result<Option<Session>> {
        let Pool::Postgres(pool) = &self.pool else {
            return Err(self.ctx.not_on_postgres_only("the advisory stack lock"));
        };
        sqlx::query_as(SQL_HOLDER_SESSION)
            .bind(i64::from(STACK_LOCK_CLASS))
            .bind(i64::from(stack_key(stack)))
            .fetch_optional(pool)
            .await
            .map_err(self.ctx.err("look up the stack's daemon lock"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stack_keys_are_stable_non_negative_and_tell_names_apart() {
        assert_eq!(stack_key("tinyk3"), stack_key("tinyk3"));
        assert_ne!(stack_key("host-a"), stack_key("host-b"));
        for name in ["", "a", "tinyk3-test", "spark-017"] {
            assert!(stack_key(name) >= 0, "{name}");
        }
    }
}
