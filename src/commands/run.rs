//! `orchestrator run`: the loop, as a foreground daemon.

use std::io::IsTerminal;
use std::path::Path;

use crate::cli::RunArgs;
use crate::config::Config;
use crate::daemon::{self, RunOptions};

pub fn run(config_path: &Path, args: RunArgs) -> anyhow::Result<()> {
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
            "stopped after {} cycle(s) ({} failed); children stopped",
            summary.cycles, summary.failed
        );
    }
    if args.once && summary.last_failed {
        anyhow::bail!("the cycle failed (see the ERROR line above and `orchestrator ledger`)");
    }
    Ok(())
}
