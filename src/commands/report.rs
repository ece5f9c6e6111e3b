//! `orchestrator report`: the weekly report from the ledger, as Markdown or a
//! self-contained HTML page, to stdout or `--out FILE`; of the config's own
//! stack, or with `--stack`/`--class`/`--all` of a fleet's stacks and their
//! summary.

use std::path::Path;

use anyhow::Context;
use chrono::Utc;

use super::UsageError;
use crate::cli::{ReportArgs, ReportFormat};
use crate::config::Config;
use crate::ledger::{Ledger, StackScope};
use crate::report::fleet::{self, FleetError, Selection};
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
    let selection = args.selection();
    let own = config.stack.scope();
    let text = super::runtime()?.block_on(async {
        let ledger = super::open_ledger(&config).await?;
        let built = render(&ledger, &own, &selection, &options, args.format).await;
        ledger.close().await;
        built
    })?;
    match &args.out {
        Some(path) => crate::atomic_file::write(path, text.as_bytes())
            .with_context(|| format!("cannot write the report to {}", path.display()))?,
        None => print!("{text}"),
    }
    Ok(())
}

/// The config's own stack alone (no flag): its report, as before fleets.
/// With `--stack`, `--class` or `--all`: each chosen stack's report, then
/// the fleet summary. An unknown name is a usage error naming the known.
async fn render(
    ledger: &Ledger,
    own: &StackScope,
    selection: &Selection,
    options: &BuildOptions,
    format: ReportFormat,
) -> anyhow::Result<String> {
    if *selection == Selection::Own {
        let report = report::build(ledger, options).await?;
        return Ok(match format {
            ReportFormat::Md => report::markdown::render(&report),
            ReportFormat::Html => report::html::render(&report),
        });
    }
    let stacks = match fleet::select(ledger, own, selection).await {
        Ok(s) => s,
        Err(FleetError::Ledger(e)) => return Err(e.into()),
        Err(unknown) => return Err(UsageError(unknown.to_string()).into()),
    };
    let f = fleet::build_fleet(
        ledger,
        &stacks,
        options.period,
        options.target,
        options.now,
        &options.redactor,
    )
    .await?;
    Ok(match format {
        ReportFormat::Md => fleet::render_markdown(&f),
        ReportFormat::Html => report::html::render_fleet(&f),
    })
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
