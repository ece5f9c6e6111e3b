//! The wrapper's own command line, parsed by hand (it must never swallow an
//! engine flag: everything after `--` is the engine's).

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::fault::Fault;

pub const USAGE: &str = "usage: fault-wrapper [--log FILE] --fault KIND -- PROGRAM ARGS...\n       \
     fault-wrapper [--log FILE] --random RATE --seed N --state FILE -- PROGRAM ARGS...\n       \
     fault-wrapper [--log FILE] --queue FILE -- PROGRAM ARGS...\n\
     KIND: none | crash | hang | garbage | change-output | exit4 | die-mid-run";

/// How the fault is chosen.
#[derive(Debug)]
pub enum Choice {
    Fixed(Fault),
    /// With probability `rate` a fault (uniform over the non-`none` kinds),
    /// drawn from hash(seed, counter), the counter kept in `state`.
    Random {
        rate: f64,
        seed: u64,
        state: PathBuf,
    },
    /// The first line of `FILE`, popped (`none` when it is empty or missing):
    /// a test feeds faults to a running daemon one at a time.
    Queue(PathBuf),
}

#[derive(Debug)]
pub struct Parsed {
    pub choice: Choice,
    pub log: Option<PathBuf>,
    /// PROGRAM ARGS...
    pub engine: Vec<String>,
}

pub fn parse(mut it: impl Iterator<Item = String>) -> Result<Parsed, String> {
    let (mut fault, mut rate, mut seed, mut state, mut log) = (None, None, None, None, None);
    let mut queue = None;
    let mut engine = None;
    while let Some(a) = it.next() {
        let mut value = |name: &str| it.next().ok_or(format!("{name} needs a value"));
        match a.as_str() {
            "--" => {
                engine = Some(it.by_ref().collect::<Vec<_>>());
                break;
            }
            "--fault" => {
                let v = value("--fault")?;
                fault = Some(Fault::from_name(&v).ok_or(format!("unknown fault `{v}`"))?);
            }
            "--random" => {
                let v = value("--random")?;
                let r: f64 = v
                    .parse()
                    .map_err(|_| format!("--random {v}: not a number"))?;
                if !(0.0..=1.0).contains(&r) {
                    return Err(format!("--random {v}: a rate between 0 and 1"));
                }
                rate = Some(r);
            }
            "--seed" => {
                let v = value("--seed")?;
                seed = Some(
                    v.parse::<u64>()
                        .map_err(|_| format!("--seed {v}: not a u64"))?,
                );
            }
            "--state" => state = Some(PathBuf::from(value("--state")?)),
            "--queue" => queue = Some(PathBuf::from(value("--queue")?)),
            "--log" => log = Some(PathBuf::from(value("--log")?)),
            other => {
                return Err(format!(
                    "unknown argument `{other}` (the engine's go after `--`)"
                ));
            }
        }
    }
    let engine = match engine {
        Some(e) if !e.is_empty() => e,
        _ => return Err("no engine: give `-- PROGRAM ARGS...`".into()),
    };
    let choice = match (fault, rate, seed, state, queue) {
        (Some(f), None, None, None, None) => Choice::Fixed(f),
        (None, Some(rate), Some(seed), Some(state), None) => Choice::Random { rate, seed, state },
        (None, None, None, None, Some(q)) => Choice::Queue(q),
        (None, Some(_), _, _, None) => return Err("--random needs --seed and --state".into()),
        _ => {
            return Err(
                "give one of --fault KIND, --random RATE --seed N --state FILE, --queue FILE"
                    .into(),
            );
        }
    };
    Ok(Parsed {
        choice,
        log,
        engine,
    })
}

/// One JSON line: the kind, the wrapper's pid (the process group id when
/// the orchestrator started it) and the engine argv exactly as received.
pub fn append_log(log: &Path, fault: Fault, engine: &[String]) -> std::io::Result<()> {
    let line = serde_json::json!({
        "fault": fault.name(),
        "pid": std::process::id(),
        "argv": engine,
    });
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)?;
    // One write per line: O_APPEND keeps concurrent invocations' lines whole.
    f.write_all(format!("{line}\n").as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Result<Parsed, String> {
        parse(s.split_whitespace().map(String::from))
    }

    #[test]
    fn fixed_and_random_forms_parse_and_keep_engine_flags() {
        let x = p("--fault exit4 -- eng --fault x --out o").unwrap();
        assert!(matches!(x.choice, Choice::Fixed(Fault::Exit4)));
        assert_eq!(x.engine, ["eng", "--fault", "x", "--out", "o"]);
        let x = p("--random 0.5 --seed 7 --state s -- eng").unwrap();
        assert!(matches!(x.choice, Choice::Random { seed: 7, .. }));
        let x = p("--queue q --log l -- eng").unwrap();
        assert!(matches!(x.choice, Choice::Queue(_)));
    }

    #[test]
    fn bad_forms_are_refused_with_a_reason() {
        assert!(p("--fault boom -- eng").unwrap_err().contains("boom"));
        assert!(p("--fault none").unwrap_err().contains("engine"));
        assert!(
            p("--random 2 --seed 1 --state s -- e")
                .unwrap_err()
                .contains("between")
        );
        assert!(p("--random 0.1 -- e").unwrap_err().contains("--seed"));
        assert!(p("--fault none --seed 1 -- e").is_err());
    }
}
