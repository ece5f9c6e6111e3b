//! `[model]`: the served model that proposes experiments through its chat
//! API, its timeouts and bounds. The default `max_tokens` lives here, below
//! `brain`, which reads it from the config.

use super::Seconds;
use super::raw::{
    RawModel, default_attempts, default_bandit_after_no_win, default_bandit_fallback_after,
    default_connect_timeout, default_model_max_tokens, default_rationale_max_chars,
    default_request_timeout,
};
use super::url::http_url;
use crate::menu::RATIONALE_MAX_CHARS_LIMIT;

/// The default `[model] max_tokens`: the answer is one small JSON object (a
/// rationale of at most 400 characters); this bounds a runaway generation.
pub const DEFAULT_MAX_TOKENS: u32 = 512;

#[derive(Debug, Clone)]
pub struct Model {
    pub base_url: reqwest::Url,
    pub name: String,
    /// The NAME of the environment variable holding the API key, if any.
    pub api_key_env: Option<String>,
    pub connect_timeout: Seconds,
    pub request_timeout: Seconds,
    pub max_attempts: u32,
    /// `max_tokens` of each request: bounds a rambling rationale.
    pub max_tokens: u32,
    /// The rationale's `maxLength` in the schema and the validator.
    pub rationale_max_chars: usize,
    /// After this many cycles in a row in which every answer of the model
    /// was refused, the bandit chooses for one cycle (at least 1).
    pub bandit_fallback_after: u32,
    /// After this many of the model's own experiments in a row decided no
    /// win, the bandit chooses for one cycle (0: never).
    pub bandit_after_no_win: u32,
}

impl Model {
    /// The model of a config without a `[model]` table, whose proposer is
    /// the bandit: never asked, its defaults only fill the type.
    pub(super) fn unused() -> Model {
        Model {
            base_url: http_url("http://127.0.0.1:1/v1", "model", "base_url")
                .expect("a literal URL"),
            name: String::new(),
            api_key_env: None,
            connect_timeout: default_connect_timeout(),
            request_timeout: default_request_timeout(),
            max_attempts: default_attempts(),
            max_tokens: default_model_max_tokens(),
            rationale_max_chars: default_rationale_max_chars(),
            bandit_fallback_after: default_bandit_fallback_after(),
            bandit_after_no_win: default_bandit_after_no_win(),
        }
    }
}

impl TryFrom<RawModel> for Model {
    type Error = String;
    fn try_from(m: RawModel) -> Result<Model, String> {
        if let Some(var) = &m.api_key_env {
            check_env_name(var)?;
        }
        if m.max_tokens < 64 {
            return Err(format!(
                "[model] max_tokens = {} cannot hold the shortest menu answer; use at least 64",
                m.max_tokens
            ));
        }
        if m.max_attempts == 0 {
            return Err("[model] max_attempts must be at least 1".into());
        }
        if m.rationale_max_chars > RATIONALE_MAX_CHARS_LIMIT {
            return Err(format!(
                "[model] rationale_max_chars = {} is more than {}; use a smaller bound (0 asks for an empty rationale)",
                m.rationale_max_chars, RATIONALE_MAX_CHARS_LIMIT
            ));
        }
        if m.bandit_fallback_after == 0 {
            return Err(
                "[model] bandit_fallback_after = 0 would hand every cycle to the bandit; \
                 use at least 1 (default 3), or set [cycle] proposer = \"bandit\""
                    .into(),
            );
        }
        Ok(Model {
            base_url: http_url(&m.base_url, "model", "base_url")?,
            name: m.name,
            api_key_env: m.api_key_env,
            connect_timeout: m.connect_timeout_s,
            request_timeout: m.request_timeout_s,
            max_attempts: m.max_attempts,
            max_tokens: m.max_tokens,
            rationale_max_chars: m.rationale_max_chars,
            bandit_fallback_after: m.bandit_fallback_after,
            bandit_after_no_win: m.bandit_after_no_win,
        })
    }
}

/// `api_key_env` names a variable; refuse what looks like a pasted key, so a
/// secret never sits in a config file.
fn check_env_name(var: &str) -> Result<(), String> {
    let ok = !var.is_empty()
        && var.len() <= 64
        && var
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
        && !var.as_bytes()[0].is_ascii_digit();
    if ok {
        Ok(())
    } else {
        Err(
            "[model] api_key_env must be the NAME of an environment variable (like \
             ORCHESTRATOR_API_KEY), in capitals, digits and underscores. If you pasted the key \
             itself, remove it from the file and export it in that variable instead"
                .to_string(),
        )
    }
}
