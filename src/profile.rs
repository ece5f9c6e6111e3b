//! The profile: the serving stack's tunable settings, a TOML document with
//! typed knobs. Identified by the sha256 digest of its canonical form, so two
//! files that differ only in comments or layout are the same profile. A
//! [`ProfileFile`] is a profile with the file it lives in.

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::vocab::Digest;

/// Why a profile could not be read or is not valid.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    #[error("cannot read profile {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("profile {path} is not valid: {source}")]
    Parse {
        path: PathBuf,
        #[source]
        source: toml::de::Error,
    },
    #[error("profile {path}: {problem}")]
    Invalid { path: PathBuf, problem: String },
    #[error("cannot write profile {path}: {source}")]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

/// The serving stack's tunable settings. Field order is the canonical order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    pub memory: Memory,
    #[serde(default)]
    pub pins: Pins,
    #[serde(default)]
    pub far: Far,
    #[serde(default)]
    pub speculative: Speculative,
    #[serde(default)]
    pub compute: Compute,
}

/// RAM for weights, in GB (10^9 bytes).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Memory {
    /// Everything the stack may hold: trunk + cache + pinned experts.
    pub budget_gb: f64,
    /// The resident part of the trunk; the rest is re-read every token.
    pub trunk_gb: f64,
    /// The LRU expert cache.
    pub cache_gb: f64,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pins {
    /// A `K3EXPERTS` pin list, relative to the profile's directory; "" = none.
    #[serde(default)]
    pub file: String,
    /// How many rows of the list to pin (hottest first); 0 = none.
    #[serde(default)]
    pub count: u64,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Far {
    /// `host:port` of the far-tier expert server; "" = no far tier.
    #[serde(default)]
    pub addr: String,
    /// Experts the far tier holds warm.
    #[serde(default)]
    pub warm_set: u64,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Speculative {
    /// Draft tokens proposed per verification; 0 = off.
    #[serde(default)]
    pub draft_len: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Compute {
    #[serde(default = "default_threads")]
    pub threads: u64,
    /// Logical batch size of prompt processing (llama.cpp `-b`); 0 = the
    /// stack's default. Left out of the canonical form when 0, so profiles
    /// written before this knob keep their digest.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub batch_size: u64,
    /// Physical micro-batch size (llama.cpp `-ub`); 0 = the stack's default.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub ubatch_size: u64,
}

impl Default for Compute {
    fn default() -> Self {
        Compute {
            threads: default_threads(),
            batch_size: 0,
            ubatch_size: 0,
        }
    }
}

fn default_threads() -> u64 {
    2
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// One tunable setting, named by its dotted TOML path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Knob {
    MemoryBudgetGb,
    MemoryTrunkGb,
    MemoryCacheGb,
    PinsFile,
    PinsCount,
    FarAddr,
    FarWarmSet,
    SpeculativeDraftLen,
    ComputeThreads,
    ComputeBatchSize,
    ComputeUbatchSize,
}

impl Knob {
    pub const ALL: &'static [Knob] = &[
        Knob::MemoryBudgetGb,
        Knob::MemoryTrunkGb,
        Knob::MemoryCacheGb,
        Knob::PinsFile,
        Knob::PinsCount,
        Knob::FarAddr,
        Knob::FarWarmSet,
        Knob::SpeculativeDraftLen,
        Knob::ComputeThreads,
        Knob::ComputeBatchSize,
        Knob::ComputeUbatchSize,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Knob::MemoryBudgetGb => "memory.budget_gb",
            Knob::MemoryTrunkGb => "memory.trunk_gb",
            Knob::MemoryCacheGb => "memory.cache_gb",
            Knob::PinsFile => "pins.file",
            Knob::PinsCount => "pins.count",
            Knob::FarAddr => "far.addr",
            Knob::FarWarmSet => "far.warm_set",
            Knob::SpeculativeDraftLen => "speculative.draft_len",
            Knob::ComputeThreads => "compute.threads",
            Knob::ComputeBatchSize => "compute.batch_size",
            Knob::ComputeUbatchSize => "compute.ubatch_size",
        }
    }

    /// Looks a knob up by its dotted name.
    pub fn from_name(name: &str) -> Option<Knob> {
        Knob::ALL.iter().copied().find(|k| k.name() == name)
    }

    /// All knob names, for error messages.
    pub fn names() -> String {
        Knob::ALL
            .iter()
            .map(|k| k.name())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

impl Serialize for Knob {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl fmt::Display for Knob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A knob's value.
#[derive(Debug, Clone, PartialEq)]
pub enum KnobValue {
    Number(f64),
    Integer(u64),
    Text(String),
}

impl KnobValue {
    /// Whether an optional argument group keyed on this knob is present:
    /// a positive number or a non-empty text.
    pub fn is_set(&self) -> bool {
        match self {
            KnobValue::Number(x) => *x > 0.0,
            KnobValue::Integer(n) => *n > 0,
            KnobValue::Text(s) => !s.is_empty(),
        }
    }
}

impl fmt::Display for KnobValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            // `{}` on f64 prints the shortest text that reads back exactly.
            KnobValue::Number(x) => write!(f, "{x}"),
            KnobValue::Integer(n) => write!(f, "{n}"),
            KnobValue::Text(s) => f.write_str(s),
        }
    }
}

/// One changed knob between two profiles.
#[derive(Debug, Clone, PartialEq)]
pub struct KnobChange {
    pub knob: Knob,
    pub from: KnobValue,
    pub to: KnobValue,
}

impl fmt::Display for KnobChange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let show = |v: &KnobValue| match v {
            KnobValue::Text(s) => format!("{s:?}"),
            other => other.to_string(),
        };
        write!(
            f,
            "{}: {} -> {}",
            self.knob,
            show(&self.from),
            show(&self.to)
        )
    }
}

impl Profile {
    /// Parses and validates profile text; `origin` names it in errors.
    pub fn parse(text: &str, origin: &Path) -> Result<Profile, ProfileError> {
        let profile: Profile = toml::from_str(text).map_err(|source| ProfileError::Parse {
            path: origin.to_path_buf(),
            source,
        })?;
        profile
            .validate()
            .map_err(|problem| ProfileError::Invalid {
                path: origin.to_path_buf(),
                problem,
            })?;
        Ok(profile)
    }

    /// Reads and validates a profile file.
    pub fn load(path: &Path) -> Result<Profile, ProfileError> {
        let text = std::fs::read_to_string(path).map_err(|source| ProfileError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Profile::parse(&text, path)
    }

    /// Checks the invariants serde cannot: finite sizes, the split within the
    /// budget, a parseable far address, at least one thread.
    pub fn validate(&self) -> Result<(), String> {
        let m = &self.memory;
        for (knob, v) in [
            (Knob::MemoryBudgetGb, m.budget_gb),
            (Knob::MemoryTrunkGb, m.trunk_gb),
            (Knob::MemoryCacheGb, m.cache_gb),
        ] {
            if !v.is_finite() || v < 0.0 {
                return Err(format!("{knob} = {v} must be a finite number >= 0"));
            }
        }
        if m.trunk_gb + m.cache_gb > m.budget_gb * (1.0 + 1e-9) {
            return Err(format!(
                "memory.trunk_gb ({}) + memory.cache_gb ({}) exceed memory.budget_gb ({}); \
                 lower one of them or raise the budget",
                m.trunk_gb, m.cache_gb, m.budget_gb
            ));
        }
        if !self.far.addr.is_empty() && self.far.addr.parse::<SocketAddr>().is_err() {
            return Err(format!(
                "far.addr = {:?} is not host:port (e.g. \"127.0.0.1:7070\"); use \"\" for no far tier",
                self.far.addr
            ));
        }
        if self.compute.threads == 0 {
            return Err("compute.threads must be at least 1".to_string());
        }
        if self.pins.count > 0 && self.pins.file.is_empty() {
            return Err(format!(
                "pins.count = {} but pins.file is empty; name a K3EXPERTS pin list or set pins.count = 0",
                self.pins.count
            ));
        }
        Ok(())
    }

    /// The canonical text: fixed key order, no comments.
    pub fn canonical(&self) -> String {
        toml::to_string(self).expect("a profile always serialises")
    }

    /// sha256 of the canonical text.
    pub fn digest(&self) -> Digest {
        Digest::of(self.canonical().as_bytes())
    }

    pub fn get(&self, knob: Knob) -> KnobValue {
        match knob {
            Knob::MemoryBudgetGb => KnobValue::Number(self.memory.budget_gb),
            Knob::MemoryTrunkGb => KnobValue::Number(self.memory.trunk_gb),
            Knob::MemoryCacheGb => KnobValue::Number(self.memory.cache_gb),
            Knob::PinsFile => KnobValue::Text(self.pins.file.clone()),
            Knob::PinsCount => KnobValue::Integer(self.pins.count),
            Knob::FarAddr => KnobValue::Text(self.far.addr.clone()),
            Knob::FarWarmSet => KnobValue::Integer(self.far.warm_set),
            Knob::SpeculativeDraftLen => KnobValue::Integer(self.speculative.draft_len),
            Knob::ComputeThreads => KnobValue::Integer(self.compute.threads),
            Knob::ComputeBatchSize => KnobValue::Integer(self.compute.batch_size),
            Knob::ComputeUbatchSize => KnobValue::Integer(self.compute.ubatch_size),
        }
    }

    /// The knobs whose values differ, in canonical order.
    pub fn diff(&self, other: &Profile) -> Vec<KnobChange> {
        Knob::ALL
            .iter()
            .filter_map(|&knob| {
                let (from, to) = (self.get(knob), other.get(knob));
                (from != to).then_some(KnobChange { knob, from, to })
            })
            .collect()
    }

    /// Writes the canonical text atomically.
    pub fn write_atomic(&self, path: &Path) -> Result<(), ProfileError> {
        crate::atomic_file::write(path, self.canonical().as_bytes()).map_err(|source| {
            ProfileError::Write {
                path: path.to_path_buf(),
                source,
            }
        })
    }

    /// The pin list's path, resolved against the profile's directory.
    pub fn pins_path(&self, profile_path: &Path) -> Option<PathBuf> {
        if self.pins.file.is_empty() {
            return None;
        }
        let dir = profile_path.parent().unwrap_or(Path::new("."));
        Some(dir.join(&self.pins.file))
    }
}

/// A profile and the file it lives in (the stack reads the file; a relative
/// pin list is relative to its directory).
#[derive(Debug, Clone, PartialEq)]
pub struct ProfileFile {
    pub path: PathBuf,
    pub profile: Profile,
}

impl ProfileFile {
    /// Reads and validates a profile file.
    pub fn load(path: &Path) -> Result<ProfileFile, ProfileError> {
        Ok(ProfileFile {
            path: path.to_path_buf(),
            profile: Profile::load(path)?,
        })
    }

    /// Writes `profile` atomically to `path` (put it next to its pin list).
    pub fn write(path: &Path, profile: Profile) -> Result<ProfileFile, ProfileError> {
        profile.write_atomic(path)?;
        Ok(ProfileFile {
            path: path.to_path_buf(),
            profile,
        })
    }

    /// The directory relative paths in the profile are resolved against.
    pub fn dir(&self) -> &Path {
        self.path.parent().unwrap_or(Path::new("."))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = r#"
# a comment that does not change the digest
[memory]
budget_gb = 1.0
trunk_gb = 0.25
cache_gb = 0.5
[speculative]
draft_len = 0
"#;

    fn parse(text: &str) -> Result<Profile, ProfileError> {
        Profile::parse(text, Path::new("test.toml"))
    }

    #[test]
    fn canonical_form_ignores_comments_and_defaults() {
        let a = parse(TEXT).unwrap();
        let b = parse(&a.canonical()).unwrap();
        assert_eq!(a, b);
        assert_eq!(a.digest(), b.digest());
        let c = parse(&TEXT.replace("0.5", "0.25")).unwrap();
        assert_ne!(a.digest(), c.digest());
    }

    #[test]
    fn diff_names_each_changed_knob() {
        let a = parse(TEXT).unwrap();
        let mut b = a.clone();
        b.memory.cache_gb = 0.75;
        b.speculative.draft_len = 4;
        let diff: Vec<String> = a.diff(&b).iter().map(|c| c.to_string()).collect();
        assert_eq!(
            diff,
            vec![
                "memory.cache_gb: 0.5 -> 0.75",
                "speculative.draft_len: 0 -> 4"
            ]
        );
        assert!(a.diff(&a).is_empty());
    }

    #[test]
    fn unknown_key_is_refused_with_its_name() {
        let err = parse(&TEXT.replace("draft_len", "draft_length")).unwrap_err();
        let msg = format!("{err}: {}", err.source_text());
        assert!(msg.contains("draft_length"), "{msg}");
    }

    #[test]
    fn split_over_budget_is_refused() {
        let err = parse(&TEXT.replace("cache_gb = 0.5", "cache_gb = 0.9")).unwrap_err();
        assert!(err.to_string().contains("exceed memory.budget_gb"), "{err}");
    }

    #[test]
    fn bad_far_address_is_refused() {
        let err = parse(&format!("{TEXT}\n[far]\naddr = \"nowhere\"\n")).unwrap_err();
        assert!(err.to_string().contains("far.addr"), "{err}");
    }

    #[test]
    fn unset_batch_sizes_keep_the_canonical_form() {
        let a = parse(TEXT).unwrap();
        assert!(!a.canonical().contains("batch_size"), "{}", a.canonical());
        let b = parse(&format!(
            "{TEXT}\n[compute]\nthreads = 2\nubatch_size = 64\n"
        ))
        .unwrap();
        assert!(b.canonical().contains("ubatch_size = 64"));
        assert_eq!(parse(&b.canonical()).unwrap(), b);
        assert_ne!(a.digest(), b.digest());
    }

    #[test]
    fn knob_names_round_trip() {
        for k in Knob::ALL {
            assert_eq!(Knob::from_name(k.name()), Some(*k));
        }
        assert_eq!(Knob::from_name("memory.nope"), None);
    }

    impl ProfileError {
        fn source_text(&self) -> String {
            std::error::Error::source(self)
                .map(|s| s.to_string())
                .unwrap_or_default()
        }
    }
}
