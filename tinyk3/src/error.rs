//! The engine's error type and the exit code each kind of failure maps to.

use std::path::PathBuf;

/// Exit code: success.
pub const EXIT_OK: i32 = 0;
/// Exit code: runtime failure (I/O, a corrupt trunk, a write that failed).
pub const EXIT_RUNTIME: i32 = 1;
/// Exit code: usage or configuration error (bad flag, missing model, budget too small).
pub const EXIT_USAGE: i32 = 2;
/// Exit code: an expert failed to load, so any output would be invalid.
pub const EXIT_EXPERT_LOAD: i32 = 4;

/// Everything that can stop the engine, grouped by what the caller should do.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The caller asked for something impossible; fix the command line or profile.
    #[error("{0}")]
    Usage(String),
    /// The model directory does not hold a usable checkpoint.
    #[error("model {dir}: {problem}; create one with `tinyk3 init --out {dir}`")]
    Model { dir: PathBuf, problem: String },
    /// An expert's weights could not be read: the output would be corrupt.
    #[error("expert (layer {layer}, expert {expert}) failed to load from {path}: {source}")]
    ExpertLoad {
        layer: usize,
        expert: usize,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// Any other I/O failure while running.
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    /// A runtime invariant failed (e.g. a corrupt trunk segment).
    #[error("{0}")]
    Runtime(String),
}

impl Error {
    /// The process exit code for this error, following the kimi-k3-in-c family.
    pub fn exit_code(&self) -> i32 {
        match self {
            Error::Usage(_) | Error::Model { .. } => EXIT_USAGE,
            Error::ExpertLoad { .. } => EXIT_EXPERT_LOAD,
            Error::Io { .. } | Error::Runtime(_) => EXIT_RUNTIME,
        }
    }

    /// Wraps an I/O error with what was being done.
    pub fn io(what: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io {
            what: what.into(),
            source,
        }
    }
}

/// Result alias used across the crate.
pub type Result<T> = std::result::Result<T, Error>;
