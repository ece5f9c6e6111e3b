//! Bounded decimal numbers for constrained decoding: which next byte keeps a
//! prefix completable to an in-bounds value, and how short that completion can be.
//!
//! Values are handled as integers in units of `10^-frac` (`frac` = 0 for JSON
//! integers), at most 15 significant digits, so every candidate text parses to a
//! distinct f64 in the same order as its units. The bounds are converted to units
//! by checking candidate texts with the same `str::parse::<f64>` a validator
//! uses, which makes "in bounds" here exactly "in bounds" there.

/// Significant digits a number may have; 15 decimal digits round-trip through f64.
const MAX_DIGITS: u32 = 15;
/// Fraction digits a `number` may have when its bounds leave room for them.
const MAX_FRAC: u32 = 6;

fn pow10(n: u32) -> i128 {
    10i128.pow(n)
}

/// The in-bounds values of a `number` or `integer` schema, in units of `10^-frac`.
#[derive(Debug, Clone, PartialEq)]
pub struct Bounds {
    frac: u32,
    lo: i128,
    hi: i128,
}

/// Why a numeric schema cannot be decoded.
#[derive(Debug, Clone, PartialEq)]
pub enum BoundsError {
    /// No value satisfies the bounds.
    Empty,
    /// A bound is beyond what 15 significant digits can express.
    TooLarge(f64),
}

/// The JSON keywords that bound a number.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Limits {
    pub minimum: Option<f64>,
    pub maximum: Option<f64>,
    pub exclusive_minimum: Option<f64>,
    pub exclusive_maximum: Option<f64>,
}

impl Limits {
    fn admits(&self, v: f64) -> bool {
        self.minimum.is_none_or(|m| v >= m)
            && self.maximum.is_none_or(|m| v <= m)
            && self.exclusive_minimum.is_none_or(|m| v > m)
            && self.exclusive_maximum.is_none_or(|m| v < m)
    }

    fn largest_magnitude(&self) -> f64 {
        [
            self.minimum,
            self.maximum,
            self.exclusive_minimum,
            self.exclusive_maximum,
        ]
        .into_iter()
        .flatten()
        .map(f64::abs)
        .fold(0.0, f64::max)
    }
}

/// The text of `units` at `frac` fraction digits, as a validator would read it.
fn units_text(units: i128, frac: u32) -> String {
    let s = pow10(frac);
    let sign = if units < 0 { "-" } else { "" };
    let m = units.unsigned_abs();
    if frac == 0 {
        format!("{sign}{m}")
    } else {
        format!(
            "{sign}{}.{:0width$}",
            m / s as u128,
            m % s as u128,
            width = frac as usize
        )
    }
}

impl Bounds {
    /// Bounds of an `integer` (`integer = true`) or `number` schema.
    pub fn new(integer: bool, limits: Limits) -> Result<Bounds, BoundsError> {
        let big = limits.largest_magnitude();
        if !big.is_finite() {
            return Err(BoundsError::TooLarge(big));
        }
        let int_digits = if big >= 1.0 {
            big.log10().floor() as u32 + 1
        } else {
            1
        };
        // Fraction digits give way to integer digits only when the bounds need them.
        let frac = if integer {
            0
        } else {
            MAX_FRAC.min(MAX_DIGITS.saturating_sub(int_digits.max(9)))
        };
        let limit = pow10(MAX_DIGITS) - 1;
        let value = |u: i128| {
            units_text(u, frac)
                .parse::<f64>()
                .expect("a decimal text parses")
        };
        let lower = Limits {
            maximum: None,
            exclusive_maximum: None,
            ..limits
        };
        let upper = Limits {
            minimum: None,
            exclusive_minimum: None,
            ..limits
        };
        let scale = pow10(frac) as f64;
        let guess = |v: Option<f64>| v.map(|v| ((v * scale).round() as i128).clamp(-limit, limit));
        let first = [limits.minimum, limits.exclusive_minimum]
            .into_iter()
            .flatten()
            .reduce(f64::max);
        let last = [limits.maximum, limits.exclusive_maximum]
            .into_iter()
            .flatten()
            .reduce(f64::min);
        // Start near each bound and walk to the exact first admitted unit; f64
        // rounding moves the guess by a unit or two at most.
        let lo = match guess(first) {
            None => -limit,
            Some(mut u) => {
                while u > -limit && lower.admits(value(u - 1)) {
                    u -= 1;
                }
                while u <= limit && !lower.admits(value(u)) {
                    u += 1;
                }
                u
            }
        };
        let hi = match guess(last) {
            None => limit,
            Some(mut u) => {
                while u < limit && upper.admits(value(u + 1)) {
                    u += 1;
                }
                while u >= -limit && !upper.admits(value(u)) {
                    u -= 1;
                }
                u
            }
        };
        if lo > hi {
            return Err(if big >= 1e15 {
                BoundsError::TooLarge(big)
            } else {
                BoundsError::Empty
            });
        }
        Ok(Bounds { frac, lo, hi })
    }

    fn max_int_digits(&self) -> u32 {
        MAX_DIGITS - self.frac
    }

    /// Is some multiple of `step` within `[mag_lo, mag_hi]` (signed by `neg`) in bounds?
    fn hits(&self, mag_lo: i128, mag_hi: i128, neg: bool, step: i128) -> bool {
        let (a, b) = if neg {
            (-mag_hi, -mag_lo.max(1))
        } else {
            (mag_lo, mag_hi)
        };
        let (x, y) = (a.max(self.lo), b.min(self.hi));
        if x > y {
            return false;
        }
        x.div_euclid(step) * step + if x.rem_euclid(step) == 0 { 0 } else { step } <= y
    }

    /// The fewest bytes that complete `st` to an in-bounds number, or `None` if none does.
    pub fn min_extra(&self, st: &NumState) -> Option<usize> {
        let s = pow10(self.frac);
        let mut best: Option<usize> = None;
        let mut consider = |extra: usize, found: bool| {
            if found {
                best = Some(best.map_or(extra, |b: usize| b.min(extra)));
            }
        };
        if st.dot {
            let unit = pow10(self.frac - st.frac_len);
            let base = st.int * s + st.frac * unit;
            for m in st.frac_len.max(1)..=self.frac {
                let step = pow10(self.frac - m);
                consider(
                    (m - st.frac_len) as usize,
                    self.hits(base, base + unit - 1, st.neg, step),
                );
            }
            return best;
        }
        // Both signs are open only while nothing has been written.
        let signs: &[(bool, usize)] = match (st.int_len, st.neg) {
            (0, false) => &[(false, 0), (true, 1)],
            (_, neg) => {
                if neg {
                    &[(true, 0)]
                } else {
                    &[(false, 0)]
                }
            }
        };
        for &(neg, sign_cost) in signs {
            // (added integer digits, magnitude range of the integer part)
            let mut ranges: Vec<(usize, i128, i128)> = Vec::new();
            if st.int_len == 0 {
                for n in 1..=self.max_int_digits() {
                    let lo = if n == 1 { 0 } else { pow10(n - 1) };
                    ranges.push((n as usize, lo, pow10(n) - 1));
                }
            } else if st.int == 0 {
                ranges.push((0, 0, 0));
            } else {
                for k in 0..=self.max_int_digits().saturating_sub(st.int_len) {
                    ranges.push((k as usize, st.int * pow10(k), (st.int + 1) * pow10(k) - 1));
                }
            }
            for (added, lo, hi) in ranges {
                let extra = sign_cost + added;
                consider(extra, self.hits(lo * s, hi * s, neg, s));
                for m in 1..=self.frac {
                    consider(
                        extra + 1 + m as usize,
                        self.hits(lo * s, hi * s + s - 1, neg, pow10(self.frac - m)),
                    );
                }
            }
        }
        best
    }

    /// The bytes that may come next after `st`, each keeping it completable.
    pub fn allowed(&self, st: &NumState) -> Vec<u8> {
        let mut out = Vec::new();
        for c in b"-0123456789." {
            if let Some(next) = st.push(*c, self) {
                if self.min_extra(&next).is_some() {
                    out.push(*c);
                }
            }
        }
        out
    }
}

/// How much of a number has been written: sign, integer digits, fraction digits.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NumState {
    neg: bool,
    int: i128,
    int_len: u32,
    dot: bool,
    frac: i128,
    frac_len: u32,
}

impl NumState {
    /// The state after byte `c`, if `c` keeps the text a canonical JSON number prefix.
    pub fn push(&self, c: u8, b: &Bounds) -> Option<NumState> {
        let mut n = *self;
        match c {
            b'-' if self.int_len == 0 && !self.neg => n.neg = true,
            b'.' if self.int_len > 0 && !self.dot && b.frac > 0 => n.dot = true,
            b'0'..=b'9' if self.dot => {
                if self.frac_len >= b.frac {
                    return None;
                }
                n.frac = self.frac * 10 + i128::from(c - b'0');
                n.frac_len += 1;
            }
            b'0'..=b'9' => {
                // No leading zeros; and the digit budget.
                if (self.int_len > 0 && self.int == 0) || self.int_len >= b.max_int_digits() {
                    return None;
                }
                n.int = self.int * 10 + i128::from(c - b'0');
                n.int_len += 1;
            }
            _ => return None,
        }
        Some(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lim(min: f64, max: f64) -> Limits {
        Limits {
            minimum: Some(min),
            maximum: Some(max),
            ..Limits::default()
        }
    }

    /// Walks every path greedily by a fixed byte preference and checks the result.
    fn complete_with(b: &Bounds, prefer: &[u8]) -> String {
        let mut st = NumState::default();
        let mut text = String::new();
        loop {
            if b.min_extra(&st) == Some(0) && text.len() >= 3 {
                return text;
            }
            let allowed = b.allowed(&st);
            if allowed.is_empty() {
                assert_eq!(b.min_extra(&st), Some(0), "stuck at {text:?}");
                return text;
            }
            let c = prefer
                .iter()
                .find(|c| allowed.contains(c))
                .copied()
                .unwrap_or(allowed[0]);
            st = st.push(c, b).unwrap();
            text.push(c as char);
        }
    }

    #[test]
    fn integer_bounds_are_exact() {
        let b = Bounds::new(true, lim(0.0, 1024.0)).unwrap();
        assert_eq!((b.lo, b.hi), (0, 1024));
        for prefer in [&b"9"[..], b"1", b"0", b"5"] {
            let t = complete_with(&b, prefer);
            let v: i64 = t.parse().unwrap();
            assert!((0..=1024).contains(&v), "{t}");
        }
        assert_eq!(b.min_extra(&NumState::default()), Some(1));
        // "1" then only digits that stay <= 1024 are allowed.
        let one = NumState::default().push(b'1', &b).unwrap();
        let ten = one.push(b'0', &b).unwrap();
        let t102 = ten.push(b'2', &b).unwrap();
        assert_eq!(b.allowed(&t102), b"01234".to_vec());
        assert!(b.allowed(&NumState::default()).iter().all(|c| *c != b'-'));
    }

    #[test]
    fn number_fraction_and_negative() {
        let b = Bounds::new(false, lim(-0.5, 0.25)).unwrap();
        let neg = NumState::default().push(b'-', &b).unwrap();
        assert_eq!(b.allowed(&neg), b"0".to_vec());
        let t = complete_with(&b, b"-09.");
        let v: f64 = t.parse().unwrap();
        assert!((-0.5..=0.25).contains(&v), "{t}");
        let t = complete_with(&b, b"9.");
        let v: f64 = t.parse().unwrap();
        assert!((-0.5..=0.25).contains(&v), "{t}");
    }

    proptest::proptest! {
        /// Any walk through the allowed bytes, finished by the shortest completion,
        /// ends in an in-bounds value: no prefix is a dead end.
        #[test]
        fn every_walk_completes_in_bounds(
            lo in -2000.0f64..2000.0,
            span in 0.0f64..500.0,
            integer: bool,
            picks in proptest::collection::vec(0usize..64, 0..24),
        ) {
            let limits = lim(lo, lo + span);
            let Ok(b) = Bounds::new(integer, limits) else {
                // Only an integer range without an integer in it may be empty.
                proptest::prop_assert!(integer && lo.ceil() > (lo + span).floor());
                return Ok(());
            };
            let mut st = NumState::default();
            let mut text = String::new();
            for p in picks {
                let allowed = b.allowed(&st);
                if allowed.is_empty() {
                    break;
                }
                let c = allowed[p % allowed.len()];
                st = st.push(c, &b).unwrap();
                text.push(c as char);
                proptest::prop_assert!(b.min_extra(&st).is_some(), "dead end at {text:?}");
            }
            while let Some(need) = b.min_extra(&st).filter(|n| *n > 0) {
                let c = b
                    .allowed(&st)
                    .into_iter()
                    .find(|c| b.min_extra(&st.push(*c, &b).unwrap()) == Some(need - 1))
                    .expect("a byte on a shortest completion");
                st = st.push(c, &b).unwrap();
                text.push(c as char);
            }
            let v: f64 = text.parse().unwrap();
            proptest::prop_assert!(limits.admits(v), "{text} outside [{lo}, {}]", lo + span);
            if integer {
                proptest::prop_assert!(text.parse::<i64>().is_ok(), "{text} is not an integer");
            }
        }
    }

    #[test]
    fn empty_and_exclusive() {
        assert_eq!(Bounds::new(true, lim(1.2, 1.8)), Err(BoundsError::Empty));
        let b = Bounds::new(
            true,
            Limits {
                exclusive_minimum: Some(3.0),
                exclusive_maximum: Some(5.0),
                ..Limits::default()
            },
        )
        .unwrap();
        assert_eq!((b.lo, b.hi), (4, 4));
        assert_eq!(b.allowed(&NumState::default()), b"4".to_vec());
    }
}
