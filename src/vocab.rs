//! The design's shared vocabulary: the small closed sets that travel through
//! the cycle and are stored in the ledger (verdicts, stage states, cycle
//! statuses, deferral points, arms, proposers, measurement methods), why a
//! cycle's experiment was scheduled, and the profile digest.
//!
//! Each enum has one canonical lowercase spelling, used both in SQLite and in
//! `--json` output, so a ledger row and a CLI line always agree.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// Error for a stored or typed spelling that is not one of an enum's values.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("`{value}` is not a valid {what}; expected one of: {expected}")]
pub struct UnknownValue {
    pub what: &'static str,
    pub value: String,
    pub expected: String,
}

/// Declares a closed enum with a single canonical spelling per variant.
macro_rules! spelled_enum {
    ($(#[$meta:meta])* $name:ident, $what:literal { $($(#[$vmeta:meta])* $variant:ident => $text:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
        #[serde(rename_all = "snake_case")]
        pub enum $name { $($(#[$vmeta])* $variant),+ }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            /// The canonical spelling (ledger column value, JSON value).
            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => $text),+ }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl FromStr for $name {
            type Err = UnknownValue;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                match s {
                    $($text => Ok($name::$variant),)+
                    _ => Err(UnknownValue {
                        what: $what,
                        value: s.to_string(),
                        expected: [$($text),+].join(", "),
                    }),
                }
            }
        }
    };
}

spelled_enum!(
    /// Exactly one per experiment.
    VerdictKind, "verdict" {
        /// The candidate is faster by more than the noise floor, with confidence.
        Win => "win",
        /// The candidate is slower by more than the noise floor, with confidence.
        Loss => "loss",
        /// The test's interval, at the judge's `confidence`, lies inside
        /// ±floor: no difference worth having was seen. The reported 90%
        /// interval can reach far beyond the floor on few blocks; it is what
        /// the size is known to (docs/judging.md).
        WithinNoise => "within_noise",
        /// The maximum number of pairs was reached without a decision.
        Inconclusive => "inconclusive",
        /// A run of either arm produced output other than the pinned reference.
        HashMismatch => "hash_mismatch",
        /// The proposal was refused before anything was measured.
        Rejected => "rejected",
        /// The experiment could not be measured.
        Failed => "failed",
    }
);

impl VerdictKind {
    /// Whether its A/B measured something: every verdict but `rejected`
    /// and `failed`. What the ledger counts as decided (the duplicate
    /// check's `SQL_DUPLICATE_DECIDED`).
    pub fn is_measured(self) -> bool {
        !matches!(self, VerdictKind::Rejected | VerdictKind::Failed)
    }
}

spelled_enum!(
    /// A win waiting for a person: `staged` → `approved` | `rejected` | `expired`.
    StageState, "stage state" {
        Staged => "staged",
        Approved => "approved",
        Rejected => "rejected",
        /// Its base profile is no longer the live one.
        Expired => "expired",
    }
);

spelled_enum!(
    /// The life of one cycle of the loop.
    CycleStatus, "cycle status" {
        Running => "running",
        Completed => "completed",
        Failed => "failed",
        /// Ended by a signal or found `running` after a crash.
        Aborted => "aborted",
    }
);

spelled_enum!(
    /// When a cycle stood aside for the live server's users longer than
    /// `[daemon] stand_aside_max_wait_s` and was deferred.
    DeferredAt, "deferral point" {
        /// Before it measured anything (before it asked the proposer).
        Start => "start",
        /// Between two runs of its measurement.
        BetweenRuns => "between_runs",
    }
);

spelled_enum!(
    /// Which side of an A/B comparison a run belongs to.
    Arm, "arm" {
        /// The live profile.
        Baseline => "baseline",
        /// The profile the experiment proposes.
        Candidate => "candidate",
        /// A discarded warmup run (either profile).
        Warmup => "warmup",
    }
);

spelled_enum!(
    /// Who chose an experiment.
    ProposerKind, "proposer" {
        /// The served model, through its chat API.
        Model => "model",
        /// The non-model bandit over the menu.
        Bandit => "bandit",
        /// A person, through the CLI.
        Human => "human",
    }
);

spelled_enum!(
    /// Why the daemon runs no cycle for a while (`waits` in the ledger).
    WaitKind, "wait kind" {
        /// No experiment on the profile the loop builds on is expected to
        /// tell it anything new: it backs off until something changes.
        Converged => "converged",
        /// Its measurements took `[cycle] max_engine_share` of the window.
        Budget => "budget",
    }
);

spelled_enum!(
    /// What an engine run's time bought, for the engine-time accounts
    /// (`check`, the cycle line, the metrics endpoint, the report).
    EngineUse, "engine use" {
        /// An A/A of a noise floor (a `remeasure`, scheduled or proposed).
        Floor => "floor",
        /// A first A/B of a candidate.
        Ab => "ab",
        /// The independent second A/B that confirms a win.
        Confirmation => "confirmation",
        /// An experiment that ended `failed`: time that bought nothing.
        Failed => "failed",
    }
);

spelled_enum!(
    /// How an experiment is measured.
    Method, "measurement method" {
        /// A command run per measurement, reading its JSON output.
        Bench => "bench",
        /// Fixed greedy requests to an OpenAI-compatible server.
        Surface => "surface",
    }
);

/// Why the orchestrator chose a cycle's experiment itself, without asking
/// the proposer. Not stored as such: the cycle says it on its line, and
/// `orchestrator ledger` reads it back from the experiment rows (no
/// proposal; a confirmation names the win it re-tests; a floor refresh is
/// a `remeasure`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Scheduled {
    /// An A/A of the base: a floor was missing or stale, or the cycle waits
    /// while its win is left to its classmates. Also the floor an A/B had
    /// to measure before it could be judged, inside another kind's cycle,
    /// which is why it orders first: a cycle is named by what it was
    /// scheduled for, not by the floor it measured on the way.
    FloorRefresh,
    /// The independent second A/B of a win.
    Confirmation,
    /// The A/B of the combined candidate of staged wins.
    Composition,
    /// A person's or a tuner's profile judged by `orchestrator compare`.
    ManualComparison,
    /// The independent second A/B of a manual comparison's win.
    ManualConfirmation,
    /// What an applied stage (its id) realized: the live server against a
    /// shadow of the profile it replaced.
    Realization(i64),
}

impl Scheduled {
    /// How the cycle line and `orchestrator ledger` name it.
    pub fn as_str(self) -> &'static str {
        match self {
            Scheduled::FloorRefresh => "noise floor refresh",
            Scheduled::Confirmation => "confirmation",
            Scheduled::Composition => "composition",
            Scheduled::ManualComparison => "manual comparison",
            Scheduled::ManualConfirmation => "confirmation of a manual comparison",
            Scheduled::Realization(_) => "realization",
        }
    }
}

impl fmt::Display for Scheduled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The sha256 digest of a profile's canonical form, as 64 lowercase hex digits.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Digest(String);

impl Digest {
    /// Hashes bytes with sha256.
    pub fn of(bytes: &[u8]) -> Digest {
        use sha2::{Digest as _, Sha256};
        let out = Sha256::digest(bytes);
        Digest(out.iter().map(|b| format!("{b:02x}")).collect())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The first 12 hex digits, for tables meant for people.
    pub fn short(&self) -> &str {
        &self.0[..12]
    }
}

impl TryFrom<String> for Digest {
    type Error = UnknownValue;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        if s.len() == 64
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        {
            Ok(Digest(s))
        } else {
            Err(UnknownValue {
                what: "profile digest",
                value: s,
                expected: "64 lowercase hex digits (sha256)".to_string(),
            })
        }
    }
}

impl FromStr for Digest {
    type Err = UnknownValue;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Digest::try_from(s.to_string())
    }
}

impl From<Digest> for String {
    fn from(d: Digest) -> String {
        d.0
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_spelling_round_trips() {
        for v in VerdictKind::ALL {
            assert_eq!(v.as_str().parse::<VerdictKind>().unwrap(), *v);
        }
        for s in StageState::ALL {
            assert_eq!(s.as_str().parse::<StageState>().unwrap(), *s);
        }
    }

    #[test]
    fn unknown_spelling_names_the_valid_ones() {
        let err = "winner".parse::<VerdictKind>().unwrap_err();
        assert!(err.to_string().contains("within_noise"), "{err}");
        assert!(err.to_string().contains("winner"), "{err}");
    }

    #[test]
    fn digest_is_sha256_hex() {
        let d = Digest::of(b"abc");
        assert_eq!(
            d.as_str(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert!("XYZ".parse::<Digest>().is_err());
    }
}
