//! `orchestrator rebaseline`: a person re-pins the reference output hash of
//! the live profile, on purpose, after the engine, the model or the bench
//! command changed its (correct) output. Records who and why.

use chrono::Utc;
use std::path::Path;

use super::UsageError;
use crate::cli::RebaselineArgs;
use crate::config::Config;
use crate::ledger::NewReferenceHash;
use crate::measure::by_protocol::{Scorers, StackScorer};
use crate::measure::scorer::Scorer;
use crate::process::cancel::Cancel;
use crate::profile::ProfileFile;

pub fn run(config_path: &Path, args: RebaselineArgs) -> anyhow::Result<()> {
    if args.reason.trim().is_empty() {
        return Err(UsageError("--reason must say why the output changed".into()).into());
    }
    let by = super::decider::decider(args.by)?;
    let config = Config::load(config_path)?;
    // Pinning into a new empty ledger would help no daemon: only `run`
    // creates one, and refuse before measuring anything.
    super::require_ledger(&config)?;
    let live = ProfileFile::load(&config.stack.live_profile)?;
    let scorers = Scorers::from_config(&config);
    let targets: Vec<StackScorer> = [
        scorers.bench.clone().map(StackScorer::Bench),
        scorers.surface.map(StackScorer::Live),
    ]
    .into_iter()
    .flatten()
    .collect();
    super::runtime()?.block_on(async {
        let ledger = super::open_ledger(&config).await?;
        let mut pinned = 0;
        for scorer in &targets {
            let prompt_set = scorer.prompt_set(&config);
            let old = ledger
                .current_reference_hash(&config.stack.name, &prompt_set)
                .await?;
            let outcome = match scorer.score(&live, &Cancel::never()).await {
                Ok(o) => o,
                Err(failure) => {
                    println!(
                        "{}: not re-pinned, the live profile could not be measured: {}",
                        scorer.label(),
                        failure.error
                    );
                    continue;
                }
            };
            ledger
                .pin_reference_hash(&NewReferenceHash {
                    stack: config.stack.name.clone(),
                    prompt_set: prompt_set.clone(),
                    profile_digest: live.profile.digest(),
                    output_hash: outcome.output_hash.as_str().to_string(),
                    pinned_at: Utc::now(),
                    pinned_by: by.clone(),
                    reason: args.reason.clone(),
                })
                .await?;
            pinned += 1;
            println!(
                "{}: reference for prompt set `{prompt_set}` is now {} (was {}), pinned by {by}",
                scorer.label(),
                outcome.output_hash.as_str(),
                old.map(|o| o.recorded.output_hash)
                    .unwrap_or_else(|| "none".into()),
            );
        }
        ledger.close().await;
        if pinned == 0 {
            anyhow::bail!(
                "nothing was re-pinned: no configured protocol could measure the live profile"
            );
        }
        Ok(())
    })
}
