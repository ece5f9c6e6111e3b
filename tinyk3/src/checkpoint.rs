//! `tinyk3 init`: writes a deterministic synthetic checkpoint (trunk, experts, manifest).
//!
//! Every tensor is drawn from its own seeded stream, so the bytes depend only on the
//! seed and the shape. Experts are generated in parallel a layer at a time and
//! written with large buffered writes; the files are hashed as they are written.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

use sha2::{Digest, Sha256};

use crate::aligned::round_up;
use crate::error::{Error, Result};
use crate::manifest::{
    self, EXPERTS_FILE, ExpertsLayout, MANIFEST_FILE, Manifest, SegmentKind, Shape, TRUNK_FILE,
    TrunkLayout,
};
use crate::rng::Rng;

/// Stream id base for expert tensors, far from the trunk's ids.
const EXPERT_STREAM: u64 = 1 << 40;
/// Stream id for the router bias permutation of a layer.
const BIAS_STREAM: u64 = 1 << 41;

/// Writes a checkpoint for `shape` and `seed` into `dir` (created if needed).
pub fn write_checkpoint(dir: &Path, shape: &Shape, seed: u64) -> Result<Manifest> {
    shape.validate().map_err(Error::Usage)?;
    std::fs::create_dir_all(dir)
        .map_err(|e| Error::io(format!("cannot create {}", dir.display()), e))?;
    let (trunk_bytes, trunk_sha) = write_trunk(&dir.join(TRUNK_FILE), shape, seed)?;
    let (experts_bytes, experts_sha) = write_experts(&dir.join(EXPERTS_FILE), shape, seed)?;
    let mut m = Manifest {
        format: "tinyk3".into(),
        version: manifest::VERSION,
        seed,
        shape: shape.clone(),
        trunk: TrunkLayout {
            file: TRUNK_FILE.into(),
            bytes: trunk_bytes,
            sha256: trunk_sha,
            segments: manifest::layout_segments(shape),
        },
        experts: ExpertsLayout {
            file: EXPERTS_FILE.into(),
            bytes: experts_bytes,
            sha256: experts_sha,
            expert_bytes: shape.expert_bytes(),
            stride: shape.expert_stride(),
            align: crate::aligned::ALIGN as u64,
        },
        digest: String::new(),
    };
    m.digest = m.compute_digest();
    let text = serde_json::to_string_pretty(&m).expect("manifest serialises");
    let path = dir.join(MANIFEST_FILE);
    std::fs::write(&path, text + "\n")
        .map_err(|e| Error::io(format!("cannot write {}", path.display()), e))?;
    Ok(m)
}

/// A writer that hashes everything it writes.
struct HashingWriter {
    out: BufWriter<File>,
    hash: Sha256,
    written: u64,
    path: String,
}

impl HashingWriter {
    fn create(path: &Path) -> Result<Self> {
        let file = File::create(path)
            .map_err(|e| Error::io(format!("cannot create {}", path.display()), e))?;
        Ok(HashingWriter {
            out: BufWriter::with_capacity(8 << 20, file),
            hash: Sha256::new(),
            written: 0,
            path: path.display().to_string(),
        })
    }

    fn write(&mut self, bytes: &[u8]) -> Result<()> {
        self.hash.update(bytes);
        self.written += bytes.len() as u64;
        self.out
            .write_all(bytes)
            .map_err(|e| Error::io(format!("cannot write {}", self.path), e))
    }

    fn write_floats(&mut self, floats: &[f32]) -> Result<()> {
        self.write(crate::math::as_bytes(floats))
    }

    /// Zero-pads to the next alignment boundary so the next block starts aligned.
    fn pad(&mut self) -> Result<()> {
        let target = round_up(self.written);
        let zeros = vec![0u8; (target - self.written) as usize];
        self.write(&zeros)
    }

    fn finish(mut self) -> Result<(u64, String)> {
        self.out
            .flush()
            .map_err(|e| Error::io(format!("cannot write {}", self.path), e))?;
        Ok((self.written, manifest::hex(&self.hash.finalize())))
    }
}

/// Uniform bound giving unit variance scaled by `gain / sqrt(fan_in)`.
fn bound(gain: f64, fan_in: usize) -> f32 {
    (gain * (3.0 / fan_in as f64).sqrt()) as f32
}

/// Fills one trunk tensor.
fn trunk_tensor(shape: &Shape, seed: u64, kind: SegmentKind, name: &str, out: &mut [f32]) {
    let seg = manifest::segment_index(shape, kind) as u64;
    let tensor = manifest::segment_floats(shape, kind)
        .iter()
        .position(|t| t.0 == name)
        .expect("known tensor") as u64;
    let mut rng = Rng::new(seed, (seg << 8) | tensor);
    let (d, dd) = (shape.d_model, shape.d_dense);
    let r = shape.residual_scale;
    match name {
        "attn_norm" | "dense_norm" | "moe_norm" | "final_norm" => out.fill(1.0),
        "embed" => rng.fill_uniform(out, bound(1.0, 1)),
        "wo" => rng.fill_uniform(out, bound(r, d)),
        "w2" => rng.fill_uniform(out, bound(r, dd)),
        "router_bias" => {
            // Zipf-like popularity: the expert of rank r gets bias -skew * ln(1 + r).
            let layer = match kind {
                SegmentKind::Dense(l) => l as u64,
                _ => 0,
            };
            let mut prng = Rng::new(seed, BIAS_STREAM | layer);
            let mut order: Vec<usize> = (0..out.len()).collect();
            for i in (1..order.len()).rev() {
                let j = (prng.next_u64() % (i as u64 + 1)) as usize;
                order.swap(i, j);
            }
            for (rank, &e) in order.iter().enumerate() {
                out[e] = (-shape.skew * (1.0 + rank as f64).ln()) as f32;
            }
        }
        _ => rng.fill_uniform(out, bound(1.0, d)),
    }
}

fn write_trunk(path: &Path, shape: &Shape, seed: u64) -> Result<(u64, String)> {
    let mut w = HashingWriter::create(path)?;
    for kind in manifest::segment_kinds(shape) {
        for (name, floats) in manifest::segment_floats(shape, kind) {
            let mut buf = vec![0f32; floats];
            trunk_tensor(shape, seed, kind, name, &mut buf);
            w.write_floats(&buf)?;
        }
        w.pad()?;
    }
    w.finish()
}

/// Fills one expert: gate and up (`d_expert x d_model`), then down (`d_model x d_expert`).
pub fn expert_weights(shape: &Shape, seed: u64, layer: usize, expert: usize, out: &mut [f32]) {
    let (d, de) = (shape.d_model, shape.d_expert);
    let id = (layer * shape.n_experts + expert) as u64;
    let mut rng = Rng::new(seed, EXPERT_STREAM | id);
    let (gate_up, down) = out[..3 * d * de].split_at_mut(2 * d * de);
    rng.fill_uniform(gate_up, bound(1.0, d));
    rng.fill_uniform(down, bound(shape.residual_scale, de));
}

fn write_experts(path: &Path, shape: &Shape, seed: u64) -> Result<(u64, String)> {
    let mut w = HashingWriter::create(path)?;
    let stride = (shape.expert_stride() / 4) as usize;
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut layer_buf = vec![0f32; stride * shape.n_experts];
    for layer in 0..shape.n_layers {
        let per = shape.n_experts.div_ceil(threads);
        std::thread::scope(|s| {
            for (chunk_idx, chunk) in layer_buf.chunks_mut(per * stride).enumerate() {
                s.spawn(move || {
                    for (i, slot) in chunk.chunks_mut(stride).enumerate() {
                        expert_weights(shape, seed, layer, chunk_idx * per + i, slot);
                    }
                });
            }
        });
        w.write_floats(&layer_buf)?;
    }
    w.finish()
}
