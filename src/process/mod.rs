//! Child processes: how the orchestrator starts, bounds and stops the
//! programs it runs (bench runs, shadow servers, the embedded stack). Not
//! measurement: `config`, `embedded`, `daemon` and `measure` all use it, so
//! it sits low in the module order and imports only `profile` (for the knobs
//! a template names).
//!
//! - [`template`]: argv templates filled from a profile (never a shell).
//! - [`cancel`]: the shutdown signal every child's wait listens to.
//! - [`group`]: children in their own process group, timeout, group kill, stderr tail.
//! - [`orphans`]: finding and killing the children a dead daemon left behind.
//! - [`secrets`]: the variables no child may inherit.

pub mod argv_files;
pub mod cancel;
pub mod group;
pub mod orphans;
pub mod secrets;
pub mod template;
