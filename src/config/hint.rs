//! The hint after an unknown key: the nearest key of the same table.
//!
//! Every table is `#[serde(deny_unknown_fields)]`, and serde's refusal
//! already lists the keys that table accepts ("unknown field `x`, expected
//! one of `a`, `b`"), so the candidates come from the types themselves: no
//! list of keys is kept by hand, and a key of another table is never
//! suggested.

/// `; did you mean `key`?` for an unknown key close to one its table
/// accepts, a fix for one that is not, and nothing for any other message.
pub(super) fn hint(message: &str) -> String {
    let Some((bad, expected)) = unknown_field(message) else {
        return String::new();
    };
    match nearest(bad, &expected) {
        Some(good) => format!("; did you mean `{good}`?"),
        None => {
            "; remove it (see the comments in the default config.toml for valid keys)".to_string()
        }
    }
}

/// The unknown key and the keys its table accepts, read from serde's
/// message (`serde::de::Error::unknown_field`): "expected `a`", "expected
/// `a` or `b`", "expected one of `a`, `b`, ...", or "there are no fields".
pub(super) fn unknown_field(message: &str) -> Option<(&str, Vec<&str>)> {
    let rest = message.strip_prefix("unknown field `")?;
    let Some((bad, expected)) = rest.split_once("`, expected ") else {
        let (bad, _) = rest.split_once('`')?;
        return Some((bad, Vec::new()));
    };
    // Names sit between backticks: every second piece.
    let names = expected.split('`').skip(1).step_by(2).collect();
    Some((bad, names))
}

/// The key of `known` closest to `bad` in edit distance, if it is close
/// enough to be a typo.
pub(super) fn nearest<'a>(bad: &str, known: &[&'a str]) -> Option<&'a str> {
    known
        .iter()
        .map(|k| (edit_distance(bad, k), *k))
        .filter(|(d, k)| *d <= (k.len().max(bad.len()) / 3).max(2))
        .min()
        .map(|(_, k)| k)
}

/// Levenshtein distance, two rows.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != *cb);
            cur.push(sub.min(prev[j + 1] + 1).min(cur[j] + 1));
        }
        prev = cur;
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn edit_distance_is_levenshtein() {
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(
            nearest("min_pair", &["max_pairs", "min_pairs"]),
            Some("min_pairs")
        );
        assert_eq!(nearest("zzzzzzzzzzzz", &["min_pairs"]), None);
    }

    #[test]
    fn every_form_of_serdes_refusal_is_read() {
        let one_of =
            "unknown field `intervall_s`, expected one of `interval_s`, `proposer`, `history`";
        assert_eq!(
            unknown_field(one_of),
            Some(("intervall_s", vec!["interval_s", "proposer", "history"]))
        );
        assert_eq!(
            unknown_field("unknown field `wen`, expected `when` or `args`"),
            Some(("wen", vec!["when", "args"]))
        );
        assert_eq!(
            unknown_field("unknown field `dirr`, expected `dir`"),
            Some(("dirr", vec!["dir"]))
        );
        assert_eq!(
            unknown_field("unknown field `x`, there are no fields"),
            Some(("x", vec![]))
        );
        assert_eq!(unknown_field("missing field `name`"), None);
    }

    #[test]
    fn the_hint_comes_from_the_tables_own_keys() {
        assert_eq!(
            hint("unknown field `dirr`, expected `dir`"),
            "; did you mean `dir`?"
        );
        // A key of no table nearby: the fix, not a guess.
        assert!(hint("unknown field `zzzzzzzz`, expected `dir`").starts_with("; remove it"));
        assert_eq!(hint("invalid type: string \"a\", expected u32"), "");
    }
}
