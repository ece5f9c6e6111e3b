//! Row ids as newtypes, so a run id can never be passed where a stage id is meant.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

macro_rules! row_id {
    ($(#[$meta:meta])* $name:ident, $what:literal) => {
        $(#[$meta])*
        #[derive(
            Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, sqlx::Type,
        )]
        #[serde(transparent)]
        #[sqlx(transparent)]
        pub struct $name(pub i64);

        impl $name {
            /// What this id names, for messages.
            pub const WHAT: &'static str = $what;

            pub fn get(self) -> i64 {
                self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt(f)
            }
        }

        impl FromStr for $name {
            type Err = std::num::ParseIntError;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                s.trim().parse().map($name)
            }
        }
    };
}

row_id!(
    /// A cycle of the loop.
    CycleId, "cycle"
);
row_id!(
    /// The observation taken at the start of a cycle.
    ObservationId, "observation"
);
row_id!(
    /// One answer of a proposer (one attempt).
    ProposalId, "proposal"
);
row_id!(
    /// One A/B comparison of a candidate profile against a base profile.
    ExperimentId, "experiment"
);
row_id!(
    /// One engine run of one arm.
    RunId, "run"
);
row_id!(
    /// The one verdict of an experiment (or of a cycle that had none).
    VerdictId, "verdict"
);
row_id!(
    /// One noise-floor estimate.
    NoiseFloorId, "noise floor"
);
row_id!(
    /// One pinning of a reference output hash.
    ReferenceHashId, "reference hash"
);
row_id!(
    /// A win waiting for a person's decision.
    StageId, "stage"
);
row_id!(
    /// The combined candidate of staged wins on different menu entries.
    CompositionId, "composition"
);
row_id!(
    /// A stretch in which the daemon ran no cycle on purpose.
    WaitId, "wait"
);
