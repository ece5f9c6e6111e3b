//! The HTML report opened in a real headless Chromium: the page must render
//! its inline SVG charts (the screenshot is not blank and shows each chart's
//! colours), and stay self-contained (no scripts, no external assets).
//!
//! Needs Debian's `chromium` (`apt-get install -y chromium`). Without it the
//! test FAILS and says so: a skipped browser test would pass silently.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::report_fixture;
use chrono::{TimeZone, Utc};
use orchestrator::ledger::Ledger;
use orchestrator::report::period::IsoWeek;
use orchestrator::report::{BuildOptions, Period, build, html};

const INSTALL: &str = "apt-get update && apt-get install -y chromium";

fn chromium() -> PathBuf {
    if let Some(p) = std::env::var_os("CHROMIUM") {
        return PathBuf::from(p);
    }
    let path = std::env::var_os("PATH").unwrap_or_default();
    for dir in std::env::split_paths(&path) {
        for name in [
            "chromium",
            "chromium-browser",
            "google-chrome",
            "google-chrome-stable",
        ] {
            let p = dir.join(name);
            if p.is_file() {
                return p;
            }
        }
    }
    panic!(
        "\n\n*** headless Chromium is required for the HTML report test and was not found on PATH ***\n\
         install it with:\n\n    {INSTALL}\n\nor set CHROMIUM=/path/to/chromium\n\n"
    );
}

/// Screenshots `page` at 1200x2000 with a fresh profile directory.
fn screenshot(page: &Path, png: &Path) {
    let profile = tempfile::tempdir().unwrap();
    let mut child = Command::new(chromium())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .arg(format!("--screenshot={}", png.display()))
        .arg("--window-size=1200,2000")
        .arg(format!("file://{}", page.display()))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start chromium ({e}); install it with: {INSTALL}"));
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            use std::io::Read;
            child
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut err)
                .unwrap();
            assert!(
                status.success() && png.is_file(),
                "chromium failed ({status}):\n{err}"
            );
            return;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("chromium took more than 30 s to take a screenshot");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// RGB pixels of a PNG.
fn pixels(png: &Path) -> (u32, u32, Vec<[u8; 3]>) {
    let decoder = png::Decoder::new(std::io::BufReader::new(std::fs::File::open(png).unwrap()));
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size().unwrap()];
    let info = reader.next_frame(&mut buf).unwrap();
    let step = info.color_type.samples();
    assert!(
        step >= 3,
        "unexpected PNG colour type {:?}",
        info.color_type
    );
    let px = buf[..info.buffer_size()]
        .chunks(step)
        .map(|c| [c[0], c[1], c[2]])
        .collect();
    (info.width, info.height, px)
}

fn luminance_variance(px: &[[u8; 3]]) -> f64 {
    let l: Vec<f64> = px
        .iter()
        .map(|p| 0.299 * f64::from(p[0]) + 0.587 * f64::from(p[1]) + 0.114 * f64::from(p[2]))
        .collect();
    let mean = l.iter().sum::<f64>() / l.len() as f64;
    l.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / l.len() as f64
}

/// How many pixels are within a small distance of `rgb`.
fn near(px: &[[u8; 3]], rgb: [u8; 3]) -> usize {
    px.iter()
        .filter(|p| (0..3).all(|i| p[i].abs_diff(rgb[i]) <= 24))
        .count()
}

async fn fixture_html() -> String {
    let ledger = Ledger::open_in_memory().await.unwrap();
    report_fixture::fill(&ledger).await;
    let period = Period::week(IsoWeek::parse("2026-W47").unwrap());
    let now = Utc.with_ymd_and_hms(2026, 11, 30, 8, 0, 0).unwrap();
    html::render(
        &build(&ledger, &BuildOptions::new(period, "tinyk3", 1.0, now))
            .await
            .unwrap(),
    )
}

#[tokio::test]
async fn html_report_renders_its_charts_in_chromium() {
    let _heavy = crate::common::heavy_async().await;
    let page = fixture_html().await;

    // Self-contained: nothing is fetched, nothing runs.
    for bad in ["<script", "src=", "href=", "@import", "url("] {
        assert!(!page.contains(bad), "the page contains `{bad}`");
    }
    for id in ["chart-speed", "chart-noise", "chart-verdicts"] {
        assert!(page.contains(&format!("<svg id=\"{id}\"")), "no {id}");
    }
    for class in [
        "class=\"speed\"",
        "class=\"target\"",
        "class=\"staged\"",
        "class=\"floor\"",
        "class=\"changepoint\"",
        "class=\"bar\"",
    ] {
        assert!(page.contains(class), "no element with {class}");
    }
    assert!(!page.contains(report_fixture::LEAKED_TOKEN));
    // The projection, from the same data model as the Markdown: labelled,
    // each factor with the experiment it was measured in.
    assert!(page.contains("Projection (not a measurement)</h2>"));
    assert!(page.contains("<strong>Projected: "), "no projected number");
    assert!(page.contains("E × 0.") && page.contains("median of 4 paired ratios"));

    let dir = tempfile::tempdir().unwrap();
    let full = dir.path().join("report.html");
    std::fs::write(&full, &page).unwrap();
    let png = dir.path().join("report.png");
    screenshot(&full, &png);
    // To look at it: REPORT_HTML_KEEP=/some/dir cargo test --test report_html
    if let Some(keep) = std::env::var_os("REPORT_HTML_KEEP") {
        std::fs::copy(&full, Path::new(&keep).join("report.html")).unwrap();
        std::fs::copy(&png, Path::new(&keep).join("report.png")).unwrap();
    }
    let (w, h, px) = pixels(&png);
    assert_eq!((w, h), (1200, 2000));
    let var = luminance_variance(&px);
    assert!(
        var > 100.0,
        "the screenshot is (nearly) blank: luminance variance {var:.1}"
    );

    // The charts alone, so what is seen is the SVG and not the text.
    let svgs: String = page
        .match_indices("<svg ")
        .map(|(i, _)| {
            let end = page[i..].find("</svg>").unwrap() + i + "</svg>".len();
            &page[i..end]
        })
        .collect();
    let charts = dir.path().join("charts.html");
    std::fs::write(
        &charts,
        format!(
            "<!DOCTYPE html><html><body style=\"margin:0;background:#fff\">{svgs}</body></html>"
        ),
    )
    .unwrap();
    let png = dir.path().join("charts.png");
    screenshot(&charts, &png);
    let (_, _, px) = pixels(&png);
    assert!(luminance_variance(&px) > 50.0, "the charts rendered blank");
    for (what, rgb) in [
        ("speed line", [0x1f, 0x5f, 0xbf]),
        ("target line", [0xc6, 0x28, 0x28]),
        ("staged candidate line", [0x2e, 0x7d, 0x32]),
        ("noise floor line", [0x6a, 0x1b, 0x9a]),
        ("change point marker", [0xef, 0x6c, 0x00]),
    ] {
        let n = near(&px, rgb);
        assert!(
            n > 30,
            "the {what} is not visible in the screenshot ({n} pixels of #{:02x}{:02x}{:02x})",
            rgb[0],
            rgb[1],
            rgb[2]
        );
    }
}

/// One chart's SVG out of the page.
fn chart<'a>(page: &'a str, id: &str) -> &'a str {
    let start = page
        .find(&format!("<svg id=\"{id}\""))
        .unwrap_or_else(|| panic!("no {id}"));
    let end = page[start..].find("</svg>").unwrap() + start;
    &page[start..end]
}

/// The value-axis labels of a chart (the right-anchored texts).
fn y_labels(svg: &str) -> Vec<String> {
    svg.split("text-anchor=\"end\">")
        .skip(1)
        .map(|s| s[..s.find("</text>").unwrap()].to_string())
        .collect()
}

#[tokio::test]
async fn noise_floor_ticks_have_the_floors_precision() {
    // Floors are log ratios of 0.0003 to 0.05: the labels must tell ticks
    // apart at either scale.
    let period = Period::week(IsoWeek::parse("2026-W47").unwrap());
    let now = Utc.with_ymd_and_hms(2026, 11, 30, 8, 0, 0).unwrap();
    for values in [
        &[0.0003, 0.0005, 0.0004, 0.0006][..],
        &[0.001, 0.002, 0.0015, 0.003],
        &[0.01, 0.05, 0.02, 0.03],
        &[0.02],
    ] {
        let ledger = Ledger::open_in_memory().await.unwrap();
        let rows: Vec<_> = values
            .iter()
            .enumerate()
            .map(|(i, v)| (report_fixture::t(i as i64, 3), *v))
            .collect();
        report_fixture::floors(&ledger, "llama-server/surface", &rows).await;
        let r = build(
            &ledger,
            &BuildOptions::new(period, "llama-server", 1.0, now),
        )
        .await
        .unwrap();
        let page = html::render(&r);
        let labels = y_labels(chart(&page, "chart-noise"));
        assert!(labels.len() >= 3, "{values:?}: {labels:?}");
        let mut seen = labels.clone();
        seen.sort();
        seen.dedup();
        assert_eq!(seen.len(), labels.len(), "{values:?}: {labels:?}");
        // Each label is a round number of its own precision.
        for l in &labels {
            let n: f64 = l
                .trim_start_matches('±')
                .trim_end_matches('%')
                .parse()
                .unwrap_or_else(|_| panic!("{l}"));
            assert!(n >= 0.0, "{l}");
            let decimals = l
                .split('.')
                .nth(1)
                .map_or(0, |d| d.trim_end_matches('%').len());
            assert!(decimals <= 3, "{values:?}: {labels:?}");
        }
    }
}

#[tokio::test]
async fn the_change_point_line_has_a_legend() {
    let page = fixture_html().await;
    for id in ["chart-noise", "chart-speed"] {
        let svg = chart(&page, id);
        assert!(
            svg.contains("class=\"changepoint\""),
            "{id} has no change point"
        );
        let legend = svg
            .split("<g class=\"legend\">")
            .nth(1)
            .unwrap_or_else(|| panic!("{id} has no legend:\n{svg}"));
        let legend = &legend[..legend.find("</g>").unwrap()];
        assert!(
            legend.contains("class=\"changepoint\"") && legend.contains(">change point"),
            "{id}: {legend}"
        );
    }
}
