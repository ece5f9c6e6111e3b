//! `[objective]`: the speed the tuning aims for. Its one key is a unit with
//! its own range, so the table needs no check beyond deserializing.

use serde::Deserialize;

use super::SecondsPerToken;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Objective {
    #[serde(default = "default_target")]
    pub target_seconds_per_token: SecondsPerToken,
}

impl Default for Objective {
    fn default() -> Self {
        Objective {
            target_seconds_per_token: default_target(),
        }
    }
}

fn default_target() -> SecondsPerToken {
    SecondsPerToken::try_from(1.0).expect("a positive rate")
}
