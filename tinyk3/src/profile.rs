//! Engine settings, and the orchestrator's profile TOML they can be read from.
//!
//! GB means 10^9 bytes, as in the orchestrator. Relative paths in a profile are
//! relative to the profile file's directory. Unknown keys are an error.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::error::{Error, Result};

/// Bytes in a GB.
pub const GB: f64 = 1e9;

/// Everything that shapes a run, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// RAM the stack may hold for weights; `None` = trunk + cache + pins, unchecked.
    pub budget_gb: Option<f64>,
    /// Resident trunk; `None` = the whole trunk.
    pub trunk_gb: Option<f64>,
    /// LRU expert cache.
    pub cache_gb: f64,
    /// A `K3EXPERTS` pin list.
    pub pins_file: Option<PathBuf>,
    /// How many rows of the pin list to pin.
    pub pin_count: usize,
    /// `host:port` of an expert server.
    pub far_addr: Option<String>,
    /// Experts the far tier should hold warm for this run.
    pub far_warm_set: usize,
    /// Draft tokens per verification; 0 = no speculation.
    pub draft_len: usize,
    /// Compute threads.
    pub threads: usize,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            budget_gb: None,
            trunk_gb: None,
            cache_gb: 0.25,
            pins_file: None,
            pin_count: 0,
            far_addr: None,
            far_warm_set: 0,
            draft_len: 0,
            threads: 2,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ProfileToml {
    memory: MemoryToml,
    #[serde(default)]
    pins: PinsToml,
    #[serde(default)]
    far: FarToml,
    #[serde(default)]
    speculative: SpeculativeToml,
    #[serde(default)]
    compute: ComputeToml,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct MemoryToml {
    budget_gb: f64,
    trunk_gb: f64,
    cache_gb: f64,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct PinsToml {
    #[serde(default)]
    file: String,
    #[serde(default)]
    count: u64,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FarToml {
    #[serde(default)]
    addr: String,
    #[serde(default)]
    warm_set: u64,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct SpeculativeToml {
    #[serde(default)]
    draft_len: u64,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ComputeToml {
    #[serde(default = "two")]
    threads: u64,
}

impl Default for ComputeToml {
    fn default() -> Self {
        ComputeToml { threads: two() }
    }
}

fn two() -> u64 {
    2
}

/// Checks a GB value is a finite number >= 0, naming it.
pub fn check_gb(name: &str, v: f64) -> Result<f64> {
    if v.is_finite() && v >= 0.0 {
        Ok(v)
    } else {
        Err(Error::Usage(format!(
            "{name} = {v} must be a finite number of GB >= 0"
        )))
    }
}

/// Checks a thread count, naming it.
pub fn check_threads(name: &str, v: u64) -> Result<usize> {
    if (1..=64).contains(&v) {
        Ok(v as usize)
    } else {
        Err(Error::Usage(format!(
            "{name} = {v} must be between 1 and 64"
        )))
    }
}

/// A profile file as read: its settings, and the sha256 of its bytes (what
/// `tinyk3 serve` reports on `/health`, so whoever wrote the file can tell
/// whether the server runs it).
#[derive(Debug, Clone, PartialEq)]
pub struct ProfileRead {
    pub settings: Settings,
    pub sha256: String,
}

impl Settings {
    /// Reads an orchestrator profile.
    pub fn from_profile(path: &Path) -> Result<Settings> {
        Ok(Settings::read_profile(path)?.settings)
    }

    /// Reads an orchestrator profile, with the sha256 of the bytes read.
    pub fn read_profile(path: &Path) -> Result<ProfileRead> {
        let bytes = std::fs::read(path)
            .map_err(|e| Error::Usage(format!("cannot read profile {}: {e}", path.display())))?;
        let sha256 = crate::manifest::hex(&<sha2::Sha256 as sha2::Digest>::digest(&bytes));
        let text = String::from_utf8(bytes)
            .map_err(|e| Error::Usage(format!("profile {} is not UTF-8: {e}", path.display())))?;
        let p: ProfileToml = toml::from_str(&text).map_err(|e| {
            Error::Usage(format!(
                "profile {} is not valid: {}",
                path.display(),
                e.to_string().trim_end()
            ))
        })?;
        let base = path.parent().unwrap_or(Path::new("."));
        let origin = path.display();
        let settings = Settings {
            budget_gb: Some(check_gb(
                &format!("{origin}: memory.budget_gb"),
                p.memory.budget_gb,
            )?),
            trunk_gb: Some(check_gb(
                &format!("{origin}: memory.trunk_gb"),
                p.memory.trunk_gb,
            )?),
            cache_gb: check_gb(&format!("{origin}: memory.cache_gb"), p.memory.cache_gb)?,
            pins_file: (!p.pins.file.is_empty()).then(|| base.join(&p.pins.file)),
            pin_count: p.pins.count as usize,
            far_addr: (!p.far.addr.is_empty()).then_some(p.far.addr),
            far_warm_set: p.far.warm_set as usize,
            draft_len: p.speculative.draft_len as usize,
            threads: check_threads(&format!("{origin}: compute.threads"), p.compute.threads)?,
        };
        Ok(ProfileRead { settings, sha256 })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_profile_and_rejects_unknown_keys() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.toml");
        std::fs::write(&path, "[memory]\nbudget_gb = 0.75\ntrunk_gb = 0.125\ncache_gb = 0.25\n[pins]\nfile = \"pins.txt\"\ncount = 3\n").unwrap();
        let read = Settings::read_profile(&path).unwrap();
        // `sha256sum p.toml` of those bytes.
        assert_eq!(
            read.sha256,
            "7bd00fa9547608274137f0d13902913cfa31e0018aa00da7677e01637c494c7a"
        );
        let s = read.settings;
        assert_eq!(s.pins_file, Some(dir.path().join("pins.txt")));
        assert_eq!((s.pin_count, s.threads, s.budget_gb), (3, 2, Some(0.75)));
        std::fs::write(
            &path,
            "[memory]\nbudget_gb = 1\ntrunk_gb = 0\ncache_gb = 0\nbogus = 1\n",
        )
        .unwrap();
        let err = Settings::from_profile(&path).unwrap_err().to_string();
        assert!(err.contains("bogus"), "{err}");
    }
}
