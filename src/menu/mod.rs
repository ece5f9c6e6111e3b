//! The fixed menu of experiments, one TOML file each under `experiments/`.
//!
//! The ids are fixed in code ([`MenuId`]); the files give the text the model
//! sees, the parameter bounds and the knobs each entry may touch. From the one
//! loaded [`Menu`] come both the JSON schema sent to the model
//! ([`Menu::json_schema`]) and the validator of its answers
//! ([`Menu::validate`]), so the two cannot disagree.
//!
//! - `load`: the `experiments/*.toml` files into a [`Menu`].
//! - `schema`: the JSON schema of a valid answer, what the model is given.
//! - `validate`: the model's answers into a [`Proposal`] or a [`Rejection`].
//! - `exclusions`: values no proposal may take on the live profile.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::profile::Knob;
use crate::vocab::Method;

pub mod exclusions;
mod load;
mod schema;
mod validate;

pub use exclusions::{
    Closed, Excluded, Resolution, Why, Withheld, named as named_value, shown as shown_value,
};
pub use load::MenuError;
pub use validate::Rejection;

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
    /// called off-menu (see [`crate::stack_support`]).
    unsupported: Vec<MenuId>,
    stack: Option<String>,
    /// The rationale's bound, in characters: the schema's `maxLength` and
    /// the validator's limit, from the one value so they cannot disagree.
    rationale_max_chars: usize,
    /// Values no proposal may take on the current live profile: left out
    /// of the schema and refused by the validator, from this one list.
    excluded: Vec<Excluded>,
    /// Entries no proposal may choose now, whole (see [`Withheld`]).
    withheld: Vec<Withheld>,
    /// How near an excluded number a value is the same proposal on this
    /// base (see [`Resolution`]); an exact match where none is given.
    resolutions: Vec<Resolution>,
    /// Ranges of values no proposal may take on this base (see [`Closed`]),
    /// from the schema and the validator alike.
    closed: Vec<Closed>,
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

impl Menu {
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
            withheld: self.withheld.clone(),
            resolutions: self.resolutions.clone(),
            closed: self.closed.clone(),
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
            let within = self.same_within(x.experiment, &x.param);
            let already = self
                .excluded
                .iter()
                .any(|y| y.matches(x.experiment, &x.param, &x.value, within));
            if known && !already {
                self.excluded.push(x);
            }
        }
        self
    }

    /// The same menu with these ranges closed too: the schema leaves them
    /// out and the validator refuses a value in one as
    /// [`Rejection::Closed`]. Ranges of unknown parameters change nothing.
    pub fn closing(mut self, more: impl IntoIterator<Item = Closed>) -> Menu {
        for c in more {
            let known = self
                .entries
                .iter()
                .any(|e| e.id == c.experiment && e.params.iter().any(|p| p.name == c.param));
            if known && c.lo <= c.hi && !self.closed.contains(&c) {
                self.closed.push(c);
            }
        }
        self
    }

    /// The closed ranges, in the order they were added.
    pub fn closed(&self) -> &[Closed] {
        &self.closed
    }

    /// The same menu with these resolutions: every excluded value of a
    /// number parameter given one, before or after, excludes the values
    /// within its half-width too (a closed band), from the schema and the
    /// validator alike.
    pub fn with_resolutions(mut self, more: impl IntoIterator<Item = Resolution>) -> Menu {
        for r in more {
            self.resolutions
                .retain(|x| !(x.experiment == r.experiment && x.param == r.param));
            self.resolutions.push(r);
        }
        self
    }

    /// The half-width within which a value of `param` of `experiment` is
    /// the same as an excluded one: 0 (exact) unless a [`Resolution`]
    /// says otherwise.
    pub fn same_within(&self, experiment: MenuId, param: &str) -> f64 {
        self.resolutions
            .iter()
            .find(|r| r.experiment == experiment && r.param == param)
            .map_or(0.0, |r| r.half_width)
    }

    /// The same menu with this entry withheld: the schema leaves it out and
    /// the validator refuses it as [`Rejection::Withheld`].
    pub fn withholding(mut self, w: Withheld) -> Menu {
        if !self.withheld.iter().any(|x| x.experiment == w.experiment) {
            self.withheld.push(w);
        }
        self
    }

    /// Why `id` is withheld now, if it is.
    pub fn withheld(&self, id: MenuId) -> Option<&Withheld> {
        self.withheld.iter().find(|w| w.experiment == id)
    }

    /// The excluded values, in the order they were added.
    pub fn excluded(&self) -> &[Excluded] {
        &self.excluded
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

    /// The entry `id`; a loaded menu has every id, so only one the stack
    /// declared unsupported is missing (see [`Menu::without`]).
    pub fn entry(&self, id: MenuId) -> Result<&MenuEntry, UnsupportedEntry> {
        self.entries
            .iter()
            .find(|e| e.id == id)
            .ok_or_else(|| UnsupportedEntry {
                id,
                stack: self.stack.clone().unwrap_or_default(),
            })
    }
}

/// A menu entry asked for by id that this stack declared unsupported
/// (`[stack] unsupported`), so this menu does not hold it: e.g. the
/// confirmation of a win measured before the entry was declared so.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("menu entry {id} is unsupported by the stack {stack} ([stack] unsupported)")]
pub struct UnsupportedEntry {
    pub id: MenuId,
    pub stack: String,
}

#[cfg(test)]
mod tests;
