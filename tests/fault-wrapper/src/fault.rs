//! The faults and how each one is injected around the real engine.

use std::io::Write;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Child, Command, ExitCode, ExitStatus, Stdio};
use std::time::Duration;

/// One way a bench run goes wrong (or `None`: it does not).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Transparent: the engine is `exec`ed in the wrapper's place.
    None,
    /// The engine is started, then the wrapper dies by SIGKILL before any
    /// result exists, leaving the engine (and a helper that sleeps until
    /// killed) running in its process group.
    Crash,
    /// The engine runs to its end, then the wrapper never exits (and ignores
    /// SIGTERM): only killing the process group ends it.
    Hang,
    /// The engine runs, then non-JSON goes to stdout and over the result file.
    Garbage,
    /// The engine runs, then its result is valid JSON with another output hash.
    ChangeOutput,
    /// The engine runs, then the wrapper exits 4 ("an expert failed to load").
    Exit4,
    /// The engine is killed by SIGKILL while it runs; the wrapper exits 137.
    DieMidRun,
}

/// The hidden first argument of the lingering helper `crash` leaves behind.
pub const LINGER: &str = "--linger-until-killed";

/// The lingering helper: ignores SIGTERM and sleeps until SIGKILL.
pub fn linger() -> ! {
    // SAFETY: ignoring a signal has no memory effects.
    unsafe {
        libc::signal(libc::SIGTERM, libc::SIG_IGN);
    }
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

/// The text written in place of the engine's output by `garbage`.
pub const GARBAGE: &[u8] = b"\x00\xff<<not json>> seconds_per_token: fast {{{\n";

impl Fault {
    /// Every kind but `None`, the draw of `--random`.
    pub const INJECTED: [Fault; 6] = [
        Fault::Crash,
        Fault::Hang,
        Fault::Garbage,
        Fault::ChangeOutput,
        Fault::Exit4,
        Fault::DieMidRun,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Fault::None => "none",
            Fault::Crash => "crash",
            Fault::Hang => "hang",
            Fault::Garbage => "garbage",
            Fault::ChangeOutput => "change-output",
            Fault::Exit4 => "exit4",
            Fault::DieMidRun => "die-mid-run",
        }
    }

    pub fn from_name(name: &str) -> Option<Fault> {
        std::iter::once(Fault::None)
            .chain(Fault::INJECTED)
            .find(|f| f.name() == name)
    }
}

/// The engine's result file: the value of `--out FILE` or `--out=FILE`.
pub fn out_file(engine: &[String]) -> Option<PathBuf> {
    engine.iter().enumerate().find_map(|(i, a)| {
        if a == "--out" {
            engine.get(i + 1).map(PathBuf::from)
        } else {
            a.strip_prefix("--out=").map(PathBuf::from)
        }
    })
}

fn spawn(engine: &[String], stdout: Stdio) -> Child {
    match Command::new(&engine[0])
        .args(&engine[1..])
        .stdout(stdout)
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            eprintln!("fault-wrapper: cannot start `{}`: {e}", engine[0]);
            std::process::exit(1)
        }
    }
}

/// The exit code a shell would report for `status`.
fn code_of(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(c), _) => c as u8,
        (None, Some(s)) => 128u8.wrapping_add(s as u8),
        _ => 1,
    }
}

/// Runs `engine` with `fault` injected; returns the wrapper's exit code
/// (or never returns, for `none`, `crash` and `hang`).
pub fn inject(fault: Fault, engine: &[String]) -> ExitCode {
    let _ = std::io::stderr().flush();
    match fault {
        Fault::None => {
            let err = Command::new(&engine[0]).args(&engine[1..]).exec();
            eprintln!("fault-wrapper: cannot exec `{}`: {err}", engine[0]);
            ExitCode::from(1)
        }
        #[expect(
            clippy::zombie_processes,
            reason = "the crash is the point: the engine is left to the process group's killer"
        )]
        Fault::Crash => {
            let child = spawn(engine, Stdio::inherit());
            // A helper that would live on forever (like an engine's worker
            // process): only killing the whole group ends it, so a test can
            // tell that the group was killed, not just that the engine ended.
            let linger = std::env::current_exe()
                .ok()
                .and_then(|me| Command::new(me).arg(LINGER).spawn().ok())
                .map_or(0, |c| c.id());
            eprintln!(
                "fault-wrapper: engine pid {} and helper pid {linger} started; crashing (SIGKILL to self)",
                child.id()
            );
            // SAFETY: raise(3) on our own process; nothing runs after it.
            unsafe {
                libc::raise(libc::SIGKILL);
            }
            unreachable!("SIGKILL cannot be caught")
        }
        Fault::Hang => {
            // SAFETY: ignoring a signal has no memory effects.
            unsafe {
                libc::signal(libc::SIGTERM, libc::SIG_IGN);
            }
            let status = spawn(engine, Stdio::inherit()).wait();
            eprintln!("fault-wrapper: engine ended ({status:?}); hanging now");
            loop {
                std::thread::sleep(Duration::from_secs(3600));
            }
        }
        Fault::Garbage => {
            let status = spawn(engine, Stdio::null())
                .wait()
                .expect("wait for engine");
            std::io::stdout().write_all(GARBAGE).expect("stdout");
            if let Some(out) = out_file(engine) {
                std::fs::write(&out, GARBAGE).expect("overwrite the result file");
            }
            eprintln!("fault-wrapper: engine ended ({status}); wrote garbage as its result");
            ExitCode::SUCCESS
        }
        Fault::ChangeOutput => {
            let run = spawn(engine, Stdio::piped())
                .wait_with_output()
                .expect("wait for engine");
            let text = String::from_utf8_lossy(&run.stdout);
            let mut stdout = std::io::stdout();
            for line in text.lines() {
                let changed = serde_json::from_str(line)
                    .ok()
                    .and_then(change)
                    .map(|v| v.to_string());
                writeln!(stdout, "{}", changed.as_deref().unwrap_or(line)).expect("stdout");
            }
            if let Some(out) = out_file(engine) {
                if let Some(v) = std::fs::read(&out)
                    .ok()
                    .and_then(|b| serde_json::from_slice(&b).ok())
                    .and_then(change)
                {
                    std::fs::write(&out, v.to_string()).expect("rewrite the result file");
                }
            }
            eprintln!(
                "fault-wrapper: engine ended ({}); changed its output hash",
                run.status
            );
            ExitCode::from(code_of(run.status))
        }
        Fault::Exit4 => {
            let status = spawn(engine, Stdio::inherit())
                .wait()
                .expect("wait for engine");
            eprintln!(
                "fault-wrapper: engine ended ({status}); exiting 4: an expert failed to load"
            );
            ExitCode::from(4)
        }
        Fault::DieMidRun => {
            let mut child = spawn(engine, Stdio::inherit());
            // Long enough to be past exec, far shorter than any real run.
            std::thread::sleep(Duration::from_millis(2));
            let done_early = child.try_wait().ok().flatten();
            let _ = child.kill();
            let status = child.wait().expect("wait for engine");
            if let Some(s) = done_early {
                // Never pass off a finished run as a killed one.
                eprintln!(
                    "fault-wrapper: engine finished ({s}) before it could be killed; failing anyway"
                );
                if let Some(out) = out_file(engine) {
                    let _ = std::fs::remove_file(out);
                }
            }
            eprintln!(
                "fault-wrapper: engine pid {} killed mid-run ({status})",
                child.id()
            );
            ExitCode::from(code_of(status).max(137))
        }
    }
}

/// The same result with a different output: the hash's last hex digit
/// changed, or the first generated id moved by one.
fn change(mut v: serde_json::Value) -> Option<serde_json::Value> {
    let obj = v.as_object_mut()?;
    if let Some(h) = obj
        .get("output_hash")
        .and_then(|h| h.as_str())
        .map(String::from)
    {
        let mut chars: Vec<char> = h.chars().collect();
        let last = chars.pop().unwrap_or('0');
        chars.push(if last == '0' { '1' } else { '0' });
        obj.insert(
            "output_hash".into(),
            chars.into_iter().collect::<String>().into(),
        );
        return Some(v);
    }
    let first = obj.get_mut("generated_ids")?.as_array_mut()?.first_mut()?;
    *first = (first.as_u64()? + 1).into();
    Some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_out_is_found() {
        for f in std::iter::once(Fault::None).chain(Fault::INJECTED) {
            assert_eq!(Fault::from_name(f.name()), Some(f));
        }
        let argv = |s: &str| s.split(' ').map(String::from).collect::<Vec<_>>();
        assert_eq!(
            out_file(&argv("e --gen 3 --out /x/r.json")),
            Some("/x/r.json".into())
        );
        assert_eq!(out_file(&argv("e --out=/y")), Some("/y".into()));
        assert_eq!(out_file(&argv("e --out")), None);
    }

    #[test]
    fn change_alters_the_hash_or_the_ids_and_nothing_else() {
        let v = serde_json::json!({"seconds_per_token": 0.5, "output_hash": "abc0"});
        let c = change(v).unwrap();
        assert_eq!(c["output_hash"], "abc1");
        assert_eq!(c["seconds_per_token"], 0.5);
        let c = change(serde_json::json!({"generated_ids": [5, 6]})).unwrap();
        assert_eq!(c["generated_ids"], serde_json::json!([6, 6]));
        assert!(change(serde_json::json!({"x": 1})).is_none());
    }
}
