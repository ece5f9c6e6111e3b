//! Connecting to a PostgreSQL ledger, and naming why a connection failed:
//! nothing listening, a host that does not answer, a service that is not
//! PostgreSQL, a refused password, a missing database.
//!
//! One direct connection comes first, bounded by [`CONNECT_TIMEOUT`]; the
//! migrations run on it. A pool would retry a refused connection until its
//! acquire timeout (11 s) and then say only "pool timed out", so the pool
//! is made lazily, after that first connection succeeded. When it fails,
//! a bare TCP connection to the same address tells a server that cannot be
//! reached from one that answered but does not speak PostgreSQL.
//!
//! Every connection starts with `client_min_messages = warning`, so the
//! server's notices (`relation "_sqlx_migrations" already exists,
//! skipping` on every migration check) are never sent, and with the busy
//! timeout as its `lock_timeout`.

use std::path::Path;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use sqlx::Connection;
use sqlx::postgres::{PgConnectOptions, PgConnection, PgPoolOptions};

use super::backend::{Backend, Pool};
use super::error::Ctx;
use super::{Ledger, LedgerError, PG_POOL_SIZE, Result};

/// How long a connection may take to be made and answered. A server across
/// a slow link answers well within it; a port that swallows packets, or a
/// service that never answers PostgreSQL's start-up message, is told apart
/// by it.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Why a PostgreSQL ledger could not be connected to; each says the fix.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error(
        "nothing is listening on {addr} (connection refused): start the PostgreSQL server there, or correct the host and port in `[ledger] url`"
    )]
    Refused { addr: String },

    #[error("cannot resolve the host {host:?} ({source}): correct the host in `[ledger] url`")]
    Unresolved {
        host: String,
        source: std::io::Error,
    },

    #[error(
        "{addr} did not accept a connection within {} s (a host that is down, or a firewall dropping packets): check the host and port in `[ledger] url` and the network to it",
        within.as_secs()
    )]
    NoAnswer { addr: String, within: Duration },

    #[error(
        "cannot reach {addr} ({source}): check the host and port in `[ledger] url` and the network to it"
    )]
    Network {
        addr: String,
        source: std::io::Error,
    },

    #[error(
        "the service on {addr} did not speak the PostgreSQL protocol ({detail}): `[ledger] url` names the wrong port, or another program listens on it"
    )]
    NotPostgres { addr: String, detail: String },

    #[error("password authentication failed for user {user:?}: {}", password_fix(var.as_deref(), *sent))]
    PasswordRejected {
        user: String,
        /// The variable the password came from (`[ledger] password_env`).
        var: Option<String>,
        /// Whether a password was sent at all.
        sent: bool,
    },

    #[error(
        "the server refused user {user:?} on database {database:?} ({message}): allow this host, user and database in the server's pg_hba.conf"
    )]
    NotAllowed {
        user: String,
        database: String,
        message: String,
    },

    #[error(
        "the database {database:?} does not exist on {addr}: create it (`createdb -h HOST -p PORT -U {user} {database}`), or correct the database at the end of `[ledger] url`"
    )]
    NoDatabase {
        addr: String,
        database: String,
        user: String,
    },

    #[error(
        "{source}; check that the server is up and the user, host, port and database in `[ledger] url`"
    )]
    Other { source: sqlx::Error },
}

impl ConnectError {
    /// Whether a PostgreSQL server answered (the address and port are right,
    /// whatever it then refused).
    pub fn reached(&self) -> bool {
        match self {
            ConnectError::PasswordRejected { .. }
            | ConnectError::NotAllowed { .. }
            | ConnectError::NoDatabase { .. } => true,
            ConnectError::Other { source } => matches!(source, sqlx::Error::Database(_)),
            _ => false,
        }
    }
}

fn password_fix(var: Option<&str>, sent: bool) -> String {
    match (var, sent) {
        (Some(var), _) => format!(
            "the variable {var} (`[ledger] password_env`) does not hold this user's password; set it to the password the server has for this user"
        ),
        (None, true) => "the password given is not this user's (with a config: the one in the variable named by `[ledger] password_env`)".into(),
        (None, false) => "no password was sent, since `[ledger] password_env` names no variable: name the variable that holds this user's password".into(),
    }
}

/// Where a PostgreSQL ledger is and how to log in: the URL (no password),
/// the password and the variable it came from.
pub(super) struct Login<'a> {
    pub url: &'a str,
    pub password: Option<&'a str>,
    pub password_env: Option<&'a str>,
    pub busy_timeout: Duration,
}

/// Connects: the first connection (diagnosed when it fails) and the
/// ledger, whose pool connects when first used.
pub(super) async fn connect(login: &Login<'_>) -> Result<(Ledger, PgConnection)> {
    let url = login.url;
    let failed = |source| LedgerError::OpenPostgres {
        url: url.to_string(),
        source,
    };
    let lock_ms = login.busy_timeout.as_millis().to_string();
    let mut options = PgConnectOptions::from_str(url)
        .map_err(|source| failed(ConnectError::Other { source }))?
        // Names this process to the server, so a held stack lock says
        // whose it is (`pg_stat_activity`).
        .application_name(&super::application_name())
        // A writer waiting for the writer lock (or a row another writer
        // holds) gives up as SQLite's busy timeout does.
        .options([
            ("lock_timeout", lock_ms.as_str()),
            ("client_min_messages", "warning"),
        ]);
    if let Some(password) = login.password {
        options = options.password(password);
    }
    let first =
        match tokio::time::timeout(CONNECT_TIMEOUT, PgConnection::connect_with(&options)).await {
            Ok(Ok(conn)) => conn,
            Ok(Err(e)) => return Err(failed(diagnose(&options, login, Some(e)).await)),
            Err(_) => return Err(failed(diagnose(&options, login, None).await)),
        };
    let pool = PgPoolOptions::new()
        .max_connections(PG_POOL_SIZE)
        .acquire_timeout(login.busy_timeout + Duration::from_secs(1))
        .connect_lazy_with(options);
    let ledger = Ledger {
        pool: Pool::Postgres(pool),
        ctx: Ctx {
            path: Arc::from(Path::new(url)),
            busy_timeout: login.busy_timeout,
            backend: Backend::Postgres,
            scope: None,
        },
    };
    Ok((ledger, first))
}

/// Why the first connection failed (`None`: it did not finish within
/// [`CONNECT_TIMEOUT`]).
async fn diagnose(
    options: &PgConnectOptions,
    login: &Login<'_>,
    source: Option<sqlx::Error>,
) -> ConnectError {
    let (host, port) = (options.get_host(), options.get_port());
    let addr = format!("{host}:{port}");
    let user = options.get_username().to_string();
    let database = options.get_database().unwrap_or(&user).to_string();
    let source = match source {
        Some(sqlx::Error::Database(d)) => {
            // SQLSTATEs of the start-up: invalid_password,
            // invalid_authorization_specification (pg_hba.conf), and
            // invalid_catalog_name (no such database).
            let code = d.code().map(|c| c.into_owned());
            return match code.as_deref() {
                Some("28P01") => ConnectError::PasswordRejected {
                    user,
                    var: login.password_env.map(str::to_string),
                    sent: login.password.is_some(),
                },
                Some("28000") => ConnectError::NotAllowed {
                    user,
                    database,
                    message: d.message().to_string(),
                },
                Some("3D000") => ConnectError::NoDatabase {
                    addr,
                    database,
                    user,
                },
                _ => ConnectError::Other {
                    source: sqlx::Error::Database(d),
                },
            };
        }
        Some(sqlx::Error::Io(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
            return ConnectError::Refused { addr };
        }
        // A PostgreSQL that asks for a way of logging in sqlx lacks.
        Some(sqlx::Error::Protocol(m)) if m.contains("authentication") => {
            return ConnectError::Other {
                source: sqlx::Error::Protocol(m),
            };
        }
        Some(e @ (sqlx::Error::Tls(_) | sqlx::Error::Configuration(_))) => {
            return ConnectError::Other { source: e };
        }
        other => other,
    };
    if host.starts_with('/') || options.get_socket().is_some() {
        return match source {
            Some(source) => ConnectError::Other { source },
            None => ConnectError::NoAnswer {
                addr,
                within: CONNECT_TIMEOUT,
            },
        };
    }
    // Something was wrong on the wire: whether a bare TCP connection is
    // accepted tells an unreachable server from a service that is not one.
    if let Err(unreachable) = tcp_probe(host, port, &addr).await {
        return unreachable;
    }
    ConnectError::NotPostgres {
        addr,
        detail: match source {
            Some(e) => format!("it answered the start-up message with: {e}"),
            None => format!(
                "no answer to the start-up message within {} s",
                CONNECT_TIMEOUT.as_secs()
            ),
        },
    }
}

/// Whether `host:port` accepts a TCP connection within [`CONNECT_TIMEOUT`].
async fn tcp_probe(host: &str, port: u16, addr: &str) -> Result<(), ConnectError> {
    let addrs: Vec<std::net::SocketAddr> = match tokio::net::lookup_host((host, port)).await {
        Ok(a) => a.collect(),
        Err(source) => {
            return Err(ConnectError::Unresolved {
                host: host.to_string(),
                source,
            });
        }
    };
    let addr = addr.to_string();
    match tokio::time::timeout(CONNECT_TIMEOUT, tokio::net::TcpStream::connect(&addrs[..])).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
            Err(ConnectError::Refused { addr })
        }
        Ok(Err(source)) => Err(ConnectError::Network { addr, source }),
        Err(_) => Err(ConnectError::NoAnswer {
            addr,
            within: CONNECT_TIMEOUT,
        }),
    }
}
