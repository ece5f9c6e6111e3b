//! Where a PostgreSQL ledger lives (`[ledger] url` and `password_env`),
//! validated at config load: the URL names the server and database but
//! never the password, which comes from the environment when the ledger is
//! opened, so it cannot reach the config file, a log line or the ledger.

use std::time::Duration;

use super::{Ledger, LedgerError, Result};

/// A PostgreSQL ledger's URL (without a password) and the variable that
/// holds the password.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PostgresTarget {
    url: String,
    password_env: Option<String>,
}

impl PostgresTarget {
    /// Checks `[ledger] url` and `password_env`; the error names the key
    /// and the fix.
    pub fn new(url: &str, password_env: Option<String>) -> Result<PostgresTarget, String> {
        let parsed = reqwest::Url::parse(url).map_err(|e| {
            format!(
                "[ledger] url is not a URL ({e}); write e.g. \"postgres://orchestrator@db.example:5432/ledger\""
            )
        })?;
        if !matches!(parsed.scheme(), "postgres" | "postgresql") {
            return Err(format!(
                "[ledger] url must be a postgres:// URL, not {}://; for a SQLite ledger set `path` instead",
                parsed.scheme()
            ));
        }
        // Never echo the URL here: it may be the very password being refused.
        let in_query = parsed.query_pairs().any(|(k, _)| k == "password");
        if parsed.password().is_some() || in_query {
            return Err(
                "[ledger] url carries a password, which must not be written in the config file: \
                 remove it from the URL and put it in an environment variable named by \
                 `[ledger] password_env` (e.g. password_env = \"ORCH_LEDGER_PASSWORD\")"
                    .to_string(),
            );
        }
        if parsed.host_str().is_none_or(str::is_empty) {
            return Err("[ledger] url names no host; write e.g. \"postgres://orchestrator@127.0.0.1:5432/ledger\"".into());
        }
        if parsed.path().trim_start_matches('/').is_empty() {
            return Err("[ledger] url names no database; end it with /DATABASE".into());
        }
        if let Some(name) = &password_env {
            let valid = !name.is_empty()
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
                && !name.starts_with(|c: char| c.is_ascii_digit());
            if !valid {
                return Err(format!(
                    "[ledger] password_env = {name:?} is not an environment variable name; write e.g. \"ORCH_LEDGER_PASSWORD\""
                ));
            }
        }
        Ok(PostgresTarget {
            url: url.to_string(),
            password_env,
        })
    }

    /// The URL, which holds no password.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The name of the variable holding the password, if one is configured.
    pub fn password_env(&self) -> Option<&str> {
        self.password_env.as_deref()
    }

    /// Opens (and migrates) the ledger, reading the password from the
    /// environment now; a configured variable that is unset is refused.
    pub async fn open(&self, busy_timeout: Duration) -> Result<Ledger> {
        self.login(busy_timeout, true).await
    }

    /// Connects without migrating (and so without writing anything): for
    /// `orchestrator check`, which reports the schema's state instead.
    pub async fn connect_unmigrated(&self, busy_timeout: Duration) -> Result<Ledger> {
        self.login(busy_timeout, false).await
    }

    async fn login(&self, busy_timeout: Duration, migrate: bool) -> Result<Ledger> {
        let password = self.password()?;
        let login = super::connect::Login {
            url: &self.url,
            password: password.as_deref(),
            password_env: self.password_env.as_deref(),
            busy_timeout,
        };
        Ledger::open_login(&login, migrate).await
    }

    /// The password from its variable, if one is configured.
    fn password(&self) -> Result<Option<String>> {
        match &self.password_env {
            None => Ok(None),
            Some(var) => std::env::var(var)
                .map(Some)
                .map_err(|_| LedgerError::PasswordUnset {
                    url: self.url.clone(),
                    var: var.clone(),
                }),
        }
    }
}
