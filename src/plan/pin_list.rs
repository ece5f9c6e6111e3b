//! The `K3EXPERTS` pin list: a `K3EXPERTS 1 <layers> <experts> <topk>` header,
//! then `layer expert count` rows, hottest first. The engine pins the first
//! `pins.count` rows.

use std::fmt::Write as _;
use std::path::Path;

use crate::heat::{Expert, Shape};

/// A parsed pin list.
#[derive(Debug, Clone, PartialEq)]
pub struct PinList {
    pub shape: Shape,
    /// Experts each token uses per layer; the engine checks it matches.
    pub top_k: u32,
    pub rows: Vec<(Expert, u64)>,
}

/// Why a pin list could not be read; names the file and line.
#[derive(Debug, thiserror::Error)]
pub enum PinListError {
    #[error("cannot read pin list {origin}: {source}")]
    Read {
        origin: String,
        #[source]
        source: std::io::Error,
    },
    #[error("pin list {origin} line {line}: {problem}")]
    Invalid {
        origin: String,
        line: usize,
        problem: String,
    },
}

impl PinList {
    /// Parses pin list text; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<PinList, PinListError> {
        let bad = |line: usize, problem: String| PinListError::Invalid {
            origin: origin.to_string(),
            line,
            problem,
        };
        let mut lines = text
            .lines()
            .enumerate()
            .map(|(i, l)| (i + 1, l))
            .filter(|(_, l)| !l.trim().is_empty());
        let (hl, header) = lines.next().ok_or_else(|| {
            bad(
                1,
                "empty; expected a `K3EXPERTS 1 <layers> <experts> <topk>` header".into(),
            )
        })?;
        let h: Vec<&str> = header.split_whitespace().collect();
        let dims: Option<Vec<u64>> = h
            .get(2..)
            .map(|d| d.iter().filter_map(|s| s.parse().ok()).collect());
        let (shape, top_k) = match (h.first(), h.get(1), dims) {
            (Some(&"K3EXPERTS"), Some(&"1"), Some(d)) if h.len() == 5 && d.len() == 3 => {
                let shape = Shape::new(d[0], d[1], origin).map_err(|e| bad(hl, e.to_string()))?;
                if d[2] == 0 || d[2] > u64::from(shape.n_experts) {
                    return Err(bad(
                        hl,
                        format!(
                            "top-k {} must be between 1 and the {} experts per layer",
                            d[2], shape.n_experts
                        ),
                    ));
                }
                (shape, d[2] as u32)
            }
            _ => {
                return Err(bad(
                    hl,
                    format!("header {header:?} is not `K3EXPERTS 1 <layers> <experts> <topk>`"),
                ));
            }
        };
        let mut rows = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for (n, line) in lines {
            let nums: Option<Vec<u64>> = line.split_whitespace().map(|s| s.parse().ok()).collect();
            let Some([l, e, c]) = nums.as_deref().and_then(|v| <[u64; 3]>::try_from(v).ok()) else {
                return Err(bad(n, format!("{line:?} is not `layer expert count`")));
            };
            let expert = Expert {
                layer: u32::try_from(l).unwrap_or(u32::MAX),
                expert: u32::try_from(e).unwrap_or(u32::MAX),
            };
            if !shape.contains(expert) {
                return Err(bad(n, format!("expert ({l}, {e}) is outside {shape}")));
            }
            if !seen.insert(expert) {
                return Err(bad(n, format!("expert ({l}, {e}) is listed twice")));
            }
            rows.push((expert, c));
        }
        Ok(PinList { shape, top_k, rows })
    }

    /// Reads a pin list file.
    pub fn load(path: &Path) -> Result<PinList, PinListError> {
        let origin = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|source| PinListError::Read {
            origin: origin.clone(),
            source,
        })?;
        PinList::parse(&text, &origin)
    }

    /// The experts the engine pins when told to pin `count` rows.
    pub fn pinned(&self, count: usize) -> &[(Expert, u64)] {
        &self.rows[..count.min(self.rows.len())]
    }

    /// The `K3EXPERTS` text.
    pub fn render(&self) -> String {
        let mut s = format!(
            "K3EXPERTS 1 {} {} {}\n",
            self.shape.n_layers, self.shape.n_experts, self.top_k
        );
        for (e, c) in &self.rows {
            let _ = writeln!(s, "{} {} {c}", e.layer, e.expert);
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list() -> PinList {
        let e = |layer, expert| Expert { layer, expert };
        PinList {
            shape: Shape::new(2, 4, "t").unwrap(),
            top_k: 2,
            rows: vec![(e(1, 3), 9), (e(0, 0), 2)],
        }
    }

    #[test]
    fn round_trips() {
        let text = list().render();
        assert_eq!(text, "K3EXPERTS 1 2 4 2\n1 3 9\n0 0 2\n");
        assert_eq!(PinList::parse(&text, "p").unwrap(), list());
        assert_eq!(list().pinned(1).len(), 1);
        assert_eq!(list().pinned(9).len(), 2);
    }

    #[test]
    fn errors_name_the_line() {
        let cases = [
            ("", "line 1", "empty"),
            ("K3EXPERTS 2 2 4 2\n", "line 1", "is not `K3EXPERTS"),
            ("K3EXPERTS 1 2 4 9\n", "line 1", "top-k 9"),
            (
                "K3EXPERTS 1 2 4 2\n\n2 0 1\n",
                "line 3",
                "outside 2 layers x 4 experts",
            ),
            (
                "K3EXPERTS 1 2 4 2\n0 0 1\n0 0 3\n",
                "line 3",
                "listed twice",
            ),
            (
                "K3EXPERTS 1 2 4 2\n0 0\n",
                "line 2",
                "is not `layer expert count`",
            ),
        ];
        for (text, line, what) in cases {
            let err = PinList::parse(text, "pins.k3").unwrap_err().to_string();
            assert!(
                err.contains("pins.k3") && err.contains(line) && err.contains(what),
                "{text:?}: {err}"
            );
        }
    }
}
