//! `tinyk3 pins`: rank a heat histogram into a pin list.

use crate::cli::PinsArgs;
use crate::error::{Error, Result};
use crate::heat::ranked_from_hist;
use crate::manifest::Manifest;

/// Writes the ranked `K3EXPERTS` list for the model's shape.
pub fn run(args: &PinsArgs) -> Result<()> {
    let m = Manifest::load(&args.model)?;
    let (layers, experts, list) = ranked_from_hist(&args.hist)?;
    if (layers, experts) != (m.shape.n_layers, m.shape.n_experts) {
        return Err(Error::Usage(format!(
            "{} is for {layers} x {experts} experts but the model has {} x {}",
            args.hist.display(),
            m.shape.n_layers,
            m.shape.n_experts
        )));
    }
    std::fs::write(&args.out, list.render(&m.shape))
        .map_err(|e| Error::io(format!("cannot write {}", args.out.display()), e))
}
