//! `orchestrator trace`: runs one profile back to back through the stack's
//! own measurement (the bench command or the live surface) and writes every
//! run as a CSV row, with the machine's pressure during it.
//!
//! An A/A trace of one profile is the raw material of the judge's replay
//! benchmark (`cargo bench --bench judge_replay -- --trace FILE`): it shows
//! how this machine's runs really vary, bursts and drift included, which no
//! simulation knows. Rows are written and flushed as runs end, so a trace
//! stopped by Ctrl-C or a failed run keeps every row it measured.

use std::io::Write;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Context;

use super::UsageError;
use crate::cli::{TraceArgs, TraceProtocol};
use crate::config::Config;
use crate::measure::by_protocol::{Scorers, StackScorer};
use crate::measure::pressure;
use crate::measure::scorer::Scorer;
use crate::process::cancel::Cancel;
use crate::profile::ProfileFile;

/// The CSV header; `docs/traces.md` documents each column.
pub const HEADER: &str = "run,started_unix,wall_s,seconds_per_token,tokens,output_hash,load1,cpu_some,memory_some,io_some,contention";

pub fn run(config_path: &Path, args: &TraceArgs) -> anyhow::Result<()> {
    if args.runs == 0 {
        return Err(UsageError("--runs must be at least 1".into()).into());
    }
    if args.out.exists() {
        return Err(UsageError(format!(
            "{} already exists; a trace never overwrites one: pass another --out or remove it",
            args.out.display()
        ))
        .into());
    }
    let config = Config::load(config_path)?;
    let profile_path = args
        .profile
        .clone()
        .unwrap_or_else(|| config.stack.live_profile.clone());
    let profile = ProfileFile::load(&profile_path)?;
    let scorers = Scorers::from_config(&config);
    let scorer = match args.protocol {
        TraceProtocol::Bench => scorers.bench.map(StackScorer::Bench).ok_or_else(|| {
            UsageError(format!(
                "{} has no [stack.bench]: trace with --protocol surface, or add the bench command",
                config.path.display()
            ))
        })?,
        TraceProtocol::Surface => scorers.surface.map(StackScorer::Live).ok_or_else(|| {
            UsageError(format!(
                "{} has no [stack.surface]: trace with --protocol bench, or add the surface",
                config.path.display()
            ))
        })?,
    };
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&args.out)
        .with_context(|| format!("creating the trace file {}", args.out.display()))?;
    let mut out = std::io::BufWriter::new(file);
    writeln!(out, "{HEADER}")?;
    out.flush()?;

    let (handle, cancel) = Cancel::new();
    let rt = super::runtime()?;
    let done = rt.block_on(async {
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                handle.cancel();
            }
        });
        let mut warned = false;
        for run in 0..args.runs {
            if cancel.is_cancelled() {
                return Ok::<u64, anyhow::Error>(run);
            }
            let started = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default()
                .as_secs_f64();
            let sample = pressure::Sample::now();
            let outcome = scorer.score(&profile, &cancel).await;
            let p = sample.until_now();
            if !p.available() && !warned {
                eprintln!(
                    "trace: /proc/pressure is not readable on this kernel; the pressure columns stay empty"
                );
                warned = true;
            }
            let o = match outcome {
                Ok(o) => o,
                // Ctrl-C: every row measured so far is kept.
                Err(_) if cancel.is_cancelled() => return Ok(run),
                Err(failure) => {
                    out.flush()?;
                    anyhow::bail!(
                        "run {run} could not be measured, so the trace stops here ({} rows kept in {}): {}",
                        run,
                        args.out.display(),
                        failure.error
                    );
                }
            };
            let opt = |v: Option<f64>| v.map(|v| format!("{v:.4}")).unwrap_or_default();
            writeln!(
                out,
                "{run},{started:.3},{:.4},{:.6},{},{},{},{},{},{},{}",
                o.duration.as_secs_f64(),
                o.seconds_per_token,
                o.tokens.map(|t| t.to_string()).unwrap_or_default(),
                o.output_hash.as_str(),
                p.load1.map(|v| format!("{v:.2}")).unwrap_or_default(),
                opt(p.cpu),
                opt(p.memory),
                opt(p.io),
                opt(p.contention),
            )?;
            out.flush()?;
            if args.progress_every > 0 && (run + 1) % args.progress_every == 0 {
                eprintln!(
                    "trace: {} of {} runs, last {:.4} s/token, cpu pressure {}",
                    run + 1,
                    args.runs,
                    o.seconds_per_token,
                    opt(p.cpu)
                );
            }
        }
        Ok(args.runs)
    })?;
    out.flush()?;
    out.get_ref().sync_all()?;
    println!(
        "{done} run(s) of {} through the {} written to {}",
        profile_path.display(),
        scorer.label(),
        args.out.display()
    );
    Ok(())
}
