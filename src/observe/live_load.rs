//! The live server's own load: how many requests of its users it is
//! serving and holding now, read from its metrics endpoint through the
//! names `[stack.metrics.names]` maps, like every other series.
//!
//! - `live_requests_processing`: requests being served now (llama-server's
//!   `llamacpp:requests_processing`, tinyk3 serve's
//!   `tinyk3_requests_in_flight`);
//! - `live_requests_waiting`: requests held before they are served
//!   (`llamacpp:requests_deferred`, `tinyk3_requests_queued`);
//! - `live_requests_total`, optional: a counter of requests taken since the
//!   server started (`tinyk3_requests_total`), which shows a request that
//!   came and went between two readings.
//!
//! A stack maps the first or the second (or both) to have its load read;
//! what reads it and stands aside is `measure::stand_aside`. The series are
//! the daemon's own business: they are kept out of what the proposer sees.

use std::time::Duration;

use crate::config::Metrics;

use super::prometheus;

/// Our names of the load series in `[stack.metrics.names]`.
pub const PROCESSING: &str = "live_requests_processing";
pub const WAITING: &str = "live_requests_waiting";
pub const TOTAL: &str = "live_requests_total";

/// A reading must come back within this, or it is no reading: a scrape
/// slower than a few polls says nothing about now.
const READ_TIMEOUT: Duration = Duration::from_secs(2);

/// One reading of the live server's load.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LoadReading {
    /// Requests served now plus those waiting (finite, ≥ 0).
    pub requests: f64,
    /// The counter of requests taken since start, when mapped.
    pub total: Option<f64>,
}

/// Why the load could not be read.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum LoadError {
    #[error("{0}")]
    Scrape(String),
    #[error(
        "{url} exports none of the series [stack.metrics.names] maps for the live load ({names}); \
         check the names against the server's /metrics, or remove them to stop standing aside"
    )]
    Missing { url: String, names: String },
}

/// The live server's load series, where its metrics are.
#[derive(Debug, Clone)]
pub struct LiveLoad {
    client: reqwest::Client,
    url: reqwest::Url,
    processing: Option<String>,
    waiting: Option<String>,
    total: Option<String>,
}

impl LiveLoad {
    /// The load a config can read: `None` when `[stack.metrics]` has no
    /// url or maps neither [`PROCESSING`] nor [`WAITING`].
    pub fn from_config(metrics: Option<&Metrics>, client: reqwest::Client) -> Option<LiveLoad> {
        let m = metrics?;
        let name = |ours: &str| m.names.get(ours).cloned();
        let (processing, waiting) = (name(PROCESSING), name(WAITING));
        if processing.is_none() && waiting.is_none() {
            return None;
        }
        Some(LiveLoad {
            client,
            url: m.url.clone()?,
            processing,
            waiting,
            total: name(TOTAL),
        })
    }

    /// Where the load is read.
    pub fn url(&self) -> &reqwest::Url {
        &self.url
    }

    /// Scrapes the endpoint once.
    pub async fn read(&self) -> Result<LoadReading, LoadError> {
        let scrape = |e: String| LoadError::Scrape(format!("{}: {e}", self.url));
        let resp = self
            .client
            .get(self.url.clone())
            .timeout(READ_TIMEOUT)
            .send()
            .await
            .map_err(|e| scrape(e.to_string()))?;
        if !resp.status().is_success() {
            return Err(scrape(format!("answered {}", resp.status())));
        }
        let text = resp.text().await.map_err(|e| scrape(e.to_string()))?;
        let samples = prometheus::parse(&text).map_err(|e| scrape(e.to_string()))?;
        self.reading(&samples)
    }

    /// The reading in one exposition.
    fn reading(&self, samples: &[prometheus::Sample]) -> Result<LoadReading, LoadError> {
        let get = |name: &Option<String>| {
            name.as_deref()
                .and_then(|n| prometheus::value(samples, n))
                .filter(|v| v.is_finite() && *v >= 0.0)
        };
        let (processing, waiting) = (get(&self.processing), get(&self.waiting));
        if processing.is_none() && waiting.is_none() {
            let names: Vec<&str> = [&self.processing, &self.waiting]
                .into_iter()
                .filter_map(|n| n.as_deref())
                .collect();
            return Err(LoadError::Missing {
                url: self.url.to_string(),
                names: names.join(", "),
            });
        }
        Ok(LoadReading {
            requests: processing.unwrap_or(0.0) + waiting.unwrap_or(0.0),
            total: get(&self.total),
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn metrics(names: &[(&str, &str)]) -> Metrics {
        Metrics {
            url: Some("http://127.0.0.1:9/metrics".parse().unwrap()),
            names: names
                .iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect::<BTreeMap<_, _>>(),
            heat: None,
            heat_trace: None,
            heat_flush: None,
            required: false,
        }
    }

    #[test]
    fn reads_llama_servers_and_tinyk3s_series_through_the_names() {
        let client = reqwest::Client::new();
        let llama = LiveLoad::from_config(
            Some(&metrics(&[
                (PROCESSING, "llamacpp:requests_processing"),
                (WAITING, "llamacpp:requests_deferred"),
            ])),
            client.clone(),
        )
        .unwrap();
        let text = "llamacpp:requests_processing 2\nllamacpp:requests_deferred 3\n";
        let r = llama.reading(&prometheus::parse(text).unwrap()).unwrap();
        assert_eq!(
            r,
            LoadReading {
                requests: 5.0,
                total: None
            }
        );

        let tinyk3 = LiveLoad::from_config(
            Some(&metrics(&[
                (PROCESSING, "tinyk3_requests_in_flight"),
                (WAITING, "tinyk3_requests_queued"),
                (TOTAL, "tinyk3_requests_total"),
            ])),
            client.clone(),
        )
        .unwrap();
        let text =
            "tinyk3_requests_in_flight 1\ntinyk3_requests_queued 0\ntinyk3_requests_total 7\n";
        let r = tinyk3.reading(&prometheus::parse(text).unwrap()).unwrap();
        assert_eq!(
            r,
            LoadReading {
                requests: 1.0,
                total: Some(7.0)
            }
        );
        // A server exporting neither series is named, with the fix.
        let err = tinyk3
            .reading(&prometheus::parse("other 1\n").unwrap())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("tinyk3_requests_in_flight") && err.contains("remove them"),
            "{err}"
        );
        // Nothing mapped, or no endpoint: no load to read.
        assert!(LiveLoad::from_config(Some(&metrics(&[(TOTAL, "x")])), client.clone()).is_none());
        let mut no_url = metrics(&[(PROCESSING, "x")]);
        no_url.url = None;
        assert!(LiveLoad::from_config(Some(&no_url), client.clone()).is_none());
        assert!(LiveLoad::from_config(None, client).is_none());
    }
}
