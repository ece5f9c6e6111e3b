//! Observe: what the cycle reads before proposing — the stack's metrics (as
//! the proposer's [`LiveMetrics`]), its expert heat histogram and request trace. What cannot be read is said
//! (in [`Observation::gaps`]), and fails the cycle only when the config says
//! metrics are required.
//!
//! - [`prometheus`]: the stack's metrics, in the Prometheus text format.
//! - [`live_load`]: the live server's own load (its users' requests), which
//!   the daemon stands aside for.

pub mod live_load;
pub mod prometheus;

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Value, json};

use crate::config::Metrics;
use crate::heat::{Heat, Trace};

/// Our names for the series the proposer is shown (`[stack.metrics.names]`).
pub const SECONDS_PER_TOKEN: &str = "seconds_per_token";
/// For stacks that export a rate instead (llama-server's
/// `llamacpp:predicted_tokens_seconds`): read as 1 / rate when no
/// `seconds_per_token` series is mapped or it is absent.
pub const TOKENS_PER_SECOND: &str = "tokens_per_second";
pub const HEAT_COVERAGE: &str = "heat_coverage";
pub const TIER_RESIDENCY: &str = "tier_residency";
pub const FAR_AVAILABLE: &str = "far_available";
pub const DRAFT_PROPOSED: &str = "draft_proposed";
pub const DRAFT_ACCEPTED: &str = "draft_accepted";

/// The live metrics scraped at the start of a cycle; `None` when the stack
/// does not export a series or it could not be read.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LiveMetrics {
    /// Seconds per generated token of the live stack.
    pub seconds_per_token: Option<f64>,
    /// Share of expert reads served from RAM tiers (pinned + LRU cache), 0..1.
    pub tier_residency: Option<f64>,
    /// Share of routed expert activations that hit a pinned expert, 0..1.
    pub heat_coverage: Option<f64>,
    /// Far tier state: 1 when the far expert server answers, 0 when not.
    pub far_available: Option<f64>,
    /// Share of drafted tokens the full model accepted, 0..1.
    pub draft_acceptance: Option<f64>,
    /// Any other scraped series, by our name from `[stack.metrics.names]`.
    pub other: BTreeMap<String, f64>,
}

/// What one cycle saw.
#[derive(Debug, Clone, Default)]
pub struct Observation {
    pub metrics: LiveMetrics,
    pub heat: Option<Heat>,
    pub trace: Option<Trace>,
    /// What could not be read, and why (shown in logs and stored).
    pub gaps: Vec<String>,
}

/// The metrics could not be read and the config requires them.
#[derive(Debug, thiserror::Error)]
#[error(
    "the stack's metrics are required ([stack.metrics] required = true) but could not be read: {0}"
)]
pub struct MetricsRequired(pub String);

impl Observation {
    /// The snapshot stored in the ledger's observation row.
    pub fn metrics_json(&self) -> Value {
        let m = &self.metrics;
        json!({
            SECONDS_PER_TOKEN: m.seconds_per_token,
            HEAT_COVERAGE: m.heat_coverage,
            TIER_RESIDENCY: m.tier_residency,
            FAR_AVAILABLE: m.far_available,
            "draft_acceptance": m.draft_acceptance,
            "other": m.other,
            "gaps": self.gaps,
        })
    }

    /// A small summary of the heat (not the whole histogram).
    pub fn heat_json(&self) -> Option<Value> {
        let heat = self.heat.as_ref()?;
        let shape = heat.shape();
        let ranked = heat.ranked();
        let top: Vec<Value> = ranked
            .iter()
            .take(16)
            .map(|(e, n)| json!([e.layer, e.expert, n]))
            .collect();
        Some(json!({
            "n_layers": shape.n_layers,
            "n_experts": shape.n_experts,
            "requests": heat.total(),
            "trace_requests": self.trace.as_ref().map(|t| t.requests().len()),
            "hottest": top,
        }))
    }
}

/// The gap of a stack configured without a metrics endpoint: a fact of the
/// config, not a fault, so the cycle says it once, not every cycle.
pub const NO_METRICS_ENDPOINT: &str =
    "metrics: the stack has no metrics endpoint ([stack.metrics] url unset)";

/// The start of the gap of a heat file that does not exist yet: on a fresh
/// start nothing has run to write it, which is expected, not a fault.
pub const NO_HEAT_YET: &str = "heat: none recorded yet";

/// Reads everything `[stack.metrics]` names. Never fails unless metrics are
/// required; gaps are reported instead.
pub async fn observe(
    cfg: Option<&Metrics>,
    client: &reqwest::Client,
) -> Result<Observation, MetricsRequired> {
    let mut obs = Observation::default();
    let Some(cfg) = cfg else {
        obs.gaps
            .push("no [stack.metrics] configured: the proposer sees no live metrics".into());
        return Ok(obs);
    };
    match &cfg.url {
        Some(url) => match scrape(client, url).await {
            Ok(samples) => obs.metrics = live_metrics(&samples, &cfg.names),
            Err(e) if cfg.required => return Err(MetricsRequired(e)),
            Err(e) => obs.gaps.push(format!(
                "metrics: {e}; the cycle goes on without them ([stack.metrics] required = false)"
            )),
        },
        None if cfg.required => {
            return Err(MetricsRequired(
                "[stack.metrics] has no url to scrape".into(),
            ));
        }
        None => obs.gaps.push(NO_METRICS_ENDPOINT.into()),
    }
    if let Some(source) = &cfg.heat {
        match read_heat(client, source).await {
            Ok(heat) => {
                if let Some(path) = &cfg.heat_trace {
                    if let Some(flush) = &cfg.heat_flush
                        && let Err(e) = client
                            .post(flush.clone())
                            .send()
                            .await
                            .and_then(|r| r.error_for_status())
                    {
                        obs.gaps.push(format!("heat flush {flush}: {e}"));
                    }
                    match Trace::load(path, heat.shape()) {
                        Ok(t) => obs.trace = Some(t),
                        Err(e) => obs.gaps.push(format!("trace: {e}")),
                    }
                }
                obs.heat = Some(heat);
            }
            Err(e) => obs.gaps.push(e),
        }
    }
    Ok(obs)
}

/// A glance at the stack for a waiting daemon: its live metrics and its
/// heat histogram, without the flush and the trace a cycle reads (nothing
/// plans from it). What cannot be read is `None`; a waiting daemon only
/// compares what it could read.
pub async fn glance(
    cfg: Option<&Metrics>,
    client: &reqwest::Client,
) -> (LiveMetrics, Option<Heat>) {
    let Some(cfg) = cfg else {
        return (LiveMetrics::default(), None);
    };
    let metrics = match &cfg.url {
        Some(url) => scrape(client, url)
            .await
            .map(|samples| live_metrics(&samples, &cfg.names))
            .unwrap_or_default(),
        None => LiveMetrics::default(),
    };
    (metrics, glance_heat(Some(cfg), client).await)
}

/// [`glance`]'s heat alone: no metrics scrape (a scrape resets the window
/// of a stack that averages its gauges between two).
pub async fn glance_heat(cfg: Option<&Metrics>, client: &reqwest::Client) -> Option<Heat> {
    match &cfg?.heat {
        Some(source) => read_heat(client, source).await.ok(),
        None => None,
    }
}

/// Scrapes the metrics endpoint once more and drops the answer, after the
/// served model answered. llama-server averages its gauges
/// (`predicted_tokens_seconds`) over the window between two scrapes, and
/// the model it serves is often the proposer: without this, the next
/// cycle's "live" speed would be the model's own decoding of its answers
/// (all of it, when the cycle measured nothing). For a stack whose gauges
/// do not reset, it changes nothing. A failure only loses that guard.
pub async fn end_window(cfg: Option<&Metrics>, client: &reqwest::Client) {
    let Some(url) = cfg.and_then(|c| c.url.as_ref()) else {
        return;
    };
    match scrape(client, url).await {
        Ok(_) => tracing::debug!(%url, "metrics window closed after the model answered"),
        Err(e) => tracing::debug!("closing the metrics window after the model answered: {e}"),
    }
}

async fn scrape(
    client: &reqwest::Client,
    url: &reqwest::Url,
) -> Result<Vec<prometheus::Sample>, String> {
    let resp = client
        .get(url.clone())
        .timeout(Duration::from_secs(10))
        .send()
        .await
        .map_err(|e| format!("{url}: {e}"))?;
    if !resp.status().is_success() {
        return Err(format!("{url} answered {}", resp.status()));
    }
    let text = resp.text().await.map_err(|e| format!("{url}: {e}"))?;
    prometheus::parse(&text).map_err(|e| format!("{url}: {e}"))
}

/// Maps the stack's series to the proposer's view through the config's names.
fn live_metrics(samples: &[prometheus::Sample], names: &BTreeMap<String, String>) -> LiveMetrics {
    let get = |ours: &str| {
        names
            .get(ours)
            .and_then(|theirs| prometheus::value(samples, theirs))
            .filter(|v| v.is_finite())
    };
    let draft_acceptance = match (get(DRAFT_PROPOSED), get(DRAFT_ACCEPTED)) {
        (Some(p), Some(a)) if p > 0.0 => Some(a / p),
        _ => None,
    };
    let seconds_per_token = get(SECONDS_PER_TOKEN)
        .or_else(|| get(TOKENS_PER_SECOND).filter(|r| *r > 0.0).map(|r| 1.0 / r));
    let known = [
        SECONDS_PER_TOKEN,
        TOKENS_PER_SECOND,
        HEAT_COVERAGE,
        TIER_RESIDENCY,
        FAR_AVAILABLE,
        DRAFT_PROPOSED,
        DRAFT_ACCEPTED,
        // The daemon's own concern, not the proposer's.
        live_load::PROCESSING,
        live_load::WAITING,
        live_load::TOTAL,
    ];
    let other = names
        .keys()
        .filter(|k| !known.contains(&k.as_str()))
        .filter_map(|k| get(k).map(|v| (k.clone(), v)))
        .collect();
    LiveMetrics {
        seconds_per_token,
        tier_residency: get(TIER_RESIDENCY),
        heat_coverage: get(HEAT_COVERAGE),
        far_available: get(FAR_AVAILABLE),
        draft_acceptance,
        other,
    }
}

async fn read_heat(client: &reqwest::Client, source: &str) -> Result<Heat, String> {
    if source.starts_with("http://") || source.starts_with("https://") {
        let resp = client
            .get(source)
            .timeout(Duration::from_secs(10))
            .send()
            .await
            .map_err(|e| format!("heat: {source}: {e}"))?;
        if !resp.status().is_success() {
            return Err(format!("heat: {source} answered {}", resp.status()));
        }
        let text = resp
            .text()
            .await
            .map_err(|e| format!("heat: {source}: {e}"))?;
        Heat::parse(&text, source).map_err(|e| format!("heat: {e}"))
    } else {
        Heat::load(std::path::Path::new(source)).map_err(|e| match e {
            crate::heat::HeatError::Read { origin, source }
                if source.kind() == std::io::ErrorKind::NotFound =>
            {
                format!(
                    "{NO_HEAT_YET}: {origin} does not exist (the stack writes it as it runs, \
                     e.g. with its first bench run)"
                )
            }
            e => format!("heat: {e}"),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_the_stacks_names_and_derives_acceptance() {
        let samples = prometheus::parse(
            "tinyk3_seconds_per_token 0.05\ntinyk3_draft_proposed_total 10\ntinyk3_draft_accepted_total 7\nx_other 3\n",
        )
        .unwrap();
        let names: BTreeMap<String, String> = [
            ("seconds_per_token", "tinyk3_seconds_per_token"),
            ("draft_proposed", "tinyk3_draft_proposed_total"),
            ("draft_accepted", "tinyk3_draft_accepted_total"),
            ("queue", "x_other"),
            ("missing", "not_there"),
        ]
        .into_iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
        let m = live_metrics(&samples, &names);
        assert_eq!(m.seconds_per_token, Some(0.05));
        assert_eq!(m.draft_acceptance, Some(0.7));
        assert_eq!(m.other.get("queue"), Some(&3.0));
        assert!(!m.other.contains_key("missing"));
        assert_eq!(m.heat_coverage, None);
    }

    #[test]
    fn a_token_rate_reads_as_seconds_per_token() {
        let samples = prometheus::parse(
            "llamacpp:predicted_tokens_seconds 40\nllamacpp:spec_decode_num_draft_tokens_total 0\n",
        )
        .unwrap();
        let names: BTreeMap<String, String> = [
            ("tokens_per_second", "llamacpp:predicted_tokens_seconds"),
            (
                "draft_proposed",
                "llamacpp:spec_decode_num_draft_tokens_total",
            ),
        ]
        .into_iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
        let m = live_metrics(&samples, &names);
        assert_eq!(m.seconds_per_token, Some(0.025));
        // No drafts proposed yet: no acceptance rate, rather than 0/0.
        assert_eq!(m.draft_acceptance, None);
        assert!(m.other.is_empty(), "{:?}", m.other);
        // A server that has generated nothing yet reports a rate of 0.
        let idle = prometheus::parse("llamacpp:predicted_tokens_seconds 0\n").unwrap();
        assert_eq!(live_metrics(&idle, &names).seconds_per_token, None);
    }

    #[tokio::test]
    async fn unreachable_metrics_are_a_gap_unless_required() {
        let mut cfg = Metrics {
            url: Some("http://127.0.0.1:9/metrics".parse().unwrap()),
            names: BTreeMap::new(),
            heat: Some("/nonexistent/expert_hist.json".into()),
            heat_trace: None,
            heat_flush: None,
            required: false,
        };
        let client = reqwest::Client::new();
        let obs = observe(Some(&cfg), &client).await.unwrap();
        assert_eq!(obs.gaps.len(), 2, "{:?}", obs.gaps);
        assert!(obs.gaps[0].starts_with("metrics:"), "{:?}", obs.gaps);
        assert!(obs.gaps[1].contains("expert_hist.json"), "{:?}", obs.gaps);
        // A heat file that does not exist yet is said as such (a fresh
        // start warned "cannot read ... No such file").
        assert!(obs.gaps[1].starts_with(NO_HEAT_YET), "{:?}", obs.gaps);
        cfg.required = true;
        let err = observe(Some(&cfg), &client).await.unwrap_err();
        assert!(err.to_string().contains("required = true"), "{err}");
    }
}
