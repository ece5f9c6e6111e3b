//! The chat client of the served model: one OpenAI-compatible
//! `/chat/completions` request per call, greedy, with the menu's JSON schema
//! as `response_format`, returning `choices[0].message.content` as received.
//!
//! The API key is read from the environment variable NAMED in config, held
//! as a sensitive header value (redacted by `Debug`), and sent only in the
//! `Authorization` header; no log line here prints headers.

use std::fmt;
use std::time::Duration;

use reqwest::header::{AUTHORIZATION, HeaderValue};
use serde::Serialize;
use serde_json::{Value, json};

use super::error::{BrainError, excerpt};
use crate::config;

/// Refuse bodies larger than this: a chat answer is a few kilobytes.
pub const MAX_BODY_BYTES: usize = 1 << 20;

/// `choices[0].message.content` of a chat completion, or why the body is
/// not one, in our own words (nothing of the body).
fn chat_content(body: &[u8]) -> Result<String, &'static str> {
    let value: Value = serde_json::from_slice(body).map_err(|_| "not JSON")?;
    let obj = value.as_object().ok_or("not a JSON object")?;
    let choices = obj.get("choices").ok_or("no `choices` field")?;
    let first = choices
        .as_array()
        .ok_or("`choices` is not an array")?
        .first()
        .ok_or("`choices` is empty")?;
    match first.pointer("/message/content") {
        Some(Value::String(content)) => Ok(content.clone()),
        Some(_) => Err("`choices[0].message.content` is not a string"),
        None => Err("no `choices[0].message.content`"),
    }
}

/// The response's media type (`text/html`), bounded to the characters a
/// media type has, so the server's header cannot put text into a message.
fn content_type(headers: &reqwest::header::HeaderMap) -> String {
    let raw = headers
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let media = raw
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    let plain = !media.is_empty()
        && media.len() <= 64
        && media
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "/+-.".contains(c));
    if plain { media } else { "untyped".to_string() }
}

/// The schema's name in `response_format`.
pub const SCHEMA_NAME: &str = "menu_choice";

/// Who speaks. There is no assistant role: the model's earlier answers are
/// never sent back (see the module docs of `prompt`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    System,
    User,
}

impl Role {
    pub fn as_str(self) -> &'static str {
        match self {
            Role::System => "system",
            Role::User => "user",
        }
    }
}

/// One chat message.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Message {
    pub role: Role,
    pub content: String,
}

impl Message {
    pub fn new(role: Role, content: impl Into<String>) -> Message {
        Message {
            role,
            content: content.into(),
        }
    }
}

/// A secret string; `Debug` never shows it and it has no `Display`.
#[derive(Clone)]
struct Secret(String);

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// The client of one served model.
#[derive(Clone)]
pub struct ChatClient {
    http: reqwest::Client,
    url: reqwest::Url,
    model: String,
    /// `Bearer <key>`, marked sensitive.
    authorization: Option<HeaderValue>,
    /// The key itself, only to scrub it from server bodies quoted in errors
    /// (a misbehaving server may echo the request's headers).
    secret: Option<Secret>,
    connect_timeout: Duration,
    request_timeout: Duration,
    /// Bounds the answer; a constrained decoder closes the JSON in time.
    max_tokens: u32,
}

/// Never prints the key, only whether there is one.
impl fmt::Debug for ChatClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ChatClient")
            .field("url", &self.url.as_str())
            .field("model", &self.model)
            .field(
                "api_key",
                &self.authorization.as_ref().map(|_| "<redacted>"),
            )
            .field("connect_timeout", &self.connect_timeout)
            .field("request_timeout", &self.request_timeout)
            .finish_non_exhaustive()
    }
}

impl ChatClient {
    /// Builds the client from `[model]`, reading the key from the process
    /// environment.
    pub fn from_config(model: &config::Model) -> Result<ChatClient, BrainError> {
        ChatClient::with_env(model, |name| std::env::var_os(name))
    }

    /// [`ChatClient::from_config`] with the environment lookup injected, so
    /// tests need not mutate the process environment.
    pub fn with_env(
        model: &config::Model,
        env: impl Fn(&str) -> Option<std::ffi::OsString>,
    ) -> Result<ChatClient, BrainError> {
        let (authorization, secret) = match &model.api_key_env {
            None => (None, None),
            Some(var) => {
                let key = env(var).ok_or_else(|| BrainError::MissingApiKey { var: var.clone() })?;
                let invalid = || BrainError::InvalidApiKey { var: var.clone() };
                let key = key.into_string().map_err(|_| invalid())?;
                if key.trim().is_empty() {
                    return Err(invalid());
                }
                let mut value = HeaderValue::from_str(&format!("Bearer {}", key.trim()))
                    .map_err(|_| invalid())?;
                value.set_sensitive(true);
                (Some(value), Some(Secret(key.trim().to_string())))
            }
        };
        // URLs are logged and quoted in errors, so they must hold no secret.
        if !model.base_url.username().is_empty() || model.base_url.password().is_some() {
            return Err(BrainError::CredentialsInUrl);
        }
        let base = model.base_url.as_str().trim_end_matches('/');
        let url = reqwest::Url::parse(&format!("{base}/chat/completions")).map_err(|_| {
            BrainError::BadBaseUrl {
                base_url: model.base_url.to_string(),
            }
        })?;
        let loopback = url.host_str().is_some_and(|h| {
            h == "localhost"
                || h.trim_start_matches('[')
                    .trim_end_matches(']')
                    .parse::<std::net::IpAddr>()
                    .is_ok_and(|a| a.is_loopback())
        });
        let mut builder = reqwest::Client::builder()
            .connect_timeout(model.connect_timeout.duration())
            .timeout(model.request_timeout.duration())
            // A redirect would be a misconfiguration; following it could carry
            // the key to another host.
            .redirect(reqwest::redirect::Policy::none());
        if loopback {
            // A model on this machine is never reached through a proxy.
            builder = builder.no_proxy();
        }
        let http = builder
            .build()
            .map_err(|source| BrainError::Client { source })?;
        Ok(ChatClient {
            http,
            url,
            model: model.name.clone(),
            authorization,
            secret,
            connect_timeout: model.connect_timeout.duration(),
            request_timeout: model.request_timeout.duration(),
            max_tokens: model.max_tokens,
        })
    }

    /// The `/chat/completions` URL asked.
    pub fn url(&self) -> &reqwest::Url {
        &self.url
    }

    /// The request body: greedy (temperature 0), schema-constrained.
    pub fn request_body(&self, messages: &[Message], schema: &Value) -> Value {
        json!({
            "model": self.model,
            "messages": messages,
            "temperature": 0,
            "max_tokens": self.max_tokens,
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": SCHEMA_NAME, "schema": schema, "strict": true},
            },
        })
    }

    /// Sends one request and returns `choices[0].message.content` exactly
    /// as received.
    pub async fn complete(
        &self,
        messages: &[Message],
        schema: &Value,
    ) -> Result<String, BrainError> {
        let url = self.url.to_string();
        tracing::debug!(url = %url, model = %self.model, messages = messages.len(), "asking the served model");
        let mut request = self
            .http
            .post(self.url.clone())
            .json(&self.request_body(messages, schema));
        if let Some(auth) = &self.authorization {
            request = request.header(AUTHORIZATION, auth.clone());
        }
        let mut response = request.send().await.map_err(|e| self.transport(e))?;
        let status = response.status();
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(|e| self.transport(e))? {
            if body.len() + chunk.len() > MAX_BODY_BYTES {
                return Err(BrainError::TooLarge {
                    url,
                    limit: MAX_BODY_BYTES,
                });
            }
            body.extend_from_slice(&chunk);
        }
        if !status.is_success() {
            return Err(BrainError::Status {
                url,
                status: status.as_u16(),
                excerpt: self.quote(&body),
            });
        }
        match chat_content(&body) {
            Ok(content) => Ok(content),
            Err(why) => Err(BrainError::NotChatCompletion {
                url,
                bytes: body.len(),
                content_type: content_type(response.headers()),
                why,
                body: self.scrub(&body),
            }),
        }
    }

    /// A bounded excerpt of a server's error body, with the key
    /// scrubbed before cutting (so not even a prefix of it survives).
    fn quote(&self, body: &[u8]) -> String {
        excerpt(self.scrub(body).as_bytes())
    }

    /// A body as text with the key replaced: a misbehaving server may echo
    /// the request's headers, and the key must never reach the ledger.
    fn scrub(&self, body: &[u8]) -> String {
        let text = String::from_utf8_lossy(body);
        match &self.secret {
            Some(Secret(key)) if text.contains(key.as_str()) => {
                text.replace(key.as_str(), "<redacted>")
            }
            _ => text.into_owned(),
        }
    }

    fn transport(&self, e: reqwest::Error) -> BrainError {
        let url = self.url.to_string();
        if e.is_timeout() {
            let after = if e.is_connect() {
                self.connect_timeout
            } else {
                self.request_timeout
            };
            BrainError::Timeout { url, after }
        } else {
            // Strip the URL reqwest adds: ours is already in the message.
            BrainError::Unreachable {
                url,
                source: e.without_url(),
            }
        }
    }
}
