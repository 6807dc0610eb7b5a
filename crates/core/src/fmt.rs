//! Text for people: HTML escaping, numbers with their units, dates and spans, for the
//! report, the status page, the status and the logs (one module, so a figure reads the
//! same everywhere). Every function takes any value (NaN, infinities, negative, huge)
//! without panicking; what cannot be shown sensibly is shown as [`NONE`].

/// What is shown for an unknown or nonsensical value.
pub const NONE: &str = "-";

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

/// The most bytes kept of a string a drive (or its kernel driver, or smartctl about it)
/// reports: a model, serial, firmware, WWN, vendor, attribute name, smartctl message. The
/// longest real ones are well under it (ATA and NVMe models 40 bytes, serials 20,
/// firmware 8; smartctl's messages about a hundred); a longer one is cut, ending in `…`,
/// so that a drive that reports a megabyte cannot make every scrape, page and log line
/// that names it a megabyte long.
pub const MAX_DRIVE_TEXT_BYTES: usize = 128;

/// `s` as one line of plain text: every control character (C0 such as NUL, BEL, ESC, CR
/// and LF; DEL; C1) and every bidirectional formatting character (which can make a
/// terminal or a page show text in another order than it is) as a space. A newline in a
/// drive's model can then not forge a line of output, nor an escape sequence drive a
/// terminal.
pub fn one_line(s: &str) -> std::borrow::Cow<'_, str> {
    let bad = |c: char| {
        c.is_control()
            || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
    };
    if s.chars().any(bad) {
        s.chars()
            .map(|c| if bad(c) { ' ' } else { c })
            .collect::<String>()
            .into()
    } else {
        s.into()
    }
}

/// A string from a drive as driveprobe keeps it, wherever it enters (sysfs, udev,
/// smartctl's JSON, NVMe identify data): [`one_line`], trimmed, and at most
/// [`MAX_DRIVE_TEXT_BYTES`] (cut on a character boundary, ending in `…`); `None` when
/// nothing is left. It is idempotent, so a surface may apply it again.
pub fn drive_text(s: &str) -> Option<String> {
    // Only the first bytes can be kept: look no further (a megabyte costs no more).
    let mut end = s.len().min(MAX_DRIVE_TEXT_BYTES * 4);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    let clean = one_line(&s[..end]);
    let t = clean.trim();
    if t.is_empty() {
        return None;
    }
    if t.len() <= MAX_DRIVE_TEXT_BYTES {
        return Some(t.to_string());
    }
    const CUT: &str = "…";
    let mut keep = MAX_DRIVE_TEXT_BYTES - CUT.len();
    while !t.is_char_boundary(keep) {
        keep -= 1;
    }
    Some(format!("{}{CUT}", t[..keep].trim_end()))
}

/// A number rounded to `decimals` places with thousands separators: `98,024`, `1,150.5`.
pub fn grouped(v: f64, decimals: usize) -> String {
    if !v.is_finite() {
        return NONE.to_string();
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
        return NONE.to_string();
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

/// Bytes in decimal units as datasheets give them: `400 GB`, `1.20 TB`; a negative
/// figure keeps its sign.
pub fn bytes(b: f64) -> String {
    if !b.is_finite() {
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
        return NONE.to_string();
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
    format!(
        "{} {} UTC",
        crate::calendar::ymd(secs),
        crate::calendar::hms(secs)
    )
}

/// A Unix time as a UTC date: `2026-03-01`.
pub fn date(unix_seconds: f64) -> String {
    let Some(secs) = in_range(unix_seconds) else {
        return NONE.to_string();
    };
    crate::calendar::ymd(secs)
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

/// A latency in seconds, in the unit that suits it: `850 ns`, `203 µs`, `2.62 ms`,
/// `1.20 s`; `-` for a negative one. [`latency`] takes nanoseconds.
pub fn latency_secs(seconds: f64) -> String {
    if !seconds.is_finite() || seconds < 0.0 {
        return NONE.to_string();
    }
    latency(seconds * 1e9)
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

#[cfg(test)]
mod drive_text_tests {
    use super::*;

    #[test]
    fn control_and_bidi_characters_become_spaces() {
        assert_eq!(
            one_line("a\nb\x1b[31mc\x07d\0e\r\u{9b}f\u{202e}g"),
            "a b [31mc d e  f g"
        );
        assert!(matches!(
            one_line("plain ünïcode"),
            std::borrow::Cow::Borrowed(_)
        ));
        assert_eq!(
            drive_text(" SAMSUNG\nverdict: OK\x1b]0;x\x07 ").as_deref(),
            Some("SAMSUNG verdict: OK ]0;x")
        );
        assert_eq!(drive_text(" \n\0 "), None);
        assert_eq!(drive_text("").as_deref(), None);
    }

    #[test]
    fn a_long_string_is_cut_on_a_character_boundary() {
        let exact = "m".repeat(MAX_DRIVE_TEXT_BYTES);
        assert_eq!(drive_text(&exact).as_deref(), Some(exact.as_str()));
        for long in [
            "m".repeat(1 << 20),
            "é".repeat(1 << 19),
            format!("x{}", "€".repeat(1000)),
            format!("{}\n{}", "a".repeat(200), "b".repeat(200)),
        ] {
            let t = drive_text(&long).unwrap();
            assert!(t.len() <= MAX_DRIVE_TEXT_BYTES, "{} bytes", t.len());
            assert!(t.len() >= MAX_DRIVE_TEXT_BYTES - 6, "{} bytes", t.len());
            assert!(t.ends_with('…'), "{t}");
            assert_eq!(drive_text(&t).as_deref(), Some(t.as_str()), "idempotent");
        }
    }
}

#[cfg(test)]
mod page_tests {
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
        assert_eq!(latency_secs(120e-6), "120 µs");
        assert_eq!(latency_secs(2.626e-3), "2.63 ms");
        assert_eq!(latency_secs(850e-9), "850 ns");
        assert_eq!(latency_secs(1.2), "1.20 s");
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
            let _ = (
                grouped(v, 2),
                sig3(v),
                latency_secs(v),
                bytes(v),
                percent(v),
            );
            let _ = (utc(v), date(v), span(v), relative(v, 1e9), relative(1e9, v));
        }
        assert_eq!(utc(f64::MAX), "-");
        assert_eq!(latency_secs(f64::NAN), "-");
    }
}
