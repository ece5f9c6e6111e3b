//! The hash gate: a speedup that changes the output is a broken engine.
//!
//! The live profile's reference output hash is pinned in the ledger per
//! (stack, prompt set). Every run of either arm is checked against it. A
//! candidate run that differs makes the experiment `hash_mismatch` (no
//! seconds per token from it becomes a metric, no delta is computed). A
//! baseline run that differs means the engine or model changed under us: the
//! cycle fails loudly and a person re-pins on purpose with
//! `orchestrator rebaseline`. With nothing pinned yet, the first baseline
//! run's hash is pinned by `orchestrator`.

use chrono::{DateTime, Utc};

use super::output::OutputHash;
use crate::config::{Bench, Surface};
use crate::ledger::{Ledger, LedgerError, NewReferenceHash, ReferenceHash};
use crate::vocab::{Arm, Digest};

/// Who pins the first reference.
pub const FIRST_PINNER: &str = "orchestrator";

/// The prompt set of a bench command: its template (prompt, length, model
/// and flags, with knob placeholders unfilled), so changing what is asked
/// changes the key while changing a knob does not.
pub fn bench_prompt_set(bench: &Bench) -> String {
    let mut text = String::new();
    for a in &bench.argv.args {
        text.push_str(&a.to_string());
        text.push('\0');
    }
    for g in &bench.argv.optional {
        text.push_str(&format!("[{}]", g.when));
        for a in &g.args {
            text.push_str(&a.to_string());
            text.push('\0');
        }
    }
    format!("bench:{}", Digest::of(text.as_bytes()).short())
}

/// The prompt set of a surface: its prompts and `max_tokens`.
pub fn surface_prompt_set(surface: &Surface) -> String {
    let mut text = format!("max_tokens={}\0", surface.max_tokens);
    for p in &surface.prompts {
        text.push_str(p);
        text.push('\0');
    }
    format!("surface:{}", Digest::of(text.as_bytes()).short())
}

/// What the gate says about one run.
#[derive(Debug, Clone, PartialEq)]
pub enum GateCheck {
    /// Same output as the reference.
    Match,
    /// Nothing was pinned; this baseline run's hash now is.
    Pinned,
    /// A candidate run produced other output.
    Mismatch { expected: String, got: String },
}

/// Why a measurement cannot go on at all.
#[derive(Debug, thiserror::Error)]
pub enum GateError {
    #[error(
        "the live profile's output no longer matches the reference pinned for stack `{stack}`, prompt set `{prompt_set}`: got {got}, pinned {expected} (by {pinned_by} at {pinned_at}). The engine, the model or the bench command changed. Nothing was measured against it. If the new output is correct, re-pin on purpose: `orchestrator rebaseline`"
    )]
    BaselineMismatch {
        stack: String,
        prompt_set: String,
        expected: String,
        got: String,
        pinned_by: String,
        pinned_at: DateTime<Utc>,
    },
    #[error(
        "no reference output hash is pinned for stack `{stack}`, prompt set `{prompt_set}`, and a candidate ran before any baseline succeeded; pin one with `orchestrator rebaseline`"
    )]
    Unpinned { stack: String, prompt_set: String },
    #[error(transparent)]
    Ledger(#[from] LedgerError),
}

/// The gate for one (stack, prompt set).
#[derive(Debug, Clone)]
pub struct HashGate {
    stack: String,
    prompt_set: String,
    reference: Option<ReferenceHash>,
}

impl HashGate {
    /// Reads the reference in force.
    pub async fn load(
        ledger: &Ledger,
        stack: &str,
        prompt_set: &str,
    ) -> Result<HashGate, LedgerError> {
        Ok(HashGate {
            stack: stack.to_string(),
            prompt_set: prompt_set.to_string(),
            reference: ledger.current_reference_hash(stack, prompt_set).await?,
        })
    }

    pub fn reference(&self) -> Option<&ReferenceHash> {
        self.reference.as_ref()
    }

    pub fn prompt_set(&self) -> &str {
        &self.prompt_set
    }

    /// Checks one run of profile arm `arm` (baseline or candidate); a first
    /// baseline run pins the reference (`baseline_digest` names its profile).
    pub async fn check(
        &mut self,
        ledger: &Ledger,
        arm: Arm,
        hash: &OutputHash,
        baseline_digest: &Digest,
        now: DateTime<Utc>,
    ) -> Result<GateCheck, GateError> {
        let Some(reference) = &self.reference else {
            if arm != Arm::Baseline {
                return Err(GateError::Unpinned {
                    stack: self.stack.clone(),
                    prompt_set: self.prompt_set.clone(),
                });
            }
            let new = NewReferenceHash {
                stack: self.stack.clone(),
                prompt_set: self.prompt_set.clone(),
                profile_digest: baseline_digest.clone(),
                output_hash: hash.as_str().to_string(),
                pinned_at: now,
                pinned_by: FIRST_PINNER.to_string(),
                reason: format!(
                    "first measurement of the live profile {}",
                    baseline_digest.short()
                ),
            };
            let id = ledger.pin_reference_hash(&new).await?;
            self.reference = Some(ReferenceHash { id, recorded: new });
            return Ok(GateCheck::Pinned);
        };
        if reference.output_hash == hash.as_str() {
            return Ok(GateCheck::Match);
        }
        if arm == Arm::Baseline {
            return Err(GateError::BaselineMismatch {
                stack: self.stack.clone(),
                prompt_set: self.prompt_set.clone(),
                expected: reference.output_hash.clone(),
                got: hash.as_str().to_string(),
                pinned_by: reference.pinned_by.clone(),
                pinned_at: reference.pinned_at,
            });
        }
        Ok(GateCheck::Mismatch {
            expected: reference.output_hash.clone(),
            got: hash.as_str().to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> DateTime<Utc> {
        "2026-11-29T08:00:00Z".parse().unwrap()
    }

    #[tokio::test]
    async fn pins_first_then_matches_refuses_and_fails_loudly() {
        let ledger = Ledger::open_in_memory().await.unwrap();
        let d = Digest::of(b"live");
        let (a, b) = (OutputHash::of_ids(&[1, 2]), OutputHash::of_ids(&[1, 3]));
        let mut gate = HashGate::load(&ledger, "tinyk3", "bench:x").await.unwrap();
        assert!(matches!(
            gate.check(&ledger, Arm::Candidate, &a, &d, now()).await,
            Err(GateError::Unpinned { .. })
        ));
        assert_eq!(
            gate.check(&ledger, Arm::Baseline, &a, &d, now())
                .await
                .unwrap(),
            GateCheck::Pinned
        );
        // The pin is in the ledger, found again by a fresh gate.
        let mut gate = HashGate::load(&ledger, "tinyk3", "bench:x").await.unwrap();
        assert_eq!(gate.reference().unwrap().pinned_by, FIRST_PINNER);
        assert_eq!(
            gate.check(&ledger, Arm::Candidate, &a, &d, now())
                .await
                .unwrap(),
            GateCheck::Match
        );
        assert!(matches!(
            gate.check(&ledger, Arm::Candidate, &b, &d, now())
                .await
                .unwrap(),
            GateCheck::Mismatch { .. }
        ));
        let err = gate
            .check(&ledger, Arm::Baseline, &b, &d, now())
            .await
            .unwrap_err();
        assert!(err.to_string().contains("orchestrator rebaseline"), "{err}");
        // Another prompt set has its own reference.
        let other = HashGate::load(&ledger, "tinyk3", "bench:y").await.unwrap();
        assert!(other.reference().is_none());
    }
}
