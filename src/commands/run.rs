//! `orchestrator run`: the loop, as a foreground daemon.

use std::io::IsTerminal;
use std::path::Path;

use crate::cli::RunArgs;
use crate::config::Config;
use crate::daemon::{self, RunOptions};

/// The run's cycles failed (exit 1; see [`daemon::RunSummary::failure`]).
#[derive(Debug, thiserror::Error)]
#[error("{0}; see the ERROR lines above and `orchestrator ledger`")]
pub struct RunFailed(String);

pub fn run(config_path: &Path, args: &RunArgs) -> anyhow::Result<()> {
    let config = Config::load(config_path)?;
    let opts = RunOptions {
        cycles: args.cycles,
        once: args.once,
        progress: std::io::stderr().is_terminal(),
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let summary = rt.block_on(daemon::run(config, opts))?;
    if summary.interrupted {
        eprintln!(
            "stopped after {} cycle(s) ({} failed, {} aborted); children stopped",
            summary.cycles, summary.failed, summary.aborted
        );
    }
    // A bounded run answers for its cycles; a daemon stopped on request
    // (a service manager's SIGTERM) has stopped cleanly whatever they did.
    let bounded = args.once || args.cycles.is_some();
    match summary.failure().filter(|_| bounded) {
        Some(why) => Err(RunFailed(why).into()),
        None => Ok(()),
    }
}
