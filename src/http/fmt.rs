//! Text for the status page: HTML escaping, numbers with their units, times. Every
//! function takes any value (NaN, infinities, negative, huge) without panicking; what
//! cannot be shown sensibly is shown as `-`.

pub use crate::report::fmt::{esc, grouped, sig3};
use crate::schedule::cron::civil_from_days;

/// What the page shows for an unknown or nonsensical value.
pub const NONE: &str = "-";

/// An optional string, escaped, or `-`.
pub fn opt(s: Option<&str>) -> String {
    match s.map(str::trim) {
        Some(s) if !s.is_empty() => esc(s),
        _ => NONE.to_string(),
    }
}

/// A count with thousands separators: `1,234,567`.
pub fn count(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A latency in seconds, in the unit that suits it: `850 ns`, `203 µs`, `2.62 ms`, `1.20 s`.
pub fn latency(seconds: f64) -> String {
    if !seconds.is_finite() || seconds < 0.0 {
        return NONE.to_string();
    }
    crate::report::fmt::latency(seconds * 1e9)
}

/// Bytes in decimal units, as datasheets give them: `400 GB`, `1.20 TB`.
pub fn bytes(b: f64) -> String {
    if !b.is_finite() || b < 0.0 {
        return NONE.to_string();
    }
    const UNITS: [(f64, &str); 6] = [
        (1e18, "EB"),
        (1e15, "PB"),
        (1e12, "TB"),
        (1e9, "GB"),
        (1e6, "MB"),
        (1e3, "kB"),
    ];
    for (m, u) in UNITS {
        if b >= m * 0.9995 {
            return format!("{} {u}", sig3(b / m));
        }
    }
    format!("{} B", grouped(b, 0))
}

/// A share (0..1, possibly beyond) as a percentage: `10%`, `12.5%`.
pub fn percent(share: f64) -> String {
    if !share.is_finite() {
        return NONE.to_string();
    }
    let p = share * 100.0;
    if p.abs() >= 99.95 || (p - p.round()).abs() < 0.05 {
        format!("{}%", grouped(p, 0))
    } else {
        format!("{p:.1}%")
    }
}

/// Unix seconds in the range a calendar date is shown for (1970 to 9999).
fn in_range(unix_seconds: f64) -> Option<i64> {
    const YEAR_10000: f64 = 253_402_300_800.0;
    if unix_seconds.is_finite() && unix_seconds > 0.0 && unix_seconds < YEAR_10000 {
        Some(unix_seconds.floor() as i64)
    } else {
        None
    }
}

/// A Unix time as a UTC date and time: `2026-03-01 14:02:33 UTC`.
pub fn utc(unix_seconds: f64) -> String {
    let Some(secs) = in_range(unix_seconds) else {
        return NONE.to_string();
    };
    let (y, m, d) = civil_from_days(secs.div_euclid(86_400));
    let tod = secs.rem_euclid(86_400);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        tod / 3600,
        (tod % 3600) / 60,
        tod % 60
    )
}

/// A Unix time as a UTC date: `2026-03-01`.
pub fn date(unix_seconds: f64) -> String {
    let Some(secs) = in_range(unix_seconds) else {
        return NONE.to_string();
    };
    let (y, m, d) = civil_from_days(secs.div_euclid(86_400));
    format!("{y:04}-{m:02}-{d:02}")
}

/// A span of time, coarse: `45 s`, `12 min`, `3.5 h`, `12 d`.
pub fn span(seconds: f64) -> String {
    if !seconds.is_finite() || seconds < 0.0 {
        return NONE.to_string();
    }
    if seconds < 90.0 {
        format!("{} s", seconds.round())
    } else if seconds < 90.0 * 60.0 {
        format!("{} min", (seconds / 60.0).round())
    } else if seconds < 48.0 * 3600.0 {
        format!("{} h", sig3(seconds / 3600.0))
    } else {
        format!("{} d", grouped(seconds / 86_400.0, 0))
    }
}

/// How far `t` is from `now`: `12 s ago`, `in 3.0 h`.
pub fn relative(t: f64, now: f64) -> String {
    if in_range(t).is_none() || !now.is_finite() {
        return NONE.to_string();
    }
    let d = now - t;
    if d >= 0.0 {
        format!("{} ago", span(d))
    } else {
        format!("in {}", span(-d))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup_and_quotes() {
        assert_eq!(
            esc(r#"<script>"a" & 'b'</script>"#),
            "&lt;script&gt;&quot;a&quot; &amp; &#39;b&#39;&lt;/script&gt;"
        );
        assert_eq!(opt(None), "-");
        assert_eq!(opt(Some("  ")), "-");
        assert_eq!(opt(Some("<x>")), "&lt;x&gt;");
    }

    #[test]
    fn numbers_with_units() {
        assert_eq!(count(0), "0");
        assert_eq!(count(1_234_567), "1,234,567");
        assert_eq!(count(u64::MAX), "18,446,744,073,709,551,615");
        assert_eq!(latency(120e-6), "120 µs");
        assert_eq!(latency(2.626e-3), "2.63 ms");
        assert_eq!(latency(850e-9), "850 ns");
        assert_eq!(latency(1.2), "1.20 s");
        assert_eq!(bytes(400e9), "400 GB");
        assert_eq!(bytes(1.2e12), "1.20 TB");
        assert_eq!(bytes(12.0), "12 B");
        assert_eq!(percent(0.125), "12.5%");
        assert_eq!(percent(0.1), "10%");
        assert_eq!(percent(2.55), "255%");
        assert_eq!(utc(1_700_000_000.0), "2023-11-14 22:13:20 UTC");
        assert_eq!(date(1_700_000_000.0), "2023-11-14");
        assert_eq!(relative(100.0, 145.0), "45 s ago");
        assert_eq!(relative(3600.0 * 5.0, 3600.0), "in 4.00 h");
    }

    #[test]
    fn nonsense_never_panics() {
        for v in [
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            -1.0,
            0.0,
            f64::MAX,
            f64::MIN,
            1e300,
            f64::MIN_POSITIVE,
        ] {
            let _ = (grouped(v, 2), sig3(v), latency(v), bytes(v), percent(v));
            let _ = (utc(v), date(v), span(v), relative(v, 1e9), relative(1e9, v));
        }
        assert_eq!(utc(f64::MAX), "-");
        assert_eq!(latency(f64::NAN), "-");
    }
}
