//! The server's live state as Prometheus text: what the engine last reported,
//! request counts and timings, and the bounded ring of the heat trace.

use std::collections::{BTreeMap, VecDeque};
use std::fmt::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::engine::Counters;

/// Requests that `tinyk3_seconds_per_token` averages over.
pub const RECENT_REQUESTS: usize = 16;
/// Trace entries kept for `POST /heat/flush` (8 bytes each on disk).
pub const TRACE_RING: usize = 1 << 21;

/// The heat trace's most recent entries; older ones are dropped and counted.
#[derive(Debug, Default)]
pub struct TraceRing {
    entries: VecDeque<(u32, u32)>,
    pub dropped: u64,
}

impl TraceRing {
    pub fn extend(&mut self, more: Vec<(u32, u32)>) {
        self.entries.extend(more);
        let over = self.entries.len().saturating_sub(TRACE_RING);
        self.entries.drain(..over);
        self.dropped += over as u64;
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// `expert_trace.bin`: little-endian int32 pairs (layer, expert) in request order.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.entries.len() * 8);
        for (l, e) in &self.entries {
            out.extend_from_slice(&(*l as i32).to_le_bytes());
            out.extend_from_slice(&(*e as i32).to_le_bytes());
        }
        out
    }
}

/// What the engine thread last published.
#[derive(Debug, Default)]
pub struct Snapshot {
    pub counters: Option<Counters>,
    /// Bytes of one expert on disk (for residency in bytes).
    pub expert_stride: u64,
    /// (tokens, decode seconds) of the last requests that generated tokens.
    pub recent: VecDeque<(u64, f64)>,
    pub predicted_tokens: u64,
    pub predicted_seconds: f64,
    pub prompt_tokens: u64,
    pub prompt_seconds: f64,
    /// Prompt tokens whose KV cache was reused instead of prefilled.
    pub prompt_cached_tokens: u64,
    /// `expert_hist.json` as of the last request.
    pub hist_json: String,
    pub ring: TraceRing,
}

impl Snapshot {
    /// Records one finished generation.
    pub fn served(&mut self, prompt: (u64, f64), predicted: (u64, f64)) {
        self.prompt_tokens += prompt.0;
        self.prompt_seconds += prompt.1;
        self.predicted_tokens += predicted.0;
        self.predicted_seconds += predicted.1;
        if predicted.0 > 0 {
            self.recent.push_back(predicted);
            if self.recent.len() > RECENT_REQUESTS {
                self.recent.pop_front();
            }
        }
    }
}

/// Shared between the HTTP side and the engine thread.
#[derive(Debug, Default)]
pub struct Live {
    pub snapshot: Mutex<Snapshot>,
    pub in_flight: AtomicU64,
    /// Admitted requests: the one in flight plus those queued.
    pub admitted: AtomicU64,
    /// Requests admitted since start (a counter): a reader that compares two
    /// readings sees a request that came and went between them.
    pub requests_total: AtomicU64,
    /// Responses by HTTP status.
    pub responses: Mutex<BTreeMap<u16, u64>>,
}

impl Live {
    pub fn count_response(&self, status: u16) {
        *self
            .responses
            .lock()
            .expect("metrics lock")
            .entry(status)
            .or_default() += 1;
    }
}

fn metric(out: &mut String, name: &str, kind: &str, help: &str, samples: &[(&str, f64)]) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
    for (labels, v) in samples {
        let value = if v.is_nan() {
            "NaN".to_string()
        } else {
            format!("{v}")
        };
        if labels.is_empty() {
            let _ = writeln!(out, "{name} {value}");
        } else {
            let _ = writeln!(out, "{name}{{{labels}}} {value}");
        }
    }
}

/// The Prometheus text exposition (format 0.0.4), one family of gauges and
/// counters per helper so each stays readable.
pub fn render(live: &Live) -> String {
    let s = live.snapshot.lock().expect("metrics lock");
    let mut out = String::new();
    render_engine(&mut out, &s);
    render_tokens(&mut out, &s);
    render_tiers(&mut out, &s);
    render_requests(&mut out, live);
    render_trace(&mut out, &s);
    out
}

/// Speed, heat coverage, the far tier's health, drafting and the phases of
/// the forward pass.
fn render_engine(out: &mut String, s: &Snapshot) {
    let (tokens, secs) = s
        .recent
        .iter()
        .fold((0u64, 0.0), |a, r| (a.0 + r.0, a.1 + r.1));
    let spt = if tokens > 0 {
        secs / tokens as f64
    } else {
        f64::NAN
    };
    metric(
        out,
        "tinyk3_seconds_per_token",
        "gauge",
        &format!(
            "Decode seconds per generated token over the last {RECENT_REQUESTS} requests (NaN before the first)."
        ),
        &[("", spt)],
    );
    let c = s.counters.clone();
    let hits = c.as_ref().map(|c| c.hits).unwrap_or_default();
    let served_warm = hits.pinned + hits.cache + hits.far;
    let total = served_warm + hits.cold;
    let coverage = if total > 0 {
        served_warm as f64 / total as f64
    } else {
        f64::NAN
    };
    metric(
        out,
        "tinyk3_heat_coverage",
        "gauge",
        "Share of expert requests served without a cold disk read (pinned, cache or far).",
        &[("", coverage)],
    );
    let far = c.as_ref().map(|c| c.far.clone()).unwrap_or_default();
    metric(
        out,
        "tinyk3_far_available",
        "gauge",
        "1 when the far expert tier is configured and answering.",
        &[("", f64::from(u8::from(far.available)))],
    );
    let draft = c.as_ref().map(|c| c.draft).unwrap_or_default();
    metric(
        out,
        "tinyk3_draft_proposed_total",
        "counter",
        "Draft tokens proposed by speculative decoding.",
        &[("", draft.proposed as f64)],
    );
    metric(
        out,
        "tinyk3_draft_accepted_total",
        "counter",
        "Draft tokens the full model accepted.",
        &[("", draft.accepted as f64)],
    );
    let ph = c.as_ref().map(|c| c.phases).unwrap_or_default();
    metric(
        out,
        "tinyk3_phase_seconds_total",
        "counter",
        "Seconds of the forward pass by part since start (prefill and decode): trunk, experts (and by tier), draft.",
        &[
            ("phase=\"trunk\"", ph.trunk),
            ("phase=\"expert\"", ph.expert),
            ("phase=\"expert_local\"", ph.expert_local),
            ("phase=\"expert_far\"", ph.expert_far),
            ("phase=\"expert_cold\"", ph.expert_cold),
            ("phase=\"draft\"", ph.draft),
        ],
    );
}

/// Tokens generated and prompt tokens processed, with their seconds.
fn render_tokens(out: &mut String, s: &Snapshot) {
    metric(
        out,
        "tinyk3_tokens_predicted_total",
        "counter",
        "Tokens generated.",
        &[("", s.predicted_tokens as f64)],
    );
    metric(
        out,
        "tinyk3_tokens_predicted_seconds_total",
        "counter",
        "Seconds spent generating them (decode steps).",
        &[("", s.predicted_seconds)],
    );
    metric(
        out,
        "tinyk3_prompt_tokens_total",
        "counter",
        "Prompt tokens processed.",
        &[("", s.prompt_tokens as f64)],
    );
    metric(
        out,
        "tinyk3_prompt_cached_tokens_total",
        "counter",
        "Prompt tokens whose KV cache was reused from the previous request (not processed).",
        &[("", s.prompt_cached_tokens as f64)],
    );
    metric(
        out,
        "tinyk3_prompt_seconds_total",
        "counter",
        "Seconds spent on prompt prefill.",
        &[("", s.prompt_seconds)],
    );
}

/// What each tier holds and serves, and the bytes read from disk.
fn render_tiers(out: &mut String, s: &Snapshot) {
    let c = s.counters.clone();
    let hits = c.as_ref().map(|c| c.hits).unwrap_or_default();
    let far = c.as_ref().map(|c| c.far.clone()).unwrap_or_default();
    let r = c.as_ref().map(|c| c.residency).unwrap_or_default();
    let stride = s.expert_stride as f64;
    metric(
        out,
        "tinyk3_tier_experts",
        "gauge",
        "Experts held per tier (far: the expert server's warm set).",
        &[
            ("tier=\"pinned\"", r.pinned_experts as f64),
            ("tier=\"cache\"", r.cache_experts as f64),
            ("tier=\"far\"", far.warm as f64),
        ],
    );
    metric(
        out,
        "tinyk3_tier_bytes",
        "gauge",
        "Expert bytes held per tier.",
        &[
            ("tier=\"pinned\"", r.pinned_bytes as f64),
            ("tier=\"cache\"", r.cache_bytes as f64),
            ("tier=\"far\"", far.warm as f64 * stride),
        ],
    );
    metric(
        out,
        "tinyk3_tier_hits_total",
        "counter",
        "Expert requests served per tier (cold: read from disk).",
        &[
            ("tier=\"pinned\"", hits.pinned as f64),
            ("tier=\"cache\"", hits.cache as f64),
            ("tier=\"far\"", hits.far as f64),
            ("tier=\"cold\"", hits.cold as f64),
        ],
    );
    let disk = c.as_ref().map_or(0, |c| c.disk_bytes_read);
    metric(
        out,
        "tinyk3_disk_bytes_read_total",
        "counter",
        "Bytes read from disk around the page cache (experts and trunk).",
        &[("", disk as f64)],
    );
    metric(
        out,
        "tinyk3_trunk_resident_bytes",
        "gauge",
        "Trunk bytes held in RAM.",
        &[("", r.trunk_resident_bytes as f64)],
    );
}

/// The generation queue and the HTTP responses by status.
fn render_requests(out: &mut String, live: &Live) {
    let in_flight = live.in_flight.load(Ordering::SeqCst);
    let queued = live
        .admitted
        .load(Ordering::SeqCst)
        .saturating_sub(in_flight);
    metric(
        out,
        "tinyk3_requests_in_flight",
        "gauge",
        "Generations running (at most 1).",
        &[("", in_flight as f64)],
    );
    metric(
        out,
        "tinyk3_requests_queued",
        "gauge",
        "Generations waiting in the queue.",
        &[("", queued as f64)],
    );
    metric(
        out,
        "tinyk3_requests_total",
        "counter",
        "Generations admitted since start (running, queued or done).",
        &[("", live.requests_total.load(Ordering::SeqCst) as f64)],
    );
    let responses = live.responses.lock().expect("metrics lock").clone();
    let labels: Vec<String> = responses
        .keys()
        .map(|code| format!("code=\"{code}\""))
        .collect();
    let samples: Vec<(&str, f64)> = labels
        .iter()
        .zip(responses.values())
        .map(|(l, v)| (l.as_str(), *v as f64))
        .collect();
    metric(
        out,
        "tinyk3_http_responses_total",
        "counter",
        "HTTP responses by status code.",
        &samples,
    );
}

/// The bounded ring of expert requests behind the heat trace.
fn render_trace(out: &mut String, s: &Snapshot) {
    metric(
        out,
        "tinyk3_heat_trace_entries",
        "gauge",
        "Expert requests held in the trace ring.",
        &[("", s.ring.len() as f64)],
    );
    metric(
        out,
        "tinyk3_heat_trace_dropped_total",
        "counter",
        "Oldest trace entries dropped from the bounded ring.",
        &[("", s.ring.dropped as f64)],
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_keeps_the_newest() {
        let mut r = TraceRing::default();
        r.extend((0..TRACE_RING as u32 + 3).map(|i| (0, i)).collect());
        assert_eq!((r.len(), r.dropped), (TRACE_RING, 3));
        assert_eq!(&r.to_bytes()[..8], &[0, 0, 0, 0, 3, 0, 0, 0]);
    }

    #[test]
    fn seconds_per_token_averages_recent_requests() {
        let live = Live::default();
        assert!(render(&live).contains("tinyk3_seconds_per_token NaN"));
        live.snapshot.lock().unwrap().served((3, 0.1), (4, 2.0));
        live.snapshot.lock().unwrap().served((3, 0.1), (6, 3.0));
        assert!(render(&live).contains("tinyk3_seconds_per_token 0.5\n"));
    }
}
