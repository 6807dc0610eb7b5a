//! The real daemon behind its web config (`--web-config-file`, exporter-toolkit's format):
//! TLS with certificates made here (rcgen: a CA, a server certificate for 127.0.0.1 and
//! localhost, client certificates from that CA and from a rogue one), basic auth with
//! bcrypt hashes, client certificates required, a real Prometheus scraping over HTTPS with
//! basic auth, bad web config files refused at start (exit 2, one line) and on SIGHUP (the
//! old config stays), and attacks over TLS: a handshake and a header sent a byte a second,
//! oversized headers, request bodies, every method but GET/HEAD on every route (with
//! bodies) while the runs and the state file are watched for any change.
//!
//! `tests/daemon/http_api.rs` covers the plain-HTTP server in process (routes, 405 and 404 on a
//! few paths, the connection cap, a plain slowloris); here it is the daemon binary over TLS.

use crate::common;
use crate::prometheus;

// tests/common/prometheus.rs reaches the HTTP client as `super::daemon`, as it would from
// inside `common`; this makes the same path resolve at this crate's root.
use common::daemon;
use common::http::Resp;

use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use daemon::{file_drive, Daemon, BIN};
use prometheus::{yaml_quote, Prometheus};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};

const USER: &str = "prometheus";
const PASSWORD: &str = "correct horse battery staple";
/// bcrypt cost of the test users: high enough that a check is clearly slower than a cached
/// one (tens of milliseconds), low enough for the test to stay quick.
const COST: u32 = 11;

// ------------------------------------------------------------------ certificates

/// A CA, a server certificate signed by it, a client certificate signed by it, and a
/// client certificate from another CA; all as PEM files in `dir`.
struct Pki {
    dir: PathBuf,
}

impl Pki {
    fn make(dir: &Path) -> Pki {
        use rcgen::{
            BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer,
            KeyPair, KeyUsagePurpose,
        };
        let ca = |name: &str| {
            let key = KeyPair::generate().unwrap();
            let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
            p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            p.distinguished_name.push(DnType::CommonName, name);
            p.key_usages = vec![
                KeyUsagePurpose::KeyCertSign,
                KeyUsagePurpose::CrlSign,
                KeyUsagePurpose::DigitalSignature,
            ];
            let cert = p.self_signed(&key).unwrap();
            (cert.pem(), Issuer::new(p, key))
        };
        let leaf = |sans: &[&str], usage: ExtendedKeyUsagePurpose, issuer: &Issuer<KeyPair>| {
            let key = KeyPair::generate().unwrap();
            let mut p =
                CertificateParams::new(sans.iter().map(|s| s.to_string()).collect::<Vec<_>>())
                    .unwrap();
            p.distinguished_name.push(DnType::CommonName, sans[0]);
            p.extended_key_usages = vec![usage];
            let cert = p.signed_by(&key, issuer).unwrap();
            (cert.pem(), key.serialize_pem())
        };
        let (ca_pem, issuer) = ca("driveprobe test CA");
        let (rogue_pem, rogue) = ca("rogue CA");
        let (srv, srv_key) = leaf(
            &["localhost", "127.0.0.1"],
            ExtendedKeyUsagePurpose::ServerAuth,
            &issuer,
        );
        let (cli, cli_key) = leaf(&["scraper"], ExtendedKeyUsagePurpose::ClientAuth, &issuer);
        let (bad, bad_key) = leaf(&["intruder"], ExtendedKeyUsagePurpose::ClientAuth, &rogue);
        for (name, pem) in [
            ("ca.crt", ca_pem),
            ("rogue-ca.crt", rogue_pem),
            ("server.crt", srv),
            ("server.key", srv_key),
            ("client.crt", cli),
            ("client.key", cli_key),
            ("rogue-client.crt", bad),
            ("rogue-client.key", bad_key),
        ] {
            std::fs::write(dir.join(name), pem).unwrap();
        }
        Pki {
            dir: dir.to_path_buf(),
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

// ------------------------------------------------------------------ a TLS client

#[derive(Clone, Default)]
struct Client {
    /// CA file to trust (none: trust nothing).
    ca: Option<PathBuf>,
    /// Client certificate and key files.
    cert: Option<(PathBuf, PathBuf)>,
    tls12_only: bool,
}

impl Client {
    fn trusting(ca: &Path) -> Client {
        Client {
            ca: Some(ca.to_path_buf()),
            ..Client::default()
        }
    }

    fn with_cert(mut self, cert: &Path, key: &Path) -> Client {
        self.cert = Some((cert.to_path_buf(), key.to_path_buf()));
        self
    }

    fn config(&self) -> Arc<rustls::ClientConfig> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        if let Some(ca) = &self.ca {
            for c in CertificateDer::pem_file_iter(ca).unwrap() {
                roots.add(c.unwrap()).unwrap();
            }
        }
        let versions: &[&rustls::SupportedProtocolVersion] = if self.tls12_only {
            &[&rustls::version::TLS12]
        } else {
            rustls::DEFAULT_VERSIONS
        };
        let b = rustls::ClientConfig::builder_with_provider(provider)
            .with_protocol_versions(versions)
            .unwrap()
            .with_root_certificates(roots);
        let cfg = match &self.cert {
            Some((c, k)) => {
                let chain = CertificateDer::pem_file_iter(c)
                    .unwrap()
                    .map(Result::unwrap)
                    .collect();
                b.with_client_auth_cert(chain, PrivateKeyDer::from_pem_file(k).unwrap())
                    .unwrap()
            }
            None => b.with_no_client_auth(),
        };
        Arc::new(cfg)
    }

    /// A TLS connection to `addr` with the handshake done, or why not.
    fn connect(
        &self,
        addr: &str,
    ) -> Result<rustls::StreamOwned<rustls::ClientConnection, TcpStream>, String> {
        let tcp = TcpStream::connect(addr).map_err(|e| e.to_string())?;
        tcp.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        let conn = rustls::ClientConnection::new(
            self.config(),
            ServerName::try_from("127.0.0.1").unwrap(),
        )
        .unwrap();
        let mut s = rustls::StreamOwned::new(conn, tcp);
        while s.conn.is_handshaking() {
            s.conn
                .complete_io(&mut s.sock)
                .map_err(|e| format!("handshake: {e}"))?;
        }
        Ok(s)
    }

    /// One request over a new TLS connection (`Connection: close`); the response, or why
    /// there was none.
    fn request(&self, addr: &str, req: &str) -> Result<Resp, String> {
        let mut s = self.connect(addr)?;
        s.write_all(req.as_bytes())
            .map_err(|e| format!("send: {e}"))?;
        s.flush().map_err(|e| format!("send: {e}"))?;
        read_response(&mut s)
    }

    fn get(&self, addr: &str, path: &str, auth: Option<(&str, &str)>) -> Result<Resp, String> {
        self.request(addr, &raw_request("GET", path, auth, ""))
    }
}

fn basic(user: &str, password: &str) -> String {
    format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
    )
}

/// `METHOD path` with `Connection: close`, an optional Authorization header and `extra`
/// header lines (each ending in CRLF), and no body.
fn raw_request(method: &str, path: &str, auth: Option<(&str, &str)>, extra: &str) -> String {
    let auth = auth
        .map(|(u, p)| format!("Authorization: {}\r\n", basic(u, p)))
        .unwrap_or_default();
    format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n{auth}{extra}Connection: close\r\n\r\n")
}

/// Reads one response: the head, then Content-Length bytes of body (or to EOF).
fn read_response(s: &mut impl Read) -> Result<Resp, String> {
    let mut raw = Vec::new();
    let mut buf = [0u8; 16384];
    let mut want: Option<usize> = None;
    loop {
        if let Some(w) = want {
            if raw.len() >= w {
                break;
            }
        }
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => raw.extend_from_slice(&buf[..n]),
            // A peer that closes without close_notify, after a whole response.
            Err(e) if e.kind() == ErrorKind::UnexpectedEof && !raw.is_empty() => break,
            Err(e) => return Err(format!("read: {e}")),
        }
        if want.is_none() {
            if let Some(end) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&raw[..end]).to_ascii_lowercase();
                let len = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse::<usize>().ok());
                // (A HEAD answer has a Content-Length and no body: read to EOF.)
                if let Some(len) = len {
                    want = Some(end + 4 + len);
                }
            }
        }
    }
    common::http::parse(&raw)
}

// ------------------------------------------------------------------ the daemon

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// A test setting: certificates, a daemon config (one file drive with a slow canary),
/// and a web config written by each test.
struct Rig {
    dir: tempfile::TempDir,
    pki: Pki,
    config: PathBuf,
    web: PathBuf,
}

impl Rig {
    fn new() -> Rig {
        let dir = common::shm_dir("dp-httpsec-");
        let d = dir.path();
        let pki_dir = d.join("pki");
        std::fs::create_dir(&pki_dir).unwrap();
        let pki = Pki::make(&pki_dir);
        let config = d.join("driveprobe.toml");
        std::fs::write(
            &config,
            format!(
                "state_dir = \"{}\"\ndiscovery.enabled = false\nhealth_interval = \"2s\"\n\n{}\
                 [[probe]]\nname = \"rd\"\ndrives = [\"*\"]\nwindow = \"5s\"\n\
                 workload = {{ rate_iops = 20 }}\n",
                d.join("state").display(),
                file_drive("d", &d.join("d.dat"), "8MiB"),
            ),
        )
        .unwrap();
        Rig {
            web: pki_dir.join("web.yml"),
            dir,
            pki,
            config,
        }
    }

    /// Writes the web config (in the PKI dir, so relative paths name its files).
    fn write_web(&self, yaml: &str) {
        std::fs::write(&self.web, yaml).unwrap();
    }

    fn start(&self) -> Daemon {
        let web = self.web.to_str().unwrap();
        Daemon::start_args(
            &self.config,
            &["--web-config-file", web],
            &[("RUST_LOG", "driveprobe=debug")],
        )
    }

    fn client(&self) -> Client {
        Client::trusting(&self.pki.path("ca.crt"))
    }
}

fn hash(password: &str) -> String {
    bcrypt::hash(password, COST).unwrap()
}

/// TLS (relative paths) and one user.
fn tls_and_auth() -> String {
    format!(
        "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n\
         http_server_config:\n  headers:\n    Strict-Transport-Security: max-age=31536000\n\
         basic_auth_users:\n  {USER}: {}\n",
        hash(PASSWORD)
    )
}

fn auth() -> Option<(&'static str, &'static str)> {
    Some((USER, PASSWORD))
}

/// Held by the tests that compare bcrypt times, so that one's flood does not skew the
/// other's figures.
fn timing() -> std::sync::MutexGuard<'static, ()> {
    static TIMING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    TIMING.lock().unwrap_or_else(|e| e.into_inner())
}

/// Waits until the daemon's log has `needle`, or panics with the log after `limit`.
fn wait_log(d: &Daemon, needle: &str, limit: Duration) {
    let t0 = Instant::now();
    while !d.log().contains(needle) {
        assert!(
            t0.elapsed() < limit,
            "no {needle:?} in the log after {limit:?}:\n{}",
            d.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

// ------------------------------------------------------------------ TLS and basic auth

#[test]
fn https_with_basic_auth() {
    let _timing = timing();
    let rig = Rig::new();
    rig.write_web(&tls_and_auth());
    let d = rig.start();
    let c = rig.client();

    // The right user and password: 200 over TLS, with the web config's header.
    let r = c.get(&d.addr, "/metrics", auth()).unwrap();
    assert_eq!(r.status, 200, "{r:?}");
    assert!(r.text().contains("driveprobe_drive_up"), "{}", r.text());
    assert_eq!(
        r.header("strict-transport-security"),
        Some("max-age=31536000")
    );
    assert!(d.log().contains("TLS on"), "{}", d.log());

    // Wrong password, unknown user, no credentials, another scheme, garbage: 401.
    let cases: [(&str, String); 6] = [
        (
            "wrong password",
            format!("Authorization: {}\r\n", basic(USER, "wrong")),
        ),
        (
            "unknown user",
            format!("Authorization: {}\r\n", basic("mallory", PASSWORD)),
        ),
        (
            "empty password",
            format!("Authorization: {}\r\n", basic(USER, "")),
        ),
        ("no credentials", String::new()),
        ("bearer", "Authorization: Bearer abc\r\n".into()),
        ("not base64", "Authorization: Basic %%%\r\n".into()),
    ];
    for (what, hdr) in &cases {
        for path in ["/metrics", "/", "/healthz", "/api/v1/runs", "/nope"] {
            let r = c
                .request(&d.addr, &raw_request("GET", path, None, hdr))
                .unwrap();
            assert_eq!(r.status, 401, "{what} {path}: {r:?}");
            assert_eq!(
                r.header("www-authenticate"),
                Some("Basic realm=\"driveprobe\""),
                "{what}"
            );
            assert!(!r.text().contains("driveprobe_"), "{what}: {}", r.text());
        }
    }
    // HEAD without credentials: 401 and no body.
    let r = c
        .request(&d.addr, &raw_request("HEAD", "/metrics", None, ""))
        .unwrap();
    assert_eq!(r.status, 401);
    assert!(r.body.is_empty());

    // Plain HTTP to the TLS port: no HTTP answer, the connection is closed.
    let mut s = TcpStream::connect(&d.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(raw_request("GET", "/metrics", auth(), "").as_bytes())
        .unwrap();
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    assert!(
        !got.starts_with(b"HTTP/"),
        "plain HTTP was answered: {:?}",
        String::from_utf8_lossy(&got)
    );

    // A client that does not trust our CA refuses the server (the certificate is checked),
    // one that trusts another CA too.
    let e = Client::default()
        .get(&d.addr, "/metrics", auth())
        .unwrap_err();
    assert!(e.contains("handshake"), "{e}");
    let e = Client::trusting(&rig.pki.path("rogue-ca.crt"))
        .get(&d.addr, "/metrics", auth())
        .unwrap_err();
    assert!(
        e.contains("UnknownIssuer") || e.contains("certificate"),
        "{e}"
    );
    // TLS 1.2 is accepted by default.
    let tls12 = Client {
        tls12_only: true,
        ..rig.client()
    };
    assert_eq!(tls12.get(&d.addr, "/healthz", auth()).unwrap().status, 200);

    // Timing: an unknown user costs a bcrypt like a known one with a wrong password (no
    // shortcut that tells which users exist); the right password is cached after the
    // first check, so a scrape costs no bcrypt.
    let mut s = c.connect(&d.addr).unwrap();
    let mut timed = |user: &str, password: &str, expect: u16| {
        let req = format!(
            "GET /healthz HTTP/1.1\r\nHost: x\r\nAuthorization: {}\r\n\r\n",
            basic(user, password)
        );
        let t0 = Instant::now();
        s.write_all(req.as_bytes()).unwrap();
        let r = read_response(&mut s).unwrap();
        assert_eq!(r.status, expect, "{user}");
        t0.elapsed()
    };
    let median = |mut v: Vec<Duration>| {
        v.sort();
        v[v.len() / 2]
    };
    // Distinct wrong passwords: a repeated one is refused from the failure cache.
    let known_wrong = median(
        (0..5)
            .map(|i| timed(USER, &format!("nope{i}"), 401))
            .collect(),
    );
    let unknown = median(
        (0..5)
            .map(|i| timed("mallory", &format!("nope{i}"), 401))
            .collect(),
    );
    // A repeat costs no bcrypt.
    let repeated = median((0..5).map(|_| timed(USER, "nope0", 401)).collect());
    let right: Vec<Duration> = (0..20).map(|_| timed(USER, PASSWORD, 200)).collect();
    let cached: Duration = right[1..].iter().sum();
    // The median of 5, like the daemon's figures: one sample taken while another test
    // hashes too could be twice as long.
    let bcrypt_once = bcrypt_once();
    println!(
        "bcrypt cost {COST} here: {bcrypt_once:?}; 401 known user {known_wrong:?}, unknown \
         user {unknown:?}; 19 cached successes {cached:?} in all"
    );
    assert!(
        unknown * 3 >= known_wrong && known_wrong * 3 >= unknown,
        "an unknown user ({unknown:?}) and a wrong password ({known_wrong:?}) must cost alike"
    );
    assert!(
        known_wrong * 2 >= bcrypt_once,
        "a failed check ({known_wrong:?}) must run bcrypt ({bcrypt_once:?})"
    );
    assert!(
        repeated * 4 < bcrypt_once,
        "a repeated wrong password ({repeated:?}) must be refused from the cache (one bcrypt \
         takes {bcrypt_once:?})"
    );
    assert!(
        cached < bcrypt_once * 4,
        "19 requests with the right password took {cached:?}: they must hit the cache \
         (one bcrypt takes {bcrypt_once:?})"
    );

    // The `--web.config.file` spelling is the same option.
    let out = Command::new(BIN)
        .args(["daemon", "--help"])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("web.config.file"));
}

/// Concurrent clients sending distinct wrong passwords in the flood test.
const FLOOD_CLIENTS: usize = 16;
/// Valid scrapes timed during the flood.
const FLOOD_SCRAPES: usize = 10;

/// The median of five bcrypt checks of the test's password on this machine (one check
/// taken while another test hashes could be twice as long): the unit of the time bounds.
/// One bcrypt check's time, now.
fn bcrypt_now() -> Duration {
    static HASH: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let h = HASH.get_or_init(|| hash(PASSWORD));
    let t0 = Instant::now();
    assert!(bcrypt::verify(PASSWORD, h).unwrap());
    t0.elapsed()
}

/// One bcrypt check's time: the median of five.
fn bcrypt_once() -> Duration {
    let mut v: Vec<Duration> = (0..5).map(|_| bcrypt_now()).collect();
    v.sort();
    v[2]
}

/// `FLOOD_CLIENTS` clients from 127.0.0.1, each scraping /metrics again and again with a
/// fresh wrong password (no cache can answer it: each costs a bcrypt).
struct Flood {
    stop: Arc<AtomicBool>,
    sent: Arc<AtomicUsize>,
    refused: Arc<AtomicUsize>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Flood {
    /// Starts the flood; returns once it is answered (bcrypt runs for it) and most of its
    /// clients have a check waiting.
    fn start(addr: &str) -> Flood {
        let stop = Arc::new(AtomicBool::new(false));
        let sent = Arc::new(AtomicUsize::new(0));
        let refused = Arc::new(AtomicUsize::new(0));
        let threads = (0..FLOOD_CLIENTS)
            .map(|i| {
                let (addr, stop, sent, refused) = (
                    addr.to_string(),
                    stop.clone(),
                    sent.clone(),
                    refused.clone(),
                );
                std::thread::spawn(move || {
                    let mut n = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        let Ok(mut s) = connect_from([127, 0, 0, 1], &addr) else {
                            continue;
                        };
                        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
                        while !stop.load(Ordering::Relaxed) {
                            n += 1;
                            let req = format!(
                                "GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: {}\r\n\r\n",
                                basic(USER, &format!("wrong-{i}-{n}"))
                            );
                            if s.write_all(req.as_bytes()).is_err() {
                                break;
                            }
                            sent.fetch_add(1, Ordering::Relaxed);
                            match read_response(&mut s) {
                                Ok(r) => {
                                    assert_eq!(r.status, 401);
                                    refused.fetch_add(1, Ordering::Relaxed);
                                }
                                Err(_) => break,
                            }
                        }
                    }
                })
            })
            .collect();
        let flood = Flood {
            stop,
            sent,
            refused,
            threads,
        };
        let t0 = Instant::now();
        while flood.refused.load(Ordering::Relaxed) == 0 || flood.waiting() < FLOOD_CLIENTS / 2 {
            assert!(
                t0.elapsed() < Duration::from_secs(60),
                "the flood did not start"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        flood
    }

    /// Wrong passwords sent and not answered yet: checks waiting for bcrypt.
    fn waiting(&self) -> usize {
        self.sent
            .load(Ordering::Relaxed)
            .saturating_sub(self.refused.load(Ordering::Relaxed))
    }

    /// Stops the flood; returns how many of its requests were refused in all.
    fn stop(self) -> usize {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads {
            t.join().unwrap();
        }
        self.refused.load(Ordering::Relaxed)
    }
}

/// After a reload (the same users), `FLOOD_CLIENTS` clients send distinct wrong passwords
/// as fast as they are answered while a valid client scrapes: every valid scrape answers
/// within 4 bcrypt times (measured here), because what the old config's checks
/// remembered goes on and the flood is never ahead of it; each flood request still costs
/// a bcrypt (401).
#[test]
fn a_flood_of_wrong_passwords_after_a_reload_does_not_hold_up_scrapes() {
    let _timing = timing();
    let rig = Rig::new();
    let web = format!("basic_auth_users:\n  {USER}: {}\n", hash(PASSWORD));
    rig.write_web(&web);
    let d = rig.start();
    let good = basic(USER, PASSWORD);
    let scrape = |d: &Daemon| {
        let t0 = Instant::now();
        let (code, _, body) = d.get_with("/metrics", &[("Authorization", &good)]);
        assert_eq!(code, 200, "{body}");
        t0.elapsed()
    };
    scrape(&d);
    // A reload with the same users.
    rig.write_web(&web);
    d.signal("HUP");
    wait_log(&d, "web config reloaded", Duration::from_secs(10));

    let bcrypt_once = bcrypt_once();
    // The flood is answered (bcrypt runs for it), and most of its clients have a check
    // waiting, before the first valid request.
    let flood = Flood::start(&d.addr);
    let waiting = || flood.waiting();
    let before = waiting();
    let took: Vec<Duration> = (0..FLOOD_SCRAPES).map(|_| scrape(&d)).collect();
    let after = waiting();
    let refused = flood.stop();
    let bound = bcrypt_once * 4;
    println!(
        "bcrypt {bcrypt_once:?}; {FLOOD_CLIENTS} clients, {before} then {after} wrong \
         passwords waiting for a check around {FLOOD_SCRAPES} valid scrapes, which took \
         {took:?} (bound {bound:?}); {} refused in all",
        refused
    );
    assert!(
        before.min(after) >= FLOOD_CLIENTS / 2,
        "the flood was waiting for bcrypt throughout"
    );
    for (i, t) in took.iter().enumerate() {
        assert!(
            *t < bound,
            "valid scrape {i} took {t:?} during the flood (one bcrypt: {bcrypt_once:?})"
        );
    }
    let (st, _) = d.terminate(Duration::from_secs(10));
    assert!(st.success(), "{st}");
}

#[test]
fn client_certificates_required() {
    let rig = Rig::new();
    rig.write_web(
        "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n\
         \x20 client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n\
         \x20 min_version: TLS13\n",
    );
    // The exporter-toolkit spelling of the flag.
    let d = Daemon::start_args(
        &rig.config,
        &["--web.config.file", rig.web.to_str().unwrap()],
        &[],
    );
    let p = |n: &str| rig.pki.path(n);
    // With a certificate from our CA: served (no basic auth configured).
    let good = rig.client().with_cert(&p("client.crt"), &p("client.key"));
    let r = good.get(&d.addr, "/healthz", None).unwrap();
    assert_eq!(r.status, 200, "{r:?}");
    // Without one, or with one from another CA: no HTTP answer.
    for (what, c) in [
        ("no client certificate", rig.client()),
        (
            "a rogue client certificate",
            rig.client()
                .with_cert(&p("rogue-client.crt"), &p("rogue-client.key")),
        ),
    ] {
        let r = c.get(&d.addr, "/healthz", None);
        assert!(r.is_err(), "{what}: answered {r:?}");
        println!("{what}: {}", r.unwrap_err());
    }
    // min_version TLS13: a TLS 1.2 client is refused.
    let old = Client {
        tls12_only: true,
        ..good.clone()
    };
    assert!(old.get(&d.addr, "/healthz", None).is_err());
    assert_eq!(good.get(&d.addr, "/healthz", None).unwrap().status, 200);
}

#[test]
fn prometheus_scrapes_over_https_with_basic_auth() {
    let rig = Rig::new();
    rig.write_web(&tls_and_auth());
    let d = rig.start();
    let pw_file = rig.dir.path().join("password");
    std::fs::write(&pw_file, PASSWORD).unwrap();
    let extra = format!(
        "    scheme: https\n    tls_config:\n      ca_file: {}\n      server_name: localhost\n\
         \x20   basic_auth:\n      username: {USER}\n      password_file: {}\n",
        yaml_quote(rig.pki.path("ca.crt").to_str().unwrap()),
        yaml_quote(pw_file.to_str().unwrap()),
    );
    let prom = Prometheus::start_with("driveprobe-tls", &d.addr, &[], &extra);
    let up = prom.wait_for(
        "the HTTPS target up",
        "up{job=\"driveprobe-tls\"} == 1",
        Duration::from_secs(30),
    );
    assert_eq!(up.series.len(), 1);
    let drive = prom.wait_for(
        "a daemon series over HTTPS",
        "driveprobe_drive_up{job=\"driveprobe-tls\", drive=\"d\"} == 1",
        Duration::from_secs(30),
    );
    assert_eq!(drive.series.len(), 1);
    // A second job with the wrong password is down (its scrapes get 401).
    drop(prom);
    let wrong = dbg_extra_with_password(&rig, "wrong");
    let prom = Prometheus::start_with("driveprobe-bad", &d.addr, &[], &wrong);
    let down = prom.wait_for(
        "the target down with a wrong password",
        "up{job=\"driveprobe-bad\"} == 0",
        Duration::from_secs(30),
    );
    assert_eq!(down.series.len(), 1);
    let targets = prom.api("/api/v1/targets").unwrap().to_string();
    assert!(targets.contains("401"), "{targets}");
}

fn dbg_extra_with_password(rig: &Rig, password: &str) -> String {
    format!(
        "    scheme: https\n    tls_config:\n      ca_file: {}\n\
         \x20   basic_auth:\n      username: {USER}\n      password: {}\n",
        yaml_quote(rig.pki.path("ca.crt").to_str().unwrap()),
        yaml_quote(password),
    )
}

// ------------------------------------------------------------------ bad web configs

#[test]
fn bad_web_configs_are_refused_with_exit_2() {
    let rig = Rig::new();
    let h = bcrypt::hash("x", 4).unwrap();
    let tls = "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n";
    let cases: Vec<(&str, String, &[&str])> =
        vec![
        (
            "unknown top-level key",
            format!("{tls}basic_auth_user:\n  a: {h}\n"),
            &["line 4 column 1: unknown key (is `basic_auth_users` meant?)"],
        ),
        (
            "unknown TLS key",
            "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  ciphers: [x]\n"
                .into(),
            &["line 4 column 3: unknown key"],
        ),
        (
            "unsupported toolkit key",
            format!("{tls}  cipher_suites: [TLS_AES_128_GCM_SHA256]\n"),
            &["cipher_suites", "not supported"],
        ),
        (
            "missing cert file",
            "tls_server_config:\n  cert_file: nothere.crt\n  key_file: server.key\n".into(),
            &["cert_file", "nothere.crt"],
        ),
        (
            "no key_file",
            "tls_server_config:\n  cert_file: server.crt\n".into(),
            &["key_file"],
        ),
        (
            "key not matching the certificate",
            "tls_server_config:\n  cert_file: server.crt\n  key_file: client.key\n".into(),
            &["does not fit", "client.key"],
        ),
        (
            "a key as the certificate",
            "tls_server_config:\n  cert_file: server.key\n  key_file: server.key\n".into(),
            &["cert_file", "no certificate"],
        ),
        (
            "bad hash",
            format!("{tls}basic_auth_users:\n  alice: $2y$10$tooshort\n"),
            &["line 5 column 10: basic_auth_users: not a bcrypt hash"],
        ),
        (
            "plain-text password",
            format!("{tls}basic_auth_users:\n  alice: hunter2\n"),
            &["line 5 column 10: basic_auth_users: not a bcrypt hash"],
        ),
        (
            "client auth without a CA",
            format!("{tls}  client_auth_type: RequireAndVerifyClientCert\n"),
            &["client_ca_file"],
        ),
        (
            "unchecked client certificates",
            format!("{tls}  client_auth_type: RequireAnyClientCert\n  client_ca_file: ca.crt\n"),
            &["RequireAnyClientCert"],
        ),
        ("TLS 1.0", format!("{tls}  min_version: TLS10\n"), &["min_version"]),
        (
            "unknown header",
            format!("{tls}http_server_config:\n  headers:\n    Server: evil\n"),
            &["line 6 column 5: unknown key"],
        ),
        ("not YAML", "tls_server_config: [\n".into(), &["web config"]),
        ("a list", "- 1\n- 2\n".into(), &["web config"]),
    ];
    for (what, yaml, needles) in cases {
        rig.write_web(&yaml);
        let out = Command::new(BIN)
            .args(["daemon", "--config"])
            .arg(&rig.config)
            .args(["--listen", "127.0.0.1:0", "--web-config-file"])
            .arg(&rig.web)
            .env("RUST_LOG", "off")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{what}: {err}");
        let lines: Vec<&str> = err.lines().collect();
        assert_eq!(lines.len(), 1, "{what}: not one line: {err}");
        assert!(
            lines[0].starts_with("driveprobe: error: web config "),
            "{what}: {err}"
        );
        for n in needles {
            assert!(lines[0].contains(n), "{what}: no {n:?} in {err}");
        }
        assert!(out.stdout.is_empty(), "{what}: it started listening");
        println!("{what}: {}", lines[0]);
        // check-config refuses it before any daemon does, with the same line.
        let check = Command::new(BIN)
            .args(["check-config", "--web-config-file"])
            .arg(&rig.web)
            .output()
            .unwrap();
        assert_eq!(check.status.code(), Some(2), "{what}: check-config");
        assert_eq!(
            String::from_utf8_lossy(&check.stderr),
            err,
            "{what}: check-config"
        );
    }
    // A good one: both files checked, each named in one line.
    rig.write_web(&format!("{tls}basic_auth_users:\n  alice: {h}\n"));
    let check = Command::new(BIN)
        .arg("check-config")
        .arg(&rig.config)
        .arg("--web-config-file")
        .arg(&rig.web)
        .output()
        .unwrap();
    common::assert_ok(&check, "check-config FILE --web-config-file WEB");
    let said = String::from_utf8_lossy(&check.stdout);
    let lines: Vec<&str> = said.lines().collect();
    assert_eq!(lines.len(), 2, "{said}");
    assert!(
        lines[0].starts_with(&format!("{}: ok (", rig.config.display())),
        "{said}"
    );
    assert_eq!(
        lines[1],
        format!(
            "{}: ok (TLS on, basic auth for 1 user(s), 0 extra header(s))",
            rig.web.display()
        )
    );
    // Neither file: a usage error.
    let none = Command::new(BIN).arg("check-config").output().unwrap();
    assert_eq!(none.status.code(), Some(2));
    // A file that is not there.
    let out = Command::new(BIN)
        .args(["daemon", "--config"])
        .arg(&rig.config)
        .args([
            "--listen",
            "127.0.0.1:0",
            "--web-config-file",
            "/nonexistent/web.yml",
        ])
        .env("RUST_LOG", "off")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/web.yml"));
}

#[test]
fn sighup_rereads_the_web_config() {
    let rig = Rig::new();
    rig.write_web(&tls_and_auth());
    let d = rig.start();
    let c = rig.client();
    assert_eq!(c.get(&d.addr, "/healthz", auth()).unwrap().status, 200);
    // A new password.
    rig.write_web(&format!(
        "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n\
         basic_auth_users:\n  {USER}: {}\n",
        hash("new password")
    ));
    d.signal("HUP");
    wait_log(&d, "web config reloaded", Duration::from_secs(10));
    assert_eq!(c.get(&d.addr, "/healthz", auth()).unwrap().status, 401);
    let new = Some((USER, "new password"));
    assert_eq!(c.get(&d.addr, "/healthz", new).unwrap().status, 200);
    // An invalid file: one line in the log, the previous settings stay.
    rig.write_web(
        "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  bogus: 1\n",
    );
    d.signal("HUP");
    wait_log(&d, "the new web config is refused", Duration::from_secs(10));
    let line = d
        .log()
        .lines()
        .find(|l| l.contains("the new web config is refused"))
        .unwrap()
        .to_string();
    assert!(
        line.contains("line 4 column 3: unknown key") && !line.contains("bogus"),
        "{line}"
    );
    assert_eq!(c.get(&d.addr, "/healthz", new).unwrap().status, 200);
    assert_eq!(c.get(&d.addr, "/healthz", auth()).unwrap().status, 401);
    // The daemon still stops cleanly.
    let (st, _) = d.terminate(Duration::from_secs(10));
    assert!(st.success(), "{st}");
}

/// The value of a gauge without labels in a text exposition.
fn gauge(metrics: &str, name: &str) -> Option<f64> {
    metrics.lines().find_map(|l| {
        l.strip_prefix(name)
            .and_then(|rest| rest.strip_prefix(' '))
            .and_then(|v| v.trim().parse().ok())
    })
}

/// A fake shadow file: what a web config swapped for a symlink to `/etc/shadow` reads.
const SHADOW: &str = "root:$6$SECRETHASHroot$Fv0tq1aXyJ0QwVb:19000:0:99999:7:::\n\
                      daemon:*:19000:0:99999:7:::\n\
                      alice:$6$SECRETHASHalice$9pLqZ2:19000:0:99999:7:::\n";

/// Issue 33: a refused web config is logged, shown and exported without its content, and
/// counts as a refused reload. The web config swapped for a symlink to a shadow file, a
/// plain-text password as a user's value and in a `user:password` line, a secret as an
/// unknown key: at start (`daemon` and `check-config`, exit 2) and at SIGHUP (the log, the
/// status page, `/metrics`). Each names the file and the line; none has the secret;
/// `driveprobe_config_last_reload_successful` is 0 after each and 1 after a good reload.
#[test]
fn a_refused_web_config_is_told_by_place_never_by_content() {
    let rig = Rig::new();
    let shadow = rig.dir.path().join("shadow");
    std::fs::write(&shadow, SHADOW).unwrap();
    let h = hash(PASSWORD);
    let tls = "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n";
    // (what, the web config or None for the symlink, the place said)
    let cases: Vec<(&str, Option<String>, &str)> = vec![
        ("a symlink to a shadow file", None, "line 1 column 1"),
        (
            "a plain-text password",
            Some(format!(
                "{tls}basic_auth_users:\n  {USER}: SECRETpassword\n"
            )),
            "line 5 column 15",
        ),
        (
            "a user:password line",
            Some(format!("{tls}basic_auth_users:\n  {USER}:SECRETpassword\n")),
            "line 5 column 3",
        ),
        (
            "a secret as an unknown key",
            Some(format!("{tls}SECRETtoken: {h}\n")),
            "line 4 column 1",
        ),
    ];
    let write_case = |yaml: &Option<String>| {
        let _ = std::fs::remove_file(&rig.web);
        match yaml {
            Some(y) => rig.write_web(y),
            None => std::os::unix::fs::symlink(&shadow, &rig.web).unwrap(),
        }
    };
    let web = rig.web.display().to_string();
    // At start: the daemon and check-config refuse it in one line, by place.
    for (what, yaml, place) in &cases {
        write_case(yaml);
        let out = Command::new(BIN)
            .args(["daemon", "--config"])
            .arg(&rig.config)
            .args(["--listen", "127.0.0.1:0", "--web-config-file", &web])
            .env("RUST_LOG", "driveprobe=debug")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        let check = Command::new(BIN)
            .args(["check-config", "--web-config-file", &web])
            .output()
            .unwrap();
        for (how, out) in [("daemon", &out), ("check-config", &check)] {
            let said = format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            assert_eq!(out.status.code(), Some(2), "{what} ({how}): {said}");
            assert!(!said.contains("SECRET"), "{what} ({how}): {said}");
            assert!(
                said.contains(&format!("web config {web}: {place}")),
                "{what} ({how}): no {place:?} in {said}"
            );
            println!("{what} ({how}): {}", said.trim_end());
        }
    }
    // At SIGHUP: the old web config stays, nothing shows the secret, the reload is refused.
    rig.write_web(&tls_and_auth());
    let d = rig.start();
    let c = rig.client();
    let metrics = |c: &Client| c.get(&d.addr, "/metrics", auth()).unwrap().text();
    assert_eq!(
        gauge(&metrics(&c), "driveprobe_config_last_reload_successful"),
        Some(1.0)
    );
    let refused = |log: &str| log.matches("the new web config is refused").count();
    for (i, (what, yaml, place)) in cases.iter().enumerate() {
        write_case(yaml);
        d.signal("HUP");
        let t0 = Instant::now();
        while refused(&d.log()) <= i {
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "{what}: no refusal logged:\n{}",
                d.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let log = d.log();
        assert!(
            !log.contains("SECRET"),
            "{what}: the log has the secret:\n{log}"
        );
        let line = log
            .lines()
            .rfind(|l| l.contains("the new web config is refused"))
            .unwrap();
        assert!(
            line.contains(&web) && line.contains(place),
            "{what}: no {web} {place} in {line}"
        );
        let page = c.get(&d.addr, "/", auth()).unwrap();
        assert_eq!(page.status, 200, "{what}");
        let page = page.text();
        assert!(
            !page.contains("SECRET"),
            "{what}: the status page has the secret"
        );
        assert!(
            page.contains("last reload refused") && page.contains(place),
            "{what}: the status page does not show the refusal"
        );
        let m = metrics(&c);
        assert!(!m.contains("SECRET"), "{what}: /metrics has the secret");
        assert_eq!(
            gauge(&m, "driveprobe_config_last_reload_successful"),
            Some(0.0),
            "{what}"
        );
    }
    // A good web config again: the reload succeeds, and every surface says so.
    let _ = std::fs::remove_file(&rig.web);
    rig.write_web(&tls_and_auth());
    d.signal("HUP");
    wait_log(&d, "web config reloaded", Duration::from_secs(10));
    let t0 = Instant::now();
    while gauge(&metrics(&c), "driveprobe_config_last_reload_successful") != Some(1.0) {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "still 0 after a good reload"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let page = c.get(&d.addr, "/", auth()).unwrap().text();
    assert!(!page.contains("last reload refused"), "{page}");
    let (st, _) = d.terminate(Duration::from_secs(10));
    assert!(st.success(), "{st}");
}

// ------------------------------------------------------------------ attacks

/// A client that sends a TLS ClientHello, or (after the handshake) a request head, one
/// byte a second; the daemon must drop it after its header read timeout (10 s).
#[test]
fn slow_clients_are_dropped_after_the_header_timeout() {
    let rig = Rig::new();
    rig.write_web(&tls_and_auth());
    let d = rig.start();
    let addr = d.addr.clone();

    // (a) The TLS handshake a byte a second: capture a real ClientHello first.
    let hello = {
        let mut conn = rustls::ClientConnection::new(
            rig.client().config(),
            ServerName::try_from("127.0.0.1").unwrap(),
        )
        .unwrap();
        let mut v = Vec::new();
        conn.write_tls(&mut v).unwrap();
        v
    };
    let a = std::thread::spawn({
        let addr = addr.clone();
        move || {
            let mut s = TcpStream::connect(&addr).unwrap();
            s.set_read_timeout(Some(Duration::from_millis(900)))
                .unwrap();
            let t0 = Instant::now();
            for b in hello.iter().cycle() {
                if t0.elapsed() > Duration::from_secs(30) {
                    return None;
                }
                if s.write_all(&[*b]).is_err() {
                    return Some(t0.elapsed());
                }
                let mut buf = [0u8; 256];
                match s.read(&mut buf) {
                    Ok(0) => return Some(t0.elapsed()),
                    Ok(_) => {}
                    Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                    Err(_) => return Some(t0.elapsed()),
                }
            }
            None
        }
    });

    // (b) Handshake done, then the request head a byte a second (never finished).
    let mut s = rig.client().connect(&addr).unwrap();
    s.sock
        .set_read_timeout(Some(Duration::from_millis(900)))
        .unwrap();
    let head = format!(
        "GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: {}\r\nX-Slow: {}",
        basic(USER, PASSWORD),
        "a".repeat(100)
    );
    let t0 = Instant::now();
    let mut answered = String::new();
    let b_closed = 'outer: {
        for b in head.bytes() {
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "still open after 30 s"
            );
            if s.write_all(&[b]).and_then(|_| s.flush()).is_err() {
                break 'outer t0.elapsed();
            }
            let mut buf = [0u8; 512];
            match s.read(&mut buf) {
                Ok(0) => break 'outer t0.elapsed(),
                Ok(n) => answered.push_str(&String::from_utf8_lossy(&buf[..n])),
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
                Err(_) => break 'outer t0.elapsed(),
            }
        }
        panic!("the whole slow head was sent without the connection being closed");
    };
    let a_closed = a
        .join()
        .unwrap()
        .expect("the slow handshake was never dropped");
    println!("slow TLS handshake dropped after {a_closed:?}; slow header after {b_closed:?}");
    for (what, t) in [("handshake", a_closed), ("header", b_closed)] {
        assert!(
            t >= Duration::from_secs(8) && t <= Duration::from_secs(16),
            "slow {what} dropped after {t:?}; the header read timeout is 10 s"
        );
    }
    assert!(
        answered.is_empty() || answered.starts_with("HTTP/1.1 408"),
        "{answered}"
    );
    // The daemon still serves.
    assert_eq!(
        rig.client().get(&addr, "/healthz", auth()).unwrap().status,
        200
    );
}

#[test]
fn oversized_headers_and_bodies_are_refused() {
    let rig = Rig::new();
    rig.write_web(&tls_and_auth());
    let d = rig.start();
    let c = rig.client();
    // One header of 1 MiB: hyper's head limit (~400 KiB) answers 431 and closes.
    let big = format!("X-Big: {}\r\n", "a".repeat(1 << 20));
    let r = c.request(&d.addr, &raw_request("GET", "/metrics", auth(), &big));
    match &r {
        Ok(r) => assert_eq!(r.status, 431, "{r:?}"),
        // The server may close while the client is still sending.
        Err(e) => assert!(e.contains("send") || e.contains("read"), "{e}"),
    }
    println!("1 MiB header: {:?}", r.as_ref().map(|r| r.status));
    // 200 small headers (hyper allows 100): 431.
    let many: String = (0..200).map(|i| format!("X-H{i}: v\r\n")).collect();
    let r = c
        .request(&d.addr, &raw_request("GET", "/metrics", auth(), &many))
        .unwrap();
    assert_eq!(r.status, 431, "{r:?}");
    // A body on GET: 413 without reading it, and the connection is closed.
    for framing in [
        "Content-Length: 100000000\r\n",
        "Transfer-Encoding: chunked\r\n",
    ] {
        let r = c
            .request(&d.addr, &raw_request("GET", "/metrics", auth(), framing))
            .unwrap();
        assert_eq!(r.status, 413, "{framing}: {r:?}");
        assert!(r.text().contains("no request body"));
    }
    // A body with another method: 405 (the body is not read either).
    let r = c
        .request(
            &d.addr,
            &raw_request("POST", "/metrics", auth(), "Content-Length: 100000000\r\n"),
        )
        .unwrap();
    assert_eq!(r.status, 405);
    assert_eq!(c.get(&d.addr, "/healthz", auth()).unwrap().status, 200);
}

/// Every method but GET and HEAD, with bodies, on every route of `crates/daemon/src/http/routes.rs`
/// (and on paths outside the API): 405 or 404, and nothing about the runs changes.
#[test]
fn nothing_on_the_http_side_changes_a_run() {
    let rig = Rig::new();
    let state = rig.dir.path().join("state");
    std::fs::create_dir_all(state.join("runs")).unwrap();
    // One finished run with its document, and a schedule that is not due (first seen now).
    let run_id = "20261130T010000Z-d-enterprise";
    let doc = state.join("runs").join(format!("{run_id}.json"));
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/results/enterprise-sas-ssd800mm.json"),
        &doc,
    )
    .unwrap();
    let t = now();
    std::fs::write(
        state.join("state.json"),
        serde_json::json!({
            "version": 1,
            "schedules": { "weekly/d": { "first_seen": t } },
            "runs": [{
                "id": run_id, "suite": "enterprise", "drive": "d", "schedule": "weekly",
                "started": t - 7200, "ended": t - 3600, "status": "passed",
                "result_path": doc,
            }],
        })
        .to_string(),
    )
    .unwrap();
    let mut cfg = std::fs::read_to_string(&rig.config).unwrap();
    cfg.push_str(
        "\n[[schedule]]\nname = \"weekly\"\ndrives = [\"d\"]\nsuite = \"enterprise\"\n\
         scale = \"quick\"\ncron = \"0 3 1 1 *\"\nmax_duration = \"1h\"\n",
    );
    std::fs::write(&rig.config, cfg).unwrap();
    rig.write_web(&tls_and_auth());
    let d = rig.start();
    let c = rig.client();

    let snapshot = || {
        let runs = c.get(&d.addr, "/api/v1/runs", auth()).unwrap();
        assert_eq!(runs.status, 200);
        let metrics = c.get(&d.addr, "/metrics", auth()).unwrap().text();
        let run_lines: Vec<String> = metrics
            .lines()
            .filter(|l| l.starts_with("driveprobe_run") || l.starts_with("driveprobe_scheduler"))
            .filter(|l| !l.contains("timestamp") && !l.contains("last_tick"))
            .map(String::from)
            .collect();
        let mut files: Vec<String> = std::fs::read_dir(state.join("runs"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        files.sort();
        (
            runs.text(),
            common::sha256(&state.join("state.json")),
            common::sha256(&doc),
            files,
            run_lines,
        )
    };
    // Let the daemon settle (its first save of the state), then look.
    std::thread::sleep(Duration::from_secs(6));
    let before = snapshot();
    assert!(before.0.contains(run_id), "{}", before.0);

    let routes = [
        "/".to_string(),
        "/metrics".into(),
        "/healthz".into(),
        "/api/v1/drives".into(),
        "/api/v1/runs".into(),
        format!("/runs/{run_id}/report"),
    ];
    let run_path = format!("/api/v1/runs/{run_id}");
    let outside = [
        "/api/v1/runs/start",
        "/api/v1/runs/stop",
        run_path.as_str(),
        "/api/v2/runs",
        "/admin",
        "/runs/new",
        "/debug/pprof",
        "/%2e%2e/state.json",
    ];
    let bodies = [
        (
            "application/json",
            format!(r#"{{"action":"start","suite":"enterprise","drive":"d","id":"{run_id}"}}"#),
        ),
        (
            "application/x-www-form-urlencoded",
            "action=stop&drive=d".to_string(),
        ),
    ];
    let mut tried = 0;
    for method in [
        "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "TRACE", "START",
    ] {
        for path in routes
            .iter()
            .map(String::as_str)
            .chain(outside.iter().copied())
        {
            for (ctype, body) in &bodies {
                let req = format!(
                    "{method} {path} HTTP/1.1\r\nHost: x\r\nAuthorization: {}\r\n\
                     Content-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    basic(USER, PASSWORD),
                    body.len()
                );
                let r = c.request(&d.addr, &req).unwrap();
                assert_eq!(r.status, 405, "{method} {path}: {r:?}");
                assert_eq!(r.header("allow"), Some("GET, HEAD"));
                tried += 1;
            }
        }
    }
    // GET on paths outside the API: 404, with or without a query that looks like a command.
    for path in outside {
        for q in ["", "?action=start&suite=enterprise&drive=d"] {
            let r = c.get(&d.addr, &format!("{path}{q}"), auth()).unwrap();
            assert_eq!(r.status, 404, "GET {path}{q}: {r:?}");
            tried += 1;
        }
    }
    // Queries on the real routes change nothing either.
    for path in &routes {
        let r = c
            .get(
                &d.addr,
                &format!("{path}?action=start&run={run_id}"),
                auth(),
            )
            .unwrap();
        assert!(r.status == 200 || r.status == 503, "{path}: {r:?}");
        tried += 1;
    }
    // Past the state's save interval (5 s): anything marked dirty would be on disk now.
    std::thread::sleep(Duration::from_secs(6));
    let after = snapshot();
    println!("{tried} requests tried; runs, state.json, the run document and runs/ unchanged");
    assert_eq!(before.0, after.0, "the runs list changed");
    assert_eq!(before.1, after.1, "state.json changed");
    assert_eq!(before.2, after.2, "the run document changed");
    assert_eq!(before.3, after.3, "files in runs/ changed");
    assert_eq!(before.4, after.4, "the run and scheduler series changed");
    assert!(!d.log().contains("scheduled run starts"), "{}", d.log());
}

// ------------------------------------------------------------------ clients that never read

/// Connections the report hogs open: the server's cap (256, `Limits::default`) and more.
const HOGS: usize = 272;
/// Report requests each hog pipelines, never reading an answer.
const HOG_PIPELINE: usize = 32;
/// Scrapes made, a quarter of a second apart, while the hogs hold their connections.
const HOG_SCRAPES: usize = 40;

/// `HOGS` clients (the connection cap and more), each with a tiny receive buffer,
/// pipeline `HOG_PIPELINE` requests for the heaviest page (a run's report) and never read:
/// their responses block the server's writes. Meanwhile every scrape of `/metrics` on a
/// new connection is answered with 200 (before: once every slot was blocked on writing,
/// a scrape was closed unanswered until the 30 s stuck limit), within a third of that
/// limit (the only relief the old code had). The bound is that server constant, not a
/// speed: the old failure is an unanswered close, not a slow answer.
#[test]
fn clients_that_pipeline_reports_and_never_read_do_not_starve_scrapes() {
    // Its rendering load would skew the bcrypt times the flood tests measure.
    let _timing = timing();
    let rig = Rig::new();
    let state = rig.dir.path().join("state");
    std::fs::create_dir_all(state.join("runs")).unwrap();
    let run_id = "20261130T010000Z-d-enterprise";
    let doc = state.join("runs").join(format!("{run_id}.json"));
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/results/enterprise-sas-ssd800mm.json"),
        &doc,
    )
    .unwrap();
    let t = now();
    std::fs::write(
        state.join("state.json"),
        serde_json::json!({
            "version": 1,
            "runs": [{
                "id": run_id, "suite": "enterprise", "drive": "d",
                "started": t - 7200, "ended": t - 3600, "status": "passed",
                "result_path": doc,
            }],
        })
        .to_string(),
    )
    .unwrap();
    rig.write_web(""); // plain HTTP, no auth: the hogs cost the server rendering only
    let d = rig.start();
    let report = format!("/runs/{run_id}/report");
    let (code, _, page) = d.get_with(&report, &[]);
    assert_eq!(code, 200, "{page}");
    let stuck_after = Duration::from_secs(30); // `Limits::default().stuck_after`
    let bound = stuck_after / 3;

    let addr: std::net::SocketAddr = d.addr.parse().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .unwrap();
    let req = format!("GET {report} HTTP/1.1\r\nHost: x\r\n\r\n").repeat(HOG_PIPELINE);
    let t0 = Instant::now();
    let hogs: Vec<TcpStream> = (0..HOGS)
        .map(|_| {
            let s = rt
                .block_on(async {
                    let sock = tokio::net::TcpSocket::new_v4()?;
                    sock.set_recv_buffer_size(4096)?;
                    sock.connect(addr).await?.into_std()
                })
                .unwrap();
            s.set_nonblocking(false).unwrap();
            // A hog closed at once (at the cap) may not take all of it: no matter.
            let _ = (&s).write_all(req.as_bytes());
            s
        })
        .collect();
    // Every hog has been answered in part (its writes then block), or closed.
    for h in &hogs {
        h.set_nonblocking(true).unwrap();
        loop {
            match h.peek(&mut [0u8; 1]) {
                Ok(_) => break,
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    assert!(
                        t0.elapsed() < Duration::from_secs(120),
                        "a hog got no answer in 120 s"
                    );
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err(_) => break,
            }
        }
    }
    let filled = t0.elapsed();
    let mut took = Vec::new();
    for i in 0..HOG_SCRAPES {
        let t1 = Instant::now();
        let r = daemon::try_http_get(&d.addr, "/metrics", &[]);
        let dt = t1.elapsed();
        match r {
            Ok((200, _, _)) => {}
            other => panic!(
                "scrape {i} with {HOGS} hogs pipelining reports: {:?} after {dt:?}",
                other.map(|(code, _, body)| (code, body.chars().take(200).collect::<String>()))
            ),
        }
        assert!(dt < bound, "scrape {i} took {dt:?} (bound {bound:?})");
        took.push(dt);
        std::thread::sleep(Duration::from_millis(250));
    }
    println!(
        "{HOGS} hogs x {HOG_PIPELINE} reports of {} bytes, all answered in part after \
         {filled:?}; {HOG_SCRAPES} scrapes took {took:?} (bound {bound:?})",
        page.len()
    );
    let (st, _) = d.terminate(Duration::from_secs(10));
    assert!(st.success(), "{st}");
}

// ------------------------------------------------------------------ fair bcrypt pool

/// Users checked for the first time, one each, from another address during the flood.
const FRESH_USERS: usize = 5;

/// A TCP connection to `addr` from the local address `from` (any of 127/8 on Linux).
fn connect_from(from: [u8; 4], addr: &str) -> std::io::Result<TcpStream> {
    let addr: std::net::SocketAddr = addr.parse().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()?;
    let s = rt.block_on(async {
        let sock = tokio::net::TcpSocket::new_v4()?;
        sock.bind((std::net::Ipv4Addr::from(from), 0).into())?;
        sock.connect(addr).await?.into_std()
    })?;
    s.set_nonblocking(false)?;
    Ok(s)
}

/// `FLOOD_CLIENTS` clients on 127.0.0.1 send distinct wrong passwords (no cache can
/// absorb them) as fast as they are answered; meanwhile `FRESH_USERS` users never
/// verified before each scrape once from 127.0.0.2. Each is answered 200 within 6 bcrypt
/// times (measured here): the pool serves addresses round robin, so a newcomer's check
/// waits for the one running and the flood's next turn (about 3 bcrypt times in all with
/// a pool of one), not for every check the flood has queued (at least `FLOOD_CLIENTS` / 2;
/// before: first come, first served, about 17 bcrypt times on two CPUs).
///
/// A bcrypt time is what one takes on this machine as it is then: measured before the
/// flood, and again just before and just after each request, with the flood and whatever
/// else the machine runs competing for the CPUs (a busy host slows the daemon's bcrypt as
/// much as this one); each request's bound is 6 of the slowest of these.
#[test]
fn a_new_client_gets_its_share_of_bcrypt_during_a_flood_from_another_address() {
    let _timing = timing();
    let rig = Rig::new();
    let fresh: Vec<(String, String)> = (0..FRESH_USERS)
        .map(|i| (format!("fresh{i}"), format!("fresh password {i}")))
        .collect();
    let mut web = format!("basic_auth_users:\n  {USER}: {}\n", hash(PASSWORD));
    for (u, p) in &fresh {
        web.push_str(&format!("  {u}: {}\n", hash(p)));
    }
    rig.write_web(&web);
    let d = rig.start();
    let bcrypt_once = bcrypt_once();
    // The flood is answered (bcrypt runs for it), and most of its clients have a check
    // waiting, before the first valid request.
    let flood = Flood::start(&d.addr);
    let waiting = || flood.waiting();
    let before = waiting();
    let took: Vec<(Duration, Duration)> = fresh
        .iter()
        .map(|(u, p)| {
            let before = bcrypt_now();
            let t1 = Instant::now();
            let mut s = connect_from([127, 0, 0, 2], &d.addr).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
            let req = format!(
                "GET /metrics HTTP/1.1\r\nHost: x\r\nAuthorization: {}\r\nConnection: close\r\n\r\n",
                basic(u, p)
            );
            s.write_all(req.as_bytes()).unwrap();
            let r = read_response(&mut s).unwrap();
            assert_eq!(r.status, 200, "{u}");
            let took = t1.elapsed();
            (took, bcrypt_once.max(before).max(bcrypt_now()))
        })
        .collect();
    let after = waiting();
    let refused = flood.stop();
    println!(
        "bcrypt {bcrypt_once:?} before the flood; {FLOOD_CLIENTS} flood clients, {before} then \
         {after} wrong passwords waiting; {FRESH_USERS} first checks from another address \
         took (time, slowest bcrypt around it) {took:?}; {} refused in all",
        refused
    );
    assert!(
        before.min(after) >= FLOOD_CLIENTS / 2,
        "the flood was waiting for bcrypt throughout"
    );
    for (i, (t, bcrypt)) in took.iter().enumerate() {
        assert!(
            *t < *bcrypt * 6,
            "first check {i} took {t:?} during the flood (one bcrypt: {bcrypt:?})"
        );
    }
    let (st, _) = d.terminate(Duration::from_secs(10));
    assert!(st.success(), "{st}");
}
