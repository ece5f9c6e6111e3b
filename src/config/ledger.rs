//! `[ledger]`: a SQLite file (`path`, the default) or a PostgreSQL database
//! (`url`, with `password_env`), never both.

use super::raw::RawLedger;
use crate::ledger::PostgresTarget;

/// The PostgreSQL ledger `[ledger]` names, if it names one; the problem
/// (key and fix) when the table mixes the two backends.
pub(super) fn postgres_target(raw: &RawLedger) -> Result<Option<PostgresTarget>, String> {
    let Some(url) = &raw.url else {
        if raw.password_env.is_some() {
            return Err(
                "[ledger] password_env is the password of a PostgreSQL ledger, but no `url` is set; \
                 add `url = \"postgres://user@host:port/db\"` or remove password_env"
                    .into(),
            );
        }
        return Ok(None);
    };
    if raw.path.is_some() {
        return Err(
            "[ledger] sets both `path` (a SQLite file) and `url` (a PostgreSQL database); keep the one the ledger lives in"
                .into(),
        );
    }
    if raw.max_size_mb.is_some() {
        return Err(
            "[ledger] max_size_mb caps a SQLite file and is not available on PostgreSQL; remove it \
             (cap the database with the server's own quotas)"
                .into(),
        );
    }
    PostgresTarget::new(url, raw.password_env.clone()).map(Some)
}
