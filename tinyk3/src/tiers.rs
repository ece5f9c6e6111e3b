//! Local expert tiers: pinned experts, an LRU cache bounded in bytes, and cold reads.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;

use serde::Serialize;

use crate::aligned::AlignedBuf;
use crate::coldio::{ColdMode, ColdReader};
use crate::error::{Error, Result};
use crate::manifest::Manifest;

/// An expert's identity: (layer, expert).
pub type ExpertId = (usize, usize);

/// Lookups served by each tier, one per distinct expert per forward pass.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct TierHits {
    pub pinned: u64,
    pub cache: u64,
    pub far: u64,
    pub cold: u64,
}

/// A least-recently-used map of experts with a fixed capacity in experts.
struct Lru {
    capacity: usize,
    map: HashMap<ExpertId, (Arc<AlignedBuf>, u64)>,
    order: BTreeMap<u64, ExpertId>,
    tick: u64,
}

impl Lru {
    fn get(&mut self, id: ExpertId) -> Option<Arc<AlignedBuf>> {
        let (buf, stamp) = self.map.get_mut(&id)?;
        self.order.remove(stamp);
        self.tick += 1;
        *stamp = self.tick;
        self.order.insert(self.tick, id);
        Some(buf.clone())
    }

    fn insert(&mut self, id: ExpertId, buf: Arc<AlignedBuf>) {
        if self.capacity == 0 || self.map.contains_key(&id) {
            return;
        }
        while self.map.len() >= self.capacity {
            let (_, victim) = self.order.pop_first().expect("non-empty when full");
            self.map.remove(&victim);
        }
        self.tick += 1;
        self.order.insert(self.tick, id);
        self.map.insert(id, (buf, self.tick));
    }
}

/// Pinned experts, the LRU cache and the cold reader of the experts file.
pub struct ExpertStore {
    pinned: HashMap<ExpertId, Arc<AlignedBuf>>,
    cache: Lru,
    reader: ColdReader,
    n_layers: usize,
    n_experts: usize,
    stride: u64,
    expert_bytes: u64,
}

impl ExpertStore {
    /// Opens the experts file, checks it is whole, and loads the pinned experts.
    pub fn open(
        dir: &Path,
        m: &Manifest,
        cache_experts: usize,
        pins: &[ExpertId],
    ) -> Result<ExpertStore> {
        let path = m.experts_path(dir);
        let reader = ColdReader::open(&path).map_err(|source| Error::ExpertLoad {
            layer: 0,
            expert: 0,
            path: path.clone(),
            source,
        })?;
        let len = std::fs::metadata(&path)
            .map_err(|e| Error::io(format!("cannot stat {}", path.display()), e))?
            .len();
        let total = (m.shape.n_layers * m.shape.n_experts) as u64;
        if len < total * m.experts.stride {
            // Name the first expert that cannot be read whole: its output would be garbage.
            let first = (len / m.experts.stride) as usize;
            return Err(Error::ExpertLoad {
                layer: first / m.shape.n_experts,
                expert: first % m.shape.n_experts,
                path,
                source: std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    format!(
                        "the file is {len} bytes but the manifest needs {}; re-run `tinyk3 init`",
                        total * m.experts.stride
                    ),
                ),
            });
        }
        let mut store = ExpertStore {
            pinned: HashMap::new(),
            cache: Lru {
                capacity: cache_experts,
                map: HashMap::new(),
                order: BTreeMap::new(),
                tick: 0,
            },
            reader,
            n_layers: m.shape.n_layers,
            n_experts: m.shape.n_experts,
            stride: m.experts.stride,
            expert_bytes: m.experts.expert_bytes,
        };
        // Pins are loaded once, mapped from the page cache (a restart on a warm machine reads no device).
        for &id in pins {
            let buf = store.load_resident(id)?;
            store.pinned.insert(id, Arc::new(buf));
        }
        Ok(store)
    }

    /// A pinned or cached expert, marking it recently used.
    pub fn local(&mut self, id: ExpertId) -> Option<(bool, Arc<AlignedBuf>)> {
        if let Some(buf) = self.pinned.get(&id) {
            return Some((true, buf.clone()));
        }
        self.cache.get(id).map(|b| (false, b))
    }

    /// Whether the expert is in RAM without touching recency.
    pub fn is_local(&self, id: ExpertId) -> bool {
        self.pinned.contains_key(&id) || self.cache.map.contains_key(&id)
    }

    /// Reads an expert from disk around the page cache.
    pub fn load_cold(&self, (layer, expert): ExpertId) -> Result<AlignedBuf> {
        debug_assert!(layer < self.n_layers && expert < self.n_experts);
        let offset = (layer * self.n_experts + expert) as u64 * self.stride;
        self.reader
            .read(offset, self.expert_bytes as usize)
            .map_err(|source| Error::ExpertLoad {
                layer,
                expert,
                path: self.reader.path().to_path_buf(),
                source,
            })
    }

    /// Loads an expert that will stay resident, through the page cache.
    fn load_resident(&self, (layer, expert): ExpertId) -> Result<AlignedBuf> {
        let offset = (layer * self.n_experts + expert) as u64 * self.stride;
        self.reader
            .load(offset, self.expert_bytes as usize)
            .map_err(|source| Error::ExpertLoad {
                layer,
                expert,
                path: self.reader.path().to_path_buf(),
                source,
            })
    }

    /// Puts an expert read from disk into the LRU cache.
    pub fn insert(&mut self, id: ExpertId, buf: Arc<AlignedBuf>) {
        if !self.pinned.contains_key(&id) {
            self.cache.insert(id, buf);
        }
    }

    /// Bytes read from the experts file around the page cache so far (not pin loading).
    pub fn bytes_read(&self) -> u64 {
        self.reader.bytes_read()
    }

    /// The cold read mode of the experts file.
    pub fn cold_mode(&self) -> ColdMode {
        self.reader.mode()
    }

    /// (pinned experts, cached experts, bytes per expert in RAM).
    pub fn residency(&self) -> (usize, usize, u64) {
        (self.pinned.len(), self.cache.map.len(), self.stride)
    }
}
