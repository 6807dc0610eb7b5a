//! The web config file: TLS and basic auth in the YAML format Prometheus exporters share
//! (exporter-toolkit's `--web.config.file`).
//!
//! ```yaml
//! tls_server_config:
//!   cert_file: server.crt            # relative paths: from the web config file's directory
//!   key_file: server.key
//!   client_auth_type: RequireAndVerifyClientCert   # or VerifyClientCertIfGiven, NoClientCert
//!   client_ca_file: clients-ca.crt
//!   min_version: TLS12               # TLS12 or TLS13 (rustls has nothing older)
//!   max_version: TLS13
//!   prefer_server_cipher_suites: true
//! http_server_config:
//!   http2: false                     # this server speaks HTTP/1.1 only; true is refused
//!   headers:                         # the five headers exporter-toolkit allows
//!     Strict-Transport-Security: max-age=31536000
//! basic_auth_users:
//!   prometheus: $2y$10$...           # bcrypt hashes (htpasswd -nBC 10 "" | tr -d ':\n')
//! ```
//!
//! Every key is checked: an unknown one is refused with one line giving its line and
//! column, one of exporter-toolkit's that this server does not implement (such as
//! `cipher_suites`) by name. Loading checks everything that can be checked before a client
//! comes: the files are read, the key must match the certificate, every hash must be a
//! bcrypt hash.
//!
//! A refusal never repeats what the file wrote: not a value (a password hash, a password
//! written where its hash belongs), not a user name, not an unknown key's name (the file
//! may be a symlink to someone else's secrets, such as `/etc/shadow`). It names the file,
//! the key path or the line and column, and the kind of problem ([`crate::config::redact`]).
//!
//! [`BasicAuth::check`] runs bcrypt on blocking threads, a bounded pool of half the CPUs
//! (an attacker guessing passwords costs at most that), checks an unknown user against a
//! real hash so that the time taken does not tell which users exist, and remembers
//! successful checks (an HMAC of user, the user's hash and password under a key made at
//! load time) so that a scrape every 15 s costs microseconds, not a bcrypt. Failed checks
//! are remembered for a minute, so a repeated wrong password costs no bcrypt either. At a
//! reload both caches are carried over ([`BasicAuth::carry_over`]; a user whose hash
//! changed matches nothing), so a flood of wrong passwords after a reload cannot queue the
//! scrapers' checks behind it.
//!
//! The pool is shared fairly between client addresses ([`FairGate`]): checks waiting for
//! a thread are handed it round robin by peer IP address, so a flood of distinct wrong
//! passwords (which no cache can absorb) from a few addresses gets only their share, and
//! a valid client never verified before waits about one check per other address with
//! checks queued, not behind the whole flood.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use base64::Engine as _;
use hyper::header::{HeaderMap, HeaderName, HeaderValue, AUTHORIZATION};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde::Deserialize;
use tokio::sync::oneshot;

/// A web config file that cannot be used: one line naming the file, the key and what to
/// change; the error underneath (I/O, YAML, PEM, rustls, bcrypt) is its source.
#[derive(Debug, thiserror::Error)]
#[error("web config {}: {}", path.display(), one_line(&problem.to_string()))]
pub struct WebConfigError {
    pub path: PathBuf,
    /// Boxed: a config error is rare, and the `Result`s carrying it stay small.
    #[source]
    pub problem: Box<WebProblem>,
}

/// What is wrong in a web config, by key.
#[derive(Debug, thiserror::Error)]
pub enum WebProblem {
    #[error("cannot read it: {0}; give the path of an exporter-toolkit web config (YAML)")]
    Read(#[source] crate::config::file::FileError),
    /// The YAML parser's refusal, by kind and place. The parser's own error is not kept:
    /// its message quotes the file (see the module's comment).
    #[error("{}{problem}; see the exporter-toolkit web config format (tls_server_config, http_server_config, basic_auth_users)", at(*place))]
    Yaml {
        /// Line and column, from 1.
        place: Option<(usize, usize)>,
        problem: crate::config::redact::Problem,
    },
    /// A user of `basic_auth_users`, by the place of its name or hash, never by either.
    #[error("{}basic_auth_users: {problem}", at(*place))]
    User {
        place: Option<(usize, usize)>,
        #[source]
        problem: UserProblem,
    },
    #[error("tls_server_config.{key}: {version} is not supported (rustls speaks TLS 1.2 and 1.3 only); use TLS12 or TLS13")]
    OldTls {
        key: &'static str,
        version: &'static str,
    },
    #[error("tls_server_config.{key}: not a TLS version driveprobe knows; use TLS12 or TLS13")]
    UnknownTls { key: &'static str },
    #[error("tls_server_config: min_version TLS13 is above max_version TLS12; fix one of them")]
    TlsInverted,
    #[error("tls_server_config.{key}: {}: {source}; give a PEM file of certificates", path.display())]
    Certs {
        key: &'static str,
        path: PathBuf,
        source: rustls::pki_types::pem::Error,
    },
    #[error("tls_server_config.{key}: {}: no certificate in it; give a PEM file of certificates", path.display())]
    NoCerts { key: &'static str, path: PathBuf },
    #[error("tls_server_config.{0} is not supported by driveprobe (rustls chooses its own safe suites and curves; certificates come from cert_file, key_file and client_ca_file); remove it")]
    Unsupported(&'static str),
    #[error("tls_server_config needs both cert_file and key_file (PEM files); add them or remove tls_server_config")]
    NoCertOrKey,
    #[error("tls_server_config.key_file: {}: {source}; give a PEM private key (PKCS#8, PKCS#1 or SEC1)", path.display())]
    Key {
        path: PathBuf,
        source: rustls::pki_types::pem::Error,
    },
    #[error("tls_server_config.client_auth_type: {0} accepts certificates nobody checked, which driveprobe does not do; use RequireAndVerifyClientCert or VerifyClientCertIfGiven with client_ca_file")]
    UncheckedClients(&'static str),
    #[error("tls_server_config.client_auth_type: not a value driveprobe knows; use NoClientCert, VerifyClientCertIfGiven or RequireAndVerifyClientCert")]
    UnknownClientAuth,
    #[error("tls_server_config: {0}")]
    Tls(#[source] rustls::Error),
    #[error("tls_server_config.client_ca_file is given but client_auth_type is NoClientCert; remove one of them")]
    CaUnused,
    #[error("tls_server_config.client_auth_type {0} needs client_ca_file (the CA that signs client certificates); add it")]
    NoCa(&'static str),
    #[error("tls_server_config.client_ca_file: {}: {source}; give the CA certificate in PEM", path.display())]
    Ca {
        path: PathBuf,
        source: rustls::Error,
    },
    #[error("tls_server_config.client_ca_file: {}: {source}", path.display())]
    Verifier {
        path: PathBuf,
        source: rustls::server::VerifierBuilderError,
    },
    #[error("tls_server_config: the key {} does not fit the certificate {}: {source}; give the key the certificate was made for", key.display(), cert.display())]
    KeyMismatch {
        key: PathBuf,
        cert: PathBuf,
        source: rustls::Error,
    },
    #[error("http_server_config.http2: true is not supported (this server speaks HTTP/1.1 only); remove it or set it to false")]
    Http2,
    #[error("http_server_config.headers.{name}: this value is not allowed; use one of {allowed}")]
    HeaderNotAllowed {
        name: &'static str,
        allowed: &'static str,
    },
    #[error("http_server_config.headers.{name}: not a valid header value")]
    HeaderInvalid {
        name: &'static str,
        source: hyper::header::InvalidHeaderValue,
    },
    /// The system's random source failed (ring says no more than that).
    #[error(
        "cannot draw a random key for the basic auth cache (the system's random source failed)"
    )]
    Random,
}

/// What is wrong with a user of `basic_auth_users`; never its name or its hash.
#[derive(Debug, thiserror::Error)]
pub enum UserProblem {
    #[error("a user name contains ':', which basic auth cannot carry (a user:password or user:hash line?); rename the user and give its bcrypt hash as the value")]
    Colon,
    #[error("a user is given twice; give each user once")]
    Twice,
    #[error("not a bcrypt hash ({0}); give each user the hash of its password, made with `htpasswd -nBC 10 \"\" | tr -d ':\\n'`, never the password")]
    NotBcrypt(#[source] bcrypt::BcryptError),
    #[error("bcrypt cost {0} makes every check take seconds or more; use a cost from 10 to {MAX_BCRYPT_COST}")]
    Cost(u32),
}

/// "line L column C: ", or nothing when the parser gave no place.
fn at(place: Option<(usize, usize)>) -> String {
    place.map_or(String::new(), |(l, c)| format!("line {l} column {c}: "))
}

/// Successful checks remembered at most (the cache is emptied when it is full).
const AUTH_CACHE_MAX: usize = 1024;
/// Failed checks remembered at most (expired ones go first, then all of them).
const FAIL_CACHE_MAX: usize = 4096;
/// How long a failed check is remembered: a repeat within it is refused without a bcrypt.
const FAIL_TTL: std::time::Duration = std::time::Duration::from_secs(60);
/// bcrypt costs above this make every check take seconds; refused.
const MAX_BCRYPT_COST: u32 = 16;

// ------------------------------------------------------------------ the file as written

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename = "web config")]
struct Raw {
    tls_server_config: Option<RawTls>,
    http_server_config: Option<RawHttp>,
    basic_auth_users: Option<Users>,
}

/// Every key name a web config has (for [`crate::config::redact`]: only these are ever
/// named in an error).
const KEYS: &[&str] = &[
    "tls_server_config",
    "http_server_config",
    "basic_auth_users",
    "cert_file",
    "key_file",
    "client_auth_type",
    "client_ca_file",
    "min_version",
    "max_version",
    "prefer_server_cipher_suites",
    "cipher_suites",
    "curve_preferences",
    "client_allowed_sans",
    "cert",
    "key",
    "client_ca",
    "http2",
    "headers",
    "Content-Security-Policy",
    "X-Frame-Options",
    "X-Content-Type-Options",
    "X-XSS-Protection",
    "Strict-Transport-Security",
];

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename = "tls_server_config")]
struct RawTls {
    cert_file: Option<String>,
    key_file: Option<String>,
    client_auth_type: Option<String>,
    client_ca_file: Option<String>,
    min_version: Option<String>,
    max_version: Option<String>,
    prefer_server_cipher_suites: Option<bool>,
    // exporter-toolkit's keys this server does not implement: refused by name.
    cipher_suites: Option<serde_norway::Value>,
    curve_preferences: Option<serde_norway::Value>,
    client_allowed_sans: Option<serde_norway::Value>,
    cert: Option<serde_norway::Value>,
    key: Option<serde_norway::Value>,
    client_ca: Option<serde_norway::Value>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename = "http_server_config")]
struct RawHttp {
    http2: Option<bool>,
    headers: Option<RawHeaders>,
}

/// The headers exporter-toolkit lets a web config set.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename = "http_server_config.headers")]
struct RawHeaders {
    #[serde(rename = "Content-Security-Policy")]
    content_security_policy: Option<String>,
    #[serde(rename = "X-Frame-Options")]
    x_frame_options: Option<String>,
    #[serde(rename = "X-Content-Type-Options")]
    x_content_type_options: Option<String>,
    #[serde(rename = "X-XSS-Protection")]
    x_xss_protection: Option<String>,
    #[serde(rename = "Strict-Transport-Security")]
    strict_transport_security: Option<String>,
}

// ------------------------------------------------------------------ the validated config

/// Who may ask for a TLS client certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientAuth {
    None,
    /// A certificate is checked against `client_ca_file` when one is sent.
    VerifyIfGiven,
    /// A certificate signed by `client_ca_file` is required.
    RequireAndVerify,
}

/// A loaded web config: what the server needs to serve with it.
pub struct WebConfig {
    /// The file it was read from.
    pub path: PathBuf,
    /// The TLS server config, when `tls_server_config` is given.
    pub tls: Option<Arc<rustls::ServerConfig>>,
    pub client_auth: ClientAuth,
    /// Basic auth, when `basic_auth_users` has users.
    pub auth: Option<Arc<BasicAuth>>,
    /// Set on every response.
    pub headers: Vec<(HeaderName, HeaderValue)>,
}

impl std::fmt::Debug for WebConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebConfig")
            .field("path", &self.path)
            .field("tls", &self.tls.is_some())
            .field("client_auth", &self.client_auth)
            .field("users", &self.auth.as_ref().map(|a| a.users.len()))
            .field("headers", &self.headers)
            .finish()
    }
}

impl WebConfig {
    /// Reads and checks `path`. Every failure is one line that names the key or file.
    pub fn load(path: &Path) -> Result<WebConfig, WebConfigError> {
        let err = |problem: WebProblem| WebConfigError {
            path: path.to_path_buf(),
            problem: Box::new(problem),
        };
        let text = crate::config::file::read_regular(path, crate::config::file::MAX_CONFIG_BYTES)
            .map_err(|e| err(WebProblem::Read(e)))?;
        let raw: Raw = if text.trim().is_empty() {
            Raw::default()
        } else {
            USER_PROBLEM.with(|u| u.borrow_mut().take());
            serde_norway::from_str(&text).map_err(|e| err(yaml_problem(&e)))?
        };
        let base = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or_else(|| Path::new("."));
        let (tls, client_auth) = match raw.tls_server_config {
            Some(t) => {
                let (cfg, ca) = tls_config(t, base).map_err(err)?;
                (Some(Arc::new(cfg)), ca)
            }
            None => (None, ClientAuth::None),
        };
        let headers = match raw.http_server_config {
            Some(h) => http_config(h).map_err(err)?,
            None => Vec::new(),
        };
        let auth = match raw.basic_auth_users {
            Some(Users(users)) if !users.is_empty() => {
                Some(Arc::new(BasicAuth::new(users).map_err(err)?))
            }
            _ => None,
        };
        Ok(WebConfig {
            path: path.to_path_buf(),
            tls,
            client_auth,
            auth,
            headers,
        })
    }

    /// `https` or `http`.
    pub fn scheme(&self) -> &'static str {
        if self.tls.is_some() {
            "https"
        } else {
            "http"
        }
    }

    /// One line for the log: what this config turns on.
    pub fn summary(&self) -> String {
        let tls = match (&self.tls, self.client_auth) {
            (None, _) => "TLS off".to_string(),
            (Some(_), ClientAuth::None) => "TLS on".to_string(),
            (Some(_), ClientAuth::VerifyIfGiven) => {
                "TLS on (client certificates verified when given)".to_string()
            }
            (Some(_), ClientAuth::RequireAndVerify) => {
                "TLS on (client certificates required)".to_string()
            }
        };
        let auth = match &self.auth {
            Some(a) => format!("basic auth for {} user(s)", a.users.len()),
            None => "no basic auth".to_string(),
        };
        format!("{tls}, {auth}, {} extra header(s)", self.headers.len())
    }
}

/// serde_norway's refusal as a [`WebProblem`] that repeats nothing of the file: its place,
/// and its kind in fixed words.
fn yaml_problem(e: &serde_norway::Error) -> WebProblem {
    let place = e.location().map(|l| (l.line(), l.column()));
    let said = e.to_string();
    if said.contains(USER_REFUSED) {
        if let Some(problem) = USER_PROBLEM.with(|u| u.borrow_mut().take()) {
            return WebProblem::User { place, problem };
        }
    }
    let problem = match LIBYAML.iter().find(|p| said.starts_with(**p)) {
        Some(p) => crate::config::redact::Problem::Syntax(p),
        None => crate::config::redact::serde_problem(&said, KEYS)
            .unwrap_or(crate::config::redact::Problem::Other),
    };
    WebProblem::Yaml { place, problem }
}

/// The YAML parser's own messages (libyaml's, and serde_norway's that quote nothing): a
/// refusal that starts with one of these is told in these words.
const LIBYAML: &[&str] = &[
    "block sequence entries are not allowed in this context",
    "control characters are not allowed",
    "could not find expected ':'",
    "did not find expected ',' or ']'",
    "did not find expected ',' or '}'",
    "did not find expected '-' indicator",
    "did not find expected <document start>",
    "did not find expected alphabetic or numeric character",
    "did not find expected comment or line break",
    "did not find expected key",
    "did not find expected node content",
    "did not find expected whitespace or line break",
    "found a tab character that violates indentation",
    "found a tab character where an indentation space is expected",
    "found character that cannot start any token",
    "found duplicate anchor",
    "found undefined alias",
    "found undefined tag handle",
    "found unexpected ':'",
    "found unexpected document indicator",
    "found unexpected end of stream",
    "found unknown escape character",
    "invalid Unicode character",
    "invalid leading UTF-8 octet",
    "invalid trailing UTF-8 octet",
    "mapping keys are not allowed in this context",
    "mapping values are not allowed in this context",
    "EOF while parsing a value",
    "deserializing from YAML containing more than one document is not supported",
    "recursion limit exceeded",
    "repetition limit exceeded",
    "unknown anchor",
];

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn resolve(base: &Path, p: &str) -> PathBuf {
    let p = Path::new(p);
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        base.join(p)
    }
}

fn version(
    key: &'static str,
    v: &str,
) -> Result<&'static rustls::SupportedProtocolVersion, WebProblem> {
    match v {
        "TLS12" => Ok(&rustls::version::TLS12),
        "TLS13" => Ok(&rustls::version::TLS13),
        "TLS10" => Err(WebProblem::OldTls {
            key,
            version: "TLS10",
        }),
        "TLS11" => Err(WebProblem::OldTls {
            key,
            version: "TLS11",
        }),
        _ => Err(WebProblem::UnknownTls { key }),
    }
}

fn certs(key: &'static str, path: &Path) -> Result<Vec<CertificateDer<'static>>, WebProblem> {
    let what = |source| WebProblem::Certs {
        key,
        path: path.to_path_buf(),
        source,
    };
    let iter = CertificateDer::pem_file_iter(path).map_err(what)?;
    let certs = iter.collect::<Result<Vec<_>, _>>().map_err(what)?;
    if certs.is_empty() {
        return Err(WebProblem::NoCerts {
            key,
            path: path.to_path_buf(),
        });
    }
    Ok(certs)
}

fn tls_config(t: RawTls, base: &Path) -> Result<(rustls::ServerConfig, ClientAuth), WebProblem> {
    for (name, present) in [
        ("cipher_suites", t.cipher_suites.is_some()),
        ("curve_preferences", t.curve_preferences.is_some()),
        ("client_allowed_sans", t.client_allowed_sans.is_some()),
        ("cert", t.cert.is_some()),
        ("key", t.key.is_some()),
        ("client_ca", t.client_ca.is_some()),
    ] {
        if present {
            return Err(WebProblem::Unsupported(name));
        }
    }
    let (Some(cert_file), Some(key_file)) = (
        t.cert_file.as_deref().filter(|s| !s.is_empty()),
        t.key_file.as_deref().filter(|s| !s.is_empty()),
    ) else {
        return Err(WebProblem::NoCertOrKey);
    };
    let min = version("min_version", t.min_version.as_deref().unwrap_or("TLS12"))?;
    let max = version("max_version", t.max_version.as_deref().unwrap_or("TLS13"))?;
    let versions: Vec<&'static rustls::SupportedProtocolVersion> =
        [min, max].into_iter().fold(Vec::new(), |mut v, x| {
            if !v
                .iter()
                .any(|y: &&rustls::SupportedProtocolVersion| y.version == x.version)
            {
                v.push(x);
            }
            v
        });
    let versions = if min.version == rustls::ProtocolVersion::TLSv1_3
        && max.version == rustls::ProtocolVersion::TLSv1_2
    {
        return Err(WebProblem::TlsInverted);
    } else {
        versions
    };

    let auth_type = t.client_auth_type.as_deref().unwrap_or(
        // exporter-toolkit: a CA file alone means clients must present a certificate.
        if t.client_ca_file.is_some() {
            "RequireAndVerifyClientCert"
        } else {
            "NoClientCert"
        },
    );
    let (client_auth, auth_type) = match auth_type {
        "NoClientCert" | "" => (ClientAuth::None, "NoClientCert"),
        "VerifyClientCertIfGiven" => (ClientAuth::VerifyIfGiven, "VerifyClientCertIfGiven"),
        "RequireAndVerifyClientCert" => {
            (ClientAuth::RequireAndVerify, "RequireAndVerifyClientCert")
        }
        "RequestClientCert" => return Err(WebProblem::UncheckedClients("RequestClientCert")),
        "RequireAnyClientCert" => return Err(WebProblem::UncheckedClients("RequireAnyClientCert")),
        _ => return Err(WebProblem::UnknownClientAuth),
    };
    let cert_path = resolve(base, cert_file);
    let key_path = resolve(base, key_file);
    let chain = certs("cert_file", &cert_path)?;
    let key = PrivateKeyDer::from_pem_file(&key_path).map_err(|source| WebProblem::Key {
        path: key_path.clone(),
        source,
    })?;

    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&versions)
        .map_err(WebProblem::Tls)?;
    let builder = match client_auth {
        ClientAuth::None => {
            if t.client_ca_file.is_some() {
                return Err(WebProblem::CaUnused);
            }
            builder.with_no_client_auth()
        }
        ClientAuth::VerifyIfGiven | ClientAuth::RequireAndVerify => {
            let Some(ca) = t.client_ca_file.as_deref().filter(|s| !s.is_empty()) else {
                return Err(WebProblem::NoCa(auth_type));
            };
            let ca_path = resolve(base, ca);
            let mut roots = rustls::RootCertStore::empty();
            for c in certs("client_ca_file", &ca_path)? {
                roots.add(c).map_err(|source| WebProblem::Ca {
                    path: ca_path.clone(),
                    source,
                })?;
            }
            let mut vb = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            );
            if client_auth == ClientAuth::VerifyIfGiven {
                vb = vb.allow_unauthenticated();
            }
            let verifier = vb.build().map_err(|source| WebProblem::Verifier {
                path: ca_path.clone(),
                source,
            })?;
            builder.with_client_cert_verifier(verifier)
        }
    };
    let mut cfg =
        builder
            .with_single_cert(chain, key)
            .map_err(|source| WebProblem::KeyMismatch {
                key: key_path.clone(),
                cert: cert_path.clone(),
                source,
            })?;
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    cfg.ignore_client_order = t.prefer_server_cipher_suites.unwrap_or(false);
    Ok((cfg, client_auth))
}

fn http_config(h: RawHttp) -> Result<Vec<(HeaderName, HeaderValue)>, WebProblem> {
    if h.http2 == Some(true) {
        return Err(WebProblem::Http2);
    }
    let Some(hd) = h.headers else {
        return Ok(Vec::new());
    };
    let mut out = Vec::new();
    for (name, value, allowed) in [
        ("Content-Security-Policy", hd.content_security_policy, None),
        (
            "X-Frame-Options",
            hd.x_frame_options,
            Some((&["deny", "sameorigin"][..], "deny, sameorigin")),
        ),
        (
            "X-Content-Type-Options",
            hd.x_content_type_options,
            Some((&["nosniff"][..], "nosniff")),
        ),
        ("X-XSS-Protection", hd.x_xss_protection, None),
        (
            "Strict-Transport-Security",
            hd.strict_transport_security,
            None,
        ),
    ] {
        let Some(v) = value else { continue };
        if let Some((ok, allowed)) = allowed {
            if !ok.iter().any(|a: &&str| a.eq_ignore_ascii_case(&v)) {
                return Err(WebProblem::HeaderNotAllowed { name, allowed });
            }
        }
        let value = HeaderValue::from_str(&v)
            .map_err(|source| WebProblem::HeaderInvalid { name, source })?;
        out.push((HeaderName::from_static(lower(name)), value));
    }
    Ok(out)
}

fn lower(name: &'static str) -> &'static str {
    match name {
        "Content-Security-Policy" => "content-security-policy",
        "X-Frame-Options" => "x-frame-options",
        "X-Content-Type-Options" => "x-content-type-options",
        "X-XSS-Protection" => "x-xss-protection",
        _ => "strict-transport-security",
    }
}

// ------------------------------------------------------------------ basic auth

/// The users of `basic_auth_users` and the checker.
pub struct BasicAuth {
    users: BTreeMap<String, String>,
    /// A configured hash of the highest cost: an unknown user is checked against it, so
    /// the answer takes as long as for a known one.
    dummy: String,
    /// Keys the caches (with the user, the user's hash and the password).
    key: ring::hmac::Key,
    cache: Mutex<HashSet<[u8; 32]>>,
    /// Failed checks, and when: refused again without a bcrypt for [`FAIL_TTL`].
    failures: Mutex<HashMap<[u8; 32], Instant>>,
    /// The bcrypt pool: at most this many checks at a time (half the CPUs, at least one),
    /// handed out round robin between peer addresses.
    gate: Arc<FairGate>,
}

/// A counting gate whose waiters are served round robin by peer address (and in order
/// within one address): the next free place goes to the address after the one served
/// last, whatever the number of checks each address has queued.
pub(crate) struct FairGate {
    max: usize,
    state: Mutex<FairState>,
}

#[derive(Default)]
struct FairState {
    running: usize,
    /// Waiters by address; an address is in `turns` exactly when it has waiters.
    waiting: HashMap<IpAddr, VecDeque<oneshot::Sender<FairPermit>>>,
    turns: VecDeque<IpAddr>,
}

/// A place in a [`FairGate`]; dropping it hands the place to the next waiter.
pub(crate) struct FairPermit {
    gate: Option<Arc<FairGate>>,
}

impl FairGate {
    pub(crate) fn new(max: usize) -> Arc<FairGate> {
        Arc::new(FairGate {
            max: max.max(1),
            state: Mutex::new(FairState::default()),
        })
    }

    /// Waits for a place for a check on behalf of `peer`.
    pub(crate) async fn acquire(self: &Arc<Self>, peer: IpAddr) -> Option<FairPermit> {
        let rx = {
            let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
            if st.running < self.max && st.turns.is_empty() {
                st.running += 1;
                return Some(FairPermit {
                    gate: Some(self.clone()),
                });
            }
            let (tx, rx) = oneshot::channel();
            let st = &mut *st;
            let q = st.waiting.entry(peer).or_default();
            if q.is_empty() {
                st.turns.push_back(peer);
            }
            q.push_back(tx);
            rx
        };
        // A waiter that gives up (its client left) drops the receiver: a permit already
        // in it is dropped with it and goes to the next waiter.
        rx.await.ok()
    }

    /// A place is free: to the next address's first waiter still there, or back.
    fn release(self: &Arc<Self>) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let st = &mut *st;
        while let Some(peer) = st.turns.pop_front() {
            let Some(q) = st.waiting.get_mut(&peer) else {
                continue;
            };
            let tx = q.pop_front();
            if q.is_empty() {
                st.waiting.remove(&peer);
            } else {
                st.turns.push_back(peer);
            }
            let Some(tx) = tx else { continue };
            match tx.send(FairPermit {
                gate: Some(self.clone()),
            }) {
                Ok(()) => return,
                // That waiter left: the permit comes back unused (defused, not dropped
                // into a second release while this one holds the lock).
                Err(mut p) => {
                    p.gate = None;
                }
            }
        }
        st.running = st.running.saturating_sub(1);
    }
}

impl Drop for FairPermit {
    fn drop(&mut self) {
        if let Some(gate) = self.gate.take() {
            gate.release();
        }
    }
}

/// A user name basic auth can carry: no ':'.
fn check_user(name: &str) -> Result<(), UserProblem> {
    if name.contains(':') {
        return Err(UserProblem::Colon);
    }
    Ok(())
}

/// A bcrypt hash of a cost that checks in reasonable time; its cost.
fn check_hash(hash: &str) -> Result<u32, UserProblem> {
    let parts: bcrypt::HashParts = hash.parse().map_err(UserProblem::NotBcrypt)?;
    let cost = parts.get_cost();
    if cost > MAX_BCRYPT_COST {
        return Err(UserProblem::Cost(cost));
    }
    Ok(cost)
}

/// `basic_auth_users` in file order. Each name and hash is checked as it is read, so that
/// a refusal has the place of the name or hash (serde_norway marks an error raised while
/// a scalar is read with that scalar's line and column) and says neither.
#[derive(Debug, Default)]
struct Users(Vec<(String, String)>);

thread_local! {
    /// Why the last user was refused: serde carries errors as text, so the typed reason
    /// (bcrypt's error underneath) comes back to [`WebConfig::load`] through here.
    static USER_PROBLEM: std::cell::RefCell<Option<UserProblem>> =
        const { std::cell::RefCell::new(None) };
}

/// The text a user's refusal carries through serde: fixed words only.
const USER_REFUSED: &str = "driveprobe refused a basic_auth_users entry";

fn refuse<E: serde::de::Error>(problem: UserProblem) -> E {
    USER_PROBLEM.with(|u| *u.borrow_mut() = Some(problem));
    E::custom(USER_REFUSED)
}

/// A user's name, checked against those before it.
struct NameSeed<'a>(&'a HashSet<String>);

impl<'de> serde::de::DeserializeSeed<'de> for NameSeed<'_> {
    type Value = String;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<String, D::Error> {
        d.deserialize_str(self)
    }
}

impl serde::de::Visitor<'_> for NameSeed<'_> {
    type Value = String;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a string")
    }
    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<String, E> {
        check_user(v).map_err(refuse)?;
        if self.0.contains(v) {
            return Err(refuse(UserProblem::Twice));
        }
        Ok(v.to_string())
    }
}

/// A user's bcrypt hash, checked.
struct HashSeed;

impl<'de> serde::de::DeserializeSeed<'de> for HashSeed {
    type Value = String;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<String, D::Error> {
        d.deserialize_str(self)
    }
}

impl serde::de::Visitor<'_> for HashSeed {
    type Value = String;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a string")
    }
    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<String, E> {
        check_hash(v).map_err(refuse)?;
        Ok(v.to_string())
    }
}

impl<'de> Deserialize<'de> for Users {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Users, D::Error> {
        struct Map;
        impl<'de> serde::de::Visitor<'de> for Map {
            type Value = Users;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a map")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut m: A) -> Result<Users, A::Error> {
                let mut seen = HashSet::new();
                let mut users = Vec::new();
                while let Some(name) = m.next_key_seed(NameSeed(&seen))? {
                    let hash = m.next_value_seed(HashSeed)?;
                    seen.insert(name.clone());
                    users.push((name, hash));
                }
                Ok(Users(users))
            }
        }
        d.deserialize_map(Map)
    }
}

impl BasicAuth {
    /// The users, checked again (a config from [`WebConfig::load`] was checked as read;
    /// here a refusal has no place).
    fn new(users: impl IntoIterator<Item = (String, String)>) -> Result<BasicAuth, WebProblem> {
        let refused = |problem| WebProblem::User {
            place: None,
            problem,
        };
        let mut dummy: Option<(u32, String)> = None;
        let mut map = BTreeMap::new();
        for (user, hash) in users {
            check_user(&user).map_err(refused)?;
            let cost = check_hash(&hash).map_err(refused)?;
            if dummy.as_ref().is_none_or(|(c, _)| cost > *c) {
                dummy = Some((cost, hash.clone()));
            }
            if map.insert(user, hash).is_some() {
                return Err(refused(UserProblem::Twice));
            }
        }
        let users = map;
        let dummy = dummy.map(|(_, h)| h).unwrap_or_default();
        let rng = ring::rand::SystemRandom::new();
        let key = ring::hmac::Key::generate(ring::hmac::HMAC_SHA256, &rng)
            .map_err(|_| WebProblem::Random)?;
        Ok(BasicAuth {
            users,
            dummy,
            key,
            cache: Mutex::new(HashSet::new()),
            failures: Mutex::new(HashMap::new()),
            gate: FairGate::new(bcrypt_threads()),
        })
    }

    /// Takes over what `old` (the config this one replaces at a reload) remembered: its
    /// key and both caches. Entries are keyed by the user's hash too, so a user whose
    /// password changed matches none of them; the others' scrapes stay free of bcrypt
    /// across the reload, and a flood of wrong passwords cannot queue them behind it.
    pub fn carry_over(&mut self, old: &BasicAuth) {
        self.key = old.key.clone();
        // One pool across reloads: checks still running for the old config count too.
        self.gate = old.gate.clone();
        *self.cache.get_mut().unwrap_or_else(|e| e.into_inner()) =
            old.cache.lock().unwrap_or_else(|e| e.into_inner()).clone();
        *self.failures.get_mut().unwrap_or_else(|e| e.into_inner()) = old
            .failures
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
    }

    fn mac(&self, user: &str, hash: &str, password: &[u8]) -> [u8; 32] {
        let mut ctx = ring::hmac::Context::with_key(&self.key);
        ctx.update(&(user.len() as u64).to_le_bytes());
        ctx.update(user.as_bytes());
        ctx.update(&(hash.len() as u64).to_le_bytes());
        ctx.update(hash.as_bytes());
        ctx.update(password);
        let tag = ctx.sign();
        let mut out = [0u8; 32];
        out.copy_from_slice(tag.as_ref());
        out
    }

    /// Whether the request's `Authorization` header names a user with the right password.
    /// `peer` is the client's address, for the pool's fairness.
    pub async fn check(&self, headers: &HeaderMap, peer: IpAddr) -> bool {
        let Some((user, password)) = credentials(headers) else {
            return false;
        };
        let (known, hash) = match self.users.get(&user) {
            Some(h) => (true, h.clone()),
            None => (false, self.dummy.clone()),
        };
        let mac = self.mac(&user, &hash, &password);
        if self
            .cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains(&mac)
        {
            return true;
        }
        if self
            .failures
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&mac)
            .is_some_and(|t| t.elapsed() < FAIL_TTL)
        {
            return false;
        }
        let Some(_permit) = self.gate.acquire(peer).await else {
            return false;
        };
        let ok = tokio::task::spawn_blocking(move || bcrypt::verify(&password, &hash))
            .await
            .ok()
            .and_then(Result::ok)
            .unwrap_or(false);
        let ok = ok && known;
        if ok {
            let mut c = self.cache.lock().unwrap_or_else(|e| e.into_inner());
            if c.len() >= AUTH_CACHE_MAX {
                c.clear();
            }
            c.insert(mac);
        } else {
            let mut f = self.failures.lock().unwrap_or_else(|e| e.into_inner());
            if f.len() >= FAIL_CACHE_MAX {
                f.retain(|_, t| t.elapsed() < FAIL_TTL);
                if f.len() >= FAIL_CACHE_MAX {
                    f.clear();
                }
            }
            f.insert(mac, Instant::now());
        }
        ok
    }
}

/// The size of the bcrypt pool: half the CPUs, at least one, so that checks (a flood of
/// wrong passwords included) always leave CPU to the rest of the daemon.
fn bcrypt_threads() -> usize {
    std::thread::available_parallelism()
        .map(|n| (n.get() / 2).max(1))
        .unwrap_or(1)
}

/// The user and password of a `Basic` `Authorization` header.
fn credentials(headers: &HeaderMap) -> Option<(String, Vec<u8>)> {
    let value = headers.get(AUTHORIZATION)?.to_str().ok()?.trim();
    let (scheme, rest) = value.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let raw = base64::engine::general_purpose::STANDARD
        .decode(rest.trim())
        .ok()?;
    let colon = raw.iter().position(|&b| b == b':')?;
    let user = String::from_utf8(raw[..colon].to_vec()).ok()?;
    Some((user, raw[colon + 1..].to_vec()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(yaml: &str) -> Result<WebConfig, String> {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("web.yml");
        std::fs::write(&p, yaml).unwrap();
        WebConfig::load(&p).map_err(|e| e.to_string())
    }

    /// An unknown key is placed by line and column, never named (the file's key names
    /// are its content); a known key is named.
    #[test]
    fn unknown_keys_are_placed_not_named() {
        for (yaml, key, place, said) in [
            ("foo: 1\n", "foo", "line 1 column 1", "unknown key"),
            (
                "tls_server_config:\n  cert_flie: a\n",
                "cert_flie",
                "line 2 column 3",
                "unknown key (is `cert_file` meant?)",
            ),
            (
                "http_server_config:\n  headers:\n    X-Evil: 1\n",
                "X-Evil",
                "line 3 column 5",
                "unknown key",
            ),
            (
                "http_server_config:\n  nope: true\n",
                "nope",
                "line 2 column 3",
                "unknown key",
            ),
            (
                "cert_file: a\n",
                "\0",
                "line 1 column 1",
                "the key `cert_file` does not belong in this table",
            ),
            (
                "tls_server_config:\n  cipher_suites: [a]\n",
                "\0",
                "tls_server_config.cipher_suites is not supported",
                "",
            ),
        ] {
            let e = load(yaml).unwrap_err();
            assert!(!e.contains(key), "{yaml:?}: {e}");
            assert!(e.contains(place) && e.contains(said), "{yaml:?}: {e}");
            assert!(!e.contains('\n'), "{e}");
        }
    }

    /// What a web config holds is never in its refusal: a shadow file behind a symlink, a
    /// plain-text password as a user's value or in a `user:password` line, a secret as a
    /// key's name or as a value of the wrong type, or where a version, an auth type or a
    /// header value belongs. Each refusal names the place.
    #[test]
    fn a_refusal_never_repeats_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let shadow = dir.path().join("shadow");
        std::fs::write(
            &shadow,
            "root:$6$SECRETHASHroot$Fv0tq1aX:19000:0:99999:7:::\n\
             daemon:*:19000:0:99999:7:::\n\
             alice:$6$SECRETHASHalice$9pLq:19000:0:99999:7:::\n",
        )
        .unwrap();
        let web = dir.path().join("web.yml");
        std::os::unix::fs::symlink(&shadow, &web).unwrap();
        let e = WebConfig::load(&web).unwrap_err();
        let said = format!("{e} {e:?}");
        assert!(!said.contains("SECRET"), "{said}");
        assert!(said.contains("line 1 column 1"), "{said}");
        let tls = "tls_server_config:\n  cert_file: a.crt\n  key_file: a.key\n";
        for (yaml, place) in [
            (
                "basic_auth_users:\n  alice: SECRETpassword\n".to_string(),
                "line 2 column 10",
            ),
            (
                "basic_auth_users:\n  alice:SECRETpassword\n".to_string(),
                "line 2 column 3",
            ),
            (
                "basic_auth_users:\n  \"alice:SECRETpassword\": $2y$04$abcdefghijklmnopqrstuu5J3WHq3EX6ZsZ5zPqBBFz1ZZ8t0cRzG\n".to_string(),
                "line 2 column 3",
            ),
            (
                "basic_auth_users:\n  alice: [SECRETpassword]\n".to_string(),
                "line 2 column 10",
            ),
            (
                "basic_auth_users:\n  alice: 123456789SECRET\n  alice: 123\n".to_string(),
                "line 2 column 10",
            ),
            ("password: SECRETpassword\n".to_string(), "line 1 column 1"),
            ("SECRETpassword: 1\n".to_string(), "line 1 column 1"),
            (
                "tls_server_config: SECRETpassword\n".to_string(),
                "line 1 column 20",
            ),
            (
                "http_server_config:\n  http2: SECRETpassword\n".to_string(),
                "line 2 column 10",
            ),
            (
                format!("{tls}  min_version: SECRETpassword\n"),
                "tls_server_config.min_version",
            ),
            (
                format!("{tls}  client_auth_type: SECRETpassword\n"),
                "tls_server_config.client_auth_type",
            ),
            (
                "http_server_config:\n  headers:\n    X-Frame-Options: SECRETpassword\n"
                    .to_string(),
                "http_server_config.headers.X-Frame-Options",
            ),
            (
                "http_server_config:\n  headers:\n    X-XSS-Protection: \"SECRET\\u0001\"\n"
                    .to_string(),
                "http_server_config.headers.X-XSS-Protection",
            ),
        ] {
            let e = load(&yaml).unwrap_err();
            assert!(!e.contains("SECRET"), "{yaml:?}: {e}");
            assert!(e.contains(place), "{yaml:?}: no {place:?} in {e}");
        }
        // A duplicate user: refused (also with the same hash), at the second one.
        let h = "$2y$04$abcdefghijklmnopqrstuu5J3WHq3EX6ZsZ5zPqBBFz1ZZ8t0cRzG";
        let e = load(&format!("basic_auth_users:\n  alice: {h}\n  alice: {h}\n")).unwrap_err();
        assert!(e.contains("line 3 column 3") && e.contains("twice"), "{e}");
    }

    #[test]
    fn errors_keep_what_went_wrong_underneath() {
        use std::error::Error as _;
        let e = WebConfig::load(Path::new("/nonexistent/driveprobe-web.yml")).unwrap_err();
        assert!(matches!(*e.problem, WebProblem::Read(_)), "{e:?}");
        let io = e.source().and_then(|p| p.source());
        assert!(io.is_some(), "the read error is not kept: {e:?}");
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("web.yml");
        std::fs::write(&p, "basic_auth_users:\n  alice: notahash\n").unwrap();
        let e = WebConfig::load(&p).unwrap_err();
        assert!(
            matches!(
                *e.problem,
                WebProblem::User {
                    problem: UserProblem::NotBcrypt(_),
                    ..
                }
            ),
            "{e:?}"
        );
        let bcrypt = e
            .source()
            .and_then(|p| p.source())
            .and_then(|p| p.source())
            .unwrap();
        assert!(e.to_string().contains(&bcrypt.to_string()), "{e}");
    }

    #[test]
    fn empty_file_is_plain_http() {
        let w = load("").unwrap();
        assert!(w.tls.is_none() && w.auth.is_none());
        assert_eq!(w.scheme(), "http");
    }

    #[test]
    fn hashes_are_checked() {
        let e = load("basic_auth_users:\n  alice: notahash\n").unwrap_err();
        assert!(
            e.contains("line 2 column 10: basic_auth_users: not a bcrypt hash"),
            "{e}"
        );
        let e = load("basic_auth_users:\n  \"a:b\": $2y$04$abcdefghijklmnopqrstuu5J3WHq3EX6ZsZ5zPqBBFz1ZZ8t0cRzG\n")
            .unwrap_err();
        assert!(e.contains("':'"), "{e}");
    }

    #[test]
    fn basic_credentials() {
        let mut h = HeaderMap::new();
        h.insert(
            AUTHORIZATION,
            HeaderValue::from_static("Basic dXNlcjpwYTpzcw=="),
        );
        assert_eq!(
            credentials(&h),
            Some(("user".to_string(), b"pa:ss".to_vec()))
        );
        h.insert(AUTHORIZATION, HeaderValue::from_static("Bearer xyz"));
        assert_eq!(credentials(&h), None);
        h.insert(AUTHORIZATION, HeaderValue::from_static("Basic !!!"));
        assert_eq!(credentials(&h), None);
    }

    impl BasicAuth {
        async fn check_local(&self, h: &HeaderMap) -> bool {
            self.check(h, IpAddr::from([127, 0, 0, 1])).await
        }
    }

    /// Two places; address A queues five waiters, then B one: B's goes next after the
    /// first of A's, not after all five.
    #[test]
    fn the_gate_serves_addresses_round_robin() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let gate = FairGate::new(2);
            let (a, b) = (IpAddr::from([10, 0, 0, 1]), IpAddr::from([10, 0, 0, 2]));
            let p1 = gate.acquire(a).await.unwrap();
            let p2 = gate.acquire(a).await.unwrap();
            let order = Arc::new(Mutex::new(Vec::new()));
            let mut tasks = Vec::new();
            for (i, peer) in [a, a, a, a, a, b].into_iter().enumerate() {
                let (gate, order) = (gate.clone(), order.clone());
                tasks.push(tokio::spawn(async move {
                    let p = gate.acquire(peer).await.unwrap();
                    order.lock().unwrap().push(i);
                    tokio::task::yield_now().await;
                    drop(p);
                }));
                tokio::task::yield_now().await; // queued in this order
            }
            // A waiter that leaves is skipped.
            let gone = tokio::spawn({
                let gate = gate.clone();
                async move { gate.acquire(a).await.map(|_| ()) }
            });
            tokio::task::yield_now().await;
            gone.abort();
            drop(p1);
            drop(p2);
            for t in tasks {
                t.await.unwrap();
            }
            let order = order.lock().unwrap().clone();
            let b_at = order.iter().position(|&i| i == 5).unwrap();
            assert!(b_at <= 1, "{order:?}");
            assert_eq!(order.len(), 6);
            assert_eq!(gate.state.lock().unwrap().running, 0);
        });
    }

    #[test]
    fn checks_are_cached_and_unknown_users_refused() {
        let hash = bcrypt::hash("s3cret", 4).unwrap();
        let mut users = BTreeMap::new();
        users.insert("alice".to_string(), hash);
        let auth = BasicAuth::new(users).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let hdr = |u: &str, p: &str| {
            let mut h = HeaderMap::new();
            let v = base64::engine::general_purpose::STANDARD.encode(format!("{u}:{p}"));
            h.insert(
                AUTHORIZATION,
                HeaderValue::from_str(&format!("Basic {v}")).unwrap(),
            );
            h
        };
        rt.block_on(async {
            assert!(!auth.check_local(&hdr("alice", "wrong")).await);
            assert!(!auth.check_local(&hdr("bob", "s3cret")).await);
            assert!(auth.cache.lock().unwrap().is_empty());
            assert!(auth.check_local(&hdr("alice", "s3cret")).await);
            assert_eq!(auth.cache.lock().unwrap().len(), 1);
            assert!(auth.check_local(&hdr("alice", "s3cret")).await);
            assert_eq!(auth.cache.lock().unwrap().len(), 1);
            assert!(!auth.check_local(&HeaderMap::new()).await);
            // Failures are remembered: a repeat is refused from the cache.
            assert_eq!(auth.failures.lock().unwrap().len(), 2);
            assert!(!auth.check_local(&hdr("alice", "wrong")).await);
            assert_eq!(auth.failures.lock().unwrap().len(), 2);
        });

        // A reload carries the caches over for an unchanged hash, not for a changed one.
        let same = bcrypt::hash("s3cret", 4).unwrap();
        let mut users = BTreeMap::new();
        users.insert("alice".to_string(), auth.users["alice"].clone());
        users.insert("carol".to_string(), same);
        let mut next = BasicAuth::new(users).unwrap();
        next.carry_over(&auth);
        let mac = next.mac("alice", &next.users["alice"], b"s3cret");
        assert!(next.cache.lock().unwrap().contains(&mac));
        let mac = next.mac("carol", &next.users["carol"], b"s3cret");
        assert!(!next.cache.lock().unwrap().contains(&mac));
        rt.block_on(async {
            assert!(next.check_local(&hdr("alice", "s3cret")).await);
            assert!(next.check_local(&hdr("carol", "s3cret")).await);
            assert!(!next.check_local(&hdr("carol", "wrong")).await);
        });
    }
}
