//! The exporter conventions on the real daemon: `--web.listen-address` (repeatable, with
//! the web config on every listener), `--web.telemetry-path`, `--log.level` and
//! `--log.format` (every line parsed back), journald priorities when stderr is the
//! journal, and `driveprobe_build_info` / `--version` naming the git revision (build.rs
//! run on its own, in and out of a repository).

use crate::common;

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::daemon::{file_drive, http_get, Exposition, BIN};

/// A daemon started with its stderr in a file (so a test knows its device and inode).
struct Run {
    child: Child,
    addrs: Vec<String>,
    stderr: PathBuf,
}

impl Run {
    /// Starts `driveprobe daemon ARGS` with `env` (RUST_LOG and JOURNAL_STREAM removed
    /// unless given) and waits for `listeners` "listening on" lines.
    fn start(dir: &Path, args: &[&str], env: &[(&str, &str)], listeners: usize) -> Run {
        let stderr = dir.join("stderr.log");
        let err = std::fs::File::create(&stderr).unwrap();
        Run::start_to(err, stderr, args, env, listeners)
    }

    fn start_to(
        err: std::fs::File,
        stderr: PathBuf,
        args: &[&str],
        env: &[(&str, &str)],
        listeners: usize,
    ) -> Run {
        let mut cmd = Command::new(BIN);
        cmd.arg("daemon")
            .args(args)
            .env_remove("RUST_LOG")
            .env_remove("JOURNAL_STREAM")
            .env_remove("NOTIFY_SOCKET")
            .env_remove("WATCHDOG_USEC")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(err);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("start driveprobe daemon");
        let stdout = child.stdout.take().unwrap();
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
        let mut addrs = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        while addrs.len() < listeners {
            match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(a) => addrs.push(a),
                Err(_) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!(
                        "the daemon printed {} of {listeners} addresses; stderr:\n{}",
                        addrs.len(),
                        std::fs::read_to_string(&stderr).unwrap_or_default()
                    );
                }
            }
        }
        Run {
            child,
            addrs,
            stderr,
        }
    }

    /// SIGTERM, wait for the exit (it must be clean), and the stderr it wrote.
    fn stop(mut self) -> String {
        let st = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(st.success());
        let t0 = Instant::now();
        let status = loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                break st;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(15),
                "no exit after SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        let log = std::fs::read_to_string(&self.stderr).unwrap();
        assert!(status.success(), "{status:?}\n{log}");
        log
    }
}

impl Drop for Run {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A config with one file-target drive and a canary, in `dir`.
fn config(dir: &Path) -> PathBuf {
    let cfg = dir.join("d.toml");
    std::fs::write(
        &cfg,
        format!(
            "state_dir = \"{}\"\ndiscovery.enabled = false\n\n{}\
             [[probe]]\nname = \"rd\"\ndrives = [\"a\"]\nwindow = \"5s\"\nworkload = {{ rate_iops = 20 }}\n",
            dir.join("state").display(),
            file_drive("a", &dir.join("a.dat"), "4MiB"),
        ),
    )
    .unwrap();
    cfg
}

/// A web config with one basic-auth user (no TLS, so the daemon also warns), in a folder
/// whose name needs quoting in logfmt (a space, `"` and `=`).
fn web_config(dir: &Path) -> PathBuf {
    let odd = dir.join("we ird \"q\"=x");
    std::fs::create_dir_all(&odd).unwrap();
    let web = odd.join("web.yml");
    std::fs::write(
        &web,
        format!(
            "basic_auth_users:\n  alice: {}\n",
            bcrypt::hash("secret", 4).unwrap()
        ),
    )
    .unwrap();
    web
}

fn basic(user: &str, password: &str) -> String {
    use base64::Engine;
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
    )
}

/// Two `--web.listen-address` (and a `--listen`): every address answers, each with the
/// web config's basic auth.
#[test]
fn every_listen_address_serves_with_the_web_config() {
    let dir = common::shm_dir("dp-exp-listen-");
    let cfg = config(dir.path());
    let web = web_config(dir.path());
    let (c, w) = (cfg.to_str().unwrap(), web.to_str().unwrap());
    let run = Run::start(
        dir.path(),
        &[
            "--config",
            c,
            "--web-config-file",
            w,
            "--web.listen-address",
            "127.0.0.1:0",
            "--web.listen-address",
            "127.0.0.1:0",
            "--listen",
            "127.0.0.1:0",
        ],
        &[],
        3,
    );
    let mut distinct = run.addrs.clone();
    distinct.sort();
    distinct.dedup();
    assert_eq!(distinct.len(), 3, "{:?}", run.addrs);
    let auth = basic("alice", "secret");
    for a in &run.addrs {
        let (code, _, _) = http_get(a, "/metrics", &[]);
        assert_eq!(code, 401, "{a}: no credentials");
        let (code, _, body) = http_get(a, "/metrics", &[("Authorization", &auth)]);
        assert_eq!(code, 200, "{a}: {body}");
        assert!(body.contains("driveprobe_build_info"), "{a}");
        let (code, _, _) = http_get(a, "/healthz", &[("Authorization", &auth)]);
        assert_eq!(code, 200, "{a}");
    }
    run.stop();
}

/// With `--web.listen-address` given, a SIGHUP whose config names another `[server]
/// listen` reloads the rest and leaves every listener where the flags put it; the new
/// address is not bound.
#[test]
fn flags_pin_the_listeners_across_a_sighup() {
    let dir = common::shm_dir("dp-exp-pinned-");
    let cfg = config(dir.path());
    let base = std::fs::read_to_string(&cfg).unwrap();
    let port = |l: &TcpListener| l.local_addr().unwrap().port();
    let (x, y) = (
        TcpListener::bind("127.0.0.1:0").unwrap(),
        TcpListener::bind("127.0.0.1:0").unwrap(),
    );
    let (px, py) = (port(&x), port(&y));
    drop((x, y));
    std::fs::write(
        &cfg,
        format!("{base}\n[server]\nlisten = \"127.0.0.1:{px}\"\n"),
    )
    .unwrap();
    let run = Run::start(
        dir.path(),
        &[
            "--config",
            cfg.to_str().unwrap(),
            "--web.listen-address",
            "127.0.0.1:0",
            "--web.listen-address",
            "127.0.0.1:0",
        ],
        &[],
        2,
    );
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", px)).is_err(),
        "the config's address is bound though flags were given"
    );
    std::fs::write(
        &cfg,
        format!("{base}\n[server]\nlisten = \"127.0.0.1:{py}\"\n"),
    )
    .unwrap();
    let st = Command::new("kill")
        .args(["-HUP", &run.child.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let t0 = Instant::now();
    while !std::fs::read_to_string(&run.stderr)
        .unwrap()
        .contains("msg=\"config reloaded\"")
    {
        assert!(t0.elapsed() < Duration::from_secs(15), "no reload");
        std::thread::sleep(Duration::from_millis(50));
    }
    for a in &run.addrs {
        assert_eq!(http_get(a, "/healthz", &[]).0, 200, "{a}");
    }
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", py)).is_err(),
        "the reload bound the config's new address"
    );
    let log = run.stop();
    assert!(!log.contains("listening on the new address"), "{log}");
}

/// One address that cannot be bound stops the start with today's one-line error, and
/// no listener is announced first.
#[test]
fn one_busy_listen_address_refuses_the_start_in_one_line() {
    let dir = common::shm_dir("dp-exp-busy-");
    let cfg = config(dir.path());
    let busy = TcpListener::bind("127.0.0.1:0").unwrap();
    let busy_addr = busy.local_addr().unwrap().to_string();
    let out = Command::new(BIN)
        .args(["daemon", "--config", cfg.to_str().unwrap()])
        .args(["--web.listen-address", "127.0.0.1:0"])
        .args(["--web.listen-address", &busy_addr])
        .env_remove("NOTIFY_SOCKET")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(!stdout.contains("listening on"), "{stdout}");
    let last = stderr.lines().last().unwrap_or_default();
    assert!(
        last.starts_with(&format!(
            "driveprobe: error: cannot listen on {busy_addr}: "
        )),
        "{stderr}"
    );
    assert!(last.contains("--web.listen-address"), "{last}");
    assert_eq!(
        stderr
            .lines()
            .filter(|l| l.starts_with("driveprobe: error:"))
            .count(),
        1,
        "{stderr}"
    );
}

/// `--web.telemetry-path` moves the metrics (and the page's links); /metrics is then
/// 404, /healthz and /api/v1 stay.
#[test]
fn the_telemetry_path_moves_the_metrics() {
    let dir = common::shm_dir("dp-exp-path-");
    let cfg = config(dir.path());
    let run = Run::start(
        dir.path(),
        &[
            "--config",
            cfg.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
            "--web.telemetry-path",
            "/prom/metrics",
        ],
        &[],
        1,
    );
    let a = &run.addrs[0];
    let (code, _, body) = http_get(a, "/prom/metrics", &[]);
    assert_eq!(code, 200, "{body}");
    let e = Exposition::parse(&body);
    assert!(e.text.contains("driveprobe_build_info"), "{body}");
    let (code, _, body) = http_get(a, "/metrics", &[]);
    assert_eq!(code, 404, "{body}");
    assert!(body.contains("/prom/metrics"), "{body}");
    for p in ["/healthz", "/api/v1/drives", "/api/v1/runs"] {
        assert_eq!(http_get(a, p, &[]).0, 200, "{p}");
    }
    let (code, _, page) = http_get(a, "/", &[]);
    assert_eq!(code, 200);
    assert!(page.contains("href=\"/prom/metrics\""), "{page}");
    assert!(!page.contains("href=\"/metrics\""), "{page}");
    run.stop();
}

/// A telemetry path that would hide another route is refused before anything starts:
/// one line, exit 2.
#[test]
fn a_colliding_telemetry_path_is_refused_in_one_line() {
    for path in [
        "/healthz",
        "/api/v1/drives",
        "/",
        "/runs/x/report",
        "metrics",
    ] {
        let out = Command::new(BIN)
            .args([
                "daemon",
                "--listen",
                "127.0.0.1:0",
                "--web.telemetry-path",
                path,
            ])
            .env_remove("NOTIFY_SOCKET")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{path}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{path}: {stderr}");
        assert!(
            stderr.starts_with("driveprobe: error: --web.telemetry-path "),
            "{stderr}"
        );
        assert!(out.stdout.is_empty(), "{path}: it started");
    }
}

/// A bad flag value (clap's own error, several lines as clap writes it) is one line too,
/// with what was wrong, the values allowed and where help is: exit 2, nothing started.
#[test]
fn a_bad_flag_value_is_refused_in_one_line() {
    for (args, needles) in [
        (
            &["daemon", "--log.level", "loud"][..],
            &["'loud'", "--log.level", "possible values", "--help"][..],
        ),
        (
            &["daemon", "--web.listen-address", "nowhere"],
            &["'nowhere'", "HOST:PORT", "--help"],
        ),
        (&["daemon", "--no-such-flag"], &["--no-such-flag", "--help"]),
    ] {
        let out = Command::new(BIN)
            .args(args)
            .env_remove("NOTIFY_SOCKET")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(stderr.starts_with("driveprobe: error: "), "{stderr}");
        for n in needles {
            assert!(stderr.contains(n), "{args:?}: no {n:?} in {stderr}");
        }
        assert!(out.stdout.is_empty(), "{args:?}: it started");
    }
}

/// One logfmt line as key/value pairs, or why it is not logfmt. Bare values hold no
/// space, `"` or `=`; quoted ones take JSON's escapes.
fn parse_logfmt(line: &str) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::new();
    let mut rest = line;
    while !rest.is_empty() {
        let eq = rest.find('=').ok_or(format!("no = in {rest:?}"))?;
        let key = &rest[..eq];
        if key.is_empty()
            || !key
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
        {
            return Err(format!("bad key {key:?}"));
        }
        rest = &rest[eq + 1..];
        let value;
        if rest.starts_with('"') {
            // The end: the first `"` not escaped.
            let b = rest.as_bytes();
            let mut i = 1;
            let end = loop {
                match b.get(i) {
                    None => return Err(format!("unterminated quote in {line:?}")),
                    Some(b'\\') => i += 2,
                    Some(b'"') => break i,
                    Some(_) => i += 1,
                }
            };
            value = serde_json::from_str::<String>(&rest[..=end])
                .map_err(|e| format!("bad quoted value {:?}: {e}", &rest[..=end]))?;
            rest = &rest[end + 1..];
        } else {
            let end = rest.find(' ').unwrap_or(rest.len());
            let v = &rest[..end];
            if v.is_empty() || v.contains('"') || v.contains('=') {
                return Err(format!("bad bare value {v:?} in {line:?}"));
            }
            value = v.to_string();
            rest = &rest[end..];
        }
        out.push((key.to_string(), value));
        match rest.strip_prefix(' ') {
            Some(r) if !r.is_empty() => rest = r,
            Some(_) => return Err(format!("trailing space in {line:?}")),
            None if rest.is_empty() => {}
            None => return Err(format!("no space after a value in {line:?}")),
        }
    }
    Ok(out)
}

fn is_rfc3339_utc(ts: &str) -> bool {
    // 2026-12-01T19:48:37.123Z
    let b = ts.as_bytes();
    ts.len() == 24
        && b[4] == b'-'
        && b[7] == b'-'
        && b[10] == b'T'
        && b[13] == b':'
        && b[16] == b':'
        && b[19] == b'.'
        && b[23] == b'Z'
        && ts
            .chars()
            .enumerate()
            .all(|(i, c)| [4, 7, 10, 13, 16, 19, 23].contains(&i) || c.is_ascii_digit())
}

/// Runs the daemon with the odd web config until it has logged, stops it, and returns
/// its stderr.
fn log_of(dir: &Path, extra: &[&str], env: &[(&str, &str)]) -> String {
    let cfg = config(dir);
    let web = web_config(dir);
    let args = [
        &[
            "--config",
            cfg.to_str().unwrap(),
            "--web-config-file",
            web.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
        ][..],
        extra,
    ]
    .concat();
    Run::start(dir, &args, env, 1).stop()
}

/// The default format is logfmt: every line parses, ts/level/msg first, and a value that
/// needs quoting (a path with a space, `"` and `=`) comes back whole.
#[test]
fn every_logfmt_line_parses_back() {
    let dir = common::shm_dir("dp-exp-logfmt-");
    let log = log_of(dir.path(), &[], &[]);
    let mut levels = Vec::new();
    let mut odd_path = false;
    for line in log.lines() {
        let kv = parse_logfmt(line).unwrap_or_else(|e| panic!("{e}\n{log}"));
        let keys: Vec<&str> = kv.iter().take(3).map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, ["ts", "level", "msg"], "{line}");
        assert!(is_rfc3339_utc(&kv[0].1), "{line}");
        levels.push(kv[1].1.clone());
        odd_path |= kv
            .iter()
            .any(|(_, v)| v.ends_with("/we ird \"q\"=x/web.yml"));
    }
    assert!(
        odd_path,
        "the web config's path is not logged whole:\n{log}"
    );
    assert!(levels.iter().any(|l| l == "info"), "{log}");
    assert!(levels.iter().any(|l| l == "warn"), "{log}");
    assert!(
        levels
            .iter()
            .all(|l| ["debug", "info", "warn", "error"].contains(&l.as_str())),
        "{levels:?}"
    );
    assert!(log.contains("msg=\"driveprobe daemon started\""), "{log}");
}

/// `--log.format json`: every line is one JSON object with ts, level and msg.
#[test]
fn every_json_line_is_an_object_with_level_and_msg() {
    let dir = common::shm_dir("dp-exp-json-");
    let log = log_of(dir.path(), &["--log.format", "json"], &[]);
    assert!(log.lines().count() >= 3, "{log}");
    let mut msgs = Vec::new();
    for line in log.lines() {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}\n{log}"));
        assert!(v["ts"].as_str().is_some_and(is_rfc3339_utc), "{line}");
        assert!(
            ["debug", "info", "warn", "error"].contains(&v["level"].as_str().unwrap_or("")),
            "{line}"
        );
        msgs.push(v["msg"].as_str().expect("msg").to_string());
        if let Some(f) = v.get("file") {
            assert!(
                f.as_str().unwrap().ends_with("/we ird \"q\"=x/web.yml"),
                "{line}"
            );
        }
    }
    assert!(
        msgs.iter().any(|m| m == "driveprobe daemon started"),
        "{msgs:?}"
    );
}

/// `--log.level` filters, and wins over RUST_LOG; RUST_LOG alone still works.
#[test]
fn log_level_filters_and_wins_over_rust_log() {
    let levels = |log: &str| -> Vec<String> {
        log.lines()
            .map(|l| {
                parse_logfmt(l).unwrap_or_else(|e| panic!("{e}\n{log}"))[1]
                    .1
                    .clone()
            })
            .collect()
    };
    let dir = common::shm_dir("dp-exp-level-");
    // The flag alone.
    let l = levels(&log_of(dir.path(), &["--log.level", "warn"], &[]));
    assert!(l.iter().any(|x| x == "warn"), "{l:?}");
    assert!(l.iter().all(|x| x == "warn" || x == "error"), "{l:?}");
    // RUST_LOG alone (today's way) still filters.
    let l = levels(&log_of(dir.path(), &[], &[("RUST_LOG", "warn")]));
    assert!(l.iter().any(|x| x == "warn"), "{l:?}");
    assert!(l.iter().all(|x| x == "warn" || x == "error"), "{l:?}");
    // Both: the flag wins.
    let l = levels(&log_of(
        dir.path(),
        &["--log.level", "info"],
        &[("RUST_LOG", "error")],
    ));
    assert!(l.iter().any(|x| x == "info"), "{l:?}");
    // A bad level is refused by the argument parser (exit 2).
    let out = Command::new(BIN)
        .args(["daemon", "--log.level", "loud"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

/// The `<N>` priority of a line that carries one.
fn priority(line: &str) -> Option<(u8, &str)> {
    let rest = line.strip_prefix('<')?;
    let (n, rest) = rest.split_once('>')?;
    Some((n.parse().ok()?, rest))
}

/// With JOURNAL_STREAM naming stderr's device and inode, every line starts with its
/// sd-daemon priority matching its level (logfmt and json); with another file's, or
/// none, no line does.
#[test]
fn journald_priorities_exactly_when_stderr_is_the_journal() {
    let dir = common::shm_dir("dp-exp-journal-");
    let cfg = config(dir.path());
    let web = web_config(dir.path());
    let args = |fmt: &'static str| {
        vec![
            "--config".to_string(),
            cfg.to_str().unwrap().to_string(),
            "--web-config-file".to_string(),
            web.to_str().unwrap().to_string(),
            "--listen".to_string(),
            "127.0.0.1:0".to_string(),
            "--log.format".to_string(),
            fmt.to_string(),
        ]
    };
    let want = |level: &str| match level {
        "error" => 3,
        "warn" => 4,
        "info" => 6,
        "debug" => 7,
        other => panic!("level {other}"),
    };
    for fmt in ["logfmt", "json"] {
        let path = dir.path().join(format!("journal-{fmt}.log"));
        let err = std::fs::File::create(&path).unwrap();
        let md = err.metadata().unwrap();
        let stream = format!("{}:{}", md.dev(), md.ino());
        let a = args(fmt);
        let a: Vec<&str> = a.iter().map(String::as_str).collect();
        let log = Run::start_to(err, path, &a, &[("JOURNAL_STREAM", &stream)], 1).stop();
        let mut seen = std::collections::BTreeSet::new();
        for line in log.lines() {
            let (n, rest) = priority(line).unwrap_or_else(|| panic!("no priority: {line}\n{log}"));
            let level = if fmt == "json" {
                let v: serde_json::Value = serde_json::from_str(rest).unwrap();
                v["level"].as_str().unwrap().to_string()
            } else {
                parse_logfmt(rest).unwrap()[1].1.clone()
            };
            assert_eq!(n, want(&level), "{line}");
            seen.insert(n);
        }
        assert!(seen.contains(&4) && seen.contains(&6), "{seen:?}\n{log}");
    }
    // Another file's device and inode (inherited, stderr redirected): no prefix.
    let other = std::fs::metadata(&cfg).unwrap();
    let stream = format!("{}:{}", other.dev(), other.ino());
    let a = args("logfmt");
    let a: Vec<&str> = a.iter().map(String::as_str).collect();
    let sub = dir.path().join("not-journal");
    std::fs::create_dir_all(&sub).unwrap();
    for env in [vec![("JOURNAL_STREAM", stream.as_str())], vec![]] {
        let log = Run::start(&sub, &a, &env, 1).stop();
        assert!(!log.is_empty());
        for line in log.lines() {
            assert!(line.starts_with("ts="), "{env:?}: {line}");
        }
    }
}

/// The short hash of HEAD of this tree, or None outside a git repository.
fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .arg("-C")
        .arg(env!("CARGO_MANIFEST_DIR"))
        .args(args)
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// The revision this tree should report: `HASH` prefix of HEAD (`-dirty` checked where
/// it can be known), or `unknown` outside git.
fn assert_revision_of_this_tree(revision: &str) {
    match git(&["rev-parse", "HEAD"]) {
        Some(head) => {
            let hash = revision.strip_suffix("-dirty").unwrap_or(revision);
            assert!(
                hash.len() >= 7 && head.starts_with(hash),
                "revision {revision} is not HEAD {head}"
            );
            // Files whose change makes Cargo run build.rs again: dirty ones there mean a
            // dirty build; a clean tree means a clean one.
            let watched = git(&[
                "status",
                "--porcelain",
                "--untracked-files=no",
                "--",
                "src",
                "crates",
                "Cargo.toml",
                "Cargo.lock",
            ])
            .unwrap();
            let all = git(&["status", "--porcelain", "--untracked-files=no"]).unwrap();
            if !watched.is_empty() {
                assert!(revision.ends_with("-dirty"), "{revision}: {watched}");
            }
            if all.is_empty() {
                assert!(!revision.ends_with("-dirty"), "{revision}: clean tree");
            }
        }
        None => assert_eq!(revision, "unknown"),
    }
}

/// `driveprobe_build_info` carries the version, the git revision of this tree and the
/// Rust version; `driveprobe --version` prints the version and the revision.
#[test]
fn build_info_and_version_name_the_git_revision() {
    let dir = common::shm_dir("dp-exp-build-");
    let cfg = config(dir.path());
    let run = Run::start(
        dir.path(),
        &["--config", cfg.to_str().unwrap(), "--listen", "127.0.0.1:0"],
        &[],
        1,
    );
    let (code, _, body) = http_get(&run.addrs[0], "/metrics", &[]);
    assert_eq!(code, 200);
    run.stop();
    let line = body
        .lines()
        .find(|l| l.starts_with("driveprobe_build_info{"))
        .unwrap_or_else(|| panic!("no build_info:\n{body}"));
    let label = |name: &str| -> String {
        let start = line
            .find(&format!("{name}=\""))
            .unwrap_or_else(|| panic!("no {name} in {line}"))
            + name.len()
            + 2;
        line[start..][..line[start..].find('"').unwrap()].to_string()
    };
    assert!(line.ends_with("} 1"), "{line}");
    assert_eq!(label("version"), env!("CARGO_PKG_VERSION"));
    let revision = label("revision");
    assert_revision_of_this_tree(&revision);
    let rustc = Command::new("rustc").arg("--version").output().unwrap();
    let rustc = String::from_utf8_lossy(&rustc.stdout);
    let rustversion = label("rustversion");
    assert!(
        rustversion.split('.').count() == 3 && rustc.contains(&format!("rustc {rustversion}")),
        "{rustversion} vs {rustc}"
    );

    let out = Command::new(BIN).arg("--version").output().unwrap();
    common::assert_ok(&out, "driveprobe --version");
    let v = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        v.trim(),
        format!(
            "driveprobe {} (revision {revision}, rustc {rustversion})",
            env!("CARGO_PKG_VERSION")
        )
    );
}

/// build.rs on its own: in this repository it names HEAD; in a folder outside any
/// repository (a tarball) or without git on PATH, `unknown`; and the build still works.
#[test]
fn build_script_says_unknown_outside_git() {
    let dir = common::shm_dir("dp-exp-buildrs-");
    let exe = dir.path().join("build-script");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("crates/daemon/build.rs");
    let out = Command::new("rustc")
        .args(["--edition", "2021", "-O", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .unwrap();
    common::assert_ok(&out, "rustc build.rs");
    let revision = |manifest_dir: &Path, path: Option<&str>| -> String {
        let mut cmd = Command::new(&exe);
        cmd.env("CARGO_MANIFEST_DIR", manifest_dir)
            .env_remove("DRIVEPROBE_REVISION")
            .env("RUSTC", "rustc");
        if let Some(p) = path {
            cmd.env("PATH", p);
        }
        let out = cmd.output().unwrap();
        common::assert_ok(&out, "build script");
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        text.lines()
            .find_map(|l| l.strip_prefix("cargo:rustc-env=DRIVEPROBE_REVISION="))
            .unwrap_or_else(|| panic!("no revision in:\n{text}"))
            .to_string()
    };
    // The script runs for the daemon's crate, two folders below the repository's root.
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let crate_dir = here.join("crates/daemon");
    assert_revision_of_this_tree(&revision(&crate_dir, None));
    // A tarball: the sources without .git.
    let tarball = dir.path().join("driveprobe-src");
    std::fs::create_dir_all(tarball.join("crates/daemon")).unwrap();
    std::fs::copy(here.join("Cargo.toml"), tarball.join("Cargo.toml")).unwrap();
    assert_eq!(revision(&tarball.join("crates/daemon"), None), "unknown");
    // No git at all.
    assert_eq!(
        revision(&crate_dir, Some(dir.path().to_str().unwrap())),
        "unknown"
    );
}
