//! The chart of claimed against realized: the live server's seconds per
//! token across the period's approvals, toward the target. At each applied
//! stage the line steps from the replaced profile's speed (its shadow, the
//! realization's baseline arm) to the live server's on the new profile
//! (the candidate arm); a ring marks where the claim said it would land.

use std::fmt::Write;

use super::Report;
use super::chart_frame::{Frame, polyline};
use super::html::esc;
use super::markdown::spt;
use super::realized::StageRealized;
use crate::vocab::VerdictKind;

/// The chart's own classes, beside the page's shared chart style.
const STYLE: &str = "<style>.live{fill:none;stroke:#00838f;stroke-width:2}.lpt{fill:#00838f}\
.loss{fill:#c62828}.claim{fill:none;stroke:#2e7d32;stroke-width:2}.applied{stroke:#9e9e9e;stroke-width:1;stroke-dasharray:2 3}</style>\n";

/// Inline SVG; `ids` ends the chart's id (one per report of a fleet page).
pub(super) fn chart(r: &Report, ids: &str) -> String {
    let measured: Vec<(&StageRealized, f64, f64)> = r
        .realizations
        .iter()
        .filter_map(|s| {
            let m = s.realized.as_ref()?;
            Some((s, m.replaced_spt?, m.live_spt?))
        })
        .collect();
    let claimed = |s: &StageRealized, before: f64| before * s.claimed.exp();
    let vals = measured
        .iter()
        .flat_map(|(s, a, b)| [*a, *b, claimed(s, *a)])
        .chain(std::iter::once(r.target));
    let (lo, hi) = vals.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| {
        (a.min(v), b.max(v))
    });
    let f = Frame::new(r, lo, hi);
    let mut o = f.open(
        &format!("chart-realized{ids}"),
        "Live server seconds per token across approvals (the replaced profile's shadow, then the live server) against the target",
    );
    o.push_str(STYLE);
    o.push_str(&f.axes(|v, dp| format!("{v:.dp$}")));
    for s in &r.realizations {
        o.push_str(&f.vline(
            "applied",
            s.applied_at,
            &format!("stage #{} ({}) applied: {}", s.stage, s.label, s.status),
        ));
    }
    let mut pts = Vec::new();
    for (s, before, after) in &measured {
        let m = s.realized.as_ref().expect("filtered on it");
        pts.push((f.x(s.applied_at), f.y(*before)));
        pts.push((f.x(m.decided_at), f.y(*after)));
    }
    if pts.len() > 1 {
        o.push_str(&polyline("live", &pts));
    }
    for (s, before, after) in &measured {
        let m = s.realized.as_ref().expect("filtered on it");
        let (x0, x1) = (f.x(s.applied_at), f.x(m.decided_at));
        let class = if m.verdict == VerdictKind::Loss {
            "loss"
        } else {
            "lpt"
        };
        let _ = writeln!(
            o,
            "<circle class=\"lpt\" cx=\"{x0:.1}\" cy=\"{:.1}\" r=\"3\"><title>stage #{}: the replaced profile, {} s/token (shadow)</title></circle>",
            f.y(*before),
            s.stage,
            spt(*before)
        );
        let _ = writeln!(
            o,
            "<circle class=\"{class}\" cx=\"{x1:.1}\" cy=\"{:.1}\" r=\"4\"><title>{}</title></circle>",
            f.y(*after),
            esc(&format!(
                "stage #{} realized {} {}: live {} s/token (experiment #{})",
                s.stage,
                m.verdict,
                crate::display::percent(m.effect),
                spt(*after),
                m.experiment
            ))
        );
        let c = claimed(s, *before);
        let _ = writeln!(
            o,
            "<circle class=\"claim\" cx=\"{x1:.1}\" cy=\"{:.1}\" r=\"6\"><title>{}</title></circle>",
            f.y(c),
            esc(&format!(
                "stage #{} claimed {}: {} s/token",
                s.stage,
                crate::display::percent(s.claimed),
                spt(c)
            ))
        );
    }
    o.push_str(&f.legend(&[
        ("live", "live server s/token (replaced → live)"),
        ("claim", "claimed"),
        ("target", "target"),
    ]));
    o.push_str(&f.hline("target", r.target, &format!("target {}", spt(r.target))));
    if measured.is_empty() {
        let _ = writeln!(
            o,
            "<text class=\"lbl\" x=\"{}\" y=\"{}\">no stage applied in this period was realized in it</text>",
            f.left + 10.0,
            f.top + 20.0
        );
    }
    o.push_str("</svg>\n");
    o
}
