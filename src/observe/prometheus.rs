//! A strict reader of the Prometheus text exposition format (version 0.0.4):
//! `name{label="value",...} value [timestamp]` lines, `#` comments and
//! `# HELP` / `# TYPE` metadata. Only what the orchestrator reads is kept:
//! samples by name and labels.

use std::collections::BTreeMap;

/// One sample line.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// Why an exposition could not be read; names the line.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("metrics line {line}: {problem}")]
pub struct ParseError {
    pub line: usize,
    pub problem: String,
}

/// Parses a whole exposition.
pub fn parse(text: &str) -> Result<Vec<Sample>, ParseError> {
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        out.push(parse_line(line).map_err(|problem| ParseError {
            line: i + 1,
            problem,
        })?);
    }
    Ok(out)
}

fn is_name_char(c: char, first: bool) -> bool {
    c.is_ascii_alphabetic() || c == '_' || c == ':' || (!first && c.is_ascii_digit())
}

fn parse_line(line: &str) -> Result<Sample, String> {
    let name_end = line
        .char_indices()
        .find(|&(i, c)| !is_name_char(c, i == 0))
        .map(|(i, _)| i)
        .unwrap_or(line.len());
    if name_end == 0 {
        return Err(format!("expected a metric name at the start of {line:?}"));
    }
    let name = line[..name_end].to_string();
    let mut rest = &line[name_end..];
    let mut labels = BTreeMap::new();
    if let Some(after) = rest.strip_prefix('{') {
        let (parsed, remaining) = parse_labels(after)?;
        labels = parsed;
        rest = remaining;
    }
    let mut fields = rest.split_whitespace();
    let value_text = fields
        .next()
        .ok_or_else(|| format!("metric {name} has no value"))?;
    let value = parse_value(value_text)
        .ok_or_else(|| format!("metric {name} has value {value_text:?}, not a number"))?;
    if let Some(ts) = fields.next()
        && ts.parse::<i64>().is_err()
    {
        return Err(format!(
            "metric {name} has timestamp {ts:?}, not an integer"
        ));
    }
    if fields.next().is_some() {
        return Err(format!(
            "metric {name} has text after its value and timestamp"
        ));
    }
    Ok(Sample {
        name,
        labels,
        value,
    })
}

fn parse_value(s: &str) -> Option<f64> {
    match s {
        "+Inf" | "Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        "NaN" => Some(f64::NAN),
        _ => s.parse().ok(),
    }
}

/// Parses `a="x",b="y"}` and returns the labels and what follows the brace.
fn parse_labels(mut s: &str) -> Result<(BTreeMap<String, String>, &str), String> {
    let mut labels = BTreeMap::new();
    loop {
        s = s.trim_start();
        if let Some(rest) = s.strip_prefix('}') {
            return Ok((labels, rest));
        }
        let eq = s.find('=').ok_or("a label without `=`")?;
        let key = s[..eq].trim().to_string();
        if key.is_empty()
            || !key
                .chars()
                .enumerate()
                .all(|(i, c)| is_name_char(c, i == 0) && c != ':')
        {
            return Err(format!("bad label name {key:?}"));
        }
        s = s[eq + 1..].trim_start();
        s = s.strip_prefix('"').ok_or("a label value must be quoted")?;
        let mut value = String::new();
        let mut chars = s.char_indices();
        let end = loop {
            match chars.next() {
                Some((i, '"')) => break i,
                Some((_, '\\')) => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, c)) => value.push(c),
                    None => return Err("an unfinished escape in a label value".into()),
                },
                Some((_, c)) => value.push(c),
                None => return Err("an unclosed label value".into()),
            }
        };
        labels.insert(key, value);
        s = s[end + 1..].trim_start();
        if let Some(rest) = s.strip_prefix(',') {
            s = rest;
        } else if !s.starts_with('}') {
            return Err("expected `,` or `}` after a label".into());
        }
    }
}

/// The value of `name`: a sample without labels, or the sum over its labels
/// (how a counter split by label reads as one number).
pub fn value(samples: &[Sample], name: &str) -> Option<f64> {
    let matching: Vec<f64> = samples
        .iter()
        .filter(|s| s.name == name)
        .map(|s| s.value)
        .collect();
    (!matching.is_empty()).then(|| matching.iter().sum())
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = r#"# HELP tinyk3_seconds_per_token Seconds per token, last requests.
# TYPE tinyk3_seconds_per_token gauge
tinyk3_seconds_per_token 0.0421
tinyk3_tier_hits_total{tier="pinned"} 10
tinyk3_tier_hits_total{tier="cache",note="a \"quoted\" \\ one"} 5 1700000000000
llamacpp:predicted_tokens_seconds 23.5
weird_inf +Inf
"#;

    #[test]
    fn parses_names_labels_values_and_timestamps() {
        let s = parse(TEXT).unwrap();
        assert_eq!(s.len(), 5);
        assert_eq!(s[0].name, "tinyk3_seconds_per_token");
        assert_eq!(s[0].value, 0.0421);
        assert_eq!(s[2].labels["note"], "a \"quoted\" \\ one");
        assert_eq!(value(&s, "tinyk3_tier_hits_total"), Some(15.0));
        assert_eq!(value(&s, "llamacpp:predicted_tokens_seconds"), Some(23.5));
        assert_eq!(value(&s, "absent"), None);
        assert!(s[4].value.is_infinite());
    }

    #[test]
    fn garbage_is_refused_with_its_line() {
        for (text, needle) in [
            ("<html>oops</html>", "line 1"),
            ("ok 1\nmetric_without_value\n", "line 2"),
            ("m{a=\"x\" 1", "expected `,` or `}`"),
            ("m{a=x} 1", "quoted"),
            ("m one", "not a number"),
            ("m 1 2 3", "text after"),
        ] {
            let err = parse(text).unwrap_err().to_string();
            assert!(err.contains(needle), "{text:?}: {err}");
        }
    }
}
