//! The prompt the served model sees: the stack as config describes it,
//! objective, live metrics, the live profile's knobs, noise floor, recent
//! experiments and the menu with its bounds and the values excluded on the
//! live profile. Deterministic text.
//!
//! Everything here comes from the orchestrator's own data. A refused answer
//! is reported back only through [`Rejection`]'s message, which never echoes
//! the model's strings, so the model's words never enter a prompt (and so
//! never enter the ledger's prompt column).

use std::fmt::Write as _;
use std::time::Duration;

use serde_json::Value;

use super::Situation;
use super::client::{Message, Role};
use crate::config::Config;
use crate::ledger::ExperimentOutcome;
use crate::menu::{Excluded, Menu, MenuEntry, MenuId, ParamKind, Rejection};
use crate::observe::LiveMetrics;
use crate::profile::{Knob, KnobValue};

/// The most excluded values listed per parameter; the schema leaves out
/// all of them, the prompt need not grow without bound.
const MAX_LISTED_EXCLUSIONS: usize = 16;

/// What the prompt says the stack is. Only config tells it: a stack whose
/// menu (after `[stack] unsupported`) has an expert lever, or whose config
/// gives `[stack] expert_bytes`, routes experts; any other is described
/// without them, since a dense model is no mixture of experts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StackDescription {
    /// `[stack] name`.
    pub name: String,
    pub experts: bool,
}

impl StackDescription {
    /// From the config and the stack's menu.
    pub fn of(config: &Config, menu: &Menu) -> StackDescription {
        let levers = menu.entries().iter().any(|e| {
            matches!(e.id, MenuId::RerankPins | MenuId::DeepenWarmSet)
                || e.touches.iter().any(|k| {
                    matches!(
                        k,
                        Knob::PinsFile | Knob::PinsCount | Knob::FarAddr | Knob::FarWarmSet
                    )
                })
        });
        StackDescription {
            name: config.stack.name.clone(),
            experts: levers || config.stack.expert_bytes.is_some(),
        }
    }

    fn phrase(&self) -> String {
        if self.experts {
            format!(
                "the tiered mixture-of-experts serving stack `{}`",
                self.name
            )
        } else {
            format!("the serving stack `{}`", self.name)
        }
    }
}

/// The noise floor as the proposers need it. The caller decides staleness
/// (it owns the clock and `noise_floor_max_age_s`).
#[derive(Debug, Clone, PartialEq)]
pub enum NoiseFloorState {
    /// No A/A measurement of this stack yet.
    Missing,
    Current {
        /// Relative change as a log ratio, after the configured clamp.
        value: f64,
        /// A/A pairs it rests on.
        pairs: u32,
        age: Duration,
        /// Older than `noise_floor_max_age_s`, or measured on another profile.
        stale: bool,
    },
    /// No valid floor, and none is due first: an A/B is judged against the
    /// bound `max_noise_floor` (log ratio) and measures a floor itself only
    /// when the bound cannot decide it.
    Bound { bound: f64 },
}

impl NoiseFloorState {
    /// Whether `remeasure` is due: no floor, or a stale one.
    pub fn needs_remeasure(&self) -> bool {
        match self {
            NoiseFloorState::Missing => true,
            NoiseFloorState::Current { stale, .. } => *stale,
            NoiseFloorState::Bound { .. } => false,
        }
    }
}

/// The fixed instructions: the role and the answer's shape, with the
/// stack as config describes it and the rationale's bound of the menu.
pub fn system_text(stack: &StackDescription, rationale_max_chars: usize) -> String {
    let rationale = match rationale_max_chars {
        0 => "\"\" (empty)".to_string(),
        n => format!("<at most {n} characters>"),
    };
    let stack = stack.phrase();
    format!(
        "You choose the next experiment for tuning {stack} toward its \
         seconds-per-token objective.\n\
         Answer with exactly one JSON object and nothing else: \
         {{\"experiment\": <a menu id>, \"params\": {{<that entry's parameters>}}, \
         \"rationale\": {rationale}}}.\n\
         Choose only from the menu, with every parameter inside its bounds. \
         The answer is checked in code; anything else is refused. \
         An experiment already decided on the current profile with the same \
         parameters is refused as a duplicate (remeasure excepted), and so is \
         a value listed as excluded: the live profile's own value changes \
         nothing."
    )
}

/// The situation: objective, metrics, floor, history and menu.
pub fn situation_text(s: &Situation<'_>) -> String {
    let mut t = String::new();
    objective(&mut t, s);
    metrics(&mut t, s.metrics, s.stack.experts);
    live_profile(&mut t, s.live_knobs);
    floor(&mut t, s.noise_floor);
    history(&mut t, s.history);
    t.push_str("\nThe menu (choose one):\n");
    for entry in s.menu.entries() {
        menu_entry(&mut t, s.menu, entry);
    }
    t
}

/// The follow-up after refused answers: our own messages, oldest first.
pub fn followup_text(refusals: &[Rejection]) -> String {
    let mut t = String::from("Your previous answer was refused:\n");
    for (i, r) in refusals.iter().enumerate() {
        let _ = writeln!(t, "{}. {}: {r}", i + 1, r.kind());
    }
    t.push_str(
        "Answer again with one JSON object that follows the schema: a menu id, \
         its parameters within their bounds, and a short rationale.",
    );
    t
}

/// The messages of one request: system, situation, and a follow-up when
/// earlier answers were refused.
pub fn messages(s: &Situation<'_>, refusals: &[Rejection]) -> Vec<Message> {
    let mut m = vec![
        Message::new(
            Role::System,
            system_text(s.stack, s.menu.rationale_max_chars()),
        ),
        Message::new(Role::User, situation_text(s)),
    ];
    if !refusals.is_empty() {
        m.push(Message::new(Role::User, followup_text(refusals)));
    }
    m
}

/// The messages as one text, for the ledger's prompt column.
pub fn render(messages: &[Message]) -> String {
    let mut t = String::new();
    for (i, m) in messages.iter().enumerate() {
        if i > 0 {
            t.push('\n');
        }
        let _ = writeln!(t, "[{}]", m.role.as_str());
        t.push_str(&m.content);
        if !m.content.ends_with('\n') {
            t.push('\n');
        }
    }
    t
}

fn objective(t: &mut String, s: &Situation<'_>) {
    let target = s.target_seconds_per_token;
    let _ = writeln!(t, "Objective: {} s/token or less.", num(target));
    match s.metrics.seconds_per_token {
        Some(live) if live.is_finite() && live > 0.0 => {
            let gap = live - target;
            if gap > 0.0 {
                let _ = writeln!(
                    t,
                    "Live: {} s/token, {} s/token ({}) slower than the objective.",
                    num(live),
                    num(gap),
                    pct(gap / target)
                );
            } else {
                let _ = writeln!(
                    t,
                    "Live: {} s/token, meeting the objective by {} s/token.",
                    num(live),
                    num(-gap)
                );
            }
        }
        _ => t.push_str("Live: seconds per token not available.\n"),
    }
}

/// A named metric, its value, and how to show it.
type MetricRow = (&'static str, Option<f64>, fn(f64) -> String);

/// The expert rows are left out for a stack without experts unless the
/// stack reports them anyway.
fn metrics(t: &mut String, m: &LiveMetrics, experts: bool) {
    t.push_str("\nLive metrics:\n");
    let rows: [(MetricRow, bool); 5] = [
        (("seconds per token", m.seconds_per_token, num), false),
        (
            (
                "tier residency (expert reads served from RAM)",
                m.tier_residency,
                share,
            ),
            true,
        ),
        (
            (
                "heat coverage (activations on pinned experts)",
                m.heat_coverage,
                share,
            ),
            true,
        ),
        (("far tier", m.far_available, far_state), true),
        (("draft acceptance", m.draft_acceptance, share), false),
    ];
    for ((name, value, show), of_experts) in rows {
        if of_experts && !experts && value.is_none() {
            continue;
        }
        let shown = value.map_or_else(|| "not available".to_string(), show);
        let _ = writeln!(t, "- {name}: {shown}");
    }
    for (name, value) in &m.other {
        let _ = writeln!(t, "- {name}: {}", num(*value));
    }
}

fn live_profile(t: &mut String, knobs: &[(Knob, KnobValue)]) {
    if knobs.is_empty() {
        return;
    }
    t.push_str("\nLive profile (the settings serving now; a candidate changes some):\n");
    for (knob, value) in knobs {
        let shown = match value {
            KnobValue::Text(s) if s.is_empty() => "\"\" (none)".to_string(),
            KnobValue::Text(s) => format!("{s:?}"),
            KnobValue::Number(x) => num(*x),
            KnobValue::Integer(n) => n.to_string(),
        };
        let _ = writeln!(t, "- {knob}: {shown}");
    }
}

fn floor(t: &mut String, f: &NoiseFloorState) {
    t.push('\n');
    match f {
        NoiseFloorState::Missing => t.push_str(
            "Noise floor: not measured yet; no difference can be judged until \
             remeasure has measured it.\n",
        ),
        NoiseFloorState::Bound { bound } => {
            let _ = writeln!(
                t,
                "Noise floor: none valid now, and none is needed first: an A/B is judged \
                 against the largest floor accepted ({}) and measures a floor itself only \
                 when that cannot decide.",
                pct_abs(*bound)
            );
        }
        NoiseFloorState::Current {
            value,
            pairs,
            age,
            stale,
        } => {
            let _ = writeln!(
                t,
                "Noise floor: {} (from {pairs} A/A pairs, measured {} ago){}.",
                pct_abs(*value),
                age_text(*age),
                if *stale {
                    "; stale, remeasure is due"
                } else {
                    ""
                }
            );
        }
    }
    t.push_str("Changes smaller than the floor are refused in both directions.\n");
}

fn history(t: &mut String, h: &[ExperimentOutcome]) {
    t.push_str("\nRecent experiments (newest first):\n");
    if h.is_empty() {
        t.push_str("- none yet\n");
    }
    for e in h {
        let by = e.proposer.map_or("the cycle", |p| p.as_str());
        let confirm = e
            .confirmation_of
            .map(|c| format!(", confirming #{c}"))
            .unwrap_or_default();
        let _ = write!(
            t,
            "- #{} {} {} by {by}{confirm}: ",
            e.experiment_id,
            e.menu_id,
            params_text(&e.parameters)
        );
        match e.verdict {
            None => t.push_str("being measured\n"),
            Some(v) => {
                t.push_str(v.as_str());
                if let Some(effect) = e.effect {
                    let _ = write!(t, ", effect {}", pct(effect.exp_m1()));
                }
                if let Some(i) = e.interval {
                    let _ = write!(t, " [{}, {}]", pct(i.low.exp_m1()), pct(i.high.exp_m1()));
                }
                if let Some(f) = e.noise_floor {
                    let _ = write!(t, ", floor {}", pct_abs(f));
                }
                if let Some(p) = e.pairs.filter(|p| *p > 0) {
                    let _ = write!(t, ", {p} pairs");
                }
                t.push('\n');
            }
        }
    }
    t.push_str("Effects are changes of seconds per token: negative is faster.\n");
}

fn menu_entry(t: &mut String, menu: &Menu, e: &MenuEntry) {
    let _ = writeln!(t, "\n## {}: {}", e.id, e.summary);
    t.push_str(e.prompt.trim_end());
    t.push('\n');
    if let Some(w) = menu.withheld(e.id) {
        let _ = writeln!(t, "Not offered now: {}. Do not choose it.", w.why);
    } else if !menu.offers(e.id) {
        t.push_str(
            "Every value of this entry is excluded on the live profile (listed below): \
             do not choose it.\n",
        );
    }
    if e.params.is_empty() {
        t.push_str("Parameters: none (\"params\": {}).\n");
        return;
    }
    t.push_str("Parameters:\n");
    for p in &e.params {
        let bounds = match &p.kind {
            ParamKind::Integer { min, max, step } => {
                format!("integer from {min} to {max} (suggested step {step})")
            }
            ParamKind::Number { min, max, step } => match step {
                Some(s) => format!(
                    "number from {} to {} (suggested step {})",
                    num(*min),
                    num(*max),
                    num(*s)
                ),
                None => format!("number from {} to {}", num(*min), num(*max)),
            },
            ParamKind::Enum { values } => format!("one of {}", values.join(", ")),
        };
        let _ = writeln!(t, "- {}: {bounds}; {}", p.name, p.doc);
        for c in menu
            .closed()
            .iter()
            .filter(|c| c.experiment == e.id && c.param == p.name)
        {
            let _ = writeln!(
                t,
                "  Closed on the live profile (refused if proposed): {} from {} to {}: every \
                 value {}",
                p.name,
                num(c.lo),
                num(c.hi),
                c.why
            );
        }
        let excluded: Vec<&Excluded> = menu
            .excluded()
            .iter()
            .filter(|x| x.experiment == e.id && x.param == p.name)
            .collect();
        if excluded.is_empty() {
            continue;
        }
        let _ = writeln!(t, "  Excluded on the live profile (refused if proposed):");
        let within = menu.same_within(e.id, &p.name);
        let band = if within > 0.0 {
            format!(" (and within {within:.2e} of it)")
        } else {
            String::new()
        };
        for x in excluded.iter().take(MAX_LISTED_EXCLUSIONS) {
            let _ = writeln!(
                t,
                "  - {}{band} {}",
                crate::menu::named_value(&x.param, &x.value),
                x.why
            );
        }
        if excluded.len() > MAX_LISTED_EXCLUSIONS {
            let _ = writeln!(t, "  - and {} more", excluded.len() - MAX_LISTED_EXCLUSIONS);
        }
    }
}

/// Stored parameters are validated values (numbers, menu enum strings), so
/// printing them repeats nothing of the model's text.
fn params_text(v: &Value) -> String {
    serde_json::to_string(v).unwrap_or_else(|_| "{}".to_string())
}

/// Up to four decimals, trailing zeros dropped: stable across platforms.
fn num(x: f64) -> String {
    if !x.is_finite() {
        return "not a finite number".to_string();
    }
    let s = format!("{x:.4}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" {
        "0".to_string()
    } else {
        s.to_string()
    }
}

fn share(x: f64) -> String {
    if x.is_finite() {
        format!("{:.1}%", x * 100.0)
    } else {
        num(x)
    }
}

fn pct(x: f64) -> String {
    if x.is_finite() {
        format!("{:+.2}%", x * 100.0)
    } else {
        num(x)
    }
}

/// A log-ratio floor as the relative change it allows either way.
fn pct_abs(log_ratio: f64) -> String {
    if log_ratio.is_finite() {
        format!("±{:.2}%", log_ratio.abs().exp_m1() * 100.0)
    } else {
        num(log_ratio)
    }
}

fn far_state(x: f64) -> String {
    if x >= 0.5 { "up" } else { "down" }.to_string()
}

fn age_text(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..120 => format!("{s} s"),
        120..7200 => format!("{} min", s / 60),
        7200..172_800 => format!("{} h", s / 3600),
        _ => format!("{} days", s / 86_400),
    }
}

#[cfg(test)]
#[path = "prompt_tests.rs"]
mod tests;
