//! What a run produced: the bench JSON parsed and checked, and the output
//! hash the hash gate compares.
//!
//! The output hash is FNV-1a 64 (Fowler, Noll, Vo; the 64-bit offset basis
//! and prime of the reference implementation) written as 16 lowercase hex
//! digits. Over token ids it hashes each id as a `u32` in little-endian
//! order, as the kimi-k3-in-c engine family does; over texts, each text's
//! length as a `u64` little-endian then its UTF-8 bytes, so `["ab", "c"]`
//! and `["a", "bc"]` differ.

use std::fmt;

use serde_json::{Map, Value};

use crate::ledger::TokenParts;

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

/// FNV-1a 64 of `bytes`, continuing from `state` (start at [`fnv1a64`]).
fn fnv1a64_continue(mut state: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        state ^= u64::from(b);
        state = state.wrapping_mul(FNV_PRIME);
    }
    state
}

/// FNV-1a 64 of `bytes`.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    fnv1a64_continue(FNV_OFFSET, bytes)
}

/// The output of a run as the hash gate sees it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct OutputHash(String);

impl OutputHash {
    /// The hash of generated token ids (`u32` little-endian each).
    pub fn of_ids(ids: &[u32]) -> OutputHash {
        let h = ids
            .iter()
            .fold(FNV_OFFSET, |s, id| fnv1a64_continue(s, &id.to_le_bytes()));
        OutputHash(format!("{h:016x}"))
    }

    /// The hash of generated texts, in prompt order.
    pub fn of_texts<S: AsRef<str>>(texts: &[S]) -> OutputHash {
        let h = texts.iter().fold(FNV_OFFSET, |s, t| {
            let t = t.as_ref().as_bytes();
            let s = fnv1a64_continue(s, &(t.len() as u64).to_le_bytes());
            fnv1a64_continue(s, t)
        });
        OutputHash(format!("{h:016x}"))
    }

    /// A hash the engine reported itself (kept as written, trimmed).
    pub fn reported(text: &str) -> Option<OutputHash> {
        let t = text.trim();
        (!t.is_empty()).then(|| OutputHash(t.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for OutputHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// A bench run's JSON, checked.
#[derive(Debug, Clone, PartialEq)]
pub struct BenchReport {
    /// Finite and > 0.
    pub seconds_per_token: f64,
    /// `tokens`, else the number of generated ids, when known.
    pub tokens: Option<u64>,
    pub output_hash: OutputHash,
    /// The measured parts of a token, where the engine reports them
    /// (optional fields; absent or `null` is `None`).
    pub parts: TokenParts,
    /// Everything else the engine said (tier hits, bytes read, RSS, ...).
    pub extras: Map<String, Value>,
}

/// Why a bench's JSON is not a valid run.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum OutputError {
    #[error(
        "its output is not a JSON object ({problem}); the bench command must print or write one JSON object"
    )]
    NotJson { problem: String },
    #[error(
        "it printed no line of JSON on stdout; set [stack.bench] output = \"file\" if it writes {{out}} instead"
    )]
    NoJsonLine,
    #[error("`seconds_per_token` is missing or not a number; a valid run reports it")]
    MissingTime,
    #[error("`seconds_per_token` is {value}; a valid run reports a finite number > 0")]
    BadTime { value: f64 },
    #[error(
        "it reported neither `output_hash` nor `generated_ids`, so the hash gate cannot check its output"
    )]
    NoOutput,
    #[error("`generated_ids` {problem}; expected a non-empty array of token ids (0 to 4294967295)")]
    BadIds { problem: String },
    #[error(
        "`{field}` is {value}; expected {expected}, or leave the field out if the engine does not measure it"
    )]
    BadPart {
        field: &'static str,
        value: String,
        expected: &'static str,
    },
}

/// Parses and checks one bench JSON object.
pub fn parse_report(text: &str) -> Result<BenchReport, OutputError> {
    let value: Value = serde_json::from_str(text.trim()).map_err(|e| OutputError::NotJson {
        problem: e.to_string(),
    })?;
    let Value::Object(mut extras) = value else {
        return Err(OutputError::NotJson {
            problem: "a JSON value other than an object".into(),
        });
    };
    let spt = extras
        .remove("seconds_per_token")
        .ok_or(OutputError::MissingTime)?;
    let seconds_per_token = spt.as_f64().ok_or(OutputError::MissingTime)?;
    if !(seconds_per_token.is_finite() && seconds_per_token > 0.0) {
        return Err(OutputError::BadTime {
            value: seconds_per_token,
        });
    }
    let ids = match extras.get("generated_ids") {
        None | Some(Value::Null) => None,
        Some(v) => Some(ids(v)?),
    };
    let reported = match extras.get("output_hash") {
        Some(Value::String(s)) => OutputHash::reported(s),
        _ => None,
    };
    // An engine's own hash wins: it may hash more than the ids (or text).
    let output_hash = reported
        .or_else(|| ids.as_deref().map(OutputHash::of_ids))
        .ok_or(OutputError::NoOutput)?;
    let tokens = extras
        .get("tokens")
        .and_then(Value::as_u64)
        .or(ids.map(|i| i.len() as u64));
    let parts = parts(&extras)?;
    Ok(BenchReport {
        seconds_per_token,
        tokens,
        output_hash,
        parts,
        extras,
    })
}

/// Seconds of a token: finite and not negative.
const SECONDS: &str = "a finite number of seconds >= 0";
/// A share: a number from 0 to 1.
const SHARE: &str = "a number from 0 to 1";

/// One optional part: absent or `null` is `None`; anything else must be a
/// number in range, because a part the projection multiplies must be real.
fn part(
    extras: &Map<String, Value>,
    field: &'static str,
    expected: &'static str,
) -> Result<Option<f64>, OutputError> {
    let bad = |v: &Value| OutputError::BadPart {
        field,
        value: v.to_string(),
        expected,
    };
    let v = match extras.get(field) {
        None | Some(Value::Null) => return Ok(None),
        Some(v) => v,
    };
    let x = v.as_f64().ok_or_else(|| bad(v))?;
    let ok = x.is_finite() && x >= 0.0 && (expected != SHARE || x <= 1.0);
    if ok { Ok(Some(x)) } else { Err(bad(v)) }
}

/// The measured parts of a token an engine may report: the trunk and expert
/// terms, the far tier's hit share and the draft acceptance (the names of
/// tinyk3's bench JSON; see its README).
fn parts(extras: &Map<String, Value>) -> Result<TokenParts, OutputError> {
    Ok(TokenParts {
        trunk_seconds_per_token: part(extras, "trunk_seconds_per_token", SECONDS)?,
        expert_seconds_per_token: part(extras, "expert_seconds_per_token", SECONDS)?,
        far_hit_share: part(extras, "far_hit_share", SHARE)?,
        draft_acceptance: part(extras, "draft_acceptance", SHARE)?,
    })
}

fn ids(v: &Value) -> Result<Vec<u32>, OutputError> {
    let bad = |problem: String| OutputError::BadIds { problem };
    let arr = v
        .as_array()
        .ok_or_else(|| bad(format!("is {v}, not an array")))?;
    if arr.is_empty() {
        return Err(bad("is empty".into()));
    }
    arr.iter()
        .enumerate()
        .map(|(i, x)| {
            x.as_u64()
                .and_then(|n| u32::try_from(n).ok())
                .ok_or_else(|| bad(format!("[{i}] is {x}")))
        })
        .collect()
}

/// The last line of `stdout` that parses as a JSON object.
pub fn last_json_line(stdout: &str) -> Option<&str> {
    stdout
        .lines()
        .rev()
        .map(str::trim)
        .find(|l| l.starts_with('{') && serde_json::from_str::<Map<String, Value>>(l).is_ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a64_matches_the_reference_vectors() {
        // From the FNV reference test suite.
        assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a64(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn ids_hash_as_u32_little_endian() {
        let bytes: Vec<u8> = [1u32, 258].iter().flat_map(|i| i.to_le_bytes()).collect();
        assert_eq!(
            OutputHash::of_ids(&[1, 258]).as_str(),
            format!("{:016x}", fnv1a64(&bytes))
        );
        assert_eq!(OutputHash::of_ids(&[1, 258]).as_str().len(), 16);
        assert_ne!(OutputHash::of_ids(&[1, 258]), OutputHash::of_ids(&[258, 1]));
        assert_ne!(
            OutputHash::of_texts(&["ab", "c"]),
            OutputHash::of_texts(&["a", "bc"])
        );
    }

    #[test]
    fn a_valid_report_keeps_its_extras() {
        let r = parse_report(
            r#"{"generated_ids":[5,6,7],"seconds_per_token":0.012,"hits":{"cache":3}}"#,
        )
        .unwrap();
        assert_eq!(r.seconds_per_token, 0.012);
        assert_eq!(r.tokens, Some(3));
        assert_eq!(r.output_hash, OutputHash::of_ids(&[5, 6, 7]));
        assert_eq!(r.extras["hits"]["cache"], 3);
        let r = parse_report(r#"{"output_hash":"abc","seconds_per_token":1}"#).unwrap();
        assert_eq!(r.output_hash.as_str(), "abc");
        // A stack that measures no parts (kimi-k3-in-c, llama-server) has none.
        assert_eq!(r.parts, TokenParts::default());
    }

    #[test]
    fn measured_parts_are_read_when_present() {
        let r = parse_report(
            r#"{"generated_ids":[1],"seconds_per_token":0.5,"trunk_seconds_per_token":0.1,
                "expert_seconds_per_token":0.35,"far_hit_share":0.25,"draft_acceptance":null}"#,
        )
        .unwrap();
        assert_eq!(
            r.parts,
            TokenParts {
                trunk_seconds_per_token: Some(0.1),
                expert_seconds_per_token: Some(0.35),
                far_hit_share: Some(0.25),
                draft_acceptance: None,
            }
        );
    }

    #[test]
    fn a_bad_part_is_refused_naming_the_field() {
        for (field, value) in [
            ("trunk_seconds_per_token", "-0.1"),
            ("expert_seconds_per_token", "\"fast\""),
            ("far_hit_share", "1.5"),
            ("draft_acceptance", "-1"),
        ] {
            let text =
                format!(r#"{{"generated_ids":[1],"seconds_per_token":0.5,"{field}":{value}}}"#);
            let err = parse_report(&text).unwrap_err().to_string();
            assert!(
                err.contains(field) && err.contains("leave the field out"),
                "{err}"
            );
        }
    }

    #[test]
    fn invalid_reports_say_what_is_wrong() {
        let cases = [
            ("not json", "not a JSON object"),
            ("[1,2]", "not a JSON object"),
            (r#"{"generated_ids":[1]}"#, "missing"),
            (
                r#"{"generated_ids":[1],"seconds_per_token":0}"#,
                "finite number > 0",
            ),
            (
                r#"{"generated_ids":[1],"seconds_per_token":-1}"#,
                "finite number > 0",
            ),
            (r#"{"seconds_per_token":0.1}"#, "neither"),
            (
                r#"{"generated_ids":[],"seconds_per_token":0.1}"#,
                "is empty",
            ),
            (
                r#"{"generated_ids":[1,-2],"seconds_per_token":0.1}"#,
                "[1] is -2",
            ),
            (
                r#"{"generated_ids":"x","seconds_per_token":0.1}"#,
                "not an array",
            ),
        ];
        for (text, needle) in cases {
            let err = parse_report(text).unwrap_err().to_string();
            assert!(err.contains(needle), "{text}: {err}");
        }
        // JSON has no NaN or infinity literal; a huge exponent overflows.
        assert!(parse_report(r#"{"generated_ids":[1],"seconds_per_token":1e999}"#).is_err());
    }

    #[test]
    fn last_json_line_skips_logs_and_garbage() {
        let out = "loading\n{\"a\":1}\n{\"b\":2}\nbye {\n";
        assert_eq!(last_json_line(out), Some("{\"b\":2}"));
        assert_eq!(last_json_line("nothing here\n[1]\n"), None);
    }
}
