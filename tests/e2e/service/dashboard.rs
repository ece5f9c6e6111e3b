//! The Grafana dashboard (`deploy/grafana/orchestrator.json`) queries only
//! metrics the daemon exports: every metric name in its PromQL is checked
//! against a live scrape of the real daemon's endpoint on the embedded
//! default.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use crate::faults::Daemon;

use super::{scrape_after_first_cycle, tiny_demo};

const DASHBOARD: &str = "deploy/grafana/orchestrator.json";

/// Every PromQL expression of a dashboard: each panel's targets (rows'
/// panels too) and the query variables' queries.
fn expressions(dashboard: &Value) -> Vec<String> {
    fn panels(v: &Value, out: &mut Vec<String>) {
        for p in v.as_array().into_iter().flatten() {
            for t in p["targets"].as_array().into_iter().flatten() {
                if let Some(e) = t["expr"].as_str() {
                    out.push(e.to_string());
                }
            }
            panels(&p["panels"], out);
        }
    }
    let mut out = Vec::new();
    panels(&dashboard["panels"], &mut out);
    for var in dashboard["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
    {
        if var["type"] == "query" {
            for q in [&var["definition"], &var["query"], &var["query"]["query"]] {
                if let Some(q) = q.as_str() {
                    out.extend(variable_query(q));
                }
            }
        }
    }
    out
}

/// The PromQL inside a Grafana variable query: `label_values(SELECTOR,
/// LABEL)` reads SELECTOR (`label_values(LABEL)` reads no metric);
/// anything else is PromQL itself.
fn variable_query(q: &str) -> Option<String> {
    match q.trim().strip_prefix("label_values(") {
        Some(args) => {
            let args = args.trim_end().strip_suffix(')')?;
            args.rsplit_once(',')
                .map(|(selector, _label)| selector.to_string())
        }
        None => Some(q.to_string()),
    }
}

/// PromQL's functions and aggregations, and the keywords that may stand where a metric name could.
const FUNCTIONS: &[&str] = &[
    "abs",
    "absent",
    "avg",
    "avg_over_time",
    "ceil",
    "changes",
    "clamp_max",
    "clamp_min",
    "count",
    "count_over_time",
    "delta",
    "deriv",
    "exp",
    "floor",
    "histogram_quantile",
    "idelta",
    "increase",
    "irate",
    "label_replace",
    "last_over_time",
    "ln",
    "max",
    "max_over_time",
    "min",
    "min_over_time",
    "rate",
    "resets",
    "round",
    "scalar",
    "sort",
    "sort_desc",
    "sqrt",
    "stddev",
    "sum",
    "sum_over_time",
    "time",
    "topk",
    "bottomk",
    "vector",
    "quantile",
    "quantile_over_time",
];
const KEYWORDS: &[&str] = &["and", "or", "unless", "bool", "offset", "inf", "nan"];
/// Keywords followed by a parenthesised list of label names.
const LABEL_LISTS: &[&str] = &[
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
];

/// The metric names an expression reads. A small PromQL lexer: strings,
/// label matchers `{...}`, ranges `[...]`, numbers and Grafana's `$vars`
/// are skipped; an identifier before `(` must be a known function (a typo
/// there fails too); `by (...)` and its kin hold label names.
fn metric_names(expr: &str) -> Result<BTreeSet<String>, String> {
    let chars: Vec<char> = expr.chars().collect();
    let mut names = BTreeSet::new();
    let mut i = 0;
    let skip_to = |i: &mut usize, close: char| {
        while *i < chars.len() && chars[*i] != close {
            if chars[*i] == '"' {
                *i += 1;
                while *i < chars.len() && chars[*i] != '"' {
                    *i += if chars[*i] == '\\' { 2 } else { 1 };
                }
            }
            *i += 1;
        }
        *i += 1;
    };
    while i < chars.len() {
        let c = chars[i];
        if c == '"' || c == '\'' {
            i += 1;
            while i < chars.len() && chars[i] != c {
                i += if chars[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
        } else if c == '{' {
            skip_to(&mut i, '}');
        } else if c == '[' {
            skip_to(&mut i, ']');
        } else if c == '$' || c.is_ascii_digit() || c == '.' {
            // A variable, a number or a duration: one word.
            i += 1;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || "_.".contains(chars[i])) {
                i += 1;
            }
        } else if c.is_ascii_alphabetic() || c == '_' || c == ':' {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || "_:".contains(chars[i])) {
                i += 1;
            }
            let word: String = chars[start..i].iter().collect();
            let mut next = i;
            while next < chars.len() && chars[next].is_whitespace() {
                next += 1;
            }
            let lower = word.to_ascii_lowercase();
            if LABEL_LISTS.contains(&lower.as_str()) {
                if chars.get(next) == Some(&'(') {
                    i = next;
                    skip_to(&mut i, ')');
                }
            } else if chars.get(next) == Some(&'(') || starts_clause(&chars[next..]) {
                // A call, or an aggregation with its `by (...)` first.
                if !FUNCTIONS.contains(&word.as_str()) {
                    return Err(format!("unknown function {word:?} in {expr:?}"));
                }
            } else if !KEYWORDS.contains(&lower.as_str()) {
                names.insert(word);
            }
        } else {
            i += 1;
        }
    }
    Ok(names)
}

/// Whether `rest` opens with `by` or `without` and a parenthesis: what
/// follows an aggregation written `sum by (label) (...)`.
fn starts_clause(rest: &[char]) -> bool {
    let word: String = rest
        .iter()
        .take_while(|c| c.is_ascii_alphabetic())
        .collect();
    let after = rest[word.len()..].iter().find(|c| !c.is_whitespace());
    matches!(word.to_ascii_lowercase().as_str(), "by" | "without") && after == Some(&'(')
}

/// The metric families an exposition declares or has samples of.
fn exported(exposition: &str) -> BTreeSet<String> {
    exposition
        .lines()
        .filter_map(|l| match l.strip_prefix("# TYPE ") {
            Some(rest) => rest.split_whitespace().next(),
            None if l.starts_with('#') || l.trim().is_empty() => None,
            None => l.split(['{', ' ']).next(),
        })
        .map(str::to_string)
        .collect()
}

/// The dashboard's metric names that `exposition` lacks.
fn missing(dashboard: &Value, exposition: &str) -> Result<Vec<String>, String> {
    let have = exported(exposition);
    let mut wanted = BTreeSet::new();
    for e in expressions(dashboard) {
        wanted.extend(metric_names(&e)?);
    }
    Ok(wanted.into_iter().filter(|n| !have.contains(n)).collect())
}

#[test]
fn the_lexer_finds_metric_names_and_nothing_else() {
    let names = |e: &str| metric_names(e).unwrap().into_iter().collect::<Vec<_>>();
    assert_eq!(
        names(
            r#"sum by (verdict) (increase(orchestrator_cycles_total{instance=~"$instance", x="a{b}"}[$__range]))"#
        ),
        ["orchestrator_cycles_total"]
    );
    assert_eq!(
        names(r#"100 * (exp(orchestrator_noise_floor{instance=~"$instance"}) - 1) > bool 0.5e1"#),
        ["orchestrator_noise_floor"]
    );
    assert_eq!(
        variable_query("label_values(orchestrator_target_seconds_per_token{a=\"b,c\"}, instance)")
            .map(|q| names(&q)),
        Some(vec!["orchestrator_target_seconds_per_token".to_string()])
    );
    assert_eq!(variable_query("label_values(instance)"), None);
    assert_eq!(
        names("a / on (instance) group_left b offset 5m or up"),
        ["a", "b", "up"]
    );
    assert!(metric_names("sume(orchestrator_stages)").is_err());
}

/// The check itself: a dashboard naming a series the daemon lacks fails.
#[test]
fn a_dashboard_query_of_an_unexported_metric_is_caught() {
    let dashboard = serde_json::json!({
        "panels": [{"type": "row", "panels": [{"targets": [
            {"expr": "orchestrator_stages{state=\"staged\"}"},
            {"expr": "rate(orchestrator_engine_share_ratio[5m])"}
        ]}]}],
        "templating": {"list": []}
    });
    let exposition = "# HELP orchestrator_stages x\n# TYPE orchestrator_stages gauge\n";
    assert_eq!(
        missing(&dashboard, exposition).unwrap(),
        ["orchestrator_engine_share_ratio"]
    );
}

#[test]
fn the_dashboard_queries_only_metrics_the_running_daemon_exports() {
    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(DASHBOARD)).unwrap(),
    )
    .unwrap_or_else(|e| panic!("{DASHBOARD} is not JSON: {e}"));
    let queried: BTreeSet<String> = expressions(&dashboard)
        .iter()
        .flat_map(|e| metric_names(e).unwrap())
        .collect();
    assert!(
        queried.len() >= 10 && queried.iter().all(|n| n.starts_with("orchestrator_")),
        "the dashboard reads the daemon's own series: {queried:?}"
    );

    let _heavy = crate::common::heavy();
    let demo = tiny_demo();
    let mut daemon = Daemon::start_as_service(&demo, &[]);
    let scrape = scrape_after_first_cycle(&demo, &mut daemon);
    let samples = orchestrator::observe::prometheus::parse(&scrape).unwrap();
    assert!(
        samples
            .iter()
            .any(|s| s.name == "orchestrator_cycles_total" && s.value >= 1.0),
        "the cycle is counted:\n{scrape}"
    );
    assert!(
        samples.iter().any(|s| s.name == "orchestrator_stages"),
        "the stages by state are read at start:\n{scrape}"
    );
    let lacking = missing(&dashboard, &scrape).unwrap();
    assert!(
        lacking.is_empty(),
        "{DASHBOARD} queries {lacking:?}, which the daemon does not export:\n{scrape}"
    );
    daemon.stop(Duration::from_secs(120));
}
