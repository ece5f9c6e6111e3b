//! The clock seam: the time of day behind a small trait, injected into the
//! A/B runner and the cycle (which stamp every row with it). Its own module
//! because measurement and the cycle both use it and neither owns it.

use chrono::{DateTime, Utc};

/// The time of day, injected so tests and replays are deterministic.
pub trait Clock: Send + Sync {
    fn now(&self) -> DateTime<Utc>;
}

/// The system clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}
