//! The configuration file, loaded into validated types at the edge.
//!
//! Relative paths in the file are relative to the file's own directory, and
//! child processes run there, so a config and the files it names move
//! together. Errors name the file, the line, the key, what is wrong and what
//! to do; an unknown key gets the nearest key of its table suggested.
//!
//! - [`raw`]: the file as written (serde, one struct per table, defaults).
//! - [`units`]: MiB, seconds, fractions, seconds per token.
//! - one `TryFrom` per table: [`stack`], [`model`], [`cycle_settings`],
//!   [`measure`], [`judge`] (the judge's [`Policy`]), [`daemon`],
//!   [`embedded`], [`objective`].
//! - [`error`] and [`hint`]: TOML errors as file:line, `[table] key`, and the
//!   nearest valid key.

mod cycle_settings;
mod daemon;
mod embedded;
mod error;
mod hint;
mod judge;
mod ledger;
mod measure;
mod model;
mod objective;
mod raw;
mod stack;
mod units;
mod url;

use std::path::{Path, PathBuf};

pub use cycle_settings::{CycleSettings, ProposerChoice};
pub use daemon::{Daemon, StandAsideSettings};
pub use embedded::Embedded;
pub use error::ConfigError;
pub use measure::Measure;
pub use model::{DEFAULT_MAX_TOKENS, Model};
pub use objective::Objective;
pub use stack::{Bench, BenchOutput, Metrics, Restart, Shadow, Stack, Surface};
pub use units::{EngineShare, Fraction, LedgerSizeMb, Seconds, SecondsPerToken};

use crate::judge::Policy;
use raw::RawConfig;

/// The environment variable that selects the config file.
pub const CONFIG_ENV: &str = "ORCHESTRATOR_CONFIG";
/// The file used when neither `--config` nor the environment names one.
pub const DEFAULT_CONFIG: &str = "config.toml";

/// The whole configuration, validated; paths are absolute.
#[derive(Debug, Clone)]
pub struct Config {
    /// The file it came from.
    pub path: PathBuf,
    /// The file's directory: base of relative paths and children's cwd.
    pub base_dir: PathBuf,
    pub objective: Objective,
    /// The SQLite ledger (`[ledger] path`). With `[ledger] url` it holds no
    /// ledger: it is the host-local anchor of the daemon's lock and of its
    /// children's orphan tag (the default path's directory).
    pub ledger_path: PathBuf,
    /// `[ledger] url` and `password_env`: the ledger is this PostgreSQL
    /// database instead of the SQLite file.
    pub ledger_postgres: Option<crate::ledger::PostgresTarget>,
    /// `[ledger] max_size_mb`: the ledger stops growing there (a write
    /// beyond it fails like a full disk and stops the daemon).
    pub ledger_max_size: Option<LedgerSizeMb>,
    pub menu_dir: PathBuf,
    pub stack: Stack,
    pub model: Model,
    pub cycle: CycleSettings,
    pub measure: Measure,
    /// The judge's policy from `[measure]`'s judge keys, checked at load.
    pub policy: Policy,
    pub daemon: Daemon,
    pub embedded: Option<Embedded>,
}

impl Config {
    /// Which file to load: `--config`, else `ORCHESTRATOR_CONFIG`, else `config.toml`.
    pub fn locate(flag: Option<&Path>) -> PathBuf {
        flag.map(Path::to_path_buf)
            .or_else(|| std::env::var_os(CONFIG_ENV).map(PathBuf::from))
            .unwrap_or_else(|| PathBuf::from(DEFAULT_CONFIG))
    }

    /// Loads and validates the file, and withholds the secrets it names
    /// from every child process started after it
    /// ([`crate::process::secrets`]): every command that can start a child
    /// loads its config first, so none can forget to.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let config = Config::parse(&text, path)?;
        crate::process::secrets::withhold(config.secret_vars());
        Ok(config)
    }

    /// The environment variables this config names as holding a secret:
    /// the PostgreSQL ledger's password and the model's API key.
    pub fn secret_vars(&self) -> Vec<String> {
        let ledger = self
            .ledger_postgres
            .as_ref()
            .and_then(|pg| pg.password_env());
        ledger
            .into_iter()
            .chain(self.model.api_key_env.as_deref())
            .map(str::to_string)
            .collect()
    }

    /// Parses config text as if it were the file at `path`; the first
    /// problem found is the one reported.
    pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
        let raw: RawConfig = toml::from_str(text).map_err(|e| error::toml_error(text, path, &e))?;
        let abs = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
        let base_dir = abs
            .parent()
            .map(Path::to_path_buf)
            .unwrap_or_else(|| PathBuf::from("."));
        let semantic = |problem: String| ConfigError::Semantic {
            path: path.to_path_buf(),
            problem,
        };

        let stack = Stack::try_from((raw.stack, base_dir.as_path())).map_err(semantic)?;
        let model = match raw.model {
            Some(m) => Model::try_from(m).map_err(semantic)?,
            None if raw.cycle.proposer == ProposerChoice::Model => {
                return Err(semantic(
                    "[cycle] proposer = \"model\" needs a [model] table (base_url, name); \
                     add one or set proposer = \"bandit\""
                        .into(),
                ));
            }
            None => Model::unused(),
        };
        let ledger_postgres = ledger::postgres_target(&raw.ledger).map_err(semantic)?;
        let policy = Policy::try_from(&raw.measure).map_err(semantic)?;
        let measure = Measure::try_from(&raw.measure).map_err(semantic)?;
        let daemon = Daemon::try_from(raw.daemon).map_err(semantic)?;
        let embedded = raw
            .embedded
            .map(|e| Embedded::try_from((e, base_dir.as_path())))
            .transpose()
            .map_err(semantic)?;
        Ok(Config {
            embedded,
            path: abs,
            objective: raw.objective,
            ledger_path: base_dir.join(
                raw.ledger
                    .path
                    .clone()
                    .unwrap_or_else(raw::default_ledger_path),
            ),
            ledger_postgres,
            ledger_max_size: raw.ledger.max_size_mb,
            menu_dir: base_dir.join(&raw.menu.dir),
            stack,
            model,
            cycle: raw.cycle,
            measure,
            policy,
            daemon,
            base_dir,
        })
    }
}

#[cfg(test)]
mod tests;
#[cfg(test)]
mod reference_tests;
