//! Load: 200 concurrent clients scrape the real daemon's `/metrics` for 30 s (half on
//! keep-alive connections, half with a new connection per request) while the daemon runs
//! a read canary at a known rate on a file target in /dev/shm. Asserted: no error at all;
//! the daemon's RSS stays bounded; the canary keeps its rate (within 20%) and its p99
//! latency stays under a ceiling. It prints the figures as a table.
//!
//! The machine this runs on has 2 cores, shared with other work; the bounds are chosen to
//! mean something (a canary starved by the HTTP side would miss its rate and show
//! tens-of-milliseconds latencies) without flaking on a busy machine.

use crate::common;

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::daemon::{file_drive, Daemon, Exposition};

const CLIENTS: usize = 200;
const LOAD: Duration = Duration::from_secs(30);
/// The canary's configured rate (I/Os per second) and latency window.
const RATE_IOPS: f64 = 200.0;
const WINDOW: &str = "5s";
/// The canary's p99 over its window must stay under this during the load, or under twice
/// its worst before the load when the machine was already that noisy. Quiet, the p99 is a
/// few milliseconds before and during the load; with other builds on the same 2 cores it
/// was seen at 37 ms during the load (and 55 ms before it), so 100 ms does not flake yet
/// still catches a canary starved by the HTTP side.
const P99_CEILING_S: f64 = 0.100;
/// The daemon's peak RSS must stay under this.
const RSS_CEILING_KIB: u64 = 64 * 1024;

fn rss_kib(pid: i32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn labels() -> [(&'static str, &'static str); 3] {
    [("drive", "d"), ("probe", "rd"), ("op", "read")]
}

fn ops(e: &Exposition) -> f64 {
    e.value("driveprobe_probe_ops_total", &labels())
        .expect("the canary's ops counter")
}

fn p99(e: &Exposition) -> Option<f64> {
    let l = labels();
    e.value(
        "driveprobe_probe_latency_quantile_seconds",
        &[l[0], l[1], l[2], ("quantile", "0.99")],
    )
}

/// Reads one response to `GET /metrics` on `s`: Ok(true) for a whole 200 answer.
fn read_one(s: &mut TcpStream, buf: &mut Vec<u8>) -> Result<bool, String> {
    buf.clear();
    let mut chunk = [0u8; 65536];
    let mut want: Option<usize> = None;
    loop {
        if let Some(w) = want {
            if buf.len() >= w {
                break;
            }
        }
        let n = s.read(&mut chunk).map_err(|e| format!("read: {e}"))?;
        if n == 0 {
            return Err(format!("closed after {} bytes", buf.len()));
        }
        buf.extend_from_slice(&chunk[..n]);
        if want.is_none() {
            if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
                let len: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse().ok())
                    .ok_or("no content-length")?;
                if !head.starts_with("http/1.1 200 ") {
                    return Err(head.lines().next().unwrap_or("").to_string());
                }
                want = Some(end + 4 + len);
            }
        }
    }
    if want != Some(buf.len()) {
        return Err("more bytes than the content-length".into());
    }
    Ok(true)
}

#[derive(Default)]
struct Tally {
    requests: AtomicU64,
    errors: AtomicU64,
    connections: AtomicU64,
    first_errors: Mutex<Vec<String>>,
}

impl Tally {
    fn error(&self, e: String) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        let mut f = self.first_errors.lock().unwrap();
        if f.len() < 10 {
            f.push(e);
        }
    }
}

/// One client until `until`: keep-alive (many requests per connection) or not.
fn client(addr: String, keep_alive: bool, until: Instant, tally: Arc<Tally>) {
    let mut buf = Vec::with_capacity(1 << 20);
    let req_ka = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
    let req_close = b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    while Instant::now() < until {
        let mut s = match TcpStream::connect(&addr) {
            Ok(s) => s,
            Err(e) => {
                tally.error(format!("connect: {e}"));
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
        };
        tally.connections.fetch_add(1, Ordering::Relaxed);
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let _ = s.set_nodelay(true);
        loop {
            let req: &[u8] = if keep_alive { req_ka } else { req_close };
            if let Err(e) = s.write_all(req) {
                tally.error(format!("send: {e}"));
                break;
            }
            match read_one(&mut s, &mut buf) {
                Ok(_) => {
                    tally.requests.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) => {
                    tally.error(e);
                    break;
                }
            }
            if !keep_alive || Instant::now() >= until {
                break;
            }
        }
        if !keep_alive {
            // The server closes after `Connection: close`: see the EOF.
            let mut b = [0u8; 16];
            match s.read(&mut b) {
                Ok(0) => {}
                Ok(n) => tally.error(format!("{n} stray bytes after a closed response")),
                Err(e) if e.kind() == ErrorKind::ConnectionReset => {}
                Err(e) => tally.error(format!("waiting for EOF: {e}")),
            }
        }
    }
}

#[test]
fn two_hundred_scrapers_for_thirty_seconds() {
    let dir = tempfile::Builder::new()
        .prefix("dp-httpload-")
        .tempdir_in("/dev/shm")
        .unwrap();
    let d = dir.path();
    let cfg = d.join("driveprobe.toml");
    std::fs::write(
        &cfg,
        format!(
            "state_dir = \"{}\"\ndiscovery.enabled = false\nhealth_interval = \"2s\"\n\n{}\
             [[probe]]\nname = \"rd\"\ndrives = [\"d\"]\nwindow = \"{WINDOW}\"\n\
             workload = {{ rate_iops = {RATE_IOPS}, arrival = \"linear\" }}\n",
            d.join("state").display(),
            file_drive("d", &d.join("d.dat"), "64MiB"),
        ),
    )
    .unwrap();
    let daemon = Daemon::start(&cfg, &[("RUST_LOG", "driveprobe=info")]);
    let pid = daemon.pid();

    // Before: the canary's window full of quiet I/O, then 5 s of it measured.
    daemon.wait_for("the canary's window", Duration::from_secs(30), |e| {
        p99(e).is_some() && ops(e) > RATE_IOPS * 6.0
    });
    let e0 = daemon.scrape();
    let t0 = Instant::now();
    let mut before_p99 = Vec::new();
    for _ in 0..5 {
        std::thread::sleep(Duration::from_secs(1));
        before_p99.extend(p99(&daemon.scrape()));
    }
    let e1 = daemon.scrape();
    let before_rate = (ops(&e1) - ops(&e0)) / t0.elapsed().as_secs_f64();
    let rss_before = rss_kib(pid);

    // The RSS, sampled every 100 ms from here to the end.
    let stop = Arc::new(AtomicBool::new(false));
    let peak = Arc::new(AtomicU64::new(rss_before));
    let sampler = {
        let (stop, peak) = (stop.clone(), peak.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                peak.fetch_max(rss_kib(pid), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };

    // The load.
    let tally = Arc::new(Tally::default());
    let start = Instant::now();
    let until = start + LOAD;
    let clients: Vec<_> = (0..CLIENTS)
        .map(|i| {
            let (addr, tally) = (daemon.addr.clone(), tally.clone());
            std::thread::Builder::new()
                .stack_size(256 << 10)
                .spawn(move || client(addr, i % 2 == 0, until, tally))
                .unwrap()
        })
        .collect();
    // During: after one window (the window then holds only I/O under load), the canary's
    // p99 every second, and its ops over the rest of the load.
    std::thread::sleep(Duration::from_secs(6));
    let l0 = daemon.scrape();
    let tl0 = Instant::now();
    let mut during_p99 = Vec::new();
    while Instant::now() + Duration::from_millis(1500) < until {
        std::thread::sleep(Duration::from_secs(1));
        during_p99.extend(p99(&daemon.scrape()));
    }
    let l1 = daemon.scrape();
    let during_rate = (ops(&l1) - ops(&l0)) / tl0.elapsed().as_secs_f64();
    for c in clients {
        c.join().unwrap();
    }
    let took = start.elapsed();
    let rss_peak = peak.load(Ordering::Relaxed);

    // After: a moment for the connections to go.
    std::thread::sleep(Duration::from_secs(2));
    stop.store(true, Ordering::Relaxed);
    sampler.join().unwrap();
    let rss_after = rss_kib(pid);
    let end = daemon.scrape();
    let canary_errors = end
        .value("driveprobe_probe_errors_total", &labels())
        .unwrap_or(f64::NAN);

    let requests = tally.requests.load(Ordering::Relaxed);
    let errors = tally.errors.load(Ordering::Relaxed);
    let conns = tally.connections.load(Ordering::Relaxed);
    let max = |v: &[f64]| v.iter().cloned().fold(f64::NAN, f64::max);
    let med = |v: &[f64]| {
        let mut v = v.to_vec();
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
    };
    let ms = |s: f64| s * 1e3;
    println!("\nHTTP load: {CLIENTS} clients ({} keep-alive, {} new connection per request) on /metrics for {took:.1?}", CLIENTS / 2, CLIENTS / 2);
    println!("| figure | before load | during load | after load |");
    println!("| --- | --- | --- | --- |");
    println!(
        "| daemon RSS (MiB) | {:.1} | peak {:.1} | {:.1} |",
        rss_before as f64 / 1024.0,
        rss_peak as f64 / 1024.0,
        rss_after as f64 / 1024.0
    );
    println!(
        "| canary rate (IOPS, configured {RATE_IOPS}) | {before_rate:.1} | {during_rate:.1} | |"
    );
    println!(
        "| canary p99 over {WINDOW} (ms), median / max of 1 s samples | {:.3} / {:.3} | {:.3} / {:.3} | |",
        ms(med(&before_p99)),
        ms(max(&before_p99)),
        ms(med(&during_p99)),
        ms(max(&during_p99))
    );
    println!(
        "| scrapes served | | {requests} ({:.0}/s) over {conns} connections | |",
        requests as f64 / took.as_secs_f64()
    );
    println!("| client errors | | {errors} | |");
    println!("| canary I/O errors (total) | | | {canary_errors} |");
    let first = tally.first_errors.lock().unwrap().clone();

    assert_eq!(
        errors, 0,
        "errors during the load; the first ones: {first:?}"
    );
    assert!(
        requests >= 2_000,
        "only {requests} scrapes were served in {took:?}"
    );
    assert!(
        !before_p99.is_empty() && during_p99.len() >= 10,
        "{before_p99:?} {during_p99:?}"
    );
    assert!(
        (during_rate - RATE_IOPS).abs() <= 0.2 * RATE_IOPS,
        "the canary ran at {during_rate:.1} IOPS under load (configured {RATE_IOPS}, {before_rate:.1} before)"
    );
    let ceiling = P99_CEILING_S.max(2.0 * max(&before_p99));
    println!("p99 ceiling under load: {:.1} ms", ms(ceiling));
    assert!(
        max(&during_p99) < ceiling,
        "the canary's p99 reached {:.3} ms under load (ceiling {:.1} ms; {:.3} ms before)",
        ms(max(&during_p99)),
        ms(ceiling),
        ms(max(&before_p99))
    );
    assert_eq!(canary_errors, 0.0);
    assert!(
        rss_peak < RSS_CEILING_KIB,
        "peak RSS {rss_peak} KiB (ceiling {RSS_CEILING_KIB} KiB)"
    );
    // The memory the load took is given back, mostly (allocator caches may keep some).
    assert!(
        rss_after <= rss_before + (rss_peak - rss_before.min(rss_peak)) / 2 + 16 * 1024,
        "RSS after the load {rss_after} KiB (before {rss_before}, peak {rss_peak})"
    );
    // The daemon is still well.
    assert_eq!(daemon.get("/healthz").0, 200);
    let (st, _) = daemon.terminate(Duration::from_secs(10));
    assert!(st.success(), "{st}");
}
