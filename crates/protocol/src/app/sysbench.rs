//! sysbench's text output, parsed. A pure function over text: the layouts of 0.5 (the
//! pre-1.0 Lua OLTP: `OLTP test statistics`, `per-request statistics` with `ms` suffixes,
//! `[   1s] threads: N, tps: ...` intervals), 1.0.x (`SQL statistics`, `Latency (ms):`,
//! `[ 1s ] thds: N tps: ... lat (ms,99%): ...`) and 1.1 (a `Throughput:` block with
//! `time elapsed` in place of `General statistics`).

use super::{AppInterval, AppPoint};

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SysbenchParseError {
    #[error("sysbench printed no summary (no 'transactions:' line){}", fatal_suffix(.0))]
    NoSummary(Vec<String>),
    #[error("sysbench printed no latency figures (min/avg/max)")]
    NoLatency,
    #[error("sysbench printed no latency percentile: run it with --percentile=99")]
    NoPercentile,
    #[error("sysbench printed no total time")]
    NoTime,
    #[error("cannot read sysbench's '{line}': {what}")]
    Line { line: String, what: &'static str },
}

fn fatal_suffix(lines: &[String]) -> String {
    match lines.last() {
        Some(l) => format!(": {l}"),
        None => String::new(),
    }
}

/// One intermediate report (`--report-interval`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SysbenchInterval {
    /// Seconds from the start of the run to the end of the interval.
    pub end_seconds: f64,
    pub threads: Option<u32>,
    pub tps: f64,
    pub qps: Option<f64>,
    /// The percentile asked for, over this interval, in ms.
    pub lat_pct_ms: Option<f64>,
    pub errors_per_second: f64,
    pub reconnects_per_second: f64,
}

/// A whole run's figures.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SysbenchRun {
    /// `1.0.20`, `1.1.0-df89d34`, `0.5`.
    pub version: Option<String>,
    pub threads: Option<u32>,
    pub transactions: u64,
    pub tps: f64,
    pub queries: Option<u64>,
    pub qps: Option<f64>,
    /// Ignored errors (deadlocks in the oldest versions).
    pub errors: u64,
    pub reconnects: u64,
    pub total_seconds: f64,
    pub lat_min_ms: f64,
    pub lat_avg_ms: f64,
    pub lat_max_ms: f64,
    /// The percentile asked for (`--percentile`) and its value over the run, in ms.
    pub percentile: u32,
    pub lat_pct_ms: f64,
    pub intervals: Vec<SysbenchInterval>,
}

/// The lines sysbench marks `FATAL:` (its own reason for failing), in order.
pub fn fatal_lines(text: &str) -> Vec<String> {
    text.lines()
        .filter_map(|l| l.trim().strip_prefix("FATAL:"))
        .map(|l| l.trim().to_string())
        .collect()
}

fn bad(line: &str, what: &'static str) -> SysbenchParseError {
    SysbenchParseError::Line {
        line: line.trim().chars().take(120).collect(),
        what,
    }
}

/// A number with an optional unit suffix (`3.0201s`, `5.23ms`).
fn num(tok: &str) -> Option<f64> {
    let t = tok
        .trim()
        .trim_end_matches(',')
        .trim_end_matches("ms")
        .trim_end_matches('s');
    let v: f64 = t.parse().ok()?;
    v.is_finite().then_some(v)
}

/// `N (X per sec.)`: the count and the rate.
fn count_rate(rest: &str, line: &str) -> Result<(u64, Option<f64>), SysbenchParseError> {
    let mut it = rest.split_whitespace();
    let n = it
        .next()
        .and_then(|t| t.parse::<u64>().ok())
        .ok_or_else(|| bad(line, "no count"))?;
    let rate = it
        .next()
        .and_then(|t| t.strip_prefix('('))
        .and_then(|t| t.parse::<f64>().ok())
        .filter(|v| v.is_finite());
    Ok((n, rate))
}

/// `[ 1s ] thds: 2 tps: 443.24 qps: 8896.68 (r/w/o: ...) lat (ms,99%): 18.95 err/s: 0.00 reconn/s: 0.00`
/// or `[   1s] threads: 4, tps: 1035.94, reads: ..., writes: ..., response time: 5.23ms (99%), errors: 0.00, reconnects:  0.00`.
fn interval(line: &str) -> Result<Option<SysbenchInterval>, SysbenchParseError> {
    let Some(rest) = line.trim().strip_prefix('[') else {
        return Ok(None);
    };
    let Some(close) = rest.find(']') else {
        return Ok(None);
    };
    let Some(end_seconds) = num(rest[..close].trim()) else {
        return Ok(None);
    };
    let toks: Vec<&str> = rest[close + 1..].split_whitespace().collect();
    let mut iv = SysbenchInterval {
        end_seconds,
        ..Default::default()
    };
    let mut tps = None;
    let (mut reads, mut writes) = (None, None);
    let next = |i: usize| toks.get(i + 1).and_then(|t| num(t));
    let mut i = 0;
    while i < toks.len() {
        match toks[i] {
            "thds:" | "threads:" => iv.threads = next(i).map(|v| v as u32),
            "tps:" => tps = next(i),
            "qps:" => iv.qps = next(i),
            "reads:" => reads = next(i),
            "writes:" => writes = next(i),
            "err/s:" | "errors:" => iv.errors_per_second = next(i).unwrap_or(0.0),
            "reconn/s:" | "reconnects:" => iv.reconnects_per_second = next(i).unwrap_or(0.0),
            t if t.starts_with("(ms,") && t.ends_with("):") => iv.lat_pct_ms = next(i),
            "time:" if i > 0 && toks[i - 1] == "response" => iv.lat_pct_ms = next(i),
            _ => {}
        }
        i += 1;
    }
    iv.tps = tps.ok_or_else(|| bad(line, "an interval report without tps"))?;
    if iv.qps.is_none() {
        if let (Some(r), Some(w)) = (reads, writes) {
            iv.qps = Some(r + w);
        }
    }
    Ok(Some(iv))
}

/// Parses one `sysbench ... run`'s output.
pub fn parse(text: &str) -> Result<SysbenchRun, SysbenchParseError> {
    let mut run = SysbenchRun::default();
    let mut transactions = None;
    let mut total_queries = None;
    let mut other_ops = None;
    let mut rw_requests = None;
    let (mut min, mut avg, mut max) = (None, None, None);
    let mut pct = None;
    let mut time = None;
    // The `total:` under `queries performed:` (a count) and the latency block's values
    // share names with other sections: track where we are.
    let mut in_latency = false;
    for line in text.lines() {
        let t = line.trim();
        if t.is_empty() {
            in_latency = false;
            continue;
        }
        if run.version.is_none() {
            if let Some(v) = t.strip_prefix("sysbench ") {
                run.version = v
                    .split(|c: char| c.is_whitespace() || c == ':')
                    .next()
                    .map(str::to_string);
                continue;
            }
        }
        if let Some(iv) = interval(t)? {
            run.intervals.push(iv);
            continue;
        }
        if t == "Latency (ms):" || t == "per-request statistics:" || t == "response time:" {
            in_latency = true;
            continue;
        }
        let Some((key, rest)) = t.split_once(':') else {
            continue;
        };
        let rest = rest.trim();
        if in_latency {
            match key {
                "min" => min = num(rest),
                "avg" => avg = num(rest),
                "max" => max = num(rest),
                k if k.ends_with("percentile") => {
                    // `99th percentile`, `approx.  99 percentile`.
                    let p = k
                        .split_whitespace()
                        .find_map(|w| w.trim_end_matches("th").parse::<u32>().ok());
                    if let (Some(p), Some(v)) = (p, num(rest)) {
                        pct = Some((p, v));
                    }
                }
                _ => {}
            }
            continue;
        }
        match key {
            "Number of threads" => run.threads = rest.parse().ok(),
            "transactions" => transactions = Some(count_rate(rest, t)?),
            "queries" => total_queries = Some(count_rate(rest, t)?),
            "read/write requests" => rw_requests = Some(count_rate(rest, t)?),
            "other operations" => other_ops = Some(count_rate(rest, t)?),
            "ignored errors" | "deadlocks" => run.errors += count_rate(rest, t)?.0,
            "reconnects" => run.reconnects = count_rate(rest, t)?.0,
            "total time" | "time elapsed" => time = num(rest),
            _ => {}
        }
    }
    let Some((n, tps)) = transactions else {
        return Err(SysbenchParseError::NoSummary(fatal_lines(text)));
    };
    run.total_seconds = time.ok_or(SysbenchParseError::NoTime)?;
    run.transactions = n;
    run.tps = match tps {
        Some(r) => r,
        None if run.total_seconds > 0.0 => n as f64 / run.total_seconds,
        None => 0.0,
    };
    match (total_queries, rw_requests) {
        (Some((q, r)), _) => {
            run.queries = Some(q);
            run.qps = r;
        }
        (None, Some((rw, r))) => {
            // 0.5: read/write requests and other operations are counted apart.
            let (o, or) = other_ops.unwrap_or((0, Some(0.0)));
            run.queries = Some(rw + o);
            run.qps = r.zip(or).map(|(a, b)| a + b);
        }
        (None, None) => {}
    }
    match (min, avg, max) {
        (Some(a), Some(b), Some(c)) => {
            run.lat_min_ms = a;
            run.lat_avg_ms = b;
            run.lat_max_ms = c;
        }
        _ => return Err(SysbenchParseError::NoLatency),
    }
    let (p, v) = pct.ok_or(SysbenchParseError::NoPercentile)?;
    run.percentile = p;
    run.lat_pct_ms = v;
    Ok(run)
}

impl SysbenchRun {
    /// The run as an [`AppPoint`] (`workload` names the sysbench test). The percentile
    /// sysbench was asked for is taken as the p99 (driveprobe always asks for 99).
    pub fn to_point(&self, workload: &str, threads: u32) -> AppPoint {
        let ms = |v: f64| v * 1e6;
        let intervals: Vec<AppInterval> = self
            .intervals
            .iter()
            .map(|i| AppInterval {
                end_seconds: i.end_seconds,
                ops_per_second: i.tps,
                lat_mean_ns: None,
                lat_p99_ns: i.lat_pct_ms.map(ms),
            })
            .collect();
        // Intervals without a transaction report a percentile of 0: not a latency.
        let p99s: Vec<f64> = self
            .intervals
            .iter()
            .filter(|i| i.tps > 0.0)
            .filter_map(|i| i.lat_pct_ms)
            .collect();
        AppPoint {
            workload: workload.to_string(),
            threads: self.threads.unwrap_or(threads),
            seconds: self.total_seconds,
            ops_per_second: self.tps,
            queries_per_second: self.qps,
            lat_mean_ns: ms(self.lat_avg_ms),
            lat_p99_ns: ms(self.lat_pct_ms),
            lat_p99_avg_ns: (!p99s.is_empty())
                .then(|| ms(p99s.iter().sum::<f64>() / p99s.len() as f64)),
            errors: self.errors,
            reconnects: self.reconnects,
            intervals,
            // sysbench does not know; the oltp runner sets it from the server's files.
            direct_io: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> String {
        let p = std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
            .join("tests/fixtures/app/sysbench")
            .join(name);
        std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    }

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= 1e-6 * b.abs().max(1.0)
    }

    #[test]
    fn captured_1_0_20_two_threads() {
        let r = parse(&fixture("1.0.20-oltp_read_write-2threads.txt")).unwrap();
        assert_eq!(r.version.as_deref(), Some("1.0.20"));
        assert_eq!(r.threads, Some(2));
        assert_eq!(r.transactions, 1197);
        assert!(close(r.tps, 396.18));
        assert_eq!(r.queries, Some(23940));
        assert!(close(r.qps.unwrap(), 7923.57));
        assert_eq!((r.errors, r.reconnects), (0, 0));
        assert!(close(r.total_seconds, 3.0201));
        assert!(close(r.lat_min_ms, 0.80));
        assert!(close(r.lat_avg_ms, 5.03));
        assert!(close(r.lat_max_ms, 32.89));
        assert_eq!(r.percentile, 99);
        assert!(close(r.lat_pct_ms, 21.50));
        assert_eq!(r.intervals.len(), 3);
        let i = &r.intervals[1];
        assert!(close(i.end_seconds, 2.0));
        assert_eq!(i.threads, Some(2));
        assert!(close(i.tps, 332.01));
        assert!(close(i.qps.unwrap(), 6628.15));
        assert!(close(i.lat_pct_ms.unwrap(), 23.95));

        let p = r.to_point("oltp_read_write", 2);
        assert_eq!(p.threads, 2);
        assert!(close(p.ops_per_second, 396.18));
        assert!(close(p.lat_mean_ns, 5.03e6));
        assert!(close(p.lat_p99_ns, 21.50e6));
        let avg = (18.95 + 23.95 + 23.10) / 3.0 * 1e6;
        assert!(close(p.lat_p99_avg_ns.unwrap(), avg));
        assert_eq!(p.intervals.len(), 3);
        assert!(close(p.intervals[2].lat_p99_ns.unwrap(), 23.10e6));
    }

    #[test]
    fn captured_1_0_20_eight_threads() {
        let r = parse(&fixture("1.0.20-oltp_read_write-8threads.txt")).unwrap();
        assert_eq!(r.threads, Some(8));
        assert_eq!(r.transactions, 2032);
        assert!(close(r.tps, 669.91));
        assert!(close(r.lat_avg_ms, 11.83));
        assert!(close(r.lat_pct_ms, 45.79));
        assert_eq!(r.intervals.len(), 3);
        assert!(r.intervals.iter().all(|i| i.threads == Some(8)));
    }

    #[test]
    fn a_failed_connection_is_no_summary_with_sysbench_s_reason() {
        let text = fixture("1.0.20-connect-failed.txt");
        let e = parse(&text).unwrap_err();
        assert!(matches!(e, SysbenchParseError::NoSummary(_)));
        let msg = e.to_string();
        assert!(msg.contains("Thread initialization failed"), "{msg}");
        assert!(fatal_lines(&text)[1].contains("error 2002"));
    }

    #[test]
    fn legacy_0_5_layout() {
        let r = parse(&fixture("0.5-oltp-legacy.txt")).unwrap();
        assert_eq!(r.version.as_deref(), Some("0.5"));
        assert_eq!(r.threads, Some(4));
        assert_eq!(r.transactions, 3081);
        assert!(close(r.tps, 1026.75));
        // read/write requests and other operations together.
        assert_eq!(r.queries, Some(55476 + 6164));
        assert!(close(r.qps.unwrap(), 18487.53 + 2054.18));
        assert_eq!(r.errors, 1);
        assert!(close(r.total_seconds, 3.0007));
        assert!(close(r.lat_avg_ms, 3.89));
        assert!(close(r.lat_max_ms, 42.73));
        assert_eq!(r.percentile, 99);
        assert!(close(r.lat_pct_ms, 5.59));
        assert_eq!(r.intervals.len(), 3);
        let i = &r.intervals[2];
        assert!(close(i.end_seconds, 3.0));
        assert_eq!(i.threads, Some(4));
        assert!(close(i.tps, 998.00));
        assert!(close(i.qps.unwrap(), 13972.03 + 3992.01));
        assert!(close(i.lat_pct_ms.unwrap(), 6.11));
        assert!(close(i.errors_per_second, 1.0));
    }

    #[test]
    fn layout_1_1_with_throughput_block() {
        let r = parse(&fixture("1.1.0-oltp_read_write.txt")).unwrap();
        assert_eq!(r.version.as_deref(), Some("1.1.0-df89d34"));
        assert_eq!(r.threads, Some(16));
        assert_eq!(r.transactions, 4486);
        assert!(close(r.tps, 1121.25));
        assert!(close(r.total_seconds, 4.0009));
        assert_eq!(r.errors, 1);
        assert!(close(r.lat_avg_ms, 14.26));
        assert!(close(r.lat_pct_ms, 44.98));
        assert_eq!(r.intervals.len(), 4);
        assert!(close(r.intervals[2].lat_pct_ms.unwrap(), 81.48));
        let p = r.to_point("oltp_read_write", 16);
        assert!(p.lat_p99_ns >= p.lat_mean_ns);
        let avg = (31.94 + 33.12 + 81.48 + 32.53) / 4.0 * 1e6;
        assert!(close(p.lat_p99_avg_ns.unwrap(), avg));
    }

    #[test]
    fn idle_intervals_do_not_lower_the_average_p99() {
        let text = "[ 1s ] thds: 2 tps: 0.00 qps: 0.00 (r/w/o: 0.00/0.00/0.00) lat (ms,99%): 0.00 err/s: 0.00 reconn/s: 0.00\n\
                    [ 2s ] thds: 2 tps: 10.00 qps: 200.00 (r/w/o: 140.00/40.00/20.00) lat (ms,99%): 8.00 err/s: 0.00 reconn/s: 0.00\n\
                    transactions: 10 (5.00 per sec.)\n\
                    total time: 2.0s\n\
                    Latency (ms):\n min: 1.0\n avg: 2.0\n max: 9.0\n 99th percentile: 8.0\n";
        let p = parse(text).unwrap().to_point("oltp_read_write", 2);
        assert!(close(p.lat_p99_avg_ns.unwrap(), 8e6));
        assert_eq!(p.intervals.len(), 2);
    }

    #[test]
    fn missing_pieces_are_named() {
        assert_eq!(parse(""), Err(SysbenchParseError::NoSummary(vec![])));
        let no_lat = "transactions: 10 (5.00 per sec.)\ntotal time: 2.0s\n";
        assert_eq!(parse(no_lat), Err(SysbenchParseError::NoLatency));
        let no_pct = format!("{no_lat}Latency (ms):\n min: 1\n avg: 2\n max: 3\n");
        assert_eq!(parse(&no_pct), Err(SysbenchParseError::NoPercentile));
        assert!(parse("transactions: lots\n").is_err());
    }

    #[test]
    fn arbitrary_text_never_panics() {
        let base = fixture("1.0.20-oltp_read_write-8threads.txt");
        let bytes = base.as_bytes();
        let mut x: u64 = 0x9e3779b97f4a7c15;
        for _ in 0..2000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let cut = (x as usize) % bytes.len();
            let mut v = bytes[..cut].to_vec();
            v.extend_from_slice(&bytes[(cut + (x >> 32) as usize % 16).min(bytes.len())..]);
            if let Some(b) = v.get_mut((x >> 20) as usize % bytes.len()) {
                *b = (x >> 40) as u8;
            }
            let _ = parse(&String::from_utf8_lossy(&v));
        }
    }
}
