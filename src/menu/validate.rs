//! Validation: a model's answer into a [`Proposal`] of bounded values, or a
//! typed [`Rejection`] that never echoes the model's strings.

use std::collections::BTreeMap;

use serde_json::Value;

use super::{Menu, MenuEntry, MenuId, Param, ParamKind, ParamValue, Proposal, Why, named_value};

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
    #[error("{experiment} {what} {why}; choose another value or another experiment")]
    Closed {
        experiment: MenuId,
        /// The parameter and its value (`warm_set 731`): our own text.
        what: String,
        /// Our own words (see [`Closed`](super::Closed)).
        why: String,
    },
    #[error("{experiment} is not offered now: {why}; choose another experiment")]
    Withheld {
        experiment: MenuId,
        /// Our own words (see [`Withheld`](super::Withheld)).
        why: String,
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
            Rejection::Withheld { .. } => "not_offered",
            Rejection::Closed { .. } => "closed",
            Rejection::NotMeasured { .. } => "not_measured",
            Rejection::NotChatCompletion { .. } => "not_chat_completion",
        }
    }
}

impl Menu {
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
        let entry = self.entry(id).map_err(|e| Rejection::Unsupported {
            experiment: id,
            stack: e.stack,
            valid: self.offered(),
        })?;
        if let Some(w) = self.withheld(id) {
            return Err(Rejection::Withheld {
                experiment: id,
                why: w.why.clone(),
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
            let within = self.same_within(id, &param.name);
            if let Some(x) = self
                .excluded
                .iter()
                .find(|x| x.matches(id, &param.name, &value, within))
            {
                let mut what = named_value(&param.name, &value);
                if !x.matches(id, &param.name, &value, 0.0) {
                    // Inside the band, not the value itself: say which.
                    what.push_str(&format!(
                        ", within {within:.2e} of {} (the planner's rounding), so it",
                        super::shown_value(&x.value)
                    ));
                }
                return Err(Rejection::Excluded {
                    experiment: id,
                    what,
                    why: x.why.clone(),
                });
            }
            if let Some(c) = self
                .closed
                .iter()
                .find(|c| c.holds(id, &param.name, &value))
            {
                return Err(Rejection::Closed {
                    experiment: id,
                    what: named_value(&param.name, &value),
                    why: c.why.clone(),
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
