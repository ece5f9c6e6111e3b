//! `tinyk3 serve`: turn the flags into server options and run until SIGTERM.

use crate::cli::ServeArgs;
use crate::error::Result;
use crate::serve::{self, Options, Overrides};

/// Runs the server; returns when it has shut down cleanly.
pub fn run(args: &ServeArgs) -> Result<()> {
    serve::run(Options {
        model: args.model.clone(),
        profile: args.profile.clone(),
        listen: args.listen.clone(),
        allow_remote: args.allow_remote,
        dump_dir: args.dump_cache_trace.clone(),
        queue: args.queue,
        max_prompt_tokens: args.max_prompt_tokens,
        context_tokens: args.context_tokens,
        overrides: Overrides {
            cache_gb: args.cache_gb,
            trunk_gb: args.trunk_gb,
            threads: args.threads,
        },
    })
}
