//! A probe's latency over a sliding window of intervals, and its cumulative classic
//! histogram buckets, from the engine's per-interval HDR histograms.
//!
//! Each interval arrives as an HDR histogram. The window keeps, per interval, only the
//! recorded (value, count) pairs, a few dozen for a canary, and one merged sparse map of
//! the whole window; an interval leaving the window is subtracted from the map. So the
//! quantiles are the HDR histogram's own (to its precision: 2 significant digits, within
//! 1%, for the daemon's canaries) over exactly the intervals in the window, and memory
//! stays proportional to the distinct latencies seen, not to the histogram's range.

use std::collections::{BTreeMap, VecDeque};

use crate::engine::DirStats;
use crate::status::{OpStatus, WindowQuantiles, LATENCY_BUCKETS, WINDOW_QUANTILES};

/// One interval's recorded latencies.
#[derive(Debug)]
struct Slice {
    /// Seconds (any monotonic clock the caller uses) at the end of the interval.
    end: f64,
    /// (latency ns, count), ascending.
    pairs: Vec<(u64, u64)>,
    max_ns: u64,
}

/// The sliding window and the cumulative counters of one direction of one probe.
#[derive(Debug)]
pub struct OpWindow {
    window_seconds: f64,
    slices: VecDeque<Slice>,
    merged: BTreeMap<u64, u64>,
    in_window: u64,
    /// Non-cumulative counts per bucket of [`LATENCY_BUCKETS`], plus one for `+Inf`.
    buckets: [u64; LATENCY_BUCKETS.len() + 1],
    ops_total: u64,
    bytes_total: u64,
    errors_total: u64,
    /// Of `errors_total`, the device's (`engine::device_errno`) and verify mismatches.
    device_errors_total: u64,
    /// The latest error that was not the device's, by name.
    last_host_error: Option<&'static str>,
    sum_ns: u128,
}

/// The bucket bounds in nanoseconds.
fn bounds_ns() -> [u64; LATENCY_BUCKETS.len()] {
    LATENCY_BUCKETS.map(|s| (s * 1e9).round() as u64)
}

impl OpWindow {
    pub fn new(window_seconds: f64) -> Self {
        OpWindow {
            window_seconds,
            slices: VecDeque::new(),
            merged: BTreeMap::new(),
            in_window: 0,
            buckets: [0; LATENCY_BUCKETS.len() + 1],
            ops_total: 0,
            bytes_total: 0,
            errors_total: 0,
            device_errors_total: 0,
            last_host_error: None,
            sum_ns: 0,
        }
    }

    /// Adds one interval ending at `end` (seconds), and drops the intervals that ended
    /// more than the window before it.
    pub fn add(&mut self, end: f64, s: &DirStats) {
        self.ops_total += s.ops;
        self.bytes_total += s.bytes;
        self.errors_total += s.errors;
        self.device_errors_total += s.device_errors;
        if let Some(errno) = s.other_errno {
            self.last_host_error = Some(crate::engine::errno_name(errno));
        }
        self.sum_ns += s.sum_ns();
        let bounds = bounds_ns();
        let mut pairs = Vec::new();
        if s.ops > 0 {
            for (value, low, count) in s.recorded() {
                pairs.push((value, count));
                // `le` buckets: a latency equal to a bound belongs to that bound's bucket
                // (placed by the lowest value the HDR bucket stands for, so an exact
                // bound is not pushed up by the histogram's rounding).
                let i = bounds.partition_point(|&b| b < low);
                self.buckets[i] += count;
                *self.merged.entry(value).or_default() += count;
                self.in_window += count;
            }
        }
        // Kept for the window's length: no spare capacity from the pushes.
        pairs.shrink_to_fit();
        self.slices.push_back(Slice {
            end,
            pairs,
            max_ns: s.max_ns(),
        });
        self.expire(end);
    }

    /// Drops the intervals that ended more than the window before `now`.
    pub fn expire(&mut self, now: f64) {
        while let Some(first) = self.slices.front() {
            if first.end > now - self.window_seconds {
                break;
            }
            let old = self.slices.pop_front().expect("front exists");
            for (value, count) in old.pairs {
                if let Some(c) = self.merged.get_mut(&value) {
                    *c -= count;
                    if *c == 0 {
                        self.merged.remove(&value);
                    }
                }
                self.in_window -= count;
            }
        }
    }

    /// Counts a read whose data differs from what was written (verify): the device
    /// returned wrong data, so it counts as the device's.
    pub fn add_mismatch(&mut self) {
        self.errors_total += 1;
        self.device_errors_total += 1;
    }

    /// The quantiles over the window, None when it holds no I/O.
    pub fn quantiles(&self) -> Option<WindowQuantiles> {
        if self.in_window == 0 {
            return None;
        }
        let max_ns = self.slices.iter().map(|s| s.max_ns).max().unwrap_or(0);
        let mut out = [0.0; WINDOW_QUANTILES.len()];
        // Ranks as HDR's value_at_percentile: the smallest value with at least
        // ceil(p * n) of the recorded values at or below it.
        let ranks = WINDOW_QUANTILES.map(|(_, p)| {
            (((p / 100.0) * self.in_window as f64).ceil() as u64).clamp(1, self.in_window)
        });
        let mut seen = 0u64;
        let mut k = 0;
        for (&value, &count) in &self.merged {
            seen += count;
            while k < ranks.len() && seen >= ranks[k] {
                out[k] = value.min(max_ns) as f64 / 1e9;
                k += 1;
            }
            if k == ranks.len() {
                break;
            }
        }
        Some(WindowQuantiles {
            ops: self.in_window,
            quantiles: out,
            max: max_ns as f64 / 1e9,
        })
    }

    /// The exported view: counters, cumulative buckets and the window's quantiles.
    pub fn status(&self) -> OpStatus {
        let mut cumulative = Vec::with_capacity(LATENCY_BUCKETS.len());
        let mut acc = 0;
        for c in &self.buckets[..LATENCY_BUCKETS.len()] {
            acc += c;
            cumulative.push(acc);
        }
        OpStatus {
            ops_total: self.ops_total,
            bytes_total: self.bytes_total,
            errors_total: self.errors_total,
            device_errors_total: self.device_errors_total,
            last_host_error: self.last_host_error.map(str::to_string),
            latency_sum_seconds: self.sum_ns as f64 / 1e9,
            buckets: cumulative,
            window: self.quantiles(),
        }
    }

    /// Distinct latencies held (for tests and memory bounds).
    pub fn distinct(&self) -> usize {
        self.merged.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use driveprobe_core::rng::Rng;

    fn stats(values: &[u64]) -> DirStats {
        let mut s = DirStats::new();
        for &v in values {
            s.record(v, 4096);
        }
        s
    }

    /// The window's quantiles equal those of one HDR histogram of the same intervals.
    #[test]
    fn quantiles_match_a_merged_histogram_of_the_window() {
        let mut rng = Rng::new(7);
        let mut w = OpWindow::new(10.0);
        let mut all: Vec<DirStats> = Vec::new();
        for i in 0..30 {
            let vals: Vec<u64> = (0..200)
                .map(|_| (20_000.0 * (100f64).powf(rng.unit_open0())) as u64)
                .collect();
            let s = stats(&vals);
            w.add(i as f64 + 1.0, &s);
            all.push(s);
        }
        // Intervals ending at 21..=30 are inside a 10 s window ending at 30.
        let mut merged = DirStats::new();
        for s in &all[20..] {
            merged.merge(s);
        }
        let q = w.quantiles().unwrap();
        assert_eq!(q.ops, 2000);
        for (k, (_, p)) in WINDOW_QUANTILES.iter().enumerate() {
            assert_eq!(
                q.quantiles[k],
                merged.percentile_ns(*p) as f64 / 1e9,
                "p{p}"
            );
        }
        assert_eq!(q.max, merged.max_ns() as f64 / 1e9);
        // The counters are cumulative over everything, not the window.
        let st = w.status();
        assert_eq!(st.ops_total, 6000);
        assert_eq!(st.buckets.last().copied().unwrap(), 6000);
        assert!(st.buckets.windows(2).all(|b| b[0] <= b[1]));
    }

    /// A stall leaves the window when its interval does, and an empty window says None.
    #[test]
    fn old_intervals_leave_the_window() {
        let mut w = OpWindow::new(5.0);
        w.add(1.0, &stats(&[300_000_000])); // a 300 ms stall
        for t in 2..=5 {
            w.add(t as f64, &stats(&[100_000; 10]));
        }
        let q = w.quantiles().unwrap();
        assert!((q.max - 0.3).abs() < 1e-3, "{q:?}");
        w.add(6.0, &stats(&[100_000; 10]));
        let q = w.quantiles().unwrap();
        assert!(q.max < 0.001, "the stall left the window: {q:?}");
        assert!((q.quantiles[3] - 100e-6).abs() < 1e-6);
        w.expire(100.0);
        assert!(w.quantiles().is_none());
        assert_eq!(w.distinct(), 0);
        assert_eq!(w.status().ops_total, 51);
    }

    /// With the canaries' 2 significant digits the quantiles are within 1% of the exact
    /// ones.
    #[test]
    fn two_digit_histograms_stay_within_one_percent() {
        let mut rng = Rng::new(11);
        let mut w = OpWindow::new(60.0);
        let mut all = Vec::new();
        for i in 0..20 {
            let mut s = DirStats::with_digits(2);
            for _ in 0..500 {
                let v = (30_000.0 * (300f64).powf(rng.unit_open0())) as u64;
                s.record(v, 4096);
                all.push(v);
            }
            w.add(i as f64 + 1.0, &s);
        }
        all.sort_unstable();
        let q = w.quantiles().unwrap();
        for (k, (_, p)) in WINDOW_QUANTILES.iter().enumerate() {
            let rank = ((p / 100.0) * all.len() as f64).ceil() as usize;
            let exact = all[rank - 1] as f64 / 1e9;
            let err = (q.quantiles[k] - exact).abs() / exact;
            assert!(
                err < 0.01,
                "p{p}: {} against {exact} ({err})",
                q.quantiles[k]
            );
        }
        assert_eq!(q.max, *all.last().unwrap() as f64 / 1e9);
    }

    #[test]
    fn buckets_follow_le_bounds() {
        let mut w = OpWindow::new(60.0);
        // exactly 100 us falls in the le=100us bucket; 101 us in the next.
        w.add(1.0, &stats(&[100_000, 101_000, 20_000_000_000]));
        let st = w.status();
        let i100 = LATENCY_BUCKETS.iter().position(|&b| b == 100e-6).unwrap();
        assert_eq!(st.buckets[i100], 1);
        assert_eq!(st.buckets[i100 + 1], 2);
        // 20 s is above the last bound: only in +Inf (ops_total).
        assert_eq!(*st.buckets.last().unwrap(), 2);
        assert_eq!(st.ops_total, 3);
        assert!((st.latency_sum_seconds - 20.000201).abs() < 1e-6);
    }
}
