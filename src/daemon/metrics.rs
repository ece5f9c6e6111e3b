//! The daemon's own Prometheus endpoint: cycles by verdict, consecutive
//! failures, the current noise floor, the best measured seconds per token,
//! the distance to the target, the last cycle's duration, the staged wins
//! waiting, the engine time (the budget window's share, the last day's
//! seconds by use) and whether the daemon waits, and why. Served on loopback (unless the config allows otherwise) by a
//! minimal HTTP/1.1 responder: one route, `GET /metrics`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::progress::Progress;
use crate::vocab::VerdictKind;

/// The state behind the endpoint; the loop updates it after each cycle.
#[derive(Debug, Default)]
pub struct DaemonMetrics {
    inner: Mutex<State>,
    /// The running cycle's phase and runs, read at each scrape.
    progress: Progress,
}

#[derive(Debug, Default, Clone)]
struct State {
    cycles_by_verdict: BTreeMap<&'static str, u64>,
    consecutive_failures: u64,
    noise_floor: Option<f64>,
    best_seconds_per_token: Option<f64>,
    target_seconds_per_token: f64,
    last_cycle_seconds: Option<f64>,
    staged_waiting: u64,
    /// The share of the budget window the engine runs took.
    engine_share: Option<f64>,
    /// The last 24 hours' engine seconds by use.
    engine_day: Option<crate::ledger::EngineSeconds>,
    waiting: Option<crate::vocab::WaitKind>,
}

impl DaemonMetrics {
    pub fn new(target_seconds_per_token: f64, progress: Progress) -> Arc<DaemonMetrics> {
        let m = DaemonMetrics {
            progress,
            ..DaemonMetrics::default()
        };
        m.inner
            .lock()
            .expect("metrics lock")
            .target_seconds_per_token = target_seconds_per_token;
        Arc::new(m)
    }

    /// Records a finished cycle.
    pub fn cycle_finished(&self, verdict: VerdictKind, seconds: f64, failed: bool) {
        let mut s = self.inner.lock().expect("metrics lock");
        *s.cycles_by_verdict.entry(verdict.as_str()).or_default() += 1;
        s.last_cycle_seconds = Some(seconds);
        s.consecutive_failures = if failed {
            s.consecutive_failures + 1
        } else {
            0
        };
    }

    pub fn set_noise_floor(&self, floor: Option<f64>) {
        self.inner.lock().expect("metrics lock").noise_floor = floor;
    }

    /// Keeps the lowest measured seconds per token seen.
    pub fn observe_seconds_per_token(&self, spt: f64) {
        let mut s = self.inner.lock().expect("metrics lock");
        if spt.is_finite() && spt > 0.0 && s.best_seconds_per_token.is_none_or(|b| spt < b) {
            s.best_seconds_per_token = Some(spt);
        }
    }

    /// The engine time: the budget window's share, the last day by use.
    pub fn set_engine(&self, share: f64, day: crate::ledger::EngineSeconds) {
        let mut s = self.inner.lock().expect("metrics lock");
        s.engine_share = Some(share);
        s.engine_day = Some(day);
    }

    /// Whether the daemon waits instead of running cycles, and why.
    pub fn set_waiting(&self, why: Option<crate::vocab::WaitKind>) {
        self.inner.lock().expect("metrics lock").waiting = why;
    }

    pub fn set_staged_waiting(&self, n: u64) {
        self.inner.lock().expect("metrics lock").staged_waiting = n;
    }

    /// The exposition text.
    pub fn render(&self) -> String {
        let s = self.inner.lock().expect("metrics lock").clone();
        let mut out = String::new();
        let mut gauge = |name: &str, help: &str, v: Option<f64>| {
            if let Some(v) = v {
                let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {v}");
            }
        };
        gauge(
            "orchestrator_consecutive_failures",
            "Failed cycles in a row.",
            Some(s.consecutive_failures as f64),
        );
        gauge(
            "orchestrator_noise_floor",
            "Current noise floor (relative change, as a log ratio).",
            s.noise_floor,
        );
        gauge(
            "orchestrator_best_seconds_per_token",
            "Lowest seconds per token measured for any profile.",
            s.best_seconds_per_token,
        );
        gauge(
            "orchestrator_target_seconds_per_token",
            "The objective pinned in config.",
            Some(s.target_seconds_per_token),
        );
        gauge(
            "orchestrator_distance_to_target_seconds_per_token",
            "Best measured seconds per token minus the target.",
            s.best_seconds_per_token
                .map(|b| b - s.target_seconds_per_token),
        );
        gauge(
            "orchestrator_last_cycle_seconds",
            "Wall time of the last cycle.",
            s.last_cycle_seconds,
        );
        gauge(
            "orchestrator_staged_wins_waiting",
            "Confirmed wins waiting for a person.",
            Some(s.staged_waiting as f64),
        );
        gauge(
            "orchestrator_engine_share",
            "Share of the [cycle] engine_window_s the engine runs took.",
            s.engine_share,
        );
        let now = self.progress.snapshot();
        gauge(
            "orchestrator_cycle_running",
            "1 while a cycle runs, else 0.",
            Some(if now.is_some() { 1.0 } else { 0.0 }),
        );
        if let Some(now) = &now {
            gauge(
                "orchestrator_cycle_id",
                "The running cycle's id in the ledger.",
                Some(now.cycle as f64),
            );
            gauge(
                "orchestrator_cycle_runs_done",
                "Runs the running measurement has done.",
                Some(now.runs_done as f64),
            );
            gauge(
                "orchestrator_cycle_runs_max",
                "The most runs the running measurement can take (0 when not measuring).",
                Some(now.runs_max as f64),
            );
            gauge(
                "orchestrator_cycle_elapsed_seconds",
                "Wall time of the running cycle so far.",
                Some(now.elapsed().as_secs_f64()),
            );
            let _ = writeln!(
                out,
                "# HELP orchestrator_cycle_phase The running cycle's phase (1 on the current one).\n# TYPE orchestrator_cycle_phase gauge\norchestrator_cycle_phase{{phase=\"{}\"}} 1",
                now.phase
            );
        }
        if let Some(day) = s.engine_day {
            let _ = writeln!(
                out,
                "# HELP orchestrator_engine_seconds_last_day Engine run seconds of the last 24 h, by what they bought.\n# TYPE orchestrator_engine_seconds_last_day gauge"
            );
            for u in crate::vocab::EngineUse::ALL {
                let _ = writeln!(
                    out,
                    "orchestrator_engine_seconds_last_day{{use=\"{u}\"}} {}",
                    day.get(*u)
                );
            }
        }
        let _ = writeln!(
            out,
            "# HELP orchestrator_waiting 1 while the daemon waits instead of running cycles, by why.\n# TYPE orchestrator_waiting gauge"
        );
        for k in crate::vocab::WaitKind::ALL {
            let on = u8::from(s.waiting == Some(*k));
            let _ = writeln!(out, "orchestrator_waiting{{reason=\"{k}\"}} {on}");
        }
        let _ = writeln!(
            out,
            "# HELP orchestrator_cycles_total Cycles by verdict.\n# TYPE orchestrator_cycles_total counter"
        );
        for v in VerdictKind::ALL {
            let n = s.cycles_by_verdict.get(v.as_str()).copied().unwrap_or(0);
            let _ = writeln!(out, "orchestrator_cycles_total{{verdict=\"{v}\"}} {n}");
        }
        out
    }
}

/// Binds the endpoint; call [`serve`] on the listener.
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}

/// Answers `GET /metrics` until the task is dropped; 404 for anything else.
pub async fn serve(listener: TcpListener, metrics: Arc<DaemonMetrics>) {
    loop {
        let Ok((mut stream, _)) = listener.accept().await else {
            continue;
        };
        let metrics = metrics.clone();
        tokio::spawn(async move {
            let mut buf = vec![0u8; 4096];
            let mut len = 0;
            // Read the request head only; bodies are not accepted here.
            while len < buf.len() {
                match tokio::time::timeout(
                    std::time::Duration::from_secs(5),
                    stream.read(&mut buf[len..]),
                )
                .await
                {
                    Ok(Ok(0)) | Err(_) | Ok(Err(_)) => break,
                    Ok(Ok(n)) => len += n,
                }
                if buf[..len].windows(4).any(|w| w == b"\r\n\r\n") {
                    break;
                }
            }
            let head = String::from_utf8_lossy(&buf[..len]);
            let (status, body) = if head.starts_with("GET /metrics ") {
                ("200 OK", metrics.render())
            } else {
                (
                    "404 Not Found",
                    "only GET /metrics is served here\n".to_string(),
                )
            };
            let response = format!(
                "HTTP/1.1 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = stream.write_all(response.as_bytes()).await;
            let _ = stream.shutdown().await;
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observe::prometheus;

    #[test]
    fn exposition_parses_and_tracks_cycles() {
        let m = DaemonMetrics::new(1.0, Progress::default());
        m.cycle_finished(VerdictKind::Win, 2.0, false);
        m.cycle_finished(VerdictKind::Failed, 1.0, true);
        m.cycle_finished(VerdictKind::Failed, 1.0, true);
        m.observe_seconds_per_token(0.5);
        m.observe_seconds_per_token(0.7);
        let samples = prometheus::parse(&m.render()).unwrap();
        let get = |n: &str| prometheus::value(&samples, n);
        assert_eq!(get("orchestrator_consecutive_failures"), Some(2.0));
        assert_eq!(get("orchestrator_best_seconds_per_token"), Some(0.5));
        assert_eq!(
            get("orchestrator_distance_to_target_seconds_per_token"),
            Some(-0.5)
        );
        assert_eq!(get("orchestrator_cycles_total"), Some(3.0));
        assert!(samples.iter().any(|s| s.name == "orchestrator_cycles_total"
            && s.labels["verdict"] == "failed"
            && s.value == 2.0));
        m.cycle_finished(VerdictKind::WithinNoise, 1.0, false);
        let samples = prometheus::parse(&m.render()).unwrap();
        assert_eq!(
            prometheus::value(&samples, "orchestrator_consecutive_failures"),
            Some(0.0)
        );
    }

    /// A long cycle showed nothing from outside until it ended; the
    /// endpoint now says which cycle runs, its phase and its runs.
    #[test]
    fn the_running_cycle_phase_and_runs_are_exposed() {
        let progress = Progress::default();
        let m = DaemonMetrics::new(1.0, progress.clone());
        let samples = prometheus::parse(&m.render()).unwrap();
        assert_eq!(
            prometheus::value(&samples, "orchestrator_cycle_running"),
            Some(0.0)
        );
        assert_eq!(
            prometheus::value(&samples, "orchestrator_cycle_runs_done"),
            None
        );
        progress.start_cycle(12);
        progress.phase(crate::progress::phase::MEASURE, "A/B of remeasure");
        progress.runs(6, 36);
        let samples = prometheus::parse(&m.render()).unwrap();
        let get = |n: &str| prometheus::value(&samples, n);
        assert_eq!(get("orchestrator_cycle_running"), Some(1.0));
        assert_eq!(get("orchestrator_cycle_id"), Some(12.0));
        assert_eq!(get("orchestrator_cycle_runs_done"), Some(6.0));
        assert_eq!(get("orchestrator_cycle_runs_max"), Some(36.0));
        assert!(samples.iter().any(|s| s.name == "orchestrator_cycle_phase"
            && s.labels["phase"] == "measure"
            && s.value == 1.0));
    }

    #[tokio::test]
    async fn serves_metrics_over_loopback() {
        let listener = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let m = DaemonMetrics::new(1.0, Progress::default());
        let task = tokio::spawn(serve(listener, m.clone()));
        let body = reqwest::get(format!("http://{addr}/metrics"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        assert!(
            body.contains("orchestrator_target_seconds_per_token 1"),
            "{body}"
        );
        let r = reqwest::get(format!("http://{addr}/other")).await.unwrap();
        assert_eq!(r.status(), 404);
        task.abort();
    }

    #[test]
    fn the_engine_time_and_the_wait_are_exposed() {
        let m = DaemonMetrics::new(1.0, Progress::default());
        let samples = prometheus::parse(&m.render()).unwrap();
        assert_eq!(
            prometheus::value(&samples, "orchestrator_engine_share"),
            None
        );
        let waiting = |samples: &[prometheus::Sample], why: &str| {
            samples
                .iter()
                .find(|s| s.name == "orchestrator_waiting" && s.labels["reason"] == why)
                .map(|s| s.value)
        };
        assert_eq!(waiting(&samples, "converged"), Some(0.0));
        m.set_engine(
            0.25,
            crate::ledger::EngineSeconds {
                floor: 10.0,
                ab: 20.0,
                confirmation: 5.0,
                failed: 1.5,
            },
        );
        m.set_waiting(Some(crate::vocab::WaitKind::Budget));
        let samples = prometheus::parse(&m.render()).unwrap();
        assert_eq!(
            prometheus::value(&samples, "orchestrator_engine_share"),
            Some(0.25)
        );
        let by_use = |u: &str| {
            samples
                .iter()
                .find(|s| s.name == "orchestrator_engine_seconds_last_day" && s.labels["use"] == u)
                .map(|s| s.value)
        };
        assert_eq!(by_use("floor"), Some(10.0));
        assert_eq!(by_use("ab"), Some(20.0));
        assert_eq!(by_use("confirmation"), Some(5.0));
        assert_eq!(by_use("failed"), Some(1.5));
        assert_eq!(waiting(&samples, "budget"), Some(1.0));
        assert_eq!(waiting(&samples, "converged"), Some(0.0));
    }
}
