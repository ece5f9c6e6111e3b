//! The Markdown report of a fixed ledger week, as an `insta` snapshot, and
//! the facts the snapshot must hold (so a careless `cargo insta accept`
//! cannot bless a wrong report).

use crate::report_fixture;
use crate::report_fixture::{LEAKED_TOKEN, NOTE_TOKEN};
use chrono::{NaiveDate, TimeZone, Utc};
use orchestrator::ledger::Ledger;
use orchestrator::report::period::IsoWeek;
use orchestrator::report::redact::Redactor;
use orchestrator::report::{BuildOptions, Period, Report, build, markdown};

async fn report_of(ledger: &Ledger, week: &str) -> Report {
    let period = Period::week(IsoWeek::parse(week).unwrap());
    let now = Utc.with_ymd_and_hms(2026, 11, 30, 8, 0, 0).unwrap();
    let mut o = BuildOptions::new(period, "tinyk3", 1.0, now);
    o.redactor = Redactor::new([]);
    build(ledger, &o).await.unwrap()
}

#[tokio::test]
async fn fixture_week_markdown_snapshot() {
    let ledger = Ledger::open_in_memory().await.unwrap();
    report_fixture::fill(&ledger).await;
    let r = report_of(&ledger, "2026-W47").await;
    let md = markdown::render(&r);

    // Facts first, each traceable to the fixture.
    assert_eq!(r.cycles.total, 18, "{md}");
    assert_eq!((r.cycles.failed, r.cycles.aborted), (2, 1), "{md}");
    assert_eq!(
        (r.stages.staged, r.stages.approved, r.stages.rejected),
        (2, 1, 1),
        "{md}"
    );
    assert_eq!(r.stages.open_at_end.len(), 1, "{md}");
    assert_eq!(
        (
            r.refusals.within_noise,
            r.refusals.hash_mismatch,
            r.refusals.refused_runs
        ),
        // Five within-noise verdicts, two of them the fixture's remeasure
        // A/As, which refused no delta and are not counted.
        (3, 1, 4)
    );
    // The largest refused delta is the +2.0% trunk rebalance, not the -1.5% one.
    assert!((r.refusals.largest[0].effect.unwrap() - 0.02).abs() < 1e-12);
    // The baseline dropped on Wednesday noon and the floor rose on Thursday.
    let series: Vec<&str> = r.changes.iter().map(|c| c.series.as_str()).collect();
    assert!(
        series.contains(&"noise floor") && series.contains(&"baseline s/token"),
        "{md}"
    );
    let floor_change = r
        .changes
        .iter()
        .find(|c| c.series.as_str() == "noise floor")
        .unwrap();
    assert_eq!(
        floor_change.at.date_naive(),
        NaiveDate::from_ymd_opt(2026, 11, 19).unwrap()
    );
    // The projection multiplies measured figures only, each with a source.
    let proj = &r.projection;
    for p in &proj.parts {
        match &p.measured {
            Ok(s) => assert!(
                s.source.contains("baseline runs (") || s.source.starts_with("derived: L"),
                "{s:?}"
            ),
            // Speculation is off in the fixture's live profile.
            Err(why) => assert!(
                p.name.contains("acceptance") && why.contains("draft_acceptance"),
                "{}: {why}",
                p.name
            ),
        }
    }
    let part = |i: usize| proj.parts[i].measured.as_ref().unwrap().value;
    let (l, t, e, rest) = (part(0), part(1), part(2), part(3));
    assert!(
        (t / l - 0.30).abs() < 0.01 && (e / l - 0.62).abs() < 0.01,
        "{md}"
    );
    // Pins (win #14) and the warm set (stage #2, confirmed by #5) multiply
    // the expert term by their measured ratios; nothing else has a win left.
    let mut fe = 1.0;
    for lever in &proj.levers {
        match lever.menu.as_str() {
            "rerank_pins" | "deepen_warm_set" => {
                assert_eq!(lever.factors.len(), 1, "{lever:?}");
                let f = &lever.factors[0];
                assert!(f.value > 0.85 && f.value < 1.0, "{f:?}");
                assert!(f.source.contains("paired ratios"), "{f:?}");
                fe *= f.value;
            }
            _ => assert!(lever.factors.is_empty() && lever.not_applied.is_some()),
        }
    }
    let want = t + e * fe + rest;
    assert!((proj.projected.unwrap() - want).abs() < 1e-9, "{md}");
    assert!(md.contains("Projection (not a measurement)"));
    assert!(md.contains("far-tier hit share 0.200 → 0.340"), "{md}");
    // Secrets never appear; the rest of the message does.
    assert!(
        !md.contains(LEAKED_TOKEN) && !md.contains(NOTE_TOKEN),
        "{md}"
    );
    assert!(md.contains("unreachable: connection refused"), "{md}");

    insta::assert_snapshot!("fixture_week_w47", md);
}

#[tokio::test]
async fn an_empty_week_is_a_short_report() {
    let ledger = Ledger::open_in_memory().await.unwrap();
    report_fixture::fill(&ledger).await;
    let r = report_of(&ledger, "2026-W30").await;
    assert!(r.is_empty());
    let md = markdown::render(&r);
    assert!(md.contains("Nothing was recorded in this period"), "{md}");
    // The ledger has cycles elsewhere: the report says where, and how to
    // ask for them.
    assert!(
        md.contains("2026-11-22") && md.contains("`orchestrator report --week 2026-W47`"),
        "{md}"
    );
    assert!(md.lines().count() < 12, "{md}");
    insta::assert_snapshot!("empty_week_w30", md);
}

#[tokio::test]
async fn a_week_without_projection_parts_says_what_is_missing() {
    // The week before the fixture: only last week's confirmed win and floors.
    let ledger = Ledger::open_in_memory().await.unwrap();
    report_fixture::fill(&ledger).await;
    let r = report_of(&ledger, "2026-W46").await;
    let md = markdown::render(&r);
    assert!(!r.is_empty());
    // W46's only win is on another profile: no lever has a measured win
    // on the live one, and each says so rather than inventing one.
    assert!(
        md.contains("no measured win on the live profile in this period"),
        "{md}"
    );
}

#[tokio::test]
async fn a_stack_without_parts_names_the_missing_figures() {
    // kimi-k3-in-c and llama-server report only seconds per token.
    let ledger = Ledger::open_in_memory().await.unwrap();
    report_fixture::fill_without_parts(&ledger).await;
    let r = report_of(&ledger, "2026-W47").await;
    let md = markdown::render(&r);
    let proj = &r.projection;
    for (i, field) in [
        (1, "trunk_seconds_per_token"),
        (2, "expert_seconds_per_token"),
    ] {
        let why = proj.parts[i].measured.as_ref().unwrap_err();
        assert!(
            why.contains(field) && why.contains("not in the ledger"),
            "{why}"
        );
    }
    // The term levers' wins cannot be placed on their terms: each
    // multiplies the whole token by its own measured whole-token ratio,
    // and says why. A win waiting for approval still moves the projection.
    let applied: Vec<_> = proj.levers.iter().filter(|l| l.best.is_some()).collect();
    assert!(applied.len() >= 2, "{:#?}", proj.levers);
    let mut product = 1.0;
    for l in &applied {
        assert_eq!(l.not_applied, None, "{l:?}");
        assert_eq!(l.factors.len(), 1, "{l:?}");
        assert_eq!(l.factors[0].figure.symbol(), "whole token", "{l:?}");
        assert!(
            l.factors[0]
                .source
                .contains("on the whole token: the live profile's T and E not measured"),
            "{l:?}"
        );
        product *= l.factors[0].value;
    }
    let live = r.live.as_ref().unwrap().value;
    assert!(product < 1.0, "{:#?}", proj.levers);
    assert!(
        (proj.projected.unwrap() - live * product).abs() < 1e-12,
        "{md}"
    );
    assert!(
        md.contains("T and E not measured: every lever on the whole token"),
        "{md}"
    );
}

#[tokio::test]
async fn a_win_its_confirmation_refuted_is_no_lever_and_no_win() {
    let ledger = Ledger::open_in_memory().await.unwrap();
    report_fixture::fill(&ledger).await;
    let (won, refuting, pending) = report_fixture::fill_refuted_and_pending_wins(&ledger).await;
    let r = report_of(&ledger, "2026-W47").await;
    let md = markdown::render(&r);
    let lever = |name: &str| {
        r.projection
            .levers
            .iter()
            .find(|l| l.menu.as_str() == name)
            .unwrap()
    };
    // The −47.9% speculation win read +62.1% in its confirmation: not a
    // remaining lever (and the week's other speculation win was rejected).
    let spec = lever("stage_speculative");
    assert!(
        spec.best.is_none() && spec.factors.is_empty(),
        "{spec:?}\n{md}"
    );
    assert!(
        spec.not_applied
            .as_deref()
            .unwrap()
            .contains("refuted by its confirmation"),
        "{spec:?}"
    );
    // The win still waiting for its confirmation is applied, labelled so.
    let rebalance = lever("rebalance_trunk_cache");
    let best = rebalance.best.as_ref().unwrap();
    assert!(
        best.source.contains(&format!("experiment #{pending}"))
            && best.source.contains("confirmation pending"),
        "{best:?}"
    );
    assert_eq!(rebalance.factors.len(), 2, "{rebalance:?}");
    // The win rate counts the refuted win as decided, not as a win.
    let model = r
        .proposers
        .iter()
        .find(|p| p.proposer.as_str() == "model")
        .unwrap();
    let spec_rate = model
        .per_menu
        .iter()
        .find(|m| m.0.as_str() == "stage_speculative")
        .unwrap();
    assert_eq!((spec_rate.1, spec_rate.2), (1, 3), "{md}");
    assert!(
        md.contains(&format!(
            "experiment #{won} (stage_speculative) -47.9%, refuted by experiment #{refuting} (loss +62.1%)"
        )),
        "{md}"
    );
}

#[tokio::test]
async fn floors_stored_per_protocol_fill_the_noise_section() {
    // As llama-server and kimi-k3-in-c store them: `STACK/PROTOCOL`.
    let ledger = Ledger::open_in_memory().await.unwrap();
    let at = |h| report_fixture::t(1, h);
    report_fixture::floors(
        &ledger,
        "llama-server/surface",
        &[(at(1), 0.004), (at(9), 0.006)],
    )
    .await;
    report_fixture::floors(&ledger, "kimi-k3-in-c/bench", &[(at(2), 0.02)]).await;
    // A stack's name may itself hold a slash.
    report_fixture::floors(&ledger, "lab/llama/surface", &[(at(4), 0.01)]).await;
    // Another stack whose name starts the same is not this one's.
    report_fixture::floors(&ledger, "llama-server-2/surface", &[(at(3), 0.3)]).await;
    let period = Period::week(IsoWeek::parse("2026-W47").unwrap());
    let now = Utc.with_ymd_and_hms(2026, 11, 30, 8, 0, 0).unwrap();
    for (stack, values, protocol) in [
        ("llama-server", vec![0.004, 0.006], "surface"),
        ("kimi-k3-in-c", vec![0.02], "bench"),
        ("lab/llama", vec![0.01], "surface"),
    ] {
        let r = build(&ledger, &BuildOptions::new(period, stack, 1.0, now))
            .await
            .unwrap();
        let md = markdown::render(&r);
        let got: Vec<f64> = r.noise.iter().map(|p| p.value).collect();
        assert_eq!(got, values, "{stack}:\n{md}");
        assert!(
            r.noise
                .iter()
                .all(|p| p.protocol.as_deref() == Some(protocol)),
            "{:?}",
            r.noise
        );
        assert!(!md.contains("No noise floor was measured"), "{md}");
        assert!(md.contains(&format!("| {protocol} | ±")), "{md}");
    }
}

#[tokio::test]
async fn the_title_says_how_long_the_period_is() {
    let ledger = Ledger::open_in_memory().await.unwrap();
    report_fixture::fill(&ledger).await;
    let now = Utc.with_ymd_and_hms(2026, 11, 30, 8, 0, 0).unwrap();
    let d = |day| NaiveDate::from_ymd_opt(2026, 11, day).unwrap();
    for (period, heading) in [
        (
            Period::days(d(18), d(18)).unwrap(),
            "# Report: tinyk3, 2026-11-18\n",
        ),
        (
            Period::days(d(18), d(24)).unwrap(),
            "# Report: tinyk3, 2026-11-18 to 2026-11-24\n",
        ),
        // Monday to Sunday is an ISO week, however it was asked for.
        (
            Period::days(d(16), d(22)).unwrap(),
            "# Weekly report: tinyk3, 2026-W47 (2026-11-16 to 2026-11-22)\n",
        ),
        (
            Period::week(IsoWeek::parse("2026-W47").unwrap()),
            "# Weekly report: tinyk3, 2026-W47 (2026-11-16 to 2026-11-22)\n",
        ),
    ] {
        let r = build(&ledger, &BuildOptions::new(period, "tinyk3", 1.0, now))
            .await
            .unwrap();
        let md = markdown::render(&r);
        assert!(md.starts_with(heading), "want {heading:?}:\n{md}");
        let html = orchestrator::report::html::render(&r);
        let title = heading.trim_start_matches("# ").trim_end();
        assert!(html.contains(&format!("<title>{title}</title>")), "{title}");
    }
}
