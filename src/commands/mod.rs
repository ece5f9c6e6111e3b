//! Command handlers, one module per subcommand. The error policy lives here:
//! configuration and usage problems exit 2, everything else 1.

use crate::cli::{Cli, Command};
use crate::config::{Config, ConfigError};
use crate::ledger::Ledger;
use crate::menu::MenuError;
use crate::profile::ProfileError;

pub mod check;
pub mod compare;
mod decider;
pub mod ledger;
pub mod rebaseline;
pub mod report;
pub mod run;
pub mod stage;
pub mod trace;

/// A problem with what the user asked for (exit 2), as opposed to a failure
/// while doing it (exit 1).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// Opens the config's ledger for every command but `run`: only `run`
/// creates a ledger, so a missing one is refused (exit 2) with its path and
/// the fix, never created empty behind a mistyped `ledger.path`.
pub async fn open_ledger(config: &Config) -> anyhow::Result<Ledger> {
    if let Some(pg) = &config.ledger_postgres {
        return Ok(pg.open(crate::ledger::DEFAULT_BUSY_TIMEOUT).await?);
    }
    require_ledger(config)?;
    Ok(Ledger::open_existing(&config.ledger_path).await?)
}

/// `ledger` (a read handle) scoped to the stack `--stack NAME` names, or
/// unscoped without one. A name the ledger does not know is refused (exit
/// 2) with the ones it does, as `report --stack` refuses it: every command
/// answers an unknown stack the same way. The config's own stack is known
/// before its first cycle.
pub async fn scoped_to_stack(
    config: &Config,
    ledger: &Ledger,
    stack: Option<&str>,
) -> anyhow::Result<Ledger> {
    use crate::report::fleet::{self, FleetError, Selection};
    let Some(name) = stack.map(str::trim) else {
        return Ok(ledger.clone());
    };
    if name.is_empty() {
        return Err(UsageError(
            "--stack needs a stack's name (its config's `[stack] name`), or leave it out for every stack".into(),
        )
        .into());
    }
    let own = config.stack.scope();
    match fleet::select(ledger, &own, &Selection::Stack(name.to_string())).await {
        Ok(_) => {}
        Err(FleetError::Ledger(e)) => return Err(e.into()),
        Err(unknown) => return Err(UsageError(unknown.to_string()).into()),
    }
    Ok(ledger.clone().scoped(crate::ledger::StackScope {
        name: name.to_string(),
        class: None,
    }))
}

/// Where the config's ledger is, for messages: the file, or the URL (which
/// holds no password).
pub fn ledger_name(config: &Config) -> String {
    match &config.ledger_postgres {
        Some(pg) => pg.url().to_string(),
        None => config.ledger_path.display().to_string(),
    }
}

/// The refusal of [`open_ledger`], for a command that must refuse before
/// it does anything else with the ledger's path.
pub fn require_ledger(config: &Config) -> Result<(), UsageError> {
    if config.ledger_postgres.is_some() {
        // The database exists or the connection says so; never created here.
        return Ok(());
    }
    match std::fs::metadata(&config.ledger_path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(UsageError(format!(
            "there is no ledger at {}: `orchestrator run` creates it; check `ledger.path` in {}",
            config.ledger_path.display(),
            config.path.display()
        ))),
        // Present, or unreadable: opening it says which.
        _ => Ok(()),
    }
}

/// Runs one command to completion.
pub fn dispatch(cli: Cli) -> anyhow::Result<()> {
    let config_path = Config::locate(cli.config.as_deref());
    match cli.command {
        Command::Run(args) => run::run(&config_path, &args),
        Command::Check => check::run(&config_path),
        Command::Stage(cmd) => stage::run(&config_path, cmd),
        Command::Ledger(args) => ledger::run(&config_path, &args),
        Command::Rebaseline(args) => rebaseline::run(&config_path, args),
        Command::Report(args) => report::run(&config_path, &args),
        Command::Trace(args) => trace::run(&config_path, &args),
        Command::Compare(args) => compare::run(&config_path, &args),
    }
}

/// The error and its causes on one line, each cause once: an error whose
/// message already quotes its source (`cannot read X: No such file`) would
/// otherwise print that source twice.
pub fn render_error(err: &anyhow::Error) -> String {
    let mut text = err.to_string();
    for cause in err.chain().skip(1) {
        let c = cause.to_string();
        if !text.contains(&c) {
            text.push_str(": ");
            text.push_str(&c);
        }
    }
    text
}

/// 2 for usage and configuration errors anywhere in the chain, else 1.
pub fn exit_code(err: &anyhow::Error) -> u8 {
    let usage = err.chain().any(|e| {
        e.is::<UsageError>()
            || e.is::<crate::daemon::StartRefused>()
            || e.is::<ConfigError>()
            || e.is::<MenuError>()
            || e.is::<crate::stack_support::SupportError>()
            || matches!(
                e.downcast_ref::<crate::ledger::LedgerError>(),
                Some(
                    crate::ledger::LedgerError::PasswordUnset { .. }
                        | crate::ledger::LedgerError::StackLocked { .. }
                )
            )
            // Another daemon already runs this ledger: as for the
            // PostgreSQL stack lock, the fix is in the config, not a retry.
            || matches!(
                e.downcast_ref::<crate::daemon::lock::LockError>(),
                Some(
                    crate::daemon::lock::LockError::Held { .. }
                        | crate::daemon::lock::LockError::HeldHere { .. }
                )
            )
            || matches!(
                e.downcast_ref::<ProfileError>(),
                Some(ProfileError::Parse { .. } | ProfileError::Invalid { .. })
            )
    });
    if usage { 2 } else { 1 }
}

/// A current-thread runtime for the commands that talk to SQLite or HTTP.
pub fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ledger_another_daemon_holds_is_a_config_problem() {
        let held = anyhow::Error::new(crate::daemon::lock::LockError::Held {
            ledger: "/srv/ledger.db".into(),
            pid: "4242".into(),
        })
        .context("starting the daemon");
        assert_eq!(exit_code(&held), 2);
        let io = anyhow::Error::new(crate::daemon::lock::LockError::Io {
            path: "/srv/ledger.db.lock".into(),
            source: std::io::Error::from(std::io::ErrorKind::PermissionDenied),
        });
        assert_eq!(exit_code(&io), 1);
    }

    #[test]
    fn a_cause_the_message_already_quotes_is_not_repeated() {
        let io = std::io::Error::from(std::io::ErrorKind::NotFound);
        let err = anyhow::Error::new(ConfigError::Read {
            path: "/nope.toml".into(),
            source: io,
        });
        let text = render_error(&err);
        let cause = std::io::Error::from(std::io::ErrorKind::NotFound).to_string();
        assert_eq!(text.matches(&cause).count(), 1, "{text}");
        let wrapped = anyhow::anyhow!("inner cause").context("outer");
        assert_eq!(render_error(&wrapped), "outer: inner cause");
    }

    /// The daemon's refusal to start (here: the model's API key variable is
    /// not set) is a configuration problem: exit 2, with the fix, and no
    /// ledger created.
    #[test]
    fn a_daemon_refusing_to_start_exits_2_with_the_fix() {
        let dir = tempfile::tempdir().unwrap();
        let shipped = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config.toml");
        let mut config = Config::load(&shipped).unwrap();
        config.ledger_path = dir.path().join("orchestrator.db");
        config.model.api_key_env = Some("ORCHESTRATOR_TEST_KEY_NEVER_SET".into());
        let opts = crate::daemon::RunOptions {
            once: true,
            ..Default::default()
        };
        let err = runtime()
            .unwrap()
            .block_on(crate::daemon::run(config, opts))
            .unwrap_err();
        assert_eq!(exit_code(&err), 2, "{err:#}");
        let text = render_error(&err);
        assert!(
            text.contains("ORCHESTRATOR_TEST_KEY_NEVER_SET")
                && text.contains("is not set; export it"),
            "{text}"
        );
        assert!(!dir.path().join("orchestrator.db").exists());
    }
}
