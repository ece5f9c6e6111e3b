//! Argv templates: a command as a list of arguments with `{placeholder}`s
//! filled from a profile. Never a shell string: each element becomes exactly
//! one argument, whatever a value contains.
//!
//! Placeholders are profile knobs (`{memory.cache_gb}`) or the orchestrator's
//! own values (`{out}`, `{profile}`, `{port}`). Optional groups appear only
//! when their knob is set (positive number, non-empty text), so a template can
//! say `--incremental --spec {speculative.draft_len}` only when speculating.

use std::fmt;
use std::path::{Path, PathBuf};

use crate::profile::{Knob, Profile};

/// Values the orchestrator supplies (not knobs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Special {
    /// The JSON output file of a bench run.
    Out,
    /// The path of the profile file being measured.
    Profile,
    /// The loopback port chosen for a shadow instance.
    Port,
}

impl Special {
    fn name(self) -> &'static str {
        match self {
            Special::Out => "out",
            Special::Profile => "profile",
            Special::Port => "port",
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Piece {
    Text(String),
    Knob(Knob),
    Special(Special),
}

/// One argument: literal text and placeholders, concatenated.
#[derive(Debug, Clone, PartialEq)]
pub struct ArgTemplate(Vec<Piece>);

/// An argument group present only when `when` is set in the profile.
#[derive(Debug, Clone, PartialEq)]
pub struct OptionalGroup {
    pub when: Knob,
    pub args: Vec<ArgTemplate>,
}

/// A whole command line.
#[derive(Debug, Clone, PartialEq)]
pub struct ArgvTemplate {
    pub args: Vec<ArgTemplate>,
    pub optional: Vec<OptionalGroup>,
}

/// A placeholder problem, found when the config is loaded.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TemplateError {
    #[error("argument {arg:?} has an unclosed `{{`; write placeholders as {{memory.cache_gb}}")]
    Unclosed { arg: String },
    #[error(
        "argument {arg:?} references `{{{name}}}`, which is neither a profile knob ({knobs}) nor one of: {specials}"
    )]
    Unknown {
        arg: String,
        name: String,
        knobs: String,
        specials: String,
    },
    #[error("optional group `when = {when:?}` names no profile knob; knobs: {knobs}")]
    UnknownWhen { when: String, knobs: String },
    #[error("the command is empty; give at least the program to run")]
    Empty,
}

/// What a rendered command may refer to besides knobs.
#[derive(Debug, Clone, Default)]
pub struct RenderContext {
    pub out: Option<PathBuf>,
    pub profile: Option<PathBuf>,
    pub port: Option<u16>,
}

impl ArgTemplate {
    /// Parses one argument, allowing the given specials.
    pub fn parse(arg: &str, allowed: &[Special]) -> Result<ArgTemplate, TemplateError> {
        let mut pieces = Vec::new();
        let mut rest = arg;
        while let Some(open) = rest.find('{') {
            if open > 0 {
                pieces.push(Piece::Text(rest[..open].to_string()));
            }
            let close = rest[open..]
                .find('}')
                .ok_or_else(|| TemplateError::Unclosed {
                    arg: arg.to_string(),
                })?
                + open;
            let name = &rest[open + 1..close];
            let piece = if let Some(k) = Knob::from_name(name) {
                Piece::Knob(k)
            } else if let Some(s) = allowed.iter().copied().find(|s| s.name() == name) {
                Piece::Special(s)
            } else {
                return Err(TemplateError::Unknown {
                    arg: arg.to_string(),
                    name: name.to_string(),
                    knobs: Knob::names(),
                    specials: allowed
                        .iter()
                        .map(|s| format!("{{{}}}", s.name()))
                        .collect::<Vec<_>>()
                        .join(", "),
                });
            };
            pieces.push(piece);
            rest = &rest[close + 1..];
        }
        if !rest.is_empty() {
            pieces.push(Piece::Text(rest.to_string()));
        }
        Ok(ArgTemplate(pieces))
    }

    fn render(&self, profile: &Profile, profile_dir: &Path, ctx: &RenderContext) -> String {
        let mut out = String::new();
        for piece in &self.0 {
            match piece {
                Piece::Text(t) => out.push_str(t),
                Piece::Knob(Knob::PinsFile) => {
                    // A relative pin list is relative to its profile, as the
                    // engine reads it; the child's cwd may differ.
                    if !profile.pins.file.is_empty() {
                        out.push_str(&profile_dir.join(&profile.pins.file).to_string_lossy());
                    }
                }
                Piece::Knob(k) => out.push_str(&profile.get(*k).to_string()),
                Piece::Special(Special::Out) => out.push_str(
                    &ctx.out
                        .as_deref()
                        .unwrap_or(Path::new(""))
                        .to_string_lossy(),
                ),
                Piece::Special(Special::Profile) => out.push_str(
                    &ctx.profile
                        .as_deref()
                        .unwrap_or(Path::new(""))
                        .to_string_lossy(),
                ),
                Piece::Special(Special::Port) => {
                    out.push_str(&ctx.port.map(|p| p.to_string()).unwrap_or_default())
                }
            }
        }
        out
    }
}

impl ArgvTemplate {
    /// Parses a command and its optional groups.
    pub fn parse(
        argv: &[String],
        optional: &[(String, Vec<String>)],
        allowed: &[Special],
    ) -> Result<ArgvTemplate, TemplateError> {
        if argv.is_empty() {
            return Err(TemplateError::Empty);
        }
        let args = argv
            .iter()
            .map(|a| ArgTemplate::parse(a, allowed))
            .collect::<Result<Vec<_>, _>>()?;
        let optional = optional
            .iter()
            .map(|(when, args)| {
                let when_knob =
                    Knob::from_name(when).ok_or_else(|| TemplateError::UnknownWhen {
                        when: when.clone(),
                        knobs: Knob::names(),
                    })?;
                Ok(OptionalGroup {
                    when: when_knob,
                    args: args
                        .iter()
                        .map(|a| ArgTemplate::parse(a, allowed))
                        .collect::<Result<Vec<_>, _>>()?,
                })
            })
            .collect::<Result<Vec<_>, TemplateError>>()?;
        Ok(ArgvTemplate { args, optional })
    }

    /// The argv for `profile`, whose file lives in `profile_dir`.
    pub fn render(
        &self,
        profile: &Profile,
        profile_dir: &Path,
        ctx: &RenderContext,
    ) -> Vec<String> {
        let mut out: Vec<String> = self
            .args
            .iter()
            .map(|a| a.render(profile, profile_dir, ctx))
            .collect();
        for group in &self.optional {
            if profile.get(group.when).is_set() {
                out.extend(
                    group
                        .args
                        .iter()
                        .map(|a| a.render(profile, profile_dir, ctx)),
                );
            }
        }
        out
    }

    /// Whether any argument (optional groups included) holds `special`.
    pub fn uses(&self, special: Special) -> bool {
        self.args
            .iter()
            .chain(self.optional.iter().flat_map(|g| g.args.iter()))
            .flat_map(|a| a.0.iter())
            .any(|p| *p == Piece::Special(special))
    }

    /// The knobs this command reads (for telling which experiments it can measure).
    pub fn knobs(&self) -> Vec<Knob> {
        let mut knobs: Vec<Knob> = self
            .args
            .iter()
            .chain(self.optional.iter().flat_map(|g| g.args.iter()))
            .flat_map(|a| a.0.iter())
            .filter_map(|p| match p {
                Piece::Knob(k) => Some(*k),
                _ => None,
            })
            .chain(self.optional.iter().map(|g| g.when))
            .collect();
        knobs.sort();
        knobs.dedup();
        knobs
    }
}

impl fmt::Display for ArgTemplate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for p in &self.0 {
            match p {
                Piece::Text(t) => f.write_str(t)?,
                Piece::Knob(k) => write!(f, "{{{k}}}")?,
                Piece::Special(s) => write!(f, "{{{}}}", s.name())?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profile() -> Profile {
        Profile::parse(
            "[memory]\nbudget_gb = 1.0\ntrunk_gb = 0.25\ncache_gb = 0.5\n[pins]\nfile = \"pins.txt\"\ncount = 32\n",
            Path::new("p.toml"),
        )
        .unwrap()
    }

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn renders_knobs_specials_and_optional_groups() {
        let t = ArgvTemplate::parse(
            &strings(&["bench", "--cache-gb", "{memory.cache_gb}", "--out={out}"]),
            &[
                (
                    "speculative.draft_len".into(),
                    strings(&["--spec", "{speculative.draft_len}"]),
                ),
                ("pins.count".into(), strings(&["--pins", "{pins.file}"])),
            ],
            &[Special::Out],
        )
        .unwrap();
        let ctx = RenderContext {
            out: Some(PathBuf::from("/tmp/o.json")),
            ..Default::default()
        };
        let mut p = profile();
        let argv = t.render(&p, Path::new("/prof"), &ctx);
        assert_eq!(
            argv,
            strings(&[
                "bench",
                "--cache-gb",
                "0.5",
                "--out=/tmp/o.json",
                "--pins",
                "/prof/pins.txt"
            ])
        );
        p.speculative.draft_len = 3;
        p.pins.count = 0;
        let argv = t.render(&p, Path::new("/prof"), &ctx);
        assert_eq!(argv[4..], strings(&["--spec", "3"]));
        assert_eq!(
            t.knobs(),
            vec![
                Knob::MemoryCacheGb,
                Knob::PinsFile,
                Knob::PinsCount,
                Knob::SpeculativeDraftLen
            ]
        );
    }

    #[test]
    fn an_unknown_knob_is_refused_and_the_valid_ones_listed() {
        let err = ArgvTemplate::parse(&strings(&["x", "{memory.cache_mb}"]), &[], &[Special::Out])
            .unwrap_err()
            .to_string();
        assert!(err.contains("{memory.cache_mb}"), "{err}");
        assert!(err.contains("memory.cache_gb"), "{err}");
        assert!(err.contains("{out}"), "{err}");
    }

    #[test]
    fn a_special_not_allowed_here_is_refused() {
        let err =
            ArgvTemplate::parse(&strings(&["x", "{port}"]), &[], &[Special::Out]).unwrap_err();
        assert!(matches!(err, TemplateError::Unknown { .. }), "{err}");
    }

    #[test]
    fn unclosed_brace_and_empty_command_are_refused() {
        assert!(matches!(
            ArgvTemplate::parse(&strings(&["x", "{out"]), &[], &[Special::Out]),
            Err(TemplateError::Unclosed { .. })
        ));
        assert_eq!(
            ArgvTemplate::parse(&[], &[], &[]),
            Err(TemplateError::Empty)
        );
        assert!(matches!(
            ArgvTemplate::parse(&strings(&["x"]), &[("nope".into(), vec![])], &[]),
            Err(TemplateError::UnknownWhen { .. })
        ));
    }
}
