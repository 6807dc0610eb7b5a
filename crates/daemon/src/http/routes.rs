//! The handler: one request (method, URI, headers; the body is never read) in, one
//! response out. It knows nothing of sockets, so TLS or basic auth can wrap it: check the
//! `Authorization` header before calling [`App::respond`].
//!
//! The status lock is taken only inside synchronous functions (copy or encode, then
//! release), so it is never held across an `.await`. Rendering that may panic (a bug in
//! an encoder) is caught and answered with a 500, so one bad page never takes the
//! connection, let alone the server, down.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http_body_util::Full;
use hyper::header::{self, HeaderMap, HeaderName, HeaderValue};
use hyper::{Method, Response, StatusCode, Uri};
use serde::Serialize;
use tokio::sync::Semaphore;

use super::{fmt, status_page};
use crate::metrics::{self, Format};
use crate::schedule::RunRecord;
use crate::status::Shared;

/// The scheduler must have ticked within this many seconds for `/healthz` to say ok.
pub const HEARTBEAT_LIMIT_SECONDS: f64 = 30.0;
/// The longest run id `/runs/ID/report` accepts.
pub const MAX_RUN_ID_LEN: usize = 128;
/// The largest result document `/runs/ID/report` reads
/// ([`crate::statedir::MAX_DOCUMENT_BYTES`]).
pub const MAX_RESULT_BYTES: u64 = crate::statedir::MAX_DOCUMENT_BYTES;
/// Reports rendered at the same time (each reads and renders on a blocking thread);
/// further requests wait their turn.
const CONCURRENT_REPORTS: usize = 2;

const TEXT: &str = "text/plain; charset=utf-8";
const HTML: &str = "text/html; charset=utf-8";
const JSON: &str = "application/json";
/// The pages are self-contained: no scripts, no network, inline styles only.
const HTML_POLICY: &str = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; \
                           base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// Wall-clock time as Unix seconds.
pub fn now_unix() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// What a path names.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Route<'a> {
    Page,
    Metrics,
    Healthz,
    Drives,
    Runs,
    Scheduler,
    Report(&'a str),
    NotFound,
}

/// Every route the server serves, as docs/api.md names them (`{id}`: a run id). A test
/// holds docs/api.md to this list and this list to the server.
pub const ROUTES: [&str; 7] = [
    "/",
    "/metrics",
    "/healthz",
    "/api/v1/drives",
    "/api/v1/runs",
    "/api/v1/scheduler",
    "/runs/{id}/report",
];

#[cfg(test)]
impl Route<'_> {
    /// The route's entry in [`ROUTES`]. The match is exhaustive: a new route needs one.
    pub(crate) fn documented(&self) -> Option<&'static str> {
        let i = match self {
            Route::Page => 0,
            Route::Metrics => 1,
            Route::Healthz => 2,
            Route::Drives => 3,
            Route::Runs => 4,
            Route::Scheduler => 5,
            Route::Report(_) => 6,
            Route::NotFound => return None,
        };
        Some(ROUTES[i])
    }
}

pub(crate) fn route(path: &str) -> Route<'_> {
    match path {
        "/" => Route::Page,
        "/metrics" => Route::Metrics,
        "/healthz" => Route::Healthz,
        "/api/v1/drives" => Route::Drives,
        "/api/v1/runs" => Route::Runs,
        "/api/v1/scheduler" => Route::Scheduler,
        _ => match path
            .strip_prefix("/runs/")
            .and_then(|rest| rest.strip_suffix("/report"))
        {
            Some(id) if valid_run_id(id) => Route::Report(id),
            _ => Route::NotFound,
        },
    }
}

/// A run id as it may appear in a URL: 1 to [`MAX_RUN_ID_LEN`] of `[A-Za-z0-9._-]`, not
/// `.` or `..`.
pub fn valid_run_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_RUN_ID_LEN
        && id != "."
        && id != ".."
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// The report page of a run, when it can have one.
pub fn report_url(run: &RunRecord) -> Option<String> {
    (run.result_path.is_some() && valid_run_id(&run.id)).then(|| format!("/runs/{}/report", run.id))
}

/// A response before it is turned into hyper's type.
#[derive(Debug)]
pub(crate) struct Reply {
    pub status: StatusCode,
    pub content_type: &'static str,
    pub body: Bytes,
    pub extra: Vec<(HeaderName, HeaderValue)>,
}

impl Reply {
    fn new(status: StatusCode, content_type: &'static str, body: impl Into<Bytes>) -> Reply {
        Reply {
            status,
            content_type,
            body: body.into(),
            extra: Vec::new(),
        }
    }

    /// A one-line plain-text answer; control characters in `line` become spaces.
    pub fn line(status: StatusCode, line: &str) -> Reply {
        let mut text: String = line
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect();
        text.push('\n');
        Reply::new(status, TEXT, text)
    }

    fn html(body: String) -> Reply {
        let mut r = Reply::new(StatusCode::OK, HTML, body);
        r.extra.push((
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(HTML_POLICY),
        ));
        r
    }

    fn json<T: Serialize + ?Sized>(value: &T) -> Reply {
        match serde_json::to_vec(value) {
            Ok(mut v) => {
                v.push(b'\n');
                Reply::new(StatusCode::OK, JSON, v)
            }
            Err(e) => Reply::line(
                StatusCode::INTERNAL_SERVER_ERROR,
                &format!("cannot encode the status as JSON: {e}"),
            ),
        }
    }

    /// The hyper response; for HEAD the same headers (Content-Length included) and no body.
    pub fn into_response(self, head: bool) -> Response<Full<Bytes>> {
        let len = self.body.len();
        let body = if head { Bytes::new() } else { self.body };
        let mut resp = Response::new(Full::new(body));
        *resp.status_mut() = self.status;
        let h = resp.headers_mut();
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static(self.content_type),
        );
        h.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
        h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
        h.insert(
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        );
        for (k, v) in self.extra {
            h.insert(k, v);
        }
        resp
    }
}

/// The answer to a request without valid basic auth credentials.
pub(crate) fn unauthorized(head: bool) -> Response<Full<Bytes>> {
    let mut r = Reply::line(
        StatusCode::UNAUTHORIZED,
        "unauthorized: this server needs basic auth credentials (see its web config)",
    );
    r.extra.push((
        header::WWW_AUTHENTICATE,
        HeaderValue::from_static("Basic realm=\"driveprobe\""),
    ));
    r.into_response(head)
}

/// The answer to a GET or HEAD that announces a body (the body is not read).
pub(crate) fn body_refused(head: bool) -> Response<Full<Bytes>> {
    let mut r = Reply::line(
        StatusCode::PAYLOAD_TOO_LARGE,
        "payload too large: this server takes no request body",
    );
    r.extra
        .push((header::CONNECTION, HeaderValue::from_static("close")));
    r.into_response(head)
}

/// Runs a synchronous renderer, turning a panic into a 500.
fn guarded(what: &str, f: impl FnOnce() -> Reply) -> Reply {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|_| {
        tracing::error!(page = what, "http: a renderer panicked; answered 500");
        Reply::line(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("internal error while rendering {what}"),
        )
    })
}

/// The metrics' path unless `--web.telemetry-path` moves them.
pub const DEFAULT_TELEMETRY_PATH: &str = "/metrics";

/// Whether `path` may serve the metrics (`--web.telemetry-path`): an absolute path of
/// `[A-Za-z0-9._~/-]` that is none of the other routes: not `/` (the status page),
/// `/healthz`, anything under `/api/v1` or `/runs/`. The error says what to do.
pub fn check_telemetry_path(path: &str) -> Result<(), TelemetryPathError> {
    use PathProblem::*;
    let refuse = |why| {
        Err(TelemetryPathError {
            path: path.to_string(),
            why,
        })
    };
    if !path.starts_with('/') {
        return refuse(NotAbsolute);
    }
    if path.len() > 256 {
        return refuse(TooLong);
    }
    if let Some(c) = path
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '~' | '/' | '-')))
    {
        return refuse(BadChar(c));
    }
    if path.contains("//") || path.split('/').any(|seg| seg == "." || seg == "..") {
        return refuse(BadSegment);
    }
    let under = |p: &str, prefix: &str| p == prefix || p.starts_with(&format!("{prefix}/"));
    if path == "/" {
        return refuse(Taken("/ is the status page"));
    }
    if path == "/healthz" || path == "/healthz/" {
        return refuse(Taken("/healthz is the health check"));
    }
    if under(path.trim_end_matches('/'), "/api/v1") || path == "/api" || path == "/api/" {
        return refuse(Taken("/api/v1 is the JSON API"));
    }
    if under(path.trim_end_matches('/'), "/runs") {
        return refuse(Taken("/runs/ holds the run reports"));
    }
    Ok(())
}

/// A `--web.telemetry-path` that cannot serve the metrics: the path, why, what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("--web.telemetry-path {path:?}: {why}; choose another path, such as the default /metrics")]
pub struct TelemetryPathError {
    pub path: String,
    pub why: PathProblem,
}

/// What is wrong with a telemetry path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathProblem {
    #[error("a path starts with /")]
    NotAbsolute,
    #[error("longer than 256 characters")]
    TooLong,
    #[error("{0:?} is not allowed (letters, digits and . _ ~ / - are)")]
    BadChar(char),
    #[error("empty, . or .. segments are not allowed")]
    BadSegment,
    /// Another route's path.
    #[error("{0}")]
    Taken(&'static str),
}

/// The application: the status it shows and what it needs to answer.
pub struct App {
    shared: Arc<Shared>,
    reports: Semaphore,
    /// Where the metrics are served (`--web.telemetry-path`; checked by
    /// [`check_telemetry_path`]).
    metrics_path: String,
}

impl App {
    pub fn new(shared: Arc<Shared>) -> App {
        App::with_metrics_path(shared, DEFAULT_TELEMETRY_PATH)
    }

    /// An app serving the metrics at `metrics_path` (and not at `/metrics` when that is
    /// another path).
    pub fn with_metrics_path(shared: Arc<Shared>, metrics_path: &str) -> App {
        App {
            shared,
            reports: Semaphore::new(CONCURRENT_REPORTS),
            metrics_path: metrics_path.to_string(),
        }
    }

    /// What `path` names, the metrics at their path.
    fn route_of<'a>(&self, path: &'a str) -> Route<'a> {
        if path == self.metrics_path {
            return Route::Metrics;
        }
        match route(path) {
            Route::Metrics => Route::NotFound,
            r => r,
        }
    }

    /// Answers one request. Only GET and HEAD are served (405 otherwise, with `Allow`).
    pub async fn respond(
        &self,
        method: &Method,
        uri: &Uri,
        headers: &HeaderMap,
    ) -> Response<Full<Bytes>> {
        let head = match *method {
            Method::GET => false,
            Method::HEAD => true,
            _ => {
                let mut r = Reply::line(
                    StatusCode::METHOD_NOT_ALLOWED,
                    "method not allowed: this server only answers GET and HEAD",
                );
                r.extra
                    .push((header::ALLOW, HeaderValue::from_static("GET, HEAD")));
                return r.into_response(false);
            }
        };
        let reply = match self.route_of(uri.path()) {
            Route::Page => guarded("the status page", || self.page()),
            Route::Metrics => guarded("the metrics", || self.metrics(headers)),
            Route::Healthz => self.healthz(),
            Route::Drives => guarded("the drives", || self.drives()),
            Route::Runs => guarded("the runs", || self.runs()),
            Route::Scheduler => guarded("the scheduler", || self.scheduler()),
            Route::Report(id) => self.report(id).await,
            Route::NotFound => Reply::line(
                StatusCode::NOT_FOUND,
                &format!(
                    "not found: see / for the status page, {}, /healthz, /api/v1/drives, /api/v1/runs",
                    self.metrics_path
                ),
            ),
        };
        reply.into_response(head)
    }

    fn page(&self) -> Reply {
        let now = now_unix();
        let html = {
            let s = self.shared.lock();
            status_page::render(&s, now)
        };
        if self.metrics_path != DEFAULT_TELEMETRY_PATH {
            // The page's links to the metrics follow them (the path is of URL-safe
            // characters only, see `check_telemetry_path`).
            let p = &self.metrics_path;
            let html = html
                .replace("href=\"/metrics\"", &format!("href=\"{p}\""))
                .replace(">/metrics</a>", &format!(">{p}</a>"));
            return Reply::html(html);
        }
        Reply::html(html)
    }

    fn metrics(&self, headers: &HeaderMap) -> Reply {
        // Several Accept headers mean the same as one with their values joined.
        let accept: Vec<&str> = headers
            .get_all(header::ACCEPT)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .collect();
        let accept = (!accept.is_empty()).then(|| accept.join(", "));
        let format = Format::negotiate(accept.as_deref());
        // Copied out under the lock, encoded after it.
        let frozen = metrics::freeze(&self.shared.lock());
        let text = frozen.render(format);
        let mut r = Reply::new(StatusCode::OK, format.content_type(), text);
        r.extra
            .push((header::VARY, HeaderValue::from_static("Accept")));
        r
    }

    fn healthz(&self) -> Reply {
        let (tick, unstarted) = {
            let s = self.shared.lock();
            (s.scheduler.last_tick_unix, s.threads.summary())
        };
        // A thread that cannot start leaves drives unwatched however the scheduler ticks.
        if let Some(why) = unstarted {
            return Reply::line(
                StatusCode::SERVICE_UNAVAILABLE,
                &format!("unhealthy: {why}"),
            );
        }
        match heartbeat(tick, now_unix()) {
            Ok(()) => Reply::line(StatusCode::OK, "ok"),
            Err(why) => Reply::line(StatusCode::SERVICE_UNAVAILABLE, &why.to_string()),
        }
    }

    fn drives(&self) -> Reply {
        let s = self.shared.lock();
        let drives: Vec<_> = s.drives.values().collect();
        Reply::json(&drives)
    }

    fn runs(&self) -> Reply {
        #[derive(Serialize)]
        struct RunView<'a> {
            #[serde(flatten)]
            run: &'a RunRecord,
            #[serde(skip_serializing_if = "Option::is_none")]
            report: Option<String>,
            /// "result pending: not saved: REASON".
            #[serde(skip_serializing_if = "Option::is_none")]
            note: Option<&'a str>,
        }
        let s = self.shared.lock();
        let runs: Vec<RunView> = s
            .runs
            .iter()
            .rev()
            .map(|run| RunView {
                run,
                report: report_url(run),
                note: s.run_notes.get(&run.id).map(String::as_str),
            })
            .collect();
        Reply::json(&runs)
    }

    /// The schedules as the scheduler saw them at its last pass: next due times, runs
    /// going, what is held and why, and the wall clock's steps.
    fn scheduler(&self) -> Reply {
        let s = self.shared.lock();
        Reply::json(&s.scheduler)
    }

    async fn report(&self, id: &str) -> Reply {
        let has = {
            let s = self.shared.lock();
            s.runs
                .iter()
                .rev()
                .find(|r| r.id == id)
                .map(|r| r.result_path.is_some())
        };
        match has {
            None => return Reply::line(StatusCode::NOT_FOUND, &format!("no run {id}")),
            Some(false) => {
                return Reply::line(
                    StatusCode::NOT_FOUND,
                    &format!("run {id} has no result document"),
                )
            }
            Some(true) => {}
        }
        let Some(dir) = self.shared.state_dir().cloned() else {
            return Reply::line(
                StatusCode::NOT_FOUND,
                &format!("run {id} has no result document"),
            );
        };
        let Ok(_permit) = self.reports.acquire().await else {
            return Reply::line(StatusCode::SERVICE_UNAVAILABLE, "shutting down");
        };
        let id = id.to_string();
        let id_for_log = id.clone();
        match tokio::task::spawn_blocking(move || report_page(&id, &dir)).await {
            Ok(r) => r,
            Err(e) => {
                tracing::error!(run = %id_for_log, error = %e, "http: rendering a report failed");
                Reply::line(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal error while rendering the report",
                )
            }
        }
    }
}

/// Why the daemon is unhealthy (`/healthz` says it in one line, with 503).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Unhealthy {
    #[error("unhealthy: the scheduler has not run yet")]
    NotYet,
    #[error("unhealthy: the clock cannot be read")]
    NoClock,
    #[error("unhealthy: the scheduler's last pass was {} ago (limit {HEARTBEAT_LIMIT_SECONDS} s)", fmt::span(*age))]
    Stale { age: f64 },
    #[error("unhealthy: the scheduler's last pass is {} in the future (did the clock step back?)", fmt::span(*ahead))]
    Future { ahead: f64 },
}

/// Whether the scheduler's heartbeat at `tick` is recent at `now`, or why not.
pub fn heartbeat(tick: f64, now: f64) -> Result<(), Unhealthy> {
    if !tick.is_finite() || tick <= 0.0 {
        return Err(Unhealthy::NotYet);
    }
    let age = now - tick;
    if age.is_nan() {
        Err(Unhealthy::NoClock)
    } else if age > HEARTBEAT_LIMIT_SECONDS {
        Err(Unhealthy::Stale { age })
    } else if age < -HEARTBEAT_LIMIT_SECONDS {
        Err(Unhealthy::Future { ahead: -age })
    } else {
        Ok(())
    }
}

/// Reads and renders one result document (blocking). A document that is not there is a
/// 404; one that cannot be read or is not a valid document is a 500.
fn report_page(id: &str, dir: &crate::statedir::StateDir) -> Reply {
    let path = dir.path_of(crate::statedir::Place::Runs, &format!("{id}.json"));
    let name = path.display().to_string();
    let bytes = match crate::daemon::scheduler::read_result(dir, id) {
        Ok(Some(b)) => b,
        Ok(None) => {
            return Reply::line(
                StatusCode::NOT_FOUND,
                &format!("run {id}: result document {name} is gone"),
            )
        }
        Err(crate::statedir::ReadError::TooLarge { limit }) => {
            return Reply::line(
                StatusCode::INTERNAL_SERVER_ERROR,
                &format!(
                "run {id}: {name}: larger than {} MiB, not rendered here; use driveprobe report",
                limit >> 20
            ),
            )
        }
        Err(e) => {
            return Reply::line(
                StatusCode::INTERNAL_SERVER_ERROR,
                &format!("run {id}: cannot read {name}: {e}"),
            )
        }
    };
    match crate::report::parse(&bytes, &name) {
        Ok(doc) => {
            let label = crate::report::document_label(&path, &doc);
            Reply::html(crate::report::render(&[(label, doc)]))
        }
        Err(e) => Reply::line(StatusCode::INTERNAL_SERVER_ERROR, &format!("run {id}: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each of [`ROUTES`] is served, and is the documented path of what serves it.
    #[test]
    fn the_route_list_is_what_route_serves() {
        for p in ROUTES {
            let concrete = p.replace("{id}", "r-1");
            assert_eq!(route(&concrete).documented(), Some(p), "{p}");
        }
        assert_eq!(route("/nope").documented(), None);
    }

    #[test]
    fn the_telemetry_path_moves_only_to_a_free_path() {
        for ok in [
            "/metrics",
            "/prom",
            "/x/metrics",
            "/metrics.txt",
            "/a-b_c~d/",
        ] {
            assert_eq!(check_telemetry_path(ok), Ok(()), "{ok}");
        }
        for bad in [
            "",
            "metrics",
            "/",
            "/healthz",
            "/api/v1",
            "/api/v1/",
            "/api/v1/drives",
            "/api/v1/metrics",
            "/runs",
            "/runs/x/report",
            "/m?x",
            "/m#x",
            "/m x",
            "/m\nx",
            "//metrics",
            "/a/../metrics",
            "/é",
        ] {
            let e = check_telemetry_path(bad).unwrap_err().to_string();
            assert!(e.starts_with("--web.telemetry-path "), "{e}");
            assert!(!e.contains('\n'), "{e}");
        }
    }

    #[test]
    fn routes_and_run_ids() {
        assert_eq!(route("/"), Route::Page);
        assert_eq!(route("/metrics"), Route::Metrics);
        assert_eq!(route("/healthz"), Route::Healthz);
        assert_eq!(route("/api/v1/drives"), Route::Drives);
        assert_eq!(route("/api/v1/runs"), Route::Runs);
        assert_eq!(route("/api/v1/scheduler"), Route::Scheduler);
        assert_eq!(route("/runs/r-1.a_b/report"), Route::Report("r-1.a_b"));
        for bad in [
            "/metrics/",
            "//metrics",
            "/runs//report",
            "/runs/../report",
            "/runs/./report",
            "/runs/a/b/report",
            "/runs/a%2Fb/report",
            "/runs/a b/report",
            "/runs/é/report",
            "/runs/a/report/",
            "/runs/a",
            "",
            "*",
        ] {
            assert_eq!(route(bad), Route::NotFound, "{bad}");
        }
        let long = format!("/runs/{}/report", "a".repeat(MAX_RUN_ID_LEN));
        assert!(matches!(route(&long), Route::Report(_)));
        let long = format!("/runs/{}/report", "a".repeat(MAX_RUN_ID_LEN + 1));
        assert_eq!(route(&long), Route::NotFound);
    }

    #[test]
    fn heartbeat_limits() {
        assert!(heartbeat(1000.0, 1000.0).is_ok());
        assert!(heartbeat(1000.0, 1030.0).is_ok());
        assert!(heartbeat(1000.0, 1031.0)
            .unwrap_err()
            .to_string()
            .contains("31 s ago"));
        assert!(heartbeat(1000.0, 900.0)
            .unwrap_err()
            .to_string()
            .contains("future"));
        assert!(heartbeat(0.0, 1000.0)
            .unwrap_err()
            .to_string()
            .contains("not run"));
        assert!(heartbeat(f64::NAN, 1000.0).is_err());
        assert!(heartbeat(1000.0, f64::NAN).is_err());
    }

    #[test]
    fn one_line_replies() {
        let r = Reply::line(StatusCode::NOT_FOUND, "a\nb\r\tc");
        assert_eq!(&r.body[..], b"a b  c\n");
    }
}
