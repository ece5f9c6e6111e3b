//! Test doubles and fixtures of the brain's tests: a scripted HTTP server in
//! place of a served model (for faults a real model cannot produce on
//! demand), a duplicate set, a log capture, the repository's menu, and a
//! measured experiment as the history holds it.

use std::collections::BTreeMap;
use std::io;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tracing_subscriber::fmt::MakeWriter;

use super::DuplicateCheck;
use crate::config;
use crate::ledger::{CycleId, ExperimentId, ExperimentOutcome, LedgerError};
use crate::menu::{Excluded, Menu, MenuId, Proposal};
use crate::vocab::{Digest, ProposerKind, VerdictKind};

/// One scripted answer.
#[derive(Debug, Clone)]
pub(crate) enum Reply {
    /// 200 with a chat completion whose `choices[0].message.content` is this.
    Content(String),
    /// This status with this body.
    Status(u16, String),
    /// 200 with this body as it is.
    Body(String),
    /// The reply after a pause (to be slower than the client's timeout).
    Delay(Duration, Box<Reply>),
}

/// A request as the double received it.
#[derive(Debug, Clone)]
pub(crate) struct Received {
    /// The request line and headers, as sent.
    pub head: String,
    pub body: Value,
}

impl Received {
    /// The contents of the chat messages, in order.
    pub fn message_contents(&self) -> Vec<String> {
        self.body["messages"]
            .as_array()
            .map(|m| {
                m.iter()
                    .map(|m| m["content"].as_str().unwrap_or_default().to_string())
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// Stands in for the served model: an HTTP/1.1 server on loopback that
/// answers each request with the next scripted reply (HTTP 500 once the
/// script is exhausted) and records what it received.
pub(crate) struct ScriptedModelServerDouble {
    addr: SocketAddr,
    received: Arc<Mutex<Vec<Received>>>,
    task: tokio::task::JoinHandle<()>,
}

impl ScriptedModelServerDouble {
    pub async fn start(script: Vec<Reply>) -> ScriptedModelServerDouble {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind loopback");
        let addr = listener.local_addr().unwrap();
        let received = Arc::new(Mutex::new(Vec::new()));
        let script = Arc::new(Mutex::new(script.into_iter()));
        let log = received.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (script, log) = (script.clone(), log.clone());
                tokio::spawn(async move {
                    let _ = serve_one(stream, script, log).await;
                });
            }
        });
        ScriptedModelServerDouble {
            addr,
            received,
            task,
        }
    }

    /// The `[model] base_url` to configure, ending in `/v1`.
    pub fn base_url(&self) -> reqwest::Url {
        format!("http://{}/v1", self.addr).parse().unwrap()
    }

    pub fn received(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }
}

impl Drop for ScriptedModelServerDouble {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve_one(
    mut stream: TcpStream,
    script: Arc<Mutex<std::vec::IntoIter<Reply>>>,
    log: Arc<Mutex<Vec<Received>>>,
) -> io::Result<()> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let length = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-length")
                .then(|| v.trim().parse::<usize>().ok())
                .flatten()
        })
        .unwrap_or(0);
    while buf.len() < head_end + length {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let body = serde_json::from_slice(&buf[head_end..]).unwrap_or(Value::Null);
    log.lock().unwrap().push(Received { head, body });
    let reply = script.lock().unwrap().next();
    let mut reply = reply.unwrap_or(Reply::Status(500, "script exhausted".to_string()));
    while let Reply::Delay(pause, inner) = reply {
        tokio::time::sleep(pause).await;
        reply = *inner;
    }
    let (status, body) = match reply {
        Reply::Content(content) => (
            200,
            json!({
                "id": "chatcmpl-double",
                "object": "chat.completion",
                "choices": [{
                    "index": 0,
                    "message": {"role": "assistant", "content": content},
                    "finish_reason": "stop"
                }]
            })
            .to_string(),
        ),
        Reply::Status(status, body) => (status, body),
        Reply::Body(body) => (200, body),
        Reply::Delay(..) => unreachable!("delays are unwrapped above"),
    };
    let response = format!(
        "HTTP/1.1 {status} Scripted\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(response.as_bytes()).await?;
    stream.shutdown().await
}

/// A loopback address nothing listens on.
pub(crate) async fn dead_address() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    addr
}

/// `[model]` for a test: short timeouts.
pub(crate) fn model_config(
    base_url: reqwest::Url,
    api_key_env: Option<&str>,
    request_timeout_s: f64,
    max_attempts: u32,
) -> config::Model {
    config::Model {
        base_url,
        name: "tinyk3".to_string(),
        api_key_env: api_key_env.map(str::to_string),
        connect_timeout: config::Seconds::try_from(1.0).unwrap(),
        request_timeout: config::Seconds::try_from(request_timeout_s).unwrap(),
        max_attempts,
        max_tokens: config::DEFAULT_MAX_TOKENS,
        rationale_max_chars: crate::menu::RATIONALE_MAX_CHARS,
        bandit_fallback_after: 3,
        bandit_after_no_win: 4,
    }
}

/// The repository's menu.
pub(crate) fn repo_menu() -> Menu {
    Menu::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("experiments"))
        .expect("the repository's menu loads")
}

/// Experiment `id` (also its cycle) of the bandit, measured on `base` with
/// `verdict`, as [`crate::ledger::Ledger::recent_experiments`] returns it.
pub(crate) fn measured_on(
    id: i64,
    p: &Proposal,
    verdict: VerdictKind,
    base: Digest,
) -> ExperimentOutcome {
    ExperimentOutcome {
        experiment_id: ExperimentId(id),
        cycle_id: CycleId(id),
        created_at: chrono::TimeZone::with_ymd_and_hms(&chrono::Utc, 2026, 11, 29, 8, 0, 0)
            .unwrap(),
        menu_id: p.experiment,
        parameters: super::params_value(p),
        base_digest: base,
        proposer: Some(ProposerKind::Bandit),
        confirmation_of: None,
        verdict: Some(verdict),
        effect: None,
        interval: None,
        noise_floor: None,
        pairs: None,
    }
}

/// Experiments already decided on the base profile, by (id, params JSON).
#[derive(Debug, Default, Clone)]
pub(crate) struct Decided(pub BTreeMap<(MenuId, String), i64>);

impl Decided {
    pub fn with(mut self, p: &Proposal, previous: i64) -> Decided {
        self.0.insert((p.experiment, p.params_json()), previous);
        self
    }
}

impl DuplicateCheck for Decided {
    async fn previous(&self, p: &Proposal) -> Result<Option<ExperimentId>, LedgerError> {
        Ok(self
            .0
            .get(&(p.experiment, p.params_json()))
            .copied()
            .map(ExperimentId))
    }
}

/// Captures every tracing event (all levels) of the current thread.
#[derive(Debug, Clone, Default)]
pub(crate) struct LogCapture(Arc<Mutex<Vec<u8>>>);

impl LogCapture {
    /// Starts capturing on this thread (a `#[tokio::test]` runs its futures
    /// on the test thread) until the guard drops.
    pub fn start() -> (LogCapture, tracing::subscriber::DefaultGuard) {
        let capture = LogCapture::default();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(capture.clone())
            .with_max_level(tracing::Level::TRACE)
            .with_ansi(false)
            .finish();
        (capture, tracing::subscriber::set_default(subscriber))
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

impl io::Write for LogCapture {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for LogCapture {
    type Writer = LogCapture;
    fn make_writer(&'a self) -> LogCapture {
        self.clone()
    }
}

/// The stack the brain's tests describe: tiered, with experts.
pub(crate) static MOE_STACK: std::sync::LazyLock<super::StackDescription> =
    std::sync::LazyLock::new(|| super::StackDescription {
        name: "tinyk3".into(),
        experts: true,
    });

/// A cycle's situation on no particular live profile (no digest, parts or
/// knobs): the brain tests' common case.
pub(crate) fn situation<'a>(
    menu: &'a Menu,
    metrics: &'a crate::observe::LiveMetrics,
    floor: &'a super::NoiseFloorState,
    history: &'a [ExperimentOutcome],
) -> super::Situation<'a> {
    super::Situation {
        live_digest: None,
        token_shares: None,
        menu,
        stack: &MOE_STACK,
        live_knobs: &[],
        target_seconds_per_token: 1.0,
        metrics,
        noise_floor: floor,
        history,
    }
}

/// The demo's slow start in miniature: a third of the RAM for the trunk,
/// nothing pinned or warm, no draft.
pub(crate) fn slow_start() -> crate::profile::Profile {
    crate::profile::Profile::parse(
        "[memory]\nbudget_gb = 8.0\ntrunk_gb = 1.0\ncache_gb = 2.0\n\
         [far]\naddr = \"127.0.0.1:1\"\nwarm_set = 0\n",
        std::path::Path::new("live.toml"),
    )
    .unwrap()
}

/// [`slow_start`] with 16 experts pinned: no pin count is its live value
/// (a re-rank at 16 follows the heat), so the pins have no line there.
pub(crate) fn pinned_start() -> crate::profile::Profile {
    crate::profile::Profile::parse(
        "[memory]\nbudget_gb = 8.0\ntrunk_gb = 1.0\ncache_gb = 2.0\n\
         [far]\naddr = \"127.0.0.1:1\"\nwarm_set = 0\n\
         [pins]\nfile = \"pins.txt\"\ncount = 16\n",
        std::path::Path::new("live.toml"),
    )
    .unwrap()
}

pub(crate) fn live_digest() -> Digest {
    Digest::of(b"live")
}

pub(crate) const TRUNK_BOUND: super::levers::TokenShares = super::levers::TokenShares {
    trunk: 0.85,
    expert: 0.1,
    far_hit: Some(0.2),
};

pub(crate) const EXPERT_BOUND: super::levers::TokenShares = super::levers::TokenShares {
    trunk: 0.2,
    expert: 0.7,
    far_hit: Some(0.9),
};

pub(crate) fn proposal(id: MenuId, param: &str, v: crate::menu::ParamValue) -> Proposal {
    Proposal {
        experiment: id,
        params: [(param.to_string(), v)].into(),
    }
}

pub(crate) fn split(x: f64) -> Proposal {
    proposal(
        MenuId::RebalanceTrunkCache,
        "trunk_fraction",
        crate::menu::ParamValue::Number(x),
    )
}

pub(crate) fn draft(n: i64) -> Proposal {
    proposal(
        MenuId::StageSpeculative,
        "draft_len",
        crate::menu::ParamValue::Integer(n),
    )
}

pub(crate) fn pins(n: i64) -> Proposal {
    proposal(
        MenuId::RerankPins,
        "pin_count",
        crate::menu::ParamValue::Integer(n),
    )
}

/// The largest pin count among `menu`'s arms: where the pins' line leaps
/// first on a profile with no pins.
pub(crate) fn most_pins(menu: &Menu) -> i64 {
    super::bandit::arms(menu)
        .iter()
        .filter(|a| a.experiment == MenuId::RerankPins)
        .filter_map(|a| a.params.get("pin_count")?.as_f64())
        .fold(0.0, f64::max) as i64
}

pub(crate) fn warm(n: i64) -> Proposal {
    proposal(
        MenuId::DeepenWarmSet,
        "warm_set",
        crate::menu::ParamValue::Integer(n),
    )
}

/// The live profile's ledger as the cycle shows it to a proposer: the menu
/// with the live values and everything decided or refused on the live
/// profile excluded, and the decided experiments' verdicts in the history.
#[derive(Default)]
pub(crate) struct OnLive {
    pub excluded: Vec<Excluded>,
    pub history: Vec<ExperimentOutcome>,
}

impl OnLive {
    /// Every line of [`slow_start`] but the pins' done, each move within
    /// noise: the draft's and the warm set's leaps and both sides of the
    /// split.
    pub(crate) fn flat_lines() -> OnLive {
        OnLive::default()
            .decided(&draft(8), VerdictKind::WithinNoise)
            .decided(&split(1.0), VerdictKind::WithinNoise)
            .decided(&split(0.3), VerdictKind::WithinNoise)
            .decided(&warm(1024), VerdictKind::WithinNoise)
    }

    pub(crate) fn decided(mut self, p: &Proposal, verdict: VerdictKind) -> OnLive {
        let id = self.history.len() as i64 + 1;
        self.excluded.extend(crate::menu::exclusions::of_proposal(
            p,
            &crate::menu::Why::Decided { experiment: id },
        ));
        self.history
            .insert(0, measured_on(id, p, verdict, live_digest()));
        self
    }

    /// A failed experiment is no decision: in the history only.
    pub(crate) fn failed(mut self, p: &Proposal) -> OnLive {
        let before = self.excluded.len();
        self = self.decided(p, VerdictKind::Failed);
        self.excluded.truncate(before);
        self
    }

    pub(crate) fn refused(mut self, p: &Proposal) -> OnLive {
        self.excluded.extend(crate::menu::exclusions::of_proposal(
            p,
            &crate::menu::Why::RefusedByPlanner { cycle: Some(1) },
        ));
        self
    }

    pub(crate) fn menu(&self, live: &crate::profile::Profile) -> Menu {
        repo_menu()
            .with_resolutions(crate::plan::resolutions(live))
            .excluding(crate::menu::exclusions::base_values(
                crate::plan::unchanged(live),
            ))
            .excluding(self.excluded.clone())
    }

    /// [`OnLive::menu`] with the sides of each line the search is done
    /// with closed, as the cycle hands it to every proposer.
    pub(crate) fn closed_menu(&self, live: &crate::profile::Profile) -> Menu {
        let menu = self.menu(live);
        let done = super::line_search::done_ranges(&menu, &self.history, Some(&live_digest()));
        menu.closing(done)
    }

    /// Each entry's next arm, the entry with the larger lead first.
    pub(crate) fn next(
        &self,
        live: &crate::profile::Profile,
        shares: Option<&super::levers::TokenShares>,
    ) -> Vec<Proposal> {
        let menu = self.menu(live);
        let arms = super::bandit::arms(&menu);
        let mut next = super::line_search::next_arms(
            &arms,
            &menu,
            &self.history,
            Some(&live_digest()),
            shares,
        );
        next.sort_by(|a, b| b.1.total_cmp(&a.1));
        next.into_iter().map(|(i, _)| arms[i].clone()).collect()
    }

    pub(crate) fn next_of(
        &self,
        live: &crate::profile::Profile,
        shares: Option<&super::levers::TokenShares>,
        id: MenuId,
    ) -> Option<Proposal> {
        self.next(live, shares)
            .into_iter()
            .find(|p| p.experiment == id)
    }
}
