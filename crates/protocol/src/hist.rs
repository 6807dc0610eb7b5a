//! The full latency histogram kept in result documents (docs/decisions/0010): the
//! engine's HDR histogram as a sparse list of its non-empty buckets, each named by the
//! highest latency it holds (delta-coded) with its count. Loading it back records every
//! count at its bucket's value into a histogram of the engine's bounds and precision,
//! which lands each in the bucket it came from: the histogram is the engine's, bucket for
//! bucket, so any percentile reads as the engine would have read it, and histograms of
//! several runs add up to that of one run over the union of their I/Os.

use hdrhistogram::Histogram;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::engine::stats::MAX_TRACKED_NS;

/// Samples wanted beyond a percentile for a figure at it to mean something: a run of
/// `n` I/Os supports percentile `p` when `n x (1 - p/100) >= SAMPLES_BEYOND`.
pub const SAMPLES_BEYOND: f64 = 10.0;

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum HistError {
    #[error(
        "latency histogram: {0} bucket value(s) but {1} count(s); the document was altered or cut"
    )]
    Lengths(usize, usize),
    #[error("latency histogram: {0} significant digits is not 1 to 5")]
    Digits(u8),
    #[error("latency histogram: a bucket value passes {MAX_TRACKED_NS} ns, beyond what the engine tracks")]
    Range,
    #[error("latency histogram: {0}")]
    Form(String),
}

/// One direction's latency histogram, in nanoseconds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct LatencyHist {
    /// Significant digits of the buckets: a bucket spans at most 10^-sig_digits of its
    /// value, and a percentile read from it is within that share above the exact one
    /// (3, the engine's: 0.1%; 2: 1%; 1: 10%, when the run kept fewer with
    /// `--hist-digits`). The tracked range is 1 ns to one hour, as the engine's. Merging
    /// histograms of different digits keeps the fewest.
    pub sig_digits: u8,
    /// The non-empty buckets in ascending order, each as the highest latency it holds
    /// (HDR's "highest equivalent value"), delta-coded: the first is that value in ns,
    /// each next one the difference from the one before.
    pub delta_ns: Vec<u64>,
    /// The I/O count of each bucket, in the order of `delta_ns`.
    pub counts: Vec<u64>,
}

fn empty(digits: u8) -> Result<Histogram<u64>, HistError> {
    if !(1..=5).contains(&digits) {
        return Err(HistError::Digits(digits));
    }
    Histogram::new_with_bounds(1, MAX_TRACKED_NS, digits).map_err(|_| HistError::Digits(digits))
}

impl LatencyHist {
    /// The sparse form of an engine histogram.
    pub fn from_histogram(h: &Histogram<u64>) -> LatencyHist {
        let mut delta_ns = Vec::new();
        let mut counts = Vec::new();
        let mut prev = 0u64;
        for v in h.iter_recorded() {
            let value = v.value_iterated_to();
            delta_ns.push(value - prev);
            counts.push(v.count_at_value());
            prev = value;
        }
        LatencyHist {
            sig_digits: h.sigfig(),
            delta_ns,
            counts,
        }
    }

    /// The histogram, bucket for bucket as the engine recorded it.
    pub fn to_histogram(&self) -> Result<Histogram<u64>, HistError> {
        if self.delta_ns.len() != self.counts.len() {
            return Err(HistError::Lengths(self.delta_ns.len(), self.counts.len()));
        }
        let mut h = empty(self.sig_digits)?;
        self.record_into(&mut h)?;
        Ok(h)
    }

    /// Records every listed bucket's count at its value into `h` (of these digits or
    /// fewer: HDR's buckets nest, so each lands in the bucket holding its own). Costs
    /// the listed buckets, never a dense histogram of this one's digits: a 5-digit
    /// histogram (27 MB dense) read into a 3-digit one (270 kB) costs only its list.
    fn record_into(&self, h: &mut Histogram<u64>) -> Result<(), HistError> {
        if self.delta_ns.len() != self.counts.len() {
            return Err(HistError::Lengths(self.delta_ns.len(), self.counts.len()));
        }
        if !(1..=5).contains(&self.sig_digits) {
            return Err(HistError::Digits(self.sig_digits));
        }
        let mut value = 0u64;
        for (&d, &c) in self.delta_ns.iter().zip(&self.counts) {
            value = value.checked_add(d).ok_or(HistError::Range)?;
            h.record_n(value.max(1), c).map_err(|_| HistError::Range)?;
        }
        Ok(())
    }

    /// The I/Os counted (at most u64::MAX: a document's counts cannot make it wrap).
    pub fn total(&self) -> u64 {
        self.counts.iter().fold(0u64, |a, &c| a.saturating_add(c))
    }

    /// The latency at percentile `p` (0-100): the highest value of the bucket it falls
    /// in, as the engine reads it (before the engine's clamp to the exact maximum).
    pub fn percentile_ns(&self, p: f64) -> Result<u64, HistError> {
        let h = self.to_histogram()?;
        Ok(if h.is_empty() {
            0
        } else {
            h.value_at_percentile(p)
        })
    }

    /// The union of several histograms: what one histogram fed every I/O of all of them
    /// holds. At the coarsest precision among them (the engine's is the same everywhere
    /// but for daemon canaries, which keep 2 digits).
    pub fn merge<'a>(
        hists: impl IntoIterator<Item = &'a LatencyHist>,
    ) -> Result<LatencyHist, HistError> {
        let hists: Vec<&LatencyHist> = hists.into_iter().collect();
        let digits = hists.iter().map(|h| h.sig_digits).min().unwrap_or(3);
        union_at(&hists, digits)
    }

    /// This histogram kept to `digits` significant digits (no finer than it is: a
    /// histogram of fewer digits than asked is returned as it is). HDR's buckets nest (each
    /// coarse bucket is a power-of-two run of whole finer ones), so every count moves to
    /// the coarse bucket holding its fine one: the result is what the engine would have
    /// recorded at `digits`, and a percentile read from it is within
    /// [`relative_precision`]`(digits)` above the exact one.
    pub fn coarsen(&self, digits: u8) -> Result<LatencyHist, HistError> {
        if digits >= self.sig_digits {
            self.to_histogram()?;
            return Ok(self.clone());
        }
        union_at(&[self], digits)
    }
}

/// The union of `hists` at `digits` significant digits (each no finer than its own):
/// one dense histogram of `digits`, and each histogram's listed buckets recorded into it.
fn union_at(hists: &[&LatencyHist], digits: u8) -> Result<LatencyHist, HistError> {
    let mut sum = empty(digits)?;
    for h in hists {
        h.record_into(&mut sum)?;
    }
    Ok(LatencyHist::from_histogram(&sum))
}

/// Keeps every latency histogram of a JSON document that is finer than `digits` to
/// `digits` (as [`coarsen_document`], but leaving the others, and any it cannot read,
/// as they are: a reader refuses those as before). What driveprobe writes is 3 digits at
/// most (the engine's); a document of 4 or 5 digits is coarsened before anything draws
/// it, at the cost of its listed buckets, so that every histogram a reader makes dense
/// is at most the engine's 270 kB, however many rounds there are. Returns how many it
/// coarsened.
pub fn coarsen_finer_than(doc: &mut serde_json::Value, digits: u8) -> usize {
    use serde_json::Value;
    let mut n = 0;
    match doc {
        Value::Object(map) => {
            for (k, v) in map.iter_mut() {
                let finer = v
                    .get("sig_digits")
                    .and_then(Value::as_u64)
                    .is_some_and(|d| d > u64::from(digits));
                if k.ends_with("_lat_hist") && finer {
                    let coarse = serde_json::from_value::<LatencyHist>(v.clone())
                        .ok()
                        .and_then(|h| h.coarsen(digits).ok())
                        .and_then(|c| serde_json::to_value(c).ok());
                    if let Some(c) = coarse {
                        *v = c;
                        n += 1;
                    }
                } else {
                    n += coarsen_finer_than(v, digits);
                }
            }
        }
        Value::Array(items) => {
            for v in items {
                n += coarsen_finer_than(v, digits);
            }
        }
        _ => {}
    }
    n
}

/// The significant digits a document's histograms may be kept to (`--hist-digits`,
/// `hist_digits` on a schedule): 3 is the engine's own, 2 and 1 coarser.
pub const KEPT_DIGITS: std::ops::RangeInclusive<u8> = 1..=3;

/// The relative precision of a histogram of `digits` significant digits: a percentile
/// read from it (its bucket's highest value) is at most this share above the exact one.
/// HDR gives each power of two at least 10^digits buckets, so a bucket spans at most
/// 10^-digits of its lowest value: 0.1% at 3 digits, 1% at 2, 10% at 1.
pub fn relative_precision(digits: u8) -> f64 {
    10f64.powi(-i32::from(digits))
}

/// Keeps every latency histogram of a JSON document (a result document, or bench's JSON:
/// each object under a key ending in `_lat_hist`, however deep) to `digits` significant
/// digits, in place; returns how many it coarsened. A document is walked as JSON so that
/// every phase kind's rounds (those of later kinds too) are reached the same way.
pub fn coarsen_document(doc: &mut serde_json::Value, digits: u8) -> Result<usize, HistError> {
    use serde_json::Value;
    let mut n = 0;
    match doc {
        Value::Object(map) => {
            for (k, v) in map.iter_mut() {
                if k.ends_with("_lat_hist") && v.is_object() {
                    let h: LatencyHist = serde_json::from_value(v.take())
                        .map_err(|e| HistError::Form(e.to_string()))?;
                    let c = h.coarsen(digits)?;
                    n += usize::from(c.sig_digits != h.sig_digits);
                    *v = serde_json::to_value(c).expect("a histogram serializes");
                } else {
                    n += coarsen_document(v, digits)?;
                }
            }
        }
        Value::Array(items) => {
            for v in items {
                n += coarsen_document(v, digits)?;
            }
        }
        _ => {}
    }
    Ok(n)
}

impl LatencyHist {
    /// The highest percentile this many I/Os support ([`SAMPLES_BEYOND`] beyond it), as
    /// a number of nines (2 for p99, 3 for p99.9); 0 below 100 I/Os.
    pub fn supported_nines(&self) -> f64 {
        supported_nines(self.total())
    }

    /// The exceedance (latency-percentile) curve: for each bucket, the share of I/Os
    /// below it as a number of nines (`-log10(1 - share)`) and the bucket's latency, a
    /// step each; the last step ends at the highest percentile the count resolves
    /// (`log10(total)`).
    pub fn exceedance(&self) -> Result<Vec<(f64, u64)>, HistError> {
        let h = self.to_histogram()?;
        let n = h.len();
        let mut out = Vec::new();
        if n == 0 {
            return Ok(out);
        }
        let top = (n as f64).log10();
        let mut below = 0u64;
        for v in h.iter_recorded() {
            let share = below as f64 / n as f64;
            out.push(((-(1.0 - share).log10()).min(top), v.value_iterated_to()));
            below += v.count_at_value();
        }
        if let Some(&(_, last)) = out.last() {
            out.push((top, last));
        }
        Ok(out)
    }
}

/// The nines a run of `n` I/Os supports with [`SAMPLES_BEYOND`] samples beyond.
pub fn supported_nines(n: u64) -> f64 {
    if n == 0 {
        return 0.0;
    }
    ((n as f64) / SAMPLES_BEYOND).log10().max(0.0)
}

/// The I/Os a run needs for percentile `p` (0-100) to have [`SAMPLES_BEYOND`] beyond it.
pub fn ios_needed(p: f64) -> u64 {
    let beyond = 1.0 - p / 100.0;
    if beyond <= 0.0 {
        return u64::MAX;
    }
    // 10 / 1e-6 is 1e7 less a rounding error, not 1e7 + 1: a hair off a whole number is it.
    let n = SAMPLES_BEYOND / beyond;
    let whole = n.round();
    if (n - whole).abs() <= 1e-6 * whole {
        whole as u64
    } else {
        n.ceil() as u64
    }
}

/// A percentile's name in the documents' key style: 99.9 -> `p99_9`.
pub fn percentile_name(p: f64) -> String {
    let s = format!("{p}");
    format!("p{}", s.replace('.', "_"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::stats::DirStats;

    fn values(seed: u64, n: usize, scale: f64) -> Vec<u64> {
        let mut rng = crate::rng::Rng::new(seed);
        (0..n)
            .map(|_| (scale * (1e4f64).powf(rng.unit_open0())) as u64)
            .collect()
    }

    #[test]
    fn round_trips_bucket_for_bucket() {
        let mut s = DirStats::new();
        for v in values(1, 50_000, 2_000.0) {
            s.record(v, 4096);
        }
        let h = LatencyHist::from_histogram(s.histogram());
        let json = serde_json::to_string(&h).unwrap();
        let back: LatencyHist = serde_json::from_str(&json).unwrap();
        assert_eq!(back.to_histogram().unwrap(), *s.histogram());
        assert_eq!(back.total(), 50_000);
        for p in [50.0, 99.0, 99.9, 99.99, 100.0] {
            assert_eq!(
                back.percentile_ns(p).unwrap(),
                s.histogram().value_at_percentile(p)
            );
        }
    }

    /// Two runs' figures, of latencies `a` and `b`, and those of their union.
    fn two_runs(a: &[u64], b: &[u64]) -> (DirStats, DirStats, DirStats) {
        let (mut sa, mut sb, mut all) = (DirStats::new(), DirStats::new(), DirStats::new());
        for &v in a {
            sa.record(v, 4096);
            all.record(v, 4096);
        }
        for &v in b {
            sb.record(v, 4096);
            all.record(v, 4096);
        }
        (sa, sb, all)
    }

    /// Issue 23: merged histograms read the percentiles of one run over the union of the
    /// I/Os (two "runs" with different distributions, and a third at 2 digits).
    #[test]
    fn merged_percentiles_are_those_of_the_union() {
        let a = values(2, 40_000, 1_000.0);
        let b = values(3, 70_000, 5_000.0);
        let (sa, sb, all) = two_runs(&a, &b);
        let ha = LatencyHist::from_histogram(sa.histogram());
        let hb = LatencyHist::from_histogram(sb.histogram());
        let merged = LatencyHist::merge([&ha, &hb]).unwrap();
        assert_eq!(merged, LatencyHist::from_histogram(all.histogram()));
        for p in [1.0, 50.0, 90.0, 99.0, 99.9, 99.99, 99.999] {
            assert_eq!(
                merged.percentile_ns(p).unwrap(),
                all.histogram().value_at_percentile(p),
                "p{p}"
            );
        }
        // A coarser one: the union at its precision.
        let mut s2 = DirStats::with_digits(2);
        let mut all2 = DirStats::with_digits(2);
        for &v in a.iter().chain(&b) {
            all2.record(v, 4096);
        }
        for &v in &a {
            s2.record(v, 4096);
        }
        let h2 = LatencyHist::from_histogram(s2.histogram());
        let m2 = LatencyHist::merge([&h2, &hb]).unwrap();
        assert_eq!(m2.sig_digits, 2);
        assert_eq!(m2, LatencyHist::from_histogram(all2.histogram()));
    }

    /// The exact percentile of `sorted` as HDR ranks it (the ceil(q x n)-th smallest).
    fn exact(sorted: &[u64], p: f64) -> u64 {
        let rank = ((p / 100.0) * sorted.len() as f64).ceil().max(1.0) as usize;
        sorted[rank.min(sorted.len()) - 1]
    }

    /// Issue 23: a histogram kept to fewer digits reads every percentile within the
    /// precision it states above the exact one (of the raw latencies, not of the 3-digit
    /// histogram), and is the histogram the engine would have recorded at those digits.
    #[test]
    fn coarsened_percentiles_stay_within_the_stated_precision() {
        // Five decades of latency (20 ns to 200 us) and a heavy tail.
        let mut raw = values(7, 200_000, 20.0);
        raw.extend(values(8, 2_000, 2_000_000.0));
        let mut s = DirStats::new();
        for &v in &raw {
            s.record(v, 4096);
        }
        raw.iter_mut().for_each(|v| *v = (*v).max(1));
        raw.sort_unstable();
        let full = LatencyHist::from_histogram(s.histogram());
        let mut sizes = Vec::new();
        for digits in [3u8, 2, 1] {
            let c = full.coarsen(digits).unwrap();
            assert_eq!(c.sig_digits, digits);
            assert_eq!(c.total(), raw.len() as u64);
            let bound = relative_precision(digits);
            let mut worst = 0f64;
            for k in 0..=1000 {
                let p = if k <= 900 {
                    k as f64 / 10.0
                } else {
                    // 90 to 99.999 in finer steps.
                    100.0 - 10f64.powf(1.0 - (k - 900) as f64 * 0.06)
                };
                let (e, got) = (exact(&raw, p), c.percentile_ns(p).unwrap());
                assert!(got >= e, "{digits} digits p{p}: {got} below the exact {e}");
                let err = (got - e) as f64 / e as f64;
                worst = worst.max(err);
                assert!(
                    err <= bound,
                    "{digits} digits p{p}: {got} vs exact {e}, {err} over {bound}"
                );
            }
            // Not trivially within: coarser digits do lose precision.
            assert!(worst > bound / 20.0, "{digits} digits: worst {worst}");
            // What the engine records at these digits (2 is the canaries').
            if digits == 2 {
                let mut s2 = DirStats::with_digits(2);
                for &v in &raw {
                    s2.record(v, 4096);
                }
                assert_eq!(c, LatencyHist::from_histogram(s2.histogram()));
            }
            sizes.push(serde_json::to_string(&c).unwrap().len());
        }
        assert!(
            sizes[0] > 2 * sizes[1] && sizes[1] > 2 * sizes[2],
            "{sizes:?}"
        );
        // Never finer than it is.
        let two = full.coarsen(2).unwrap();
        assert_eq!(two.coarsen(3).unwrap(), two);
    }

    /// Documents kept at different digits merge at the fewest: the merge equals the
    /// union of the I/Os kept at those digits, and reads its percentiles within their
    /// precision of the exact ones of the union.
    #[test]
    fn mixed_precision_merges_at_the_coarser() {
        let a = values(11, 30_000, 500.0);
        let b = values(12, 50_000, 3_000.0);
        let (sa, sb, all) = two_runs(&a, &b);
        let ha1 = LatencyHist::from_histogram(sa.histogram())
            .coarsen(1)
            .unwrap();
        let hb3 = LatencyHist::from_histogram(sb.histogram());
        let union3 = LatencyHist::from_histogram(all.histogram());
        for pair in [[&ha1, &hb3], [&hb3, &ha1]] {
            let m = LatencyHist::merge(pair).unwrap();
            assert_eq!(m.sig_digits, 1);
            assert_eq!(m, union3.coarsen(1).unwrap());
        }
        let m = LatencyHist::merge([&ha1, &hb3]).unwrap();
        let mut raw: Vec<u64> = a.iter().chain(&b).map(|&v| v.max(1)).collect();
        raw.sort_unstable();
        for p in [1.0, 50.0, 90.0, 99.0, 99.9, 99.99] {
            let (e, got) = (exact(&raw, p), m.percentile_ns(p).unwrap());
            assert!(got >= e && (got - e) as f64 <= e as f64 * relative_precision(1));
        }
    }

    #[test]
    fn a_document_is_coarsened_wherever_its_histograms_are() {
        let mut s = DirStats::new();
        for v in values(5, 20_000, 1_000.0) {
            s.record(v, 4096);
        }
        let h = serde_json::to_value(LatencyHist::from_histogram(s.histogram())).unwrap();
        let mut doc = serde_json::json!({
            "read_lat_hist": h,
            "phases": [{"round": {"write_lat_hist": h, "read": {"ops": 1}}},
                       {"points": [{"round": {"read_lat_hist": h}}]}],
            "trim_lat_hist": null
        });
        assert_eq!(coarsen_document(&mut doc, 2).unwrap(), 3);
        let text = doc.to_string();
        assert_eq!(text.matches("\"sig_digits\":2").count(), 3, "{text}");
        assert!(!text.contains("\"sig_digits\":3"));
        // Already at 2: nothing more to do.
        assert_eq!(coarsen_document(&mut doc, 2).unwrap(), 0);
        let mut bad = serde_json::json!({"read_lat_hist": {"sig_digits": "x"}});
        assert!(matches!(
            coarsen_document(&mut bad, 2),
            Err(HistError::Form(_))
        ));
    }

    #[test]
    fn altered_documents_are_refused() {
        let bad = LatencyHist {
            sig_digits: 3,
            delta_ns: vec![1, 2],
            counts: vec![1],
        };
        assert_eq!(bad.to_histogram().unwrap_err(), HistError::Lengths(2, 1));
        let bad = LatencyHist {
            sig_digits: 9,
            ..LatencyHist::default()
        };
        assert_eq!(bad.to_histogram().unwrap_err(), HistError::Digits(9));
        let bad = LatencyHist {
            sig_digits: 3,
            delta_ns: vec![MAX_TRACKED_NS * 4],
            counts: vec![1],
        };
        assert_eq!(bad.to_histogram().unwrap_err(), HistError::Range);
    }

    #[test]
    fn the_sample_rule() {
        assert_eq!(ios_needed(99.0), 1_000);
        assert_eq!(ios_needed(99.9), 10_000);
        assert_eq!(ios_needed(99.99), 100_000);
        assert_eq!(ios_needed(99.9999), 10_000_000);
        assert_eq!(ios_needed(50.0), 20);
        assert_eq!(ios_needed(100.0), u64::MAX);
        assert!((supported_nines(10_000_000) - 6.0).abs() < 1e-12);
        assert!((supported_nines(10_000) - 3.0).abs() < 1e-12);
        assert_eq!(percentile_name(99.9999), "p99_9999");
        assert_eq!(percentile_name(99.0), "p99");
    }

    #[test]
    fn the_exceedance_curve_steps_through_the_buckets() {
        let mut s = DirStats::new();
        // 900 at 1 us, 90 at 10 us, 9 at 100 us, 1 at 1 ms: one nine each.
        for (v, n) in [(1_000, 900), (10_000, 90), (100_000, 9), (1_000_000, 1)] {
            for _ in 0..n {
                s.record(v, 4096);
            }
        }
        let h = LatencyHist::from_histogram(s.histogram());
        let c = h.exceedance().unwrap();
        let x: Vec<f64> = c.iter().map(|p| (p.0 * 1e9).round() / 1e9).collect();
        assert_eq!(x, [0.0, 1.0, 2.0, 3.0, 3.0]);
        let hi = |v: u64| s.histogram().highest_equivalent(v);
        let y: Vec<u64> = c.iter().map(|p| p.1).collect();
        assert_eq!(
            y,
            [
                hi(1_000),
                hi(10_000),
                hi(100_000),
                hi(1_000_000),
                hi(1_000_000)
            ]
        );
    }
}
