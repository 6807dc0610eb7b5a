//! The real `driveprobe daemon` under test: started on a config written by the test,
//! scraped over real HTTP, its exposition parsed, stopped by signal. Shared by the daemon,
//! dashboard and reliability tests.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

pub const BIN: &str = env!("CARGO_BIN_EXE_driveprobe");

/// A running daemon. Killed (SIGKILL) on drop if the test did not stop it.
pub struct Daemon {
    pub child: Child,
    pub addr: String,
    pub config: PathBuf,
    stderr: std::sync::Arc<std::sync::Mutex<String>>,
}

impl Daemon {
    /// Starts `driveprobe daemon --config CONFIG --listen 127.0.0.1:0` with `env`, and waits
    /// for its `listening on http://ADDR/` line.
    pub fn start(config: &Path, env: &[(&str, &str)]) -> Daemon {
        Daemon::start_args(config, &[], env)
    }

    /// [`Daemon::start`] with more arguments (`--web-config-file FILE`...); the address is
    /// taken from `listening on http://ADDR/` or `https://ADDR/`.
    pub fn start_args(config: &Path, args: &[&str], env: &[(&str, &str)]) -> Daemon {
        Daemon::spawn(config, &[&["--listen", "127.0.0.1:0"], args].concat(), env)
    }

    /// [`Daemon::start`] on the config's own `[server] listen` (no `--listen`).
    pub fn start_on_config_listen(config: &Path, env: &[(&str, &str)]) -> Daemon {
        Daemon::spawn(config, &[], env)
    }

    /// [`Daemon::start`] under `prefix` (a program that runs the daemon, as `prlimit ...
    /// setpriv ... --`; the daemon's path follows it).
    pub fn start_under(prefix: &[&str], config: &Path, env: &[(&str, &str)]) -> Daemon {
        Daemon::spawn_under(prefix, config, &["--listen", "127.0.0.1:0"], env)
    }

    fn spawn(config: &Path, args: &[&str], env: &[(&str, &str)]) -> Daemon {
        Daemon::spawn_under(&[], config, args, env)
    }

    fn spawn_under(prefix: &[&str], config: &Path, args: &[&str], env: &[(&str, &str)]) -> Daemon {
        let mut cmd = match prefix.split_first() {
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest).arg(BIN);
                c
            }
            None => Command::new(BIN),
        };
        cmd.args(["daemon", "--config"])
            .arg(config)
            .args(args)
            .env("RUST_LOG", "driveprobe=debug")
            .env_remove("NOTIFY_SOCKET")
            .env_remove("WATCHDOG_USEC")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("start driveprobe daemon");
        let stdout = child.stdout.take().expect("stdout");
        let stderr = child.stderr.take().expect("stderr");
        let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let l2 = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let mut g = l2.lock().unwrap();
                g.push_str(&line);
                g.push('\n');
            }
        });
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(rest) = line
                    .strip_prefix("listening on http://")
                    .or_else(|| line.strip_prefix("listening on https://"))
                {
                    let _ = tx.send(rest.trim_end_matches('/').to_string());
                }
            }
        });
        let addr = match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(a) => a,
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "the daemon did not print its address; stderr:\n{}",
                    log.lock().unwrap()
                );
            }
        };
        Daemon {
            child,
            addr,
            config: config.to_path_buf(),
            stderr: log,
        }
    }

    pub fn log(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    pub fn signal(&self, sig: &str) {
        let st = Command::new("kill")
            .args([&format!("-{sig}"), &self.pid().to_string()])
            .status()
            .expect("kill");
        assert!(st.success(), "kill -{sig} failed");
    }

    /// Sends SIGTERM and waits (at most `limit`) for the exit; returns the status and how
    /// long it took.
    pub fn terminate(mut self, limit: Duration) -> (ExitStatus, Duration) {
        let t0 = Instant::now();
        self.signal("TERM");
        loop {
            if let Some(st) = self.child.try_wait().expect("wait") {
                return (st, t0.elapsed());
            }
            if t0.elapsed() > limit {
                let log = self.log();
                let _ = self.child.kill();
                panic!("the daemon did not stop within {limit:?} of SIGTERM; log:\n{log}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// GET `path`: (status code, headers lowercased, body).
    pub fn get(&self, path: &str) -> (u16, BTreeMap<String, String>, String) {
        http_get(&self.addr, path, &[])
    }

    pub fn get_with(
        &self,
        path: &str,
        headers: &[(&str, &str)],
    ) -> (u16, BTreeMap<String, String>, String) {
        http_get(&self.addr, path, headers)
    }

    /// `/api/v1/runs`, newest first.
    pub fn runs(&self) -> Vec<serde_json::Value> {
        let (code, _, body) = self.get("/api/v1/runs");
        assert_eq!(code, 200, "{body}");
        match serde_json::from_str::<serde_json::Value>(&body) {
            Ok(serde_json::Value::Array(a)) => a,
            other => panic!("/api/v1/runs is not a list: {other:?}"),
        }
    }

    /// Polls `/api/v1/runs` until a run has status `want`; returns it.
    pub fn wait_run_status(&self, want: &str, limit: Duration) -> serde_json::Value {
        let t0 = Instant::now();
        loop {
            let r = self.runs();
            if let Some(x) = r.iter().find(|x| x["status"] == want) {
                return x.clone();
            }
            assert!(
                t0.elapsed() < limit,
                "no run became {want} in {limit:?}: {r:?}\nlog:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// Waits until `cond` holds, or panics after `limit` naming `what`, with the log.
    pub fn wait_until(&self, what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
        let t0 = Instant::now();
        while !cond() {
            assert!(
                t0.elapsed() < limit,
                "waited {limit:?} for {what}; log:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Scrapes `/metrics` (text format) and parses it.
    pub fn scrape(&self) -> Exposition {
        let (code, _, body) = self.get("/metrics");
        assert_eq!(code, 200, "/metrics: {body}");
        Exposition::parse(&body)
    }

    /// Scrapes until `cond` holds, or panics after `limit` with the last scrape and log.
    pub fn wait_for(
        &self,
        what: &str,
        limit: Duration,
        cond: impl Fn(&Exposition) -> bool,
    ) -> Exposition {
        let t0 = Instant::now();
        loop {
            let e = self.scrape();
            if cond(&e) {
                return e;
            }
            if t0.elapsed() > limit {
                panic!(
                    "waited {limit:?} for {what}; last scrape:\n{}\nlog:\n{}",
                    e.text,
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A plain HTTP/1.1 GET over a fresh connection; panics if the connection fails.
pub fn http_get(
    addr: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> (u16, BTreeMap<String, String>, String) {
    try_http_get(addr, path, headers).unwrap_or_else(|e| panic!("GET {path} from {addr}: {e}"))
}

/// [`http_get`], with a failed connection as an error (a server moving its listener).
pub fn try_http_get(
    addr: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> std::io::Result<(u16, BTreeMap<String, String>, String)> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(20)))?;
    let mut req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes())?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let mut h = BTreeMap::new();
    for l in lines {
        if let Some((k, v)) = l.split_once(':') {
            h.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        }
    }
    let body = if h.get("transfer-encoding").is_some_and(|v| v == "chunked") {
        dechunk(body)
    } else {
        body.to_string()
    };
    Ok((status, h, body))
}

fn dechunk(mut s: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = s.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        s = rest[n..].trim_start_matches("\r\n");
    }
    out
}

/// One sample of an exposition.
#[derive(Debug, Clone)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

/// A parsed text exposition (0.0.4 or OpenMetrics): samples, and the TYPE of each family.
#[derive(Debug, Clone)]
pub struct Exposition {
    pub text: String,
    pub samples: Vec<Sample>,
    pub types: BTreeMap<String, String>,
}

impl Exposition {
    pub fn parse(text: &str) -> Exposition {
        let mut samples = Vec::new();
        let mut types = BTreeMap::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let mut it = rest.split_whitespace();
                if let (Some(n), Some(t)) = (it.next(), it.next()) {
                    types.insert(n.to_string(), t.to_string());
                }
                continue;
            }
            if line.starts_with('#') || line.trim().is_empty() {
                continue;
            }
            samples.push(parse_sample(line).unwrap_or_else(|| panic!("bad sample line: {line}")));
        }
        Exposition {
            text: text.to_string(),
            samples,
            types,
        }
    }

    /// Samples of `name` whose labels include every pair of `labels`.
    pub fn find(&self, name: &str, labels: &[(&str, &str)]) -> Vec<&Sample> {
        self.samples
            .iter()
            .filter(|s| {
                s.name == name
                    && labels
                        .iter()
                        .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
            })
            .collect()
    }

    /// The value of the one sample of `name` with `labels`, if there is exactly one.
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let f = self.find(name, labels);
        (f.len() == 1).then(|| f[0].value)
    }

    pub fn has(&self, name: &str) -> bool {
        self.samples.iter().any(|s| s.name == name)
    }
}

fn parse_sample(line: &str) -> Option<Sample> {
    let (name_end, has_labels) = match line.find(['{', ' ']) {
        Some(i) => (i, line.as_bytes()[i] == b'{'),
        None => return None,
    };
    let name = line[..name_end].to_string();
    let mut labels = BTreeMap::new();
    let mut rest = &line[name_end..];
    if has_labels {
        rest = &rest[1..];
        loop {
            rest = rest.trim_start_matches(',');
            if let Some(r) = rest.strip_prefix('}') {
                rest = r;
                break;
            }
            let eq = rest.find('=')?;
            let key = rest[..eq].to_string();
            rest = rest[eq + 1..].strip_prefix('"')?;
            let mut val = String::new();
            let mut chars = rest.char_indices();
            let end;
            loop {
                let (i, c) = chars.next()?;
                match c {
                    '\\' => {
                        let (_, e) = chars.next()?;
                        val.push(match e {
                            'n' => '\n',
                            other => other,
                        });
                    }
                    '"' => {
                        end = i + 1;
                        break;
                    }
                    c => val.push(c),
                }
            }
            labels.insert(key, val);
            rest = &rest[end..];
        }
    }
    let value = rest.split_whitespace().next()?;
    let value = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse().ok()?,
    };
    Some(Sample {
        name,
        labels,
        value,
    })
}

/// A file-target drive table for a test config.
pub fn file_drive(name: &str, path: &Path, size: &str) -> String {
    format!(
        "[[drive]]\nname = \"{name}\"\nfile_target = {{ path = \"{}\", size = \"{size}\" }}\n\n",
        path.display()
    )
}

/// A state file in `state_dir` in which the schedules `keys` (SCHEDULE/DRIVE) were first
/// seen long ago, so a cron time in the past is due at once.
pub fn seed_due_state(state_dir: &Path, keys: &[&str]) {
    std::fs::create_dir_all(state_dir).unwrap();
    let schedules: serde_json::Map<String, serde_json::Value> = keys
        .iter()
        .map(|k| (k.to_string(), serde_json::json!({ "first_seen": 0 })))
        .collect();
    let doc = serde_json::json!({ "version": 1, "schedules": schedules });
    std::fs::write(state_dir.join("state.json"), doc.to_string()).unwrap();
}
