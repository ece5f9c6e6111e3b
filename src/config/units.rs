//! The units the file states numbers in (MiB, seconds, fractions, seconds
//! per token), each a newtype refusing what it cannot mean, so a table's
//! type says its unit and its range once.

use std::time::Duration;

use serde::Deserialize;

/// A size cap of the ledger file in MiB (`[ledger] max_size_mb`): strictly
/// positive and finite. Enforced by SQLite's `max_page_count`.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(try_from = "f64")]
pub struct LedgerSizeMb(f64);

impl LedgerSizeMb {
    /// The cap in bytes.
    pub fn bytes(self) -> u64 {
        (self.0 * 1024.0 * 1024.0) as u64
    }
}

impl TryFrom<f64> for LedgerSizeMb {
    type Error = String;
    fn try_from(x: f64) -> Result<Self, String> {
        if x.is_finite() && x > 0.0 && x < 1e9 {
            Ok(LedgerSizeMb(x))
        } else {
            Err(format!("must be a size in MiB above 0 (e.g. 512), got {x}"))
        }
    }
}

/// A strictly positive, finite duration given in seconds.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(try_from = "f64")]
pub struct Seconds(Duration);

impl Seconds {
    pub fn duration(self) -> Duration {
        self.0
    }
    pub fn from_secs(s: u64) -> Seconds {
        Seconds(Duration::from_secs(s))
    }
}

impl TryFrom<f64> for Seconds {
    type Error = String;
    fn try_from(x: f64) -> Result<Self, String> {
        if x.is_finite() && x > 0.0 && x < 1e9 {
            Ok(Seconds(Duration::from_secs_f64(x)))
        } else {
            Err(format!("must be a number of seconds > 0 (got {x})"))
        }
    }
}

/// A fraction strictly between 0 and 1 (confidence levels, floors).
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(try_from = "f64")]
pub struct Fraction(f64);

impl Fraction {
    pub fn get(self) -> f64 {
        self.0
    }
}

impl TryFrom<f64> for Fraction {
    type Error = String;
    fn try_from(x: f64) -> Result<Self, String> {
        if x > 0.0 && x < 1.0 {
            Ok(Fraction(x))
        } else {
            Err(format!("must be strictly between 0 and 1 (got {x})"))
        }
    }
}

/// The share of wall-clock time the daemon's measurements may take
/// (`[cycle] max_engine_share`): above 0, at most 1 (1: no cap).
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(try_from = "f64")]
pub struct EngineShare(f64);

impl EngineShare {
    pub fn get(self) -> f64 {
        self.0
    }
}

impl TryFrom<f64> for EngineShare {
    type Error = String;
    fn try_from(x: f64) -> Result<Self, String> {
        if x > 0.0 && x <= 1.0 {
            Ok(EngineShare(x))
        } else {
            Err(format!(
                "must be above 0 and at most 1 (got {x}); 1 puts no cap on the engine time"
            ))
        }
    }
}

/// The objective, in seconds per token.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(try_from = "f64")]
pub struct SecondsPerToken(f64);

impl SecondsPerToken {
    pub fn get(self) -> f64 {
        self.0
    }
}

impl TryFrom<f64> for SecondsPerToken {
    type Error = String;
    fn try_from(x: f64) -> Result<Self, String> {
        if x.is_finite() && x > 0.0 {
            Ok(SecondsPerToken(x))
        } else {
            Err(format!("must be seconds per token > 0 (got {x})"))
        }
    }
}
