//! `tinyk3 init`: validate the shape and write the checkpoint.

use std::time::Instant;

use crate::checkpoint::write_checkpoint;
use crate::cli::InitArgs;
use crate::error::Result;
use crate::manifest::Shape;

/// Writes the checkpoint and prints a one-line summary to stdout.
pub fn run(args: &InitArgs) -> Result<()> {
    let shape = Shape {
        n_layers: args.layers,
        n_experts: args.experts,
        top_k: args.top_k,
        d_model: args.d_model,
        d_expert: args.d_expert,
        d_dense: args.d_dense,
        n_heads: args.heads,
        vocab: args.vocab,
        draft_layers: args.draft_layers,
        skew: args.skew,
        residual_scale: args.residual_scale,
    };
    let t = Instant::now();
    let m = write_checkpoint(&args.out, &shape, args.seed)?;
    println!(
        "wrote {}: trunk {} bytes, experts {} bytes ({} x {} of {} bytes), digest {}, {:.2}s",
        args.out.display(),
        m.trunk.bytes,
        m.experts.bytes,
        shape.n_layers,
        shape.n_experts,
        m.experts.expert_bytes,
        m.digest,
        t.elapsed().as_secs_f64()
    );
    Ok(())
}
