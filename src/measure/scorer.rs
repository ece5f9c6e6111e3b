//! The scorer seam: one measurement of one profile, as a typed result or a
//! typed failure, behind a small trait the A/B runner (and tests) inject.

use std::future::Future;
use std::path::PathBuf;
use std::time::Duration;

use serde_json::{Map, Value};

use super::cgroup::MemoryLimit;
use super::output::{OutputError, OutputHash};
use super::preflight::PreflightError;
use crate::ledger::{TimingSource, TokenParts};
use crate::process::cancel::Cancel;
use crate::profile::ProfileFile;
use crate::vocab::Method;

/// A valid measurement.
#[derive(Debug, Clone, PartialEq)]
pub struct RunOutcome {
    /// Finite and > 0.
    pub seconds_per_token: f64,
    pub tokens: Option<u64>,
    pub output_hash: OutputHash,
    /// 0 for a bench; `None` for a surface measurement (no process).
    pub exit_code: Option<i32>,
    pub duration: Duration,
    pub stderr_tail: String,
    pub timing_source: TimingSource,
    /// The measured parts of a token, where the stack reports them.
    pub parts: TokenParts,
    /// Everything else the stack reported (tier hits, bytes read, ...).
    pub extras: Map<String, Value>,
    /// Whether a cgroup memory limit applied; `None` when not applicable.
    pub memory_limit: Option<MemoryLimit>,
}

/// Why one measurement is not valid; each becomes a run's `error` in the
/// ledger and, through the A/B, a `failed` verdict with its cause.
#[derive(Debug, thiserror::Error)]
pub enum MeasureError {
    #[error("{0}")]
    Spawn(#[source] crate::process::group::ProcessError),
    #[error(
        "the run was still going after {}s and its whole process group was killed; raise [measure] run_timeout_s if the stack is only slow, or see the stderr tail for why it hangs",
        after.as_secs_f64()
    )]
    Timeout { after: Duration },
    #[error(
        "the run was still going after {:.0}s, {}x the slow end of this profile's recent runs ({:.1}s), and its whole process group was killed; the next deadline follows the runs measured, so a machine that is only slower now is allowed for, up to [measure] run_timeout_s ({:.0}s); see the stderr tail for why it hangs",
        after.as_secs_f64(), super::deadline::FACTOR, typical.as_secs_f64(), cap.as_secs_f64()
    )]
    Overran {
        after: Duration,
        typical: Duration,
        cap: Duration,
    },
    #[error("the run was cancelled by shutdown; its process group was killed")]
    Cancelled,
    #[error("the bench command failed at runtime (exit 1): {message}")]
    Runtime { message: String },
    #[error(
        "the bench command refused its arguments (exit 2): {message}; the [stack.bench] argv or the profile does not suit this engine"
    )]
    Usage { message: String },
    #[error(
        "an expert failed to load (exit 4), so the output is invalid whatever the JSON says: {message}; check the model's experts file"
    )]
    ExpertLoad { message: String },
    #[error("the bench command exited with code {code}: {message}")]
    ExitCode { code: i32, message: String },
    #[error("the bench command was killed by signal {signal}: {message}")]
    Signal { signal: i32, message: String },
    #[error(
        "the run exceeded its memory limit ({:.3} GB) and the kernel killed it ({oom_kills} OOM kill(s)); raise memory.budget_gb or [measure] memory_headroom_gb, or give the stack less to hold",
        *limit_bytes as f64 / 1e9
    )]
    MemoryLimit { limit_bytes: u64, oom_kills: u64 },
    #[error("{0}")]
    Preflight(#[from] PreflightError),
    #[error("the bench command wrote no JSON to {}: {source}", path.display())]
    MissingOutput {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("invalid run output: {0}")]
    Output(#[from] OutputError),
    #[error("cannot prepare the work directory {}: {source}; check [stack] work_dir", path.display())]
    WorkDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot create {} ([stack.bench] create_dirs): {source}", path.display())]
    CreateDir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "the candidate asks for speculative decoding (speculative.draft_len = {draft_len}) but the server drafted no tokens: {evidence}. \
         It served without speculation, so this run would measure the plain server; llama-server does that when the draft model does not fit \
         the target (a different vocabulary) and only logs it (see the stderr tail). Give a draft model of the target's family, or check the \
         [stack.shadow] optional group of speculative.draft_len"
    )]
    NoDrafts { draft_len: u64, evidence: String },
    #[error("{hint}: {url} refused the connection ({source})")]
    Unreachable {
        url: String,
        hint: &'static str,
        #[source]
        source: reqwest::Error,
    },
    #[error("request to {url} failed: {source}")]
    Http {
        url: String,
        #[source]
        source: reqwest::Error,
    },
    #[error("{url} answered HTTP {status}: {body}")]
    HttpStatus {
        url: String,
        status: u16,
        body: String,
    },
    #[error("{url} answered something that is not an OpenAI-compatible completion: {problem}")]
    BadResponse { url: String, problem: String },
    #[error(
        "the shadow instance at {url} was not healthy within {}s (last: {last}); raise [stack.shadow] start_timeout_s or check its stderr tail",
        after.as_secs_f64()
    )]
    ShadowUnhealthy {
        url: String,
        after: Duration,
        last: String,
    },
    #[error("the shadow instance exited before it was healthy ({status}): {message}")]
    ShadowExited { status: String, message: String },
}

/// A failed measurement with the evidence gathered before it failed.
#[derive(Debug, thiserror::Error)]
#[error("{error}")]
pub struct RunFailure {
    #[source]
    pub error: MeasureError,
    pub exit_code: Option<i32>,
    pub duration: Duration,
    pub stderr_tail: String,
}

impl RunFailure {
    /// A failure before anything ran.
    pub fn before_start(error: impl Into<MeasureError>) -> RunFailure {
        RunFailure {
            error: error.into(),
            exit_code: None,
            duration: Duration::ZERO,
            stderr_tail: String::new(),
        }
    }
}

/// Measures one profile once.
pub trait Scorer {
    fn method(&self) -> Method;

    /// Measures `profile`; stops promptly (killing any child) on `cancel`.
    fn score(
        &self,
        profile: &ProfileFile,
        cancel: &Cancel,
    ) -> impl Future<Output = Result<RunOutcome, RunFailure>> + Send;

    /// As [`Scorer::score`], ending the run at `deadline` if it is sooner
    /// than the scorer's own timeout (see [`super::deadline`]).
    fn score_within(
        &self,
        profile: &ProfileFile,
        cancel: &Cancel,
        deadline: Duration,
    ) -> impl Future<Output = Result<RunOutcome, RunFailure>> + Send {
        let _ = deadline;
        self.score(profile, cancel)
    }

    /// Whether its runs send requests to the live server itself (a
    /// `remeasure` of the live surface): the daemon's own requests there
    /// are not its users' ([`super::stand_aside`]).
    fn sends_to_live_server(&self) -> bool {
        false
    }

    /// Releases what the scorer kept between runs (a shadow's server) when
    /// the A/B or floor measurement ends; most scorers keep nothing.
    fn finish(&self) -> impl Future<Output = ()> + Send {
        async {}
    }
}
