//! Text for the page: HTML escaping, numbers with their units, dates.

/// Escapes text for HTML and SVG (element content and quoted attribute values alike).
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A number rounded to `decimals` places with thousands separators: `98,024`, `1,150.5`.
pub fn grouped(v: f64, decimals: usize) -> String {
    if !v.is_finite() {
        return "-".to_string();
    }
    let text = format!("{:.*}", decimals, v.abs());
    let (int, frac) = match text.split_once('.') {
        Some((i, f)) => (i, Some(f)),
        None => (text.as_str(), None),
    };
    let mut out = String::new();
    let negative = v < 0.0 && text.chars().any(|c| c.is_ascii_digit() && c != '0');
    if negative {
        out.push('-');
    }
    let digits = int.len();
    for (i, c) in int.chars().enumerate() {
        if i > 0 && (digits - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if let Some(f) = frac {
        out.push('.');
        out.push_str(f);
    }
    out
}

/// Three significant figures (whole numbers from 100 up): `2.62`, `26.2`, `262`, `1,150`.
pub fn sig3(v: f64) -> String {
    let a = v.abs();
    if a >= 99.95 {
        grouped(v, 0)
    } else if a >= 9.995 {
        grouped(v, 1)
    } else {
        grouped(v, 2)
    }
}

/// IOPS as a whole number: `98,024`.
pub fn iops(v: f64) -> String {
    grouped(v, 0)
}

/// A latency given in nanoseconds, in the unit that suits it: `850 ns`, `203 µs`, `2.62 ms`.
pub fn latency(ns: f64) -> String {
    if !ns.is_finite() {
        return "-".to_string();
    }
    let a = ns.abs();
    if a < 999.5 {
        format!("{} ns", grouped(ns, 0))
    } else if a < 999_500.0 {
        format!("{} µs", sig3(ns / 1e3))
    } else if a < 999_500_000.0 {
        format!("{} ms", sig3(ns / 1e6))
    } else {
        format!("{} s", sig3(ns / 1e9))
    }
}

/// Bytes in decimal units as datasheets give them: `400 GB`, `1.20 TB`.
pub fn bytes(b: f64) -> String {
    if !b.is_finite() {
        return "-".to_string();
    }
    const UNITS: [(f64, &str); 5] = [
        (1e15, "PB"),
        (1e12, "TB"),
        (1e9, "GB"),
        (1e6, "MB"),
        (1e3, "kB"),
    ];
    for (m, u) in UNITS {
        if b.abs() >= m * 0.9995 {
            return format!("{} {u}", sig3(b / m));
        }
    }
    format!("{} B", grouped(b, 0))
}

/// A size in the units it was most likely given in: binary (`256 MiB`, `1.50 GiB`) when it
/// is a whole number of MiB (or of KiB, under 1 MiB), as `256m` or `1g` on the command
/// line make it; decimal otherwise, as datasheets give capacities (`400 GB`).
pub fn size(b: u64) -> String {
    const MIB: u64 = 1 << 20;
    const KIB: u64 = 1 << 10;
    let binary = b > 0 && (b % MIB == 0 || (b < MIB && b % KIB == 0));
    if !binary {
        return bytes(b as f64);
    }
    const UNITS: [(u64, &str); 5] = [
        (1 << 50, "PiB"),
        (1 << 40, "TiB"),
        (1 << 30, "GiB"),
        (MIB, "MiB"),
        (KIB, "KiB"),
    ];
    for (m, u) in UNITS {
        if b >= m {
            let v = b as f64 / m as f64;
            let text = if b % m == 0 { grouped(v, 0) } else { sig3(v) };
            return format!("{text} {u}");
        }
    }
    format!("{b} B")
}

/// A rate in bytes per second, decimal: `2.59 GB/s`, `870 MB/s`.
pub fn bandwidth(bps: f64) -> String {
    format!("{}/s", bytes(bps))
}

/// A duration: `12.5 s`, `5 min 30 s`, `2 h 05 min`.
pub fn duration(seconds: f64) -> String {
    if !seconds.is_finite() || seconds < 0.0 {
        return "-".to_string();
    }
    if seconds < 60.0 {
        return format!("{} s", sig3(seconds));
    }
    let s = seconds.round() as u64;
    if s < 3600 {
        format!("{} min {:02} s", s / 60, s % 60)
    } else {
        format!("{} h {:02} min", s / 3600, (s % 3600) / 60)
    }
}

/// A share as a percentage: `10%`, `12.5%`.
pub fn percent(share: f64) -> String {
    let p = share * 100.0;
    if (p - p.round()).abs() < 0.05 {
        format!("{}%", p.round())
    } else {
        format!("{p:.1}%")
    }
}

/// A Unix time as a UTC date and time: `2025-03-01 14:02:33 UTC`.
pub fn utc(unix_seconds: f64) -> String {
    if !unix_seconds.is_finite() || unix_seconds <= 0.0 {
        return "-".to_string();
    }
    let secs = unix_seconds.floor() as i64;
    let (year, month, day) = crate::schedule::cron::civil_from_days(secs.div_euclid(86_400));
    let tod = secs.rem_euclid(86_400);
    format!(
        "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02} UTC",
        tod / 3600,
        (tod % 3600) / 60,
        tod % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup() {
        assert_eq!(
            esc(r#"<script>"a" & 'b'</script>"#),
            "&lt;script&gt;&quot;a&quot; &amp; &#39;b&#39;&lt;/script&gt;"
        );
    }

    #[test]
    fn numbers() {
        assert_eq!(grouped(98_024.4, 0), "98,024");
        assert_eq!(grouped(1_234_567.0, 0), "1,234,567");
        assert_eq!(grouped(-1500.0, 1), "-1,500.0");
        assert_eq!(grouped(999.0, 0), "999");
        assert_eq!(grouped(-0.001, 0), "0");
        assert_eq!(iops(149_697.0), "149,697");
        assert_eq!(sig3(2.6234), "2.62");
        assert_eq!(sig3(26.234), "26.2");
        assert_eq!(sig3(1150.2), "1,150");
    }

    #[test]
    fn units() {
        assert_eq!(latency(850.0), "850 ns");
        assert_eq!(latency(203_200.0), "203 µs");
        assert_eq!(latency(2_620_000.0), "2.62 ms");
        assert_eq!(latency(383_000_000.0), "383 ms");
        assert_eq!(latency(1_500_000_000.0), "1.50 s");
        assert_eq!(bytes(400e9), "400 GB");
        assert_eq!(bytes(1.2e12), "1.20 TB");
        assert_eq!(bytes(512.0), "512 B");
        // Sizes as given: 256m is 256 MiB, not 268 MB; a datasheet capacity stays decimal.
        assert_eq!(size(256 << 20), "256 MiB");
        assert_eq!(size(1 << 30), "1 GiB");
        assert_eq!(size(3 << 29), "1.50 GiB");
        assert_eq!(size(4096), "4 KiB");
        assert_eq!(size(400_000_000_000), "400 GB");
        assert_eq!(size(480_103_981_056), "480 GB");
        assert_eq!(size(512), "512 B");
        assert_eq!(size(0), "0 B");
        assert_eq!(bandwidth(2.59e9), "2.59 GB/s");
        assert_eq!(bandwidth(870e6), "870 MB/s");
        assert_eq!(duration(12.5), "12.5 s");
        assert_eq!(duration(330.0), "5 min 30 s");
        assert_eq!(duration(7500.0), "2 h 05 min");
        assert_eq!(percent(0.1), "10%");
        assert_eq!(percent(1.2), "120%");
        assert_eq!(percent(0.125), "12.5%");
    }

    #[test]
    fn dates() {
        assert_eq!(utc(0.5), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc(951_782_400.0), "2000-02-29 00:00:00 UTC");
        assert_eq!(utc(1_740_837_753.0), "2025-03-01 14:02:33 UTC");
    }
}
