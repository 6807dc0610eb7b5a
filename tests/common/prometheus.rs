//! A real Prometheus (the Debian `prometheus` package, 2.42) for the end-to-end tests:
//! started on loopback with its storage in a temp dir, a 1 s scrape and evaluation
//! interval, the scrape jobs and the rule files given; queried over its HTTP API; killed on
//! drop, with its log printed when the test failed. And a real node_exporter (the Debian
//! `prometheus-node-exporter` package) on loopback, its disk statistics only.

// Each test crate compiles this module on its own and uses only part of it.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::daemon::http_get;

/// Where the Debian package puts the server.
pub const PROMETHEUS: &str = "/usr/bin/prometheus";

/// The binary, or a panic that says how to get it (the tests never skip for want of it).
pub fn binary() -> PathBuf {
    let p = PathBuf::from(PROMETHEUS);
    if p.is_file() {
        return p;
    }
    if let Some(found) = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|d| d.join("prometheus"))
            .find(|c| c.is_file())
    }) {
        return found;
    }
    panic!(
        "{PROMETHEUS} is missing: run scripts/test, which installs the Debian `prometheus` \
         package this test needs"
    );
}

/// One series of an instant query's result (a scalar or string result is one series
/// with no labels).
#[derive(Debug, Clone)]
pub struct Series {
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// One series of a range-vector selector: its labels and its (unix seconds, value) samples.
pub type RawSeries = (BTreeMap<String, String>, Vec<(f64, f64)>);

/// What `/api/v1/query` answered with `status: success`.
#[derive(Debug, Clone)]
pub struct QueryResult {
    pub result_type: String,
    pub series: Vec<Series>,
    pub warnings: Vec<String>,
}

/// How Prometheus runs: a server (a TSDB, rules, the query API) or an agent (scrapes and
/// remote-writes only: `--enable-feature=agent`, no queries, no rules).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Server,
    Agent,
}

/// A running Prometheus, killed on drop.
pub struct Prometheus {
    child: Child,
    /// `127.0.0.1:PORT`
    pub addr: String,
    dir: tempfile::TempDir,
    log_path: PathBuf,
}

/// A port that was free a moment ago (Prometheus binds it itself; a race is retried).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind 127.0.0.1:0")
        .port()
}

pub fn yaml_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

impl Prometheus {
    /// Starts Prometheus scraping `target` (`HOST:PORT`) every second as job `job`, with
    /// `rule_files` evaluated every second, and waits until it is ready (`/-/ready`).
    pub fn start(job: &str, target: &str, rule_files: &[&Path]) -> Prometheus {
        Prometheus::start_with(job, target, rule_files, "")
    }

    /// [`Prometheus::start`] with `scrape_extra` added to the scrape job: YAML lines indented
    /// by four spaces, such as `    scheme: https\n    tls_config:\n      ca_file: ...\n`.
    pub fn start_with(
        job: &str,
        target: &str,
        rule_files: &[&Path],
        scrape_extra: &str,
    ) -> Prometheus {
        Prometheus::start_jobs_with(&[(job, target)], rule_files, scrape_extra)
    }

    /// [`Prometheus::start`] with one scrape job per `(job, target)`, such as the daemon
    /// and a node_exporter on the same host.
    pub fn start_jobs(jobs: &[(&str, &str)], rule_files: &[&Path]) -> Prometheus {
        Prometheus::start_jobs_with(jobs, rule_files, "")
    }

    /// [`Prometheus::start_jobs`] with `scrape_extra` added to the last scrape job.
    fn start_jobs_with(
        jobs: &[(&str, &str)],
        rule_files: &[&Path],
        scrape_extra: &str,
    ) -> Prometheus {
        let mut cfg = String::from(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n",
        );
        if !rule_files.is_empty() {
            cfg.push_str("rule_files:\n");
            for f in rule_files {
                assert!(f.is_file(), "the rule file {} does not exist", f.display());
                let abs = fs::canonicalize(f).expect("canonical rule file path");
                let _ = writeln!(cfg, "  - {}", yaml_quote(&abs.display().to_string()));
            }
        }
        cfg.push_str("scrape_configs:\n");
        for (job, target) in jobs {
            let _ = write!(
                cfg,
                "  - job_name: {}\n    static_configs:\n      - targets: [{}]\n",
                yaml_quote(job),
                yaml_quote(target)
            );
        }
        cfg.push_str(scrape_extra);
        Prometheus::start_config(&cfg, Mode::Server, &[])
    }

    /// Starts Prometheus on `config` (the whole prometheus.yml) in `mode`, with `args`
    /// added to its command line (`--web.enable-remote-write-receiver`...), on a free
    /// loopback port, and waits until it is ready (`/-/ready`). Rule files named in the
    /// config must be absolute paths.
    pub fn start_config(config: &str, mode: Mode, args: &[&str]) -> Prometheus {
        let bin = binary();
        let dir = tempfile::Builder::new()
            .prefix("dp-prometheus-")
            .tempdir()
            .expect("temp dir for Prometheus");
        let cfg = config;
        let cfg_path = dir.path().join("prometheus.yml");
        fs::write(&cfg_path, cfg).expect("write prometheus.yml");
        let log_path = dir.path().join("prometheus.log");
        let data = dir.path().join("data");
        let mode_args: Vec<String> = match mode {
            Mode::Server => vec![format!("--storage.tsdb.path={}", data.display())],
            // An agent keeps only its write-ahead log, and refuses the server's flags.
            Mode::Agent => vec![
                "--enable-feature=agent".into(),
                format!("--storage.agent.path={}", data.display()),
            ],
        };

        // The port is chosen before Prometheus binds it; another process may take it in
        // between. Then Prometheus exits at once, and another port is tried.
        let mut last_log = String::new();
        for _attempt in 0..5 {
            let addr = format!("127.0.0.1:{}", free_port());
            let log = fs::File::create(&log_path).expect("create prometheus.log");
            let mut child = Command::new(&bin)
                .arg(format!("--config.file={}", cfg_path.display()))
                .args(&mode_args)
                .args(args)
                .arg(format!("--web.listen-address={addr}"))
                .arg("--log.level=info")
                .stdin(Stdio::null())
                .stdout(log.try_clone().expect("dup log"))
                .stderr(log)
                .spawn()
                .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()));
            match wait_ready(&mut child, &addr, Duration::from_secs(60)) {
                Ok(()) => {
                    return Prometheus {
                        child,
                        addr,
                        dir,
                        log_path,
                    }
                }
                Err(why) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    last_log = fs::read_to_string(&log_path).unwrap_or_default();
                    if !last_log.contains("address already in use") {
                        panic!(
                            "Prometheus did not become ready: {why}\nconfig:\n{cfg}\nlog:\n{last_log}"
                        );
                    }
                }
            }
        }
        panic!("Prometheus found no free port in 5 attempts; log:\n{last_log}");
    }

    /// Prometheus's log (stdout and stderr) so far.
    pub fn log(&self) -> String {
        fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    pub fn storage_dir(&self) -> &Path {
        self.dir.path()
    }

    /// GET `path` on Prometheus's API; the JSON body, whatever the status code.
    pub fn api(&self, path: &str) -> Result<serde_json::Value, String> {
        let (code, _, body) =
            try_get(&self.addr, path).ok_or_else(|| format!("GET {path}: no answer"))?;
        serde_json::from_str(&body)
            .map_err(|e| format!("GET {path}: HTTP {code}, not JSON ({e}): {body}"))
    }

    /// An instant query at the current time. `Err` carries Prometheus's error type and
    /// message (a parse error, a bad function argument...).
    pub fn query(&self, expr: &str) -> Result<QueryResult, String> {
        self.query_at(expr, None)
    }

    /// An instant query at `time` (unix seconds), or at the current time when `None`.
    pub fn query_at(&self, expr: &str, time: Option<f64>) -> Result<QueryResult, String> {
        let mut path = format!("/api/v1/query?query={}", urlencode(expr));
        if let Some(t) = time {
            let _ = write!(path, "&time={t:.3}");
        }
        let v = self.api(&path)?;
        if v["status"] != "success" {
            return Err(format!(
                "{}: {}",
                v["errorType"].as_str().unwrap_or("error"),
                v["error"].as_str().unwrap_or("(no message)")
            ));
        }
        let data = &v["data"];
        let result_type = data["resultType"].as_str().unwrap_or("").to_string();
        let num = |x: &serde_json::Value| -> f64 {
            match x.as_str() {
                Some("+Inf") => f64::INFINITY,
                Some("-Inf") => f64::NEG_INFINITY,
                Some(s) => s.parse().unwrap_or(f64::NAN),
                None => f64::NAN,
            }
        };
        let series = match result_type.as_str() {
            "vector" => data["result"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .map(|s| Series {
                            labels: labels_of(&s["metric"]),
                            value: num(&s["value"][1]),
                        })
                        .collect()
                })
                .unwrap_or_default(),
            "matrix" => data["result"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .map(|s| Series {
                            labels: labels_of(&s["metric"]),
                            value: s["values"]
                                .as_array()
                                .and_then(|v| v.last())
                                .map(|p| num(&p[1]))
                                .unwrap_or(f64::NAN),
                        })
                        .collect()
                })
                .unwrap_or_default(),
            "scalar" | "string" => vec![Series {
                labels: BTreeMap::new(),
                value: num(&data["result"][1]),
            }],
            other => return Err(format!("unexpected resultType {other:?}: {v}")),
        };
        let warnings = v["warnings"]
            .as_array()
            .map(|w| {
                w.iter()
                    .filter_map(|x| x.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default();
        Ok(QueryResult {
            result_type,
            series,
            warnings,
        })
    }

    /// The raw samples of a range-vector selector (`metric{...}[10s]`): per series, its
    /// labels and its (unix seconds, value) pairs.
    pub fn samples(&self, selector_with_range: &str) -> Result<Vec<RawSeries>, String> {
        let path = format!("/api/v1/query?query={}", urlencode(selector_with_range));
        let v = self.api(&path)?;
        if v["status"] != "success" || v["data"]["resultType"] != "matrix" {
            return Err(format!("{selector_with_range}: {v}"));
        }
        Ok(v["data"]["result"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .map(|s| {
                let pts = s["values"]
                    .as_array()
                    .cloned()
                    .unwrap_or_default()
                    .iter()
                    .map(|p| {
                        (
                            p[0].as_f64().unwrap_or(f64::NAN),
                            p[1].as_str()
                                .and_then(|x| x.parse().ok())
                                .unwrap_or(f64::NAN),
                        )
                    })
                    .collect();
                (labels_of(&s["metric"]), pts)
            })
            .collect())
    }

    /// Queries `expr` until it returns at least one series, or panics after `limit` with
    /// the last answer and Prometheus's log.
    pub fn wait_for(&self, what: &str, expr: &str, limit: Duration) -> QueryResult {
        let t0 = Instant::now();
        loop {
            let r = self.query(expr);
            if let Ok(q) = &r {
                if !q.series.is_empty() {
                    return q.clone();
                }
            }
            if t0.elapsed() > limit {
                let targets = self
                    .api("/api/v1/targets")
                    .map(|v| v.to_string())
                    .unwrap_or_else(|e| e);
                panic!(
                    "waited {limit:?} for {what} ({expr}); last answer: {r:?}\n\
                     targets: {targets}\nPrometheus log:\n{}",
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        if std::thread::panicking() {
            eprintln!(
                "----- Prometheus log ({}) -----\n{}----- end of Prometheus log -----",
                self.log_path.display(),
                self.log()
            );
        }
    }
}

fn labels_of(m: &serde_json::Value) -> BTreeMap<String, String> {
    m.as_object()
        .map(|o| {
            o.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                .collect()
        })
        .unwrap_or_default()
}

/// Waits until `/-/ready` answers 200; `Err` when the process exits or `limit` passes.
fn wait_ready(child: &mut Child, addr: &str, limit: Duration) -> Result<(), String> {
    let t0 = Instant::now();
    loop {
        if let Some(st) = child.try_wait().map_err(|e| e.to_string())? {
            return Err(format!("Prometheus exited with {st}"));
        }
        if let Some((200, _, _)) = try_get(addr, "/-/ready") {
            return Ok(());
        }
        if t0.elapsed() > limit {
            return Err(format!("not ready after {limit:?}"));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A GET that gives up quietly (connection refused while Prometheus starts).
fn try_get(addr: &str, path: &str) -> Option<(u16, BTreeMap<String, String>, String)> {
    std::net::TcpStream::connect(addr).ok()?;
    Some(http_get(addr, path, &[]))
}

/// Percent-encodes everything but the unreserved characters (RFC 3986).
pub fn urlencode(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 3);
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// Where the Debian package `prometheus-node-exporter` puts node_exporter.
pub const NODE_EXPORTER: &str = "/usr/bin/prometheus-node-exporter";

/// A running node_exporter on loopback with its diskstats collector only (every block
/// device but ram and floppy disks: loop devices included, which it leaves out by
/// default), killed on drop, with its log printed when the test failed.
pub struct NodeExporter {
    child: Child,
    /// `127.0.0.1:PORT`
    pub addr: String,
    log_path: PathBuf,
    _dir: tempfile::TempDir,
}

impl NodeExporter {
    /// Starts node_exporter on a free loopback port and waits until its `/metrics` has
    /// `node_disk_io_time_seconds_total`.
    pub fn start() -> NodeExporter {
        let bin = PathBuf::from(NODE_EXPORTER);
        assert!(
            bin.is_file(),
            "{NODE_EXPORTER} is missing: run scripts/test, which installs the Debian \
             `prometheus-node-exporter` package this test needs"
        );
        let dir = tempfile::Builder::new()
            .prefix("dp-node-exporter-")
            .tempdir()
            .expect("temp dir for node_exporter");
        let log_path = dir.path().join("node_exporter.log");
        let mut last_log = String::new();
        for _attempt in 0..5 {
            let addr = format!("127.0.0.1:{}", free_port());
            let log = fs::File::create(&log_path).expect("create node_exporter.log");
            let mut child = Command::new(&bin)
                .arg("--collector.disable-defaults")
                .arg("--collector.diskstats")
                .arg("--collector.diskstats.device-exclude=^(ram|fd)[0-9]+$")
                .arg(format!("--web.listen-address={addr}"))
                .stdin(Stdio::null())
                .stdout(log.try_clone().expect("dup log"))
                .stderr(log)
                .spawn()
                .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()));
            let t0 = Instant::now();
            loop {
                if let Ok(Some(_)) = child.try_wait() {
                    break;
                }
                if let Some((200, _, body)) = try_get(&addr, "/metrics") {
                    if body.contains("node_disk_io_time_seconds_total{") {
                        return NodeExporter {
                            child,
                            addr,
                            log_path,
                            _dir: dir,
                        };
                    }
                }
                if t0.elapsed() > Duration::from_secs(30) {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!(
                        "node_exporter did not serve node_disk_io_time_seconds_total in 30 s; log:\n{}",
                        fs::read_to_string(&log_path).unwrap_or_default()
                    );
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = child.wait();
            last_log = fs::read_to_string(&log_path).unwrap_or_default();
            if !last_log.contains("address already in use") {
                panic!("node_exporter exited at start; log:\n{last_log}");
            }
        }
        panic!("node_exporter found no free port in 5 attempts; log:\n{last_log}");
    }

    /// node_exporter's log so far.
    pub fn log(&self) -> String {
        fs::read_to_string(&self.log_path).unwrap_or_default()
    }
}

impl Drop for NodeExporter {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        if std::thread::panicking() {
            eprintln!(
                "----- node_exporter log ({}) -----\n{}----- end of node_exporter log -----",
                self.log_path.display(),
                self.log()
            );
        }
    }
}
