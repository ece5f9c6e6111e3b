//! Why a proposer could not answer. Messages name the URL, the config key
//! and what to do; they never carry the API key or the model's answer.

use std::time::Duration;

use crate::ledger::LedgerError;

/// The longest excerpt of a server's body kept in an error.
pub const EXCERPT_MAX_CHARS: usize = 200;

#[derive(Debug, thiserror::Error)]
pub enum BrainError {
    #[error(
        "the API key variable {var} (api_key_env in [model]) is not set; export it, or remove \
         api_key_env if the server needs no key"
    )]
    MissingApiKey { var: String },
    #[error(
        "the API key in {var} (api_key_env in [model]) is not usable in an HTTP header \
         (empty, not UTF-8, or holding control characters)"
    )]
    InvalidApiKey { var: String },
    #[error("[model] base_url {base_url} cannot take /chat/completions")]
    BadBaseUrl { base_url: String },
    #[error(
        "[model] base_url carries a user name or password; take them out and put the key in \
         the variable named by api_key_env"
    )]
    CredentialsInUrl,
    #[error("cannot build the HTTP client for the served model: {source}")]
    Client {
        #[source]
        source: reqwest::Error,
    },
    #[error(
        "the served model at {url} is unreachable: {source}; is it running? (base_url in [model])"
    )]
    Unreachable {
        url: String,
        #[source]
        source: reqwest::Error,
    },
    #[error(
        "the served model at {url} did not answer within {} s (request_timeout_s and \
         connect_timeout_s in [model])",
        after.as_secs_f64()
    )]
    Timeout { url: String, after: Duration },
    #[error("the served model at {url} answered HTTP {status}: {excerpt}")]
    Status {
        url: String,
        status: u16,
        /// At most [`EXCERPT_MAX_CHARS`] of the body, control characters escaped.
        excerpt: String,
    },
    #[error("the served model at {url} answered with more than {limit} bytes; refused")]
    TooLarge { url: String, limit: usize },
    /// A 200 whose body is not a chat completion (an HTML error page from a
    /// proxy, another API's JSON). The message describes the body, never
    /// quotes it: whatever it holds is kept only as the attempt's raw answer.
    #[error(
        "the served model at {url} answered a {bytes}-byte {content_type} body, not a chat \
         completion: {why}; is base_url in [model] the model's /v1?"
    )]
    NotChatCompletion {
        url: String,
        bytes: usize,
        content_type: String,
        why: &'static str,
        /// The body as received, for the ledger's raw-answer column only.
        body: String,
    },
    #[error("cannot check the proposal against the ledger for duplicates: {source}")]
    DuplicateCheck {
        #[source]
        source: LedgerError,
    },
    /// The bandit's line search expects nothing new on this base and the
    /// noise floor is fresh (the loop is converged; the daemon waits
    /// instead of asking, so only a cycle forced past that ends here).
    #[error(
        "the bandit has nothing worth measuring on this profile: every line of its search is \
         done, every other value tried, and the noise floor fresh; the loop has converged and \
         waits for a change (an approval, a profile, config or menu edit, the heat, the live \
         metrics)"
    )]
    NothingWorthMeasuring,
}

impl BrainError {
    /// Worth asking again after a pause: the server may be restarting or
    /// momentarily overloaded. A timeout is not: asking a too-slow model
    /// again only multiplies the wait.
    pub fn is_transient(&self) -> bool {
        match self {
            BrainError::Unreachable { .. } => true,
            BrainError::Status { status, .. } => *status == 429 || *status >= 500,
            _ => false,
        }
    }

    /// A short stable name, for logs and counting.
    pub fn kind(&self) -> &'static str {
        match self {
            BrainError::MissingApiKey { .. } => "missing_api_key",
            BrainError::InvalidApiKey { .. } => "invalid_api_key",
            BrainError::BadBaseUrl { .. } => "bad_base_url",
            BrainError::CredentialsInUrl => "credentials_in_url",
            BrainError::Client { .. } => "client",
            BrainError::Unreachable { .. } => "unreachable",
            BrainError::Timeout { .. } => "timeout",
            BrainError::Status { .. } => "http_status",
            BrainError::TooLarge { .. } => "too_large",
            BrainError::NotChatCompletion { .. } => "not_chat_completion",
            BrainError::DuplicateCheck { .. } => "duplicate_check",
            BrainError::NothingWorthMeasuring => "nothing_worth_measuring",
        }
    }
}

/// The first [`EXCERPT_MAX_CHARS`] characters of a body, with control
/// characters escaped so an excerpt cannot forge log lines.
pub(crate) fn excerpt(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let mut out = String::new();
    for (i, c) in text.chars().enumerate() {
        if i == EXCERPT_MAX_CHARS {
            out.push('…');
            break;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn excerpt_is_bounded_and_escapes_control_characters() {
        let long = "a".repeat(1000);
        let e = excerpt(long.as_bytes());
        assert_eq!(e.chars().count(), EXCERPT_MAX_CHARS + 1);
        assert_eq!(excerpt(b"x\ny\x1b"), "x\\ny\\u{1b}");
    }

    #[test]
    fn only_unreachable_and_server_errors_are_transient() {
        let status = |s| BrainError::Status {
            url: String::new(),
            status: s,
            excerpt: String::new(),
        };
        assert!(status(500).is_transient());
        assert!(status(503).is_transient());
        assert!(status(429).is_transient());
        assert!(!status(400).is_transient());
        let timeout = BrainError::Timeout {
            url: String::new(),
            after: Duration::from_secs(1),
        };
        assert!(!timeout.is_transient());
        let junk = BrainError::NotChatCompletion {
            url: String::new(),
            bytes: 4,
            content_type: "text/html".into(),
            why: "not JSON",
            body: "<b/>".into(),
        };
        assert!(!junk.is_transient());
        assert!(!junk.to_string().contains("<b/>"), "{junk}");
    }
}
