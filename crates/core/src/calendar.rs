//! The calendar, in UTC: day numbers (days since 1970-01-01) to proleptic Gregorian
//! dates and back, weekdays, and the date and time texts every surface writes. Pure: no
//! clock is read here.

/// Seconds in a day (UTC has no leap seconds in Unix time).
pub const DAY: i64 = 86_400;

pub fn is_leap(y: i64) -> bool {
    y % 4 == 0 && (y % 100 != 0 || y % 400 == 0)
}

pub fn days_in_month(y: i64, m: u32) -> u32 {
    match m {
        2 if is_leap(y) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
pub fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = m as i64;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The date of a day number (days since 1970-01-01): (year, month 1-12, day 1-31).
pub fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// Weekday of a day number: 0 = Sunday .. 6 = Saturday (1970-01-01 was a Thursday).
pub fn weekday(day: i64) -> u32 {
    (day + 4).rem_euclid(7) as u32
}

/// `YYYY-MM-DD` of the UTC day containing Unix time `secs`.
pub fn ymd(secs: i64) -> String {
    let (y, m, d) = civil_from_days(secs.div_euclid(DAY));
    format!("{y:04}-{m:02}-{d:02}")
}

/// `HH:MM:SS` of Unix time `secs` in UTC.
pub fn hms(secs: i64) -> String {
    let tod = secs.rem_euclid(DAY);
    format!("{:02}:{:02}:{:02}", tod / 3600, (tod % 3600) / 60, tod % 60)
}

/// RFC 3339 in UTC to the millisecond: `2026-12-01T19:48:37.123Z`.
pub fn rfc3339_millis(secs: i64, millis: u32) -> String {
    format!("{}T{}.{millis:03}Z", ymd(secs), hms(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_round_trips() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
        assert_eq!(weekday(0), 4);
        for day in -800_000..800_000 {
            let (y, m, d) = civil_from_days(day);
            assert_eq!(days_from_civil(y, m, d), day);
            assert!(d >= 1 && d <= days_in_month(y, m));
        }
        assert_eq!(weekday(days_from_civil(2026, 11, 30)), 1); // a Monday
    }

    #[test]
    fn texts() {
        // 2026-12-01T19:48:37Z
        let t = days_from_civil(2026, 12, 1) * DAY + 19 * 3600 + 48 * 60 + 37;
        assert_eq!(ymd(t), "2026-12-01");
        assert_eq!(hms(t), "19:48:37");
        assert_eq!(rfc3339_millis(t, 5), "2026-12-01T19:48:37.005Z");
        // Before 1970: the day below, not toward zero.
        assert_eq!(ymd(-1), "1969-12-31");
        assert_eq!(hms(-1), "23:59:59");
    }
}
