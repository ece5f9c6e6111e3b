//! The `orchestrator` binary: parse the command line, start logging, run the
//! command, map its error to an exit code (0 ok, 1 runtime, 2 usage/config).

use std::process::ExitCode;

use clap::Parser;
use orchestrator::cli::Cli;
use orchestrator::commands;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let filter = tracing_subscriber::EnvFilter::try_new(&cli.log).unwrap_or_else(|e| {
        eprintln!(
            "error: --log {:?} is not a valid filter ({e}); using `info`",
            cli.log
        );
        tracing_subscriber::EnvFilter::new("info")
    });
    // Colour only for a person at a terminal: a log file or a pipe gets
    // plain text, not escape codes.
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    match commands::dispatch(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {}", commands::render_error(&err));
            ExitCode::from(commands::exit_code(&err))
        }
    }
}
