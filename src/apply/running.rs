//! Which profile the live server runs. A stack that says
//! (`[stack.surface] health_profile_sha256`: tinyk3 serve reports the
//! sha256 of the profile file it read at start) is asked on its health
//! path, and the answer is compared with the sha256 of the live profile
//! file's bytes now. The file's bytes, not the profile's canonical digest:
//! the server reads the file, comments and all, and cannot know our
//! canonical form. Used by `--restart` (wait for the new profile, not just
//! any answer) and by the cycle that measures what an approval realized
//! (measure only once the live server runs it).

use std::path::Path;
use std::time::Duration;

use crate::config::Config;
use crate::vocab::Digest;

/// What the live server says about the profile it runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Running {
    /// It reports the live profile file, as it is now.
    LiveProfile,
    /// It reports another file: it was not restarted since the live
    /// profile was written (or was started on another file).
    Other { reported: Digest, file: Digest },
    /// The stack does not report its profile (no `health_profile_sha256`).
    Unreported,
    /// It could not be asked, or its answer did not say (why, for people).
    Unknown(String),
}

impl Running {
    /// Why the live server is not known to run the live profile, for
    /// people; `None` when it is.
    pub fn why_not(&self) -> Option<String> {
        match self {
            Running::LiveProfile => None,
            Running::Other { reported, file } => Some(format!(
                "the live server runs profile file {} (sha256), not the live profile file {}: \
                 restart the stack on it",
                reported.short(),
                file.short()
            )),
            Running::Unreported => Some(
                "the live server does not report the profile it runs ([stack.surface] \
                 health_profile_sha256 is not set)"
                    .to_string(),
            ),
            Running::Unknown(why) => Some(why.clone()),
        }
    }
}

/// The live server's health URL: `[stack.surface] base_url` with the
/// shadow's health path (the same server binary), else `/health`.
pub fn health_url(config: &Config) -> Option<reqwest::Url> {
    let surface = config.stack.surface.as_ref()?;
    let path = config
        .stack
        .shadow
        .as_ref()
        .map_or("/health", |s| s.health_path.as_str());
    surface.base_url.join(path).ok()
}

/// The sha256 of a file's bytes, as `sha256sum` prints it.
pub fn file_sha256(path: &Path) -> std::io::Result<Digest> {
    Ok(Digest::of(&std::fs::read(path)?))
}

/// Asks the live server which profile it runs, with `client` (bounded by
/// its own timeouts), and compares it with the live profile file.
pub async fn running(config: &Config, client: &reqwest::Client) -> Running {
    let (Some(field), Some(url)) = (
        config
            .stack
            .surface
            .as_ref()
            .and_then(|s| s.health_profile_sha256.as_deref()),
        health_url(config),
    ) else {
        return Running::Unreported;
    };
    let file = match file_sha256(&config.stack.live_profile) {
        Ok(d) => d,
        Err(e) => {
            return Running::Unknown(format!(
                "the live profile {} cannot be read: {e}",
                config.stack.live_profile.display()
            ));
        }
    };
    let answer = match client.get(url.clone()).send().await {
        Ok(r) if r.status().is_success() => r.json::<serde_json::Value>().await,
        Ok(r) => {
            return Running::Unknown(format!("the live server's {url} answered {}", r.status()));
        }
        Err(e) => {
            return Running::Unknown(format!(
                "the live server's {url} did not answer ({}): is it running?",
                e.without_url()
            ));
        }
    };
    reported(answer.ok().as_ref(), field, &url, file)
}

/// The comparison of a health answer with the file's sha256. The server's
/// words are data: only a well-formed sha256 is compared, and an answer
/// that is not one is quoted by its field only.
fn reported(
    answer: Option<&serde_json::Value>,
    field: &str,
    url: &reqwest::Url,
    file: Digest,
) -> Running {
    let Some(answer) = answer else {
        return Running::Unknown(format!("the live server's {url} did not answer JSON"));
    };
    let value = answer
        .get(field)
        .and_then(|v| v.as_str())
        .map(|s| Digest::try_from(s.to_ascii_lowercase()));
    match value {
        Some(Ok(reported)) if reported == file => Running::LiveProfile,
        Some(Ok(reported)) => Running::Other { reported, file },
        Some(Err(_)) => Running::Unknown(format!(
            "the live server's {url} field {field:?} is not a sha256 (64 hex digits)"
        )),
        None => Running::Unknown(format!(
            "the live server's {url} answer has no field {field:?} ([stack.surface] \
             health_profile_sha256)"
        )),
    }
}

/// A client for one probe of the live server.
pub fn probe_client() -> reqwest::Client {
    reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(2))
        .timeout(Duration::from_secs(5))
        .build()
        .expect("a client with timeouts only always builds")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_a_well_formed_sha256_of_the_file_counts_as_running_it() {
        let url: reqwest::Url = "http://127.0.0.1:1/health".parse().unwrap();
        let file = Digest::of(b"[memory]\n");
        let other = Digest::of(b"[memory]\n# edited\n");
        let said = |v: serde_json::Value| reported(Some(&v), "profile_sha256", &url, file.clone());
        assert_eq!(
            said(json!({"profile_sha256": file.as_str()})),
            Running::LiveProfile
        );
        // Upper-case hex is the same number.
        assert_eq!(
            said(json!({"profile_sha256": file.as_str().to_uppercase()})),
            Running::LiveProfile
        );
        let moved = said(json!({"profile_sha256": other.as_str()}));
        assert_eq!(
            moved,
            Running::Other {
                reported: other.clone(),
                file: file.clone()
            }
        );
        let why = moved.why_not().unwrap();
        assert!(
            why.contains(other.short()) && why.contains("restart"),
            "{why}"
        );
        // Whatever else it says is not quoted back, only named.
        let odd = said(json!({"profile_sha256": "rm -rf /; not a digest"}));
        let why = odd.why_not().unwrap();
        assert!(
            why.contains("not a sha256") && !why.contains("rm -rf"),
            "{why}"
        );
        assert!(
            matches!(said(json!({"status": "ok"})), Running::Unknown(w) if w.contains("no field"))
        );
        assert!(matches!(
            reported(None, "profile_sha256", &url, file),
            Running::Unknown(_)
        ));
    }
}
