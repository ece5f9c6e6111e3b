//! Measurement: turning a profile into runs of the real stack.
//!
//! - [`template`]: argv templates filled from a profile (never a shell).

pub mod template;
