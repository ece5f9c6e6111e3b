//! The frame of the report's SVG charts: the drawing area of a chart, its
//! time and value ranges, the axes, round ticks and grid lines, and the
//! polylines drawn in it.

use std::fmt::Write;

use chrono::{DateTime, Utc};

use super::Report;
use super::html::esc;

/// Each chart carries its own style, so an SVG copied out of the page still
/// draws the same.
pub(super) const CHART_STYLE: &str = "<style>.axis{stroke:#888;stroke-width:1}.grid{stroke:#e4e4e4;stroke-width:1}\
.lbl{font:11px system-ui,sans-serif;fill:#444}.speed{fill:none;stroke:#1f5fbf;stroke-width:2}.pt{fill:#1f5fbf}\
.target{stroke:#c62828;stroke-width:2;stroke-dasharray:6 4}.staged{stroke:#2e7d32;stroke-width:2;stroke-dasharray:3 3}\
.floor{fill:none;stroke:#6a1b9a;stroke-width:2}.fpt{fill:#6a1b9a}.changepoint{stroke:#ef6c00;stroke-width:2}</style>\n";

/// A chart's drawing area and its value ranges.
pub(super) struct Frame {
    pub(super) w: f64,
    pub(super) h: f64,
    pub(super) left: f64,
    pub(super) right: f64,
    pub(super) top: f64,
    pub(super) bottom: f64,
    pub(super) t0: DateTime<Utc>,
    pub(super) t1: DateTime<Utc>,
    pub(super) y0: f64,
    pub(super) y1: f64,
}

impl Frame {
    pub(super) fn new(r: &Report, mut y0: f64, mut y1: f64) -> Frame {
        if y0.is_nan() || y1.is_nan() || y1 <= y0 {
            // One value (or none): give it room above and below; a lone
            // zero (an empty series from 0) gets the range 0 to 1.
            let c = if y0.is_finite() { y0 } else { 1.0 };
            (y0, y1) = if c.abs() < 1e-12 {
                (0.0, 1.0)
            } else {
                (c * 0.9, c * 1.1)
            };
        }
        let pad = (y1 - y0) * 0.08;
        let (lo, hi) = ((y0 - pad).max(0.0), y1 + pad);
        // The axis ends on round ticks, so its labels are round numbers.
        let step = tick_step(lo, hi);
        Frame {
            w: 940.0,
            h: 300.0,
            left: 70.0,
            right: 20.0,
            top: 24.0,
            bottom: 40.0,
            t0: r.period.start,
            t1: r.period.end,
            y0: (lo / step).floor() * step,
            y1: ((hi / step).ceil() * step).max((lo / step).floor() * step + step),
        }
    }

    /// The value ticks: multiples of the step from `y0` to `y1`, and the
    /// decimals that tell them apart.
    pub(super) fn ticks(&self) -> (Vec<f64>, usize) {
        let step = tick_step(self.y0, self.y1);
        let first = (self.y0 / step).round() as i64;
        let last = (self.y1 / step).round() as i64;
        let ticks = (first..=last).map(|k| k as f64 * step).collect();
        (ticks, decimals(step))
    }

    pub(super) fn x(&self, t: DateTime<Utc>) -> f64 {
        let span = (self.t1 - self.t0).num_seconds().max(1) as f64;
        let f = (t - self.t0).num_seconds() as f64 / span;
        self.left + f.clamp(0.0, 1.0) * (self.w - self.left - self.right)
    }

    pub(super) fn y(&self, v: f64) -> f64 {
        let f = (v - self.y0) / (self.y1 - self.y0);
        self.h - self.bottom - f.clamp(0.0, 1.0) * (self.h - self.top - self.bottom)
    }

    pub(super) fn open(&self, id: &str, title: &str) -> String {
        format!(
            "<svg id=\"{id}\" xmlns=\"http://www.w3.org/2000/svg\" role=\"img\" width=\"{}\" height=\"{}\" viewBox=\"0 0 {} {}\"><title>{}</title>\n{CHART_STYLE}",
            self.w,
            self.h,
            self.w,
            self.h,
            esc(title)
        )
    }

    /// Axes, horizontal grid with value labels (`fmt` gets the value and
    /// the decimals its step needs), a tick per day.
    pub(super) fn axes(&self, fmt: impl Fn(f64, usize) -> String) -> String {
        let mut o = String::new();
        let (xl, xr, yb) = (self.left, self.w - self.right, self.h - self.bottom);
        let (ticks, dp) = self.ticks();
        for v in ticks {
            let y = self.y(v);
            let _ = writeln!(
                o,
                "<line class=\"grid\" x1=\"{xl:.1}\" y1=\"{y:.1}\" x2=\"{xr:.1}\" y2=\"{y:.1}\"/><text class=\"lbl\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
                xl - 6.0,
                y + 4.0,
                esc(&fmt(v, dp))
            );
        }
        let days = (self.t1 - self.t0).num_days().max(1);
        let step = (days / 10).max(1);
        let mut d = 0;
        while d <= days {
            let t = self.t0 + chrono::Duration::days(d);
            let x = self.x(t);
            let _ = writeln!(
                o,
                "<line class=\"axis\" x1=\"{x:.1}\" y1=\"{yb:.1}\" x2=\"{x:.1}\" y2=\"{:.1}\"/><text class=\"lbl\" x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>",
                yb + 5.0,
                yb + 18.0,
                t.format("%m-%d")
            );
            d += step;
        }
        let _ = writeln!(
            o,
            "<line class=\"axis\" x1=\"{xl:.1}\" y1=\"{yb:.1}\" x2=\"{xr:.1}\" y2=\"{yb:.1}\"/><line class=\"axis\" x1=\"{xl:.1}\" y1=\"{:.1}\" x2=\"{xl:.1}\" y2=\"{yb:.1}\"/>",
            self.top
        );
        o
    }

    pub(super) fn hline(&self, class: &str, v: f64, label: &str) -> String {
        let y = self.y(v);
        format!(
            "<line class=\"{class}\" x1=\"{:.1}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\"/><text class=\"lbl\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>\n",
            self.left,
            self.w - self.right,
            self.w - self.right - 4.0,
            y - 5.0,
            esc(label)
        )
    }

    /// A key in the top margin: a short stroke of each series' class and
    /// its name, left to right.
    pub(super) fn legend(&self, items: &[(&str, &str)]) -> String {
        let mut o = String::from("<g class=\"legend\">");
        let (mut x, y) = (self.left + 8.0, self.top / 2.0);
        for (class, label) in items {
            let _ = write!(
                o,
                "<line class=\"{class}\" x1=\"{x:.1}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\"/><text class=\"lbl\" x=\"{:.1}\" y=\"{:.1}\">{}</text>",
                x + 22.0,
                x + 27.0,
                y + 4.0,
                esc(label)
            );
            // About 6 px per character at 11 px.
            x += 27.0 + 6.2 * label.chars().count() as f64 + 18.0;
        }
        o.push_str("</g>\n");
        o
    }

    pub(super) fn vline(&self, class: &str, t: DateTime<Utc>, label: &str) -> String {
        let x = self.x(t);
        format!(
            "<line class=\"{class}\" x1=\"{x:.1}\" y1=\"{:.1}\" x2=\"{x:.1}\" y2=\"{:.1}\"><title>{}</title></line>\n",
            self.top,
            self.h - self.bottom,
            esc(label)
        )
    }
}

/// A round step (1, 2 or 5 times a power of ten) giving four to ten ticks
/// over `[lo, hi]`, whatever its scale: noise floors span 0.03% to 5%.
fn tick_step(lo: f64, hi: f64) -> f64 {
    let span = hi - lo;
    if !(span.is_finite() && span > 0.0) {
        return 1.0;
    }
    let raw = span / 5.0;
    let magnitude = 10f64.powf(raw.log10().floor());
    let m = raw / magnitude;
    let nice = if m < 1.5 {
        1.0
    } else if m < 3.5 {
        2.0
    } else if m < 7.5 {
        5.0
    } else {
        10.0
    };
    nice * magnitude
}

/// Decimals that show a multiple of `step` exactly.
fn decimals(step: f64) -> usize {
    let d = -(step.log10() + 1e-9).floor();
    if d > 0.0 { d as usize } else { 0 }
}

pub(super) fn polyline(class: &str, pts: &[(f64, f64)]) -> String {
    let coords: Vec<String> = pts.iter().map(|(x, y)| format!("{x:.1},{y:.1}")).collect();
    format!(
        "<polyline class=\"{class}\" points=\"{}\"/>\n",
        coords.join(" ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tick_steps_are_round_at_any_scale_and_labels_tell_them_apart() {
        for (lo, hi) in [
            (0.0, 0.065),
            (0.0, 0.32),
            (0.0, 5.4),
            (1.1, 1.35),
            (0.02, 0.021),
        ] {
            let step = tick_step(lo, hi);
            let n = (hi - lo) / step;
            assert!((2.0..=10.0).contains(&n), "{lo}..{hi}: step {step}");
            let dp = decimals(step);
            let labels: Vec<String> = (0..4)
                .map(|k| format!("{:.dp$}", lo + f64::from(k) * step))
                .collect();
            let mut seen = labels.clone();
            seen.dedup();
            assert_eq!(seen, labels, "{lo}..{hi}: step {step}, {dp} decimals");
        }
        assert_eq!(decimals(0.01), 2);
        assert_eq!(decimals(0.5), 1);
        assert_eq!(decimals(2.0), 0);
    }
}
