//! The command line that runs the stack with a profile, rendered from the
//! config's own argv templates, for the person who restarts the stack after
//! approving a stage (the orchestrator never restarts it): the serve command
//! of a served stack (its `[stack.shadow]` argv on the live port), else the
//! bench command of a command-line engine.

use std::path::{Path, PathBuf};

use crate::config::Config;
use crate::process::template::{ArgvTemplate, RenderContext};
use crate::profile::Profile;

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
