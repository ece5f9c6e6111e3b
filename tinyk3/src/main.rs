//! The `tinyk3` binary: parse the command line, dispatch, map errors to exit codes.

use clap::Parser;
use tinyk3::cli::{Cli, Command};
use tinyk3::cmd;

fn main() {
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Init(a) => cmd::init::run(a),
        Command::Bench(a) => cmd::bench::run(a),
        Command::ExpertServer(a) => cmd::serve_experts::run(a),
        Command::Pins(a) => cmd::pins::run(a),
        Command::Serve(a) => cmd::serve::run(a),
    };
    if let Err(e) = result {
        eprintln!("tinyk3: error: {e}");
        std::process::exit(e.exit_code());
    }
}
