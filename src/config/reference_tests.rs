//! `docs/config.md` against the deserializer: every key a table accepts has
//! its line there, and every line names a key that exists. The keys come
//! from serde's own refusal of an unknown key in each table (the list
//! `deny_unknown_fields` prints, which [`super::hint`] reads too), so no
//! list of keys is kept by hand and a new key cannot ship undocumented.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use super::{Config, hint};

/// The tables of the reference, as their headers read. `[stack.metrics.names]`
/// is a free map of series names, not a table of keys.
const TABLES: &[&str] = &[
    "[objective]",
    "[ledger]",
    "[menu]",
    "[stack]",
    "[stack.bench]",
    "[[stack.bench.optional]]",
    "[stack.surface]",
    "[stack.metrics]",
    "[stack.shadow]",
    "[[stack.shadow.optional]]",
    "[model]",
    "[cycle]",
    "[measure]",
    "[daemon]",
    "[embedded]",
];

fn read(relative: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(relative);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The keys `header`'s table accepts: the shipped config with an unknown key
/// put into that table, and serde's refusal of it read back.
fn accepted_keys(header: &str) -> BTreeSet<String> {
    let text = read("config.toml");
    let probe = "zz_not_a_key = 0";
    let with_probe = match text.find(&format!("\n{header}\n")) {
        Some(at) => {
            let end = at + header.len() + 2;
            format!("{}{probe}\n{}", &text[..end], &text[end..])
        }
        // A table the shipped file leaves out, added at the end.
        None => format!("{text}\n{header}\n{probe}\n"),
    };
    let message = Config::parse(&with_probe, Path::new("/etc/orch/config.toml"))
        .expect_err("an unknown key is refused")
        .to_string();
    let at = message
        .find("unknown field `")
        .unwrap_or_else(|| panic!("{header}: not serde's refusal: {message}"));
    let (bad, keys) = hint::unknown_field(&message[at..])
        .unwrap_or_else(|| panic!("{header}: unreadable refusal: {message}"));
    assert_eq!(bad, "zz_not_a_key", "{header}: {message}");
    assert!(!keys.is_empty(), "{header} lists no keys: {message}");
    keys.into_iter().map(str::to_string).collect()
}

/// The keys `docs/config.md` documents per table: the first cell of each
/// table row under a `## `[t]`` or `### `[t]`` heading (a heading may name
/// two tables that share one type, joined by "and").
fn documented_keys() -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut current: Vec<String> = Vec::new();
    for line in read("docs/config.md").lines() {
        if line.starts_with('#') {
            current = line
                .split('`')
                .skip(1)
                .step_by(2)
                .filter(|h| h.starts_with('['))
                .map(str::to_string)
                .collect();
            continue;
        }
        let Some(row) = line.strip_prefix("| `") else {
            continue;
        };
        let key = row.split('`').next().unwrap_or_default().to_string();
        for table in &current {
            out.entry(table.clone()).or_default().insert(key.clone());
        }
    }
    out
}

/// A key that is itself a documented sub-table (`bench` of `[stack]`).
fn is_sub_table(header: &str, key: &str) -> bool {
    let inner = header.trim_matches(|c| c == '[' || c == ']');
    let child = format!("{inner}.{key}");
    TABLES
        .iter()
        .any(|t| t.trim_matches(|c| c == '[' || c == ']') == child)
}

#[test]
fn every_key_of_every_table_has_its_line_in_docs_config_md() {
    let documented = documented_keys();
    let mut problems = Vec::new();
    for header in TABLES {
        let accepted: BTreeSet<String> = accepted_keys(header)
            .into_iter()
            .filter(|k| !is_sub_table(header, k) || k == "optional")
            .collect();
        let empty = BTreeSet::new();
        let docs = documented.get(*header).unwrap_or(&empty);
        for key in accepted.difference(docs) {
            problems.push(format!(
                "{header} {key}: no line in docs/config.md (add its type, default, unit and meaning)"
            ));
        }
        for key in docs.difference(&accepted) {
            problems.push(format!(
                "{header} {key}: documented in docs/config.md but not a key of the table"
            ));
        }
    }
    for table in documented.keys() {
        if !TABLES.contains(&table.as_str()) {
            problems.push(format!(
                "docs/config.md documents {table}, which this test does not check"
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_reference_reads_a_known_table_whole() {
    // The check above is only as good as its two readers: both see all of
    // [cycle], whose keys are known here.
    let keys = accepted_keys("[cycle]");
    for key in ["interval_s", "proposer", "backoff_max_s", "build_on_staged"] {
        assert!(keys.contains(key), "{keys:?}");
    }
    assert!(documented_keys()["[cycle]"].contains("interval_s"));
}
