//! The fixed menu of experiments, one TOML file each under `experiments/`.
//!
//! The ids are fixed in code ([`MenuId`]); the files give the text the model
//! sees, the parameter bounds and the knobs each entry may touch. From the one
//! loaded [`Menu`] come both the JSON schema sent to the model
//! ([`Menu::json_schema`]) and the validator of its answers
//! ([`Menu::validate`]), so the two cannot disagree.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use toml::Spanned;

use crate::profile::Knob;
use crate::vocab::Method;

mod exclusions;

pub use exclusions::{Excluded, Why, named as named_value, shown as shown_value};

/// The longest rationale the model may write unless `[model]
/// rationale_max_chars` says otherwise. It is shown to nobody but kept in the
/// raw answer, so the bound only stops runaway generations.
pub const RATIONALE_MAX_CHARS: usize = 400;

/// The most `[model] rationale_max_chars` may allow.
pub const RATIONALE_MAX_CHARS_LIMIT: usize = 4000;

/// One of the five experiments the orchestrator knows how to plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MenuId {
    RerankPins,
    DeepenWarmSet,
    StageSpeculative,
    RebalanceTrunkCache,
    Remeasure,
}

impl MenuId {
    pub const ALL: &'static [MenuId] = &[
        MenuId::RerankPins,
        MenuId::DeepenWarmSet,
        MenuId::StageSpeculative,
        MenuId::RebalanceTrunkCache,
        MenuId::Remeasure,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            MenuId::RerankPins => "rerank_pins",
            MenuId::DeepenWarmSet => "deepen_warm_set",
            MenuId::StageSpeculative => "stage_speculative",
            MenuId::RebalanceTrunkCache => "rebalance_trunk_cache",
            MenuId::Remeasure => "remeasure",
        }
    }

    /// The parameters this entry's planner reads; a menu file may change their
    /// bounds and text but not their names.
    pub fn planner_params(self) -> &'static [&'static str] {
        match self {
            MenuId::RerankPins => &["pin_count"],
            MenuId::DeepenWarmSet => &["warm_set"],
            MenuId::StageSpeculative => &["draft_len"],
            MenuId::RebalanceTrunkCache => &["trunk_fraction"],
            MenuId::Remeasure => &[],
        }
    }

    /// Every id, comma separated, for messages.
    pub fn ids() -> String {
        MenuId::ALL
            .iter()
            .map(|m| m.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

impl fmt::Display for MenuId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for MenuId {
    type Err = ();
    fn from_str(s: &str) -> Result<Self, ()> {
        MenuId::ALL
            .iter()
            .copied()
            .find(|m| m.as_str() == s)
            .ok_or(())
    }
}

/// The bounded domain of one parameter.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ParamKind {
    /// `step` is the grid a search should use; it is advice, not a constraint.
    Integer {
        min: i64,
        max: i64,
        step: i64,
    },
    Number {
        min: f64,
        max: f64,
        step: Option<f64>,
    },
    Enum {
        values: Vec<String>,
    },
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Param {
    pub name: String,
    pub doc: String,
    pub kind: ParamKind,
}

/// One experiment on the menu.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MenuEntry {
    pub id: MenuId,
    pub summary: String,
    /// The text the model sees.
    pub prompt: String,
    pub method: Method,
    pub touches: Vec<Knob>,
    /// In name order.
    pub params: Vec<Param>,
    pub file: PathBuf,
}

/// The loaded menu, one entry per [`MenuId`], in [`MenuId::ALL`] order.
#[derive(Debug, Clone, PartialEq)]
pub struct Menu {
    entries: Vec<MenuEntry>,
    /// Entries of the fixed menu that this stack cannot carry out, with the
    /// stack's name, so a proposal of one is refused by name rather than
    /// called off-menu (see [`crate::support`]).
    unsupported: Vec<MenuId>,
    stack: Option<String>,
    /// The rationale's bound, in characters: the schema's `maxLength` and
    /// the validator's limit, from the one value so they cannot disagree.
    rationale_max_chars: usize,
    /// Values no proposal may take on the current live profile: left out
    /// of the schema and refused by the validator, from this one list.
    excluded: Vec<Excluded>,
}

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

/// A parameter's value, after validation.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(untagged)]
pub enum ParamValue {
    Integer(i64),
    Number(f64),
    /// Always one of the menu's own enum strings, never the model's text.
    Choice(String),
}

impl ParamValue {
    pub fn as_i64(&self) -> Option<i64> {
        match self {
            ParamValue::Integer(n) => Some(*n),
            _ => None,
        }
    }
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            ParamValue::Number(x) => Some(*x),
            ParamValue::Integer(n) => Some(*n as f64),
            ParamValue::Choice(_) => None,
        }
    }
}

/// A valid choice from the menu. The model's rationale is not kept here: its
/// words live only in the raw-answer column of the ledger.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Proposal {
    pub experiment: MenuId,
    pub params: BTreeMap<String, ParamValue>,
}

impl Proposal {
    /// Canonical JSON of the parameters (sorted keys): the duplicate key.
    pub fn params_json(&self) -> String {
        serde_json::to_string(&self.params).expect("params always serialise")
    }

    /// `stage_speculative draft_len 4`: the proposal in our own words, for
    /// messages (every value is a bounded number or a menu enum string).
    pub fn describe(&self) -> String {
        let mut t = self.experiment.to_string();
        for (name, value) in &self.params {
            t.push(' ');
            t.push_str(&named_value(name, value));
        }
        t
    }
}

/// Why an answer is not a valid proposal. Messages never echo the model's
/// strings back (ids, names, text): only our own names and numbers.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Rejection {
    #[error("the answer is not a JSON object: {detail}")]
    Unparseable { detail: String },
    #[error("the answer lacks the required field `{field}`")]
    MissingField { field: &'static str },
    #[error("the answer has a field other than experiment, params and rationale")]
    ExtraField,
    #[error("field `{field}` must be {expected}")]
    FieldType {
        field: &'static str,
        expected: &'static str,
    },
    #[error("field `{field}` must be a string of at most {max} characters")]
    TooLong { field: &'static str, max: usize },
    #[error("the experiment id is not on the menu; choose one of: {valid}")]
    OffMenu { valid: String },
    #[error(
        "{experiment} is on the menu but the stack {stack} does not support it ([stack] unsupported); choose one of: {valid}"
    )]
    Unsupported {
        experiment: MenuId,
        stack: String,
        valid: String,
    },
    #[error("{experiment} needs parameter `{param}`")]
    MissingParam { experiment: MenuId, param: String },
    #[error("{experiment} has no such parameter; its parameters are: {declared}")]
    ExtraParam {
        experiment: MenuId,
        declared: String,
    },
    #[error("parameter `{param}` must be {expected}")]
    WrongType {
        param: String,
        expected: &'static str,
    },
    #[error("parameter `{param}` = {value} is out of bounds; allowed: {bounds}")]
    OutOfBounds {
        param: String,
        value: String,
        bounds: String,
    },
    #[error("{experiment} {what} {why}; choose another value or another experiment")]
    Excluded {
        experiment: MenuId,
        /// The parameter and its value (`draft_len 0`): our own text.
        what: String,
        why: Why,
    },
    #[error(
        "{what}: the same experiment with the same parameters was already decided on this profile (experiment {previous})"
    )]
    Duplicate {
        /// The proposal (`stage_speculative draft_len 4`): our own text.
        what: String,
        previous: i64,
    },
    #[error(
        "{what}: the planner already refused the same experiment with the same parameters on this profile (cycle {cycle}); choose another"
    )]
    RefusedByPlanner { what: String, cycle: i64 },
    /// The planner found nothing to measure in a valid proposal; the
    /// message is the planner's own (numbers and our names only).
    #[error("not measured: {reason}")]
    NotMeasured { reason: String },
    /// The model server's reply was no chat completion at all; described
    /// in our words (size, media type, what is missing), never quoted.
    #[error("the reply is a {description}")]
    NotChatCompletion { description: String },
}

impl Rejection {
    /// A short stable name for the ledger and reports.
    pub fn kind(&self) -> &'static str {
        match self {
            Rejection::Unparseable { .. } => "unparseable",
            Rejection::MissingField { .. } => "missing_field",
            Rejection::ExtraField => "extra_field",
            Rejection::FieldType { .. } => "field_type",
            Rejection::TooLong { .. } => "too_long",
            Rejection::OffMenu { .. } => "off_menu",
            Rejection::Unsupported { .. } => "unsupported",
            Rejection::MissingParam { .. } => "missing_param",
            Rejection::ExtraParam { .. } => "extra_param",
            Rejection::WrongType { .. } => "wrong_type",
            Rejection::OutOfBounds { .. } => "out_of_bounds",
            Rejection::Excluded { why: Why::Live, .. } => "no_change",
            // Counted with the duplicates: decided on this profile already.
            Rejection::Duplicate { .. }
            | Rejection::RefusedByPlanner { .. }
            | Rejection::Excluded { .. } => "duplicate",
            Rejection::NotMeasured { .. } => "not_measured",
            Rejection::NotChatCompletion { .. } => "not_chat_completion",
        }
    }
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
        })
    }

    /// This menu without the entries `stack` cannot carry out: they leave
    /// the schema, the prompt and the bandit's grid, and a proposal of one
    /// is refused as [`Rejection::Unsupported`].
    pub fn without(&self, unsupported: &[MenuId], stack: &str) -> Menu {
        Menu {
            entries: self
                .entries
                .iter()
                .filter(|e| !unsupported.contains(&e.id))
                .cloned()
                .collect(),
            unsupported: unsupported.to_vec(),
            stack: Some(stack.to_string()),
            rationale_max_chars: self.rationale_max_chars,
            excluded: self.excluded.clone(),
        }
    }

    /// The same menu with these values excluded too: the schema leaves them
    /// out and the validator refuses them as [`Rejection::Excluded`]. Values
    /// outside an entry's parameters or bounds change nothing.
    pub fn excluding(mut self, more: impl IntoIterator<Item = Excluded>) -> Menu {
        for x in more {
            let known = self
                .entries
                .iter()
                .any(|e| e.id == x.experiment && e.params.iter().any(|p| p.name == x.param));
            let already = self
                .excluded
                .iter()
                .any(|y| y.matches(x.experiment, &x.param, &x.value));
            if known && !already {
                self.excluded.push(x);
            }
        }
        self
    }

    /// The excluded values, in the order they were added.
    pub fn excluded(&self) -> &[Excluded] {
        &self.excluded
    }

    /// Whether some value of every parameter of `id` is still allowed.
    pub fn offers(&self, id: MenuId) -> bool {
        entry_schema(self.entry(id), self.rationale_max_chars, &self.excluded).is_some()
    }

    /// The same menu with the rationale bounded to `max` characters. The
    /// rationale comes after the choice in every answer, so it explains the
    /// choice and never informs it; a small model that writes noise there
    /// spends a decode step per character, which a small bound saves.
    pub fn with_rationale_max_chars(mut self, max: usize) -> Menu {
        self.rationale_max_chars = max;
        self
    }

    /// The longest rationale an answer may carry, in characters.
    pub fn rationale_max_chars(&self) -> usize {
        self.rationale_max_chars
    }

    /// The entries this stack supports, in [`MenuId::ALL`] order.
    pub fn entries(&self) -> &[MenuEntry] {
        &self.entries
    }

    /// The fixed menu's entries this stack does not support.
    pub fn unsupported(&self) -> &[MenuId] {
        &self.unsupported
    }

    /// The ids on offer, comma separated, for messages.
    fn offered(&self) -> String {
        self.entries
            .iter()
            .map(|e| e.id.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }

    pub fn entry(&self, id: MenuId) -> &MenuEntry {
        self.entries
            .iter()
            .find(|e| e.id == id)
            .expect("a loaded menu has every id")
    }

    /// The JSON schema of a valid answer: one alternative per entry, each an
    /// object with the entry's id, its bounded parameters and a rationale.
    /// Uses only what simple constrained decoders support: objects with
    /// required keys, string enums, integer/number bounds (exclusive ones
    /// around an excluded number), string maxLength, and `anyOf` (at the
    /// root, and over the ranges an excluded value leaves). An entry with
    /// no value left is not among the alternatives.
    pub fn json_schema(&self) -> Value {
        let alternatives: Vec<Value> = self
            .entries
            .iter()
            .filter_map(|e| entry_schema(e, self.rationale_max_chars, &self.excluded))
            .collect();
        json!({ "anyOf": alternatives })
    }

    /// Validates a raw answer into a proposal or a typed rejection.
    pub fn validate(&self, raw: &str) -> Result<Proposal, Rejection> {
        let value: Value =
            serde_json::from_str(raw.trim()).map_err(|e| Rejection::Unparseable {
                detail: format!("invalid JSON at line {} column {}", e.line(), e.column()),
            })?;
        self.validate_value(&value)
    }

    /// [`Menu::validate`] on already-parsed JSON.
    pub fn validate_value(&self, value: &Value) -> Result<Proposal, Rejection> {
        let obj = value.as_object().ok_or(Rejection::Unparseable {
            detail: "expected an object with experiment, params and rationale".to_string(),
        })?;
        if obj
            .keys()
            .any(|k| !["experiment", "params", "rationale"].contains(&k.as_str()))
        {
            return Err(Rejection::ExtraField);
        }
        let id_text = obj
            .get("experiment")
            .ok_or(Rejection::MissingField {
                field: "experiment",
            })?
            .as_str()
            .ok_or(Rejection::FieldType {
                field: "experiment",
                expected: "a string",
            })?;
        let id: MenuId = id_text.parse().map_err(|()| Rejection::OffMenu {
            valid: self.offered(),
        })?;
        if self.unsupported.contains(&id) {
            return Err(Rejection::Unsupported {
                experiment: id,
                stack: self.stack.clone().unwrap_or_default(),
                valid: self.offered(),
            });
        }
        let params = obj
            .get("params")
            .ok_or(Rejection::MissingField { field: "params" })?
            .as_object()
            .ok_or(Rejection::FieldType {
                field: "params",
                expected: "an object",
            })?;
        let rationale = obj
            .get("rationale")
            .ok_or(Rejection::MissingField { field: "rationale" })?
            .as_str()
            .ok_or(Rejection::FieldType {
                field: "rationale",
                expected: "a string",
            })?;
        if rationale.chars().count() > self.rationale_max_chars {
            return Err(Rejection::TooLong {
                field: "rationale",
                max: self.rationale_max_chars,
            });
        }
        let entry = self.entry(id);
        if let Some(_extra) = params
            .keys()
            .find(|k| !entry.params.iter().any(|p| &p.name == *k))
        {
            return Err(Rejection::ExtraParam {
                experiment: id,
                declared: declared(entry),
            });
        }
        let mut out = BTreeMap::new();
        for param in &entry.params {
            let v = params.get(&param.name).ok_or(Rejection::MissingParam {
                experiment: id,
                param: param.name.clone(),
            })?;
            let value = check_param(param, v)?;
            if let Some(x) = self
                .excluded
                .iter()
                .find(|x| x.matches(id, &param.name, &value))
            {
                return Err(Rejection::Excluded {
                    experiment: id,
                    what: named_value(&param.name, &value),
                    why: x.why.clone(),
                });
            }
            out.insert(param.name.clone(), value);
        }
        Ok(Proposal {
            experiment: id,
            params: out,
        })
    }
}

fn declared(entry: &MenuEntry) -> String {
    if entry.params.is_empty() {
        return "none (use an empty object)".to_string();
    }
    entry
        .params
        .iter()
        .map(|p| p.name.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

fn check_param(param: &Param, v: &Value) -> Result<ParamValue, Rejection> {
    let wrong = |expected| Rejection::WrongType {
        param: param.name.clone(),
        expected,
    };
    match &param.kind {
        ParamKind::Integer { min, max, .. } => {
            let n = v.as_i64().ok_or_else(|| wrong("an integer"))?;
            if n < *min || n > *max {
                return Err(Rejection::OutOfBounds {
                    param: param.name.clone(),
                    value: n.to_string(),
                    bounds: format!("{min} to {max}"),
                });
            }
            Ok(ParamValue::Integer(n))
        }
        ParamKind::Number { min, max, .. } => {
            let x = v.as_f64().ok_or_else(|| wrong("a number"))?;
            if !(x >= *min && x <= *max) {
                return Err(Rejection::OutOfBounds {
                    param: param.name.clone(),
                    value: x.to_string(),
                    bounds: format!("{min} to {max}"),
                });
            }
            Ok(ParamValue::Number(x))
        }
        ParamKind::Enum { values } => {
            let s = v.as_str().ok_or_else(|| wrong("a string"))?;
            // Return the menu's own string, so nothing of the model's travels on.
            let ours =
                values
                    .iter()
                    .find(|c| c.as_str() == s)
                    .ok_or_else(|| Rejection::OutOfBounds {
                        param: param.name.clone(),
                        value: "a string".to_string(),
                        bounds: format!("one of {}", values.join(", ")),
                    })?;
            Ok(ParamValue::Choice(ours.clone()))
        }
    }
}

/// The schema of one entry's answers, or `None` when every value of one of
/// its parameters is excluded.
fn entry_schema(
    entry: &MenuEntry,
    rationale_max_chars: usize,
    excluded: &[Excluded],
) -> Option<Value> {
    let mut props = serde_json::Map::new();
    for p in &entry.params {
        let out: Vec<&ParamValue> = excluded
            .iter()
            .filter(|x| x.experiment == entry.id && x.param == p.name)
            .map(|x| &x.value)
            .collect();
        props.insert(p.name.clone(), exclusions::param_schema(p, &out)?);
    }
    let required: Vec<&str> = entry.params.iter().map(|p| p.name.as_str()).collect();
    Some(json!({
        "type": "object",
        "properties": {
            "experiment": {"type": "string", "enum": [entry.id.as_str()]},
            "params": {
                "type": "object",
                "properties": props,
                "required": required,
                "additionalProperties": false
            },
            "rationale": {"type": "string", "maxLength": rationale_max_chars}
        },
        "required": ["experiment", "params", "rationale"],
        "additionalProperties": false
    }))
}

// ---- loading -------------------------------------------------------------

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
mod tests;
