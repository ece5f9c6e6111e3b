//! The embedded default: prepares the reference stack (a tinyk3 checkpoint
//! and a starting live profile, made with the workspace's own binary when
//! missing) and runs it as children of `orchestrator run` — `tinyk3 serve` as
//! the served model and live surface, `tinyk3 expert-server` as the far tier.
//! The children lead their own process groups and are killed with them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::config::{Config, Embedded};
use crate::process::cancel::Cancel;
use crate::process::group::{self, Group, ProcessError, Spec};
use crate::profile::{Profile, ProfileError};

#[derive(Debug, thiserror::Error)]
pub enum EmbeddedError {
    #[error(
        "the tinyk3 binary {} does not exist; build it first: cargo build --release --workspace",
        path.display()
    )]
    NoBinary { path: PathBuf },
    #[error("making the tinyk3 checkpoint in {} failed: {source}", dir.display())]
    Init {
        dir: PathBuf,
        #[source]
        source: ProcessError,
    },
    #[error("`tinyk3 init` exited with {code:?}: {stderr}")]
    InitExit { code: Option<i32>, stderr: String },
    #[error("the starting profile is not usable: {0}")]
    StartingProfile(#[from] ProfileError),
    #[error("cannot create {}: {source}", path.display())]
    Dir {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cannot start {what}: {source}")]
    Spawn {
        what: &'static str,
        #[source]
        source: ProcessError,
    },
    #[error(
        "{what} exited during start-up (is {addr} already in use by another process?): {stderr}"
    )]
    DiedAtStart {
        what: &'static str,
        addr: String,
        stderr: String,
    },
    #[error(
        "{what} did not answer on {addr} within {secs:.0} s; raise [embedded] start_timeout_s or read its log: {stderr}"
    )]
    NotHealthy {
        what: &'static str,
        addr: String,
        secs: f64,
        stderr: String,
    },
    #[error("start-up was interrupted")]
    Cancelled,
}

/// The running reference stack; [`EmbeddedStack::stop`] (or drop) kills it.
#[derive(Debug)]
pub struct EmbeddedStack {
    serve: Group,
    expert_server: Group,
}

/// Makes what is missing: the checkpoint, the live profile, the directories.
pub async fn prepare(config: &Config, e: &Embedded, cancel: &Cancel) -> Result<(), EmbeddedError> {
    if !e.tinyk3.is_file() {
        return Err(EmbeddedError::NoBinary {
            path: e.tinyk3.clone(),
        });
    }
    for dir in [&e.heat_dir, &config.stack.work_dir] {
        mkdir(dir)?;
    }
    if !e.model_dir.join("manifest.json").is_file() {
        tracing::info!(dir = %e.model_dir.display(), "making the tinyk3 checkpoint (once)");
        let mut args = vec![
            "init".to_string(),
            "--out".to_string(),
            e.model_dir.display().to_string(),
        ];
        args.extend(e.init_args.iter().cloned());
        let exit = group::run(&spec(config, e, args, Duration::from_secs(600)), cancel)
            .await
            .map_err(|source| EmbeddedError::Init {
                dir: e.model_dir.clone(),
                source,
            })?;
        if exit.code != Some(0) {
            return Err(EmbeddedError::InitExit {
                code: exit.code,
                stderr: exit.stderr_tail,
            });
        }
    }
    let live = &config.stack.live_profile;
    if !live.exists() {
        let start = Profile::load(&e.starting_profile)?;
        if let Some(dir) = live.parent() {
            mkdir(dir)?;
        }
        start.write_atomic(live)?;
        tracing::info!(path = %live.display(), "wrote the starting live profile");
    }
    Ok(())
}

fn mkdir(dir: &Path) -> Result<(), EmbeddedError> {
    std::fs::create_dir_all(dir).map_err(|source| EmbeddedError::Dir {
        path: dir.to_path_buf(),
        source,
    })
}

fn spec(config: &Config, e: &Embedded, args: Vec<String>, timeout: Duration) -> Spec {
    Spec {
        program: e.tinyk3.display().to_string(),
        args,
        env: BTreeMap::new(),
        cwd: config.base_dir.clone(),
        timeout,
        capture_stdout: false,
        cgroup_procs: None,
    }
}

/// Starts the far tier, then the server on the live profile, and waits until
/// both answer.
pub async fn start(
    config: &Config,
    e: &Embedded,
    cancel: &Cancel,
) -> Result<EmbeddedStack, EmbeddedError> {
    // Long-lived children: the timeout only matters to `wait`, never called.
    let forever = Duration::from_secs(10 * 365 * 24 * 3600);
    let expert_server = Group::spawn(&spec(
        config,
        e,
        vec![
            "expert-server".into(),
            "--model".into(),
            e.model_dir.display().to_string(),
            "--listen".into(),
            e.expert_server_listen.to_string(),
            "--warm-set".into(),
            e.expert_server_max_warm.to_string(),
        ],
        forever,
    ))
    .map_err(|source| EmbeddedError::Spawn {
        what: "the far tier (tinyk3 expert-server)",
        source,
    })?;
    let deadline = Deadline {
        at: Instant::now() + e.start_timeout.duration(),
        secs: e.start_timeout.duration().as_secs_f64(),
    };
    let expert_server = wait_tcp(
        expert_server,
        "the far tier (tinyk3 expert-server)",
        e.expert_server_listen,
        deadline,
        cancel,
    )
    .await?;
    let serve = Group::spawn(&spec(
        config,
        e,
        vec![
            "serve".into(),
            e.model_dir.display().to_string(),
            "--profile".into(),
            config.stack.live_profile.display().to_string(),
            "--listen".into(),
            e.serve_listen.to_string(),
            "--dump-cache-trace".into(),
            e.heat_dir.display().to_string(),
        ]
        .into_iter()
        .chain(e.serve_args.iter().cloned())
        .collect(),
        forever,
    ))
    .map_err(|source| EmbeddedError::Spawn {
        what: "the server (tinyk3 serve)",
        source,
    })?;
    let serve = match wait_health(serve, e.serve_listen, deadline, cancel).await {
        Ok(serve) => serve,
        Err(err) => {
            let _ = expert_server.stop().await;
            return Err(err);
        }
    };
    tracing::info!(
        serve = %e.serve_listen,
        far = %e.expert_server_listen,
        "the embedded stack is up"
    );
    Ok(EmbeddedStack {
        serve,
        expert_server,
    })
}

impl EmbeddedStack {
    /// Kills both process groups and reaps them.
    pub async fn stop(self) {
        let _ = self.serve.stop().await;
        let _ = self.expert_server.stop().await;
    }
}

/// When start-up gives up, and the configured limit for the message.
#[derive(Clone, Copy)]
struct Deadline {
    at: Instant,
    secs: f64,
}

/// Why start-up stopped waiting for a child.
enum Stall {
    Died,
    Late,
    Cancelled,
}

async fn wait_tcp(
    child: Group,
    what: &'static str,
    addr: std::net::SocketAddr,
    deadline: Deadline,
    cancel: &Cancel,
) -> Result<Group, EmbeddedError> {
    let mut child = child;
    loop {
        if tokio::net::TcpStream::connect(addr).await.is_ok() {
            return Ok(child);
        }
        if let Some(stall) = stalled(&mut child, deadline, cancel).await {
            return Err(explain(child, stall, what, addr.to_string(), deadline).await);
        }
    }
}

async fn wait_health(
    child: Group,
    addr: std::net::SocketAddr,
    deadline: Deadline,
    cancel: &Cancel,
) -> Result<Group, EmbeddedError> {
    let client = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(1))
        .timeout(Duration::from_secs(2))
        .build()
        .expect("a plain HTTP client builds");
    let url = format!("http://{addr}/health");
    let mut child = child;
    loop {
        if let Ok(r) = client.get(&url).send().await
            && r.status().is_success()
        {
            return Ok(child);
        }
        if let Some(stall) = stalled(&mut child, deadline, cancel).await {
            return Err(explain(child, stall, "the server (tinyk3 serve)", url, deadline).await);
        }
    }
}

async fn stalled(child: &mut Group, deadline: Deadline, cancel: &Cancel) -> Option<Stall> {
    if cancel.is_cancelled() {
        return Some(Stall::Cancelled);
    }
    if child.try_exited().is_some() {
        return Some(Stall::Died);
    }
    if Instant::now() >= deadline.at {
        return Some(Stall::Late);
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    None
}

/// Stops the child (it is of no use now) and turns its stderr into the error.
async fn explain(
    child: Group,
    stall: Stall,
    what: &'static str,
    addr: String,
    deadline: Deadline,
) -> EmbeddedError {
    let stderr = child.stop().await;
    match stall {
        Stall::Cancelled => EmbeddedError::Cancelled,
        Stall::Died => EmbeddedError::DiedAtStart { what, addr, stderr },
        Stall::Late => EmbeddedError::NotHealthy {
            what,
            addr,
            secs: deadline.secs,
            stderr,
        },
    }
}
