//! Parsing of the units a storage engineer types: sizes (`4k`, `4KiB`, `3.5PB`, `1g`),
//! durations (`10`, `10s`, `500ms`, `2m`, `1h`) and percentages (`25%`).
//!
//! Size suffixes follow fio: `k`, `m`, `g`, `t`, `p` and their `KiB`-style spellings are
//! powers of 1024; the SI spellings with a `B` (`KB`, `MB`, `GB`, `TB`, `PB`) are powers
//! of 1000, as drive datasheets use them (a "3.5PB" TBW rating is 3.5e15 bytes).

use std::time::Duration;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UnitError {
    #[error("'{0}' is not a size: write a number with an optional unit, such as 4096, 4k, 4KiB, 1G or 3.5PB")]
    Size(String),
    #[error("'{0}' is not a duration: write a number of seconds or a number with a unit, such as 10, 10s, 500ms, 2m or 1h")]
    Duration(String),
    #[error("'{0}' is not a percentage: write a number from 0 to 100 followed by %, such as 25%")]
    Percent(String),
    #[error("'{0}' has no unit: a datasheet rating needs one, such as 600TB or 3.5PB written, or 3.2GB per second (TB, PB, GB, MB, KB are powers of 1000; TiB, PiB, GiB or t, p, g are powers of 1024; B is bytes)")]
    NoUnit(String),
    #[error("'{0}' is not a rating: write a number and its unit as the datasheet gives it, such as 600TB, 3.5PB or 3.2GB (TB, PB, GB, MB, KB are powers of 1000; TiB, PiB, GiB are powers of 1024; units are case-sensitive)")]
    Rating(String),
    #[error("'{0}' is a rating of nothing: give the datasheet's figure, or leave the rating out")]
    Zero(String),
}

/// What a datasheet rating measures, which sets the least figure that can be meant in
/// bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rating {
    /// Bytes written over the drive's life (TBW): the smallest drives sold are rated for
    /// tens of TB, so a bare figure under 1 TB was meant in TB.
    Written,
    /// Bytes per second (sequential bandwidth): nothing sold moves under 1 MB/s, so a bare
    /// figure under that was meant in MB/s or GB/s.
    PerSecond,
}

impl Rating {
    /// The least bare number taken as bytes.
    pub fn least_bare_bytes(self) -> u64 {
        match self {
            Rating::Written => 1_000_000_000_000,
            Rating::PerSecond => 1_000_000,
        }
    }
}

/// Parses a datasheet rating in bytes (rated TBW, a rated bandwidth per second). A rating
/// carries its unit (`600TB`, `3.5PB`, `3.2GB`); a bare `150` would be 150 bytes, which no
/// datasheet means (the user meant TB and would get a share used of billions of percent),
/// so it is refused. A bare figure that is a plausible byte count (at least
/// [`Rating::least_bare_bytes`]) is taken as bytes: configs written before units were
/// required gave `rated_tbw_bytes` in bytes, as its name says. A rating of 0 is refused.
pub fn parse_rated_size(text: &str, kind: Rating) -> Result<u64, UnitError> {
    let t = text.trim();
    let bare = !t.is_empty() && t.chars().all(|c| c.is_ascii_digit() || c == '.');
    let v = match parse_size(t) {
        Ok(v) => v,
        Err(_) if bare => return Err(UnitError::NoUnit(t.to_string())),
        Err(_) => return Err(UnitError::Rating(t.to_string())),
    };
    if bare && v < kind.least_bare_bytes() {
        return Err(UnitError::NoUnit(t.to_string()));
    }
    if v == 0 {
        return Err(UnitError::Zero(t.to_string()));
    }
    Ok(v)
}

/// Parses a size in bytes. Fractions are allowed with a unit (`1.5G`) and must come out
/// to a whole number of bytes.
pub fn parse_size(text: &str) -> Result<u64, UnitError> {
    let err = || UnitError::Size(text.to_string());
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    if num.is_empty() || num.starts_with('.') && num.len() == 1 {
        return Err(err());
    }
    let mult: u64 = match unit.trim() {
        "" | "b" | "B" => 1,
        "k" | "K" | "KiB" | "kiB" | "Ki" | "ki" => 1 << 10,
        "m" | "M" | "MiB" | "Mi" => 1 << 20,
        "g" | "G" | "GiB" | "Gi" => 1 << 30,
        "t" | "T" | "TiB" | "Ti" => 1 << 40,
        "p" | "P" | "PiB" | "Pi" => 1 << 50,
        "KB" | "kB" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        "TB" => 1_000_000_000_000,
        "PB" => 1_000_000_000_000_000,
        _ => return Err(err()),
    };
    if let Some((whole, frac)) = num.split_once('.') {
        if frac.contains('.') || (whole.is_empty() && frac.is_empty()) {
            return Err(err());
        }
        // Exact decimal arithmetic: whole*mult + frac*mult/10^len.
        let whole: u128 = if whole.is_empty() {
            0
        } else {
            whole.parse().map_err(|_| err())?
        };
        let scale = 10u128.checked_pow(frac.len() as u32).ok_or_else(err)?;
        let frac_v: u128 = if frac.is_empty() {
            0
        } else {
            frac.parse().map_err(|_| err())?
        };
        let mult = mult as u128;
        let frac_bytes = frac_v * mult;
        if frac_bytes % scale != 0 {
            return Err(err());
        }
        let total = whole
            .checked_mul(mult)
            .and_then(|w| w.checked_add(frac_bytes / scale))
            .ok_or_else(err)?;
        u64::try_from(total).map_err(|_| err())
    } else {
        let n: u64 = num.parse().map_err(|_| err())?;
        n.checked_mul(mult).ok_or_else(err)
    }
}

/// Parses a duration; a bare number is seconds (fio's habit).
pub fn parse_duration(text: &str) -> Result<Duration, UnitError> {
    let err = || UnitError::Duration(text.to_string());
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let v: f64 = num.parse().map_err(|_| err())?;
    if !v.is_finite() || v < 0.0 {
        return Err(err());
    }
    let secs = match unit.trim() {
        "" | "s" | "sec" => v,
        "ms" => v / 1e3,
        "us" => v / 1e6,
        "m" | "min" => v * 60.0,
        "h" => v * 3600.0,
        "d" => v * 86400.0,
        _ => return Err(err()),
    };
    Duration::try_from_secs_f64(secs).map_err(|_| err())
}

/// Parses `25%` (or `25`) into a fraction 0.0..=1.0.
pub fn parse_percent(text: &str) -> Result<f64, UnitError> {
    let err = || UnitError::Percent(text.to_string());
    let t = text.trim();
    let t = t.strip_suffix('%').unwrap_or(t);
    let v: f64 = t.trim().parse().map_err(|_| err())?;
    if !(0.0..=100.0).contains(&v) {
        return Err(err());
    }
    Ok(v / 100.0)
}

/// Formats a byte count the way fio prints block sizes: `4k`, `128k`, `1m`, `512`.
pub fn format_size(bytes: u64) -> String {
    const UNITS: [(u64, &str); 5] = [
        (1 << 50, "p"),
        (1 << 40, "t"),
        (1 << 30, "g"),
        (1 << 20, "m"),
        (1 << 10, "k"),
    ];
    for (m, s) in UNITS {
        if bytes >= m && bytes % m == 0 {
            return format!("{}{}", bytes / m, s);
        }
    }
    bytes.to_string()
}

/// A count with its noun, singular for one: `1 drive`, `2 drives`, `1 pass` (`many` is the
/// plural, for nouns that do not just take an `s`).
pub fn count(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_agree_with_their_nouns() {
        assert_eq!(count(0, "drive", "drives"), "0 drives");
        assert_eq!(count(1, "drive", "drives"), "1 drive");
        assert_eq!(count(2, "pass", "passes"), "2 passes");
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("4k").unwrap(), 4096);
        assert_eq!(parse_size("4KiB").unwrap(), 4096);
        assert_eq!(parse_size("1G").unwrap(), 1 << 30);
        assert_eq!(parse_size("1.5G").unwrap(), 3 << 29);
        assert_eq!(parse_size("3.5PB").unwrap(), 3_500_000_000_000_000);
        assert_eq!(parse_size("512").unwrap(), 512);
        assert_eq!(parse_size(" 8 KiB ").unwrap(), 8192);
        for bad in [
            "",
            "k",
            "4x",
            "-4k",
            "1.2.3k",
            "0.3",
            "99999999999999999999",
            ".",
        ] {
            assert!(parse_size(bad).is_err(), "{bad} should be refused");
        }
    }

    #[test]
    fn ratings_need_a_unit() {
        let w = Rating::Written;
        assert_eq!(parse_rated_size("600TB", w).unwrap(), 600_000_000_000_000);
        assert_eq!(parse_rated_size("1PiB", w).unwrap(), 1 << 50);
        assert_eq!(parse_rated_size("3.5PB", w).unwrap(), 3_500_000_000_000_000);
        for bare in ["150", "600", " 1.5 ", "0", "999999999999"] {
            let e = parse_rated_size(bare, w).unwrap_err().to_string();
            assert!(e.contains("has no unit") && e.contains("600TB"), "{e}");
        }
        // A bandwidth of 3200 bytes a second was meant in MB/s.
        assert!(matches!(
            parse_rated_size("3200", Rating::PerSecond),
            Err(UnitError::NoUnit(_))
        ));
        for bad in ["5x", "600tb", "600 terabytes"] {
            let e = parse_rated_size(bad, w).unwrap_err();
            assert!(matches!(e, UnitError::Rating(_)), "{bad}: {e}");
            assert!(e.to_string().contains("case-sensitive"), "{e}");
        }
        for zero in ["0TB", "0.0PB", "0B"] {
            assert!(
                matches!(parse_rated_size(zero, w), Err(UnitError::Zero(_))),
                "{zero}"
            );
        }
    }

    /// Configs written before units were required gave `rated_tbw_bytes` in bytes, as its
    /// name says: a bare figure that is a plausible rating still reads as bytes.
    #[test]
    fn a_plausible_bare_rating_is_bytes() {
        assert_eq!(
            parse_rated_size("600000000000000", Rating::Written).unwrap(),
            600_000_000_000_000
        );
        assert_eq!(
            parse_rated_size("3200000000", Rating::PerSecond).unwrap(),
            3_200_000_000
        );
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("10").unwrap(), Duration::from_secs(10));
        assert_eq!(parse_duration("500ms").unwrap(), Duration::from_millis(500));
        assert_eq!(parse_duration("2m").unwrap(), Duration::from_secs(120));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        for bad in ["", "s", "10y", "-1"] {
            assert!(parse_duration(bad).is_err(), "{bad} should be refused");
        }
    }

    #[test]
    fn percents() {
        assert_eq!(parse_percent("25%").unwrap(), 0.25);
        assert_eq!(parse_percent("100").unwrap(), 1.0);
        assert!(parse_percent("101%").is_err());
        assert!(parse_percent("x%").is_err());
    }

    #[test]
    fn format() {
        assert_eq!(format_size(4096), "4k");
        assert_eq!(format_size(512), "512");
        assert_eq!(format_size(1 << 20), "1m");
        assert_eq!(format_size(6144), "6k");
    }
}
