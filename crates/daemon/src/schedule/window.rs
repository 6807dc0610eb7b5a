//! Maintenance windows: a daily time span, in UTC like the cron expressions, on some
//! weekdays. A window may wrap midnight (`22:00-04:00`): it then belongs to the day it
//! opens on (Friday's 22:00-04:00 window closes on Saturday at 04:00). `start == end` means
//! the whole 24 hours.

use thiserror::Error;

use super::cron::{CronError, DAY, DOW_F, MINUTE};
use crate::calendar::weekday;

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum WindowError {
    #[error("maintenance window `{0}`: expected `HH:MM-HH:MM`, optionally after weekdays (`MON-FRI 22:00-04:00`)")]
    Syntax(String),
    #[error("maintenance window `{value}`: {source}")]
    Days { value: String, source: CronError },
}

/// A set of weekdays, bit 0 = Sunday .. bit 6 = Saturday.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Weekdays(pub u8);

impl Weekdays {
    pub const ALL: Weekdays = Weekdays(0x7f);

    /// Cron day-of-week syntax: `MON-FRI`, `sat,sun`, `1-5`, `*`.
    pub fn parse(s: &str) -> Result<Weekdays, CronError> {
        Ok(Weekdays(DOW_F.parse(s)? as u8))
    }

    /// 0 = Sunday .. 6 = Saturday.
    pub fn contains(self, weekday: u32) -> bool {
        weekday < 7 && self.0 & (1 << weekday) != 0
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// Opening time of day (hour, minute), UTC.
    pub start: (u8, u8),
    /// Closing time of day (hour, minute), UTC; before `start` wraps midnight.
    pub end: (u8, u8),
    /// The weekdays on which the window opens.
    pub days: Weekdays,
}

impl Window {
    /// `22:00-04:00` (every day) or `MON-FRI 22:00-04:00`.
    pub fn parse(s: &str) -> Result<Window, WindowError> {
        let syntax = || WindowError::Syntax(s.to_string());
        let parts: Vec<&str> = s.split_whitespace().collect();
        let (days, span) = match parts.as_slice() {
            [span] => (Weekdays::ALL, *span),
            [days, span] => (
                Weekdays::parse(days).map_err(|source| WindowError::Days {
                    value: s.to_string(),
                    source,
                })?,
                *span,
            ),
            _ => return Err(syntax()),
        };
        let (a, b) = span.split_once('-').ok_or_else(syntax)?;
        let hm = |x: &str| -> Option<(u8, u8)> {
            let (h, m) = x.split_once(':')?;
            let (h, m) = (h.parse::<u8>().ok()?, m.parse::<u8>().ok()?);
            (h < 24 && m < 60).then_some((h, m))
        };
        Ok(Window {
            start: hm(a).ok_or_else(syntax)?,
            end: hm(b).ok_or_else(syntax)?,
            days,
        })
    }

    fn start_secs(&self) -> i64 {
        (self.start.0 as i64 * 60 + self.start.1 as i64) * MINUTE
    }

    /// How long the window stays open, in seconds (24 h when start == end).
    pub fn length(&self) -> i64 {
        let s = self.start.0 as i64 * 60 + self.start.1 as i64;
        let e = self.end.0 as i64 * 60 + self.end.1 as i64;
        let len = (e - s).rem_euclid(24 * 60);
        (if len == 0 { 24 * 60 } else { len }) * MINUTE
    }

    /// The opening of the window that contains `t`, if one does.
    pub fn open_since(&self, t: i64) -> Option<i64> {
        let day = t.div_euclid(DAY);
        [day, day - 1].into_iter().find_map(|d| {
            let open = d * DAY + self.start_secs();
            (self.days.contains(weekday(d)) && open <= t && t < open + self.length())
                .then_some(open)
        })
    }

    /// Whether the window is open at `t` (unix seconds): opening inclusive, closing
    /// exclusive.
    pub fn contains(&self, t: i64) -> bool {
        self.open_since(t).is_some()
    }

    /// When the window that contains `t` closes, if one does.
    pub fn closes_after(&self, t: i64) -> Option<i64> {
        self.open_since(t).map(|o| o + self.length())
    }

    /// The earliest moment at or after `t` when the window is open: `t` itself inside a
    /// window, else the next opening. None when no weekday is selected.
    pub fn next_open(&self, t: i64) -> Option<i64> {
        if self.contains(t) {
            return Some(t);
        }
        let day = t.div_euclid(DAY);
        (0..8).map(|i| day + i).find_map(|d| {
            let open = d * DAY + self.start_secs();
            (self.days.contains(weekday(d)) && open >= t).then_some(open)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::cron::CivilTime;
    use super::*;

    fn t(y: i64, mo: u32, d: u32, h: u32, mi: u32) -> i64 {
        CivilTime::new(y, mo, d, h, mi).to_unix()
    }

    #[test]
    fn wrapping_window_belongs_to_its_opening_day() {
        // 2026-12-04 is a Friday.
        let w = Window::parse("fri 22:00-04:00").unwrap();
        assert!(!w.contains(t(2026, 12, 4, 21, 59)));
        assert!(w.contains(t(2026, 12, 4, 22, 0)));
        assert!(w.contains(t(2026, 12, 5, 3, 59)));
        assert!(!w.contains(t(2026, 12, 5, 4, 0)));
        assert!(!w.contains(t(2026, 12, 5, 22, 30))); // Saturday: no window
        assert!(!w.contains(t(2026, 12, 4, 2, 0))); // Friday early: Thursday's window
        assert_eq!(
            w.next_open(t(2026, 12, 5, 4, 0)),
            Some(t(2026, 12, 11, 22, 0))
        );
        assert_eq!(
            w.next_open(t(2026, 12, 5, 1, 0)),
            Some(t(2026, 12, 5, 1, 0))
        );
        assert_eq!(
            w.closes_after(t(2026, 12, 5, 1, 0)),
            Some(t(2026, 12, 5, 4, 0))
        );
        assert_eq!(w.length(), 6 * 3600);
    }

    #[test]
    fn plain_and_full_day_windows() {
        let w = Window::parse("01:30-05:00").unwrap();
        assert_eq!(w.days, Weekdays::ALL);
        assert_eq!(
            w.next_open(t(2026, 12, 1, 5, 0)),
            Some(t(2026, 12, 2, 1, 30))
        );
        assert_eq!(
            w.next_open(t(2026, 12, 1, 0, 0)),
            Some(t(2026, 12, 1, 1, 30))
        );
        let all = Window::parse("00:00-00:00").unwrap();
        assert_eq!(all.length(), DAY);
        for h in 0..24 {
            assert!(all.contains(t(2026, 12, 1, h, 17)));
        }
        let weekend = Window::parse("SAT,SUN 00:00-00:00").unwrap();
        assert!(weekend.contains(t(2026, 12, 5, 0, 0)));
        assert!(weekend.contains(t(2026, 12, 6, 23, 59)));
        assert!(!weekend.contains(t(2026, 12, 7, 0, 0)));
        assert_eq!(
            weekend.next_open(t(2026, 12, 7, 0, 0)),
            Some(t(2026, 12, 12, 0, 0))
        );
        let none = Window {
            days: Weekdays(0),
            ..w
        };
        assert_eq!(none.next_open(0), None);
    }

    #[test]
    fn next_open_is_open_and_earliest() {
        let mut rng = driveprobe_core::rng::Rng::new(3);
        for spec in [
            "MON-FRI 22:00-04:00",
            "SUN 03:00-03:30",
            "12:00-11:59",
            "TUE,THU 00:00-00:00",
        ] {
            let w = Window::parse(spec).unwrap();
            for _ in 0..300 {
                let t0 = 1_790_000_000 + rng.below(100_000_000) as i64;
                let o = w.next_open(t0).unwrap();
                assert!(o >= t0 && w.contains(o), "{spec}");
                let mut m = t0;
                while m < o {
                    assert!(!w.contains(m), "{spec}");
                    m += 60;
                }
            }
        }
    }

    #[test]
    fn bad_windows() {
        for bad in [
            "",
            "22:00",
            "24:00-01:00",
            "22:00-04:60",
            "XYZ 22:00-04:00",
            "a b c",
        ] {
            assert!(Window::parse(bad).is_err(), "{bad}");
        }
    }
}
