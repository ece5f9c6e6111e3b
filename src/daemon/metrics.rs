//! The daemon's own Prometheus endpoint: cycles by verdict, consecutive
//! failures, the current noise floor, the live and the best measured
//! seconds per token against the target, the last cycle's duration, the
//! stages by state, the running cycle's progress, the engine time (the
//! budget window's share, the last day's seconds by use) and whether the
//! daemon waits, and why. Served on loopback
//! (unless the config allows otherwise) by hyper's HTTP/1.1 server: one
//! route, `GET /metrics`. Every family is declared (`# HELP`, `# TYPE`)
//! from the first scrape on, with a sample once it has a value, so a
//! dashboard's queries name series that exist (deploy/grafana/).

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{ALLOW, CONTENT_TYPE, HeaderValue};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

use crate::ledger::{Ledger, StageCounts};
use crate::progress::Progress;
use crate::vocab::{StageState, VerdictKind};

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
    live_seconds_per_token: Option<f64>,
    best_seconds_per_token: Option<f64>,
    target_seconds_per_token: f64,
    last_cycle_seconds: Option<f64>,
    /// `None` until the ledger was read once.
    stages: Option<StageCounts>,
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

    /// The live profile's seconds per token as a cycle measured (or read)
    /// it: kept as the live value, and as the best when it is the lowest
    /// seen.
    pub fn observe_seconds_per_token(&self, spt: f64) {
        let mut s = self.inner.lock().expect("metrics lock");
        if spt.is_finite() && spt > 0.0 {
            s.live_seconds_per_token = Some(spt);
            if s.best_seconds_per_token.is_none_or(|b| spt < b) {
                s.best_seconds_per_token = Some(spt);
            }
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

    pub fn set_stages(&self, counts: StageCounts) {
        self.inner.lock().expect("metrics lock").stages = Some(counts);
    }

    /// Reads the stages by state from the ledger; a failed read keeps the
    /// last counts (the cycle's own writes already say what failed).
    pub async fn refresh_stages(&self, ledger: &Ledger) {
        match ledger.stage_counts().await {
            Ok(counts) => self.set_stages(counts),
            Err(e) => tracing::debug!("the metrics endpoint keeps its stage counts: {e}"),
        }
    }

    /// The exposition text.
    pub fn render(&self) -> String {
        let s = self.inner.lock().expect("metrics lock").clone();
        let mut out = String::new();
        let mut gauge = |name: &str, help: &str, v: Option<f64>| {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
            if let Some(v) = v {
                let _ = writeln!(out, "{name} {v}");
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
            "orchestrator_live_seconds_per_token",
            "Seconds per token of the live profile, as the last cycle measured it.",
            s.live_seconds_per_token,
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
            s.stages.map(|c| c.staged as f64),
        );
        gauge(
            "orchestrator_stages_reverted",
            "Approved stages whose replaced profile was written back.",
            s.stages.map(|c| c.reverted as f64),
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
        gauge(
            "orchestrator_cycle_id",
            "The running cycle's id in the ledger.",
            now.as_ref().map(|n| n.cycle as f64),
        );
        gauge(
            "orchestrator_cycle_runs_done",
            "Runs the running measurement has done.",
            now.as_ref().map(|n| n.runs_done as f64),
        );
        gauge(
            "orchestrator_cycle_runs_max",
            "The most runs the running measurement can take (0 when not measuring).",
            now.as_ref().map(|n| n.runs_max as f64),
        );
        gauge(
            "orchestrator_cycle_elapsed_seconds",
            "Wall time of the running cycle so far.",
            now.as_ref().map(|n| n.elapsed().as_secs_f64()),
        );
        let _ = writeln!(
            out,
            "# HELP orchestrator_cycle_phase The running cycle's phase (1 on the current one).\n# TYPE orchestrator_cycle_phase gauge"
        );
        if let Some(now) = &now {
            let _ = writeln!(out, "orchestrator_cycle_phase{{phase=\"{}\"}} 1", now.phase);
        }
        let _ = writeln!(
            out,
            "# HELP orchestrator_stages Stages of this stack by state.\n# TYPE orchestrator_stages gauge"
        );
        if let Some(c) = s.stages {
            for state in StageState::ALL {
                let _ = writeln!(
                    out,
                    "orchestrator_stages{{state=\"{state}\"}} {}",
                    c.of(*state)
                );
            }
        }
        let _ = writeln!(
            out,
            "# HELP orchestrator_engine_seconds_last_day Engine run seconds of the last 24 h, by what they bought.\n# TYPE orchestrator_engine_seconds_last_day gauge"
        );
        if let Some(day) = s.engine_day {
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

/// How long a client has to send its request head.
const HEAD_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest a connection is kept, however busy (a scraper reconnects).
const CONNECTION_LIFE: Duration = Duration::from_secs(60);
/// Connections served at once; more wait in the listen backlog, so a flood
/// of clients cannot take the file descriptors the cycles need.
const MAX_CONNECTIONS: usize = 64;
/// The first and the longest pause after `accept` failed for want of a
/// resource (EMFILE, ENFILE, ENOBUFS, ENOMEM). The failed connection stays
/// in the backlog, so the listener stays readable: retrying at once spins
/// a core until a descriptor frees up.
const ACCEPT_PAUSE_FIRST: Duration = Duration::from_millis(10);
const ACCEPT_PAUSE_MAX: Duration = Duration::from_secs(1);

/// Binds the endpoint; call [`serve`] on the listener.
pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}

/// Answers `GET /metrics` until the task is dropped; 404 for another path,
/// 405 for another method.
pub async fn serve(listener: TcpListener, metrics: Arc<DaemonMetrics>) {
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let mut pause = AcceptPause::default();
    loop {
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        match listener.accept().await {
            Ok((stream, _)) => {
                pause.recovered();
                let metrics = metrics.clone();
                tokio::spawn(async move {
                    serve_connection(stream, metrics).await;
                    drop(slot);
                });
            }
            Err(e) => {
                if let Some(wait) = pause.failed(&e) {
                    tokio::time::sleep(wait).await;
                }
            }
        }
    }
}

/// One connection, bounded in time: its request heads by [`HEAD_TIMEOUT`],
/// its whole life by [`CONNECTION_LIFE`].
async fn serve_connection(stream: TcpStream, metrics: Arc<DaemonMetrics>) {
    let service = service_fn(move |req: Request<Incoming>| {
        let response = respond(&req, &metrics);
        async move { Ok::<_, Infallible>(response) }
    });
    let conn = http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEAD_TIMEOUT)
        .serve_connection(TokioIo::new(stream), service);
    // A client that leaves mid-response, or a connection past its life, is
    // its own business: the endpoint serves the next.
    let _ = tokio::time::timeout(CONNECTION_LIFE, conn).await;
}

fn respond(req: &Request<Incoming>, metrics: &DaemonMetrics) -> Response<Full<Bytes>> {
    let text = |status: StatusCode, body: String| {
        let mut r = Response::new(Full::new(Bytes::from(body)));
        *r.status_mut() = status;
        r.headers_mut().insert(
            CONTENT_TYPE,
            HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
        );
        r
    };
    if req.uri().path() != "/metrics" {
        return text(
            StatusCode::NOT_FOUND,
            "only GET /metrics is served here\n".into(),
        );
    }
    if req.method() != Method::GET {
        let mut r = text(
            StatusCode::METHOD_NOT_ALLOWED,
            "only GET /metrics is served here\n".into(),
        );
        r.headers_mut()
            .insert(ALLOW, HeaderValue::from_static("GET"));
        return r;
    }
    text(StatusCode::OK, metrics.render())
}

/// The pause after failed `accept`s: none after an error of the connection
/// itself (it left the backlog), else doubling from [`ACCEPT_PAUSE_FIRST`]
/// to [`ACCEPT_PAUSE_MAX`], reset by the next accepted connection. Logged
/// once when a run of failures starts and once when it ends.
#[derive(Debug, Default)]
struct AcceptPause {
    failures: u32,
}

impl AcceptPause {
    fn failed(&mut self, e: &std::io::Error) -> Option<Duration> {
        use std::io::ErrorKind;
        if matches!(
            e.kind(),
            ErrorKind::ConnectionAborted | ErrorKind::ConnectionReset | ErrorKind::Interrupted
        ) {
            return None;
        }
        if self.failures == 0 {
            let hint = if e.raw_os_error() == Some(libc::EMFILE) {
                " (this process ran out of file descriptors: raise its limit,                  e.g. LimitNOFILE= in the service unit)"
            } else {
                ""
            };
            tracing::warn!(
                "the metrics endpoint cannot accept connections: {e}{hint}; retrying, at most every {} s",
                ACCEPT_PAUSE_MAX.as_secs()
            );
        }
        let wait = ACCEPT_PAUSE_FIRST
            .saturating_mul(1u32 << self.failures.min(16))
            .min(ACCEPT_PAUSE_MAX);
        self.failures = self.failures.saturating_add(1);
        Some(wait)
    }

    fn recovered(&mut self) {
        if self.failures > 0 {
            tracing::info!(
                failures = self.failures,
                "the metrics endpoint accepts connections again"
            );
            self.failures = 0;
        }
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
        let r = reqwest::Client::new()
            .post(format!("http://{addr}/metrics"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 405);
        assert_eq!(r.headers()["allow"], "GET");
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

    /// A client that connects and says nothing is let go after the head
    /// timeout, so idle connections cannot pile up.
    #[tokio::test]
    async fn a_silent_client_is_let_go_after_the_head_timeout() {
        use tokio::io::AsyncReadExt;
        let listener = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(serve(
            listener,
            DaemonMetrics::new(1.0, Progress::default()),
        ));
        let mut silent = tokio::net::TcpStream::connect(addr).await.unwrap();
        let started = std::time::Instant::now();
        let mut buf = [0u8; 512];
        let read = tokio::time::timeout(HEAD_TIMEOUT * 3, silent.read(&mut buf))
            .await
            .expect("the endpoint closed the silent connection");
        // Closed (0), or reset; either way not before the timeout.
        assert!(read.map_or(true, |n| n == 0 || buf[..n].starts_with(b"HTTP/1.1 408")));
        assert!(started.elapsed() >= HEAD_TIMEOUT - Duration::from_millis(100));
        task.abort();
    }

    #[test]
    fn accept_failures_pause_doubling_to_a_cap_and_connection_errors_do_not() {
        let mut p = AcceptPause::default();
        let emfile = std::io::Error::from_raw_os_error(libc::EMFILE);
        let waits: Vec<Duration> = (0..10).map(|_| p.failed(&emfile).unwrap()).collect();
        assert_eq!(waits[0], ACCEPT_PAUSE_FIRST);
        assert_eq!(waits[1], ACCEPT_PAUSE_FIRST * 2);
        assert!(waits.windows(2).all(|w| w[0] <= w[1]));
        assert_eq!(waits[9], ACCEPT_PAUSE_MAX);
        let aborted = std::io::Error::from(std::io::ErrorKind::ConnectionAborted);
        assert_eq!(p.failed(&aborted), None);
        p.recovered();
        assert_eq!(p.failed(&emfile), Some(ACCEPT_PAUSE_FIRST));
    }

    /// Every family is declared from the first scrape on, before it has a
    /// value; the stages appear by state once the ledger was read.
    #[test]
    fn every_family_is_declared_and_stages_are_by_state() {
        let m = DaemonMetrics::new(0.5, Progress::default());
        let text = m.render();
        for family in [
            "orchestrator_noise_floor",
            "orchestrator_live_seconds_per_token",
            "orchestrator_stages",
            "orchestrator_stages_reverted",
            "orchestrator_cycle_phase",
            "orchestrator_cycle_runs_done",
            "orchestrator_engine_share",
            "orchestrator_engine_seconds_last_day",
            "orchestrator_waiting",
        ] {
            assert!(
                text.contains(&format!("# TYPE {family} gauge\n")),
                "{family}: {text}"
            );
        }
        let samples = prometheus::parse(&text).unwrap();
        assert_eq!(prometheus::value(&samples, "orchestrator_stages"), None);
        m.set_stages(StageCounts {
            staged: 2,
            approved: 3,
            rejected: 0,
            expired: 1,
            reverted: 1,
        });
        m.observe_seconds_per_token(0.8);
        m.observe_seconds_per_token(0.9);
        let samples = prometheus::parse(&m.render()).unwrap();
        let state = |s: &str| {
            samples
                .iter()
                .find(|x| x.name == "orchestrator_stages" && x.labels["state"] == s)
                .map(|x| x.value)
        };
        assert_eq!(
            (state("staged"), state("approved"), state("expired")),
            (Some(2.0), Some(3.0), Some(1.0))
        );
        let get = |n: &str| prometheus::value(&samples, n);
        assert_eq!(get("orchestrator_staged_wins_waiting"), Some(2.0));
        assert_eq!(get("orchestrator_stages_reverted"), Some(1.0));
        assert_eq!(get("orchestrator_live_seconds_per_token"), Some(0.9));
        assert_eq!(get("orchestrator_best_seconds_per_token"), Some(0.8));
    }
}
