//! The one check of every URL the file holds (the model's, the surface's,
//! the metrics endpoint's): it parses, and it is http or https.

/// `text` as an http(s) URL, or the problem naming `[table] key`.
pub(super) fn http_url(text: &str, table: &str, key: &str) -> Result<reqwest::Url, String> {
    let u = reqwest::Url::parse(text).map_err(|e| {
        format!(
            "[{table}] {key} = {text:?} is not a URL ({e}); write e.g. \"http://127.0.0.1:8080\""
        )
    })?;
    if !matches!(u.scheme(), "http" | "https") {
        return Err(format!("[{table}] {key} = {text:?} must be http or https"));
    }
    Ok(u)
}
