//! `[daemon]`: the orchestrator's own metrics endpoint, which binds only to
//! loopback unless the file says otherwise, and how it stands aside for the
//! live server's users.

use std::net::SocketAddr;
use std::time::Duration;

use super::raw::RawDaemon;

/// `stand_aside_quiet_s` by default. See [`StandAsideSettings::quiet`].
pub(super) const DEFAULT_QUIET_S: f64 = 10.0;
/// `stand_aside_max_wait_s` by default: five minutes, a few cycles' worth
/// of the default interval, after which the cycle is recorded deferred.
pub(super) const DEFAULT_MAX_WAIT_S: u64 = 300;
/// A bound on `stand_aside_above`: more live requests than this at once is
/// a misread setting, not a server.
const MAX_ABOVE: u32 = 10_000;

#[derive(Debug, Clone)]
pub struct Daemon {
    /// The orchestrator's own Prometheus endpoint.
    pub metrics_listen: SocketAddr,
    /// Bind addresses outside loopback only when this is true.
    pub allow_remote: bool,
    pub stand_aside: StandAsideSettings,
}

/// `[daemon] stand_aside_*`: no measurement run starts while the live
/// server serves its users beyond `above`, and none until it has been
/// quiet for `quiet`; a cycle that cannot start within `max_wait` is
/// deferred. In force where `[stack.metrics.names]` maps the live load
/// (`observe::live_load`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StandAsideSettings {
    /// Live requests (served plus waiting) the daemon measures beside: 0,
    /// the default, stands aside for any.
    pub above: u32,
    /// How long the live load must have stayed at or below `above` before
    /// a run starts. Users of a serving stack come in sessions: a request
    /// is followed by another within seconds. Waiting for a quiet spell
    /// keeps runs out of a session instead of starting one in each gap
    /// between its requests, where the next request would meet it
    /// (measured: `benches/stand_aside/`, docs/measured/stand_aside.md).
    pub quiet: Duration,
    /// The longest one wait may last before the cycle is deferred.
    pub max_wait: Duration,
}

impl TryFrom<RawDaemon> for Daemon {
    type Error = String;
    fn try_from(d: RawDaemon) -> Result<Daemon, String> {
        if !d.allow_remote && !d.metrics_listen.ip().is_loopback() {
            return Err(format!(
                "[daemon] metrics_listen = {} is not loopback; use 127.0.0.1 or set allow_remote = true",
                d.metrics_listen
            ));
        }
        if d.stand_aside_above > MAX_ABOVE {
            return Err(format!(
                "[daemon] stand_aside_above = {} is more than {MAX_ABOVE}: it counts the live server's \
                 requests (served plus waiting) beside which the daemon still measures; 0 stands aside for any",
                d.stand_aside_above
            ));
        }
        let quiet = d.stand_aside_quiet_s;
        if !(quiet.is_finite() && quiet >= 0.0) {
            return Err(format!(
                "[daemon] stand_aside_quiet_s must be a number of seconds ≥ 0 (got {quiet})"
            ));
        }
        let max_wait = d.stand_aside_max_wait_s.duration();
        if quiet >= max_wait.as_secs_f64() {
            return Err(format!(
                "[daemon] stand_aside_quiet_s = {quiet} is not below stand_aside_max_wait_s = {}: \
                 a cycle that meets live users could never start; lower the first or raise the second",
                max_wait.as_secs_f64()
            ));
        }
        Ok(Daemon {
            metrics_listen: d.metrics_listen,
            allow_remote: d.allow_remote,
            stand_aside: StandAsideSettings {
                above: d.stand_aside_above,
                quiet: Duration::from_secs_f64(quiet),
                max_wait,
            },
        })
    }
}
