//! Shadow instances: a throw-away copy of the serving stack started with a
//! candidate profile on a free loopback port, measured through its surface
//! like the live one, then stopped (its whole process group killed and
//! reaped). The live stack is never touched.
//!
//! One shadow per profile serves every run of an A/B (both arms run in
//! shadows, so they are treated alike): a model load per run cost more than
//! the run on llama-server. A shadow that died, or whose run failed, is
//! stopped and started afresh for the next run; [`Scorer::finish`] stops
//! them all when the A/B ends.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::preflight;
use super::scorer::{MeasureError, RunFailure, RunOutcome, Scorer};
use super::surface::SurfaceScorer;
use crate::config::{Config, Shadow};
use crate::process::cancel::Cancel;
use crate::process::group::{self, Group, Spec};
use crate::process::template::{ArgvTemplate, RenderContext};
use crate::profile::ProfileFile;
use crate::vocab::Method;

/// Pause between health probes.
const PROBE_EVERY: Duration = Duration::from_millis(100);
/// One health probe's own bound.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// Starts shadow instances and measures them with a surface scorer.
#[derive(Debug, Clone)]
pub struct ShadowScorer {
    pub argv: ArgvTemplate,
    pub env: BTreeMap<String, String>,
    pub health_path: String,
    pub start_timeout: Duration,
    /// The children's working directory (the config's directory).
    pub cwd: PathBuf,
    /// Memory that must stay free beyond the profile's budget, in GB.
    pub headroom_gb: f64,
    /// The measurement, pointed at each shadow in turn.
    pub surface: SurfaceScorer,
    /// Fail a speculative candidate that drafted nothing (see [`Shadow`]).
    pub require_drafts: bool,
    /// The shadow's Prometheus counter of drafted tokens, if any.
    pub drafted_series: Option<String>,
    pub metrics_path: String,
    /// The shadows kept between this A/B's runs, one per profile.
    pub pool: ShadowPool,
}

/// Running shadows by profile digest. Clones share it; see
/// [`ShadowScorer::for_one_ab`] for a pool of one A/B's own.
#[derive(Debug, Clone, Default)]
pub struct ShadowPool(Arc<tokio::sync::Mutex<BTreeMap<String, RunningShadow>>>);

impl ShadowPool {
    /// The process ids of the shadows kept now (for tests and logs).
    pub async fn pids(&self) -> Vec<i32> {
        self.0
            .lock()
            .await
            .values()
            .map(RunningShadow::pid)
            .collect()
    }
}

/// A started, healthy shadow instance. Dropping it kills its group.
#[derive(Debug)]
pub struct RunningShadow {
    group: Group,
    base_url: reqwest::Url,
    health: reqwest::Url,
    /// The health probe's client (bounded by [`PROBE_TIMEOUT`]), kept from
    /// the start for every later probe.
    probe: reqwest::Client,
    /// The drafted-tokens counter after the last run: each run's own drafts
    /// are the rise from here (a fresh shadow starts it at 0).
    drafted_before: f64,
}

impl RunningShadow {
    pub fn base_url(&self) -> &reqwest::Url {
        &self.base_url
    }

    /// The leader's pid (also its process group).
    pub fn pid(&self) -> i32 {
        self.group.pid()
    }

    /// Kills the whole group, reaps it, returns its stderr tail.
    pub async fn stop(self) -> String {
        self.group.stop().await
    }

    /// Whether it still runs and answers its health path: a dead or dying
    /// shadow is restarted, never measured. (A killed multi-threaded server
    /// can linger as a zombie leader for a moment before it can be reaped,
    /// so the exit status alone is not enough.)
    async fn healthy(&mut self) -> bool {
        if self.group.try_exited().is_some() {
            return false;
        }
        matches!(self.probe.get(self.health.clone()).send().await, Ok(r) if r.status().is_success())
    }
}

impl ShadowScorer {
    /// The shadow scorer the config describes (needs `[stack.shadow]` and
    /// `[stack.surface]`).
    pub fn from_config(config: &Config) -> Option<ShadowScorer> {
        let shadow = config.stack.shadow.as_ref()?;
        let surface = SurfaceScorer::from_config(config)?;
        Some(ShadowScorer::new(shadow, config, surface))
    }

    pub fn new(shadow: &Shadow, config: &Config, surface: SurfaceScorer) -> ShadowScorer {
        ShadowScorer {
            argv: shadow.argv.clone(),
            env: shadow.env.clone(),
            health_path: shadow.health_path.clone(),
            start_timeout: shadow.start_timeout.duration(),
            cwd: config.base_dir.clone(),
            headroom_gb: config.measure.memory_headroom_gb,
            surface,
            require_drafts: shadow.require_drafts,
            drafted_series: shadow.drafted_series.clone(),
            metrics_path: shadow.metrics_path.clone(),
            pool: ShadowPool::default(),
        }
    }

    /// The same scorer with an empty pool of its own, for one A/B: its
    /// shadows are reused across that A/B's runs and no other's.
    pub fn for_one_ab(&self) -> ShadowScorer {
        ShadowScorer {
            pool: ShadowPool::default(),
            ..self.clone()
        }
    }

    /// Starts a shadow for `profile` and waits until it answers 200 on the
    /// health path, it exits, the deadline passes or `cancel` fires.
    pub async fn start(
        &self,
        profile: &ProfileFile,
        cancel: &Cancel,
    ) -> Result<RunningShadow, RunFailure> {
        preflight::check(&profile.profile, self.headroom_gb).map_err(RunFailure::before_start)?;
        let port = free_port().map_err(|source| {
            RunFailure::before_start(MeasureError::Spawn(group::ProcessError::Spawn {
                program: "(a free loopback port)".into(),
                cwd: self.cwd.clone(),
                source,
            }))
        })?;
        let ctx = RenderContext {
            out: None,
            profile: Some(profile.path.clone()),
            port: Some(port),
        };
        let mut argv = self.argv.render(&profile.profile, profile.dir(), &ctx);
        let program = argv.remove(0);
        let spec = Spec {
            program,
            args: argv,
            env: self.env.clone(),
            cwd: self.cwd.clone(),
            timeout: self.start_timeout,
            capture_stdout: false,
            cgroup_procs: None,
        };
        let mut group =
            Group::spawn(&spec).map_err(|e| RunFailure::before_start(MeasureError::Spawn(e)))?;
        let base_url: reqwest::Url = format!("http://127.0.0.1:{port}")
            .parse()
            .expect("a loopback URL parses");
        let health = base_url
            .join(&self.health_path)
            .unwrap_or_else(|_| base_url.clone());
        let client = reqwest::Client::builder()
            .timeout(PROBE_TIMEOUT)
            .build()
            .expect("a client with a timeout always builds");
        let t0 = Instant::now();
        let mut last = String::from("no answer yet");
        loop {
            if let Some(status) = group.try_exited() {
                let tail = group.stop().await;
                return Err(RunFailure {
                    error: MeasureError::ShadowExited {
                        status: status.to_string(),
                        message: group::last_line(&tail).to_string(),
                    },
                    exit_code: status.code(),
                    duration: t0.elapsed(),
                    stderr_tail: tail,
                });
            }
            if cancel.is_cancelled() || t0.elapsed() >= self.start_timeout {
                let tail = group.stop().await;
                let error = if cancel.is_cancelled() {
                    MeasureError::Cancelled
                } else {
                    MeasureError::ShadowUnhealthy {
                        url: health.to_string(),
                        after: self.start_timeout,
                        last,
                    }
                };
                return Err(RunFailure {
                    error,
                    exit_code: None,
                    duration: t0.elapsed(),
                    stderr_tail: tail,
                });
            }
            match client.get(health.clone()).send().await {
                Ok(r) if r.status().is_success() => {
                    return Ok(RunningShadow {
                        group,
                        base_url,
                        health,
                        probe: client,
                        drafted_before: 0.0,
                    });
                }
                Ok(r) => last = format!("HTTP {}", r.status()),
                Err(e) => last = e.to_string(),
            }
            tokio::select! {
                () = cancel.cancelled() => {}
                () = tokio::time::sleep(PROBE_EVERY) => {}
            }
        }
    }
}

impl ShadowScorer {
    /// A speculative candidate must show that it drafted: `timings.draft_n`
    /// in an answer, or the shadow's drafted-tokens counter above 0 (a fresh
    /// shadow starts it at 0). Otherwise the server served without
    /// speculation, and the run is a failure, never a measurement of the
    /// plain server under the candidate's name.
    async fn check_drafts(
        &self,
        profile: &ProfileFile,
        shadow: &mut RunningShadow,
        mut outcome: RunOutcome,
    ) -> Result<RunOutcome, RunFailure> {
        let draft_len = profile.profile.speculative.draft_len;
        if !self.require_drafts || draft_len == 0 {
            return Ok(outcome);
        }
        let drafted = super::surface::drafted_tokens(&outcome.extras);
        let counter = match &self.drafted_series {
            Some(series) => Some((series, self.scrape(shadow, series).await)),
            None => None,
        };
        let before = shadow.drafted_before;
        if let Some((series, Ok(v))) = &counter {
            outcome
                .extras
                .insert(format!("shadow {series}"), (*v).into());
            shadow.drafted_before = *v;
        }
        let counted = matches!(&counter, Some((_, Ok(v))) if *v > before);
        if drafted > 0 || counted {
            return Ok(outcome);
        }
        let mut evidence = "timings.draft_n is absent or 0 in every answer".to_string();
        match &counter {
            Some((series, Ok(v))) => evidence.push_str(&format!(" and {series} is still {v}")),
            Some((series, Err(e))) => {
                evidence.push_str(&format!(" and {series} could not be read ({e})"))
            }
            None => {}
        }
        Err(RunFailure {
            error: MeasureError::NoDrafts {
                draft_len,
                evidence,
            },
            exit_code: None,
            duration: outcome.duration,
            stderr_tail: String::new(),
        })
    }

    /// One series of the shadow's own metrics.
    async fn scrape(&self, shadow: &RunningShadow, series: &str) -> Result<f64, String> {
        let url = shadow
            .base_url()
            .join(&self.metrics_path)
            .map_err(|e| e.to_string())?;
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| e.to_string())?;
        let resp = client
            .get(url.clone())
            .send()
            .await
            .map_err(|e| format!("{url}: {e}"))?;
        if !resp.status().is_success() {
            return Err(format!("{url} answered {}", resp.status()));
        }
        let text = resp.text().await.map_err(|e| format!("{url}: {e}"))?;
        let samples =
            crate::observe::prometheus::parse(&text).map_err(|e| format!("{url}: {e}"))?;
        crate::observe::prometheus::value(&samples, series)
            .ok_or_else(|| format!("{url} has no series {series}"))
    }
}

/// A loopback port free right now. Another process could take it before
/// the shadow binds it; the shadow then exits and the run fails loudly.
fn free_port() -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

impl Scorer for ShadowScorer {
    fn method(&self) -> Method {
        Method::Surface
    }

    async fn score(
        &self,
        profile: &ProfileFile,
        cancel: &Cancel,
    ) -> Result<RunOutcome, RunFailure> {
        self.score_within(profile, cancel, self.surface.timeout)
            .await
    }

    /// The deadline bounds the measurement; a shadow's start has its own
    /// bound (`start_timeout_s`).
    async fn score_within(
        &self,
        profile: &ProfileFile,
        cancel: &Cancel,
        deadline: Duration,
    ) -> Result<RunOutcome, RunFailure> {
        let key = profile.profile.digest().to_string();
        // Runs are sequential; holding the pool for a run costs nothing.
        let mut pool = self.pool.0.lock().await;
        let kept = match pool.remove(&key) {
            Some(mut s) => Some((s.healthy().await, s)),
            None => None,
        };
        let mut shadow = match kept {
            Some((true, s)) => s,
            Some((false, dead)) => {
                let tail = dead.stop().await;
                tracing::warn!(
                    "the shadow for profile {} exited or stopped answering; starting another (its stderr ends: {})",
                    profile.profile.digest().short(),
                    group::last_line(&tail)
                );
                self.start(profile, cancel).await?
            }
            None => self.start(profile, cancel).await?,
        };
        let measured = match self
            .surface
            .at(shadow.base_url())
            .measure_within(cancel, deadline)
            .await
        {
            Ok(o) => self.check_drafts(profile, &mut shadow, o).await,
            Err(f) => Err(f),
        };
        match measured {
            Ok(mut o) => {
                o.stderr_tail = shadow.group.stderr_so_far();
                pool.insert(key, shadow);
                Ok(o)
            }
            // A failed run's shadow is not trusted with the next one.
            Err(mut f) => {
                f.stderr_tail = shadow.stop().await;
                Err(f)
            }
        }
    }

    async fn finish(&self) {
        let shadows = std::mem::take(&mut *self.pool.0.lock().await);
        for (_, s) in shadows {
            s.stop().await;
        }
    }
}
