//! The HTTP server (hyper 1.x, HTTP/1.1 only): `/metrics`, `/healthz`, `/api/v1/drives`,
//! `/api/v1/runs`, `/runs/ID/report` and the status page at `/`.
//!
//! - [`serve`] runs the accept loop until the shutdown flag flips, then lets requests in
//!   flight finish for at most [`Limits::shutdown_grace`].
//! - Only GET and HEAD are answered (405 with `Allow: GET, HEAD` otherwise); a request
//!   body is never read; HEAD gets the GET headers and no body.
//! - Robustness: a header read timeout (a client that does not finish its headers in time
//!   is closed, slowloris included), a cap on open connections where idle ones make room
//!   for newcomers (see `server`), hyper's default limits on the request line and headers.
//!   Nothing a client sends can make it panic; a panic in a page's renderer becomes a 500.
//! - The status lock is taken to copy or encode and released before any `.await`.
//!
//! The code map: `server` (sockets, the cap, shutdown; generic over the byte stream, so a
//! TLS acceptor can hand it its streams), `routes` (request in, response out; basic auth
//! belongs in front of [`routes::App::respond`]), `page` (the status page), `fmt` (text).

mod fmt;
pub mod page;
pub mod routes;
mod server;

use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::status::Shared;

/// The server's limits. [`Limits::default`] is what [`serve`] uses.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Open connections at most; at the cap an idle one is closed to make room, or the
    /// newcomer when every one is busy.
    pub max_connections: usize,
    /// A client must send a request's whole head within this time (from the moment the
    /// server starts waiting for it, so it also bounds idle keep-alive connections).
    pub header_read_timeout: Duration,
    /// How long requests in flight may take to finish after shutdown.
    pub shutdown_grace: Duration,
    /// A response not written after this long (a client that does not read) no longer
    /// protects its connection from being closed for a newcomer at the cap.
    pub stuck_after: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: 256,
            header_read_timeout: Duration::from_secs(10),
            shutdown_grace: Duration::from_secs(1),
            stuck_after: Duration::from_secs(30),
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

/// [`serve`] with other limits.
pub async fn serve_with(
    listener: TcpListener,
    shared: Arc<Shared>,
    shutdown: watch::Receiver<bool>,
    limits: Limits,
) -> std::io::Result<()> {
    let app = Arc::new(routes::App::new(shared));
    server::run(listener, app, shutdown, limits).await
}
