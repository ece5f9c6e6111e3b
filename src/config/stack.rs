//! `[stack]` and its sub-tables: the serving stack being tuned, how to
//! measure it (`bench`, `surface`, `shadow`) and where its metrics are.
//! Each table's `TryFrom` checks it and makes its paths absolute against the
//! config file's directory.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::Seconds;
use super::raw::{RawBench, RawMetrics, RawOptional, RawShadow, RawStack, RawSurface};
use super::url::http_url;
use crate::menu::MenuId;
use crate::process::template::{ArgvTemplate, Special, TemplateError};

/// A bound on `[stack] cache_spare_slots`: an engine wanting more than a
/// handful of slots beyond top-k is a misread setting, not an engine.
const MAX_CACHE_SPARE_SLOTS: u32 = 64;

/// The serving stack being tuned.
#[derive(Debug, Clone)]
pub struct Stack {
    /// Names the stack in the ledger (cycles, floors, reference hashes,
    /// stages): unique in a fleet sharing one database.
    pub name: String,
    /// `[stack] class`: identical hosts (one hardware model) share it.
    pub class: Option<String>,
    /// `[stack] class_confirm_wait_s`: how long a win of this stack is left
    /// to its classmates to confirm before its own daemon confirms it (zero:
    /// at once). While it waits, this stack's cycles refresh its noise floor.
    pub class_confirm_wait: std::time::Duration,
    pub live_profile: PathBuf,
    /// Scratch space for bench outputs and candidate profiles.
    pub work_dir: PathBuf,
    /// Bytes of one routed expert: converts pin counts and warm sets to RAM.
    pub expert_bytes: Option<u64>,
    /// Expert-cache slots the engine needs beyond top-k (`[stack]
    /// cache_spare_slots`): kimi-k3-in-c refuses a cache under top-k + 1, so
    /// one token's working set never evicts an expert still being multiplied.
    pub cache_spare_slots: u32,
    pub bench: Option<Bench>,
    pub surface: Option<Surface>,
    pub metrics: Option<Metrics>,
    pub shadow: Option<Shadow>,
    /// Menu entries this stack cannot carry out (`[stack] unsupported`):
    /// refused when proposed, never silently skipped (see [`crate::stack_support`]).
    pub unsupported: Vec<MenuId>,
    /// `[stack] restart`: what `stage approve|revert --restart` runs after
    /// writing the live profile; never run by the daemon.
    pub restart: Option<Restart>,
}

/// `[stack] restart` and `restart_timeout_s`.
#[derive(Debug, Clone)]
pub struct Restart {
    /// May name profile knobs and `{profile}` (the live profile's path).
    pub argv: ArgvTemplate,
    /// Bounds the command and then the wait for the live server's health
    /// path, each.
    pub timeout: Seconds,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BenchOutput {
    /// The JSON object is written to `{out}`.
    File,
    /// The JSON object is the last line of stdout that parses as JSON.
    Stdout,
}

#[derive(Debug, Clone)]
pub struct Bench {
    pub argv: ArgvTemplate,
    pub env: BTreeMap<String, String>,
    pub output: BenchOutput,
    /// Directories made before every run (absolute). Some engines write a
    /// dump only into a directory that already exists, and silently nothing
    /// otherwise (kimi-k3-in-c's `--dump-cache-trace DIR`).
    pub create_dirs: Vec<PathBuf>,
}

#[derive(Debug, Clone)]
pub struct Surface {
    pub base_url: reqwest::Url,
    pub prompts: Vec<String>,
    pub max_tokens: u32,
    /// Send `cache_prompt: false` (llama.cpp): cached prefixes change timing.
    pub send_cache_prompt_false: bool,
    /// The field of the live server's health answer (JSON) holding the
    /// sha256 of the profile file it started with (tinyk3 serve:
    /// `profile_sha256`): how the orchestrator knows the server runs the
    /// live profile. `None` for a stack that does not say (llama-server).
    pub health_profile_sha256: Option<String>,
}

#[derive(Debug, Clone)]
pub struct Metrics {
    /// The Prometheus endpoint; `None` for a stack without one (a bench-only
    /// CLI), which still has heat dumps to read.
    pub url: Option<reqwest::Url>,
    /// Our name → the stack's Prometheus series name.
    pub names: BTreeMap<String, String>,
    /// Where the stack's heat histogram can be read (a URL or a file).
    pub heat: Option<String>,
    pub heat_trace: Option<PathBuf>,
    /// POSTed before reading the trace, so the stack writes it out first.
    pub heat_flush: Option<reqwest::Url>,
    /// Fail the cycle when metrics cannot be read (else proceed without).
    pub required: bool,
}

#[derive(Debug, Clone)]
pub struct Shadow {
    pub argv: ArgvTemplate,
    pub env: BTreeMap<String, String>,
    pub health_path: String,
    pub start_timeout: Seconds,
    /// A candidate with `speculative.draft_len > 0` must show drafted tokens
    /// (llama.cpp's `timings.draft_n`, or `drafted_series` on the shadow's
    /// metrics); without them the run fails instead of measuring a plain
    /// server (llama-server keeps serving when the draft does not fit).
    pub require_drafts: bool,
    /// The shadow's Prometheus counter of drafted tokens, if it has one.
    pub drafted_series: Option<String>,
    /// Where the shadow serves its metrics. Default `/metrics`.
    pub metrics_path: String,
}

/// `[stack]`, with relative paths taken from the config's directory.
impl TryFrom<(RawStack, &Path)> for Stack {
    type Error = String;
    fn try_from((rs, base_dir): (RawStack, &Path)) -> Result<Stack, String> {
        if rs.expert_bytes == Some(0) {
            return Err("[stack] expert_bytes must be > 0 (bytes of one routed expert)".into());
        }
        if rs.cache_spare_slots > MAX_CACHE_SPARE_SLOTS {
            return Err(format!(
                "[stack] cache_spare_slots = {} is more than {MAX_CACHE_SPARE_SLOTS}: it counts the \
                 expert-cache slots the engine needs beyond top-k (kimi-k3-in-c: 1, most engines: 0)",
                rs.cache_spare_slots
            ));
        }
        if rs.name.trim().is_empty() {
            return Err("[stack] name must not be empty".into());
        }
        if rs.class.as_deref().is_some_and(|c| c.trim().is_empty()) {
            return Err(
                "[stack] class must not be empty: name the hardware model its hosts share, or leave it out"
                    .into(),
            );
        }
        if rs.class_confirm_wait_s > 0 && rs.class.is_none() {
            return Err(format!(
                "[stack] class_confirm_wait_s = {} leaves wins to classmates, but the stack names no \
                 [stack] class: name the hardware model its hosts share, or remove class_confirm_wait_s",
                rs.class_confirm_wait_s
            ));
        }
        let bench = rs
            .bench
            .map(|b| Bench::try_from((b, base_dir)))
            .transpose()?;
        let surface = rs.surface.map(Surface::try_from).transpose()?;
        let metrics = rs
            .metrics
            .map(|m| Metrics::try_from((m, base_dir)))
            .transpose()?;
        let shadow = rs.shadow.map(Shadow::try_from).transpose()?;
        let unsupported = parse_unsupported(&rs.unsupported)?;
        let restart = rs
            .restart
            .map(|argv| {
                ArgvTemplate::parse(&argv, &[], &[Special::Profile])
                    .map(|argv| Restart {
                        argv,
                        timeout: rs.restart_timeout_s,
                    })
                    .map_err(|e| {
                        format!(
                            "[stack] restart: {e} (an argument list such as [\"systemctl\", \"restart\", \"my-stack\"])"
                        )
                    })
            })
            .transpose()?;
        if bench.is_none() && surface.is_none() {
            return Err(
                "[stack] has neither [stack.bench] nor [stack.surface]: the orchestrator needs one way to measure"
                    .into(),
            );
        }
        Ok(Stack {
            name: rs.name,
            class: rs.class,
            class_confirm_wait: std::time::Duration::from_secs(rs.class_confirm_wait_s),
            live_profile: base_dir.join(&rs.live_profile),
            work_dir: base_dir.join(&rs.work_dir),
            expert_bytes: rs.expert_bytes,
            cache_spare_slots: rs.cache_spare_slots,
            bench,
            surface,
            metrics,
            shadow,
            unsupported,
            restart,
        })
    }
}

impl Stack {
    /// The ledger scope a daemon of this stack writes in.
    pub fn scope(&self) -> crate::ledger::StackScope {
        crate::ledger::StackScope {
            name: self.name.clone(),
            class: self.class.clone(),
        }
    }
}

/// `[stack.bench]`: its argv may name `{out}` and `{profile}`.
impl TryFrom<(RawBench, &Path)> for Bench {
    type Error = String;
    fn try_from((b, base_dir): (RawBench, &Path)) -> Result<Bench, String> {
        let argv = argv(
            "stack.bench",
            &b.argv,
            b.optional,
            &[Special::Out, Special::Profile],
        )?;
        Ok(Bench {
            argv,
            env: b.env,
            output: b.output,
            create_dirs: b.create_dirs.iter().map(|d| base_dir.join(d)).collect(),
        })
    }
}

impl TryFrom<RawSurface> for Surface {
    type Error = String;
    fn try_from(s: RawSurface) -> Result<Surface, String> {
        if s.prompts.is_empty() {
            return Err("[stack.surface] prompts is empty; give at least one fixed prompt".into());
        }
        if s.max_tokens == 0 {
            return Err("[stack.surface] max_tokens must be at least 1".into());
        }
        if let Some(field) = &s.health_profile_sha256
            && (field.is_empty() || field.contains(char::is_whitespace))
        {
            return Err(format!(
                "[stack.surface] health_profile_sha256 = {field:?} is not a JSON field name; give the field of the live server's health answer that holds its profile's sha256 (tinyk3 serve: \"profile_sha256\"), or leave it out"
            ));
        }
        Ok(Surface {
            base_url: http_url(&s.base_url, "stack.surface", "base_url")?,
            prompts: s.prompts,
            max_tokens: s.max_tokens,
            send_cache_prompt_false: s.send_cache_prompt_false,
            health_profile_sha256: s.health_profile_sha256,
        })
    }
}

impl TryFrom<(RawMetrics, &Path)> for Metrics {
    type Error = String;
    fn try_from((m, base_dir): (RawMetrics, &Path)) -> Result<Metrics, String> {
        Ok(Metrics {
            url: m
                .url
                .map(|u| http_url(&u, "stack.metrics", "url"))
                .transpose()?,
            names: m.names,
            // A file path is relative to the config, like every path.
            heat: m.heat.map(|h| {
                if h.starts_with("http://") || h.starts_with("https://") {
                    h
                } else {
                    base_dir.join(&h).display().to_string()
                }
            }),
            heat_trace: m.heat_trace.map(|p| base_dir.join(p)),
            heat_flush: m
                .heat_flush
                .map(|u| http_url(&u, "stack.metrics", "heat_flush"))
                .transpose()?,
            required: m.required,
        })
    }
}

/// `[stack.shadow]`: its argv may name `{port}` and `{profile}`.
impl TryFrom<RawShadow> for Shadow {
    type Error = String;
    fn try_from(s: RawShadow) -> Result<Shadow, String> {
        if !s.metrics_path.starts_with('/') {
            return Err(format!(
                "[stack.shadow] metrics_path = {:?} must be an absolute path like \"/metrics\"",
                s.metrics_path
            ));
        }
        Ok(Shadow {
            argv: argv(
                "stack.shadow",
                &s.argv,
                s.optional,
                &[Special::Port, Special::Profile],
            )?,
            env: s.env,
            health_path: s.health_path,
            start_timeout: s.start_timeout_s,
            require_drafts: s.require_drafts,
            drafted_series: s.drafted_series,
            metrics_path: s.metrics_path,
        })
    }
}

/// A table's `argv` and optional groups as one template; `specials` are the
/// placeholders other than knobs that the table may use.
fn argv(
    table: &str,
    argv: &[String],
    optional: Vec<RawOptional>,
    specials: &[Special],
) -> Result<ArgvTemplate, String> {
    let optional: Vec<_> = optional.into_iter().map(|o| (o.when, o.args)).collect();
    ArgvTemplate::parse(argv, &optional, specials)
        .map_err(|e: TemplateError| format!("[{table}] argv: {e}"))
}

/// `[stack] unsupported`: menu ids, each once; `remeasure` is never one
/// (every stack can repeat a measurement of itself).
fn parse_unsupported(ids: &[String]) -> Result<Vec<MenuId>, String> {
    let mut out = Vec::new();
    for text in ids {
        let id: MenuId = text.parse().map_err(|()| {
            format!(
                "[stack] unsupported: {text:?} is not a menu id; the menu's ids are: {}",
                MenuId::ids()
            )
        })?;
        if id == MenuId::Remeasure {
            return Err(
                "[stack] unsupported may not hold \"remeasure\": the noise floor and every verdict need it"
                    .into(),
            );
        }
        if out.contains(&id) {
            return Err(format!("[stack] unsupported names {id} twice"));
        }
        out.push(id);
    }
    Ok(out)
}
