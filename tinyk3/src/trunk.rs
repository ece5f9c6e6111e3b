//! The trunk: embeddings, per-layer attention and dense blocks, routers, head.
//!
//! Segments are made resident first-fit, in order of how much a re-read would
//! cost per token (small attention segments first, then the head, then the large
//! dense blocks, the embedding table last since a token needs one row of it),
//! until `trunk_bytes` is used; what is left of the budget then holds a prefix
//! of the embedding table's rows (the low ids, i.e. the bytes of byte-level
//! prompts), so every byte of `trunk_gb` holds trunk. The rest is re-read from
//! disk every time it is used, with the same page-cache bypass as cold experts.
//! The resident part is loaded once through the page cache (see `coldio`).

use std::path::Path;

use crate::aligned::{ALIGN, AlignedBuf};
use crate::coldio::ColdReader;
use crate::error::{Error, Result};
use crate::manifest::{self, Manifest, SegmentKind, Shape};

/// The trunk with its resident part and a scratch buffer for the rest.
pub struct Trunk {
    shape: Shape,
    kinds: Vec<SegmentKind>,
    offsets: Vec<u64>,
    sizes: Vec<u64>,
    resident: Vec<Option<AlignedBuf>>,
    scratch: AlignedBuf,
    reader: ColdReader,
    resident_bytes: u64,
    /// The first `embed_rows` rows of a not wholly resident embedding table.
    embed_prefix: Option<AlignedBuf>,
    embed_rows: usize,
}

/// The order in which segments are made resident.
fn residency_order(shape: &Shape) -> Vec<SegmentKind> {
    let mut order: Vec<SegmentKind> = (0..shape.n_layers).map(SegmentKind::Attn).collect();
    order.push(SegmentKind::Head);
    order.extend((0..shape.n_layers).map(SegmentKind::Dense));
    order.push(SegmentKind::Embed);
    order
}

impl Trunk {
    /// Opens the trunk file and loads up to `budget_bytes` of segments into RAM.
    pub fn open(dir: &Path, m: &Manifest, budget_bytes: u64) -> Result<Trunk> {
        let path = m.trunk_path(dir);
        let reader = ColdReader::open(&path)
            .map_err(|e| Error::io(format!("cannot open trunk {}", path.display()), e))?;
        let len = std::fs::metadata(&path)
            .map_err(|e| Error::io(format!("cannot stat {}", path.display()), e))?
            .len();
        if len < m.trunk.bytes {
            return Err(Error::Runtime(format!(
                "trunk {} is {len} bytes but the manifest says {}; the checkpoint is damaged, re-run `tinyk3 init`",
                path.display(),
                m.trunk.bytes
            )));
        }
        let kinds = manifest::segment_kinds(&m.shape);
        let offsets: Vec<u64> = m.trunk.segments.iter().map(|s| s.offset).collect();
        let sizes: Vec<u64> = m.trunk.segments.iter().map(|s| s.bytes).collect();
        let mut resident: Vec<Option<AlignedBuf>> = kinds.iter().map(|_| None).collect();
        let mut left = budget_bytes;
        let mut resident_bytes = 0;
        for kind in residency_order(&m.shape) {
            let i = manifest::segment_index(&m.shape, kind);
            let need = crate::aligned::round_up(sizes[i]);
            if need <= left {
                let buf = reader.load(offsets[i], sizes[i] as usize).map_err(|e| {
                    Error::io(
                        format!("cannot read trunk segment {}", m.trunk.segments[i].name),
                        e,
                    )
                })?;
                resident[i] = Some(buf);
                left -= need;
                resident_bytes += need;
            }
        }
        // Whatever budget is left holds whole aligned blocks of embedding rows.
        let ei = manifest::segment_index(&m.shape, SegmentKind::Embed);
        let row_bytes = m.shape.d_model as u64 * 4;
        let mut embed_rows = 0;
        let mut embed_prefix = None;
        if resident[ei].is_none() {
            let blocks = left / ALIGN as u64 * ALIGN as u64;
            embed_rows = ((blocks / row_bytes) as usize).min(m.shape.vocab);
            if embed_rows > 0 {
                let bytes = embed_rows as u64 * row_bytes;
                embed_prefix = Some(
                    reader
                        .load(offsets[ei], bytes as usize)
                        .map_err(|e| Error::io("cannot read the resident embedding rows", e))?,
                );
                resident_bytes += crate::aligned::round_up(bytes);
            }
        }
        // The scratch holds the largest segment that must be re-read (the embedding needs one row).
        let scratch_bytes = kinds
            .iter()
            .enumerate()
            .filter(|(i, k)| resident[*i].is_none() && **k != SegmentKind::Embed)
            .map(|(i, _)| sizes[i])
            .max()
            .unwrap_or(0)
            .max(2 * ALIGN as u64 + m.shape.d_model as u64 * 4);
        Ok(Trunk {
            shape: m.shape.clone(),
            kinds,
            offsets,
            sizes,
            resident,
            scratch: AlignedBuf::new(scratch_bytes as usize),
            reader,
            resident_bytes,
            embed_prefix,
            embed_rows,
        })
    }

    /// Bytes of trunk held in RAM.
    pub fn resident_bytes(&self) -> u64 {
        self.resident_bytes
    }

    /// Total trunk bytes (aligned segments).
    pub fn total_bytes(&self) -> u64 {
        self.sizes
            .iter()
            .map(|s| crate::aligned::round_up(*s))
            .sum()
    }

    /// Bytes re-read from disk so far.
    pub fn bytes_read(&self) -> u64 {
        self.reader.bytes_read()
    }

    /// Which page-cache bypass the trunk reader uses.
    pub fn cold_mode(&self) -> crate::coldio::ColdMode {
        self.reader.mode()
    }

    /// A segment's floats: resident, or re-read into the scratch buffer now.
    pub fn segment(&mut self, kind: SegmentKind) -> Result<&[f32]> {
        let i = manifest::segment_index(&self.shape, kind);
        debug_assert_eq!(self.kinds[i], kind);
        let floats = (self.sizes[i] / 4) as usize;
        if self.resident[i].is_none() {
            self.reader
                .read_into(self.offsets[i], self.sizes[i] as usize, &mut self.scratch)
                .map_err(|e| {
                    Error::io(
                        format!(
                            "cannot re-read trunk segment {}",
                            manifest::segment_name(kind)
                        ),
                        e,
                    )
                })?;
            return Ok(&self.scratch[..floats]);
        }
        Ok(&self.resident[i].as_ref().expect("resident")[..floats])
    }

    /// A segment split into its named tensors, in on-disk order.
    pub fn tensors(&mut self, kind: SegmentKind) -> Result<Vec<&[f32]>> {
        let layout = manifest::segment_floats(&self.shape, kind);
        let mut rest = self.segment(kind)?;
        let mut out = Vec::with_capacity(layout.len());
        for (_, n) in layout {
            let (t, r) = rest.split_at(n);
            out.push(t);
            rest = r;
        }
        Ok(out)
    }

    /// Layer `l`'s router bias (its expert popularity prior), read without counting as a cold read.
    pub fn router_bias(&self, l: usize) -> Result<Vec<f32>> {
        use std::os::unix::fs::FileExt;
        let kind = SegmentKind::Dense(l);
        let i = manifest::segment_index(&self.shape, kind);
        let layout = manifest::segment_floats(&self.shape, kind);
        let before: usize = layout[..layout.len() - 1].iter().map(|t| t.1).sum();
        let n = self.shape.n_experts;
        let mut bytes = vec![0u8; n * 4];
        let file = std::fs::File::open(self.reader.path())
            .map_err(|e| Error::io(format!("cannot open {}", self.reader.path().display()), e))?;
        file.read_exact_at(&mut bytes, self.offsets[i] + before as u64 * 4)
            .map_err(|e| Error::io("cannot read a router bias", e))?;
        Ok(bytes
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    }

    /// The embedding row of `token`, reading only its aligned blocks when not resident.
    pub fn embed_row(&mut self, token: usize) -> Result<Vec<f32>> {
        let d = self.shape.d_model;
        if token >= self.shape.vocab {
            return Err(Error::Usage(format!(
                "token id {token} is outside the vocabulary (0..{}); pass ids below {}",
                self.shape.vocab, self.shape.vocab
            )));
        }
        let i = manifest::segment_index(&self.shape, SegmentKind::Embed);
        if let Some(buf) = &self.resident[i] {
            return Ok(buf[token * d..(token + 1) * d].to_vec());
        }
        if let Some(buf) = self
            .embed_prefix
            .as_ref()
            .filter(|_| token < self.embed_rows)
        {
            return Ok(buf[token * d..(token + 1) * d].to_vec());
        }
        let start = self.offsets[i] + (token * d * 4) as u64;
        let block = start / ALIGN as u64 * ALIGN as u64;
        let end = start + (d * 4) as u64;
        let len = (crate::aligned::round_up(end) - block) as usize;
        self.reader
            .read_into(block, len, &mut self.scratch)
            .map_err(|e| Error::io("cannot read an embedding row", e))?;
        let first = ((start - block) / 4) as usize;
        Ok(self.scratch[first..first + d].to_vec())
    }
}
