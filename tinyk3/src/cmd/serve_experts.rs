//! `tinyk3 expert-server`: start the far tier.

use crate::cli::ServerArgs;
use crate::error::Result;
use crate::server::{ServerConfig, run as serve};

/// Runs the expert server until the process is killed.
pub fn run(args: &ServerArgs) -> Result<()> {
    serve(
        &args.model,
        &args.listen,
        ServerConfig {
            warm_capacity: args.warm_set,
            exit_after_requests: args.exit_after_requests,
        },
    )
}
