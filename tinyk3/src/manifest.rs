//! The checkpoint manifest: shapes, file layout (segment and expert offsets), seed, digests.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::aligned::round_up;
use crate::error::{Error, Result};

/// Manifest file name inside a model directory.
pub const MANIFEST_FILE: &str = "manifest.json";
/// Trunk weights file name.
pub const TRUNK_FILE: &str = "trunk.bin";
/// Experts file name.
pub const EXPERTS_FILE: &str = "experts.bin";
/// Checkpoint format version this build reads and writes.
pub const VERSION: u32 = 1;

/// The model's dimensions and the knobs that shaped its synthetic weights.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Shape {
    pub n_layers: usize,
    pub n_experts: usize,
    pub top_k: usize,
    pub d_model: usize,
    pub d_expert: usize,
    pub d_dense: usize,
    pub n_heads: usize,
    pub vocab: usize,
    /// Layers (from the bottom, attention only) the speculative draft runs.
    pub draft_layers: usize,
    /// Zipf exponent of the router bias: larger = fewer, hotter experts.
    pub skew: f64,
    /// Scale of every residual branch relative to the embedding.
    pub residual_scale: f64,
}

impl Shape {
    /// Checks the shape is usable, naming the bad field.
    pub fn validate(&self) -> std::result::Result<(), String> {
        let checks: [(&str, bool, &str); 9] = [
            ("layers", self.n_layers >= 1, "at least 1"),
            (
                "experts",
                (1..=65535).contains(&self.n_experts),
                "1..=65535",
            ),
            (
                "top-k",
                self.top_k >= 1 && self.top_k <= self.n_experts,
                "1..=experts",
            ),
            (
                "d-model",
                self.d_model >= 8 && self.d_model % 8 == 0,
                "a multiple of 8, >= 8",
            ),
            (
                "d-expert",
                self.d_expert >= 8 && self.d_expert % 8 == 0,
                "a multiple of 8, >= 8",
            ),
            (
                "d-dense",
                self.d_dense >= 8 && self.d_dense % 8 == 0,
                "a multiple of 8, >= 8",
            ),
            (
                "heads",
                self.n_heads >= 1 && self.d_model % self.n_heads == 0,
                "a divisor of d-model",
            ),
            (
                "vocab",
                self.vocab >= 256,
                "at least 256 (byte-level prompts)",
            ),
            (
                "draft-layers",
                self.draft_layers <= self.n_layers,
                "at most layers",
            ),
        ];
        for (name, ok, want) in checks {
            if !ok {
                return Err(format!("--{name} must be {want}"));
            }
        }
        if !(self.skew >= 0.0 && self.skew.is_finite()) {
            return Err("--skew must be a finite number >= 0".into());
        }
        Ok(())
    }

    /// Bytes of one expert's weights (gate, up, down matrices).
    pub fn expert_bytes(&self) -> u64 {
        3 * (self.d_model * self.d_expert) as u64 * 4
    }

    /// Distance between consecutive experts on disk (aligned for O_DIRECT).
    pub fn expert_stride(&self) -> u64 {
        round_up(self.expert_bytes())
    }
}

/// What a trunk segment holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SegmentKind {
    /// Token embeddings, `vocab x d_model`.
    Embed,
    /// Final norm and output head.
    Head,
    /// A layer's attention norm and projections.
    Attn(usize),
    /// A layer's dense block, MoE norm and router.
    Dense(usize),
}

/// One contiguous, aligned range of the trunk file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Segment {
    pub name: String,
    pub offset: u64,
    pub bytes: u64,
}

/// The trunk file's layout.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrunkLayout {
    pub file: String,
    pub bytes: u64,
    pub sha256: String,
    pub segments: Vec<Segment>,
}

/// The experts file's layout: expert (l, e) starts at `(l * n_experts + e) * stride`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ExpertsLayout {
    pub file: String,
    pub bytes: u64,
    pub sha256: String,
    pub expert_bytes: u64,
    pub stride: u64,
    pub align: u64,
}

/// The whole manifest as written to `manifest.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    pub format: String,
    pub version: u32,
    pub seed: u64,
    pub shape: Shape,
    pub trunk: TrunkLayout,
    pub experts: ExpertsLayout,
    /// sha256 of this manifest serialised with `digest` empty.
    pub digest: String,
}

/// Float counts of the tensors inside each segment kind, in on-disk order.
pub fn segment_floats(shape: &Shape, kind: SegmentKind) -> Vec<(&'static str, usize)> {
    let (d, dd, e, v) = (shape.d_model, shape.d_dense, shape.n_experts, shape.vocab);
    match kind {
        SegmentKind::Embed => vec![("embed", v * d)],
        SegmentKind::Head => vec![("final_norm", d), ("head", v * d)],
        SegmentKind::Attn(_) => vec![
            ("attn_norm", d),
            ("wq", d * d),
            ("wk", d * d),
            ("wv", d * d),
            ("wo", d * d),
        ],
        SegmentKind::Dense(_) => vec![
            ("dense_norm", d),
            ("w1", dd * d),
            ("w3", dd * d),
            ("w2", d * dd),
            ("moe_norm", d),
            ("router", e * d),
            ("router_bias", e),
        ],
    }
}

/// Segment kinds in file order; index `i` here is segment `i` of the manifest.
pub fn segment_kinds(shape: &Shape) -> Vec<SegmentKind> {
    let mut kinds = vec![SegmentKind::Embed, SegmentKind::Head];
    kinds.extend((0..shape.n_layers).map(SegmentKind::Attn));
    kinds.extend((0..shape.n_layers).map(SegmentKind::Dense));
    kinds
}

/// Index of a segment kind in the manifest's segment list.
pub fn segment_index(shape: &Shape, kind: SegmentKind) -> usize {
    match kind {
        SegmentKind::Embed => 0,
        SegmentKind::Head => 1,
        SegmentKind::Attn(l) => 2 + l,
        SegmentKind::Dense(l) => 2 + shape.n_layers + l,
    }
}

/// Name of a segment kind as written in the manifest.
pub fn segment_name(kind: SegmentKind) -> String {
    match kind {
        SegmentKind::Embed => "embed".into(),
        SegmentKind::Head => "head".into(),
        SegmentKind::Attn(l) => format!("attn.{l}"),
        SegmentKind::Dense(l) => format!("dense.{l}"),
    }
}

/// Lays out the trunk segments back to back, each aligned.
pub fn layout_segments(shape: &Shape) -> Vec<Segment> {
    let mut offset = 0;
    segment_kinds(shape)
        .into_iter()
        .map(|kind| {
            let floats: usize = segment_floats(shape, kind).iter().map(|t| t.1).sum();
            let bytes = floats as u64 * 4;
            let seg = Segment {
                name: segment_name(kind),
                offset,
                bytes,
            };
            offset += round_up(bytes);
            seg
        })
        .collect()
}

impl Manifest {
    /// Computes the digest over the manifest with an empty `digest` field.
    pub fn compute_digest(&self) -> String {
        let mut copy = self.clone();
        copy.digest.clear();
        let text = serde_json::to_string(&copy).expect("manifest serialises");
        hex(&Sha256::digest(text.as_bytes()))
    }

    /// Reads and checks `DIR/manifest.json`; a missing or malformed one is a usage error.
    pub fn load(dir: &Path) -> Result<Manifest> {
        let model_err = |problem: String| Error::Model {
            dir: dir.to_path_buf(),
            problem,
        };
        if !dir.is_dir() {
            return Err(model_err("no such directory".into()));
        }
        let path = dir.join(MANIFEST_FILE);
        let text = std::fs::read_to_string(&path)
            .map_err(|e| model_err(format!("cannot read {}: {e}", path.display())))?;
        let m: Manifest = serde_json::from_str(&text)
            .map_err(|e| model_err(format!("{} is not a tinyk3 manifest: {e}", path.display())))?;
        if m.format != "tinyk3" || m.version != VERSION {
            return Err(model_err(format!(
                "format {:?} version {} is not tinyk3 version {VERSION}",
                m.format, m.version
            )));
        }
        if m.compute_digest() != m.digest {
            return Err(model_err(format!(
                "{} digest does not match its content (edited by hand?)",
                path.display()
            )));
        }
        m.shape.validate().map_err(model_err)?;
        if m.trunk.segments != layout_segments(&m.shape) {
            return Err(model_err(
                "trunk segment layout does not match the shape".into(),
            ));
        }
        Ok(m)
    }

    /// Path of the trunk file.
    pub fn trunk_path(&self, dir: &Path) -> PathBuf {
        dir.join(&self.trunk.file)
    }

    /// Path of the experts file.
    pub fn experts_path(&self, dir: &Path) -> PathBuf {
        dir.join(&self.experts.file)
    }

    /// Byte offset of expert (layer, expert) in the experts file.
    pub fn expert_offset(&self, layer: usize, expert: usize) -> u64 {
        (layer * self.shape.n_experts + expert) as u64 * self.experts.stride
    }
}

/// Lower-case hex of a byte string.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
