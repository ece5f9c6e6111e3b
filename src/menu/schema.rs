//! The JSON schema of a valid answer, built from the same [`Menu`] as the
//! validator, so what the model is given and what is accepted agree.

use serde_json::{Value, json};

use super::{Closed, Excluded, Menu, MenuEntry, MenuId, ParamValue, Resolution, exclusions};

impl Menu {
    /// Whether some value of every parameter of `id` is still allowed.
    pub fn offers(&self, id: MenuId) -> bool {
        self.withheld(id).is_none()
            && self.entry(id).is_ok_and(|e| {
                entry_schema(
                    e,
                    self.rationale_max_chars,
                    &self.excluded,
                    &self.resolutions,
                    &self.closed,
                )
                .is_some()
            })
    }

    /// The JSON schema of a valid answer: one alternative per entry, each an
    /// object with the entry's id, its bounded parameters and a rationale.
    /// Uses only what simple constrained decoders support: objects with
    /// required keys, string enums, integer/number bounds (exclusive ones
    /// around an excluded number), string maxLength, and `anyOf` (at the
    /// root, and over the ranges an excluded value leaves). An entry with
    /// no value left, or withheld, is not among the alternatives.
    pub fn json_schema(&self) -> Value {
        let alternatives: Vec<Value> = self
            .entries
            .iter()
            .filter(|e| self.withheld(e.id).is_none())
            .filter_map(|e| {
                entry_schema(
                    e,
                    self.rationale_max_chars,
                    &self.excluded,
                    &self.resolutions,
                    &self.closed,
                )
            })
            .collect();
        json!({ "anyOf": alternatives })
    }

    /// Whether any answer is left to give: the schema has an alternative.
    /// A request with none carries an empty `anyOf`, which a model server
    /// refuses (HTTP 400: a shoot-out cycle failed so after its planner
    /// refused the last value on the menu, 2026-12-07).
    pub fn offers_anything(&self) -> bool {
        self.json_schema()["anyOf"]
            .as_array()
            .is_some_and(|a| !a.is_empty())
    }
}

/// The schema of one entry's answers, or `None` when every value of one of
/// its parameters is excluded.
fn entry_schema(
    entry: &MenuEntry,
    rationale_max_chars: usize,
    excluded: &[Excluded],
    resolutions: &[Resolution],
    closed: &[Closed],
) -> Option<Value> {
    let mut props = serde_json::Map::new();
    for p in &entry.params {
        let out: Vec<&ParamValue> = excluded
            .iter()
            .filter(|x| x.experiment == entry.id && x.param == p.name)
            .map(|x| &x.value)
            .collect();
        let within = resolutions
            .iter()
            .find(|r| r.experiment == entry.id && r.param == p.name)
            .map_or(0.0, |r| r.half_width);
        let ranges: Vec<(f64, f64)> = closed
            .iter()
            .filter(|c| c.experiment == entry.id && c.param == p.name)
            .map(|c| (c.lo, c.hi))
            .collect();
        props.insert(
            p.name.clone(),
            exclusions::param_schema(p, &out, within, &ranges)?,
        );
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
