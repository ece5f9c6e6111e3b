//! The noise floor a cycle judges with: stored per (stack, protocol), since
//! a floor is only meaningful for the protocol that measured it; stale when
//! older than `noise_floor_max_age_s` or measured on another live profile.

use chrono::{DateTime, Utc};

use crate::brain::NoiseFloorState;
use crate::judge::Floor;
use crate::ledger::{Ledger, LedgerError, NoiseFloor};
use crate::vocab::{Digest, Method};

/// The ledger key of a floor: the stack and the protocol that measured it.
pub fn key(stack: &str, method: Method) -> String {
    format!("{stack}/{method}")
}

/// The latest floor for a protocol, and whether it may still be used.
#[derive(Debug, Clone)]
pub struct CurrentFloor {
    pub row: Option<NoiseFloor>,
    pub stale: bool,
}

impl CurrentFloor {
    pub async fn load(
        ledger: &Ledger,
        stack: &str,
        method: Method,
        live: &Digest,
        max_age: std::time::Duration,
        now: DateTime<Utc>,
    ) -> Result<CurrentFloor, LedgerError> {
        let row = ledger.latest_noise_floor(&key(stack, method)).await?;
        let stale = match &row {
            None => true,
            Some(f) => {
                let age = (now - f.measured_at).to_std().unwrap_or_default();
                age > max_age || &f.profile_digest != live
            }
        };
        Ok(CurrentFloor { row, stale })
    }

    /// The floor to judge with: the measurement clamped below by `min`.
    pub fn floor(&self, min: Floor) -> Option<Floor> {
        let row = self.row.as_ref()?;
        let v = row.value.max(min.get());
        Floor::try_from(v).ok()
    }

    /// The proposer's view.
    pub fn state(&self, min: Floor, now: DateTime<Utc>) -> NoiseFloorState {
        match (&self.row, self.floor(min)) {
            (Some(row), Some(f)) => NoiseFloorState::Current {
                value: f.get(),
                pairs: row.n,
                age: (now - row.measured_at).to_std().unwrap_or_default(),
                stale: self.stale,
            },
            _ => NoiseFloorState::Missing,
        }
    }
}
