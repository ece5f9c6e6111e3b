//! A/A traces: runs of one profile back to back, as CSV.
//!
//! The format (`benches/traces/README.md`): a header row, then one row per
//! run in the order run. `seconds_per_token` is required; `contention` (a
//! run's mean runnable tasks per core, as `orchestrator trace` writes it)
//! is used for the judge's interference rule when present; `cpu_some` and
//! `memory_some` (stall shares, 0..1) are shown in the table; every other
//! column (`started_unix`, `wall_s`, `load1`, ...) is ignored.

use std::path::Path;

/// One run of a trace.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Run {
    pub seconds_per_token: f64,
    /// The larger of the CPU and memory stall shares, for the table.
    pub pressure: Option<f64>,
    /// Runnable tasks per core, as the daemon judges it.
    pub contention: Option<f64>,
}

/// A trace file, parsed.
#[derive(Debug, Clone)]
pub struct Trace {
    pub name: String,
    pub runs: Vec<Run>,
}

/// Fewest runs a trace must have: a floor, an A/B and a confirmation with
/// room for the block bootstrap to choose from.
pub const MIN_RUNS: usize = 100;

impl Trace {
    /// Reads and checks a trace; the error names the file, the line and
    /// the fix.
    pub fn load(path: &Path) -> Result<Trace, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("{}: cannot be read: {e}", path.display()))?;
        let mut lines = text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty());
        let (_, header) = lines.next().ok_or_else(|| {
            format!(
                "{}: empty; a trace starts with a header row",
                path.display()
            )
        })?;
        let cols: Vec<&str> = header.split(',').map(str::trim).collect();
        let find = |name: &str| cols.iter().position(|c| *c == name);
        let spt = find("seconds_per_token").ok_or_else(|| {
            format!(
                "{}: the header has no `seconds_per_token` column (it has: {}); see benches/traces/README.md",
                path.display(),
                cols.join(", ")
            )
        })?;
        let (cpu, mem) = (find("cpu_some"), find("memory_some"));
        let contention = find("contention");
        let mut runs = Vec::new();
        for (i, line) in lines {
            let fields: Vec<&str> = line.split(',').map(str::trim).collect();
            let at = |c: Option<usize>| -> Result<Option<f64>, String> {
                let Some(c) = c else { return Ok(None) };
                match fields.get(c).copied() {
                    None | Some("") => Ok(None),
                    Some(v) => v.parse::<f64>().map(Some).map_err(|_| {
                        format!(
                            "{} line {}: column `{}` is `{v}`, not a number",
                            path.display(),
                            i + 1,
                            cols[c]
                        )
                    }),
                }
            };
            let s = at(Some(spt))?.ok_or_else(|| {
                format!(
                    "{} line {}: `seconds_per_token` is empty; every row must be a measured run",
                    path.display(),
                    i + 1
                )
            })?;
            if !(s.is_finite() && s > 0.0) {
                return Err(format!(
                    "{} line {}: seconds_per_token {s} is not a time > 0",
                    path.display(),
                    i + 1
                ));
            }
            let pressure = match (at(cpu)?, at(mem)?) {
                (None, None) => None,
                (c, m) => Some(c.unwrap_or(0.0).max(m.unwrap_or(0.0))),
            };
            runs.push(Run {
                seconds_per_token: s,
                pressure,
                contention: at(contention)?,
            });
        }
        if runs.len() < MIN_RUNS {
            return Err(format!(
                "{}: {} runs; a replay needs at least {MIN_RUNS} (record more with `orchestrator trace --runs N`)",
                path.display(),
                runs.len()
            ));
        }
        let name = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|| path.display().to_string());
        Ok(Trace { name, runs })
    }

    /// Median s/token, for the table.
    pub fn median(&self) -> f64 {
        let mut v: Vec<f64> = self.runs.iter().map(|r| r.seconds_per_token).collect();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    }

    /// Lag-1 autocorrelation of log s/token: how bursty the trace is.
    pub fn lag1(&self) -> f64 {
        let x: Vec<f64> = self.runs.iter().map(|r| r.seconds_per_token.ln()).collect();
        let n = x.len() as f64;
        let mu = x.iter().sum::<f64>() / n;
        let var: f64 = x.iter().map(|v| (v - mu).powi(2)).sum();
        let cov: f64 = x.windows(2).map(|w| (w[0] - mu) * (w[1] - mu)).sum();
        if var > 0.0 { cov / var } else { 0.0 }
    }
}
