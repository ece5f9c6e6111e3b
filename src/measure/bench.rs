//! The bench scorer: runs the configured command for a profile (argv from
//! the template, never a shell), under the memory pre-flight and, where the
//! machine allows, a cgroup memory limit; reads and checks its JSON.
//!
//! A run is valid only with exit 0, a finite `seconds_per_token` > 0 and an
//! `output_hash` or `generated_ids`. Exit 4 (an expert failed to load) is
//! invalid whatever the JSON says.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use super::cgroup::{self, MemoryLimit, RunCgroup};
use super::output::{self, OutputError};
use super::preflight;
use super::scorer::{MeasureError, RunFailure, RunOutcome, Scorer};
use crate::config::{Bench, BenchOutput, Config};
use crate::ledger::TimingSource;
use crate::process::cancel::Cancel;
use crate::process::group::{self, Exit, ProcessError, Spec};
use crate::process::template::{ArgvTemplate, RenderContext};
use crate::profile::ProfileFile;
use crate::vocab::Method;

/// Measures a profile by running the bench command once.
#[derive(Debug, Clone)]
pub struct BenchScorer {
    pub argv: ArgvTemplate,
    pub env: BTreeMap<String, String>,
    pub output: BenchOutput,
    /// The child's working directory (the config's directory).
    pub cwd: PathBuf,
    /// Where `{out}` files are written.
    pub work_dir: PathBuf,
    pub timeout: Duration,
    /// Memory that must stay free beyond the profile's budget, in GB.
    pub headroom_gb: f64,
    /// Try to run each child under a cgroup v2 memory limit.
    pub memory_limit: bool,
    /// Made before every run (`[stack.bench] create_dirs`): an engine that
    /// dumps only into an existing directory must never silently dump nothing.
    pub create_dirs: Vec<PathBuf>,
}

static SERIAL: AtomicU64 = AtomicU64::new(0);

impl BenchScorer {
    /// The scorer the config describes, if it has a `[stack.bench]`.
    pub fn from_config(config: &Config) -> Option<BenchScorer> {
        config
            .stack
            .bench
            .as_ref()
            .map(|b| BenchScorer::new(b, config))
    }

    pub fn new(bench: &Bench, config: &Config) -> BenchScorer {
        BenchScorer {
            argv: bench.argv.clone(),
            env: bench.env.clone(),
            output: bench.output,
            cwd: config.base_dir.clone(),
            work_dir: config.stack.work_dir.clone(),
            timeout: config.measure.run_timeout_s.duration(),
            headroom_gb: config.measure.memory_headroom_gb,
            memory_limit: true,
            create_dirs: bench.create_dirs.clone(),
        }
    }

    async fn run(
        &self,
        profile: &ProfileFile,
        cancel: &Cancel,
        timeout: Duration,
    ) -> Result<RunOutcome, RunFailure> {
        preflight::check(&profile.profile, self.headroom_gb).map_err(RunFailure::before_start)?;
        let work_err = |source| {
            RunFailure::before_start(MeasureError::WorkDir {
                path: self.work_dir.clone(),
                source,
            })
        };
        std::fs::create_dir_all(&self.work_dir).map_err(work_err)?;
        for dir in &self.create_dirs {
            std::fs::create_dir_all(dir).map_err(|source| {
                RunFailure::before_start(MeasureError::CreateDir {
                    path: dir.clone(),
                    source,
                })
            })?;
        }
        let out = self.work_dir.join(format!(
            "bench-{}-{}.json",
            std::process::id(),
            SERIAL.fetch_add(1, Ordering::Relaxed)
        ));
        // A stale file must never pass for this run's output.
        match std::fs::remove_file(&out) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(work_err(e)),
            _ => {}
        }
        let ctx = RenderContext {
            out: Some(out.clone()),
            profile: Some(profile.path.clone()),
            port: None,
        };
        let mut argv = self.argv.render(&profile.profile, profile.dir(), &ctx);
        let program = argv.remove(0);
        let (cg, limit) = if self.memory_limit {
            let bytes = cgroup::limit_bytes(profile.profile.memory.budget_gb, self.headroom_gb);
            match RunCgroup::create(bytes) {
                Ok(cg) => {
                    let limit = cg.limit();
                    (Some(cg), limit)
                }
                Err(reason) => (None, MemoryLimit::NotApplied { reason }),
            }
        } else {
            let reason = "disabled for this scorer".to_string();
            (None, MemoryLimit::NotApplied { reason })
        };
        if let MemoryLimit::NotApplied { reason } = &limit {
            tell_unlimited(reason);
        }
        let spec = Spec {
            program,
            args: argv,
            env: self.env.clone(),
            cwd: self.cwd.clone(),
            timeout,
            capture_stdout: self.output == BenchOutput::Stdout,
            cgroup_procs: cg.as_ref().map(RunCgroup::procs),
        };
        let ran = group::run(&spec, cancel).await;
        let oom_kills = cg.as_ref().map_or(0, RunCgroup::oom_kills);
        if let Some(cg) = cg {
            cg.remove().await;
        }
        let result = self.judge(ran, &out, oom_kills, &limit);
        let _ = std::fs::remove_file(&out);
        result.map(|mut o| {
            o.memory_limit = Some(limit);
            o
        })
    }

    /// Turns how the child ended into a valid run or a typed failure.
    fn judge(
        &self,
        ran: Result<Exit, ProcessError>,
        out: &std::path::Path,
        oom_kills: u64,
        limit: &MemoryLimit,
    ) -> Result<RunOutcome, RunFailure> {
        let exit = match ran {
            Ok(exit) => exit,
            Err(e) => {
                let (duration, tail) = e.evidence();
                let (duration, stderr_tail) = (duration.unwrap_or_default(), tail.to_string());
                let failure = |error| RunFailure {
                    error,
                    exit_code: None,
                    duration,
                    stderr_tail,
                };
                return Err(match e {
                    ProcessError::Timeout { after, .. } => failure(MeasureError::Timeout { after }),
                    ProcessError::Cancelled { .. } => failure(MeasureError::Cancelled),
                    e => failure(MeasureError::Spawn(e)),
                });
            }
        };
        let fail = |error| RunFailure {
            error,
            exit_code: exit.code,
            duration: exit.duration,
            stderr_tail: exit.stderr_tail.clone(),
        };
        let message = group::last_line(&exit.stderr_tail).to_string();
        if oom_kills > 0 {
            let limit_bytes = match limit {
                MemoryLimit::Applied { bytes, .. } => *bytes,
                MemoryLimit::NotApplied { .. } => 0,
            };
            return Err(fail(MeasureError::MemoryLimit {
                limit_bytes,
                oom_kills,
            }));
        }
        match (exit.code, exit.signal) {
            (Some(0), _) => {}
            (Some(1), _) => return Err(fail(MeasureError::Runtime { message })),
            (Some(2), _) => return Err(fail(MeasureError::Usage { message })),
            (Some(4), _) => return Err(fail(MeasureError::ExpertLoad { message })),
            (Some(code), _) => return Err(fail(MeasureError::ExitCode { code, message })),
            (None, signal) => {
                return Err(fail(MeasureError::Signal {
                    signal: signal.unwrap_or(0),
                    message,
                }));
            }
        }
        let text = match self.output {
            BenchOutput::File => std::fs::read_to_string(out).map_err(|source| {
                fail(MeasureError::MissingOutput {
                    path: out.to_path_buf(),
                    source,
                })
            })?,
            BenchOutput::Stdout => {
                let stdout = String::from_utf8_lossy(&exit.stdout);
                output::last_json_line(&stdout)
                    .ok_or_else(|| fail(OutputError::NoJsonLine.into()))?
                    .to_string()
            }
        };
        let report = output::parse_report(&text).map_err(|e| fail(e.into()))?;
        Ok(RunOutcome {
            seconds_per_token: report.seconds_per_token,
            tokens: report.tokens,
            output_hash: report.output_hash,
            exit_code: exit.code,
            duration: exit.duration,
            stderr_tail: exit.stderr_tail,
            timing_source: TimingSource::Engine,
            parts: report.parts,
            extras: report.extras,
            memory_limit: None,
        })
    }
}

/// Says why bench runs go without a memory limit, once per run of the
/// daemon (at WARN; later at DEBUG): the machine's fact, the same for every
/// run. Written into each run's stderr tail, it stood first in every one
/// and crowded out the engine's own lines. `true` when this call said it.
fn tell_unlimited(reason: &str) -> bool {
    static TOLD: AtomicBool = AtomicBool::new(false);
    if TOLD.swap(true, Ordering::Relaxed) {
        tracing::debug!("no memory limit applied to a bench run: {reason}");
        return false;
    }
    tracing::warn!(
        "no memory limit applied to bench runs (said once; a run that outgrows its budget can swap the machine): {reason}"
    );
    true
}

impl Scorer for BenchScorer {
    fn method(&self) -> Method {
        Method::Bench
    }

    async fn score(
        &self,
        profile: &ProfileFile,
        cancel: &Cancel,
    ) -> Result<RunOutcome, RunFailure> {
        self.run(profile, cancel, self.timeout).await
    }

    async fn score_within(
        &self,
        profile: &ProfileFile,
        cancel: &Cancel,
        deadline: Duration,
    ) -> Result<RunOutcome, RunFailure> {
        self.run(profile, cancel, deadline.min(self.timeout)).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_memory_limit_is_said_once_per_process() {
        // Other tests of this process may have said it first.
        tell_unlimited("no cgroup v2 here");
        assert!(!tell_unlimited("no cgroup v2 here"));
        assert!(!tell_unlimited("another reason"));
    }
}
