//! Restarting the stack on a written profile. Without `--restart`: the
//! command line that runs the stack with it, rendered from the config's own
//! argv templates, for the person who restarts it (the serve command of a
//! served stack, its `[stack.shadow]` argv on the live port, else the bench
//! command of a command-line engine). With `stage approve|revert
//! --restart`: the configured `[stack] restart` command, run through
//! [`crate::process::group`] (never a shell), then a bounded wait for the
//! live server's health path and, where the stack reports it, the live
//! profile ([`super::running`]). The daemon never calls [`restart`].

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::running::Running;
use crate::config::Config;
use crate::process::cancel::Cancel;
use crate::process::group::{self, Spec};
use crate::process::template::{ArgvTemplate, RenderContext};
use crate::profile::Profile;

/// Pause between two probes of the live server's health path.
const PROBE_EVERY: Duration = Duration::from_millis(250);

/// Why `--restart` did not bring the stack back on the written profile.
#[derive(Debug, thiserror::Error)]
pub enum RestartError {
    #[error(
        "{} has no [stack] restart, so --restart has nothing to run: add the command that restarts \
         the stack (an argument list such as [\"systemctl\", \"restart\", \"my-stack\"]), or leave \
         out --restart and restart it yourself",
        .0.display()
    )]
    NotConfigured(PathBuf),
    #[error(
        "the embedded stack is a child of `orchestrator run`, which starts it on the live profile: \
         restart `orchestrator run` instead of passing --restart"
    )]
    Embedded,
    #[error("the restart command `{command}` {why}")]
    Failed { command: String, why: String },
    #[error(
        "the restart command `{command}` ran, but the live server's {url} did not answer 200 on \
         the live profile within {secs}s (last: {last}); check the stack's own logs"
    )]
    Unhealthy {
        command: String,
        url: String,
        secs: u64,
        last: String,
    },
}

impl RestartError {
    /// A configuration or usage problem (exit 2), not a failed restart.
    pub fn is_usage(&self) -> bool {
        matches!(
            self,
            RestartError::NotConfigured(_) | RestartError::Embedded
        )
    }
}

/// A restart that brought the live server back.
#[derive(Debug, Clone)]
pub struct RestartDone {
    /// The command as run, for people.
    pub command: String,
    /// The health URL that answered, when the stack has a live server.
    pub healthy: Option<String>,
    /// The server reported the live profile file's sha256 too.
    pub reports_profile: bool,
    pub took: Duration,
}

/// Runs `[stack] restart` for `profile` (just written to the live profile)
/// and waits, bounded by `restart_timeout_s`, until the live server's
/// health path answers 200. Whatever the command leaves running in its own
/// process group is killed when it exits, as for every child: a restart
/// command hands the server to its supervisor (`systemctl restart`), it is
/// not the server.
pub async fn restart(config: &Config, profile: &Profile) -> Result<RestartDone, RestartError> {
    let restart = restart_command(config)?;
    let live = &config.stack.live_profile;
    let ctx = RenderContext {
        out: None,
        profile: Some(live.clone()),
        port: None,
    };
    let argv = restart
        .argv
        .render(profile, live.parent().unwrap_or(Path::new(".")), &ctx);
    let command = argv.iter().map(|a| quote(a)).collect::<Vec<_>>().join(" ");
    let started = Instant::now();
    let spec = Spec {
        program: argv[0].clone(),
        args: argv[1..].to_vec(),
        env: Default::default(),
        cwd: config.base_dir.clone(),
        timeout: restart.timeout.duration(),
        capture_stdout: false,
        cgroup_procs: None,
    };
    let failed = |why: String| RestartError::Failed {
        command: command.clone(),
        why,
    };
    let exit = group::run(&spec, &Cancel::never())
        .await
        .map_err(|e| failed(format!("did not complete: {e}")))?;
    if exit.code != Some(0) {
        let how = match (exit.code, exit.signal) {
            (Some(code), _) => format!("exited {code}"),
            (None, Some(sig)) => format!("was killed by signal {sig}"),
            (None, None) => "ended without an exit status".to_string(),
        };
        return Err(failed(format!(
            "{how}: {}",
            group::last_line(&exit.stderr_tail)
        )));
    }
    let healthy = match super::running::health_url(config) {
        Some(url) => Some(wait_healthy(config, &command, url, restart.timeout.duration()).await?),
        None => None,
    };
    let reports_profile = healthy.is_some()
        && config
            .stack
            .surface
            .as_ref()
            .is_some_and(|s| s.health_profile_sha256.is_some());
    Ok(RestartDone {
        command,
        healthy,
        reports_profile,
        took: started.elapsed(),
    })
}

/// The configured `[stack] restart`, or why `--restart` cannot be used
/// (checked before anything is written).
pub fn restart_command(config: &Config) -> Result<&crate::config::Restart, RestartError> {
    if config.embedded.is_some() {
        return Err(RestartError::Embedded);
    }
    config
        .stack
        .restart
        .as_ref()
        .ok_or_else(|| RestartError::NotConfigured(config.path.clone()))
}

/// Waits until the live server answers 200 on its health path and, where
/// the stack reports the profile it runs, reports the live profile file.
async fn wait_healthy(
    config: &Config,
    command: &str,
    url: reqwest::Url,
    within: Duration,
) -> Result<String, RestartError> {
    let client = super::running::probe_client();
    let reports = config
        .stack
        .surface
        .as_ref()
        .is_some_and(|s| s.health_profile_sha256.is_some());
    let deadline = Instant::now() + within;
    loop {
        let last = match client.get(url.clone()).send().await {
            Ok(r) if r.status().is_success() && !reports => return Ok(url.to_string()),
            Ok(r) if r.status().is_success() => {
                match super::running::running(config, &client).await {
                    Running::LiveProfile => return Ok(url.to_string()),
                    other => other.why_not().unwrap_or_default(),
                }
            }
            Ok(r) => format!("HTTP {}", r.status()),
            Err(e) => e.without_url().to_string(),
        };
        if Instant::now() >= deadline {
            return Err(RestartError::Unhealthy {
                command: command.to_string(),
                url: url.to_string(),
                secs: within.as_secs(),
                last,
            });
        }
        tokio::time::sleep(PROBE_EVERY).await;
    }
}

/// How to run the stack with `profile` once it is the live profile, as
/// lines to print, or `None` when the config has no command to show.
pub fn restart_lines(config: &Config, profile: &Profile) -> Option<Vec<String>> {
    let live = &config.stack.live_profile;
    if config.embedded.is_some() {
        return Some(vec![
            "the embedded stack reads the live profile when `orchestrator run` starts it: \
             restart `orchestrator run`"
                .to_string(),
        ]);
    }
    let (argv, env, what, ctx) = if let Some(shadow) = &config.stack.shadow {
        let port = config
            .stack
            .surface
            .as_ref()
            .and_then(|s| s.base_url.port_or_known_default());
        let ctx = RenderContext {
            out: None,
            profile: Some(live.clone()),
            port,
        };
        (&shadow.argv, &shadow.env, "the serving stack", ctx)
    } else if let Some(bench) = &config.stack.bench {
        let ctx = RenderContext {
            out: Some(PathBuf::from("out.json")),
            profile: Some(live.clone()),
            port: None,
        };
        (&bench.argv, &bench.env, "the engine", ctx)
    } else {
        return None;
    };
    Some(vec![
        format!("restart {what} with (the orchestrator restarts nothing):"),
        format!(
            "  {}",
            command_line(&config.base_dir, env, argv, profile, live, &ctx)
        ),
    ])
}

fn command_line(
    base_dir: &Path,
    env: &std::collections::BTreeMap<String, String>,
    argv: &ArgvTemplate,
    profile: &Profile,
    live: &Path,
    ctx: &RenderContext,
) -> String {
    let dir = live.parent().unwrap_or(Path::new("."));
    let mut words = vec![
        "cd".to_string(),
        quote(&base_dir.to_string_lossy()),
        "&&".to_string(),
    ];
    words.extend(env.iter().map(|(k, v)| format!("{k}={}", quote(v))));
    words.extend(argv.render(profile, dir, ctx).iter().map(|a| quote(a)));
    words.join(" ")
}

/// One word for a POSIX shell: as is when it holds only safe characters,
/// else in single quotes.
fn quote(word: &str) -> String {
    let safe = |c: char| c.is_ascii_alphanumeric() || "_-./:=,@%+".contains(c);
    if !word.is_empty() && word.chars().all(safe) {
        word.to_string()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_quoted_only_when_they_must_be() {
        assert_eq!(quote("--cache-gb"), "--cache-gb");
        assert_eq!(quote("/srv/k3 model"), "'/srv/k3 model'");
        assert_eq!(quote("it's"), r"'it'\''s'");
        assert_eq!(quote(""), "''");
    }

    #[test]
    fn the_kimi_example_prints_its_bench_flags_with_the_profile() {
        let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
        let config = Config::load(&repo.join("examples/kimi-k3-in-c.toml")).unwrap();
        let profile = Profile::load(&config.stack.live_profile).unwrap();
        let lines = restart_lines(&config, &profile).unwrap();
        let line = &lines[1];
        assert!(lines[0].starts_with("restart the engine with"), "{lines:?}");
        for part in [
            "OMP_WAIT_POLICY=passive bin/k3 /srv/k3model",
            "--cache-gb 24",
            "--trunk-gb 32",
            "--threads 8",
        ] {
            assert!(line.contains(part), "{part}: {line}");
        }
        assert!(
            !line.contains("--spec"),
            "draft_len 0 leaves --spec out: {line}"
        );
    }

    #[test]
    fn the_llama_server_example_prints_its_serve_command_on_the_live_port() {
        let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
        let config = Config::load(&repo.join("examples/llama-server.toml")).unwrap();
        let profile = Profile::load(&config.stack.live_profile).unwrap();
        let line = &restart_lines(&config, &profile).unwrap()[1];
        assert!(
            line.contains("llama-server -m /models/target.gguf --host 127.0.0.1 --port 8080"),
            "{line}"
        );
    }
}
