//! How the ledger's numbers read for people: effects stored as log ratios
//! (candidate/baseline) shown as signed percentages, ages, short digests.

use chrono::Duration;

/// A log ratio as a signed relative change: `-0.105` → `-10.0%`.
///
/// A change too small for one decimal gets the decimals that show it
/// (`-0.04%`, not `-0.0%`): an interval's end at `-0.0%` reads as "no
/// change" while it says "slightly faster".
pub fn percent(log_ratio: f64) -> String {
    let p = log_ratio.exp_m1() * 100.0;
    let decimals = match p.abs() {
        a if a == 0.0 || a >= 0.05 => 1,
        a if a >= 0.005 => 2,
        _ => 3,
    };
    format!("{p:+.decimals$}%")
}

/// An effect with its interval: `-10.0% [-12.9%, -7.0%]`.
pub fn effect(estimate: f64, low: f64, high: f64) -> String {
    format!(
        "{} [{}, {}]",
        percent(estimate),
        percent(low),
        percent(high)
    )
}

/// A verdict's floor as shown: the measured floor, or, for a verdict
/// judged against the bound `max_noise_floor`, that no floor was measured
/// and what the bound was (never shown as if it were a floor).
pub fn verdict_floor(log_ratio: f64, is_bound: bool) -> String {
    if is_bound {
        format!(
            "none measured (judged against the bound {})",
            floor(log_ratio)
        )
    } else {
        floor(log_ratio)
    }
}

/// A noise floor (relative, as a log ratio) as `±2.0%`, with more decimals
/// for smaller floors (`±0.34%`, `±0.034%`): a quiet machine's floors of a
/// few hundredths of a percent all read `±0.0%` with one.
pub fn floor(log_ratio: f64) -> String {
    let pct = (log_ratio.abs().exp() - 1.0) * 100.0;
    let decimals = match pct {
        p if p >= 1.0 => 1,
        p if p >= 0.1 => 2,
        _ => 3,
    };
    format!("±{pct:.decimals$}%")
}

/// A coarse age: `45s`, `12m`, `5h`, `3d`.
pub fn age(d: Duration) -> String {
    let s = d.num_seconds().max(0);
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m", s / 60),
        3600..86400 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86400),
    }
}

/// `text` cut to at most `max` characters by dropping its middle: a
/// message's cause comes first and what to do about it last, so both ends
/// are kept (two thirds of the room for the end).
pub fn shorten_middle(text: &str, max: usize) -> String {
    const GAP: &str = " … ";
    let n = text.chars().count();
    if n <= max {
        return text.to_string();
    }
    let room = max.saturating_sub(GAP.chars().count());
    let tail = room * 2 / 3;
    let head = room - tail;
    let start: String = text.chars().take(head).collect();
    let end: String = text.chars().skip(n - tail).collect();
    format!("{start}{GAP}{end}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentages_read_as_relative_change() {
        assert_eq!(percent(0.0), "+0.0%");
        assert_eq!(percent((0.9f64).ln()), "-10.0%");
        assert_eq!(percent((1.25f64).ln()), "+25.0%");
        // An interval's end just below zero is not shown as -0.0%.
        assert_eq!(percent((0.9996f64).ln()), "-0.04%");
        assert_eq!(percent((1.000_02f64).ln()), "+0.002%");
        assert_eq!(floor((1.02f64).ln()), "±2.0%");
        // Quiet-machine floors stay apart (they all read ±0.0% before).
        assert_eq!(floor((1.0034f64).ln()), "±0.34%");
        assert_eq!(floor((1.00034f64).ln()), "±0.034%");
        assert_eq!(
            effect((0.9f64).ln(), (0.85f64).ln(), (0.95f64).ln()),
            "-10.0% [-15.0%, -5.0%]"
        );
    }

    #[test]
    fn shortening_keeps_both_ends() {
        assert_eq!(shorten_middle("short", 10), "short");
        let long = format!("cause{}fix it like this", "x".repeat(500));
        let s = shorten_middle(&long, 60);
        assert_eq!(s.chars().count(), 60, "{s}");
        assert!(
            s.starts_with("cause") && s.ends_with("fix it like this"),
            "{s}"
        );
        assert!(s.contains(" … "), "{s}");
    }

    #[test]
    fn ages_are_coarse() {
        assert_eq!(age(Duration::seconds(5)), "5s");
        assert_eq!(age(Duration::seconds(600)), "10m");
        assert_eq!(age(Duration::hours(30)), "1d");
        assert_eq!(age(Duration::seconds(-3)), "0s");
    }
}
