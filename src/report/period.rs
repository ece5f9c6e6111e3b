//! The period a report covers: an ISO week (`2026-W48`) or an inclusive date
//! range (`--since 2026-11-23 --until 2026-11-29`; by default the seven days
//! up to today), as a half-open UTC interval `[start, end)` so consecutive
//! reports never count a row twice.

use std::fmt;

use chrono::{DateTime, Datelike, Days, NaiveDate, NaiveTime, Utc, Weekday};

/// The expected spelling of a week, for messages.
pub const WEEK_FORMAT: &str = "YYYY-Www (an ISO 8601 week, e.g. 2026-W48)";
/// The expected spelling of a date, for messages.
pub const DATE_FORMAT: &str = "YYYY-MM-DD (e.g. 2026-11-23)";

/// What was wrong with a `--week`, `--since` or `--until` value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PeriodError {
    #[error("--week `{given}` is not an ISO week: {why}; expected {WEEK_FORMAT}")]
    Week { given: String, why: String },
    #[error("{flag} `{given}` is not a date: {why}; expected {DATE_FORMAT}")]
    Date {
        flag: &'static str,
        given: String,
        why: String,
    },
    #[error(
        "--since {since} is after --until {until}; the range is inclusive, so give since <= until"
    )]
    Reversed { since: NaiveDate, until: NaiveDate },
}

/// An ISO 8601 week: weeks start on Monday, and week 1 is the one holding the
/// year's first Thursday (so 2026-W01 starts on Monday 2025-12-29).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct IsoWeek {
    pub year: i32,
    pub week: u32,
}

impl IsoWeek {
    /// The week holding `date`.
    pub fn of(date: NaiveDate) -> IsoWeek {
        let w = date.iso_week();
        IsoWeek {
            year: w.year(),
            week: w.week(),
        }
    }

    /// Its Monday.
    pub fn monday(self) -> NaiveDate {
        NaiveDate::from_isoywd_opt(self.year, self.week, Weekday::Mon)
            .expect("an IsoWeek is only built from a valid week")
    }

    /// Parses `YYYY-Www` strictly: four-digit year, a capital `W`, two digits,
    /// and a week the year really has (52 or 53).
    pub fn parse(s: &str) -> Result<IsoWeek, PeriodError> {
        let err = |why: &str| PeriodError::Week {
            given: s.to_string(),
            why: why.to_string(),
        };
        let b = s.as_bytes();
        let digits = |r: std::ops::Range<usize>| b[r].iter().all(u8::is_ascii_digit);
        if b.len() != 8 || b[4] != b'-' || b[5] != b'W' || !digits(0..4) || !digits(6..8) {
            return Err(err("wrong shape"));
        }
        let year: i32 = s[0..4].parse().map_err(|_| err("bad year"))?;
        let week: u32 = s[6..8].parse().map_err(|_| err("bad week number"))?;
        if week == 0 {
            return Err(err("weeks are numbered from 01"));
        }
        if NaiveDate::from_isoywd_opt(year, week, Weekday::Mon).is_none() {
            let last = weeks_in(year);
            return Err(err(&format!("{year} has only {last} ISO weeks")));
        }
        Ok(IsoWeek { year, week })
    }
}

/// 52 or 53: the ISO week of 28 December is always the year's last.
fn weeks_in(year: i32) -> u32 {
    NaiveDate::from_ymd_opt(year, 12, 28).map_or(52, |d| d.iso_week().week())
}

impl fmt::Display for IsoWeek {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:04}-W{:02}", self.year, self.week)
    }
}

/// Parses `YYYY-MM-DD` strictly (chrono alone would accept `2026-1-5`).
pub fn parse_date(flag: &'static str, s: &str) -> Result<NaiveDate, PeriodError> {
    let err = |why: &str| PeriodError::Date {
        flag,
        given: s.to_string(),
        why: why.to_string(),
    };
    let b = s.as_bytes();
    let shape = b.len() == 10
        && b[4] == b'-'
        && b[7] == b'-'
        && b.iter()
            .enumerate()
            .all(|(i, c)| i == 4 || i == 7 || c.is_ascii_digit());
    if !shape {
        return Err(err("wrong shape"));
    }
    NaiveDate::parse_from_str(s, "%Y-%m-%d").map_err(|_| err("no such day"))
}

/// What a report covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Period {
    /// First instant included.
    pub start: DateTime<Utc>,
    /// First instant excluded.
    pub end: DateTime<Utc>,
    /// How the user named it.
    pub label: PeriodLabel,
}

/// How a period was named, to title the report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeriodLabel {
    Week(IsoWeek),
    /// Inclusive first and last day.
    Days(NaiveDate, NaiveDate),
}

fn midnight(d: NaiveDate) -> DateTime<Utc> {
    d.and_time(NaiveTime::MIN).and_utc()
}

impl Period {
    pub fn week(w: IsoWeek) -> Period {
        let monday = w.monday();
        Period {
            start: midnight(monday),
            end: midnight(monday + Days::new(7)),
            label: PeriodLabel::Week(w),
        }
    }

    /// The whole days `since..=until`.
    pub fn days(since: NaiveDate, until: NaiveDate) -> Result<Period, PeriodError> {
        if since > until {
            return Err(PeriodError::Reversed { since, until });
        }
        Ok(Period {
            start: midnight(since),
            end: midnight(until + Days::new(1)),
            label: PeriodLabel::Days(since, until),
        })
    }

    /// The default: the seven whole days up to and including today (UTC),
    /// so a report right after a run shows it, whatever the weekday. A
    /// weekly report of a finished week asks for it with `--week`.
    pub fn last_seven_days(now: DateTime<Utc>) -> Period {
        let today = now.date_naive();
        Period::days(today - Days::new(6), today).expect("six days before today is before today")
    }

    /// From the command line: `--week`, or `--since` (default: today) with
    /// an optional `--until`, or `--until` alone (the seven days ending on
    /// it), or the seven days up to today.
    pub fn from_args(
        week: Option<&str>,
        since: Option<&str>,
        until: Option<&str>,
        now: DateTime<Utc>,
    ) -> Result<Period, PeriodError> {
        match (week, since, until) {
            (Some(w), _, _) => Ok(Period::week(IsoWeek::parse(w)?)),
            (None, Some(s), u) => {
                let since = parse_date("--since", s)?;
                let until = match u {
                    Some(u) => parse_date("--until", u)?,
                    None => now.date_naive(),
                };
                Period::days(since, until)
            }
            (None, None, Some(u)) => {
                // Seven days ending on the given day, like the default.
                let until = parse_date("--until", u)?;
                Period::days(until - Days::new(6), until)
            }
            (None, None, None) => Ok(Period::last_seven_days(now)),
        }
    }

    pub fn contains(&self, t: DateTime<Utc>) -> bool {
        self.start <= t && t < self.end
    }

    /// The ISO week the period is exactly, however it was asked for
    /// (`--week`, or `--since` a Monday `--until` its Sunday).
    pub fn iso_week(&self) -> Option<IsoWeek> {
        let w = IsoWeek::of(self.start.date_naive());
        (Period::week(w).start == self.start && Period::week(w).end == self.end).then_some(w)
    }

    /// What the report is called: "Weekly report" for exactly an ISO week,
    /// else "Report" (one day, or any other run of days).
    pub fn kind(&self) -> &'static str {
        if self.iso_week().is_some() {
            "Weekly report"
        } else {
            "Report"
        }
    }

    /// The period in the heading: `2026-W47 (2026-11-16 to 2026-11-22)`,
    /// `2026-12-01`, or `2026-11-24 to 2026-12-01`.
    pub fn title(&self) -> String {
        let first = self.start.date_naive();
        let last = (self.end - chrono::Duration::days(1)).date_naive();
        match self.iso_week() {
            Some(w) => format!("{w} ({first} to {last})"),
            None if first == last => first.to_string(),
            None => format!("{first} to {last}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(y: i32, m: u32, day: u32) -> NaiveDate {
        NaiveDate::from_ymd_opt(y, m, day).unwrap()
    }

    #[test]
    fn weeks_follow_iso_8601() {
        let w = IsoWeek::parse("2026-W48").unwrap();
        assert_eq!(w.monday(), d(2026, 11, 23));
        // Week 1 of 2026 starts in 2025 (the year's first Thursday is 1 January).
        assert_eq!(
            IsoWeek::parse("2026-W01").unwrap().monday(),
            d(2025, 12, 29)
        );
        assert_eq!(
            IsoWeek::parse("2026-W53").unwrap().monday(),
            d(2026, 12, 28)
        );
        let e = IsoWeek::parse("2025-W53").unwrap_err().to_string();
        assert!(e.contains("2025 has only 52 ISO weeks"), "{e}");
        assert!(e.contains("YYYY-Www"), "{e}");
    }

    #[test]
    fn sloppy_spellings_are_refused() {
        for bad in [
            "2026-48",
            "2026-w48",
            "2026-W4",
            "26-W48",
            "2026-W00",
            " 2026-W48",
            "",
        ] {
            assert!(IsoWeek::parse(bad).is_err(), "{bad}");
        }
        for bad in ["2026-1-05", "2026/11/23", "2026-02-30", "2026-11-23T00:00"] {
            let e = parse_date("--since", bad).unwrap_err().to_string();
            assert!(e.contains("YYYY-MM-DD") && e.contains("--since"), "{e}");
        }
    }

    #[test]
    fn the_default_period_is_the_seven_days_up_to_today() {
        let now = d(2026, 12, 1).and_hms_opt(12, 5, 0).unwrap().and_utc();
        let p = Period::from_args(None, None, None, now).unwrap();
        assert!(p.contains(now), "{p:?}");
        assert_eq!(p.label, PeriodLabel::Days(d(2026, 11, 25), d(2026, 12, 1)));
        // `--until` alone is the same seven days ending on that day.
        let until = Period::from_args(None, None, Some("2026-12-01"), now).unwrap();
        assert_eq!(until, p);
    }

    #[test]
    fn an_iso_week_is_titled_weekly_and_other_ranges_by_their_days() {
        let one = Period::days(d(2026, 12, 1), d(2026, 12, 1)).unwrap();
        assert_eq!(one.kind(), "Report");
        assert_eq!(one.title(), "2026-12-01");
        let some = Period::days(d(2026, 11, 24), d(2026, 12, 1)).unwrap();
        assert_eq!(
            (some.kind(), some.title().as_str()),
            ("Report", "2026-11-24 to 2026-12-01")
        );
        let monday_to_sunday = Period::days(d(2026, 11, 23), d(2026, 11, 29)).unwrap();
        assert_eq!(monday_to_sunday.kind(), "Weekly report");
        assert_eq!(
            monday_to_sunday.title(),
            "2026-W48 (2026-11-23 to 2026-11-29)"
        );
    }

    #[test]
    fn date_ranges_are_inclusive_and_ordered() {
        let p = Period::days(d(2026, 11, 23), d(2026, 11, 23)).unwrap();
        assert_eq!(p.end - p.start, chrono::Duration::days(1));
        assert!(matches!(
            Period::days(d(2026, 11, 24), d(2026, 11, 23)),
            Err(PeriodError::Reversed { .. })
        ));
    }
}
