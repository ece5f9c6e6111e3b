//! Property tests of the report period: ISO weeks round-trip and contain
//! their days, date ranges are inclusive, nothing panics on any input.

use chrono::{Datelike, Days, NaiveDate, Weekday};
use orchestrator::report::period::{IsoWeek, Period, PeriodError, parse_date};
use proptest::prelude::*;

fn date() -> impl Strategy<Value = NaiveDate> {
    // 1900-01-01 to about 2200.
    (0u64..110_000).prop_map(|d| NaiveDate::from_ymd_opt(1900, 1, 1).unwrap() + Days::new(d))
}

proptest! {
    #[test]
    fn a_week_round_trips_and_holds_its_days(d in date(), secs in 0u32..86_400) {
        let w = IsoWeek::of(d);
        let text = w.to_string();
        prop_assert_eq!(IsoWeek::parse(&text).unwrap(), w);
        let monday = w.monday();
        prop_assert_eq!(monday.weekday(), Weekday::Mon);
        prop_assert!(monday <= d && d < monday + Days::new(7));
        let p = Period::week(w);
        let t = d.and_hms_opt(0, 0, 0).unwrap().and_utc() + chrono::Duration::seconds(i64::from(secs));
        prop_assert!(p.contains(t));
        prop_assert_eq!(p.end - p.start, chrono::Duration::days(7));
    }

    #[test]
    fn the_default_period_holds_now_and_the_six_days_before(d in date(), secs in 0u32..86_400) {
        let now = d.and_hms_opt(0, 0, 0).unwrap().and_utc() + chrono::Duration::seconds(i64::from(secs));
        let p = Period::from_args(None, None, None, now).unwrap();
        prop_assert!(p.contains(now));
        prop_assert!(p.contains(now - chrono::Duration::days(6)));
        prop_assert_eq!(p.end - p.start, chrono::Duration::days(7));
        prop_assert!(p.end - now <= chrono::Duration::days(1));
    }

    #[test]
    fn date_ranges_are_inclusive(a in date(), len in 0u64..400) {
        let b = a + Days::new(len);
        let p = Period::days(a, b).unwrap();
        prop_assert_eq!(p.end - p.start, chrono::Duration::days(len as i64 + 1));
        if len > 0 {
            let reversed = matches!(Period::days(b, a), Err(PeriodError::Reversed { .. }));
            prop_assert!(reversed);
        }
        prop_assert_eq!(parse_date("--since", &a.format("%Y-%m-%d").to_string()).unwrap(), a);
    }

    #[test]
    fn any_text_is_parsed_or_refused_with_the_format(s in "\\PC{0,12}") {
        match IsoWeek::parse(&s) {
            Ok(w) => prop_assert_eq!(w.to_string(), s.clone()),
            Err(e) => prop_assert!(e.to_string().contains("YYYY-Www")),
        }
        if let Err(e) = parse_date("--until", &s) {
            prop_assert!(e.to_string().contains("YYYY-MM-DD"));
        }
    }

    #[test]
    fn week_like_text_is_valid_exactly_when_the_year_has_that_week(y in 1900i32..2200, w in 0u32..60) {
        let s = format!("{y:04}-W{w:02}");
        let valid = NaiveDate::from_isoywd_opt(y, w, Weekday::Mon).is_some();
        prop_assert_eq!(IsoWeek::parse(&s).is_ok(), valid);
    }
}
