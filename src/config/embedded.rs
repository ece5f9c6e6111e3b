//! `[embedded]`: the embedded default's settings (the reference stack,
//! tinyk3, prepared and run as children of `orchestrator run`); its
//! listeners are loopback only and its paths absolute.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use super::Seconds;
use super::raw::RawEmbedded;

/// The embedded default: the reference stack (tinyk3) prepared and run as
/// children of `orchestrator run`. Absent for a stack you run yourself.
#[derive(Debug, Clone)]
pub struct Embedded {
    pub tinyk3: PathBuf,
    pub model_dir: PathBuf,
    /// Extra arguments of `tinyk3 init` when the checkpoint is missing.
    pub init_args: Vec<String>,
    /// Copied to the live profile path when that is missing.
    pub starting_profile: PathBuf,
    pub serve_listen: SocketAddr,
    pub expert_server_listen: SocketAddr,
    /// Most experts the far tier may hold warm.
    pub expert_server_max_warm: u64,
    pub heat_dir: PathBuf,
    pub start_timeout: Seconds,
    /// Extra arguments of `tinyk3 serve` (e.g. its context window).
    pub serve_args: Vec<String>,
}

/// `[embedded]`, with relative paths taken from the config's directory.
impl TryFrom<(RawEmbedded, &Path)> for Embedded {
    type Error = String;
    fn try_from((e, base_dir): (RawEmbedded, &Path)) -> Result<Embedded, String> {
        for (key, addr) in [
            ("serve_listen", e.serve_listen),
            ("expert_server_listen", e.expert_server_listen),
        ] {
            if !addr.ip().is_loopback() {
                return Err(format!(
                    "[embedded] {key} = {addr} is not loopback; the embedded stack only binds 127.0.0.1"
                ));
            }
        }
        Ok(Embedded {
            tinyk3: base_dir.join(&e.tinyk3),
            model_dir: base_dir.join(&e.model_dir),
            init_args: e.init_args,
            starting_profile: base_dir.join(&e.starting_profile),
            serve_listen: e.serve_listen,
            expert_server_listen: e.expert_server_listen,
            expert_server_max_warm: e.expert_server_max_warm,
            heat_dir: base_dir.join(&e.heat_dir),
            start_timeout: e.start_timeout_s,
            serve_args: e.serve_args,
        })
    }
}
