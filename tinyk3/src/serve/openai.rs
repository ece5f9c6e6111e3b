//! The OpenAI chat-completions wire format: the request, validated field by
//! field with errors that name the field, the chat template, and the bodies of
//! answers, stream chunks and errors.

use serde_json::{Value, json};

use super::json::Json;

/// Most tokens one answer may ask for.
pub const MAX_TOKENS_LIMIT: usize = 8192;
/// `max_tokens` when the request gives none.
pub const DEFAULT_MAX_TOKENS: usize = 256;
/// Stop sequences a request may give, as in OpenAI's API.
const MAX_STOPS: usize = 4;

/// An error as OpenAI-compatible clients expect it: a status and a body naming the problem.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    pub status: u16,
    pub message: String,
    pub kind: &'static str,
    pub param: Option<String>,
    pub code: Option<&'static str>,
}

impl ApiError {
    /// A 400 about `param`.
    pub fn invalid(param: Option<&str>, message: impl Into<String>) -> ApiError {
        ApiError {
            status: 400,
            message: message.into(),
            kind: "invalid_request_error",
            param: param.map(str::to_owned),
            code: None,
        }
    }

    /// Any other status, with an error type and code.
    pub fn other(
        status: u16,
        kind: &'static str,
        code: &'static str,
        message: impl Into<String>,
    ) -> ApiError {
        ApiError {
            status,
            message: message.into(),
            kind,
            param: None,
            code: Some(code),
        }
    }

    /// `{"error": {"message", "type", "param", "code"}}`.
    pub fn body(&self) -> Value {
        json!({"error": {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}})
    }
}

/// How the answer is shaped.
#[derive(Debug, Clone, PartialEq)]
pub enum Format {
    Text,
    JsonObject,
    /// The schema of `response_format.json_schema.schema`, keys in document order.
    JsonSchema(Json),
}

/// One chat message.
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    pub role: String,
    pub content: String,
}

/// A validated `/v1/chat/completions` request.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatRequest {
    pub messages: Vec<Message>,
    pub max_tokens: usize,
    pub temperature: f32,
    pub seed: u64,
    pub stop: Vec<String>,
    pub stream: bool,
    pub include_usage: bool,
    pub format: Format,
    /// Reuse the KV cache of a prompt prefix shared with the previous request
    /// (llama.cpp's `cache_prompt`, default true). The answer is the same either
    /// way; `false` only makes the request prefill its whole prompt.
    pub cache_prompt: bool,
}

/// A short rendering of a JSON value for error messages.
fn shown(v: &Json) -> String {
    let s = v.to_string();
    if s.chars().count() > 60 {
        format!("{}...", s.chars().take(57).collect::<String>())
    } else {
        s
    }
}

fn wrong(param: &str, want: &str, got: &Json) -> ApiError {
    ApiError::invalid(
        Some(param),
        format!("`{param}` must be {want}, got {}", shown(got)),
    )
}

/// A field's value, with JSON `null` meaning absent (as OpenAI clients send it).
fn field<'a>(obj: &'a Json, key: &str) -> Option<&'a Json> {
    obj.get(key).filter(|v| **v != Json::Null)
}

fn content_text(param: &str, v: &Json) -> Result<String, ApiError> {
    match v {
        Json::String(s) => Ok(s.clone()),
        Json::Array(parts) => {
            let mut text = String::new();
            for (i, part) in parts.iter().enumerate() {
                let p = format!("{param}[{i}]");
                match (
                    part.get("type").and_then(Json::as_str),
                    part.get("text").and_then(Json::as_str),
                ) {
                    (Some("text"), Some(t)) => text.push_str(t),
                    _ => {
                        return Err(wrong(
                            &p,
                            "a text part {\"type\": \"text\", \"text\": \"...\"}",
                            part,
                        ));
                    }
                }
            }
            Ok(text)
        }
        other => Err(wrong(param, "a string or an array of text parts", other)),
    }
}

impl ChatRequest {
    /// Parses and validates a request body.
    pub fn parse(body: &[u8]) -> Result<ChatRequest, ApiError> {
        let v: Json = serde_json::from_slice(body)
            .map_err(|e| ApiError::invalid(None, format!("request body is not valid JSON: {e}")))?;
        if v.as_object().is_none() {
            return Err(ApiError::invalid(
                None,
                format!("request body must be a JSON object, got {}", shown(&v)),
            ));
        }
        let messages = match field(&v, "messages") {
            None => {
                return Err(ApiError::invalid(
                    Some("messages"),
                    "`messages` is required: an array of {\"role\", \"content\"} objects",
                ));
            }
            Some(Json::Array(ms)) if !ms.is_empty() => ms,
            Some(other) => return Err(wrong("messages", "a non-empty array of messages", other)),
        };
        let mut parsed = Vec::new();
        for (i, m) in messages.iter().enumerate() {
            let role = match m.get("role") {
                Some(Json::String(r))
                    if ["system", "developer", "user", "assistant", "tool"]
                        .contains(&r.as_str()) =>
                {
                    r.clone()
                }
                Some(other) => {
                    return Err(wrong(
                        &format!("messages[{i}].role"),
                        "one of system, developer, user, assistant, tool",
                        other,
                    ));
                }
                None => {
                    return Err(ApiError::invalid(
                        Some(&format!("messages[{i}].role")),
                        format!("`messages[{i}].role` is required"),
                    ));
                }
            };
            let content = match m.get("content") {
                Some(c) => content_text(&format!("messages[{i}].content"), c)?,
                None => {
                    return Err(ApiError::invalid(
                        Some(&format!("messages[{i}].content")),
                        format!("`messages[{i}].content` is required"),
                    ));
                }
            };
            parsed.push(Message { role, content });
        }
        if let Some(m) = field(&v, "model") {
            if m.as_str().is_none() {
                return Err(wrong("model", "a string", m));
            }
        }
        let max_tokens = match (field(&v, "max_completion_tokens"), field(&v, "max_tokens")) {
            (Some(n), _) => count("max_completion_tokens", n)?,
            (None, Some(n)) => count("max_tokens", n)?,
            (None, None) => DEFAULT_MAX_TOKENS,
        };
        let temperature = match field(&v, "temperature") {
            None => 1.0,
            Some(t) => match t.as_f64() {
                Some(x) if (0.0..=2.0).contains(&x) => x as f32,
                _ => return Err(wrong("temperature", "a number from 0 to 2", t)),
            },
        };
        let seed = match field(&v, "seed") {
            None => 0,
            Some(Json::Number(n)) if n.is_u64() || n.is_i64() => n
                .as_u64()
                .unwrap_or_else(|| n.as_i64().expect("an integer") as u64),
            Some(other) => return Err(wrong("seed", "an integer", other)),
        };
        let stop = match field(&v, "stop") {
            None => Vec::new(),
            Some(Json::String(s)) => vec![s.clone()],
            Some(Json::Array(a))
                if a.len() <= MAX_STOPS && a.iter().all(|s| s.as_str().is_some()) =>
            {
                a.iter()
                    .map(|s| s.as_str().expect("checked").to_owned())
                    .collect()
            }
            Some(other) => {
                return Err(wrong(
                    "stop",
                    "a string or an array of at most 4 strings",
                    other,
                ));
            }
        };
        if stop.iter().any(String::is_empty) {
            return Err(ApiError::invalid(
                Some("stop"),
                "`stop` sequences must not be empty strings",
            ));
        }
        let stream = flag(&v, "stream")?;
        let include_usage = match field(&v, "stream_options") {
            None => false,
            Some(o @ Json::Object(_)) => match field(o, "include_usage") {
                None => false,
                Some(Json::Bool(b)) => *b,
                Some(other) => {
                    return Err(wrong("stream_options.include_usage", "a boolean", other));
                }
            },
            Some(other) => return Err(wrong("stream_options", "an object", other)),
        };
        match field(&v, "n") {
            None => {}
            Some(n) if n.as_u64() == Some(1) => {}
            Some(n) => return Err(wrong("n", "1 (one generation at a time)", n)),
        }
        // Fields other servers define, type-checked so a wrong type is not silently ignored.
        let cache_prompt = match field(&v, "cache_prompt") {
            None => true,
            Some(_) => flag(&v, "cache_prompt")?,
        };
        flag(&v, "logprobs")?;
        for key in ["top_p", "frequency_penalty", "presence_penalty"] {
            if let Some(x) = field(&v, key) {
                if x.as_f64().is_none() {
                    return Err(wrong(key, "a number", x));
                }
            }
        }
        if let Some(u) = field(&v, "user") {
            if u.as_str().is_none() {
                return Err(wrong("user", "a string", u));
            }
        }
        let format = response_format(field(&v, "response_format"))?;
        Ok(ChatRequest {
            messages: parsed,
            max_tokens,
            temperature,
            seed,
            stop,
            stream,
            include_usage,
            format,
            cache_prompt,
        })
    }

    /// The prompt text: a plain chat template with role markers, ending where the assistant speaks.
    pub fn prompt(&self) -> String {
        let mut text = String::new();
        for m in &self.messages {
            text.push_str(&format!("<|{}|>\n{}\n", m.role, m.content));
        }
        text.push_str("<|assistant|>\n");
        text
    }
}

fn count(param: &str, v: &Json) -> Result<usize, ApiError> {
    match v.as_u64() {
        Some(n) if (1..=MAX_TOKENS_LIMIT as u64).contains(&n) => Ok(n as usize),
        _ => Err(wrong(
            param,
            &format!("an integer from 1 to {MAX_TOKENS_LIMIT}"),
            v,
        )),
    }
}

fn flag(v: &Json, key: &str) -> Result<bool, ApiError> {
    match field(v, key) {
        None => Ok(false),
        Some(Json::Bool(b)) => Ok(*b),
        Some(other) => Err(wrong(key, "a boolean", other)),
    }
}

fn response_format(v: Option<&Json>) -> Result<Format, ApiError> {
    let Some(rf) = v else { return Ok(Format::Text) };
    if rf.as_object().is_none() {
        return Err(wrong(
            "response_format",
            "an object like {\"type\": \"json_schema\", ...}",
            rf,
        ));
    }
    match rf.get("type") {
        Some(Json::String(t)) if t == "text" => Ok(Format::Text),
        Some(Json::String(t)) if t == "json_object" => Ok(Format::JsonObject),
        Some(Json::String(t)) if t == "json_schema" => {
            let js = match field(rf, "json_schema") {
                Some(js @ Json::Object(_)) => js,
                Some(other) => {
                    return Err(wrong(
                        "response_format.json_schema",
                        "an object with `name` and `schema`",
                        other,
                    ));
                }
                None => {
                    return Err(ApiError::invalid(
                        Some("response_format.json_schema"),
                        "`response_format.json_schema` is required when the type is json_schema",
                    ));
                }
            };
            if let Some(n) = field(js, "name") {
                if n.as_str().is_none() {
                    return Err(wrong("response_format.json_schema.name", "a string", n));
                }
            }
            if let Some(s) = field(js, "strict") {
                if !matches!(s, Json::Bool(_)) {
                    return Err(wrong("response_format.json_schema.strict", "a boolean", s));
                }
            }
            match field(js, "schema") {
                Some(s @ Json::Object(_)) => Ok(Format::JsonSchema(s.clone())),
                Some(other) => Err(wrong(
                    "response_format.json_schema.schema",
                    "a JSON Schema object",
                    other,
                )),
                None => Err(ApiError::invalid(
                    Some("response_format.json_schema.schema"),
                    "`response_format.json_schema.schema` is required",
                )),
            }
        }
        Some(other) => Err(wrong(
            "response_format.type",
            "one of text, json_object, json_schema",
            other,
        )),
        None => Err(ApiError::invalid(
            Some("response_format.type"),
            "`response_format.type` is required",
        )),
    }
}

/// What a finished generation reports, llama.cpp-style.
#[derive(Debug, Clone, PartialEq)]
pub struct Timings {
    /// Prompt tokens run through the model by this request.
    pub prompt_n: usize,
    /// Prompt tokens whose KV cache was reused from the previous request (llama.cpp's `cache_n`).
    pub cache_n: usize,
    pub prompt_ms: f64,
    pub predicted_n: usize,
    pub predicted_ms: f64,
    /// Draft tokens proposed and accepted, when speculating.
    pub draft: Option<(u64, u64)>,
}

impl Timings {
    pub fn json(&self) -> Value {
        let per = |ms: f64, n: usize| if n > 0 { ms / n as f64 } else { 0.0 };
        let rate = |ms: f64, n: usize| if ms > 0.0 { n as f64 * 1e3 / ms } else { 0.0 };
        let mut t = json!({
            "cache_n": self.cache_n,
            "prompt_n": self.prompt_n,
            "prompt_ms": self.prompt_ms,
            "prompt_per_token_ms": per(self.prompt_ms, self.prompt_n),
            "prompt_per_second": rate(self.prompt_ms, self.prompt_n),
            "predicted_n": self.predicted_n,
            "predicted_ms": self.predicted_ms,
            "predicted_per_token_ms": per(self.predicted_ms, self.predicted_n),
            "predicted_per_second": rate(self.predicted_ms, self.predicted_n),
        });
        if let Some((n, accepted)) = self.draft {
            t["draft_n"] = json!(n);
            t["draft_n_accepted"] = json!(accepted);
        }
        t
    }

    /// OpenAI's `usage`.
    pub fn usage(&self) -> Value {
        let prompt = self.cache_n + self.prompt_n;
        json!({"prompt_tokens": prompt, "completion_tokens": self.predicted_n, "total_tokens": prompt + self.predicted_n,
               "prompt_tokens_details": {"cached_tokens": self.cache_n}})
    }
}

/// The fields every answer and chunk carry.
#[derive(Debug, Clone)]
pub struct Envelope {
    pub id: String,
    pub created: u64,
    pub model: String,
}

impl Envelope {
    /// A whole (non-streamed) answer.
    pub fn completion(&self, content: &str, finish_reason: &str, t: &Timings) -> Value {
        json!({
            "id": self.id, "object": "chat.completion", "created": self.created, "model": self.model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "logprobs": null, "finish_reason": finish_reason}],
            "usage": t.usage(),
            "timings": t.json(),
        })
    }

    /// A stream chunk with a delta (and, on the last one, the finish reason and timings).
    pub fn chunk(
        &self,
        delta: &Value,
        finish_reason: Option<&str>,
        timings: Option<&Timings>,
    ) -> Value {
        let mut c = json!({
            "id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model,
            "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish_reason}],
        });
        if let Some(t) = timings {
            c["timings"] = t.json();
        }
        c
    }

    /// The usage chunk of `stream_options.include_usage`: no choices.
    pub fn usage_chunk(&self, t: &Timings) -> Value {
        json!({"id": self.id, "object": "chat.completion.chunk", "created": self.created, "model": self.model, "choices": [], "usage": t.usage()})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_full_request_and_ignores_unknown_fields() {
        let r = ChatRequest::parse(br#"{"model":"x","messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}],
            "max_tokens":5,"temperature":0,"seed":3,"stop":"\n","stream":true,"stream_options":{"include_usage":true},
            "cache_prompt":false,"mirostat":2,"response_format":{"type":"json_object"}}"#)
        .unwrap();
        assert_eq!(
            (
                r.max_tokens,
                r.temperature,
                r.seed,
                r.stream,
                r.include_usage
            ),
            (5, 0.0, 3, true, true)
        );
        assert_eq!(r.stop, vec!["\n".to_string()]);
        assert_eq!(r.format, Format::JsonObject);
        assert_eq!(r.prompt(), "<|user|>\nhi\n<|assistant|>\n");
    }

    #[test]
    fn wrong_types_name_the_field() {
        let cases: [(&[u8], &str); 7] = [
            (br#"{"messages":[{"role":"user","content":"x"}],"max_tokens":"ten"}"#, "max_tokens"),
            (br#"{"messages":[{"role":"user","content":"x"}],"temperature":true}"#, "temperature"),
            (br#"{"messages":[{"role":"user","content":"x"}],"cache_prompt":"no"}"#, "cache_prompt"),
            (br#"{"messages":[{"role":"user","content":"x"}],"stop":[1]}"#, "stop"),
            (br#"{"messages":[{"role":"wizard","content":"x"}]}"#, "messages[0].role"),
            (br#"{"messages":"hi"}"#, "messages"),
            (br#"{"messages":[{"role":"user","content":"x"}],"response_format":{"type":"yaml"}}"#, "response_format.type"),
        ];
        for (body, param) in cases {
            let e = ChatRequest::parse(body).unwrap_err();
            assert_eq!((e.status, e.param.as_deref()), (400, Some(param)), "{e:?}");
            assert!(e.message.contains(param), "{}", e.message);
        }
        let e = ChatRequest::parse(b"{not json").unwrap_err();
        assert!(e.message.contains("not valid JSON"), "{}", e.message);
    }
}
