//! `[daemon]`: the orchestrator's own metrics endpoint, which binds only to
//! loopback unless the file says otherwise.

use std::net::SocketAddr;

use super::raw::RawDaemon;

#[derive(Debug, Clone)]
pub struct Daemon {
    /// The orchestrator's own Prometheus endpoint.
    pub metrics_listen: SocketAddr,
    /// Bind addresses outside loopback only when this is true.
    pub allow_remote: bool,
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
        Ok(Daemon {
            metrics_listen: d.metrics_listen,
            allow_remote: d.allow_remote,
        })
    }
}
