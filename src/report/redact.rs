//! Keeps secrets out of reports: failure causes and stage notes are free
//! text that may quote a request (an `Authorization: Bearer ...` header, an
//! `api_key=...` query), and a report is meant to be pasted into a chat.

/// Replaces known secret values and anything shaped like a credential.
#[derive(Debug, Clone, Default)]
pub struct Redactor {
    /// Exact values to hide (e.g. the model API key read from its variable).
    secrets: Vec<String>,
}

/// What a hidden value reads as.
pub const REDACTED: &str = "[redacted]";

/// Prefixes of common API tokens (OpenAI, Hugging Face, GitHub, Slack).
const TOKEN_PREFIXES: &[&str] = &[
    "sk-",
    "hf_",
    "ghp_",
    "gho_",
    "github_pat_",
    "xoxb-",
    "xoxp-",
];

/// Punctuation that may wrap a token in prose.
const QUOTES: &str = "\"'`,;()[]{}<>";

/// Names whose value after `=` or `:` is a credential.
const SECRET_NAMES: &[&str] = &["key", "token", "secret", "password", "passwd", "auth"];

impl Redactor {
    /// `secrets` shorter than 4 characters are ignored: hiding every `a`
    /// would redact the report, not the secret.
    pub fn new(secrets: impl IntoIterator<Item = String>) -> Redactor {
        Redactor {
            secrets: secrets.into_iter().filter(|s| s.len() >= 4).collect(),
        }
    }

    pub fn apply(&self, text: &str) -> String {
        let mut text = text.to_string();
        for s in &self.secrets {
            text = text.replace(s.as_str(), REDACTED);
        }
        let mut out = String::with_capacity(text.len());
        let mut after_bearer = false;
        for piece in text.split_inclusive(char::is_whitespace) {
            let word = piece.trim_end();
            let space = &piece[word.len()..];
            let hidden = if after_bearer && !word.is_empty() {
                // Keep the punctuation around the token, e.g. a closing parenthesis.
                let bare = word.trim_matches(|c: char| QUOTES.contains(c));
                Some(if bare.is_empty() {
                    REDACTED.to_string()
                } else {
                    word.replacen(bare, REDACTED, 1)
                })
            } else {
                redact_word(word)
            };
            if !word.is_empty() {
                after_bearer =
                    word.eq_ignore_ascii_case("bearer") || word.eq_ignore_ascii_case("basic");
            }
            out.push_str(hidden.as_deref().unwrap_or(word));
            out.push_str(space);
        }
        out
    }
}

fn redact_word(word: &str) -> Option<String> {
    let bare = word.trim_matches(|c: char| QUOTES.contains(c));
    if TOKEN_PREFIXES
        .iter()
        .any(|p| bare.starts_with(p) && bare.len() >= p.len() + 8)
    {
        return Some(word.replace(bare, REDACTED));
    }
    let split = bare.find(['=', ':'])?;
    let (name, value) = (&bare[..split], &bare[split + 1..]);
    let name = name.to_ascii_lowercase();
    if !value.is_empty() && SECRET_NAMES.iter().any(|s| name.contains(s)) {
        return Some(word.replacen(value, REDACTED, 1));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_are_hidden_and_the_rest_kept() {
        let r = Redactor::new(["s3cr3t-value".to_string(), "ab".to_string()]);
        let got = r.apply(
            "POST failed: (Authorization: Bearer abc.def) api_key=zzz9 key s3cr3t-value sk-1234567890abcdef at 10:20",
        );
        assert_eq!(
            got,
            "POST failed: (Authorization: Bearer [redacted]) api_key=[redacted] key [redacted] [redacted] at 10:20"
        );
        assert_eq!(
            r.apply("exit code 4: expert 12 failed"),
            "exit code 4: expert 12 failed"
        );
    }
}
