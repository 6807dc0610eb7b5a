//! RocksDB db_bench's text output, parsed. A pure function over text (stdout and stderr
//! together; the order of the lines within each stream is all that matters).
//!
//! What db_bench prints, and what is read here:
//!
//! - One summary line per benchmark. RocksDB 6.x and later (7.8.3 is Debian's):
//!   `overwrite    :      26.245 micros/op 76068 ops/sec 4.036 seconds 306998 operations;   30.2 MB/s`;
//!   older versions (and LevelDB): `readrandom   :       1.652 micros/op 605168 ops/sec; 2294.5 MB/s (...)`,
//!   without the seconds and the operation count. `micros/op` is the summed per-thread
//!   time over the operations (in the oldest versions, wall time over operations).
//! - With `--histogram=1`, one histogram per operation type after it
//!   (`Microseconds per read:`, `... per write:`; LevelDB: `... per op:`):
//!   `Count: N Average: A  StdDev: S`, `Min: .. Median: .. Max: ..`, and
//!   `Percentiles: P50: .. P75: .. P99: .. P99.9: .. P99.99: ..` in microseconds. The
//!   oldest versions print the count and the extremes as `%.0f`/`%.4f` floats.
//! - With `--stats_interval_seconds=N`, on stderr, one line per thread per interval:
//!   `2026/11/30-10:14:51  ... thread 2: (10000,10000) ops and (9839.5,9839.5) ops/second in (1.016310,1.016310) seconds`,
//!   each pair being (this interval, since the start). Each thread keeps its own clock
//!   and prints when an operation completes after the interval has passed, so a stalled
//!   operation makes a longer interval, not a missing one. The format has not changed
//!   since the LevelDB days. Nothing per interval about latency percentiles.
//! - `readwhilewriting` (and the other `*whilewriting` benchmarks) runs one extra
//!   thread, thread 0, that writes in the background; the summary and the histogram are
//!   the reader threads' only, so the interval lines of thread 0 are left out too.

use std::collections::BTreeMap;

use super::AppInterval;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DbBenchParseError {
    #[error("db_bench printed no result line for {benchmark}{}", last_line(.last))]
    NoSummary {
        benchmark: String,
        last: Option<String>,
    },
    #[error("cannot read db_bench's '{line}': {what}")]
    Line { line: String, what: &'static str },
}

fn last_line(l: &Option<String>) -> String {
    match l {
        Some(l) => format!(": {l}"),
        None => String::new(),
    }
}

/// One `Microseconds per OP:` histogram, in microseconds.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Histogram {
    pub count: u64,
    pub average_us: f64,
    pub stddev_us: f64,
    pub min_us: f64,
    pub median_us: f64,
    pub max_us: f64,
    /// `P50`, `P75`, `P99`, `P99.9`, `P99.99` as printed (absent in the oldest versions).
    pub percentiles_us: BTreeMap<String, f64>,
}

impl Histogram {
    pub fn p99_us(&self) -> Option<f64> {
        self.percentiles_us.get("P99").copied()
    }
}

/// One interval line of one thread.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ThreadInterval {
    pub thread: u32,
    pub ops: u64,
    pub ops_total: u64,
    pub ops_per_second: f64,
    pub seconds: f64,
    pub seconds_total: f64,
}

/// One benchmark's figures.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Benchmark {
    pub name: String,
    pub micros_per_op: f64,
    pub ops_per_second: f64,
    /// Wall seconds of the benchmark (RocksDB 6.x and later).
    pub seconds: Option<f64>,
    /// Operations done (RocksDB 6.x and later).
    pub operations: Option<u64>,
    /// Whatever follows the `;` (`30.2 MB/s`, `(44313 of 59999 found)`).
    pub extra: String,
    /// By operation type: `read`, `write`, `op`...
    pub histograms: BTreeMap<String, Histogram>,
}

impl Benchmark {
    /// The histogram of the operations the benchmark is measured by: reads for the
    /// `read*` benchmarks, writes for `fill*` and `overwrite`; else the only (or first) one.
    pub fn main_histogram(&self) -> Option<&Histogram> {
        let want = if self.name.starts_with("read") || self.name.starts_with("seek") {
            "read"
        } else {
            "write"
        };
        self.histograms
            .get(want)
            .or_else(|| self.histograms.get("op"))
            .or_else(|| self.histograms.values().next())
    }
}

/// Everything read from one db_bench run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DbBenchOutput {
    /// `7.8.3`, from `RocksDB:    version 7.8.3`.
    pub version: Option<String>,
    pub benchmarks: Vec<Benchmark>,
    pub intervals: Vec<ThreadInterval>,
    /// Lines that report a failure (`put error: IO error: No space left on device...`).
    pub errors: Vec<String>,
}

impl DbBenchOutput {
    pub fn benchmark(&self, name: &str) -> Option<&Benchmark> {
        self.benchmarks.iter().find(|b| b.name == name)
    }
}

/// True for the benchmarks whose thread 0 is a background writer, not counted in the
/// benchmark's own figures.
pub fn has_background_writer(benchmark: &str) -> bool {
    benchmark.ends_with("whilewriting") || benchmark.ends_with("whilemerging")
}

/// Parses db_bench's output (stdout and stderr, in either order).
pub fn parse(text: &str) -> Result<DbBenchOutput, DbBenchParseError> {
    let mut out = DbBenchOutput::default();
    let mut current_hist: Option<(String, Histogram)> = None;
    for raw in text.lines() {
        let line = raw.trim_end_matches('\r').trim();
        if let Some(v) = line.strip_prefix("RocksDB:") {
            if let Some(v) = v.trim().strip_prefix("version") {
                out.version = Some(v.trim().to_string());
            }
            continue;
        }
        if line.contains(" ... thread ") && line.contains("ops/second in") {
            out.intervals.push(interval_line(line)?);
            continue;
        }
        if is_error_line(line) {
            out.errors.push(line.to_string());
            continue;
        }
        if line.contains(" micros/op ") && line.contains(" ops/sec") {
            if let Some(b) = summary_line(line)? {
                flush_hist(&mut current_hist, &mut out);
                out.benchmarks.push(b);
            }
            continue;
        }
        if let Some(rest) = line.strip_prefix("Microseconds per ") {
            flush_hist(&mut current_hist, &mut out);
            let op = rest.trim_end_matches(':').trim().to_string();
            current_hist = Some((op, Histogram::default()));
            continue;
        }
        if let Some((_, h)) = current_hist.as_mut() {
            if line.starts_with("Count:") {
                let kv = pairs(line);
                h.count = get(&kv, "Count", line)? as u64;
                h.average_us = get(&kv, "Average", line)?;
                h.stddev_us = get(&kv, "StdDev", line)?;
            } else if line.starts_with("Min:") {
                let kv = pairs(line);
                h.min_us = get(&kv, "Min", line)?;
                h.median_us = get(&kv, "Median", line)?;
                h.max_us = get(&kv, "Max", line)?;
            } else if let Some(rest) = line.strip_prefix("Percentiles:") {
                for (k, v) in pairs(rest) {
                    h.percentiles_us.insert(k, v);
                }
            }
        }
    }
    flush_hist(&mut current_hist, &mut out);
    Ok(out)
}

fn flush_hist(current: &mut Option<(String, Histogram)>, out: &mut DbBenchOutput) {
    if let Some((op, h)) = current.take() {
        if let Some(b) = out.benchmarks.last_mut() {
            b.histograms.insert(op, h);
        }
    }
}

fn is_error_line(line: &str) -> bool {
    let l = line.to_ascii_lowercase();
    l.contains("io error")
        || l.contains("no space left")
        || l.contains("put error")
        || l.contains("open error")
        || l.starts_with("error")
        || l.contains("invalid argument:")
        || l.contains("corruption:")
        || l.starts_with("unable to")
}

/// `Count: 200000 Average: 5.6485  StdDev: 43.48` -> [(Count, 200000), ...].
fn pairs(s: &str) -> Vec<(String, f64)> {
    let toks: Vec<&str> = s.split_whitespace().collect();
    let mut v = Vec::new();
    let mut i = 0;
    while i + 1 < toks.len() {
        if let Some(k) = toks[i].strip_suffix(':') {
            if let Ok(x) = toks[i + 1].parse::<f64>() {
                v.push((k.to_string(), x));
                i += 2;
                continue;
            }
        }
        i += 1;
    }
    v
}

fn get(kv: &[(String, f64)], k: &str, line: &str) -> Result<f64, DbBenchParseError> {
    kv.iter()
        .find(|(n, _)| n == k)
        .map(|(_, v)| *v)
        .ok_or_else(|| DbBenchParseError::Line {
            line: line.to_string(),
            what: "a histogram line without its figures",
        })
}

/// `overwrite    :      26.245 micros/op 76068 ops/sec 4.036 seconds 306998 operations;   30.2 MB/s`
/// or the older `fillrandom   :       5.649 micros/op 177017 ops/sec;   70.2 MB/s`.
/// Lines like `name [AVG 3 runs] : ...` (repeated runs) are not result lines: None.
fn summary_line(line: &str) -> Result<Option<Benchmark>, DbBenchParseError> {
    let bad = |what| DbBenchParseError::Line {
        line: line.to_string(),
        what,
    };
    let Some((name, rest)) = line.split_once(" :") else {
        return Ok(None);
    };
    let name = name.trim();
    if name.is_empty() || name.contains(char::is_whitespace) {
        return Ok(None);
    }
    let (figures, extra) = match rest.split_once(';') {
        Some((f, e)) => (f, e.trim()),
        None => (rest, ""),
    };
    let toks: Vec<&str> = figures.split_whitespace().collect();
    let num_before = |unit: &str| -> Option<&str> {
        toks.iter()
            .position(|t| *t == unit)
            .and_then(|i| i.checked_sub(1))
            .map(|i| toks[i])
    };
    let micros_per_op = num_before("micros/op")
        .and_then(|t| t.parse::<f64>().ok())
        .ok_or_else(|| bad("no number before micros/op"))?;
    let ops_per_second = num_before("ops/sec")
        .and_then(|t| t.parse::<f64>().ok())
        .ok_or_else(|| bad("no number before ops/sec"))?;
    let seconds = match num_before("seconds") {
        Some(t) => Some(
            t.parse::<f64>()
                .map_err(|_| bad("no number before seconds"))?,
        ),
        None => None,
    };
    let operations = match num_before("operations") {
        Some(t) => Some(
            t.parse::<u64>()
                .map_err(|_| bad("no number before operations"))?,
        ),
        None => None,
    };
    Ok(Some(Benchmark {
        name: name.to_string(),
        micros_per_op,
        ops_per_second,
        seconds,
        operations,
        extra: extra.to_string(),
        histograms: BTreeMap::new(),
    }))
}

/// `... thread 2: (10000,10000) ops and (9839.5,9839.5) ops/second in (1.016310,1.016310) seconds`
fn interval_line(line: &str) -> Result<ThreadInterval, DbBenchParseError> {
    let bad = |what| DbBenchParseError::Line {
        line: line.to_string(),
        what,
    };
    let rest = line
        .split_once(" ... thread ")
        .map(|(_, r)| r)
        .ok_or_else(|| bad("no thread number"))?;
    let (thread, rest) = rest
        .split_once(':')
        .ok_or_else(|| bad("no thread number"))?;
    let thread: u32 = thread.trim().parse().map_err(|_| bad("no thread number"))?;
    let mut groups = Vec::new();
    let mut s = rest;
    while let Some(open) = s.find('(') {
        let close = s[open..]
            .find(')')
            .map(|c| c + open)
            .ok_or_else(|| bad("an unclosed parenthesis"))?;
        let (a, b) = s[open + 1..close]
            .split_once(',')
            .ok_or_else(|| bad("a pair without a comma"))?;
        let a: f64 = a
            .trim()
            .parse()
            .map_err(|_| bad("a pair that is not numbers"))?;
        let b: f64 = b
            .trim()
            .parse()
            .map_err(|_| bad("a pair that is not numbers"))?;
        groups.push((a, b));
        s = &s[close + 1..];
    }
    let [(ops, ops_total), (rate, _), (seconds, seconds_total)] = groups[..] else {
        return Err(bad("not three (interval,total) pairs"));
    };
    Ok(ThreadInterval {
        thread,
        ops: ops as u64,
        ops_total: ops_total as u64,
        ops_per_second: rate,
        seconds,
        seconds_total,
    })
}

/// The intervals of a benchmark, all counted threads together, on one clock: the
/// windows `(k-1, k] * interval_seconds` from the start. db_bench's threads report on
/// their own clocks, each line when an operation completes after the interval has
/// passed (so a line covers a second or more, and a stalled thread prints one long line);
/// a line's operations are spread evenly over the time it covers, and each window takes
/// its share from every thread. Only windows that every counted thread's lines cover are
/// kept (the last, partial interval of a thread is never printed).
///
/// Per window:
/// - operations per second: the threads' operations in the window over its length;
/// - mean latency: each thread runs one operation after another, so it is the threads'
///   busy time (threads x window) over the operations (Little's law; the same figure as
///   db_bench's own `micros/op`, which is thread time over operations).
///
/// No percentiles: db_bench prints none per interval.
pub fn combine_intervals(
    lines: &[ThreadInterval],
    skip_thread0: bool,
    interval_seconds: f64,
) -> Vec<AppInterval> {
    let mut by_thread: BTreeMap<u32, Vec<&ThreadInterval>> = BTreeMap::new();
    for l in lines {
        if skip_thread0 && l.thread == 0 {
            continue;
        }
        by_thread.entry(l.thread).or_default().push(l);
    }
    if by_thread.is_empty() || interval_seconds <= 0.0 {
        return Vec::new();
    }
    let covered = by_thread
        .values()
        .map(|v| v.iter().map(|l| l.seconds_total).fold(0.0, f64::max))
        .fold(f64::INFINITY, f64::min);
    let windows = (covered / interval_seconds + 1e-9).floor() as usize;
    let threads = by_thread.len() as f64;
    (1..=windows)
        .map(|k| {
            let (w0, w1) = (
                (k - 1) as f64 * interval_seconds,
                k as f64 * interval_seconds,
            );
            let ops: f64 = by_thread
                .values()
                .flatten()
                .filter(|l| l.seconds > 0.0)
                .map(|l| {
                    let (a, b) = (l.seconds_total - l.seconds, l.seconds_total);
                    let overlap = (b.min(w1) - a.max(w0)).max(0.0);
                    l.ops as f64 * overlap / l.seconds
                })
                .sum();
            AppInterval {
                end_seconds: w1,
                ops_per_second: ops / interval_seconds,
                lat_mean_ns: (ops > 0.0).then(|| threads * interval_seconds * 1e9 / ops),
                lat_p99_ns: None,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> String {
        let p = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
            .join("tests/fixtures/app/db_bench")
            .join(name);
        std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    }

    fn both(phase: &str) -> String {
        fixture(&format!("7.8.3-{phase}.stdout")) + &fixture(&format!("7.8.3-{phase}.stderr"))
    }

    #[test]
    fn fillrandom_7_8_3() {
        let out = parse(&both("fillrandom")).unwrap();
        assert_eq!(out.version.as_deref(), Some("7.8.3"));
        assert!(out.errors.is_empty(), "{:?}", out.errors);
        let b = out.benchmark("fillrandom").unwrap();
        // fillrandom   :      55.504 micros/op 35444 ops/sec 5.643 seconds 200000 operations;   14.2 MB/s
        assert_eq!(b.micros_per_op, 55.504);
        assert_eq!(b.ops_per_second, 35444.0);
        assert_eq!(b.seconds, Some(5.643));
        assert_eq!(b.operations, Some(200000));
        assert_eq!(b.extra, "14.2 MB/s");
        let h = b.main_histogram().unwrap();
        assert_eq!(h.count, 200000);
        assert_eq!(h.average_us, 55.5105);
        assert_eq!(h.stddev_us, 989.41);
        assert_eq!(h.p99_us(), Some(21.91));
        assert_eq!(h.percentiles_us["P99.9"], 13798.36);
        assert_eq!(h.percentiles_us.len(), 5);
        // Two load threads, five lines each, the last ending at 5.21 and 5.30 s: five
        // one-second windows.
        let iv = combine_intervals(&out.intervals, false, 1.0);
        assert_eq!(iv.len(), 5);
        // Window (0, 1]: thread 0's first line covers (0, 1.013636] with 36000 ops,
        // thread 1's covers (0, 1.090659] with 17000.
        let ops = 36000.0 / 1.013636 + 17000.0 / 1.090659;
        assert!((iv[0].ops_per_second - ops).abs() < 1e-6);
        assert_eq!(iv[0].end_seconds, 1.0);
        assert!((iv[0].lat_mean_ns.unwrap() - 2.0 * 1e9 / ops).abs() < 1e-6);
        // The windows hold the operations of the lines they cover, no more, no less:
        // up to 5 s, all of both threads' first four lines and part of their fifth.
        let total: f64 = iv.iter().map(|i| i.ops_per_second).sum();
        let lines: f64 = out
            .intervals
            .iter()
            .map(|l| {
                let a = l.seconds_total - l.seconds;
                l.ops as f64 * ((5.0f64.min(l.seconds_total) - a).max(0.0) / l.seconds)
            })
            .sum();
        assert!((total - lines).abs() < 1e-6, "{total} vs {lines}");
    }

    #[test]
    fn readwhilewriting_7_8_3_counts_the_readers_only() {
        let out = parse(&both("readwhilewriting")).unwrap();
        let b = out.benchmark("readwhilewriting").unwrap();
        assert!(b.extra.contains("found"), "{}", b.extra);
        // Only a read histogram: the background writer is not in the figures.
        assert_eq!(b.histograms.keys().collect::<Vec<_>>(), ["read"]);
        let h = b.main_histogram().unwrap();
        assert_eq!(Some(h.count), b.operations);
        // Threads 0 (the writer), 1 and 2 each print lines; combined without thread 0.
        let threads: std::collections::BTreeSet<u32> =
            out.intervals.iter().map(|t| t.thread).collect();
        assert_eq!(threads.into_iter().collect::<Vec<_>>(), [0, 1, 2]);
        let iv = combine_intervals(&out.intervals, true, 1.0);
        let readers: Vec<&ThreadInterval> =
            out.intervals.iter().filter(|l| l.thread != 0).collect();
        let last_end = |t: u32| {
            readers
                .iter()
                .filter(|l| l.thread == t)
                .map(|l| l.seconds_total)
                .fold(0.0, f64::max)
        };
        assert_eq!(iv.len(), last_end(1).min(last_end(2)).floor() as usize);
        assert!(iv.len() >= 4, "{iv:?}");
        for (k, i) in iv.iter().enumerate() {
            assert_eq!(i.end_seconds, (k + 1) as f64);
            assert!(i.ops_per_second > 0.0);
            assert!((i.lat_mean_ns.unwrap() - 2.0 * 1e9 / i.ops_per_second).abs() < 1e-3);
            assert!(i.lat_p99_ns.is_none());
        }
        // The writer (thread 0) is left out: with it, more operations.
        let with_writer = combine_intervals(&out.intervals, false, 1.0);
        assert!(with_writer[0].ops_per_second > iv[0].ops_per_second);
        // The windows' operations cannot exceed the benchmark's.
        let total: f64 = iv.iter().map(|i| i.ops_per_second).sum();
        assert!(total <= b.operations.unwrap() as f64);
    }

    #[test]
    fn overwrite_7_8_3() {
        let out = parse(&both("overwrite")).unwrap();
        let b = out.benchmark("overwrite").unwrap();
        assert!(b.ops_per_second > 0.0);
        let h = b.main_histogram().unwrap();
        assert_eq!(b.histograms.keys().collect::<Vec<_>>(), ["write"]);
        assert!(h.p99_us().unwrap() >= h.percentiles_us["P50"]);
        let iv = combine_intervals(&out.intervals, false, 1.0);
        assert!(!iv.is_empty());
        // The mean of the interval rates is near the whole run's rate (same threads).
        let mean = iv.iter().map(|i| i.ops_per_second).sum::<f64>() / iv.len() as f64;
        assert!(
            (mean / b.ops_per_second - 1.0).abs() < 0.5,
            "{mean} vs {}",
            b.ops_per_second
        );
    }

    #[test]
    fn no_space_left_is_an_error_line() {
        let out = parse(
            &(fixture("7.8.3-fillrandom-enospc.stdout")
                + &fixture("7.8.3-fillrandom-enospc.stderr")),
        )
        .unwrap();
        assert!(out.benchmarks.is_empty());
        assert_eq!(out.errors.len(), 1, "{:?}", out.errors);
        assert!(out.errors[0].starts_with("put error: IO error: No space left on device"));
    }

    #[test]
    fn older_format_without_seconds_and_with_float_counts() {
        let out = parse(&fixture("5.x-readrandom-overwrite.txt")).unwrap();
        assert_eq!(out.version.as_deref(), Some("5.17.2"));
        let r = out.benchmark("readrandom").unwrap();
        assert_eq!(r.micros_per_op, 4.064);
        assert_eq!(r.ops_per_second, 246064.0);
        assert_eq!(r.seconds, None);
        assert_eq!(r.operations, None);
        let h = r.main_histogram().unwrap();
        assert_eq!(h.count, 1000000);
        assert_eq!(h.min_us, 1.0);
        assert_eq!(h.p99_us(), Some(12.77));
        let w = out.benchmark("overwrite").unwrap();
        assert_eq!(w.main_histogram().unwrap().p99_us(), Some(30.14));
        // The interval lines of both benchmarks are read (same format since LevelDB).
        assert_eq!(out.intervals.len(), 4);
    }

    #[test]
    fn leveldb_histogram_per_op_and_repeated_run_lines() {
        let text = "\
fillrandom   :       3.300 micros/op;   33.5 MB/s
fillrandom   :       3.300 micros/op 303030 ops/sec;   33.5 MB/s
fillrandom [AVG 3 runs] : 301234 (\u{b1} 1234) ops/sec;   33.3 (\u{b1} 0.1) MB/sec
Microseconds per op:
Count: 1000000  Average: 3.3000  StdDev: 12.10
Min: 1.0000  Median: 2.8000  Max: 9000.0000
------------------------------------------------------
";
        let out = parse(text).unwrap();
        assert_eq!(out.benchmarks.len(), 1);
        let b = &out.benchmarks[0];
        assert_eq!(b.ops_per_second, 303030.0);
        let h = b.main_histogram().unwrap();
        assert_eq!(h.average_us, 3.3);
        assert_eq!(h.p99_us(), None);
    }

    #[test]
    fn bad_lines_are_errors_not_panics() {
        for t in [
            "x ... thread 1: (1,2) ops and (3,4) ops/second in (5) seconds",
            "x ... thread z: (1,2) ops and (3,4) ops/second in (5,6) seconds",
            "x ... thread 1: (1,2 ops and (3,4) ops/second in (5,6) seconds",
            "fillrandom : x micros/op 5 ops/sec",
            "fillrandom : 1.0 micros/op x ops/sec",
        ] {
            assert!(parse(t).is_err(), "{t}");
        }
        // Arbitrary bytes never panic.
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let alphabet = b"(),.: 0123456789abcdefthreadopsmicros/opsec\n;-";
        for _ in 0..300 {
            let s: String = (0..200)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    alphabet[(x % alphabet.len() as u64) as usize] as char
                })
                .collect();
            let _ = parse(&s);
        }
    }
}
