//! What may not be proposed: parameter values a proposal may not take on
//! the cycle's base profile, the base's own value (its candidate would be
//! the base) and values already decided or refused by the planner on it
//! (from the ledger's rows, [`from_ledger`]), or refused earlier in the
//! running cycle ([`of_proposal`]).
//!
//! They live in the [`Menu`](super::Menu), so the schema sent to the model
//! leaves them out and the validator refuses them, from one list: the
//! validator refuses exactly what the schema excludes, and names the value
//! and why ([`Rejection::Excluded`](super::Rejection::Excluded)); the
//! prompt lists them and the bandit's grid skips them.
//!
//! An entry with no parameter has no value to exclude: it is withheld
//! whole, with why ([`Withheld`]: `remeasure` while the noise floor it would
//! measure is fresh), from the same schema and validator.
//!
//! Every menu entry has at most one parameter (see
//! [`MenuId::planner_params`](super::MenuId::planner_params)), so a value
//! excluded for one parameter excludes that whole proposal.

use std::fmt;

use serde_json::{Value, json};

use super::{Menu, MenuId, Param, ParamKind, ParamValue, Proposal};

/// Why a value is excluded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Why {
    /// The live profile's own value: nothing would change.
    Live,
    /// Already decided (measured) on this live profile by this experiment.
    Decided { experiment: i64 },
    /// The planner refused it on this live profile, in this cycle (of the
    /// ledger) or in the cycle now running (`None`).
    RefusedByPlanner { cycle: Option<i64> },
}

impl fmt::Display for Why {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Why::Live => f.write_str("equals the live profile's value"),
            Why::Decided { experiment } => write!(
                f,
                "was already decided on this live profile (experiment {experiment})"
            ),
            Why::RefusedByPlanner { cycle: Some(c) } => write!(
                f,
                "was already refused by the planner on this live profile (cycle {c})"
            ),
            Why::RefusedByPlanner { cycle: None } => {
                f.write_str("was refused by the planner earlier in this cycle")
            }
        }
    }
}

/// One excluded value of one entry's parameter.
#[derive(Debug, Clone, PartialEq)]
pub struct Excluded {
    pub experiment: MenuId,
    pub param: String,
    /// A validated value: a number or one of the menu's own enum strings.
    pub value: ParamValue,
    pub why: Why,
}

impl Excluded {
    /// Whether a validated value of `param` of `experiment` is this one:
    /// a number within `within` of it (a closed band, as the schema's
    /// exclusive bounds around it leave out; 0 is an exact match).
    pub fn matches(
        &self,
        experiment: MenuId,
        param: &str,
        value: &ParamValue,
        within: f64,
    ) -> bool {
        self.experiment == experiment && self.param == param && same(&self.value, value, within)
    }
}

/// How near an excluded value of a number parameter another value must be
/// to be the same proposal on the cycle's base: the planner's own rounding
/// (see [`crate::plan::Planner::same_within`]). The planner writes sizes in
/// whole MB, so on a 150 MB split every `trunk_fraction` within ±0.0033 of
/// the live 1/3 plans the live profile itself; excluding only the exact
/// value let a model propose 0.33334, 0.33335, ... one refused cycle each.
#[derive(Debug, Clone, PartialEq)]
pub struct Resolution {
    pub experiment: MenuId,
    pub param: String,
    /// Half the band's width, in the parameter's units; finite, ≥ 0.
    pub half_width: f64,
}

/// A closed range `[lo, hi]` of one number parameter that no proposal may
/// take on the base, and why (our own words): a side of a knob's line the
/// loop's search is done with there (see
/// [`crate::brain::line_search::done_ranges`]), or values the planner
/// refuses there whatever the heat ([`crate::plan::infeasible`]). A value
/// excluded one by one
/// lets a served model walk a done side value by value, one A/B within
/// noise each: the shoot-out's model loop spent 66-71 of its engine s on
/// 95-119 warm-set values (2026-12-05), and never converged.
#[derive(Debug, Clone, PartialEq)]
pub struct Closed {
    pub experiment: MenuId,
    pub param: String,
    /// Inclusive ends, in the parameter's units, within its bounds.
    pub lo: f64,
    pub hi: f64,
    pub why: String,
}

impl Closed {
    /// Whether a validated value of `param` of `experiment` lies in it.
    pub fn holds(&self, experiment: MenuId, param: &str, value: &ParamValue) -> bool {
        self.experiment == experiment
            && self.param == param
            && value.as_f64().is_some_and(|x| self.lo <= x && x <= self.hi)
    }
}

/// A whole entry no proposal may choose now, and why (our own words): an
/// entry without parameters, which no value exclusion can reach. The
/// schema leaves it out and the validator refuses it
/// ([`Rejection::Withheld`](super::Rejection::Withheld)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Withheld {
    pub experiment: MenuId,
    pub why: String,
}

/// The base's own values, from [`crate::plan::unchanged`].
pub fn base_values(unchanged: Vec<(MenuId, &'static str, ParamValue)>) -> Vec<Excluded> {
    unchanged
        .into_iter()
        .map(|(experiment, param, value)| Excluded {
            experiment,
            param: param.to_string(),
            value,
            why: Why::Live,
        })
        .collect()
}

/// The values of `proposal`, excluded for `why`.
pub fn of_proposal(proposal: &Proposal, why: &Why) -> Vec<Excluded> {
    proposal
        .params
        .iter()
        .map(|(param, value)| Excluded {
            experiment: proposal.experiment,
            param: param.clone(),
            value: value.clone(),
            why: why.clone(),
        })
        .collect()
}

/// What the ledger's rows exclude on a base: the experiments `decided` on
/// it (id, entry, parameters) and the answers the planner refused on it
/// (`planner_refused`: cycle, stored `{"experiment":..,"params":..}`),
/// newest first, read back through the validator of `menu` (the menu
/// before any exclusion): a stored row it no longer admits, after a menu
/// edit, is skipped.
pub fn from_ledger(
    menu: &Menu,
    decided: Vec<(i64, MenuId, Value)>,
    planner_refused: Vec<(i64, Value)>,
) -> Vec<Excluded> {
    let menu = &menu.clone().with_rationale_max_chars(0);
    let mut out = Vec::new();
    for (experiment, menu_id, params) in decided {
        let answer = json!({"experiment": menu_id, "params": params});
        if let Some(p) = read_back(menu, answer) {
            out.extend(of_proposal(&p, &Why::Decided { experiment }));
        }
    }
    for (cycle, parsed) in planner_refused {
        if let Some(p) = read_back(menu, parsed) {
            let why = Why::RefusedByPlanner { cycle: Some(cycle) };
            out.extend(of_proposal(&p, &why));
        }
    }
    out
}

/// A stored `{"experiment":..,"params":..}` as a proposal of `menu`.
fn read_back(menu: &Menu, mut stored: Value) -> Option<Proposal> {
    if stored.get("experiment") == Some(&json!(MenuId::Remeasure)) {
        return None;
    }
    stored
        .as_object_mut()?
        .insert("rationale".into(), json!(""));
    menu.validate_value(&stored).ok()
}

/// `draft_len 0`: the parameter and its value, for messages and the prompt.
pub fn named(param: &str, value: &ParamValue) -> String {
    format!("{param} {}", shown(value))
}

/// A value as the prompt and messages show it (no float noise).
pub fn shown(value: &ParamValue) -> String {
    match value {
        ParamValue::Integer(n) => n.to_string(),
        ParamValue::Number(x) => x.to_string(),
        ParamValue::Choice(c) => c.clone(),
    }
}

fn same(a: &ParamValue, b: &ParamValue, within: f64) -> bool {
    match (a, b) {
        (ParamValue::Choice(x), ParamValue::Choice(y)) => x == y,
        (ParamValue::Choice(_), _) | (_, ParamValue::Choice(_)) => false,
        (ParamValue::Integer(x), ParamValue::Integer(y)) => x == y,
        _ => match (a.as_f64(), b.as_f64()) {
            (Some(x), Some(y)) => (x - y).abs() <= within,
            _ => false,
        },
    }
}

/// The schema of `param` with `excluded` (its own excluded values, each
/// with the numbers within `within` of it) and the closed ranges `closed`
/// left out, or `None` when no value is left. Uses only what the simple
/// constrained decoders take: integer ranges, numbers with exclusive bounds
/// around each excluded point, string enums, `anyOf` of those.
pub fn param_schema(
    param: &Param,
    excluded: &[&ParamValue],
    within: f64,
    closed: &[(f64, f64)],
) -> Option<Value> {
    match &param.kind {
        ParamKind::Integer { min, max, .. } => {
            // Whole numbers cut out, as inclusive ranges.
            let mut cut: Vec<(i64, i64)> = excluded
                .iter()
                .filter_map(|v| v.as_i64())
                .map(|n| (n, n))
                .chain(
                    closed
                        .iter()
                        .map(|(lo, hi)| (lo.ceil() as i64, hi.floor() as i64))
                        .filter(|(lo, hi)| lo <= hi),
                )
                .filter(|(lo, hi)| hi >= min && lo <= max)
                .collect();
            cut.sort_unstable();
            let mut ranges = Vec::new();
            let mut lo = *min;
            for (a, b) in cut {
                if a > lo {
                    ranges.push((lo, a - 1));
                }
                lo = lo.max(b.saturating_add(1));
            }
            if lo <= *max {
                ranges.push((lo, *max));
            }
            let alts: Vec<Value> = ranges
                .into_iter()
                .map(|(a, b)| json!({"type": "integer", "minimum": a, "maximum": b}))
                .collect();
            one_or_any(alts)
        }
        ParamKind::Number { min, max, .. } => {
            // Each excluded value leaves out the closed band [x - within,
            // x + within]; overlapping bands merge.
            let mut cut: Vec<(f64, f64)> = excluded
                .iter()
                .filter_map(|v| v.as_f64())
                .map(|x| (x - within, x + within))
                .chain(closed.iter().copied())
                .filter(|(lo, hi)| hi >= min && lo <= max)
                .collect();
            cut.sort_by(|a, b| a.0.total_cmp(&b.0));
            let mut bands: Vec<(f64, f64)> = Vec::new();
            for (lo, hi) in cut {
                match bands.last_mut() {
                    Some(last) if lo <= last.1 => last.1 = last.1.max(hi),
                    _ => bands.push((lo, hi)),
                }
            }
            if bands.is_empty() {
                return Some(json!({"type": "number", "minimum": min, "maximum": max}));
            }
            // Pieces between the bands: [min, a0), (b0, a1), ..., (bn, max].
            // An open piece between two bands that differ only by rounding
            // (the live 0.3333333333333333 and a proposed 0.333333, with no
            // resolution) holds no number a constrained decoder writes
            // (tinyk3's writes 6 fraction digits), and the server refuses
            // the whole schema (HTTP 400, every cycle): such a sliver is
            // left out.
            let sliver = MIN_OPEN_PIECE * (max - min).max(1.0);
            let mut alts = Vec::new();
            let mut lo: (f64, bool) = (*min, false);
            for (a, b) in &bands {
                if lo.0 < *a && (!lo.1 || *a - lo.0 > sliver) {
                    alts.push(piece(lo, (*a, true)));
                }
                lo = (*b, true);
            }
            if lo.0 < *max || (lo.0 == *max && !lo.1) {
                alts.push(piece(lo, (*max, false)));
            }
            one_or_any(alts)
        }
        ParamKind::Enum { values } => {
            let left: Vec<&String> = values
                .iter()
                .filter(|v| {
                    !excluded
                        .iter()
                        .any(|x| matches!(x, ParamValue::Choice(c) if c == *v))
                })
                .collect();
            (!left.is_empty()).then(|| json!({"type": "string", "enum": left}))
        }
    }
}

/// The narrowest open piece a number's schema keeps, as a share of the
/// parameter's range (at least 1): wide enough to hold a number of 5
/// fraction digits, and far below any menu's step.
const MIN_OPEN_PIECE: f64 = 1e-5;

/// A number range; `true` marks an open (exclusive) end.
fn piece(lo: (f64, bool), hi: (f64, bool)) -> Value {
    let mut s = serde_json::Map::new();
    s.insert("type".into(), json!("number"));
    s.insert(
        if lo.1 { "exclusiveMinimum" } else { "minimum" }.into(),
        json!(lo.0),
    );
    s.insert(
        if hi.1 { "exclusiveMaximum" } else { "maximum" }.into(),
        json!(hi.0),
    );
    Value::Object(s)
}

fn one_or_any(mut alts: Vec<Value>) -> Option<Value> {
    match alts.len() {
        0 => None,
        1 => alts.pop(),
        _ => Some(json!({ "anyOf": alts })),
    }
}
