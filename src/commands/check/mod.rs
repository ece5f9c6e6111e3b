//! `orchestrator check`: validates the config, the menu and the live profile
//! (a problem there is a configuration error, exit 2), then checks what a
//! run needs from this machine: the bench and shadow programs, the files
//! their command lines name, the memory pre-flight for the live profile and
//! the endpoints, and the expert cache against the checkpoint's slot size
//! and top-k (`slots`), and the engine time the daemon's runs took (`engine`:
//! per day and use, and the budget window's share). Each of those that fails is printed `FAILED` with its fix,
//! and the command exits 1. On the embedded default, `orchestrator run`
//! starts the stack and makes its checkpoint, so endpoints that do not
//! answer and files not made yet are expected there and only reported.

mod engine;
mod postgres;
mod slots;

use std::path::Path;
use std::time::Duration;

use anyhow::Context;

use crate::config::Config;
use crate::measure::preflight::{self, GB};
use crate::measure::pressure::{self, Pressure};
use crate::menu::Menu;
use crate::process::template::ArgvTemplate;
use crate::profile::Profile;

/// Checks that failed (exit 1): each was printed with its fix.
#[derive(Debug, thiserror::Error)]
#[error("{} check(s) failed: {}; each is marked FAILED above with its fix", .0.len(), .0.join(", "))]
pub struct ChecksFailed(pub Vec<String>);

/// The failing checks so far, by name.
#[derive(Debug, Default)]
struct Findings(Vec<String>, bool);

impl Findings {
    /// Prints a failing check; `text` says what is wrong and how to fix it.
    fn fail(&mut self, label: &str, name: impl Into<String>, text: &str) {
        println!("{label:<8} FAILED {text}");
        self.0.push(name.into());
    }
}

pub fn run(config_path: &Path) -> anyhow::Result<()> {
    let config = Config::load(config_path)?;
    println!("config   {}: ok", config.path.display());
    let mut found = Findings::default();

    let menu = crate::stack_support::stack_menu(&config, &Menu::load(&config.menu_dir)?)?;
    let ids: Vec<&str> = menu.entries().iter().map(|e| e.id.as_str()).collect();
    println!(
        "menu     {}: {} entries ({})",
        config.menu_dir.display(),
        ids.len(),
        ids.join(", ")
    );
    if !menu.unsupported().is_empty() {
        let off: Vec<&str> = menu.unsupported().iter().map(|m| m.as_str()).collect();
        println!(
            "         not supported by stack {}: {} ([stack] unsupported; refused if proposed)",
            config.stack.name,
            off.join(", ")
        );
    }

    let live = &config.stack.live_profile;
    let mut profile_for_memory = None;
    if live.exists() {
        let profile = Profile::load(live)?;
        println!(
            "profile  {}: ok, digest {}",
            live.display(),
            profile.digest().short()
        );
        if let Some(pins) = profile.pins_path(live)
            && !pins.exists()
        {
            println!(
                "         warning: its pin list {} does not exist",
                pins.display()
            );
        }
        profile_for_memory = Some((profile, live.clone()));
    } else if let Some(e) = &config.embedded {
        println!(
            "profile  {}: not created yet (`orchestrator run` copies it from {})",
            live.display(),
            e.starting_profile.display()
        );
        // The embedded default's first live profile is its starting one.
        if let Ok(p) = Profile::load(&e.starting_profile) {
            profile_for_memory = Some((p, e.starting_profile.clone()));
        }
    } else {
        // Every cycle of a run would fail on it.
        found.fail(
            "profile",
            "live profile",
            &format!(
                "{} does not exist: write the settings your stack runs with there (start from \
                 examples/profiles/), or correct [stack] live_profile in {}",
                live.display(),
                config.path.display()
            ),
        );
    }
    if let Some((profile, path)) = &profile_for_memory
        && (config.stack.bench.is_some() || config.stack.shadow.is_some())
    {
        check_memory(&config, profile, path, &mut found);
    }
    slots::check(
        &config,
        profile_for_memory
            .as_ref()
            .map(|(p, path)| (p, path.as_path())),
        &mut found,
    );

    if let Some(pg) = &config.ledger_postgres {
        println!(
            "ledger   {} (PostgreSQL; password from {})",
            pg.url(),
            pg.password_env()
                .map_or("no variable: none sent".into(), |v| format!("${v}"))
        );
        postgres::check(&config, pg, &mut found)?;
    } else {
        println!(
            "ledger   {}: {}",
            config.ledger_path.display(),
            if config.ledger_path.exists() {
                "exists"
            } else {
                "not created yet (`orchestrator run` creates it)"
            }
        );
        if config.ledger_path.exists() {
            sqlite_engine_time(&config)?;
        }
    }

    if let Some(bench) = &config.stack.bench {
        check_command(
            &config,
            "bench",
            "[stack.bench]",
            &bench.argv,
            &bench.create_dirs,
            &mut found,
        );
    }
    if let Some(shadow) = &config.stack.shadow {
        check_command(
            &config,
            "shadow",
            "[stack.shadow]",
            &shadow.argv,
            &[],
            &mut found,
        );
    }
    println!(
        "machine  {}",
        describe_machine(&pressure::current(), &config)
    );
    probe_endpoints(&config, &mut found)?;
    if found.0.is_empty() {
        Ok(())
    } else if found.1 {
        // A variable the config names is unset: a configuration problem,
        // exit 2, as for every other command.
        Err(super::UsageError(ChecksFailed(found.0).to_string()).into())
    } else {
        Err(ChecksFailed(found.0).into())
    }
}

/// The engine-time lines of a SQLite ledger, read without migrating it
/// (only when its schema is current); what cannot be read is said, not
/// failed: the ledger's own checks are `ledger --check`'s.
fn sqlite_engine_time(config: &Config) -> anyhow::Result<()> {
    let text = super::runtime()?.block_on(async {
        let ledger = crate::ledger::Ledger::open_unmigrated(&config.ledger_path).await?;
        let lines = match ledger.schema_state().await? {
            s if s.is_current() => engine::lines(config, &ledger, chrono::Utc::now()).await?,
            s => vec![format!(
                "engine   not read: the ledger's schema is {s:?}; `orchestrator run` migrates it"
            )],
        };
        ledger.close().await;
        Ok::<_, crate::ledger::LedgerError>(lines)
    });
    match text {
        Ok(lines) => lines.iter().for_each(|l| println!("{l}")),
        Err(e) => println!("engine   not read: {e}"),
    }
    Ok(())
}

/// The memory pre-flight every bench or shadow run passes, for `profile`
/// on this machine now: a profile it refuses would fail every run.
fn check_memory(config: &Config, profile: &Profile, path: &Path, found: &mut Findings) {
    let headroom = config.measure.memory_headroom_gb;
    match preflight::check(profile, headroom) {
        Ok(p) => println!(
            "memory   {} GB budget of {} + {headroom} GB headroom: ok ({:.2} GB available)",
            profile.memory.budget_gb,
            path.display(),
            p.available_bytes as f64 / GB
        ),
        Err(e) => found.fail(
            "memory",
            "memory pre-flight",
            &format!(
                "the pre-flight refuses every run of {} on this machine: {e}",
                path.display()
            ),
        ),
    }
}

/// The program of one command and the files its arguments name.
fn check_command(
    config: &Config,
    label: &str,
    section: &str,
    argv: &ArgvTemplate,
    created: &[std::path::PathBuf],
    found: &mut Findings,
) {
    let program = argv.args[0].to_string();
    match find_program(&program, &config.base_dir) {
        Ok(p) => println!("{label:<8} {program}: found ({})", p.display()),
        Err(why) => found.fail(
            label,
            format!("{label} program"),
            &format!(
                "{program}: {why}; {}, or fix the program in {section} argv",
                if config.embedded.is_some() {
                    "build it (`cargo build --release --workspace`)"
                } else {
                    "build or install it"
                }
            ),
        ),
    }
    for file in crate::process::argv_files::named_files(argv, &config.base_dir) {
        // Made before every run, so absent now is fine.
        if created.iter().any(|d| file.resolved.starts_with(d)) {
            continue;
        }
        if file.resolved.exists() {
            println!("         {}: exists", file.written);
        } else if config.embedded.is_some() {
            println!(
                "         {}: not there yet (on the embedded default `orchestrator run` makes \
                 the checkpoint and its directories)",
                file.written
            );
        } else {
            found.fail(
                "",
                format!("{label} file {}", file.written),
                &format!(
                    "{} (in {section} {}) does not exist (resolved against {}): put the file \
                     there, or correct the path in {section} {}{}",
                    file.written,
                    file.place,
                    config.base_dir.display(),
                    file.place,
                    if label == "bench" {
                        "; a directory the engine writes into belongs in [stack.bench] create_dirs"
                    } else {
                        ""
                    }
                ),
            );
        }
    }
}

/// The machine's pressure and load now, and how the judge will weigh them.
fn describe_machine(p: &Pressure, config: &Config) -> String {
    let share = |v: Option<f64>| match v {
        Some(v) => format!("{:.0}%", 100.0 * v),
        None => "n/a".into(),
    };
    let load = p
        .load1
        .map(|l| format!("load average {l:.2}"))
        .unwrap_or_else(|| "load average unknown".into());
    let Some(contention) = p.contention else {
        return format!(
            "{load}; /proc/loadavg's runnable count is unreadable: runs are not checked for interference"
        );
    };
    let rule = match config.policy.max_contention_rise {
        Some(rise) => format!(
            "a steady load is measured into the noise floor; a run more than {:.0}% more contended than the floor's runs has its block re-run",
            100.0 * rise
        ),
        None => "runs are not checked for interference".into(),
    };
    let verdict = format!("{contention:.1} runnable tasks per core now; {rule}");
    if !p.available() {
        return format!("{load}; {verdict}; /proc/pressure is missing (kernel without PSI)");
    }
    format!(
        "{load}; stalled in the last 10 s: cpu {}, memory {}, io {} ({verdict})",
        share(p.cpu),
        share(p.memory),
        share(p.io)
    )
}

/// Where a command's program is, as the child would look for it, or why
/// it cannot be found.
fn find_program(program: &str, base_dir: &Path) -> Result<std::path::PathBuf, String> {
    let found = if program.contains('/') {
        let p = base_dir.join(program);
        p.is_file().then_some(p)
    } else {
        std::env::var_os("PATH").and_then(|paths| {
            std::env::split_paths(&paths)
                .map(|d| d.join(program))
                .find(|p| p.is_file())
        })
    };
    found.ok_or_else(|| {
        if program.contains('/') {
            format!(
                "NOT FOUND (a relative program resolves against {})",
                base_dir.display()
            )
        } else {
            "NOT FOUND on PATH".to_string()
        }
    })
}

/// Probes each configured endpoint. One that does not answer fails the
/// check, except on the embedded default, where `orchestrator run` starts
/// the stack that serves them.
fn probe_endpoints(config: &Config, found: &mut Findings) -> anyhow::Result<()> {
    let client = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(2))
        .timeout(Duration::from_secs(5))
        .build()
        .context("building the HTTP client")?;
    let mut targets: Vec<(&str, String, &str)> = Vec::new();
    if let Some(s) = &config.stack.surface {
        targets.push((
            "surface",
            join(&s.base_url, "v1/models"),
            "[stack.surface] base_url",
        ));
    }
    if let Some(url) = config.stack.metrics.as_ref().and_then(|m| m.url.as_ref()) {
        targets.push(("metrics", url.to_string(), "[stack.metrics] url"));
    }
    if !config.model.name.is_empty() {
        targets.push((
            "model",
            join(&config.model.base_url, "models"),
            "[model] base_url",
        ));
    }
    let rt = super::runtime()?;
    for (what, url, key) in targets {
        let answer = rt.block_on(async {
            match client.get(&url).send().await {
                Ok(resp) => Ok(format!("answers ({})", resp.status())),
                Err(e) if e.is_connect() => Err("connection refused".to_string()),
                Err(e) if e.is_timeout() => Err("timed out".to_string()),
                Err(e) => Err(e.to_string()),
            }
        });
        match answer {
            Ok(answer) => println!("{what:<8} {url}: {answer}"),
            Err(why) if config.embedded.is_some() => println!(
                "{what:<8} {url}: no answer ({why}); expected before `orchestrator run`, \
                 which starts the embedded stack"
            ),
            Err(why) => found.fail(
                what,
                format!("{what} endpoint"),
                &format!(
                    "{url}: no answer ({why}): start the stack, or correct {key} in {}",
                    config.path.display()
                ),
            ),
        }
    }
    Ok(())
}

/// `base` + `/` + `tail`, whether or not `base` ends with a slash.
fn join(base: &reqwest::Url, tail: &str) -> String {
    format!("{}/{tail}", base.as_str().trim_end_matches('/'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_relative_program_says_where_it_looked() {
        let d = find_program("target/release/nope", Path::new("/srv")).unwrap_err();
        assert!(d.contains("NOT FOUND") && d.contains("/srv"), "{d}");
        assert!(find_program("sh", Path::new("/")).is_ok());
        let d = find_program("no-such-program-here", Path::new("/")).unwrap_err();
        assert!(d.contains("PATH"), "{d}");
    }

    #[test]
    fn the_machine_line_names_contention_and_the_floor_relative_rule() {
        let config = Config::load(Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/config.toml"
        )))
        .unwrap();
        let busy = Pressure {
            cpu: Some(0.99),
            memory: Some(0.0),
            io: Some(0.1),
            contention: Some(7.5),
            load1: Some(15.2),
        };
        let line = describe_machine(&busy, &config);
        assert!(
            line.contains("load average 15.20") && line.contains("cpu 99%"),
            "{line}"
        );
        assert!(
            line.contains("7.5 runnable tasks per core now")
                && line.contains("more than 25% more contended than the floor's runs"),
            "{line}"
        );
        let no_psi = Pressure {
            cpu: None,
            memory: None,
            io: None,
            ..busy
        };
        assert!(describe_machine(&no_psi, &config).contains("/proc/pressure is missing"));
        let none = Pressure {
            load1: Some(0.5),
            ..Pressure::default()
        };
        assert!(describe_machine(&none, &config).contains("runs are not checked for interference"));
    }

    #[test]
    fn join_handles_trailing_slashes() {
        let u = reqwest::Url::parse("http://h:1/v1/").unwrap();
        assert_eq!(join(&u, "models"), "http://h:1/v1/models");
    }
}
