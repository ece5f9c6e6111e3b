//! Measurement: turning a profile into runs of the real stack (the child
//! processes themselves are [`crate::process`]'s).
//!
//! - [`preflight`]: refuse a run when available memory is below budget plus headroom.
//! - [`pressure`]: Linux pressure stall information and load average over a run.
//! - [`cgroup`]: a cgroup v2 memory limit per run where the machine allows one.
//! - [`output`]: the bench JSON checked, and the FNV-1a 64 output hash.
//! - [`scorer`]: the `Scorer` trait, `RunOutcome`, `MeasureError`.
//! - [`bench`]: the bench scorer (a command per measurement).
//! - [`surface`]: the surface scorer (fixed greedy requests to an OpenAI-compatible server).
//! - [`shadow`]: throw-away instances of the stack for measuring a candidate's surface.
//! - [`realization`]: the live server beside a shadow of the profile an applied stage replaced.
//! - [`by_protocol`]: which of those scorers measures an A/B or an A/A, per protocol.
//! - [`gate`]: the hash gate against the pinned reference output.
//! - [`stand_aside`]: the live server's users first: no run starts while
//!   they are served, a block they interrupted is re-run, a cycle that
//!   cannot start is deferred.
//! - [`ab`]: the paired ABBA runner and the A/A noise-floor measurement.

pub mod ab;
pub mod ab_outcome;
pub mod bench;
pub mod by_protocol;
pub mod cgroup;
pub mod deadline;
pub mod gate;
pub mod output;
pub mod preflight;
pub mod pressure;
pub mod realization;
pub mod scorer;
pub mod shadow;
pub mod stand_aside;
pub mod surface;
