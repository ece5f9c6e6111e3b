//! `orchestrator check`: validates the config, the menu and the live profile
//! (fatal, exit 2) and probes each configured endpoint (informative only).

use std::path::Path;
use std::time::Duration;

use anyhow::Context;

use crate::config::Config;
use crate::measure::pressure::{self, Pressure};
use crate::menu::Menu;
use crate::profile::Profile;

pub fn run(config_path: &Path) -> anyhow::Result<()> {
    let config = Config::load(config_path)?;
    println!("config   {}: ok", config.path.display());

    let menu = crate::support::stack_menu(&config, &Menu::load(&config.menu_dir)?)?;
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
    } else {
        println!(
            "profile  {}: not created yet (on the embedded default `orchestrator run` creates it; \
             for a real stack write it from examples/)",
            live.display()
        );
    }

    println!(
        "ledger   {}: {}",
        config.ledger_path.display(),
        if config.ledger_path.exists() {
            "exists"
        } else {
            "not created yet (the first command that writes creates it)"
        }
    );

    if let Some(bench) = &config.stack.bench {
        let program = bench.argv.args[0].to_string();
        println!("bench    {}", describe_program(&program, &config.base_dir));
    }
    if let Some(shadow) = &config.stack.shadow {
        let program = shadow.argv.args[0].to_string();
        println!("shadow   {}", describe_program(&program, &config.base_dir));
    }
    println!(
        "machine  {}",
        describe_machine(&pressure::current(), &config)
    );
    probe_endpoints(&config)
}

/// The machine's pressure and load now, against the limits the judge uses.
fn describe_machine(p: &Pressure, config: &Config) -> String {
    let share = |v: Option<f64>| match v {
        Some(v) => format!("{:.0}%", 100.0 * v),
        None => "n/a".into(),
    };
    let load = p
        .load1
        .map(|l| format!("load average {l:.2}"))
        .unwrap_or_else(|| "load average unknown".into());
    if !p.available() {
        return format!(
            "{load}; /proc/pressure is missing (kernel without PSI): runs are not checked for interference"
        );
    }
    let limit = config.measure.max_pressure.get();
    let worst = p.cpu.unwrap_or(0.0).max(p.memory.unwrap_or(0.0));
    let verdict = if worst > limit {
        format!(
            "ABOVE max_pressure {:.0}%: blocks measured now would be re-run; stop the competing work",
            100.0 * limit
        )
    } else {
        format!("under max_pressure {:.0}%", 100.0 * limit)
    };
    format!(
        "{load}; stalled in the last 10 s: cpu {}, memory {}, io {} ({verdict})",
        share(p.cpu),
        share(p.memory),
        share(p.io)
    )
}

/// Whether a command's program can be found, as the child would look for it.
fn describe_program(program: &str, base_dir: &Path) -> String {
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
    match found {
        Some(p) => format!("{program}: found ({})", p.display()),
        None => format!(
            "{program}: NOT FOUND (relative programs resolve against {}; build it or fix the argv)",
            base_dir.display()
        ),
    }
}

fn probe_endpoints(config: &Config) -> anyhow::Result<()> {
    let client = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(2))
        .timeout(Duration::from_secs(5))
        .build()
        .context("building the HTTP client")?;
    let mut targets: Vec<(&str, String)> = Vec::new();
    if let Some(s) = &config.stack.surface {
        targets.push(("surface", join(&s.base_url, "v1/models")));
    }
    if let Some(url) = config.stack.metrics.as_ref().and_then(|m| m.url.as_ref()) {
        targets.push(("metrics", url.to_string()));
    }
    if !config.model.name.is_empty() {
        targets.push(("model", join(&config.model.base_url, "models")));
    }
    let rt = super::runtime()?;
    for (what, url) in targets {
        let answer = rt.block_on(async {
            match client.get(&url).send().await {
                Ok(resp) => format!("answers ({})", resp.status()),
                Err(e) if e.is_connect() => {
                    "no answer (connection refused: is the stack running?)".to_string()
                }
                Err(e) if e.is_timeout() => "no answer (timed out)".to_string(),
                Err(e) => format!("no answer ({e})"),
            }
        });
        println!("{what:<8} {url}: {answer}");
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
        let d = describe_program("target/release/nope", Path::new("/srv"));
        assert!(d.contains("NOT FOUND") && d.contains("/srv"), "{d}");
        assert!(describe_program("sh", Path::new("/")).contains("found ("));
    }

    #[test]
    fn the_machine_line_names_pressure_against_the_limit() {
        let config = Config::load(Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/config.toml"
        )))
        .unwrap();
        let busy = Pressure {
            cpu: Some(0.99),
            memory: Some(0.0),
            io: Some(0.1),
            load1: Some(15.2),
        };
        let line = describe_machine(&busy, &config);
        assert!(
            line.contains("load average 15.20") && line.contains("cpu 99%"),
            "{line}"
        );
        assert!(line.contains("ABOVE max_pressure"), "{line}");
        let quiet = Pressure {
            cpu: Some(0.01),
            ..busy
        };
        assert!(describe_machine(&quiet, &config).contains("under max_pressure"));
        let none = Pressure {
            load1: Some(0.5),
            ..Pressure::default()
        };
        assert!(describe_machine(&none, &config).contains("/proc/pressure is missing"));
    }

    #[test]
    fn join_handles_trailing_slashes() {
        let u = reqwest::Url::parse("http://h:1/v1/").unwrap();
        assert_eq!(join(&u, "models"), "http://h:1/v1/models");
    }
}
