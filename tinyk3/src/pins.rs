//! The `K3EXPERTS` pin list format: a header line, then `layer expert count` rows, hottest first.

use std::fmt::Write as _;
use std::path::Path;

use crate::error::{Error, Result};
use crate::manifest::Shape;
use crate::tiers::ExpertId;

/// A parsed pin list.
#[derive(Debug, Clone, PartialEq)]
pub struct PinList {
    pub rows: Vec<(ExpertId, u64)>,
}

impl PinList {
    /// Parses and checks a pin list against the model's shape.
    pub fn parse(text: &str, shape: &Shape, origin: &str) -> Result<PinList> {
        let bad = |line: usize, what: String| {
            Error::Usage(format!("pin list {origin} line {line}: {what}"))
        };
        let mut lines = text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty());
        let (hl, header) = lines.next().ok_or_else(|| {
            bad(
                1,
                "empty; expected a `K3EXPERTS 1 <layers> <experts> <topk>` header".into(),
            )
        })?;
        let h: Vec<&str> = header.split_whitespace().collect();
        if h.len() != 5 || h[0] != "K3EXPERTS" || h[1] != "1" {
            return Err(bad(
                hl + 1,
                format!("header {header:?} is not `K3EXPERTS 1 <layers> <experts> <topk>`"),
            ));
        }
        let dims: Vec<usize> = h[2..]
            .iter()
            .map(|s| s.parse::<usize>())
            .collect::<std::result::Result<_, _>>()
            .map_err(|_| {
                bad(
                    hl + 1,
                    format!("header {header:?} has a non-integer dimension"),
                )
            })?;
        if dims != [shape.n_layers, shape.n_experts, shape.top_k] {
            return Err(bad(
                hl + 1,
                format!(
                    "written for {} layers x {} experts top-{}, but the model is {} x {} top-{}; regenerate it from this model's heat",
                    dims[0], dims[1], dims[2], shape.n_layers, shape.n_experts, shape.top_k
                ),
            ));
        }
        let mut rows = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for (i, line) in lines {
            let f: Vec<&str> = line.split_whitespace().collect();
            let nums: Option<Vec<u64>> = f.iter().map(|s| s.parse().ok()).collect();
            let nums = match nums {
                Some(n) if n.len() == 3 => n,
                _ => return Err(bad(i + 1, format!("{line:?} is not `layer expert count`"))),
            };
            let (l, e) = (nums[0] as usize, nums[1] as usize);
            if l >= shape.n_layers || e >= shape.n_experts {
                return Err(bad(
                    i + 1,
                    format!(
                        "expert ({l}, {e}) is outside {} layers x {} experts",
                        shape.n_layers, shape.n_experts
                    ),
                ));
            }
            if !seen.insert((l, e)) {
                return Err(bad(i + 1, format!("expert ({l}, {e}) is listed twice")));
            }
            rows.push(((l, e), nums[2]));
        }
        Ok(PinList { rows })
    }

    /// Reads a pin list file.
    pub fn load(path: &Path, shape: &Shape) -> Result<PinList> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::Usage(format!("cannot read pin list {}: {e}", path.display())))?;
        PinList::parse(&text, shape, &path.display().to_string())
    }

    /// Renders the list in the `K3EXPERTS` text format.
    pub fn render(&self, shape: &Shape) -> String {
        let mut s = format!(
            "K3EXPERTS 1 {} {} {}\n",
            shape.n_layers, shape.n_experts, shape.top_k
        );
        for ((l, e), c) in &self.rows {
            let _ = writeln!(s, "{l} {e} {c}");
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape() -> Shape {
        Shape {
            n_layers: 2,
            n_experts: 4,
            top_k: 2,
            d_model: 8,
            d_expert: 8,
            d_dense: 8,
            n_heads: 1,
            vocab: 256,
            draft_layers: 1,
            skew: 1.0,
            residual_scale: 0.1,
        }
    }

    #[test]
    fn round_trip_and_errors() {
        let list = PinList {
            rows: vec![((1, 3), 9), ((0, 0), 2)],
        };
        let text = list.render(&shape());
        assert_eq!(PinList::parse(&text, &shape(), "x").unwrap(), list);
        let err = PinList::parse("K3EXPERTS 1 3 4 2\n", &shape(), "x")
            .unwrap_err()
            .to_string();
        assert!(err.contains("regenerate"), "{err}");
        let err = PinList::parse("K3EXPERTS 1 2 4 2\n2 0 1\n", &shape(), "x")
            .unwrap_err()
            .to_string();
        assert!(err.contains("line 2"), "{err}");
    }
}
