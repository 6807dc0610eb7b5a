//! The HTTP server (hyper 1.x, HTTP/1.1 only): `/metrics`, `/healthz`, `/api/v1/drives`,
//! `/api/v1/runs`, `/runs/ID/report` and the status page at `/`.
//!
//! - [`serve`] runs the accept loop until the shutdown flag flips, then lets requests in
//!   flight finish for at most [`Limits::shutdown_grace`].
//! - Only GET and HEAD are answered (405 with `Allow: GET, HEAD` otherwise); a request
//!   body is never read; HEAD gets the GET headers and no body.
//! - A request that announces a body to GET or HEAD gets 413 (the body is not read).
//! - TLS and basic auth come from a web config file (exporter-toolkit's format; see `web`),
//!   swapped on reload through a [`WebHandle`]: new connections get the new TLS config, and
//!   every request is checked against the users in force. Without one: plain HTTP.
//!   Authentication comes first: a client without valid credentials gets 401 (with
//!   `WWW-Authenticate: Basic realm="driveprobe"`) whatever it asked for.
//! - Robustness: a header read timeout (a client that does not finish its headers in time
//!   is closed, slowloris included; with TLS the handshake has the same limit), a cap on open connections where idle ones,
//!   then ones whose client does not read, then ones busy with reports only make room for
//!   newcomers (see `server`), a write stall limit, hyper's default limits on the request
//!   line and headers.
//!   Nothing a client sends can make it panic; a panic in a page's renderer becomes a 500.
//! - The status lock is taken to copy or encode and released before any `.await`.
//!
//! The code map: `server` (sockets, the cap, shutdown; generic over the byte stream, so a
//! TLS stream is served like a TCP one; auth and the web config's headers wrap
//! [`routes::App::respond`]), `routes` (request in, response out), `web` (the web config
//! file, TLS, basic auth), `status_page` (the status page), `fmt` (text).

use crate::fmt;
pub mod routes;
mod server;
pub mod status_page;
pub mod web;

use std::sync::{Arc, RwLock};
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::status::Shared;

pub use web::{WebConfig, WebConfigError};

/// The web config in force (none: plain HTTP, no auth), shared with the server and
/// replaced on reload.
#[derive(Debug, Clone, Default)]
pub struct WebHandle(Arc<RwLock<Option<Arc<WebConfig>>>>);

impl WebHandle {
    pub fn new(web: Option<WebConfig>) -> WebHandle {
        WebHandle(Arc::new(RwLock::new(web.map(Arc::new))))
    }

    /// The config in force now.
    pub fn current(&self) -> Option<Arc<WebConfig>> {
        self.0.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Puts `web` in force for new connections and every request from now on.
    pub fn set(&self, mut web: WebConfig) {
        let mut slot = self.0.write().unwrap_or_else(|e| e.into_inner());
        // What the old config's basic auth remembered goes on (see `BasicAuth::carry_over`).
        if let (Some(new), Some(old)) = (
            web.auth.as_mut().and_then(Arc::get_mut),
            slot.as_ref().and_then(|w| w.auth.as_ref()),
        ) {
            new.carry_over(old);
        }
        *slot = Some(Arc::new(web));
    }

    /// Puts back what [`WebHandle::current`] gave (a reload refused after its web config
    /// was set).
    pub fn restore(&self, web: Option<Arc<WebConfig>>) {
        *self.0.write().unwrap_or_else(|e| e.into_inner()) = web;
    }
}

/// The server's limits. [`Limits::default`] is what [`serve`] uses.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Open connections at most; at the cap an idle one is closed to make room (or one
    /// blocked on writing, or busy with reports only), or the newcomer when none is.
    pub max_connections: usize,
    /// A client must send a request's whole head within this time (from the moment the
    /// server starts waiting for it, so it also bounds idle keep-alive connections).
    pub header_read_timeout: Duration,
    /// How long requests in flight may take to finish after shutdown.
    pub shutdown_grace: Duration,
    /// A response not written after this long (a client that does not read) no longer
    /// protects its connection from being closed for a newcomer at the cap.
    pub stuck_after: Duration,
    /// A write to a client that makes no progress for this long (the client stopped
    /// reading) closes its connection.
    pub write_stall: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: 256,
            header_read_timeout: Duration::from_secs(10),
            shutdown_grace: Duration::from_secs(1),
            stuck_after: Duration::from_secs(30),
            write_stall: Duration::from_secs(10),
        }
    }
}

/// Serves the daemon's HTTP endpoints on `listener` with the default [`Limits`] until
/// `shutdown` becomes true (or its sender is dropped). Then it stops accepting, closes
/// idle connections, gives requests in flight up to a second, and returns.
pub async fn serve(
    listener: TcpListener,
    shared: Arc<Shared>,
    shutdown: watch::Receiver<bool>,
) -> std::io::Result<()> {
    serve_with(listener, shared, shutdown, Limits::default()).await
}

/// [`serve`] with the web config of `web` (TLS, basic auth, headers), read again for each
/// connection and request so that a reload takes effect at once.
pub async fn serve_web(
    listener: TcpListener,
    shared: Arc<Shared>,
    shutdown: watch::Receiver<bool>,
    web: WebHandle,
) -> std::io::Result<()> {
    serve_web_at(
        listener,
        shared,
        shutdown,
        web,
        routes::DEFAULT_TELEMETRY_PATH,
    )
    .await
}

/// [`serve_web`] with the metrics at `metrics_path` (`--web.telemetry-path`).
pub async fn serve_web_at(
    listener: TcpListener,
    shared: Arc<Shared>,
    shutdown: watch::Receiver<bool>,
    web: WebHandle,
    metrics_path: &str,
) -> std::io::Result<()> {
    let app = Arc::new(routes::App::with_metrics_path(shared, metrics_path));
    server::run(listener, app, shutdown, Limits::default(), web).await
}

/// [`serve`] with other limits.
pub async fn serve_with(
    listener: TcpListener,
    shared: Arc<Shared>,
    shutdown: watch::Receiver<bool>,
    limits: Limits,
) -> std::io::Result<()> {
    let app = Arc::new(routes::App::new(shared));
    server::run(listener, app, shutdown, limits, WebHandle::default()).await
}
