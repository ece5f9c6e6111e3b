//! Which menu entries a stack can carry out.
//!
//! The menu is fixed, but not every stack has every lever: llama.cpp's
//! `llama-server` has no expert pin list and no far tier, the kimi-k3-in-c
//! CLI no pin list. A config says so in `[stack] unsupported`; those entries
//! leave the schema, the prompt and the bandit's grid, and a proposal of one
//! is refused by name ([`crate::menu::Rejection::Unsupported`]).
//!
//! The list is checked against the commands, so it cannot lie: an entry left
//! supported must have every knob it touches reach the stack through the
//! command that measures its candidates (or the whole profile through
//! `{profile}`). Otherwise the candidate would run the very same server as
//! the baseline and every verdict on it would be an A/A dressed up as an
//! experiment. Such a config is refused at load (`orchestrator check` and
//! `orchestrator run`, exit 2), naming the entry, the knobs and both fixes.

use crate::config::Config;
use crate::menu::{Menu, MenuId};
use crate::process::template::{ArgvTemplate, Special};
use crate::profile::Knob;
use crate::vocab::Method;

/// A supported menu entry the stack's commands cannot carry out.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SupportError {
    #[error(
        "{config}: menu entry {id} changes {knobs}, which [{table}] argv never passes to the stack, so its candidate would run exactly like the baseline. \
         Pass them in the argv (e.g. an [[{table}.optional]] group) or add \"{id}\" to [stack] unsupported"
    )]
    Unreachable {
        config: String,
        id: MenuId,
        knobs: String,
        table: &'static str,
    },
    #[error(
        "{config}: menu entry {id} is measured with the {method} protocol but the config has neither [stack.bench] nor [stack.shadow] to run a candidate. \
         Add one, or add \"{id}\" to [stack] unsupported"
    )]
    Unmeasurable {
        config: String,
        id: MenuId,
        method: Method,
    },
}

/// The menu this stack offers: `menu` without `[stack] unsupported`, after
/// checking that every entry left on it reaches the stack, with the
/// rationale bounded as `[model] rationale_max_chars` says.
pub fn stack_menu(config: &Config, menu: &Menu) -> Result<Menu, SupportError> {
    let unsupported = &config.stack.unsupported;
    for entry in menu.entries() {
        if entry.id == MenuId::Remeasure || unsupported.contains(&entry.id) {
            continue;
        }
        let Some((argv, table)) = candidate_command(config, entry.method) else {
            return Err(SupportError::Unmeasurable {
                config: config.path.display().to_string(),
                id: entry.id,
                method: entry.method,
            });
        };
        let missing = unreachable_knobs(argv, &entry.touches);
        if !missing.is_empty() {
            return Err(SupportError::Unreachable {
                config: config.path.display().to_string(),
                id: entry.id,
                knobs: missing
                    .iter()
                    .map(|k| k.name())
                    .collect::<Vec<_>>()
                    .join(", "),
                table,
            });
        }
    }
    Ok(menu
        .without(unsupported, &config.stack.name)
        .with_rationale_max_chars(config.model.rationale_max_chars))
}

/// The command a candidate of `method` runs, as the cycle chooses it
/// ([`crate::measure::by_protocol::Scorers::for_candidate`]): the bench for bench entries
/// when there is one, else a shadow, and the other way round for surface.
fn candidate_command(config: &Config, method: Method) -> Option<(&ArgvTemplate, &'static str)> {
    let bench = config
        .stack
        .bench
        .as_ref()
        .map(|b| (&b.argv, "stack.bench"));
    // A shadow is measured through the surface, so it needs one too.
    let shadow = config
        .stack
        .shadow
        .as_ref()
        .filter(|_| config.stack.surface.is_some())
        .map(|s| (&s.argv, "stack.shadow"));
    match method {
        Method::Bench => bench.or(shadow),
        Method::Surface => shadow.or(bench),
    }
}

/// The knobs of `touches` that `argv` never hands to the stack.
fn unreachable_knobs(argv: &ArgvTemplate, touches: &[Knob]) -> Vec<Knob> {
    if argv.uses(Special::Profile) {
        return Vec::new();
    }
    let passed = argv.knobs();
    touches
        .iter()
        .copied()
        .filter(|k| !passed.contains(k))
        .collect()
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn menu() -> Menu {
        Menu::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("experiments")).unwrap()
    }

    fn config(stack_extra: &str, bench_argv: &str) -> Config {
        let text = format!(
            r#"
[stack]
name = "s"
live_profile = "live.toml"
{stack_extra}
[stack.bench]
argv = [{bench_argv}]
[[stack.bench.optional]]
when = "speculative.draft_len"
args = ["--spec", "{{speculative.draft_len}}"]
[cycle]
proposer = "bandit"
"#
        );
        Config::parse(&text, Path::new("/etc/o/config.toml")).unwrap()
    }

    const CLI: &str = r#""k3", "--cache-gb", "{memory.cache_gb}", "--trunk-gb", "{memory.trunk_gb}", "--out", "{out}""#;

    #[test]
    fn a_lever_the_command_cannot_pull_is_refused_naming_both_fixes() {
        let err = stack_menu(&config("", CLI), &menu()).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("rerank_pins"), "{msg}");
        assert!(msg.contains("pins.file, pins.count"), "{msg}");
        assert!(msg.contains("[stack] unsupported"), "{msg}");
        assert!(msg.contains("[[stack.bench.optional]]"), "{msg}");
    }

    #[test]
    fn declared_unsupported_entries_leave_the_menu_and_are_refused_by_name() {
        let c = config(r#"unsupported = ["rerank_pins", "deepen_warm_set"]"#, CLI);
        let m = stack_menu(&c, &menu()).unwrap();
        let ids: Vec<MenuId> = m.entries().iter().map(|e| e.id).collect();
        assert_eq!(
            ids,
            [
                MenuId::StageSpeculative,
                MenuId::RebalanceTrunkCache,
                MenuId::Remeasure
            ]
        );
        let schema = m.json_schema().to_string();
        assert!(!schema.contains("rerank_pins"), "{schema}");
        let answer = r#"{"experiment":"rerank_pins","params":{"pin_count":16},"rationale":"x"}"#;
        let rejection = m.validate(answer).unwrap_err();
        assert_eq!(rejection.kind(), "unsupported");
        let msg = rejection.to_string();
        assert!(msg.contains("stack s does not support"), "{msg}");
        assert!(msg.contains("stage_speculative"), "{msg}");
        // Off-menu answers list only what this stack offers.
        let off = m
            .validate(r#"{"experiment":"x","params":{},"rationale":""}"#)
            .unwrap_err()
            .to_string();
        assert!(!off.contains("deepen_warm_set"), "{off}");
    }

    #[test]
    fn the_whole_profile_reaches_the_stack_through_profile() {
        let c = config(
            "",
            r#""tinyk3", "serve", "--profile", "{profile}", "--out", "{out}""#,
        );
        assert_eq!(stack_menu(&c, &menu()).unwrap().entries().len(), 5);
    }

    #[test]
    fn remeasure_cannot_be_declared_unsupported() {
        let text = r#"
[stack]
name = "s"
live_profile = "live.toml"
unsupported = ["remeasure"]
[stack.bench]
argv = ["x", "--out", "{out}"]
[cycle]
proposer = "bandit"
"#;
        let err = Config::parse(text, Path::new("c.toml")).unwrap_err();
        assert!(err.to_string().contains("remeasure"), "{err}");
        let err = Config::parse(
            &text.replace("\"remeasure\"", "\"rerank_pin\""),
            Path::new("c.toml"),
        )
        .unwrap_err();
        assert!(err.to_string().contains("is not a menu id"), "{err}");
    }
}
