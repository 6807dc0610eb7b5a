//! The drive's own load, from `/proc/diskstats`, without the canaries' I/O: what the rules
//! need to tell a drive that is slow from one that is busy (issue 21). Sampled once per
//! scheduler tick for every drive whose disk is known; exported as counters so that any
//! rate window can be taken from them.
//!
//! What is the canaries': their completed I/Os (`OpStatus::ops_total`) and the time those
//! I/Os took (`latency_sum_seconds`, the drive's service time), summed over the drive's
//! probes. The canaries publish their counts once an interval while the disk's move at
//! once, so a sample can see I/Os of a canary that it does not count yet; the difference
//! is kept as a running sum (which may dip while a canary's count lags) and exported as
//! its highest value so far, so the counters never go down and a lag is not counted
//! twice.

use std::collections::HashMap;
use std::time::Duration;

use serde::Serialize;

/// One disk's line of `/proc/diskstats`, the fields the load needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DiskCounters {
    /// Reads, writes and discards completed (iostat's r/s + w/s + d/s).
    pub ios: u64,
    /// I/Os in flight now.
    pub in_flight: u64,
    /// Milliseconds with at least one I/O in flight (iostat's %util numerator).
    pub io_ticks_ms: u64,
}

/// `/proc/diskstats` by kernel name. Lines that do not parse are skipped: the file's
/// layout grew over kernel versions (4.18 added discards, 5.5 flushes), the fields used
/// here are in every one since 2.6.
pub fn parse_diskstats(text: &str) -> HashMap<String, DiskCounters> {
    let mut out = HashMap::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() < 14 {
            continue;
        }
        let n = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok());
        let (Some(reads), Some(writes), Some(in_flight), Some(ticks)) = (n(3), n(7), n(11), n(12))
        else {
            continue;
        };
        let discards = n(14).unwrap_or(0);
        out.insert(
            f[2].to_string(),
            DiskCounters {
                ios: reads.saturating_add(writes).saturating_add(discards),
                in_flight,
                io_ticks_ms: ticks,
            },
        );
    }
    out
}

/// The load of the drive's disk by everything but driveprobe's canaries, as counters.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct DriveLoad {
    /// The disk's kernel name the counters were last read from.
    pub device: String,
    /// I/Os others completed on the disk since the daemon started watching it.
    pub others_ios_total: u64,
    /// Time the disk was busy with others' I/O, seconds.
    pub others_busy_seconds_total: f64,
    /// I/Os in flight at the last sample (the canaries' included: at most one each).
    pub in_flight: u64,
    /// The last sample, to take the next one's increase from.
    #[serde(skip)]
    last: Option<Sample>,
    /// The disk's I/Os and busy seconds less the canaries', summed over the samples; the
    /// exported counters are their highest values so far.
    #[serde(skip)]
    raw: (f64, f64),
}

impl DriveLoad {
    /// A load with these counters and no sample yet (the next sample starts over).
    pub fn new(
        device: &str,
        others_ios_total: u64,
        others_busy_seconds_total: f64,
        in_flight: u64,
    ) -> Self {
        DriveLoad {
            device: device.to_string(),
            others_ios_total,
            others_busy_seconds_total,
            in_flight,
            last: None,
            raw: (others_ios_total as f64, others_busy_seconds_total),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
struct Sample {
    disk: DiskCounters,
    canary_ios: u64,
    canary_busy: f64,
}

impl DriveLoad {
    /// Adds the increase since the last sample of the drive's disk (`device`, a kernel
    /// name) to the load, less what its canaries did in that time (`canary_ios` completed
    /// I/Os and `canary_busy` seconds inside them, as totals). A disk that changed
    /// (another kernel name) or whose counters went back (a disk removed and another
    /// given its name) starts over from this sample, adding nothing.
    pub fn sample(&mut self, device: &str, disk: DiskCounters, canary_ios: u64, canary_busy: f64) {
        let now = Sample {
            disk,
            canary_ios,
            canary_busy,
        };
        if self.device != device {
            self.device = device.to_string();
            self.last = None;
        }
        if let Some(last) = self.last {
            let went_back = disk.ios < last.disk.ios || disk.io_ticks_ms < last.disk.io_ticks_ms;
            if !went_back {
                let ios = (disk.ios - last.disk.ios) as f64;
                let canary = canary_ios.saturating_sub(last.canary_ios) as f64;
                let busy =
                    Duration::from_millis(disk.io_ticks_ms - last.disk.io_ticks_ms).as_secs_f64();
                let canary_busy = (canary_busy - last.canary_busy).max(0.0);
                self.raw.0 += ios - canary;
                self.raw.1 += busy - canary_busy;
                // Whole I/Os: the running sum is of whole numbers.
                self.others_ios_total = self.others_ios_total.max(self.raw.0.max(0.0) as u64);
                self.others_busy_seconds_total = self.others_busy_seconds_total.max(self.raw.1);
            }
        }
        self.in_flight = disk.in_flight;
        self.last = Some(now);
    }
}

/// Reads `/proc/diskstats` once (None when it cannot be read: then the loads stay as
/// they were).
pub fn read_diskstats() -> Option<HashMap<String, DiskCounters>> {
    std::fs::read_to_string("/proc/diskstats")
        .ok()
        .map(|t| parse_diskstats(&t))
}

#[cfg(test)]
mod tests {
    use super::*;

    const STATS: &str = "\
   7       0 loop0 120 0 960 12 0 0 0 0 0 16 12 0 0 0 0 0 0
 259       0 nvme0n1 1000 5 80000 400 2000 10 160000 900 3 2500 1300 50 0 4000 7 10 2
   8       0 sda 10 0 80 5 20 0 160 7 0 30 12
   8       1 sda1 bad line
";

    #[test]
    fn every_layout_of_diskstats_parses() {
        let d = parse_diskstats(STATS);
        // 4.18+: discards count with reads and writes.
        assert_eq!(
            d["nvme0n1"],
            DiskCounters {
                ios: 1000 + 2000 + 50,
                in_flight: 3,
                io_ticks_ms: 2500
            }
        );
        // Before 4.18: no discard fields.
        assert_eq!(d["sda"].ios, 30);
        assert_eq!(d["sda"].io_ticks_ms, 30);
        assert_eq!(d["loop0"].ios, 120);
        assert!(!d.contains_key("sda1"));
    }
}
