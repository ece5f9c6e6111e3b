//! The config's one error type, and how a TOML or serde error becomes one:
//! the file, the line, `[table] key`, the problem and a hint.

use std::path::{Path, PathBuf};

use super::hint::hint;

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error(
        "cannot read config file {path}: {source} (pass --config PATH or set ORCHESTRATOR_CONFIG)"
    )]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}:{line}: {key}{problem}{hint}")]
    Invalid {
        path: PathBuf,
        line: usize,
        /// `[section] key: ` when known, else empty.
        key: String,
        problem: String,
        /// `; did you mean ...?` or a fix, possibly empty.
        hint: String,
    },
    #[error("{path}: {problem}")]
    Semantic { path: PathBuf, problem: String },
}

/// Turns a TOML/serde error into file:line, the key, the problem and a hint.
pub(super) fn toml_error(text: &str, path: &Path, e: &toml::de::Error) -> ConfigError {
    let offset = e.span().map(|s| s.start).unwrap_or(0);
    let line = text[..offset.min(text.len())].matches('\n').count() + 1;
    let message = e.message().trim().to_string();
    ConfigError::Invalid {
        path: path.to_path_buf(),
        line,
        key: key_at(text, line),
        hint: hint(&message),
        problem: message,
    }
}

/// `[table] key: ` for the key assigned on `line`, if that line assigns
/// one; the header itself (`[stack.bnch]: `) when `line` opens a table, so
/// a misspelled table is not blamed on the table above it.
fn key_at(text: &str, line: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let Some(this) = lines.get(line.saturating_sub(1)) else {
        return String::new();
    };
    let trimmed = this.trim();
    if trimmed.starts_with('[') {
        if let Some(end) = trimmed.rfind(']') {
            return format!("{}: ", &trimmed[..=end]);
        }
    }
    let table = lines[..line.saturating_sub(1)]
        .iter()
        .rev()
        .map(|l| l.trim())
        .find(|l| l.starts_with('['))
        .unwrap_or("")
        .to_string();
    match this.split_once('=') {
        Some((k, _)) if !this.trim_start().starts_with('[') => {
            let sep = if table.is_empty() { "" } else { " " };
            format!("{table}{sep}{}: ", k.trim())
        }
        _ if !table.is_empty() => format!("{table}: "),
        _ => String::new(),
    }
}
