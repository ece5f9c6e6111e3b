//! Expert heat as the serving stack records it: the histogram
//! (`expert_hist.json`) and the request trace (`expert_trace.bin`), parsed and
//! checked against the model's shape before any planner trusts them.
//!
//! Both are outside input (written by the stack, possibly truncated by a crash
//! or left over from another model), so every error names the file and the
//! exact problem.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use serde::Deserialize;

/// Refuse shapes whose dense tables would not fit a reasonable planner: a
/// corrupt header must not make us allocate gigabytes. Kimi-K3 scale (61 layers
/// x 896 experts = 54,656) is far below it.
const MAX_EXPERTS: u64 = 1 << 24;

/// One routed expert: (layer, expert index within the layer). Orders by layer
/// first, which is the tie-break the pin list promises.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Expert {
    pub layer: u32,
    pub expert: u32,
}

impl fmt::Display for Expert {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "({}, {})", self.layer, self.expert)
    }
}

/// Layers x routed experts per layer of the model the heat describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shape {
    pub n_layers: u32,
    pub n_experts: u32,
}

impl Shape {
    /// Checks the dimensions are usable; `origin` names the source in errors.
    pub fn new(n_layers: u64, n_experts: u64, origin: &str) -> Result<Shape, HeatError> {
        let total = n_layers.saturating_mul(n_experts);
        if n_layers == 0 || n_experts == 0 || total > MAX_EXPERTS {
            return Err(HeatError::Shape {
                origin: origin.to_string(),
                n_layers,
                n_experts,
            });
        }
        Ok(Shape {
            n_layers: n_layers as u32,
            n_experts: n_experts as u32,
        })
    }

    /// Routed experts in the whole model.
    pub fn total(self) -> usize {
        self.n_layers as usize * self.n_experts as usize
    }

    /// The dense index of an expert (layer-major), for tables and simulations.
    pub fn index(self, e: Expert) -> usize {
        e.layer as usize * self.n_experts as usize + e.expert as usize
    }

    /// The expert at a dense index.
    pub fn expert(self, index: usize) -> Expert {
        Expert {
            layer: (index / self.n_experts as usize) as u32,
            expert: (index % self.n_experts as usize) as u32,
        }
    }

    pub fn contains(self, e: Expert) -> bool {
        e.layer < self.n_layers && e.expert < self.n_experts
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} layers x {} experts", self.n_layers, self.n_experts)
    }
}

/// Why heat could not be read. `origin` is the file (or URL) it came from.
#[derive(Debug, thiserror::Error)]
pub enum HeatError {
    #[error("cannot read {origin}: {source}")]
    Read {
        origin: String,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "{origin} is not an expert_hist.json ({{\"n_layers\":L,\"n_experts\":E,\"counts\":{{\"layer,expert\":count}}}}): {source}"
    )]
    Json {
        origin: String,
        #[source]
        source: serde_json::Error,
    },
    #[error(
        "{origin}: shape {n_layers} layers x {n_experts} experts is not usable (both must be >= 1, at most {MAX_EXPERTS} experts in all)"
    )]
    Shape {
        origin: String,
        n_layers: u64,
        n_experts: u64,
    },
    #[error("{origin}: counts key {key:?} is not `layer,expert` with two non-negative integers")]
    BadKey { origin: String, key: String },
    #[error(
        "{origin}: {what} names expert ({layer}, {expert}), outside the model's {shape}; the heat is from another model, regenerate it with this one"
    )]
    OutOfRange {
        origin: String,
        what: String,
        layer: i64,
        expert: i64,
        shape: Shape,
    },
    #[error(
        "{origin}: {bytes} bytes is not a whole number of (layer, expert) int32 pairs (8 bytes each); the trace is truncated, re-dump it (`--dump-cache-trace`)"
    )]
    Truncated { origin: String, bytes: usize },
}

/// The expert heat histogram: requests per expert.
#[derive(Debug, Clone, PartialEq)]
pub struct Heat {
    shape: Shape,
    /// Dense, layer-major (see [`Shape::index`]).
    counts: Vec<u64>,
}

#[derive(Deserialize)]
struct HistJson {
    n_layers: u64,
    n_experts: u64,
    counts: BTreeMap<String, u64>,
}

impl Heat {
    /// Parses `expert_hist.json` text; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Heat, HeatError> {
        let raw: HistJson = serde_json::from_str(text).map_err(|source| HeatError::Json {
            origin: origin.to_string(),
            source,
        })?;
        let shape = Shape::new(raw.n_layers, raw.n_experts, origin)?;
        let mut counts = vec![0; shape.total()];
        for (key, count) in raw.counts {
            let parsed = key.split_once(',').and_then(|(l, e)| {
                Some((l.trim().parse::<i64>().ok()?, e.trim().parse::<i64>().ok()?))
            });
            let (layer, expert) = match parsed {
                Some((l, e)) if l >= 0 && e >= 0 => (l, e),
                _ => {
                    return Err(HeatError::BadKey {
                        origin: origin.to_string(),
                        key,
                    });
                }
            };
            let e = in_shape(shape, layer, expert).ok_or_else(|| HeatError::OutOfRange {
                origin: origin.to_string(),
                what: format!("counts key {key:?}"),
                layer,
                expert,
                shape,
            })?;
            counts[shape.index(e)] = count;
        }
        Ok(Heat { shape, counts })
    }

    /// Reads and parses an `expert_hist.json` file.
    pub fn load(path: &Path) -> Result<Heat, HeatError> {
        let origin = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| HeatError::Read {
            origin: origin.clone(),
            source,
        })?;
        Heat::parse(&text, &origin)
    }

    /// The histogram of some requests (e.g. the first half of a trace).
    pub fn of_requests(shape: Shape, requests: &[Expert]) -> Heat {
        let mut counts = vec![0; shape.total()];
        for &r in requests {
            counts[shape.index(r)] += 1;
        }
        Heat { shape, counts }
    }

    pub fn shape(&self) -> Shape {
        self.shape
    }

    pub fn count(&self, e: Expert) -> u64 {
        self.counts[self.shape.index(e)]
    }

    /// Requests recorded in all.
    pub fn total(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// Experts with at least one request, hottest first; ties go to the lower
    /// (layer, expert) so the same heat always gives the same list.
    pub fn ranked(&self) -> Vec<(Expert, u64)> {
        let mut rows: Vec<(Expert, u64)> = self
            .counts
            .iter()
            .enumerate()
            .filter(|(_, c)| **c > 0)
            .map(|(i, c)| (self.shape.expert(i), *c))
            .collect();
        rows.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        rows
    }

    /// The share of recorded requests that went to `experts` (heat coverage).
    pub fn coverage(&self, experts: &[Expert]) -> f64 {
        let total = self.total();
        if total == 0 {
            return 0.0;
        }
        let mut seen = std::collections::HashSet::new();
        let hit: u64 = experts
            .iter()
            .filter(|e| self.shape.contains(**e) && seen.insert(**e))
            .map(|e| self.count(*e))
            .sum();
        hit as f64 / total as f64
    }
}

/// The request trace: every expert request, in the order the engine made them.
#[derive(Debug, Clone, PartialEq)]
pub struct Trace {
    shape: Shape,
    requests: Vec<Expert>,
}

impl Trace {
    /// Parses `expert_trace.bin` (little-endian int32 pairs layer, expert).
    /// The file has no header, so the shape comes from the histogram.
    pub fn parse(bytes: &[u8], origin: &str, shape: Shape) -> Result<Trace, HeatError> {
        if bytes.len() % 8 != 0 {
            return Err(HeatError::Truncated {
                origin: origin.to_string(),
                bytes: bytes.len(),
            });
        }
        let mut requests = Vec::with_capacity(bytes.len() / 8);
        for (i, pair) in bytes.chunks_exact(8).enumerate() {
            let layer = i32::from_le_bytes(pair[..4].try_into().expect("4 bytes"));
            let expert = i32::from_le_bytes(pair[4..].try_into().expect("4 bytes"));
            let e = in_shape(shape, layer.into(), expert.into()).ok_or_else(|| {
                HeatError::OutOfRange {
                    origin: origin.to_string(),
                    what: format!("request {i} (byte offset {})", i * 8),
                    layer: layer.into(),
                    expert: expert.into(),
                    shape,
                }
            })?;
            requests.push(e);
        }
        Ok(Trace { shape, requests })
    }

    /// Reads and parses an `expert_trace.bin` file.
    pub fn load(path: &Path, shape: Shape) -> Result<Trace, HeatError> {
        let origin = path.display().to_string();
        let bytes = std::fs::read(path).map_err(|source| HeatError::Read {
            origin: origin.clone(),
            source,
        })?;
        Trace::parse(&bytes, &origin, shape)
    }

    /// A trace built in memory (tests, benchmarks); requests must fit `shape`.
    pub fn from_requests(shape: Shape, requests: Vec<Expert>) -> Option<Trace> {
        requests
            .iter()
            .all(|e| shape.contains(*e))
            .then_some(Trace { shape, requests })
    }

    pub fn shape(&self) -> Shape {
        self.shape
    }

    pub fn requests(&self) -> &[Expert] {
        &self.requests
    }
}

fn in_shape(shape: Shape, layer: i64, expert: i64) -> Option<Expert> {
    let e = Expert {
        layer: u32::try_from(layer).ok()?,
        expert: u32::try_from(expert).ok()?,
    };
    shape.contains(e).then_some(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    const HIST: &str = r#"{"n_layers":2,"n_experts":4,"counts":{"0,1":5,"1,3":5,"1,0":9}}"#;

    fn pairs(v: &[(i32, i32)]) -> Vec<u8> {
        v.iter()
            .flat_map(|(l, e)| l.to_le_bytes().into_iter().chain(e.to_le_bytes()))
            .collect()
    }

    #[test]
    fn histogram_ranks_hottest_first_with_stable_ties() {
        let h = Heat::parse(HIST, "h.json").unwrap();
        let e = |layer, expert| Expert { layer, expert };
        assert_eq!(h.ranked(), vec![(e(1, 0), 9), (e(0, 1), 5), (e(1, 3), 5)]);
        assert_eq!(h.total(), 19);
        assert!((h.coverage(&[e(1, 0), e(1, 0)]) - 9.0 / 19.0).abs() < 1e-12);
    }

    #[test]
    fn histogram_errors_name_the_file_and_the_problem() {
        let err = Heat::parse("{\"n_layers\":2", "heat/h.json")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("heat/h.json") && err.contains("not an expert_hist.json"),
            "{err}"
        );
        let err = Heat::parse(&HIST.replace("1,3", "1,4"), "h.json")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("(1, 4)") && err.contains("2 layers x 4 experts"),
            "{err}"
        );
        let err = Heat::parse(&HIST.replace("1,3", "1;3"), "h.json")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("\"1;3\"") && err.contains("layer,expert"),
            "{err}"
        );
        let err = Heat::parse(&HIST.replace("1,3", "-1,3"), "h.json")
            .unwrap_err()
            .to_string();
        assert!(err.contains("\"-1,3\""), "{err}");
        let err = Heat::parse(&HIST.replace("\"n_layers\":2", "\"n_layers\":0"), "h.json")
            .unwrap_err()
            .to_string();
        assert!(err.contains("0 layers"), "{err}");
    }

    #[test]
    fn trace_round_trips_and_refuses_bad_bytes() {
        let shape = Shape::new(2, 4, "t").unwrap();
        let t = Trace::parse(&pairs(&[(0, 1), (1, 3)]), "t.bin", shape).unwrap();
        assert_eq!(
            t.requests(),
            &[
                Expert {
                    layer: 0,
                    expert: 1
                },
                Expert {
                    layer: 1,
                    expert: 3
                }
            ]
        );
        let mut bytes = pairs(&[(0, 1), (1, 3)]);
        bytes.pop();
        let err = Trace::parse(&bytes, "heat/t.bin", shape)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("heat/t.bin") && err.contains("15 bytes") && err.contains("truncated"),
            "{err}"
        );
        let err = Trace::parse(&pairs(&[(0, 1), (2, 0)]), "t.bin", shape)
            .unwrap_err()
            .to_string();
        assert!(err.contains("request 1") && err.contains("(2, 0)"), "{err}");
        let err = Trace::parse(&pairs(&[(0, -1)]), "t.bin", shape)
            .unwrap_err()
            .to_string();
        assert!(err.contains("(0, -1)"), "{err}");
    }

    #[test]
    fn histogram_of_requests_counts_each_request() {
        let shape = Shape::new(2, 4, "t").unwrap();
        let t = Trace::parse(&pairs(&[(0, 1), (1, 3), (0, 1)]), "t.bin", shape).unwrap();
        let h = Heat::of_requests(shape, t.requests());
        assert_eq!(
            h.count(Expert {
                layer: 0,
                expert: 1
            }),
            2
        );
        assert_eq!(h.total(), 3);
    }

    #[test]
    fn missing_file_is_named() {
        let err = Heat::load(Path::new("/nonexistent/expert_hist.json"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("/nonexistent/expert_hist.json"), "{err}");
    }
}
