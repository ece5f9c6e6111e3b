//! `fault-wrapper`: a test-tree program that starts the real engine and then
//! misbehaves on purpose, so the fault matrix and the soak benchmark can drive
//! the real orchestrator through every way a bench run can go wrong.
//!
//! ```text
//! fault-wrapper [--log FILE] --fault KIND -- PROGRAM ARGS...
//! fault-wrapper [--log FILE] --random RATE --seed N --state FILE -- PROGRAM ARGS...
//! fault-wrapper [--log FILE] --queue FILE -- PROGRAM ARGS...
//! ```
//!
//! KIND is one of [`Fault`]'s names. With `none` the wrapper `exec`s the
//! engine, so exit code, stdout and result file are the engine's own. The
//! `--queue FILE` pops one kind per invocation from FILE (a test feeds a
//! running daemon faults one at a time). The chosen kind is always printed on stderr (`fault-wrapper: fault=KIND`);
//! `--log FILE` also appends one JSON line per invocation with the kind and
//! the engine argv, for tests that inspect what reached a command line.

mod args;
mod fault;
mod pick;

use std::process::ExitCode;

fn main() -> ExitCode {
    if std::env::args().nth(1).as_deref() == Some(fault::LINGER) {
        fault::linger();
    }
    let parsed = match args::parse(std::env::args().skip(1)) {
        Ok(p) => p,
        Err(msg) => {
            eprintln!("fault-wrapper: {msg}\n{}", args::USAGE);
            return ExitCode::from(2);
        }
    };
    let (fault, invocation) = match &parsed.choice {
        args::Choice::Fixed(f) => (*f, None),
        args::Choice::Random { rate, seed, state } => match pick::next(state, *seed, *rate) {
            Ok((f, n)) => (f, Some(n)),
            Err(e) => {
                eprintln!(
                    "fault-wrapper: cannot use the state file {}: {e}",
                    state.display()
                );
                return ExitCode::from(1);
            }
        },
        args::Choice::Queue(queue) => match pick::pop(queue) {
            Ok(f) => (f, None),
            Err(e) => {
                eprintln!(
                    "fault-wrapper: cannot use the queue {}: {e}",
                    queue.display()
                );
                return ExitCode::from(1);
            }
        },
    };
    match invocation {
        Some(n) => eprintln!("fault-wrapper: invocation {n} fault={}", fault.name()),
        None => eprintln!("fault-wrapper: fault={}", fault.name()),
    }
    if let Some(log) = &parsed.log {
        if let Err(e) = args::append_log(log, fault, &parsed.engine) {
            eprintln!("fault-wrapper: cannot append to {}: {e}", log.display());
            return ExitCode::from(1);
        }
    }
    fault::inject(fault, &parsed.engine)
}
