//! Latency and throughput accounting. Every I/O's latency goes, in nanoseconds, into an
//! HDR histogram (3 significant digits: any percentile is within 0.1% of the exact one)
//! plus exact sums for the mean and standard deviation and exact min and max.
//! Recording does not allocate: the histogram's size is fixed at creation.

use std::collections::BTreeMap;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// Highest latency the histograms track exactly: one hour. Longer I/Os are counted at
/// this value (and still exactly in max and mean).
pub const MAX_TRACKED_NS: u64 = 3_600_000_000_000;
const SIGFIGS: u8 = 3;

/// The percentiles of totals, as the JSON contract names them: one key style everywhere
/// (totals, intervals, result documents' `lat_p99_9_ns`, the API's window quantiles):
/// `p` and the percentile, `_` for its decimal point.
pub const TOTAL_PERCENTILES: [(&str, f64); 5] = [
    ("p50", 50.0),
    ("p90", 90.0),
    ("p99", 99.0),
    ("p99_9", 99.9),
    ("p99_99", 99.99),
];

/// The key of a percentile in [`TOTAL_PERCENTILES`]' style, from that style or from the
/// bare numbers (`"99.9"`) that bench output used before (issue 17), so older output
/// still reads.
pub fn percentile_key(key: &str) -> String {
    let bare = key.strip_prefix('p').unwrap_or(key);
    format!("p{}", bare.replace('.', "_"))
}

fn percentile_map<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<BTreeMap<String, u64>, D::Error> {
    let m = BTreeMap::<String, u64>::deserialize(d)?;
    Ok(m.into_iter()
        .map(|(k, v)| (percentile_key(&k), v))
        .collect())
}

/// Whether a failed I/O's errno says the device, or the path to it, failed it, as the
/// block layer reports a device's failures (`blk_status_to_errno`): an I/O error, a
/// medium error (ENODATA), an integrity error (EILSEQ), a timeout, the transport or the
/// target failing (ENOLINK, EREMOTEIO), the device offline or gone (ENODEV, ENXIO), a
/// command duration limit (ETIME), a bad message (EBADMSG). The others are the host's:
/// no space (a full filesystem or thin pool), a read-only filesystem, permissions,
/// alignment (EINVAL), a short transfer (0, a file truncated under the run), no memory,
/// busy, a reservation held by another host (EBADE).
pub fn device_errno(errno: i32) -> bool {
    matches!(
        errno,
        libc::EIO
            | libc::ENODATA
            | libc::EILSEQ
            | libc::ETIMEDOUT
            | libc::ENOLINK
            | libc::EREMOTEIO
            | libc::ENODEV
            | libc::ENXIO
            | libc::ETIME
            | libc::EBADMSG
    )
}

/// Counts for one direction (read or write) over some span of time.
#[derive(Debug, Clone)]
pub struct DirStats {
    pub ops: u64,
    pub bytes: u64,
    /// I/Os that failed (not in `ops` or the latencies).
    pub errors: u64,
    /// Of `errors`, those the device failed ([`device_errno`]). The others are the
    /// host's: a full or read-only filesystem, permissions, alignment, a truncated file.
    pub device_errors: u64,
    /// The errno of the latest error that was not the device's (0: a short transfer).
    pub other_errno: Option<i32>,
    lat_sum: u128,
    lat_sq_sum: u128,
    lat_min: u64,
    lat_max: u64,
    /// Made at the first record or merge: a direction a job never uses (a read-only
    /// canary's writes) costs no histogram (37 KB at 2 digits, 270 KB at 3), in every
    /// interval buffer the engine keeps.
    hist: Option<Histogram<u64>>,
    /// A sparse one ([`DirStats::sparse`]) keeps its latencies here instead of in a
    /// histogram.
    values: Option<Vec<u64>>,
    digits: u8,
}

/// A histogram with the engine's bounds and `digits` significant digits.
fn new_histogram(digits: u8) -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_TRACKED_NS, digits)
        .expect("static histogram bounds are valid")
}

/// An empty histogram of `digits` (2 or 3) digits, for a direction with none yet.
fn empty_histogram(digits: u8) -> &'static Histogram<u64> {
    static EMPTY: [std::sync::OnceLock<Histogram<u64>>; 2] =
        [std::sync::OnceLock::new(), std::sync::OnceLock::new()];
    EMPTY[usize::from(digits != 2)].get_or_init(|| new_histogram(digits))
}

impl Default for DirStats {
    fn default() -> Self {
        Self::new()
    }
}

impl DirStats {
    /// Latencies to 3 significant digits (within 0.1%).
    pub fn new() -> Self {
        Self::with_digits(SIGFIGS)
    }

    /// Latencies to `digits` significant digits (2 or 3; anything else is taken as 3).
    pub fn with_digits(digits: u8) -> Self {
        let digits = if digits == 2 { 2 } else { SIGFIGS };
        DirStats {
            ops: 0,
            bytes: 0,
            errors: 0,
            device_errors: 0,
            other_errno: None,
            lat_sum: 0,
            lat_sq_sum: 0,
            lat_min: u64::MAX,
            lat_max: 0,
            hist: None,
            values: None,
            digits,
        }
    }

    /// A DirStats for a few latencies at a time (a canary's interval: about five), kept
    /// as a list instead of a histogram: a histogram of `digits` digits is 37 KB that a
    /// reset clears and a walk over its values visits whole, for each interval. Its
    /// [`DirStats::recorded`] and percentiles are a histogram's of the same digits; it has
    /// no [`DirStats::histogram`] (the empty one is returned).
    pub fn sparse(digits: u8) -> Self {
        DirStats {
            values: Some(Vec::new()),
            ..Self::with_digits(digits)
        }
    }

    /// Records one completed I/O. No lock; no allocation but the histogram's, at the
    /// first record.
    #[inline]
    pub fn record(&mut self, lat_ns: u64, bytes: u32) {
        let lat = lat_ns.max(1);
        self.ops += 1;
        self.bytes += bytes as u64;
        self.lat_sum += lat as u128;
        self.lat_sq_sum += (lat as u128) * (lat as u128);
        self.lat_min = self.lat_min.min(lat);
        self.lat_max = self.lat_max.max(lat);
        if let Some(values) = &mut self.values {
            values.push(lat.min(MAX_TRACKED_NS));
            return;
        }
        let digits = self.digits;
        self.hist
            .get_or_insert_with(|| new_histogram(digits))
            .saturating_record(lat.min(MAX_TRACKED_NS));
    }

    /// The recorded latencies as a histogram of this DirStats' digits holds them:
    /// (the highest value of each bucket, its lowest, the count), ascending.
    pub fn recorded(&self) -> Vec<(u64, u64, u64)> {
        let mut out: Vec<(u64, u64, u64)> = Vec::new();
        if self.ops == 0 {
            return out;
        }
        if let Some(values) = &self.values {
            let h = empty_histogram(self.digits);
            let mut sorted = values.clone();
            sorted.sort_unstable();
            for v in sorted {
                let high = h.highest_equivalent(v);
                match out.last_mut() {
                    Some(last) if last.0 == high => last.2 += 1,
                    _ => out.push((high, h.lowest_equivalent(v), 1)),
                }
            }
            return out;
        }
        let h = self.histogram();
        for v in h.iter_recorded() {
            let value = v.value_iterated_to();
            out.push((value, h.lowest_equivalent(value), v.count_at_value()));
        }
        out
    }

    /// Counts one failed I/O; `errno` 0 is a short transfer.
    #[cold]
    pub fn error(&mut self, errno: i32) {
        self.errors += 1;
        if device_errno(errno) {
            self.device_errors += 1;
        } else {
            self.other_errno = Some(errno);
        }
    }

    pub fn merge(&mut self, other: &DirStats) {
        if let Some(values) = &other.values {
            // Each latency recorded again, into a histogram or a list as `self` keeps them.
            let (errors, device_errors, errno) =
                (other.errors, other.device_errors, other.other_errno);
            let bytes_each = other.bytes.checked_div(other.ops).unwrap_or(0) as u32;
            let extra = other.bytes - u64::from(bytes_each) * other.ops;
            for &v in values {
                self.record(v, bytes_each);
            }
            self.bytes += extra;
            self.errors += errors;
            self.device_errors += device_errors;
            self.other_errno = errno.or(self.other_errno);
            return;
        }
        self.merge_counts(other);
        if other.ops == 0 {
            // Nothing recorded: skip the walk over the histogram's counts.
            return;
        }
        let Some(h) = &other.hist else { return };
        // Same bounds on both sides: add cannot fail or grow.
        let digits = self.digits;
        self.hist
            .get_or_insert_with(|| new_histogram(digits))
            .add(h)
            .expect("histograms share their bounds");
    }

    /// Merges the counts, sums, minimum and maximum, not the histogram: the percentiles
    /// stay those of what was recorded or merged whole.
    pub fn merge_counts(&mut self, other: &DirStats) {
        self.ops += other.ops;
        self.bytes += other.bytes;
        self.errors += other.errors;
        self.device_errors += other.device_errors;
        self.other_errno = other.other_errno.or(self.other_errno);
        self.lat_sum += other.lat_sum;
        self.lat_sq_sum += other.lat_sq_sum;
        self.lat_min = self.lat_min.min(other.lat_min);
        self.lat_max = self.lat_max.max(other.lat_max);
    }

    pub fn reset(&mut self) {
        self.ops = 0;
        self.bytes = 0;
        self.errors = 0;
        self.device_errors = 0;
        self.other_errno = None;
        self.lat_sum = 0;
        self.lat_sq_sum = 0;
        self.lat_min = u64::MAX;
        self.lat_max = 0;
        // Clearing writes every count (and makes every page of them resident): skip it
        // when nothing was recorded (a read-only job's write side, an idle interval).
        if let Some(h) = self.hist.as_mut().filter(|h| !h.is_empty()) {
            h.reset();
        }
        if let Some(values) = &mut self.values {
            values.clear();
        }
    }

    /// The exact sum of the recorded latencies, in nanoseconds.
    pub fn sum_ns(&self) -> u128 {
        self.lat_sum
    }

    pub fn mean_ns(&self) -> f64 {
        if self.ops == 0 {
            0.0
        } else {
            self.lat_sum as f64 / self.ops as f64
        }
    }

    /// Population standard deviation, from exact sums.
    pub fn stddev_ns(&self) -> f64 {
        if self.ops < 2 {
            return 0.0;
        }
        let n = self.ops as f64;
        let mean = self.lat_sum as f64 / n;
        let var = self.lat_sq_sum as f64 / n - mean * mean;
        var.max(0.0).sqrt()
    }

    pub fn min_ns(&self) -> u64 {
        if self.ops == 0 {
            0
        } else {
            self.lat_min
        }
    }

    pub fn max_ns(&self) -> u64 {
        self.lat_max
    }

    /// Latency at percentile `p` (0-100), from the histogram, clamped to the exact max.
    pub fn percentile_ns(&self, p: f64) -> u64 {
        if self.ops == 0 {
            return 0;
        }
        if self.values.is_some() {
            // As a histogram's: the highest value of the bucket holding rank ceil(p * n).
            let pairs = self.recorded();
            let n: u64 = pairs.iter().map(|x| x.2).sum();
            let rank = ((p / 100.0 * n as f64).ceil() as u64).clamp(1, n);
            let mut seen = 0;
            let at = pairs
                .iter()
                .find(|x| {
                    seen += x.2;
                    seen >= rank
                })
                .map_or(0, |x| x.0);
            return at.min(self.lat_max).max(self.min_ns());
        }
        self.histogram()
            .value_at_percentile(p)
            .min(self.lat_max)
            .max(self.min_ns())
    }

    /// The histogram itself (for exporters that need buckets).
    pub fn histogram(&self) -> &Histogram<u64> {
        self.hist
            .as_ref()
            .unwrap_or_else(|| empty_histogram(self.digits))
    }

    pub fn summary(&self, seconds: f64) -> DirSummary {
        let mut percentiles = BTreeMap::new();
        for (name, p) in TOTAL_PERCENTILES {
            percentiles.insert(name.to_string(), self.percentile_ns(p));
        }
        DirSummary {
            ops: self.ops,
            bytes: self.bytes,
            iops: rate(self.ops, seconds),
            bw_bytes: rate(self.bytes, seconds),
            lat_ns: LatencySummary {
                min: self.min_ns(),
                mean: self.mean_ns(),
                stddev: self.stddev_ns(),
                max: self.max_ns(),
                percentiles,
            },
        }
    }

    pub fn interval_summary(&self, seconds: f64) -> IntervalDir {
        IntervalDir {
            ops: self.ops,
            bytes: self.bytes,
            iops: rate(self.ops, seconds),
            bw_bytes: rate(self.bytes, seconds),
            lat_ns: IntervalLatency {
                mean: self.mean_ns(),
                stddev: self.stddev_ns(),
                max: self.max_ns(),
                p50: self.percentile_ns(50.0),
                p99: self.percentile_ns(99.0),
                p99_9: self.percentile_ns(99.9),
            },
        }
    }
}

fn rate(n: u64, seconds: f64) -> f64 {
    if seconds > 0.0 {
        n as f64 / seconds
    } else {
        0.0
    }
}

/// Latency of a whole run, in nanoseconds.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct LatencySummary {
    pub min: u64,
    pub mean: f64,
    pub stddev: f64,
    pub max: u64,
    /// Keys "p50", "p90", "p99", "p99_9", "p99_99" (older output's "50", "99.9"... are
    /// read as those).
    #[serde(deserialize_with = "percentile_map")]
    pub percentiles: BTreeMap<String, u64>,
}

/// One direction (or both) of a whole run.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct DirSummary {
    pub ops: u64,
    pub bytes: u64,
    pub iops: f64,
    pub bw_bytes: f64,
    pub lat_ns: LatencySummary,
}

/// Latency of one interval, in nanoseconds.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct IntervalLatency {
    pub mean: f64,
    pub stddev: f64,
    pub max: u64,
    pub p50: u64,
    pub p99: u64,
    #[serde(alias = "p99.9")]
    pub p99_9: u64,
}

/// One direction of one interval.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct IntervalDir {
    pub ops: u64,
    pub bytes: u64,
    pub iops: f64,
    pub bw_bytes: f64,
    pub lat_ns: IntervalLatency,
}

impl IntervalDir {
    /// Nothing happened in this direction.
    pub fn is_empty(&self) -> bool {
        self.ops == 0 && self.bytes == 0
    }
}

impl DirSummary {
    /// Nothing happened in this direction.
    pub fn is_empty(&self) -> bool {
        self.ops == 0 && self.bytes == 0
    }
}

/// One interval alone (not cumulative).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct IntervalSummary {
    /// Seconds since the measured part of the run began, at the end of this interval.
    pub end_seconds: f64,
    pub read: IntervalDir,
    pub write: IntervalDir,
    /// Trims in this interval (`job::Trim`), when the job makes any.
    #[serde(default, skip_serializing_if = "IntervalDir::is_empty")]
    pub trim: IntervalDir,
    /// Closed loop: seconds the slots held no I/O in this interval, summed over slots
    /// (see `RunResult::slot_idle_seconds`).
    #[serde(default)]
    pub slot_idle_seconds: f64,
    /// Closed loop: seconds of I/O in flight in this interval that no latency figure
    /// counts (see `RunResult::slot_uncounted_seconds`).
    #[serde(default)]
    pub slot_uncounted_seconds: f64,
    /// Seconds of I/O in flight in this interval, summed over the slots (split at the
    /// interval's edges): divided by its length, the queue depth the target saw.
    #[serde(default)]
    pub in_flight_seconds: f64,
    /// Open loop: I/Os due in this interval's run that no figure counts (see
    /// `RunResult::due_missed_ops`).
    #[serde(default)]
    pub due_missed_ops: u64,
    /// Open loop: the latest an I/O was issued against its due time, in seconds.
    #[serde(default)]
    pub issue_late_max_seconds: f64,
    /// Seconds the workers waited, runnable, for a CPU in this interval, summed.
    #[serde(default)]
    pub run_delay_seconds: f64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::errno_name;

    /// A sparse DirStats (a list of latencies) reads as a histogram of the same digits:
    /// the same recorded buckets, percentiles, counts and sums; merged into a histogram
    /// one, the same as recording its latencies there; and a reset empties it.
    #[test]
    fn a_sparse_one_reads_as_a_histogram() {
        let lats = [
            1u64, 7, 999, 1_000, 1_001, 64_123, 64_999, 5_220_000, 5_220_001, 77, 1_000,
        ];
        let mut hist = DirStats::with_digits(2);
        let mut sparse = DirStats::sparse(2);
        for (i, &l) in lats.iter().enumerate() {
            hist.record(l, 4096 + i as u32);
            sparse.record(l, 4096 + i as u32);
        }
        sparse.error(5);
        hist.error(5);
        assert!(sparse.hist.is_none(), "no histogram made");
        assert_eq!(sparse.recorded(), hist.recorded());
        for p in [0.0, 1.0, 25.0, 50.0, 90.0, 99.0, 99.9, 100.0] {
            assert_eq!(sparse.percentile_ns(p), hist.percentile_ns(p), "p{p}");
        }
        assert_eq!(
            (
                sparse.ops,
                sparse.bytes,
                sparse.errors,
                sparse.device_errors
            ),
            (hist.ops, hist.bytes, hist.errors, hist.device_errors)
        );
        assert_eq!(
            (sparse.sum_ns(), sparse.min_ns(), sparse.max_ns()),
            (hist.sum_ns(), hist.min_ns(), hist.max_ns())
        );
        let mut into = DirStats::with_digits(2);
        into.merge(&sparse);
        assert_eq!(into.recorded(), hist.recorded());
        assert_eq!(
            (into.ops, into.bytes, into.errors, into.sum_ns()),
            (hist.ops, hist.bytes, hist.errors, hist.sum_ns())
        );
        sparse.reset();
        assert_eq!((sparse.ops, sparse.recorded().len()), (0, 0));
        assert_eq!(sparse.percentile_ns(50.0), 0);
    }

    /// Issue 18: a direction nothing is recorded in holds no histogram (a read-only
    /// canary's write side, in each of its buffers), and reads as an empty one; the first
    /// record or merge makes it, with the same percentiles as before.
    #[test]
    fn a_direction_unused_holds_no_histogram() {
        let mut unused = DirStats::with_digits(2);
        unused.reset();
        let mut other = DirStats::with_digits(2);
        unused.merge(&other);
        assert!(unused.hist.is_none());
        assert_eq!(unused.histogram().len(), 0);
        assert_eq!(unused.percentile_ns(99.0), 0);
        for v in [1_000, 2_000, 3_000, 50_000] {
            other.record(v, 4096);
        }
        unused.merge(&other);
        assert!(unused.hist.is_some());
        assert_eq!(unused.percentile_ns(99.0), other.percentile_ns(99.0));
        assert_eq!(unused.histogram().len(), 4);
        // Counts only: the totals of a run that keeps no histogram.
        let mut counts = DirStats::with_digits(2);
        counts.merge_counts(&other);
        assert!(counts.hist.is_none());
        assert_eq!((counts.ops, counts.max_ns()), (4, 50_000));
    }

    #[test]
    fn errors_are_the_device_s_or_the_host_s() {
        for e in [
            libc::EIO,
            libc::ENODATA,
            libc::EILSEQ,
            libc::ETIMEDOUT,
            libc::ENOLINK,
            libc::EREMOTEIO,
            libc::ENODEV,
            libc::ENXIO,
            libc::ETIME,
            libc::EBADMSG,
        ] {
            assert!(device_errno(e), "{}", errno_name(e));
            assert!(!errno_name(e).starts_with("other"), "{e} has a name");
        }
        for e in [
            0,
            libc::ENOSPC,
            libc::EROFS,
            libc::EACCES,
            libc::EPERM,
            libc::EINVAL,
            libc::EBADF,
            libc::EOPNOTSUPP,
            libc::EAGAIN,
            libc::EBADE,
            libc::EBUSY,
            libc::ENOMEM,
        ] {
            assert!(!device_errno(e), "{}", errno_name(e));
            assert!(!errno_name(e).starts_with("other"), "{e} has a name");
        }
        let mut a = DirStats::new();
        a.error(libc::EIO);
        a.error(libc::ENOSPC);
        let mut b = DirStats::new();
        b.error(0);
        b.error(libc::ENODATA);
        a.merge(&b);
        assert_eq!((a.errors, a.device_errors, a.other_errno), (4, 2, Some(0)));
        // The latest host error wins a merge; one with none keeps what it had.
        a.merge(&DirStats::new());
        assert_eq!(a.other_errno, Some(0));
        assert_eq!(a.ops, 0, "a failed I/O is not an op");
        a.reset();
        assert_eq!((a.errors, a.device_errors, a.other_errno), (0, 0, None));
    }

    /// Percentiles from the histogram are within 1% (in fact 0.1%) of the exact ones.
    #[test]
    fn percentiles_match_exact_within_one_percent() {
        let mut rng = crate::rng::Rng::new(42);
        let mut s = DirStats::new();
        let mut all = Vec::new();
        for _ in 0..500_000 {
            // log-uniform from 1 us to 100 ms, like real drive latencies
            let u = rng.unit_open0();
            let v = (1e3 * (1e5f64).powf(u)) as u64;
            s.record(v, 4096);
            all.push(v);
        }
        all.sort_unstable();
        for p in [50.0, 90.0, 99.0, 99.9, 99.99] {
            let rank = ((p / 100.0) * all.len() as f64).ceil() as usize;
            let exact = all[rank.saturating_sub(1).min(all.len() - 1)];
            let got = s.percentile_ns(p);
            let err = (got as f64 - exact as f64).abs() / exact as f64;
            assert!(err < 0.01, "p{p}: hdr {got} exact {exact} err {err}");
        }
        let mean = all.iter().map(|&v| v as f64).sum::<f64>() / all.len() as f64;
        assert!((s.mean_ns() - mean).abs() < 1e-6 * mean);
        assert_eq!(s.max_ns(), *all.last().unwrap());
        assert_eq!(s.min_ns(), all[0]);
    }

    #[test]
    fn merge_and_reset() {
        let mut a = DirStats::new();
        let mut b = DirStats::new();
        a.record(1000, 4096);
        b.record(3000, 4096);
        a.merge(&b);
        assert_eq!(a.ops, 2);
        assert_eq!(a.mean_ns(), 2000.0);
        assert_eq!(a.stddev_ns(), 1000.0);
        assert_eq!(a.min_ns(), 1000);
        assert_eq!(a.max_ns(), 3000);
        a.reset();
        assert_eq!(a.ops, 0);
        assert_eq!(a.percentile_ns(50.0), 0);
        assert_eq!(a.min_ns(), 0);
    }

    #[test]
    fn huge_latency_is_clamped_in_histogram_only() {
        let mut s = DirStats::new();
        s.record(MAX_TRACKED_NS * 2, 512);
        assert_eq!(s.max_ns(), MAX_TRACKED_NS * 2);
        assert!(s.percentile_ns(50.0) >= MAX_TRACKED_NS);
    }

    /// One key style for totals and intervals (issue 17: totals said "99.9", intervals
    /// "p99.9"); older bench output still reads.
    #[test]
    fn percentile_keys_are_one_style() {
        let mut d = DirStats::new();
        d.record(1000, 4096);
        let t = serde_json::to_value(d.summary(1.0)).unwrap();
        let i = serde_json::to_value(d.interval_summary(1.0)).unwrap();
        let total_keys: Vec<&String> = t["lat_ns"]["percentiles"]
            .as_object()
            .unwrap()
            .keys()
            .collect();
        assert_eq!(total_keys, ["p50", "p90", "p99", "p99_9", "p99_99"]);
        for k in ["p50", "p99", "p99_9"] {
            assert!(t["lat_ns"]["percentiles"][k].is_u64(), "{t}");
            assert!(i["lat_ns"][k].is_u64(), "{i}");
        }
        let old: LatencySummary = serde_json::from_str(
            r#"{"min":1,"mean":1.0,"stddev":0.0,"max":1,"percentiles":{"50":1,"99.9":2}}"#,
        )
        .unwrap();
        assert_eq!(old.percentiles["p99_9"], 2);
        assert_eq!(old.percentiles["p50"], 1);
        let old: IntervalLatency =
            serde_json::from_str(r#"{"mean":1.0,"stddev":0.0,"max":1,"p50":1,"p99":2,"p99.9":3}"#)
                .unwrap();
        assert_eq!(old.p99_9, 3);
    }
}
