//! The report as one self-contained HTML page: inline CSS, inline SVG charts,
//! no scripts and no external assets, so it opens the same from a mail
//! attachment or an air-gapped disk.
//!
//! The text sections are the Markdown rendering of the same [`Report`],
//! turned into HTML (only the small subset `markdown.rs` writes), so the two
//! formats can never disagree; the charts are drawn from the [`Report`].

use std::fmt::Write;

use super::chart_frame::{CHART_STYLE, Frame, polyline};
use super::fleet::{self, Fleet};
use super::{Report, Series, markdown};
use crate::vocab::VerdictKind;

/// Escapes text for HTML element content and attribute values.
pub fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

const STYLE: &str = "body{font:15px/1.45 system-ui,sans-serif;max-width:1000px;margin:2em auto;padding:0 1em;color:#1b1b1b;background:#fff}\
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:3px 8px;text-align:left}\
th{background:#f2f2f2}code{background:#f2f2f2;padding:0 3px}svg{display:block;margin:1em 0;background:#fcfcfc;border:1px solid #ddd}";

/// Verdict colours, in [`VerdictKind::ALL`] order.
const KIND_COLOURS: [&str; 7] = [
    "#2e7d32", "#c62828", "#9e9e9e", "#fbc02d", "#6a1b9a", "#5d4037", "#212121",
];

pub fn render(r: &Report) -> String {
    page(&r.heading(), &body(r, ""))
}

/// The fleet report (`report --stack | --class | --all`) as one page: each
/// stack's report in its own section (its charts' ids end in the section's
/// number, so they stay unique), then the fleet summary.
pub fn render_fleet(f: &Fleet) -> String {
    let mut all = String::new();
    for (i, r) in f.reports.iter().enumerate() {
        let _ = writeln!(all, "<section id=\"stack-{i}\">");
        all.push_str(&body(r, &format!("-{i}")));
        all.push_str("</section>\n<hr>\n");
    }
    let _ = writeln!(all, "<section id=\"fleet-summary\">");
    all.push_str(&md_to_html(&fleet::summary_markdown(f)));
    all.push_str("</section>\n");
    page(&f.heading(), &all)
}

fn page(title: &str, body: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>{}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n{body}</body>\n</html>\n",
        esc(title)
    )
}

/// One report's sections and charts; `ids` ends each chart's id.
fn body(r: &Report, ids: &str) -> String {
    let md = markdown::render(r);
    let mut body = String::new();
    for (i, section) in md.split("\n## ").enumerate() {
        let text = if i == 0 {
            section.to_string()
        } else {
            format!("## {section}")
        };
        body.push_str(&md_to_html(&text));
        let heading = text.lines().next().unwrap_or("");
        if r.is_empty() {
            continue;
        }
        if heading == "## Objective" {
            body.push_str(&speed_chart(r, ids));
        } else if heading == "## Verdicts by menu entry" {
            body.push_str(&verdict_chart(r, ids));
        } else if heading == "## Noise floor and drift" {
            body.push_str(&noise_chart(r, ids));
        }
    }
    body
}

/// Inline Markdown: escape, then `**bold**` and `` `code` ``.
fn inline(s: &str) -> String {
    let s = esc(&s.replace("\\|", "|"));
    let mut out = String::new();
    let mut bold = false;
    let mut code = false;
    let mut rest = s.as_str();
    while let Some(i) = rest.find(['*', '`']) {
        out.push_str(&rest[..i]);
        if rest[i..].starts_with("**") {
            out.push_str(if bold { "</strong>" } else { "<strong>" });
            bold = !bold;
            rest = &rest[i + 2..];
        } else if rest[i..].starts_with('`') {
            out.push_str(if code { "</code>" } else { "<code>" });
            code = !code;
            rest = &rest[i + 1..];
        } else {
            out.push('*');
            rest = &rest[i + 1..];
        }
    }
    out.push_str(rest);
    if bold {
        out.push_str("</strong>");
    }
    if code {
        out.push_str("</code>");
    }
    out
}

/// Splits a table row on the `|` that are not escaped.
fn cells(line: &str) -> Vec<String> {
    let inner = line.trim().trim_start_matches('|');
    let inner = inner.strip_suffix('|').unwrap_or(inner);
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut prev = ' ';
    for c in inner.chars() {
        if c == '|' && prev != '\\' {
            out.push(cur.trim().to_string());
            cur.clear();
        } else {
            cur.push(c);
        }
        prev = c;
    }
    out.push(cur.trim().to_string());
    out
}

fn md_to_html(md: &str) -> String {
    let mut o = String::new();
    let lines: Vec<&str> = md.lines().collect();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        if let Some(h) = line.strip_prefix("## ") {
            let _ = writeln!(o, "<h2>{}</h2>", inline(h));
        } else if let Some(h) = line.strip_prefix("# ") {
            let _ = writeln!(o, "<h1>{}</h1>", inline(h));
        } else if line.starts_with('|') {
            o.push_str("<table>\n");
            let mut row = 0;
            while i < lines.len() && lines[i].starts_with('|') {
                if row != 1 {
                    let tag = if row == 0 { "th" } else { "td" };
                    o.push_str("<tr>");
                    for c in cells(lines[i]) {
                        let _ = write!(o, "<{tag}>{}</{tag}>", inline(&c));
                    }
                    o.push_str("</tr>\n");
                }
                row += 1;
                i += 1;
            }
            o.push_str("</table>\n");
            continue;
        } else if line.starts_with("- ") {
            o.push_str("<ul>\n");
            while i < lines.len() && lines[i].starts_with("- ") {
                let _ = writeln!(o, "<li>{}</li>", inline(&lines[i][2..]));
                i += 1;
            }
            o.push_str("</ul>\n");
            continue;
        } else if !line.trim().is_empty() {
            let _ = writeln!(o, "<p>{}</p>", inline(line));
        }
        i += 1;
    }
    o
}

/// Seconds per token over time, against the target and the best staged candidate.
fn speed_chart(r: &Report, ids: &str) -> String {
    let staged = r.best_staged.as_ref().and_then(|b| b.seconds_per_token);
    let vals = r
        .speed
        .iter()
        .map(|p| p.seconds_per_token)
        .chain(std::iter::once(r.target))
        .chain(staged);
    let (lo, hi) = vals.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| {
        (a.min(v), b.max(v))
    });
    let f = Frame::new(r, lo, hi);
    let mut o = f.open(
        &format!("chart-speed{ids}"),
        "Live profile seconds per token (median of each experiment's baseline runs) against the target",
    );
    o.push_str(&f.axes(|v, dp| format!("{v:.dp$}")));
    let pts: Vec<(f64, f64)> = r
        .speed
        .iter()
        .map(|p| (f.x(p.at), f.y(p.seconds_per_token)))
        .collect();
    if pts.len() > 1 {
        o.push_str(&polyline("speed", &pts));
    }
    // Thousands of dots would hide the line; the line carries the shape.
    if pts.len() <= 400 {
        for ((x, y), p) in pts.iter().zip(&r.speed) {
            let _ = writeln!(
                o,
                "<circle class=\"pt\" cx=\"{x:.1}\" cy=\"{y:.1}\" r=\"3\"><title>experiment #{}: {} s/token ({} runs)</title></circle>",
                p.experiment,
                markdown::spt(p.seconds_per_token),
                p.runs
            );
        }
    }
    let shifts = r.changes.iter().any(|c| c.series == Series::Baseline);
    let mut key = vec![
        ("speed", "live s/token (median per experiment)"),
        ("target", "target"),
    ];
    if staged.is_some() {
        key.push(("staged", "best staged candidate"));
    }
    if shifts {
        key.push(("changepoint", "change point (PELT)"));
    }
    o.push_str(&f.legend(&key));
    for c in r.changes.iter().filter(|c| c.series == Series::Baseline) {
        o.push_str(&f.vline(
            "changepoint",
            c.at,
            &format!(
                "baseline change point: {} → {} s/token",
                markdown::spt(c.before),
                markdown::spt(c.after)
            ),
        ));
    }
    o.push_str(&f.hline(
        "target",
        r.target,
        &format!("target {}", markdown::spt(r.target)),
    ));
    if let (Some(v), Some(b)) = (staged, &r.best_staged) {
        o.push_str(&f.hline(
            "staged",
            v,
            &format!(
                "best staged: stage #{} ({}) {}",
                b.stage.id,
                crate::ledger::stage_label(b.stage.menu_id, &b.stage.parts),
                markdown::spt(v)
            ),
        ));
    }
    if r.speed.is_empty() {
        let _ = writeln!(
            o,
            "<text class=\"lbl\" x=\"{}\" y=\"{}\">no baseline run measured the live profile in this period</text>",
            f.left + 10.0,
            f.top + 20.0
        );
    }
    o.push_str("</svg>\n");
    o
}

/// The noise floor over time, change points marked.
fn noise_chart(r: &Report, ids: &str) -> String {
    let pct = |v: f64| (v.abs().exp() - 1.0) * 100.0;
    let (lo, hi) = r
        .noise
        .iter()
        .map(|p| pct(p.value))
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), v| {
            (a.min(v), b.max(v))
        });
    let f = Frame::new(r, lo.min(0.0), hi);
    let mut o = f.open(
        &format!("chart-noise{ids}"),
        "Noise floor over time (±%), change points marked",
    );
    o.push_str(&f.axes(|v, dp| format!("±{v:.dp$}%")));
    let pts: Vec<(f64, f64)> = r
        .noise
        .iter()
        .map(|p| (f.x(p.at), f.y(pct(p.value))))
        .collect();
    if pts.len() > 1 {
        o.push_str(&polyline("floor", &pts));
    }
    for ((x, y), p) in pts.iter().zip(&r.noise) {
        let _ = writeln!(
            o,
            "<circle class=\"fpt\" cx=\"{x:.1}\" cy=\"{y:.1}\" r=\"3\"><title>{} (n = {}{})</title></circle>",
            crate::display::floor(p.value),
            p.n,
            match (p.load1, p.cpu_pressure) {
                (Some(l), Some(c)) => format!(", load {l:.2}, CPU stalled {:.0}%", 100.0 * c),
                (Some(l), None) => format!(", load {l:.2}"),
                _ => String::new(),
            }
        );
    }
    let mut key = vec![("floor", "noise floor (±%)")];
    if r.changes.iter().any(|c| c.series == Series::NoiseFloor) {
        key.push(("changepoint", "change point (PELT)"));
    }
    o.push_str(&f.legend(&key));
    for c in r.changes.iter().filter(|c| c.series == Series::NoiseFloor) {
        o.push_str(&f.vline(
            "changepoint",
            c.at,
            &format!(
                "noise floor change point: {} → {}",
                crate::display::floor(c.before),
                crate::display::floor(c.after)
            ),
        ));
    }
    if r.noise.is_empty() {
        let _ = writeln!(
            o,
            "<text class=\"lbl\" x=\"{}\" y=\"{}\">no noise floor measured in this period</text>",
            f.left + 10.0,
            f.top + 20.0
        );
    }
    o.push_str("</svg>\n");
    o
}

/// The verdict mix per menu entry, as stacked horizontal bars.
fn verdict_chart(r: &Report, ids: &str) -> String {
    let rows = r.verdicts.len().max(1);
    let (w, left, bar, gap, legend) = (940.0, 170.0, 22.0, 10.0, 30.0);
    let h = 20.0 + rows as f64 * (bar + gap) + legend;
    let max = r
        .verdicts
        .iter()
        .map(|m| m.total())
        .max()
        .unwrap_or(0)
        .max(1);
    let scale = (w - left - 60.0) / f64::from(max);
    let mut o = format!(
        "<svg id=\"chart-verdicts{ids}\" xmlns=\"http://www.w3.org/2000/svg\" role=\"img\" width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\"><title>Verdicts per menu entry</title>\n{CHART_STYLE}"
    );
    for (i, m) in r.verdicts.iter().enumerate() {
        let y = 15.0 + i as f64 * (bar + gap);
        let name = m.menu.map_or("(no experiment)", |m| m.as_str());
        let _ = writeln!(
            o,
            "<text class=\"lbl\" x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            left - 8.0,
            y + bar * 0.7,
            esc(name)
        );
        let mut x = left;
        for (k, &n) in VerdictKind::ALL.iter().zip(&m.counts) {
            if n == 0 {
                continue;
            }
            let bw = f64::from(n) * scale;
            let colour = KIND_COLOURS[VerdictKind::ALL.iter().position(|v| v == k).unwrap_or(0)];
            let _ = writeln!(
                o,
                "<rect class=\"bar\" x=\"{x:.1}\" y=\"{y:.1}\" width=\"{bw:.1}\" height=\"{bar}\" fill=\"{colour}\"><title>{name}: {n} {}</title></rect>",
                k.as_str()
            );
            x += bw;
        }
        let _ = writeln!(
            o,
            "<text class=\"lbl\" x=\"{:.1}\" y=\"{:.1}\">{}</text>",
            x + 6.0,
            y + bar * 0.7,
            m.total()
        );
    }
    let ly = h - legend + 12.0;
    for (i, k) in VerdictKind::ALL.iter().enumerate() {
        let x = left + i as f64 * 105.0;
        let _ = writeln!(
            o,
            "<rect x=\"{x:.1}\" y=\"{ly:.1}\" width=\"12\" height=\"12\" fill=\"{}\"/><text class=\"lbl\" x=\"{:.1}\" y=\"{:.1}\">{}</text>",
            KIND_COLOURS[i],
            x + 16.0,
            ly + 10.0,
            k.as_str()
        );
    }
    o.push_str("</svg>\n");
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markdown_subset_becomes_html_and_text_is_escaped() {
        let html =
            md_to_html("# T <x>\n\n| a | b \\| c |\n|---|---|\n| **1** | `2` |\n\n- item & more\n");
        assert!(html.contains("<h1>T &lt;x&gt;</h1>"), "{html}");
        assert!(html.contains("<th>b | c</th>"), "{html}");
        assert!(
            html.contains("<td><strong>1</strong></td><td><code>2</code></td>"),
            "{html}"
        );
        assert!(html.contains("<li>item &amp; more</li>"), "{html}");
    }
}
