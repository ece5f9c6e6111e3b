//! `orchestrator report`: the weekly report from the ledger, as Markdown or a
//! self-contained HTML page, to stdout or `--out FILE`.

use std::path::Path;

use anyhow::Context;
use chrono::Utc;

use super::UsageError;
use crate::cli::{ReportArgs, ReportFormat};
use crate::config::Config;
use crate::report::redact::Redactor;
use crate::report::{self, BuildOptions, Period};

pub fn run(config_path: &Path, args: &ReportArgs) -> anyhow::Result<()> {
    // The period first: a mistyped week is a usage error whatever the config.
    let period = Period::from_args(
        args.week.as_deref(),
        args.since.as_deref(),
        args.until.as_deref(),
        Utc::now(),
    )
    .map_err(|e| UsageError(e.to_string()))?;
    if let Some(out) = &args.out {
        check_out(out)?;
    }
    let config = Config::load(config_path)?;
    // A report of nothing from a mistyped path would look like a quiet week.
    super::require_ledger(&config)?;
    // The model's API key is the one secret the orchestrator knows; hide it
    // wherever a stored error message happens to quote it.
    let secrets = config
        .model
        .api_key_env
        .as_deref()
        .and_then(|name| std::env::var(name).ok());
    let mut options = BuildOptions::new(
        period,
        &config.stack.name,
        config.objective.target_seconds_per_token.get(),
        Utc::now(),
    );
    options.redactor = Redactor::new(secrets);
    let report = super::runtime()?.block_on(async {
        let ledger = super::open_ledger(&config).await?;
        let built = report::build(&ledger, &options).await;
        ledger.close().await;
        anyhow::Ok(built?)
    })?;
    let text = match args.format {
        ReportFormat::Md => report::markdown::render(&report),
        ReportFormat::Html => report::html::render(&report),
    };
    match &args.out {
        Some(path) => crate::atomic_file::write(path, text.as_bytes())
            .with_context(|| format!("cannot write the report to {}", path.display()))?,
        None => print!("{text}"),
    }
    Ok(())
}

/// Refuses an `--out` whose directory is missing or is not a directory
/// before any work, with the fix: the write itself would only say "No such
/// file or directory" after building the whole report.
fn check_out(out: &Path) -> Result<(), UsageError> {
    let dir = match out.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    if dir.is_dir() {
        return Ok(());
    }
    Err(UsageError(format!(
        "--out {}: the directory {} does not exist; create it first or choose another path",
        out.display(),
        dir.display()
    )))
}
