//! The daemon's live-load monitor ([`crate::measure::stand_aside`]), built
//! once from the config: where `[stack.metrics.names]` maps the live
//! server's load, its cycles stand aside for the server's users.

use crate::config::Config;
use crate::measure::stand_aside::{POLL, StandAside};
use crate::observe::live_load::LiveLoad;

/// The monitor, or `None` (said once) where the live load is not mapped.
pub fn start(config: &Config, http: &reqwest::Client) -> Option<StandAside> {
    let Some(load) = LiveLoad::from_config(config.stack.metrics.as_ref(), http.clone()) else {
        tracing::info!(
            "the live server's load is not read ([stack.metrics.names] maps no live_requests_processing \
             or live_requests_waiting): measuring without standing aside for its users"
        );
        return None;
    };
    let settings = config.daemon.stand_aside;
    // The served model's requests are the daemon's own when it answers
    // from the live server (the embedded default: tinyk3 serve both serves
    // and proposes).
    let serves_model = same_server(&config.model.base_url, load.url());
    tracing::info!(
        url = %load.url(),
        above = settings.above,
        quiet_s = settings.quiet.as_secs_f64(),
        max_wait_s = settings.max_wait.as_secs_f64(),
        "standing aside for the live server's users"
    );
    // The live profile is watched too: its change is a restart of the
    // live server, which the runs wait out (`measure::stand_aside`).
    Some(StandAside::spawn(
        load,
        settings,
        POLL,
        serves_model,
        Some(config.stack.live_profile.clone()),
    ))
}

/// Same scheme, host and port.
fn same_server(a: &reqwest::Url, b: &reqwest::Url) -> bool {
    a.scheme() == b.scheme()
        && a.host_str() == b.host_str()
        && a.port_or_known_default() == b.port_or_known_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_model_is_the_live_servers_when_they_share_host_and_port() {
        let u = |s: &str| reqwest::Url::parse(s).unwrap();
        assert!(same_server(
            &u("http://127.0.0.1:8181/v1"),
            &u("http://127.0.0.1:8181/metrics")
        ));
        assert!(!same_server(
            &u("http://127.0.0.1:8080/v1"),
            &u("http://127.0.0.1:8181/metrics")
        ));
        assert!(same_server(&u("http://h/v1"), &u("http://h:80/metrics")));
    }
}
