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
       AND l.classid = $1::bigint::oid AND l.objid = $2::bigint::oid";

/// A held stack lock; dropping it (or the process dying) ends its session
/// and so releases it.
#[derive(Debug)]
pub struct StackLock {
    _conn: PgConnection,
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
        let taken: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock($1, $2)")
            .bind(STACK_LOCK_CLASS)
            .bind(stack_key(stack))
            .fetch_one(&mut conn)
            .await
            .map_err(self.ctx.err(op))?;
        if taken {
            return Ok(StackLock { _conn: conn });
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
