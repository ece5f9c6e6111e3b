//! Loading: the `experiments/*.toml` files, one per [`MenuId`], into a
//! [`Menu`], refusing a missing, extra or malformed file by file and line.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use toml::Spanned;

use super::{Menu, MenuEntry, MenuId, Param, ParamKind, RATIONALE_MAX_CHARS};
use crate::profile::Knob;
use crate::vocab::Method;

/// Why the menu could not be loaded. Each names the file (and line).
#[derive(Debug, thiserror::Error)]
pub enum MenuError {
    #[error("cannot read the menu directory {dir}: {source}")]
    ReadDir {
        dir: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "menu file {file} is missing; the menu must have exactly one file per experiment: {expected}"
    )]
    Missing { file: PathBuf, expected: String },
    #[error(
        "{file} is not on the fixed menu; the directory may hold only: {expected}. Move it elsewhere"
    )]
    Extra { file: PathBuf, expected: String },
    #[error("cannot read menu file {file}: {source}")]
    Read {
        file: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("menu file {file} is not valid TOML for a menu entry: {source}")]
    Parse {
        file: PathBuf,
        #[source]
        source: toml::de::Error,
    },
    #[error("{file}:{line}: {problem}")]
    Invalid {
        file: PathBuf,
        line: usize,
        problem: String,
    },
}

impl Menu {
    /// Loads `dir`, which must hold exactly the five menu files.
    pub fn load(dir: &Path) -> Result<Menu, MenuError> {
        let expected = MenuId::ALL
            .iter()
            .map(|m| format!("{m}.toml"))
            .collect::<Vec<_>>()
            .join(", ");
        let listing = std::fs::read_dir(dir).map_err(|source| MenuError::ReadDir {
            dir: dir.to_path_buf(),
            source,
        })?;
        let mut names = Vec::new();
        for item in listing {
            let item = item.map_err(|source| MenuError::ReadDir {
                dir: dir.to_path_buf(),
                source,
            })?;
            names.push(item.file_name().to_string_lossy().into_owned());
        }
        names.sort();
        for name in &names {
            let known = name
                .strip_suffix(".toml")
                .is_some_and(|stem| stem.parse::<MenuId>().is_ok());
            if !known {
                return Err(MenuError::Extra {
                    file: dir.join(name),
                    expected,
                });
            }
        }
        let mut entries = Vec::new();
        for id in MenuId::ALL {
            let file = dir.join(format!("{id}.toml"));
            if !names.iter().any(|n| *n == format!("{id}.toml")) {
                return Err(MenuError::Missing { file, expected });
            }
            let text = std::fs::read_to_string(&file).map_err(|source| MenuError::Read {
                file: file.clone(),
                source,
            })?;
            entries.push(parse_entry(*id, &text, &file)?);
        }
        Ok(Menu {
            entries,
            unsupported: Vec::new(),
            stack: None,
            rationale_max_chars: RATIONALE_MAX_CHARS,
            excluded: Vec::new(),
            withheld: Vec::new(),
            resolutions: Vec::new(),
            closed: Vec::new(),
        })
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEntry {
    id: Spanned<String>,
    summary: String,
    prompt: String,
    method: Spanned<String>,
    touches: Spanned<Vec<Spanned<String>>>,
    #[serde(default)]
    params: BTreeMap<String, Spanned<RawParam>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawParam {
    #[serde(rename = "type")]
    kind: Spanned<String>,
    doc: String,
    min: Option<Spanned<RawNum>>,
    max: Option<Spanned<RawNum>>,
    step: Option<Spanned<RawNum>>,
    values: Option<Spanned<Vec<String>>>,
}

/// TOML keeps integers and floats apart; bounds may be either.
#[derive(Deserialize, Clone, Copy)]
#[serde(untagged)]
enum RawNum {
    Int(i64),
    Float(f64),
}

impl RawNum {
    fn as_f64(self) -> f64 {
        match self {
            RawNum::Int(n) => n as f64,
            RawNum::Float(x) => x,
        }
    }
}

fn line_of(text: &str, offset: usize) -> usize {
    text[..offset.min(text.len())].matches('\n').count() + 1
}

fn parse_entry(id: MenuId, text: &str, file: &Path) -> Result<MenuEntry, MenuError> {
    let raw: RawEntry = toml::from_str(text).map_err(|source| MenuError::Parse {
        file: file.to_path_buf(),
        source,
    })?;
    let invalid = |offset: usize, problem: String| MenuError::Invalid {
        file: file.to_path_buf(),
        line: line_of(text, offset),
        problem,
    };
    if raw.id.get_ref() != id.as_str() {
        return Err(invalid(
            raw.id.span().start,
            format!(
                "id must be \"{id}\" to match the file name (the menu's ids are fixed: {})",
                MenuId::ids()
            ),
        ));
    }
    let method: Method = raw
        .method
        .get_ref()
        .parse()
        .map_err(|e: crate::vocab::UnknownValue| invalid(raw.method.span().start, e.to_string()))?;
    let mut touches = Vec::new();
    for t in raw.touches.get_ref() {
        let knob = Knob::from_name(t.get_ref()).ok_or_else(|| {
            invalid(
                t.span().start,
                format!(
                    "touches names `{}`, which the profile does not have; profile knobs: {}",
                    t.get_ref(),
                    Knob::names()
                ),
            )
        })?;
        touches.push(knob);
    }
    let mut params = Vec::new();
    for (name, spanned) in &raw.params {
        let at = spanned.span().start;
        if !id.planner_params().contains(&name.as_str()) {
            return Err(invalid(
                at,
                format!(
                    "parameter `{name}` is not read by the {id} planner; it reads: {}",
                    list_or_none(id.planner_params())
                ),
            ));
        }
        params.push(Param {
            name: name.clone(),
            doc: spanned.get_ref().doc.clone(),
            kind: parse_kind(name, spanned.get_ref(), &invalid, at)?,
        });
    }
    for needed in id.planner_params() {
        if !raw.params.contains_key(*needed) {
            return Err(invalid(
                0,
                format!("{id} must declare parameter `{needed}` ([params.{needed}])"),
            ));
        }
    }
    if touches.is_empty() && id != MenuId::Remeasure {
        return Err(invalid(
            raw.touches.span().start,
            format!("{id} must list the profile knobs it touches"),
        ));
    }
    Ok(MenuEntry {
        id,
        summary: raw.summary,
        prompt: raw.prompt,
        method,
        touches,
        params,
        file: file.to_path_buf(),
    })
}

fn list_or_none(names: &[&str]) -> String {
    if names.is_empty() {
        "none".to_string()
    } else {
        names.join(", ")
    }
}

fn parse_kind(
    name: &str,
    raw: &RawParam,
    invalid: &dyn Fn(usize, String) -> MenuError,
    at: usize,
) -> Result<ParamKind, MenuError> {
    let need = |v: Option<Spanned<RawNum>>, key: &str| {
        v.ok_or_else(|| invalid(at, format!("parameter `{name}` needs `{key}`")))
    };
    let kind_at = raw.kind.span().start;
    match raw.kind.get_ref().as_str() {
        "integer" => {
            let int = |v: Spanned<RawNum>, key: &str| match *v.get_ref() {
                RawNum::Int(n) => Ok(n),
                RawNum::Float(_) => Err(invalid(
                    v.span().start,
                    format!("`{key}` of integer parameter `{name}` must be a whole number"),
                )),
            };
            let min = int(need(raw.min.clone(), "min")?, "min")?;
            let max = int(need(raw.max.clone(), "max")?, "max")?;
            let step = match raw.step.clone() {
                Some(s) => int(s, "step")?,
                None => 1,
            };
            check_range(name, min as f64, max as f64, Some(step as f64), invalid, at)?;
            Ok(ParamKind::Integer { min, max, step })
        }
        "number" => {
            let min = need(raw.min.clone(), "min")?.get_ref().as_f64();
            let max = need(raw.max.clone(), "max")?.get_ref().as_f64();
            let step = raw.step.as_ref().map(|s| s.get_ref().as_f64());
            check_range(name, min, max, step, invalid, at)?;
            Ok(ParamKind::Number { min, max, step })
        }
        "enum" => {
            let values = raw
                .values
                .as_ref()
                .ok_or_else(|| invalid(at, format!("enum parameter `{name}` needs `values`")))?;
            if values.get_ref().is_empty() {
                return Err(invalid(
                    values.span().start,
                    format!("enum parameter `{name}` needs at least one value"),
                ));
            }
            Ok(ParamKind::Enum {
                values: values.get_ref().clone(),
            })
        }
        other => Err(invalid(
            kind_at,
            format!("parameter `{name}` has unknown type `{other}`; use integer, number or enum"),
        )),
    }
}

fn check_range(
    name: &str,
    min: f64,
    max: f64,
    step: Option<f64>,
    invalid: &dyn Fn(usize, String) -> MenuError,
    at: usize,
) -> Result<(), MenuError> {
    if !min.is_finite() || !max.is_finite() {
        return Err(invalid(
            at,
            format!("parameter `{name}` needs finite bounds"),
        ));
    }
    if min > max {
        return Err(invalid(
            at,
            format!("parameter `{name}` has min ({min}) > max ({max}); swap them"),
        ));
    }
    if let Some(s) = step
        && !(s > 0.0 && s.is_finite())
    {
        return Err(invalid(
            at,
            format!("parameter `{name}` has step {s}; a step must be > 0"),
        ));
    }
    Ok(())
}

#[cfg(test)]
#[path = "load_tests.rs"]
mod tests;
