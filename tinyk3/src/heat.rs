//! Expert heat: a (layer, expert) request histogram and the request trace, in the design's formats.

use std::path::Path;

use serde::Serialize;

use crate::error::{Error, Result};
use crate::pins::PinList;

/// Every expert request the full model made, in order.
#[derive(Debug, Clone)]
pub struct Heat {
    n_layers: usize,
    n_experts: usize,
    counts: Vec<u64>,
    trace: Vec<(u32, u32)>,
}

#[derive(Serialize)]
struct HistJson<'a> {
    n_layers: usize,
    n_experts: usize,
    counts: &'a std::collections::BTreeMap<String, u64>,
}

impl Heat {
    /// An empty record for a model of this size.
    pub fn new(n_layers: usize, n_experts: usize) -> Heat {
        Heat {
            n_layers,
            n_experts,
            counts: vec![0; n_layers * n_experts],
            trace: Vec::new(),
        }
    }

    /// Records one request for an expert.
    pub fn record(&mut self, layer: usize, expert: usize) {
        self.counts[layer * self.n_experts + expert] += 1;
        self.trace.push((layer as u32, expert as u32));
    }

    /// Total requests recorded.
    pub fn requests(&self) -> usize {
        self.trace.len()
    }

    /// Writes `expert_hist.json` and `expert_trace.bin` into `dir`, creating it.
    pub fn write_dir(&self, dir: &Path) -> Result<()> {
        std::fs::create_dir_all(dir).map_err(|e| {
            Error::io(
                format!("cannot create trace directory {}", dir.display()),
                e,
            )
        })?;
        let counts: std::collections::BTreeMap<String, u64> = self
            .counts
            .iter()
            .enumerate()
            .filter(|(_, c)| **c > 0)
            .map(|(i, c)| (format!("{},{}", i / self.n_experts, i % self.n_experts), *c))
            .collect();
        let hist = HistJson {
            n_layers: self.n_layers,
            n_experts: self.n_experts,
            counts: &counts,
        };
        let path = dir.join("expert_hist.json");
        write_atomic(
            &path,
            serde_json::to_string(&hist).expect("serialises").as_bytes(),
        )
        .map_err(|e| Error::io(format!("cannot write {}", path.display()), e))?;
        let mut bin = Vec::with_capacity(self.trace.len() * 8);
        for (l, e) in &self.trace {
            bin.extend_from_slice(&(*l as i32).to_le_bytes());
            bin.extend_from_slice(&(*e as i32).to_le_bytes());
        }
        let path = dir.join("expert_trace.bin");
        write_atomic(&path, &bin)
            .map_err(|e| Error::io(format!("cannot write {}", path.display()), e))
    }

    /// The histogram as `expert_hist.json` text, for a server's `GET /heat`.
    pub fn hist_json(&self) -> String {
        let counts: std::collections::BTreeMap<String, u64> = self
            .counts
            .iter()
            .enumerate()
            .filter(|(_, c)| **c > 0)
            .map(|(i, c)| (format!("{},{}", i / self.n_experts, i % self.n_experts), *c))
            .collect();
        let hist = HistJson {
            n_layers: self.n_layers,
            n_experts: self.n_experts,
            counts: &counts,
        };
        serde_json::to_string(&hist).expect("serialises")
    }

    /// Takes the trace recorded so far (the histogram is kept), so that a
    /// long-running server can hold it in a bounded ring of its own instead.
    pub fn drain_trace(&mut self) -> Vec<(u32, u32)> {
        std::mem::take(&mut self.trace)
    }

    /// The experts ranked hottest first (ties by layer, then expert), as a pin list.
    pub fn ranked(&self) -> PinList {
        let mut rows: Vec<((usize, usize), u64)> = self
            .counts
            .iter()
            .enumerate()
            .filter(|(_, c)| **c > 0)
            .map(|(i, c)| ((i / self.n_experts, i % self.n_experts), *c))
            .collect();
        rows.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        PinList { rows }
    }
}

/// Reads an `expert_hist.json` back into a ranked pin list.
pub fn ranked_from_hist(path: &Path) -> Result<(usize, usize, PinList)> {
    #[derive(serde::Deserialize)]
    struct Hist {
        n_layers: usize,
        n_experts: usize,
        counts: std::collections::BTreeMap<String, u64>,
    }
    let text = std::fs::read_to_string(path).map_err(|e| {
        Error::Usage(format!(
            "cannot read heat histogram {}: {e}",
            path.display()
        ))
    })?;
    let h: Hist = serde_json::from_str(&text).map_err(|e| {
        Error::Usage(format!(
            "{} is not an expert_hist.json: {e}",
            path.display()
        ))
    })?;
    let mut heat = Heat::new(h.n_layers, h.n_experts);
    for (key, count) in h.counts {
        let parsed = key
            .split_once(',')
            .and_then(|(l, e)| Some((l.parse::<usize>().ok()?, e.parse::<usize>().ok()?)));
        match parsed {
            Some((l, e)) if l < h.n_layers && e < h.n_experts => {
                heat.counts[l * h.n_experts + e] = count
            }
            _ => {
                return Err(Error::Usage(format!(
                    "{}: key {key:?} is not `layer,expert` inside the model",
                    path.display()
                )));
            }
        }
    }
    Ok((h.n_layers, h.n_experts, heat.ranked()))
}

/// Writes through a temporary file and a rename, so a reader (the
/// orchestrator reading heat while the engine dumps it) never sees half a
/// file, and a process killed mid-write leaves the old file whole.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dump_replaces_both_files_whole_and_leaves_no_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let mut heat = Heat::new(2, 4);
        heat.record(0, 1);
        heat.write_dir(dir.path()).unwrap();
        heat.record(1, 3);
        heat.write_dir(dir.path()).unwrap();
        let hist = std::fs::read_to_string(dir.path().join("expert_hist.json")).unwrap();
        assert_eq!(hist, heat.hist_json());
        let trace = std::fs::read(dir.path().join("expert_trace.bin")).unwrap();
        assert_eq!(trace.len(), 2 * 8);
        let mut names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["expert_hist.json", "expert_trace.bin"]);
    }
}
