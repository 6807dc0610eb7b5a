//! The daemon's HTTP server (`driveprobe::http::serve`) over real sockets: every route,
//! methods, HEAD, escaping, `/healthz` by the scheduler's heartbeat, `/metrics`
//! negotiation, the connection cap against idle clients, the header timeout against a
//! slowloris client, shutdown, and the status page in headless Chromium (Debian's
//! `chromium`; `scripts/test` installs it).
//!
//! Each test runs its own server on 127.0.0.1:0 in a tokio runtime on a helper thread and
//! talks raw HTTP/1.1 to it over `std::net::TcpStream`.

use crate::common;

use common::chromium;
use common::http::Resp;
use std::collections::BTreeMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use driveprobe::health::endurance::{Basis, Endurance};
use driveprobe::health::model::{HealthReport, Identity, Verdict};
use driveprobe::schedule::{RunRecord, RunStatus};
use driveprobe::status::{
    CollectorStatus, ConfigStatus, DriveStatus, HealthState, HealthStatus, OpStatus, ProbeState,
    SchedulerStatus, Shared, Status, WearStatus, WindowQuantiles,
};
use tokio::sync::watch;

// ------------------------------------------------------------------ the status

const EVIL: &str = "old&<script>alert('pwned')</script>";
const RUN_WITH_REPORT: &str = "20261130T030000Z-db1-enterprise";
const RUN_NO_DOC: &str = "20261129T030000Z-db1-latency";
const RUN_BAD_DOC: &str = "bad-doc";
const RUN_GONE_DOC: &str = "gone-doc";

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/results")
        .join(name)
}

fn op(ops: u64, errors: u64, p50: f64) -> OpStatus {
    OpStatus {
        ops_total: ops,
        bytes_total: ops * 4096,
        errors_total: errors,
        device_errors_total: errors,
        last_host_error: None,
        latency_sum_seconds: ops as f64 * p50 * 1.1,
        buckets: vec![ops; driveprobe::status::LATENCY_BUCKETS.len()],
        window: Some(WindowQuantiles {
            ops: 3000,
            quantiles: [p50, p50 * 1.6, p50 * 3.0, p50 * 9.0],
            max: p50 * 40.0,
        }),
    }
}

/// Two drives (db1 up, with health, endurance, probes and runs; one down whose name and
/// reason need escaping) and four runs. `bad_doc` is a file that is not a result document.
fn status(bad_doc: &Path) -> Status {
    let t = now();
    let mut drives = BTreeMap::new();

    let identity = common::fixtures::sas_ssd();
    let mut probes = BTreeMap::new();
    probes.insert(
        "canary-4k-read".to_string(),
        common::fixtures::read_canary(op(1_234_567, 2, 95e-6), 0.3),
    );
    probes.insert(
        "canary-4k-verify".to_string(),
        common::fixtures::verify_canary(
            ProbeState::Paused {
                reason: "the canaries' wear budget for today is spent".into(),
            },
            op(50_000, 0, 110e-6),
            op(50_000, 0, 30e-6),
            12.5,
        ),
    );
    let mut collectors = BTreeMap::new();
    for c in ["identity", "health", "canary"] {
        collectors.insert(
            c.to_string(),
            CollectorStatus {
                success: true,
                duration_seconds: 0.01,
                last_unix: t - 5.0,
                error: None,
            },
        );
    }
    drives.insert(
        "db1".to_string(),
        DriveStatus {
            health_detail_metrics_off: false,
            name: "db1".into(),
            up: true,
            down_reason: None,
            device: Some("/dev/sdb".into()),
            target: Some("/srv/db/.driveprobe".into()),
            identity: identity.clone(),
            health: Some(HealthStatus {
                report: HealthReport {
                    identity: identity.clone(),
                    temperature_celsius: Some(41.0),
                    temperature_warning_celsius: Some(70.0),
                    percentage_used_ratio: Some(0.12),
                    ..Default::default()
                },
                verdict: Verdict::Warning,
                reasons: vec!["2 media errors over the drive's life".into()],
                read_unix: t - 60.0,
            }),
            endurance: Some(Endurance {
                rated_bytes: Some(7.3e15),
                rated_drive_writes_per_day: Some(10.0),
                used_ratio: Some(0.12),
                used_basis: Some(Basis::Vendor),
                drive_writes_per_day: Some(0.35),
                rate_basis: Some(Basis::History),
                days_left: Some(9000.0),
                projected_wearout_unix_seconds: Some(t + 9000.0 * 86_400.0),
                ..Default::default()
            }),
            collectors,
            probes,
            health_state: HealthState::Read {
                read_unix: t - 60.0,
            },
            wear: WearStatus {
                self_written_bytes_total: 9_000_000_000,
                written_today_bytes: 300_000_000,
                budget_bytes_per_day: 4e9,
                exceeded: false,
                ..Default::default()
            },
            last_runs: BTreeMap::new(),
            skipped: BTreeMap::new(),
            discovered: Some(driveprobe::config::Discovered {
                class: driveprobe::config::Class::Ssd,
                transport: driveprobe::config::Transport::Sas,
                kernel_name: "sdb".into(),
                source: driveprobe::config::Source::Sysfs,
            }),
            load: Some(driveprobe::load::DriveLoad::new("sdb", 81_234, 312.5, 2)),
            self_test: Default::default(),
        },
    );
    let mut collectors = BTreeMap::new();
    collectors.insert(
        "identity".to_string(),
        CollectorStatus {
            success: false,
            duration_seconds: 0.0,
            last_unix: t - 5.0,
            error: Some("serial mismatch: expected <S1>, found <S2>".into()),
        },
    );
    drives.insert(
        EVIL.to_string(),
        DriveStatus {
            health_detail_metrics_off: false,
            name: EVIL.into(),
            up: false,
            down_reason: Some("identity mismatch: <b>S2</b> is not S1".into()),
            identity: Identity {
                model: Some("Evil <img src=x onerror=alert(1)> Model".into()),
                ..Default::default()
            },
            collectors,
            health_state: HealthState::Failed {
                reason: "smartctl refused /dev/<sdz>".into(),
                attempts: 9,
                since_unix: t - 540.0,
            },
            ..Default::default()
        },
    );

    let run =
        |id: &str, suite: &str, started: f64, status: RunStatus, path: Option<PathBuf>| RunRecord {
            id: id.into(),
            suite: suite.into(),
            drive: "db1".into(),
            schedule: Some("weekly-characterisation".into()),
            started: started as i64,
            ended: Some(started as i64 + 3600),
            status,
            result_path: path,
            reason: None,
            write_bound_bytes: None,
            stop: None,
            written_bytes: None,
        };
    let runs = vec![
        run(
            RUN_BAD_DOC,
            "enterprise",
            t - 4.0 * 86_400.0,
            RunStatus::Passed,
            Some(bad_doc.to_path_buf()),
        ),
        run(
            RUN_GONE_DOC,
            "enterprise",
            t - 3.0 * 86_400.0,
            RunStatus::Passed,
            Some("/nonexistent/driveprobe/result.json".into()),
        ),
        run(
            RUN_NO_DOC,
            "latency",
            t - 2.0 * 86_400.0,
            RunStatus::Failed,
            None,
        ),
        run(
            RUN_WITH_REPORT,
            "enterprise",
            t - 86_400.0,
            RunStatus::Passed,
            Some(fixture("enterprise-sas-ssd800mm.json")),
        ),
    ];
    let mut next_due = BTreeMap::new();
    next_due.insert("weekly-characterisation".to_string(), t as i64 + 3 * 86_400);
    Status {
        started_unix: t - 7200.0,
        config: ConfigStatus {
            path: Some("/etc/driveprobe/driveprobe.toml".into()),
            last_reload_successful: true,
            last_reload_success_unix: t - 7200.0,
            last_error: None,
        },
        drives,
        runs,
        run_notes: BTreeMap::new(),
        scheduler: SchedulerStatus {
            last_tick_unix: t,
            next_due,
            running: BTreeMap::new(),
            ..Default::default()
        },
        discovery: None,
        state: Default::default(),
        threads: Default::default(),
    }
}

// ------------------------------------------------------------------ the server

/// A server on its own thread and runtime; stopped (and joined) on drop.
struct Server {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: watch::Sender<bool>,
    thread: Option<JoinHandle<std::io::Result<()>>>,
    _dir: tempfile::TempDir,
}

impl Server {
    fn start() -> Server {
        let dir = tempfile::tempdir().unwrap();
        let bad = dir.path().join("bad.json");
        std::fs::write(&bad, b"{this is not json").unwrap();
        let shared = Arc::new(Shared::new(status(&bad)));
        // The documents as the daemon keeps them: runs/ID.json in its state directory
        // (the route reads there, whatever path a record names).
        let state = driveprobe::statedir::StateDir::open(&dir.path().join("state")).unwrap();
        let runs = dir.path().join("state/runs");
        std::fs::copy(&bad, runs.join(format!("{RUN_BAD_DOC}.json"))).unwrap();
        std::fs::copy(
            fixture("enterprise-sas-ssd800mm.json"),
            runs.join(format!("{RUN_WITH_REPORT}.json")),
        )
        .unwrap();
        shared.set_state_dir(Arc::new(state));
        let (stop, rx) = watch::channel(false);
        let (tx_addr, rx_addr) = std::sync::mpsc::channel();
        let s = shared.clone();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
                tx_addr.send(listener.local_addr()?).unwrap();
                driveprobe::http::serve(listener, s, rx).await
            })
        });
        let addr = rx_addr
            .recv_timeout(Duration::from_secs(10))
            .expect("the server did not start");
        Server {
            addr,
            shared,
            stop,
            thread: Some(thread),
            _dir: dir,
        }
    }

    /// Flips the shutdown flag and waits for `serve` to return; how long that took.
    fn shutdown(&mut self) -> Duration {
        let t0 = Instant::now();
        let _ = self.stop.send(true);
        if let Some(t) = self.thread.take() {
            while !t.is_finished() {
                assert!(
                    t0.elapsed() < Duration::from_secs(10),
                    "serve did not return after shutdown"
                );
                std::thread::sleep(Duration::from_millis(10));
            }
            t.join().unwrap().expect("serve returned an error");
        }
        t0.elapsed()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

// ------------------------------------------------------------------ a raw HTTP/1.1 client

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(20))).unwrap();
    s
}

fn parse(raw: &[u8]) -> Resp {
    common::http::parse(raw).unwrap_or_else(|e| panic!("{e}"))
}

/// Sends `method path` with `extra` header lines and `Connection: close`, reads to EOF.
fn request(addr: SocketAddr, method: &str, path: &str, extra: &str) -> Resp {
    let mut s = connect(addr);
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\n{extra}Connection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let r = parse(&raw);
    if let Some(len) = r.header("content-length") {
        if method != "HEAD" {
            assert_eq!(
                len.parse::<usize>().unwrap(),
                r.body.len(),
                "{method} {path}"
            );
        }
    }
    r
}

fn get(addr: SocketAddr, path: &str) -> Resp {
    request(addr, "GET", path, "")
}

fn one_line(r: &Resp) -> String {
    let t = r.text();
    assert!(t.ends_with('\n') && t.matches('\n').count() == 1, "{t:?}");
    assert!(r.content_type().starts_with("text/plain"), "{r:?}");
    t
}

// ------------------------------------------------------------------ routes

const ROUTES: [&str; 7] = [
    "/",
    "/metrics",
    "/healthz",
    "/api/v1/drives",
    "/api/v1/runs",
    "/api/v1/scheduler",
    "/runs/20261130T030000Z-db1-enterprise/report",
];

#[test]
fn every_route_answers_with_its_content_type() {
    let srv = Server::start();
    let a = srv.addr;

    let r = get(a, "/");
    assert_eq!(r.status, 200);
    assert_eq!(r.content_type(), "text/html; charset=utf-8");
    let page = r.text();
    assert!(page.starts_with("<!doctype html>"));
    assert!(page.contains("<meta http-equiv=\"refresh\" content=\"10\">"));
    for link in ["/metrics", "/api/v1/drives", "/api/v1/runs", "/healthz"] {
        assert!(page.contains(&format!("href=\"{link}\"")), "{link}");
    }
    assert!(page.contains(&format!("href=\"/runs/{RUN_WITH_REPORT}/report\"")));
    assert!(page.contains("HGST HUSMM1640ASS200") && page.contains("0QV1K5XA"));
    assert!(page.contains("A204") && page.contains("41 °C") && page.contains("12%"));
    assert!(page.contains("canary-4k-read") && page.contains("95.0 µs"));
    assert!(page.contains("1,234,567"));
    assert!(page.contains("weekly-characterisation"));
    assert!(page.contains("/etc/driveprobe/driveprobe.toml"));
    assert!(!page.contains("<script"), "no scripts on the page");
    assert!(!page.contains("http://") && !page.contains("https://"));
    assert!(r.header("content-security-policy").is_some());

    let r = get(a, "/metrics");
    assert_eq!(r.status, 200);
    assert_eq!(r.content_type(), "text/plain; version=0.0.4; charset=utf-8");
    assert!(r.text().contains("driveprobe_"), "{}", r.text());

    let r = get(a, "/healthz");
    assert_eq!((r.status, r.text().as_str()), (200, "ok\n"));
    assert!(r.content_type().starts_with("text/plain"));

    let r = get(a, "/api/v1/drives");
    assert_eq!(r.status, 200);
    assert_eq!(r.content_type(), "application/json");
    let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    let names: Vec<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["db1", EVIL]);
    assert_eq!(v[0]["up"], true);
    assert_eq!(v[1]["up"], false);
    assert_eq!(v[0]["identity"]["serial"], "0QV1K5XA");
    assert_eq!(
        v[0]["probes"]["canary-4k-read"]["read"]["ops_total"],
        1_234_567
    );

    let r = get(a, "/api/v1/runs");
    assert_eq!(r.status, 200);
    assert_eq!(r.content_type(), "application/json");
    let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    let runs = v.as_array().unwrap();
    let ids: Vec<&str> = runs.iter().map(|r| r["id"].as_str().unwrap()).collect();
    assert_eq!(
        ids,
        [RUN_WITH_REPORT, RUN_NO_DOC, RUN_GONE_DOC, RUN_BAD_DOC],
        "newest first"
    );
    assert_eq!(
        runs[0]["report"],
        format!("/runs/{RUN_WITH_REPORT}/report").as_str()
    );
    assert!(
        runs[1].get("report").is_none(),
        "no document, no report link"
    );
    assert_eq!(runs[0]["status"], "passed");
    assert_eq!(runs[0]["suite"], "enterprise");

    let r = get(a, &format!("/runs/{RUN_WITH_REPORT}/report"));
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.content_type(), "text/html; charset=utf-8");
    let html = r.text();
    assert!(html.contains("<svg"), "the report has its charts");
    assert!(html.contains("HGST HUSMM1640ASS200"));
    let expected = {
        let path = fixture("enterprise-sas-ssd800mm.json");
        let doc = driveprobe::report::load(&path).unwrap();
        let label = driveprobe::report::document_label(&path, &doc);
        driveprobe::report::render(&[(label, doc)])
    };
    assert_eq!(html, expected, "the report module's page, as it renders it");

    for path in ROUTES {
        let r = get(a, path);
        assert_eq!(r.header("cache-control"), Some("no-store"), "{path}");
        assert_eq!(
            r.header("x-content-type-options"),
            Some("nosniff"),
            "{path}"
        );
    }
}

#[test]
fn head_has_the_get_headers_and_no_body() {
    let srv = Server::start();
    for path in ROUTES.into_iter().chain(["/nope", "/runs/unknown/report"]) {
        let g = get(srv.addr, path);
        let h = request(srv.addr, "HEAD", path, "");
        assert_eq!(h.status, g.status, "{path}");
        assert_eq!(h.content_type(), g.content_type(), "{path}");
        assert!(h.body.is_empty(), "HEAD {path} sent {} bytes", h.body.len());
        if path != "/metrics" && path != "/" {
            // (The metrics and the page have times in them and may change length.)
            assert_eq!(
                h.header("content-length"),
                Some(g.body.len().to_string().as_str()),
                "{path}"
            );
        } else {
            assert!(
                h.header("content-length")
                    .unwrap()
                    .parse::<usize>()
                    .unwrap()
                    > 100
            );
        }
    }
}

#[test]
fn other_methods_get_405_with_allow() {
    let srv = Server::start();
    for method in ["POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "FOO"] {
        for path in ["/", "/metrics", "/api/v1/runs", "/nope"] {
            let r = request(srv.addr, method, path, "");
            assert_eq!(r.status, 405, "{method} {path}");
            assert_eq!(r.header("allow"), Some("GET, HEAD"), "{method} {path}");
            one_line(&r);
        }
    }
    // A body is never read, however much is announced.
    let r = request(
        srv.addr,
        "POST",
        "/metrics",
        "Content-Type: text/plain\r\nContent-Length: 5\r\n",
    );
    assert_eq!(r.status, 405);
    let r = request(
        srv.addr,
        "POST",
        "/metrics",
        "Expect: 100-continue\r\nContent-Length: 1000000000\r\n",
    );
    assert_eq!(r.status, 405);
    assert!(!String::from_utf8_lossy(&r.body).contains("100 Continue"));
    // The server is still there.
    assert_eq!(get(srv.addr, "/healthz").status, 200);
}

#[test]
fn unknown_paths_and_bad_run_ids_are_404() {
    let srv = Server::start();
    let long = format!("/runs/{}/report", "a".repeat(300));
    for path in [
        "/nope",
        "/metrics/",
        "/api/v1",
        "/api/v1/drives/db1",
        "/index.html",
        "/runs",
        "/runs/",
        "/runs//report",
        "/runs/../report",
        "/runs/..%2F..%2Fetc%2Fpasswd/report",
        "/runs/%3Cscript%3E/report",
        "/runs/a/b/report",
        "/runs/unknown-run/report",
        long.as_str(),
    ] {
        let r = get(srv.addr, path);
        assert_eq!(r.status, 404, "{path}");
        one_line(&r);
    }
    // A known run without a document, or whose document is gone.
    for id in [RUN_NO_DOC, RUN_GONE_DOC] {
        let r = get(srv.addr, &format!("/runs/{id}/report"));
        assert_eq!(r.status, 404, "{id}");
        assert!(one_line(&r).contains(id));
    }
    // A document that cannot be read as one: 500, one line that says why.
    let r = get(srv.addr, &format!("/runs/{RUN_BAD_DOC}/report"));
    assert_eq!(r.status, 500);
    let line = one_line(&r);
    assert!(
        line.contains(&format!("{RUN_BAD_DOC}.json")) && line.contains("not valid JSON"),
        "{line}"
    );
    // Query strings do not change the route.
    assert_eq!(get(srv.addr, "/healthz?x=1&y=%3C").status, 200);
    // A request target that is not one is hyper's 400.
    assert_eq!(get(srv.addr, "/healthz?x=<y>").status, 400);
}

#[test]
fn strings_from_the_status_are_escaped() {
    let srv = Server::start();
    let page = get(srv.addr, "/").text();
    assert!(!page.contains("<script"), "raw script tag on the page");
    assert!(!page.contains("<img"), "raw img tag on the page");
    assert!(!page.contains("<b>S2</b>"));
    assert!(page.contains("old&amp;&lt;script&gt;alert(&#39;pwned&#39;)&lt;/script&gt;"));
    assert!(page.contains("Evil &lt;img src=x onerror=alert(1)&gt; Model"));
    assert!(page.contains("identity mismatch: &lt;b&gt;S2&lt;/b&gt; is not S1"));
    assert!(page.contains("serial mismatch: expected &lt;S1&gt;, found &lt;S2&gt;"));
    // In JSON they stay as they are.
    let drives = get(srv.addr, "/api/v1/drives");
    let v: serde_json::Value = serde_json::from_slice(&drives.body).unwrap();
    assert_eq!(v[1]["name"], EVIL);
}

#[test]
fn healthz_follows_the_scheduler_heartbeat() {
    let srv = Server::start();
    assert_eq!(get(srv.addr, "/healthz").text(), "ok\n");

    srv.shared.lock().scheduler.last_tick_unix = now() - 25.0;
    assert_eq!(get(srv.addr, "/healthz").status, 200);

    srv.shared.lock().scheduler.last_tick_unix = now() - 45.0;
    let r = get(srv.addr, "/healthz");
    assert_eq!(r.status, 503);
    let line = one_line(&r);
    assert!(
        line.contains("scheduler") && line.contains("45 s ago"),
        "{line}"
    );

    srv.shared.lock().scheduler.last_tick_unix = 0.0;
    let r = get(srv.addr, "/healthz");
    assert_eq!(r.status, 503);
    assert!(one_line(&r).contains("not run yet"));

    srv.shared.lock().scheduler.last_tick_unix = now();
    assert_eq!(get(srv.addr, "/healthz").status, 200);
}

#[test]
fn metrics_negotiate_openmetrics() {
    let srv = Server::start();
    // What Prometheus sends.
    let prom = "Accept: application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1\r\n";
    let r = request(srv.addr, "GET", "/metrics", prom);
    assert_eq!(r.status, 200);
    assert_eq!(
        r.content_type(),
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    );
    assert!(r.text().ends_with("# EOF\n"), "OpenMetrics ends with # EOF");
    assert!(r
        .header("vary")
        .is_some_and(|v| v.eq_ignore_ascii_case("accept")));

    for accept in [
        "",
        "Accept: text/plain\r\n",
        "Accept: */*\r\n",
        "Accept: text/plain;version=0.0.4\r\n",
        "Accept: é;;;q=x,,\r\n",
    ] {
        let r = request(srv.addr, "GET", "/metrics", accept);
        assert_eq!(r.status, 200, "{accept:?}");
        assert_eq!(
            r.content_type(),
            "text/plain; version=0.0.4; charset=utf-8",
            "{accept:?}"
        );
        assert!(!r.text().contains("# EOF"));
    }
    // Two Accept headers count as one list.
    let r = request(
        srv.addr,
        "GET",
        "/metrics",
        "Accept: text/plain;q=0.1\r\nAccept: application/openmetrics-text\r\n",
    );
    assert!(r.content_type().starts_with("application/openmetrics-text"));
}

// ------------------------------------------------------------------ robustness

#[test]
fn idle_connections_do_not_lock_out_a_request() {
    let srv = Server::start();
    // More idle connections than the cap (256): some say nothing, some start a request.
    let mut idle = Vec::new();
    for i in 0..300 {
        let mut s = connect(srv.addr);
        if i % 3 == 0 {
            s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
                .unwrap();
        }
        idle.push(s);
    }
    // Give the server time to accept them all.
    std::thread::sleep(Duration::from_millis(300));
    let t0 = Instant::now();
    let r = get(srv.addr, "/healthz");
    assert_eq!(r.status, 200);
    assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
    // And again, with keep-alive: several requests on one connection.
    let mut s = connect(srv.addr);
    for _ in 0..3 {
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let mut buf = [0u8; 1024];
        let n = s.read(&mut buf).unwrap();
        assert!(buf[..n].starts_with(b"HTTP/1.1 200 "));
    }
    // The oldest idle connections were closed to make room.
    let closed = idle
        .iter_mut()
        .take(60)
        .filter(|s| {
            let mut s: &TcpStream = s;
            s.set_read_timeout(Some(Duration::from_millis(200)))
                .unwrap();
            let mut b = [0u8; 64];
            match s.read(&mut b) {
                Ok(0) => true,
                Err(e) => e.kind() == ErrorKind::ConnectionReset,
                Ok(_) => false,
            }
        })
        .count();
    assert!(
        closed >= 40,
        "{closed} of the oldest 60 idle connections closed"
    );
}

#[test]
fn a_slowloris_client_is_closed() {
    let srv = Server::start();
    let mut s = connect(srv.addr);
    s.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n").unwrap();
    let t0 = Instant::now();
    // One header byte every half second, never the end of the headers.
    let closed = loop {
        assert!(
            t0.elapsed() < Duration::from_secs(25),
            "still open after {:?}",
            t0.elapsed()
        );
        if s.write_all(b"X").is_err() {
            break t0.elapsed();
        }
        let mut buf = [0u8; 512];
        match s.read(&mut buf) {
            Ok(0) => break t0.elapsed(),
            // hyper may answer 408 before it closes.
            Ok(n) => {
                let text = String::from_utf8_lossy(&buf[..n]);
                assert!(text.starts_with("HTTP/1.1 408"), "{text}");
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => break t0.elapsed(),
        }
    };
    assert!(
        closed >= Duration::from_secs(5) && closed <= Duration::from_secs(15),
        "closed after {closed:?} (header read timeout 10 s)"
    );
    assert_eq!(get(srv.addr, "/healthz").status, 200);
}

#[test]
fn shutdown_stops_the_server() {
    let mut srv = Server::start();
    let addr = srv.addr;
    // A keep-alive connection that is idle, and one in the middle of its headers.
    let mut idle = connect(addr);
    idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .unwrap();
    let mut buf = [0u8; 1024];
    assert!(idle.read(&mut buf).unwrap() > 0);
    let mut partial = connect(addr);
    partial.write_all(b"GET / HTTP/1.1\r\nHo").unwrap();
    std::thread::sleep(Duration::from_millis(100));

    let took = srv.shutdown();
    assert!(took < Duration::from_secs(3), "shutdown took {took:?}");
    for s in [&mut idle, &mut partial] {
        s.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        let mut rest = Vec::new();
        // EOF (possibly after hyper's error response) or a reset: closed either way.
        let _ = s.read_to_end(&mut rest);
    }
    assert!(
        TcpStream::connect_timeout(&addr, Duration::from_secs(2)).is_err(),
        "still accepting after shutdown"
    );
}

/// `html` with the values of every `name="..."` attribute removed.
fn without_attr(html: &str, name: &str) -> String {
    let open = format!("{name}=\"");
    let mut out = String::new();
    let mut rest = html;
    while let Some(i) = rest.find(&open) {
        out.push_str(&rest[..i + open.len()]);
        rest = &rest[i + open.len()..];
        rest = rest.find('"').map_or("", |j| &rest[j..]);
    }
    out.push_str(rest);
    out
}

#[test]
fn chromium_shows_the_drive_table() {
    let srv = Server::start();
    let profile = tempfile::tempdir().unwrap();
    let url = format!("http://{}/", srv.addr);
    let out = chromium(
        profile.path(),
        &["--dump-dom"],
        &url,
        Duration::from_secs(120),
    );
    common::assert_ok(&out, "chromium --dump-dom");
    let dom = String::from_utf8_lossy(&out.stdout);
    assert!(dom.contains("<table class=\"drives\">"), "{dom}");
    // (Chromium may leave `<` unescaped inside attribute values when it serializes.)
    let text = without_attr(&dom, "data-drive");
    assert_eq!(dom.matches("<tr class=\"drive up\"").count(), 1, "{dom}");
    assert_eq!(dom.matches("<tr class=\"drive down\"").count(), 1, "{dom}");
    assert!(dom.contains("data-drive=\"db1\""));
    assert!(dom.contains("HGST HUSMM1640ASS200"));
    // The escaped name is text in the DOM, not an element.
    assert!(
        dom.contains("old&amp;&lt;script&gt;alert('pwned')&lt;/script&gt;"),
        "{dom}"
    );
    assert!(!text.contains("<script"), "{text}");
    assert!(!text.contains("<img"), "{text}");
    // Runs and schedules made it too.
    assert!(dom.contains(&format!("href=\"/runs/{RUN_WITH_REPORT}/report\"")));
    assert_eq!(dom.matches("<tr class=\"run\"").count(), 4);
    assert_eq!(dom.matches("<tr class=\"schedule\"").count(), 1);

    // A screenshot to look at: target/tmp/status-page.png.
    let shot = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("status-page.png");
    let _ = std::fs::remove_file(&shot);
    let out = chromium(
        profile.path(),
        &[
            &format!("--screenshot={}", shot.display()),
            "--window-size=1500,1400",
        ],
        &url,
        Duration::from_secs(120),
    );
    assert!(
        shot.is_file(),
        "no screenshot ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

// ------------------------------------------------------------------ docs/api.md

/// Every key path of a JSON value: `a.b`, `a[].c`; the keys of objects that are maps by
/// name (drives' probes, collectors, last runs; the scheduler's due times and runs) are `*`.
fn key_paths(v: &serde_json::Value, path: &str, out: &mut std::collections::BTreeSet<String>) {
    const MAPS: [&str; 8] = [
        "last",
        "probes",
        "collectors",
        "last_runs",
        "next_due",
        "running",
        "skipped",
        "held",
    ];
    let last = path.rsplit(['.', ']']).next().unwrap_or("");
    match v {
        serde_json::Value::Object(m) => {
            for (k, v) in m {
                let k = if MAPS.contains(&last) {
                    "*"
                } else {
                    k.as_str()
                };
                let p = if path.is_empty() {
                    k.to_string()
                } else {
                    format!("{path}.{k}")
                };
                out.insert(p.clone());
                key_paths(v, &p, out);
            }
        }
        serde_json::Value::Array(a) => {
            for v in a {
                key_paths(v, &format!("{path}[]"), out);
            }
        }
        _ => {}
    }
}

/// docs/api.md documents every route the server serves and no other (`## GET PATH`
/// headings against `routes::ROUTES`, which a unit test holds to the router), each with
/// the content type the server answers with, and the keys of its JSON examples are the
/// keys of a live response (issue 17: the API was undocumented, its quantiles unlabelled).
#[test]
fn docs_api_md_matches_the_routes_and_the_live_json() {
    use std::collections::BTreeSet;
    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/api.md")).unwrap();
    // Sections: "## GET PATH" up to the next "## ".
    let mut sections: BTreeMap<String, String> = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in doc.lines() {
        if let Some(h) = line.strip_prefix("## ") {
            current = h
                .strip_prefix("GET ")
                .map(|p| p.trim_matches('`').trim().to_string());
            if let Some(p) = &current {
                assert!(
                    sections.insert(p.clone(), String::new()).is_none(),
                    "{p} twice"
                );
            }
        } else if let Some(p) = &current {
            let s = sections.get_mut(p).unwrap();
            s.push_str(line);
            s.push('\n');
        }
    }
    let documented: BTreeSet<&str> = sections.keys().map(String::as_str).collect();
    let served: BTreeSet<&str> = driveprobe::http::routes::ROUTES.into_iter().collect();
    assert_eq!(
        documented, served,
        "docs/api.md's routes against the server's"
    );

    let srv = Server::start();
    {
        // Parts the fixture leaves empty, so every documented key is live: a run's last
        // summary with a point of each kind, and a run's note.
        let mut s = srv.shared.lock();
        let d = s.drives.get_mut("db1").unwrap();
        d.last_runs.insert(
            "enterprise".into(),
            driveprobe::status::RunSummary {
                id: RUN_WITH_REPORT.into(),
                suite: "enterprise".into(),
                status: "passed".into(),
                points: vec![driveprobe::status::RunPoint::default()],
                app_points: vec![driveprobe::status::AppRunPoint::default()],
                ..Default::default()
            },
        );
        d.self_test.running = Some(driveprobe::status::SelfTestRunning {
            kind: "extended".into(),
            schedule: Some("monthly-long".into()),
            started_unix: Some(1.0),
            done_ratio: Some(0.42),
            updated_unix: 2.0,
        });
        d.self_test.last.insert(
            "short".into(),
            driveprobe::status::SelfTestOutcome {
                schedule: "weekly-short".into(),
                result: "passed".into(),
                ..Default::default()
            },
        );
        d.skipped.insert(
            "weekly-characterisation".into(),
            driveprobe::status::SkipStatus {
                count: 1,
                reason: "wear_budget".into(),
                last_unix: 1.0,
                last_message: "skipped".into(),
            },
        );
        s.run_notes.insert(
            RUN_NO_DOC.into(),
            "result pending: not saved: disk full".into(),
        );
        // A schedule due and held by the drive's self-test.
        s.scheduler.next_due.insert("monthly-long/db1".into(), 1);
        s.scheduler.held.insert(
            "monthly-long/db1".into(),
            driveprobe::status::HeldStatus {
                reason: "selftest".into(),
                message: "held".into(),
                due_unix: 1,
                since_unix: 2.0,
            },
        );
        // A run stopped at its safety limit: every optional key of a run record.
        let mut stopped = s.runs[0].clone();
        stopped.id = "stopped-run".into();
        stopped.status = driveprobe::schedule::state::RunStatus::Stopped;
        stopped.reason = Some("safety stop".into());
        stopped.write_bound_bytes = Some(1);
        stopped.written_bytes = Some(2);
        stopped.stop = Some(driveprobe::protocol::bound::StopReason::SafetyLimit {
            written_bytes: 2,
            bound_bytes: 1,
            limit_bytes: 1,
        });
        s.runs.push(stopped);
    }
    for (path, section) in &sections {
        let live = get(srv.addr, &path.replace("{id}", RUN_WITH_REPORT));
        assert_eq!(live.status, 200, "{path}");
        let ct = live.content_type().to_string();
        assert!(
            section.contains(&format!("`{ct}`")),
            "docs/api.md's {path} does not give its content type `{ct}`"
        );
        let Some(example) = section
            .split("```json\n")
            .nth(1)
            .and_then(|rest| rest.split("\n```").next())
        else {
            assert_ne!(
                ct, "application/json",
                "{path}: a JSON route needs an example"
            );
            continue;
        };
        let example: serde_json::Value = serde_json::from_str(example)
            .unwrap_or_else(|e| panic!("docs/api.md's {path} example is not JSON: {e}"));
        let live: serde_json::Value = serde_json::from_slice(&live.body).unwrap();
        let (mut want, mut got) = (BTreeSet::new(), BTreeSet::new());
        key_paths(&example, "", &mut want);
        key_paths(&live, "", &mut got);
        let undocumented: Vec<_> = got.difference(&want).collect();
        let not_served: Vec<_> = want.difference(&got).collect();
        assert!(
            undocumented.is_empty() && not_served.is_empty(),
            "docs/api.md's {path} example against a live response:\n  keys served but not in the example: {undocumented:?}\n  keys in the example but not served: {not_served:?}"
        );
    }
    // The window quantiles are labelled.
    let v: serde_json::Value =
        serde_json::from_slice(&get(srv.addr, "/api/v1/drives").body).unwrap();
    let q = &v[0]["probes"]["canary-4k-read"]["read"]["window"]["quantiles"];
    let keys: Vec<&String> = q.as_object().unwrap().keys().collect();
    assert_eq!(keys, ["p50", "p90", "p99", "p99_9"]);
    assert!(
        (q["p99"].as_f64().unwrap() - 95e-6 * 3.0).abs() < 1e-12,
        "{q}"
    );
}

/// Review of issue 17, C3: the /api/v1/drives example said `used_basis: "vendor"` beside
/// `vendor_used_ratio: null`, and a reason "2 media errors" beside `media_errors: null`;
/// the key check cannot see values. The figures the example derives agree with their
/// sources.
#[test]
fn docs_api_md_drives_example_agrees_with_itself() {
    let doc =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/api.md")).unwrap();
    let section = doc
        .split("## GET `/api/v1/drives`")
        .nth(1)
        .or_else(|| doc.split("## GET /api/v1/drives").nth(1))
        .expect("the /api/v1/drives section");
    let example = section
        .split("```json\n")
        .nth(1)
        .and_then(|rest| rest.split("\n```").next())
        .expect("its example");
    let drives: serde_json::Value = serde_json::from_str(example).unwrap();
    for d in drives.as_array().unwrap() {
        let e = &d["endurance"];
        let basis = e["used_basis"].as_str();
        let source = match basis {
            Some("vendor") => &e["vendor_used_ratio"],
            Some("host_writes") => &e["host_written_ratio"],
            _ => &serde_json::Value::Null,
        };
        if basis.is_some() {
            assert_eq!(source, &e["used_ratio"], "used_basis {basis:?}: {e}");
        }
        let report = &d["health"]["report"];
        for r in d["health"]["reasons"].as_array().into_iter().flatten() {
            let r = r.as_str().unwrap();
            for (words, key) in [
                ("media error", "media_errors"),
                ("reallocated sector", "reallocated_sectors"),
                ("pending", "pending_sectors"),
            ] {
                if r.contains(words) {
                    let n: u64 = r.split(' ').next().unwrap().parse().unwrap();
                    assert_eq!(report[key].as_u64(), Some(n), "{r:?} beside {key}");
                }
            }
        }
        if let Some(u) = report["percentage_used_ratio"].as_f64() {
            assert_eq!(e["vendor_used_ratio"].as_f64(), Some(u), "{e}");
        }
    }
}

// ------------------------------------------------------------------ agreement

#[test]
fn the_page_the_api_and_the_metrics_say_the_same_states() {
    let srv = Server::start();
    let page = get(srv.addr, "/").text();
    let drives: serde_json::Value =
        serde_json::from_slice(&get(srv.addr, "/api/v1/drives").body).unwrap();
    let e = common::daemon::Exposition::parse(&get(srv.addr, "/metrics").text());
    let seen = common::surfaces::assert_agree(&page, &drives, &e, false);
    let kinds: Vec<&str> = seen.iter().map(|(_, _, k)| k.as_str()).collect();
    assert_eq!(kinds, ["running", "paused"], "the fixture's probes");
    // The paused probe is paused on its own row, not the drive's: the running one beside
    // it says running.
    let db1 = common::surfaces::drive_section(&page, "db1");
    assert!(db1.contains("data-probe=\"canary-4k-read\" data-state=\"running\""));
    assert!(db1.contains("(paused: the canaries&#39; wear budget for today is spent)"));
    // The probe whose CPU wait at the p99 is most of its p99 says the host is the likely
    // cause; the one that waited 0.2% does not.
    assert!(
        db1.contains("host CPU busy: at its p99 the probe waited about 50.0 µs per I/O for a CPU, 56% of its p99 latency (90.0 µs)"),
        "{db1}"
    );
    assert_eq!(db1.matches("data-host-busy=").count(), 2, "{db1}");
    // The failed health read is said with its reason and count, never "not read yet".
    let evil = common::surfaces::drive_section(&page, EVIL);
    assert!(evil.contains("health read failed"), "{evil}");
    assert!(evil.contains("9 attempts"), "{evil}");
    assert!(!page.contains("no readings yet"));
    assert!(
        page.contains("1 warning") && page.contains("1 read failed"),
        "overview"
    );
}
