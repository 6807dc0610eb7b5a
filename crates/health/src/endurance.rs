//! Endurance: how much of a drive's rated life is used, how fast it is going, and when it
//! runs out. The relations are the ones drive datasheets use (docs/protocol.md,
//! "Datasheet figures"): rated bytes = TBW, or DWPD x capacity x 365 x warranty years;
//! annual failure rate = 1 - exp(-8766 h / MTBF).

use serde::{Deserialize, Serialize};

use super::model::{Assessment, HealthReport, Verdict};

pub const HOURS_PER_YEAR: f64 = 8766.0;
const DAY: f64 = 86_400.0;

/// A drive's rating, from its datasheet (config or flags). Everything optional.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Rating {
    /// Terabytes written, in bytes.
    pub tbw_bytes: Option<f64>,
    /// Drive writes per day over the warranty.
    pub dwpd: Option<f64>,
    pub warranty_years: Option<f64>,
    pub mtbf_hours: Option<f64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Basis {
    /// The drive's own percentage-used estimate.
    Vendor,
    /// Host bytes written against the rated bytes.
    HostWrites,
    /// Lifetime averages from one sample (power-on time).
    Lifetime,
    /// The history of samples the daemon kept.
    History,
}

/// One earlier reading, for rates from history.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    pub unix_seconds: f64,
    pub host_written_bytes: u128,
    pub percentage_used_ratio: Option<f64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Endurance {
    pub rated_bytes: Option<f64>,
    pub rated_drive_writes_per_day: Option<f64>,
    /// The vendor's percentage used, 0..1+.
    pub vendor_used_ratio: Option<f64>,
    /// Host bytes written / rated bytes.
    pub host_written_ratio: Option<f64>,
    /// The larger of the two: the share of rated endurance used.
    pub used_ratio: Option<f64>,
    pub used_basis: Option<Basis>,
    /// Drive writes per day observed.
    pub drive_writes_per_day: Option<f64>,
    pub rate_basis: Option<Basis>,
    pub remaining_bytes: Option<f64>,
    pub days_left: Option<f64>,
    pub projected_wearout_unix_seconds: Option<f64>,
    /// Media (NAND) bytes written / host bytes written.
    pub write_amplification: Option<f64>,
    /// 1 - exp(-8766 h / MTBF).
    pub annual_failure_rate: Option<f64>,
    /// Bytes driveprobe itself wrote to this drive, and their share of host writes.
    pub self_written_bytes: Option<u128>,
    pub self_written_share: Option<f64>,
    /// Why something is unknown.
    pub notes: Vec<String>,
}

impl Rating {
    /// Rated lifetime bytes: TBW, else DWPD x capacity x 365 x warranty years.
    pub fn rated_bytes(&self, capacity: Option<u64>) -> Option<f64> {
        if let Some(t) = self.tbw_bytes {
            return Some(t);
        }
        match (self.dwpd, capacity, self.warranty_years) {
            (Some(d), Some(c), Some(y)) => Some(d * c as f64 * 365.0 * y),
            _ => None,
        }
    }

    /// Rated drive writes per day: DWPD, else TBW / (capacity x 365 x warranty years).
    pub fn rated_dwpd(&self, capacity: Option<u64>) -> Option<f64> {
        if let Some(d) = self.dwpd {
            return Some(d);
        }
        match (self.tbw_bytes, capacity, self.warranty_years) {
            (Some(t), Some(c), Some(y)) if c > 0 && y > 0.0 => Some(t / (c as f64 * 365.0 * y)),
            _ => None,
        }
    }
}

/// Annual failure rate from a rated MTBF: 1 - exp(-8766 h / MTBF).
pub fn annual_failure_rate(mtbf_hours: f64) -> f64 {
    1.0 - (-HOURS_PER_YEAR / mtbf_hours).exp()
}

/// The endurance estimate for one report. `history` holds earlier samples of the same
/// drive, oldest first (empty for a one-shot reading); `self_written` the bytes
/// driveprobe wrote to it.
pub fn estimate(
    r: &HealthReport,
    rating: &Rating,
    now_unix: f64,
    history: &[Sample],
    self_written: Option<u128>,
) -> Endurance {
    let mut e = Endurance::default();
    let capacity = r.identity.capacity_bytes;
    e.rated_bytes = rating.rated_bytes(capacity);
    e.rated_drive_writes_per_day = rating.rated_dwpd(capacity);
    e.vendor_used_ratio = r.percentage_used_ratio;
    let written = r.host_written_bytes.map(|b| b as f64);
    if let (Some(w), Some(rated)) = (written, e.rated_bytes) {
        if rated > 0.0 {
            e.host_written_ratio = Some(w / rated);
            e.remaining_bytes = Some((rated - w).max(0.0));
        }
    }
    (e.used_ratio, e.used_basis) = match (e.vendor_used_ratio, e.host_written_ratio) {
        (Some(v), Some(h)) if h > v => (Some(h), Some(Basis::HostWrites)),
        (Some(v), _) => (Some(v), Some(Basis::Vendor)),
        (None, Some(h)) => (Some(h), Some(Basis::HostWrites)),
        (None, None) => (None, None),
    };
    if e.rated_bytes.is_none() {
        e.notes.push(
            "no rating: give the rated TBW, or DWPD with warranty years, to compare host writes with it"
                .into(),
        );
    }

    // Rates: from history when it spans at least a day, else lifetime averages.
    let first = history.first().filter(|s| now_unix - s.unix_seconds >= DAY);
    let (bytes_per_day, used_per_day) = match (first, r.host_written_bytes) {
        (Some(s), Some(w)) => {
            e.rate_basis = Some(Basis::History);
            let days = (now_unix - s.unix_seconds) / DAY;
            let bpd = w.saturating_sub(s.host_written_bytes) as f64 / days;
            let upd = match (r.percentage_used_ratio, s.percentage_used_ratio) {
                (Some(now), Some(then)) => Some((now - then).max(0.0) / days),
                _ => None,
            };
            (Some(bpd), upd)
        }
        _ => match r.power_on_seconds.filter(|&s| s > 0) {
            Some(pos) => {
                e.rate_basis = Some(Basis::Lifetime);
                let days = pos as f64 / DAY;
                (
                    written.map(|w| w / days),
                    r.percentage_used_ratio.map(|u| u / days),
                )
            }
            None => {
                e.notes
                    .push("no power-on time: the write rate cannot be estimated".into());
                (None, None)
            }
        },
    };
    if let (Some(bpd), Some(c)) = (bytes_per_day, capacity.filter(|&c| c > 0)) {
        e.drive_writes_per_day = Some(bpd / c as f64);
    }
    // Share of life used per day, on the same basis as `used_ratio`.
    let rate = match e.used_basis {
        Some(Basis::HostWrites) => match (bytes_per_day, e.rated_bytes) {
            (Some(b), Some(rated)) if rated > 0.0 => Some(b / rated),
            _ => None,
        },
        Some(Basis::Vendor) => used_per_day,
        _ => None,
    };
    if let (Some(used), Some(rate)) = (e.used_ratio, rate) {
        if used >= 1.0 {
            e.days_left = Some(0.0);
            // The date it was passed, at the same rate: in the past, and said so.
            let ago_days = if rate > 0.0 { (used - 1.0) / rate } else { 0.0 };
            let when = now_unix - ago_days * DAY;
            e.projected_wearout_unix_seconds = Some(when);
            e.notes.push(format!(
                "rated endurance is used up: {:.0}% used, passed about {:.0} days ago at the observed rate",
                used * 100.0,
                ago_days
            ));
        } else if rate > 0.0 {
            let days = (1.0 - used) / rate;
            e.days_left = Some(days);
            e.projected_wearout_unix_seconds = Some(now_unix + days * DAY);
        } else {
            e.notes
                .push("no measurable wear yet: no wear-out date can be projected".into());
        }
    }
    if let (Some(m), Some(h)) = (r.media_written_bytes, r.host_written_bytes) {
        if h > 0 {
            e.write_amplification = Some(m as f64 / h as f64);
        }
    }
    e.annual_failure_rate = rating
        .mtbf_hours
        .filter(|&m| m > 0.0)
        .map(annual_failure_rate);
    e.self_written_bytes = self_written;
    if let (Some(s), Some(h)) = (self_written, r.host_written_bytes) {
        if h > 0 {
            e.self_written_share = Some(s as f64 / h as f64);
        }
    }
    e
}

/// What the estimate adds to the verdict of the report alone ([`super::model::assess`]):
/// host writes at or past the rated endurance are a warning (the vendor's own figure is
/// already judged there), as is passing [`super::model::WEAR_WARNING_RATIO`] of it.
pub fn assess(e: &Endurance, a: &mut Assessment) {
    let (Some(h), Some(rated)) = (e.host_written_ratio, e.rated_bytes) else {
        return;
    };
    // Whole TB for a real rating; small ones (a test drive rated in GB) keep their
    // figure rather than read "0 TB".
    let tb = if rated >= 10e12 {
        format!("{:.0} TB", rated / 1e12)
    } else {
        format!("{} TB", rated / 1e12)
    };
    let reason = if h >= 1.0 {
        format!(
            "host writes are {:.0}% of the rated endurance ({tb}): past its rated life",
            h * 100.0
        )
    } else if h >= super::model::WEAR_WARNING_RATIO {
        format!(
            "host writes are {:.0}% of the rated endurance ({tb})",
            h * 100.0
        )
    } else {
        return;
    };
    if a.verdict != Verdict::Failing {
        if a.verdict != Verdict::Warning {
            // "Unknown"/"ok" reasons (no health data, standby) no longer explain the verdict.
            a.reasons.clear();
        }
        a.verdict = Verdict::Warning;
    }
    a.reasons.push(reason);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Identity;

    const TB: f64 = 1e12;

    #[test]
    fn datasheet_relations_from_the_protocol() {
        // SS200: 2.5 M h MTBF gives the 0.35% AFR its sheet states.
        assert!((annual_failure_rate(2_500_000.0) - 0.0035).abs() < 0.00005);
        // SSD800MM 400 GB: 18.3 PB over 5 years is about 25 DWPD.
        let r = Rating {
            tbw_bytes: Some(18.3e15),
            warranty_years: Some(5.0),
            ..Default::default()
        };
        let dwpd = r.rated_dwpd(Some(400_000_000_000)).unwrap();
        assert!((dwpd - 25.07).abs() < 0.01, "{dwpd}");
        // 3 DWPD x 800 GB x 365 x 5 = 4.38 PB.
        let r = Rating {
            dwpd: Some(3.0),
            warranty_years: Some(5.0),
            ..Default::default()
        };
        assert_eq!(r.rated_bytes(Some(800_000_000_000)), Some(4.38e15));
    }

    fn report(written_tb: f64, used_pct: u8, days_on: f64) -> HealthReport {
        HealthReport {
            identity: Identity {
                capacity_bytes: Some(1_000_000_000_000),
                ..Default::default()
            },
            host_written_bytes: Some((written_tb * TB) as u128),
            percentage_used_ratio: Some(used_pct as f64 / 100.0),
            power_on_seconds: Some((days_on * DAY) as u64),
            ..Default::default()
        }
    }

    #[test]
    fn host_writes_beat_an_optimistic_vendor_figure() {
        let rating = Rating {
            tbw_bytes: Some(600.0 * TB),
            warranty_years: Some(5.0),
            mtbf_hours: Some(2_000_000.0),
            ..Default::default()
        };
        // 300 TB written in 500 days: half the rating, while the vendor says 10%.
        let e = estimate(
            &report(300.0, 10, 500.0),
            &rating,
            1e9,
            &[],
            Some(3 * TB as u128),
        );
        assert_eq!(e.used_basis, Some(Basis::HostWrites));
        assert!((e.used_ratio.unwrap() - 0.5).abs() < 1e-12);
        assert!((e.drive_writes_per_day.unwrap() - 0.6).abs() < 1e-12);
        assert_eq!(e.remaining_bytes, Some(300.0 * TB));
        // 0.6 TB/day against 300 TB left: 500 days.
        assert!((e.days_left.unwrap() - 500.0).abs() < 1e-9);
        assert!((e.projected_wearout_unix_seconds.unwrap() - (1e9 + 500.0 * DAY)).abs() < 1e-3);
        assert!((e.self_written_share.unwrap() - 0.01).abs() < 1e-12);
        assert!(e.annual_failure_rate.unwrap() > 0.0043 && e.annual_failure_rate.unwrap() < 0.0044);
    }

    #[test]
    fn vendor_figure_without_a_rating() {
        let e = estimate(&report(10.0, 20, 400.0), &Rating::default(), 0.0, &[], None);
        assert_eq!(e.used_basis, Some(Basis::Vendor));
        assert_eq!(e.rated_bytes, None);
        assert_eq!(e.host_written_ratio, None);
        // 20% in 400 days: 80% left at 0.05%/day = 1600 days.
        assert!((e.days_left.unwrap() - 1600.0).abs() < 1e-6);
        assert!(!e.notes.is_empty());
    }

    #[test]
    fn history_gives_the_recent_rate() {
        let rating = Rating {
            tbw_bytes: Some(1000.0 * TB),
            ..Default::default()
        };
        let now = 100.0 * DAY;
        let hist = [Sample {
            unix_seconds: 90.0 * DAY,
            host_written_bytes: (400.0 * TB) as u128,
            percentage_used_ratio: Some(0.40),
        }];
        // 10 TB in the last 10 days (the lifetime average would be much higher).
        let e = estimate(&report(410.0, 41, 50.0), &rating, now, &hist, None);
        assert_eq!(e.rate_basis, Some(Basis::History));
        assert!((e.drive_writes_per_day.unwrap() - 1.0).abs() < 1e-9);
        assert!((e.days_left.unwrap() - 590.0).abs() < 1e-6);
    }

    #[test]
    fn worn_out_and_no_wear() {
        let rating = Rating {
            tbw_bytes: Some(100.0 * TB),
            ..Default::default()
        };
        let now = 1000.0 * DAY;
        let e = estimate(&report(150.0, 100, 10.0), &rating, now, &[], None);
        assert_eq!(e.days_left, Some(0.0));
        assert_eq!(e.remaining_bytes, Some(0.0));
        // 150 TB in 10 days against 100 TB: passed 100% after 6.67 days, 3.33 days ago.
        let at = e.projected_wearout_unix_seconds.unwrap();
        assert!((at - (now - 10.0 / 3.0 * DAY)).abs() < 1.0, "{at}");
        assert!(
            e.notes
                .iter()
                .any(|n| n.contains("used up") && n.contains("3 days ago")),
            "{:?}",
            e.notes
        );
        let e = estimate(&report(0.0, 0, 10.0), &rating, 5.0, &[], None);
        assert_eq!(e.days_left, None);
        assert_eq!(e.projected_wearout_unix_seconds, None);
        let blank = estimate(&HealthReport::default(), &rating, 0.0, &[], None);
        assert_eq!(blank.used_ratio, None);
        assert_eq!(blank.drive_writes_per_day, None);
    }

    /// Host writes past the rating are at least a warning, whatever the SMART data says
    /// (issue 17: "used 357435705002.7%", verdict OK).
    #[test]
    fn used_up_is_a_warning() {
        let rating = Rating {
            tbw_bytes: Some(100.0 * TB),
            ..Default::default()
        };
        let ok = || Assessment {
            verdict: Verdict::Ok,
            reasons: Vec::new(),
        };
        let e = estimate(&report(150.0, 10, 10.0), &rating, 0.0, &[], None);
        let mut a = ok();
        assess(&e, &mut a);
        assert_eq!(a.verdict, Verdict::Warning);
        assert!(
            a.reasons[0].contains("150% of the rated endurance (100 TB)"),
            "{:?}",
            a.reasons
        );
        // A small rating keeps its figure, never "(0 TB)".
        let small = Rating {
            tbw_bytes: Some(0.5 * TB),
            ..Default::default()
        };
        let e = estimate(&report(150.0, 10, 10.0), &small, 0.0, &[], None);
        let mut a = ok();
        assess(&e, &mut a);
        assert!(a.reasons[0].contains("(0.5 TB)"), "{:?}", a.reasons);
        let e = estimate(&report(85.0, 10, 10.0), &rating, 0.0, &[], None);
        let mut a = ok();
        assess(&e, &mut a);
        assert_eq!(a.verdict, Verdict::Warning);
        let e = estimate(&report(50.0, 10, 10.0), &rating, 0.0, &[], None);
        let mut a = ok();
        assess(&e, &mut a);
        assert_eq!(a, ok());
        let mut a = Assessment {
            verdict: Verdict::Failing,
            reasons: vec!["SMART FAILED".into()],
        };
        let e = estimate(&report(150.0, 10, 10.0), &rating, 0.0, &[], None);
        assess(&e, &mut a);
        assert_eq!(a.verdict, Verdict::Failing);
        assert_eq!(a.reasons.len(), 2);
    }
}
