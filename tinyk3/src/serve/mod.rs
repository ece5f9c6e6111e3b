//! `tinyk3 serve`: an OpenAI-compatible server over one engine, with
//! schema-constrained decoding, Prometheus metrics and the expert heat.
//!
//! Module map:
//! - [`http`]: routes and handlers; [`body`]: whole and server-sent-event bodies;
//! - [`openai`]: the request (validated, errors naming the field) and response formats;
//! - [`admission`]: the bounded queue; [`worker`]: the engine thread that runs one generation at a time;
//! - [`json`], [`schema`], [`number`], [`constrain`]: JSON Schema → grammar → allowed next bytes;
//! - [`sample`]: greedy or seeded picking; [`text`]: UTF-8 deltas and stop sequences;
//! - [`metrics`]: the Prometheus exposition and the bounded heat-trace ring.

pub mod admission;
pub mod body;
pub mod constrain;
pub mod http;
pub mod json;
pub mod metrics;
pub mod number;
pub mod openai;
pub mod sample;
pub mod schema;
pub mod text;
pub mod worker;

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::signal::unix::{SignalKind, signal};

use crate::error::{Error, Result};
use crate::manifest::Manifest;
use crate::profile::{Settings, check_gb, check_threads};

/// How long a SIGTERM waits for the running generation before cutting it short.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(20);

/// Everything `tinyk3 serve` is started with.
#[derive(Debug, Clone)]
pub struct Options {
    pub model: PathBuf,
    pub profile: PathBuf,
    pub listen: String,
    pub allow_remote: bool,
    pub dump_dir: Option<PathBuf>,
    pub queue: usize,
    pub max_prompt_tokens: usize,
    /// Feed only the last N prompt tokens to the model (0 = the whole prompt).
    pub context_tokens: usize,
    /// Knobs given on the command line over the profile's.
    pub overrides: Overrides,
}

/// Knobs given on the command line, over the profile's (as `bench`'s flags
/// override its `--profile`). The server still reports the profile file it
/// read, and names the knobs it did not take from it.
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    pub cache_gb: Option<f64>,
    pub trunk_gb: Option<f64>,
    pub threads: Option<u64>,
}

impl Overrides {
    /// `settings` with the overrides applied, and the profile keys they replaced.
    fn apply(&self, mut settings: Settings) -> Result<(Settings, Vec<&'static str>)> {
        let mut replaced = Vec::new();
        if let Some(v) = self.cache_gb {
            settings.cache_gb = check_gb("--cache-gb", v)?;
            replaced.push("memory.cache_gb");
        }
        if let Some(v) = self.trunk_gb {
            settings.trunk_gb = Some(check_gb("--trunk-gb", v)?);
            replaced.push("memory.trunk_gb");
        }
        if let Some(v) = self.threads {
            settings.threads = check_threads("--threads", v)?;
            replaced.push("compute.threads");
        }
        Ok((settings, replaced))
    }
}

/// The profile the server runs, as `/health` reports it.
#[derive(Debug, Clone)]
pub struct Served {
    /// sha256 of the profile file's bytes, as read at start.
    pub profile_sha256: String,
    /// The profile keys the command line overrode.
    pub overridden: Vec<&'static str>,
}

/// The address to bind, refusing non-loopback addresses unless allowed.
fn listen_addr(listen: &str, allow_remote: bool) -> Result<SocketAddr> {
    let addrs: Vec<SocketAddr> = listen
        .to_socket_addrs()
        .map_err(|e| {
            Error::Usage(format!(
                "--listen {listen:?} is not an address like 127.0.0.1:8181: {e}"
            ))
        })?
        .collect();
    let Some(first) = addrs.first().copied() else {
        return Err(Error::Usage(format!(
            "--listen {listen:?} resolves to no address"
        )));
    };
    if !allow_remote {
        if let Some(remote) = addrs.iter().find(|a| !a.ip().is_loopback()) {
            return Err(Error::Usage(format!(
                "refusing to listen on {remote} (from --listen {listen}): it is not a loopback address and the server has no authentication; pass --allow-remote to serve other machines"
            )));
        }
    }
    Ok(first)
}

/// Runs the server until SIGTERM or SIGINT.
pub fn run(opts: Options) -> Result<()> {
    let addr = listen_addr(&opts.listen, opts.allow_remote)?;
    let read = Settings::read_profile(&opts.profile)?;
    let (settings, overridden) = opts.overrides.apply(read.settings)?;
    let served = Served {
        profile_sha256: read.sha256,
        overridden,
    };
    let manifest = Manifest::load(&opts.model)?;
    if opts.max_prompt_tokens == 0 {
        return Err(Error::Usage(
            "--max-prompt-tokens must be at least 1".into(),
        ));
    }
    // One thread is plenty for the HTTP side: the engine thread does the work.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Error::io("cannot start the async runtime", e))?;
    rt.block_on(serve(opts, settings, served, manifest.digest, addr))
}

async fn serve(
    opts: Options,
    settings: Settings,
    served: Served,
    digest: String,
    addr: SocketAddr,
) -> Result<()> {
    let listener = TcpListener::bind(addr).await.map_err(|e| {
        Error::Usage(format!(
            "cannot listen on {addr}: {e}; pick another --listen port"
        ))
    })?;
    let local = listener
        .local_addr()
        .map_err(|e| Error::io("cannot read the bound address", e))?;
    let live = Arc::new(metrics::Live::default());
    let stop = Arc::new(worker::Stop::default());
    let (jobs, job_rx) = std::sync::mpsc::channel();
    let (ready_tx, ready_rx) = std::sync::mpsc::sync_channel(1);
    let engine_thread = worker::spawn(
        opts.model.clone(),
        settings,
        live.clone(),
        stop.clone(),
        job_rx,
        ready_tx,
    );
    let state = Arc::new(http::State {
        live,
        jobs: Mutex::new(Some(jobs)),
        stop: stop.clone(),
        ready: AtomicBool::new(false),
        queue: opts.queue,
        max_prompt_tokens: opts.max_prompt_tokens,
        context_tokens: opts.context_tokens,
        dump_dir: opts.dump_dir.clone(),
        model_name: "tinyk3".into(),
        model_digest: digest,
        served,
        next_id: AtomicU64::new(1),
    });
    let signals =
        |kind| signal(kind).map_err(|e| Error::io("cannot install the signal handler", e));
    let mut term = signals(SignalKind::terminate())?;
    let mut int = signals(SignalKind::interrupt())?;
    let graceful = GracefulShutdown::new();
    let ready = tokio::task::spawn_blocking(move || ready_rx.recv());
    tokio::pin!(ready);
    let mut loaded = false;
    loop {
        tokio::select! {
            r = &mut ready, if !loaded => match r {
                Ok(Ok(Ok(()))) => {
                    loaded = true;
                    state.ready.store(true, Ordering::SeqCst);
                    eprintln!("listening on http://{local}");
                }
                Ok(Ok(Err(e))) => return Err(e),
                _ => return Err(Error::Runtime("the engine thread ended while opening the model".into())),
            },
            conn = listener.accept() => {
                let stream = match conn {
                    Ok((s, _)) => s,
                    Err(e) => {
                        // Out of descriptors and the like: keep serving the connections we have.
                        eprintln!("tinyk3 serve: accept failed: {e}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let st = state.clone();
                let svc = service_fn(move |req| http::handle(st.clone(), req));
                let conn = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), svc);
                let watched = graceful.watch(conn);
                tokio::spawn(async move {
                    let _ = watched.await;
                });
            }
            _ = term.recv() => break,
            _ = int.recv() => break,
        }
    }
    eprintln!("tinyk3 serve: shutting down; finishing the running generation");
    stop.draining.store(true, Ordering::SeqCst);
    drop(listener);
    // Dropping the queue's sender lets the engine thread end after its current job.
    state.jobs.lock().expect("queue lock").take();
    let connections = graceful.shutdown();
    tokio::pin!(connections);
    if tokio::time::timeout(SHUTDOWN_GRACE, &mut connections)
        .await
        .is_err()
    {
        eprintln!(
            "tinyk3 serve: the generation outlived the {}s grace period; cutting it short",
            SHUTDOWN_GRACE.as_secs()
        );
        stop.cut.store(true, Ordering::SeqCst);
        let _ = tokio::time::timeout(Duration::from_secs(5), &mut connections).await;
    }
    if loaded {
        let _ = tokio::time::timeout(
            Duration::from_secs(5),
            tokio::task::spawn_blocking(move || engine_thread.join()),
        )
        .await;
    }
    eprintln!("tinyk3 serve: stopped");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_remote_addresses_unless_allowed() {
        assert!(listen_addr("127.0.0.1:0", false).is_ok());
        let e = listen_addr("0.0.0.0:8181", false).unwrap_err();
        assert!(
            e.to_string().contains("--allow-remote") && e.exit_code() == 2,
            "{e}"
        );
        assert!(listen_addr("0.0.0.0:8181", true).is_ok());
        assert!(
            listen_addr("nonsense", false)
                .unwrap_err()
                .to_string()
                .contains("--listen")
        );
    }
}
