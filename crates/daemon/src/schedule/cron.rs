//! Five-field cron expressions (`minute hour day-of-month month day-of-week`), evaluated
//! in UTC on unix seconds.
//!
//! Accepted per field: `*`, numbers, ranges `a-b`, lists `a,b`, steps `*/n`, `a-b/n` and
//! `a/n` (= `a-max/n`), month names `JAN`-`DEC` and weekday names `SUN`-`SAT`
//! (case-insensitive). Day-of-week 0 and 7 are both Sunday; a range may end on Sunday
//! (`MON-SUN`, `1-7`, `5-0`). The shorthands `@hourly`, `@daily`, `@midnight`, `@weekly`,
//! `@monthly`, `@yearly` and `@annually` are accepted too.
//!
//! Day rule (Vixie cron, cronie): when both day-of-month and day-of-week are restricted
//! (neither starts with `*`), a day matches when EITHER matches; otherwise both must.
//!
//! Time zone: everything is UTC. A schedule meant in local time has to be written in UTC
//! (`0 3 * * *` runs at 03:00 UTC); this keeps evaluation free of DST gaps and repeats.

use thiserror::Error;

use crate::calendar::{civil_from_days, days_from_civil, days_in_month, weekday};

pub const MINUTE: i64 = 60;
pub const HOUR: i64 = 3600;
pub use crate::calendar::DAY;

/// How far a search looks: twelve years of days. A day-of-month that only exists in leap
/// years (Feb 29) can be eight years away (2096 to 2104); impossible dates are refused by
/// [`Cron::parse`], so a search that finds nothing in this span means none exists.
const SEARCH_DAYS: i64 = 366 * 12;

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CronError {
    #[error("cron expression `{expr}` has {found} fields; expected 5 (minute hour day-of-month month day-of-week)")]
    FieldCount { expr: String, found: usize },
    #[error("cron {field} field: `{value}` is not valid; expected {expected}")]
    Field {
        field: &'static str,
        value: String,
        expected: String,
    },
    #[error("cron expression `{0}` never matches: no month has that day of the month")]
    Never(String),
}

/// A parsed cron expression. Each field is a bit set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cron {
    minutes: u64,
    hours: u64,
    days_of_month: u64,
    months: u64,
    days_of_week: u64,
    /// The day-of-month field starts with `*`.
    dom_star: bool,
    /// The day-of-week field starts with `*`.
    dow_star: bool,
    text: String,
}

pub(crate) struct FieldSpec {
    pub name: &'static str,
    pub min: u32,
    pub max: u32,
    pub names: &'static [&'static str],
    /// Index of the first name (JAN = 1, SUN = 0).
    pub name_base: u32,
}

const MINUTE_F: FieldSpec = FieldSpec {
    name: "minute",
    min: 0,
    max: 59,
    names: &[],
    name_base: 0,
};
const HOUR_F: FieldSpec = FieldSpec {
    name: "hour",
    min: 0,
    max: 23,
    names: &[],
    name_base: 0,
};
const DOM_F: FieldSpec = FieldSpec {
    name: "day-of-month",
    min: 1,
    max: 31,
    names: &[],
    name_base: 0,
};
const MONTH_F: FieldSpec = FieldSpec {
    name: "month",
    min: 1,
    max: 12,
    names: &[
        "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
    ],
    name_base: 1,
};
pub(crate) const DOW_F: FieldSpec = FieldSpec {
    name: "day-of-week",
    min: 0,
    max: 7,
    names: &["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"],
    name_base: 0,
};

impl FieldSpec {
    fn expected(&self) -> String {
        let names = if self.names.is_empty() {
            String::new()
        } else {
            format!(
                " or names {}-{}",
                self.names[0],
                self.names[self.names.len() - 1]
            )
        };
        format!(
            "`*`, a number {}-{}{names}, a range a-b, a list a,b or a step */n or a-b/n",
            self.min, self.max
        )
    }

    fn value(&self, s: &str) -> Option<u32> {
        if let Ok(n) = s.parse::<u32>() {
            return (self.min..=self.max).contains(&n).then_some(n);
        }
        self.names
            .iter()
            .position(|n| n.eq_ignore_ascii_case(s))
            .map(|i| i as u32 + self.name_base)
    }

    /// Parses a field into a bit set (bit n = value n). Day-of-week 7 becomes 0.
    pub(crate) fn parse(&self, text: &str) -> Result<u64, CronError> {
        let err = || CronError::Field {
            field: self.name,
            value: text.to_string(),
            expected: self.expected(),
        };
        let mut set = 0u64;
        for item in text.split(',') {
            let (base, step) = match item.split_once('/') {
                Some((b, s)) => {
                    let step = s.parse::<u32>().ok().filter(|&s| s > 0).ok_or_else(err)?;
                    (b, Some(step))
                }
                None => (item, None),
            };
            let (lo, hi) = if base == "*" {
                (self.min, self.max)
            } else if let Some((a, b)) = base.split_once('-') {
                let lo = self.value(a).ok_or_else(err)?;
                let mut hi = self.value(b).ok_or_else(err)?;
                // MON-SUN, 5-0: a range may end on Sunday written as 0.
                if self.name == DOW_F.name && hi == 0 && lo > 0 {
                    hi = 7;
                }
                if lo > hi {
                    return Err(err());
                }
                (lo, hi)
            } else {
                let v = self.value(base).ok_or_else(err)?;
                match step {
                    Some(_) => (v, self.max),
                    None => (v, v),
                }
            };
            let step = step.unwrap_or(1);
            let mut v = lo;
            while v <= hi {
                set |= 1 << v;
                v += step;
            }
        }
        if self.name == DOW_F.name && set & (1 << 7) != 0 {
            set = (set & !(1 << 7)) | 1;
        }
        Ok(set)
    }
}

impl Cron {
    /// Parses a five-field expression (or an `@` shorthand).
    pub fn parse(expr: &str) -> Result<Cron, CronError> {
        let trimmed = expr.trim();
        let expanded = match trimmed.to_ascii_lowercase().as_str() {
            "@hourly" => "0 * * * *",
            "@daily" | "@midnight" => "0 0 * * *",
            "@weekly" => "0 0 * * 0",
            "@monthly" => "0 0 1 * *",
            "@yearly" | "@annually" => "0 0 1 1 *",
            _ => trimmed,
        };
        let fields: Vec<&str> = expanded.split_whitespace().collect();
        if fields.len() != 5 {
            return Err(CronError::FieldCount {
                expr: expr.to_string(),
                found: fields.len(),
            });
        }
        let cron = Cron {
            minutes: MINUTE_F.parse(fields[0])?,
            hours: HOUR_F.parse(fields[1])?,
            days_of_month: DOM_F.parse(fields[2])?,
            months: MONTH_F.parse(fields[3])?,
            days_of_week: DOW_F.parse(fields[4])?,
            dom_star: fields[2].starts_with('*'),
            dow_star: fields[4].starts_with('*'),
            text: trimmed.to_string(),
        };
        // Only the day-of-month can make an expression impossible (`0 0 30 2 *`): with
        // the OR rule the weekday alone matches, and every month has every weekday.
        if cron.dow_star || cron.dom_star {
            let possible = (1..=12u32)
                .filter(|m| cron.months & (1 << m) != 0)
                .any(|m| {
                    let longest = days_in_month(2000, m); // a leap year: Feb has 29
                    (1..=longest).any(|d| cron.days_of_month & (1 << d) != 0)
                });
            if !possible {
                return Err(CronError::Never(expr.to_string()));
            }
        }
        Ok(cron)
    }

    /// The expression as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether the day (days since 1970-01-01, UTC) matches the date fields.
    fn day_matches(&self, day: i64) -> bool {
        let (_, m, d) = civil_from_days(day);
        if self.months & (1 << m) == 0 {
            return false;
        }
        let dom = self.days_of_month & (1 << d) != 0;
        let dow = self.days_of_week & (1 << weekday(day)) != 0;
        if self.dom_star || self.dow_star {
            dom && dow
        } else {
            dom || dow
        }
    }

    /// Whether the minute containing `t` (unix seconds, UTC) matches.
    pub fn matches(&self, t: i64) -> bool {
        let (day, secs) = (t.div_euclid(DAY), t.rem_euclid(DAY));
        self.day_matches(day)
            && self.hours & (1 << (secs / HOUR)) != 0
            && self.minutes & (1 << (secs % HOUR / MINUTE)) != 0
    }

    /// The first matching minute strictly after `t` (unix seconds, UTC), or None if there
    /// is none within twelve years (which [`Cron::parse`] makes impossible in practice).
    pub fn next_after(&self, t: i64) -> Option<i64> {
        let start = t.div_euclid(MINUTE).checked_add(1)?.checked_mul(MINUTE)?;
        let (day0, secs) = (start.div_euclid(DAY), start.rem_euclid(DAY));
        let (h0, m0) = ((secs / HOUR) as u32, (secs % HOUR / MINUTE) as u32);
        let mut day = day0;
        while day - day0 < SEARCH_DAYS {
            let (y, m, _) = civil_from_days(day);
            if self.months & (1 << m) == 0 {
                // Skip the rest of the month.
                day = if m == 12 {
                    days_from_civil(y + 1, 1, 1)
                } else {
                    days_from_civil(y, m + 1, 1)
                };
                continue;
            }
            if self.day_matches(day) {
                let first_hour = if day == day0 { h0 } else { 0 };
                for h in first_hour..24 {
                    if self.hours & (1 << h) == 0 {
                        continue;
                    }
                    let from = if day == day0 && h == h0 { m0 } else { 0 };
                    if let Some(m) = lowest_at_or_above(self.minutes, from) {
                        return Some(day * DAY + h as i64 * HOUR + m as i64 * MINUTE);
                    }
                }
            }
            day += 1;
        }
        None
    }

    /// The last matching minute at or before `t` (the start of that minute, so at most
    /// `t`), or None if there is none within twelve years.
    pub fn prev_at_or_before(&self, t: i64) -> Option<i64> {
        let (day0, secs) = (t.div_euclid(DAY), t.rem_euclid(DAY));
        let (h0, m0) = ((secs / HOUR) as u32, (secs % HOUR / MINUTE) as u32);
        let mut day = day0;
        while day0 - day < SEARCH_DAYS {
            let (y, m, _) = civil_from_days(day);
            if self.months & (1 << m) == 0 {
                // Back to the last day of the previous month.
                day = days_from_civil(y, m, 1) - 1;
                continue;
            }
            if self.day_matches(day) {
                let last_hour = if day == day0 { h0 } else { 23 };
                for h in (0..=last_hour).rev() {
                    if self.hours & (1 << h) == 0 {
                        continue;
                    }
                    let to = if day == day0 && h == h0 { m0 } else { 59 };
                    if let Some(m) = highest_at_or_below(self.minutes, to) {
                        return Some(day * DAY + h as i64 * HOUR + m as i64 * MINUTE);
                    }
                }
            }
            day -= 1;
        }
        None
    }
}

impl std::fmt::Display for Cron {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.text)
    }
}

impl std::str::FromStr for Cron {
    type Err = CronError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Cron::parse(s)
    }
}

fn lowest_at_or_above(set: u64, v: u32) -> Option<u32> {
    let rest = set & (u64::MAX << v);
    (rest != 0).then(|| rest.trailing_zeros())
}

fn highest_at_or_below(set: u64, v: u32) -> Option<u32> {
    let rest = set & (u64::MAX >> (63 - v));
    (rest != 0).then(|| 63 - rest.leading_zeros())
}

/// A UTC calendar time to the minute.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct CivilTime {
    pub year: i64,
    pub month: u32,
    pub day: u32,
    pub hour: u32,
    pub minute: u32,
}

impl CivilTime {
    pub fn new(year: i64, month: u32, day: u32, hour: u32, minute: u32) -> Self {
        CivilTime {
            year,
            month,
            day,
            hour,
            minute,
        }
    }

    /// The minute containing `t` (unix seconds).
    pub fn from_unix(t: i64) -> Self {
        let (day, secs) = (t.div_euclid(DAY), t.rem_euclid(DAY));
        let (year, month, d) = civil_from_days(day);
        CivilTime {
            year,
            month,
            day: d,
            hour: (secs / HOUR) as u32,
            minute: (secs % HOUR / MINUTE) as u32,
        }
    }

    pub fn to_unix(self) -> i64 {
        days_from_civil(self.year, self.month, self.day) * DAY
            + self.hour as i64 * HOUR
            + self.minute as i64 * MINUTE
    }

    /// 0 = Sunday .. 6 = Saturday.
    pub fn weekday(self) -> u32 {
        weekday(days_from_civil(self.year, self.month, self.day))
    }
}

impl std::fmt::Display for CivilTime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:04}-{:02}-{:02}T{:02}:{:02}Z",
            self.year, self.month, self.day, self.hour, self.minute
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(y: i64, mo: u32, d: u32, h: u32, mi: u32) -> i64 {
        CivilTime::new(y, mo, d, h, mi).to_unix()
    }

    fn next(expr: &str, from: i64) -> CivilTime {
        CivilTime::from_unix(Cron::parse(expr).unwrap().next_after(from).unwrap())
    }

    #[test]
    fn sunday_at_three() {
        // 2026-11-30 is a Monday.
        let c = next("0 3 * * SUN", t(2026, 11, 30, 6, 0));
        assert_eq!(c, CivilTime::new(2026, 12, 6, 3, 0));
        assert_eq!(c.weekday(), 0);
        // 7 is Sunday too, and exactly-at is not "after".
        let c = next("0 3 * * 7", t(2026, 12, 6, 3, 0));
        assert_eq!(c, CivilTime::new(2026, 12, 13, 3, 0));
    }

    #[test]
    fn business_quarter_hours() {
        let e = "*/15 9-17 * * 1-5";
        // Friday 17:45 -> Monday 09:00.
        assert_eq!(
            next(e, t(2026, 12, 4, 17, 45)),
            CivilTime::new(2026, 12, 7, 9, 0)
        );
        assert_eq!(
            next(e, t(2026, 12, 7, 9, 0)),
            CivilTime::new(2026, 12, 7, 9, 15)
        );
        assert_eq!(
            next(e, t(2026, 12, 7, 9, 14) + 59),
            CivilTime::new(2026, 12, 7, 9, 15)
        );
        assert_eq!(
            next(e, t(2026, 12, 7, 8, 0)),
            CivilTime::new(2026, 12, 7, 9, 0)
        );
    }

    #[test]
    fn month_ends_and_leap_years() {
        assert_eq!(
            next("0 0 31 * *", t(2026, 1, 31, 0, 0)),
            CivilTime::new(2026, 3, 31, 0, 0)
        );
        assert_eq!(
            next("30 12 29 2 *", t(2026, 11, 30, 0, 0)),
            CivilTime::new(2028, 2, 29, 12, 30)
        );
        // 2100 is not a leap year.
        assert_eq!(
            next("0 0 29 FEB *", t(2096, 3, 1, 0, 0)),
            CivilTime::new(2104, 2, 29, 0, 0)
        );
        assert_eq!(
            next("59 23 31 12 *", t(2026, 12, 31, 23, 58)),
            CivilTime::new(2026, 12, 31, 23, 59)
        );
        assert_eq!(
            next("0 0 1 1 *", t(2026, 12, 31, 23, 59)),
            CivilTime::new(2027, 1, 1, 0, 0)
        );
        assert_eq!(
            next("0 0 28-31 feb *", t(2024, 2, 28, 0, 0)),
            CivilTime::new(2024, 2, 29, 0, 0)
        );
    }

    #[test]
    fn dom_dow_or_rule() {
        // Both restricted: the 13th OR a Friday. 2026-11-30 is a Monday; Fri = Dec 4.
        assert_eq!(
            next("0 0 13 * FRI", t(2026, 11, 30, 0, 0)),
            CivilTime::new(2026, 12, 4, 0, 0)
        );
        assert_eq!(
            next("0 0 1 * MON", t(2026, 11, 30, 0, 0)),
            CivilTime::new(2026, 12, 1, 0, 0)
        );
        // Day-of-month starts with '*': AND. Odd days that are Mondays: Dec 7 2026.
        assert_eq!(
            next("0 0 */2 * MON", t(2026, 11, 30, 0, 0)),
            CivilTime::new(2026, 12, 7, 0, 0)
        );
        // Day-of-week '*': only the 13th.
        assert_eq!(
            next("0 0 13 * *", t(2026, 11, 30, 0, 0)),
            CivilTime::new(2026, 12, 13, 0, 0)
        );
    }

    #[test]
    fn names_lists_steps() {
        let c = Cron::parse("5,10-20/5 */6 * jan-Mar,DEC mon-sun").unwrap();
        assert_eq!(c.minutes, (1 << 5) | (1 << 10) | (1 << 15) | (1 << 20));
        assert_eq!(c.hours, (1 << 0) | (1 << 6) | (1 << 12) | (1 << 18));
        assert_eq!(c.months, 0b1_0000_0000_1110);
        assert_eq!(c.days_of_week, 0x7f);
        assert_eq!(Cron::parse("0 0 * * 5-0").unwrap().days_of_week, 0b110_0001);
        assert_eq!(
            Cron::parse("7/20 * * * *").unwrap().minutes,
            (1 << 7) | (1 << 27) | (1 << 47)
        );
        assert_eq!(
            Cron::parse("@daily").unwrap(),
            Cron {
                text: "@daily".into(),
                ..Cron::parse("0 0 * * *").unwrap()
            }
        );
    }

    #[test]
    fn errors_name_the_field() {
        let e = Cron::parse("0 24 * * *").unwrap_err().to_string();
        assert!(e.contains("hour field") && e.contains("0-23"), "{e}");
        let e = Cron::parse("0 0 * FOO *").unwrap_err().to_string();
        assert!(e.contains("month field") && e.contains("JAN-DEC"), "{e}");
        let e = Cron::parse("*/0 * * * *").unwrap_err().to_string();
        assert!(e.contains("minute field"), "{e}");
        let e = Cron::parse("0 0 * * 5-2").unwrap_err().to_string();
        assert!(e.contains("day-of-week field"), "{e}");
        let e = Cron::parse("0 0 * *").unwrap_err().to_string();
        assert!(e.contains("4 fields"), "{e}");
        let e = Cron::parse("0 0 30 2 *").unwrap_err().to_string();
        assert!(e.contains("never"), "{e}");
        assert!(Cron::parse("0 0 31 4,6 *").is_err());
        assert!(Cron::parse("0 0 30 2 MON").is_ok()); // OR rule: Mondays in February
        for bad in [
            "",
            "a * * * *",
            "1-2-3 * * * *",
            "0 0 0 * *",
            "0 0 * 13 *",
            "0 0 * * 8",
            "1,,2 * * * *",
            "-1 * * * *",
        ] {
            assert!(Cron::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn next_and_prev_agree_with_matches() {
        let mut rng = driveprobe_core::rng::Rng::new(7);
        for expr in [
            "*/15 9-17 * * 1-5",
            "0 3 * * SUN",
            "0 0 29 2 *",
            "17 */5 13 * FRI",
            "0 22 1-7 * MON",
        ] {
            let c = Cron::parse(expr).unwrap();
            for _ in 0..200 {
                let t0 = 1_700_000_000 + rng.below(400_000_000) as i64;
                let n = c.next_after(t0).unwrap();
                assert!(n > t0 && n % 60 == 0 && c.matches(n), "{expr}");
                let p = c.prev_at_or_before(n).unwrap();
                assert_eq!(p, n);
                let p = c.prev_at_or_before(n - 1).unwrap();
                assert!(p <= t0 && c.matches(p), "{expr}");
                assert_eq!(c.next_after(p), Some(n), "{expr}");
            }
        }
        // Brute force over a few days, minute by minute.
        let c = Cron::parse("*/7 1,5-6 * * TUE,THU").unwrap();
        let t0 = t(2026, 11, 29, 0, 0);
        let mut cur = t0;
        while cur < t0 + 9 * DAY {
            let n = c.next_after(cur).unwrap();
            let mut m = cur - cur.rem_euclid(60) + 60;
            while !c.matches(m) {
                m += 60;
            }
            assert_eq!(n, m);
            cur = n;
        }
    }
}
