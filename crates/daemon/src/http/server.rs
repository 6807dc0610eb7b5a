//! Sockets: the accept loop, the connection cap, one HTTP/1.1 connection, and shutdown.
//!
//! The cap counts open connections. At the cap, a new connection evicts, in this order:
//! the oldest one that is idle (no request in flight: a keep-alive connection between
//! requests, or one still sending its headers); the one blocked on writing the longest (its
//! peer does not read what it asked for: pipelined report requests never read, say); one
//! busy with report pages only (the heaviest page, so `/metrics` and `/healthz` never wait
//! behind reports for a place); one whose response has been stuck for
//! [`Limits::stuck_after`]. When none of these exists the new one is closed at once.
//! So clients that are idle, slow, or never read can hold at most the cap's worth of
//! sockets and never lock a scraper out, and a scrape being answered is never cut off.
//!
//! Unread responses are bounded per connection: hyper answers pipelined requests one at a
//! time and buffers at most its `max_buf_size` of responses, and a write that makes no
//! progress for [`Limits::write_stall`] closes the connection.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::Request;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Notify};
use tokio::task::JoinSet;

use super::routes::{self, App};
use super::{Limits, WebHandle};
use crate::condlog::{CondLog, Level};

/// Resolves when `rx` says true, or when its sender is gone (nobody can stop us later).
pub(crate) async fn shutdown_requested(rx: &mut watch::Receiver<bool>) {
    loop {
        if *rx.borrow_and_update() {
            return;
        }
        if rx.changed().await.is_err() {
            return;
        }
    }
}

/// One open connection, as the cap sees it.
struct Slot {
    /// Requests in flight (from the handler's start until the response body is dropped).
    busy: AtomicUsize,
    /// When the connection last became busy, in nanoseconds since the tracker's epoch.
    busy_since: AtomicU64,
    /// Told to close by a newcomer at the cap.
    evict: Notify,
    /// When a write to the peer last found its socket full (nanoseconds since the
    /// tracker's epoch, plus one so that 0 means "not blocked").
    write_blocked_since: AtomicU64,
    /// Report requests in flight (a subset of `busy`).
    reports: AtomicUsize,
}

impl Slot {
    fn new() -> Slot {
        Slot {
            busy: AtomicUsize::new(0),
            busy_since: AtomicU64::new(0),
            evict: Notify::new(),
            write_blocked_since: AtomicU64::new(0),
            reports: AtomicUsize::new(0),
        }
    }

    /// Since when its writes have been blocked (tracker nanoseconds), if they are.
    fn write_blocked(&self) -> Option<u64> {
        match self.write_blocked_since.load(Ordering::Acquire) {
            0 => None,
            t => Some(t - 1),
        }
    }

    /// Busy with report pages and nothing else.
    fn reports_only(&self) -> bool {
        let busy = self.busy.load(Ordering::Acquire);
        busy > 0 && self.reports.load(Ordering::Acquire) >= busy
    }
}

/// The open connections, oldest first.
struct Tracker {
    max: usize,
    stuck_after: Duration,
    epoch: Instant,
    next_id: AtomicU64,
    open: Mutex<BTreeMap<u64, Arc<Slot>>>,
}

impl Tracker {
    fn new(limits: &Limits) -> Tracker {
        Tracker {
            max: limits.max_connections.max(1),
            stuck_after: limits.stuck_after,
            epoch: Instant::now(),
            next_id: AtomicU64::new(0),
            open: Mutex::new(BTreeMap::new()),
        }
    }

    fn now_ns(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    /// Whether `slot` may be closed for a newcomer (or on eviction, whether to drop it
    /// now rather than let its request finish).
    fn evictable(&self, slot: &Slot) -> bool {
        if slot.busy.load(Ordering::Acquire) == 0
            || slot.write_blocked().is_some()
            || slot.reports_only()
        {
            return true;
        }
        let since = slot.busy_since.load(Ordering::Acquire);
        let stuck = u64::try_from(self.stuck_after.as_nanos()).unwrap_or(u64::MAX);
        self.now_ns().saturating_sub(since) >= stuck
    }

    /// Registers a new connection, evicting one at the cap; None when none can make room.
    fn admit(self: &Arc<Self>) -> Option<Registered> {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        if open.len() >= self.max {
            let victim = open
                .iter()
                .find(|(_, s)| s.busy.load(Ordering::Acquire) == 0)
                .or_else(|| {
                    open.iter()
                        .filter_map(|e| Some((e, e.1.write_blocked()?)))
                        .min_by_key(|&(_, since)| since)
                        .map(|(e, _)| e)
                })
                .or_else(|| open.iter().find(|(_, s)| s.reports_only()))
                .or_else(|| open.iter().find(|(_, s)| self.evictable(s)))
                .map(|(&id, _)| id)?;
            if let Some(s) = open.remove(&victim) {
                s.evict.notify_one();
            }
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let slot = Arc::new(Slot::new());
        open.insert(id, slot.clone());
        Some(Registered {
            tracker: self.clone(),
            id,
            slot,
        })
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.open.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

/// A connection's place in the tracker; leaving it (the task ends or is aborted) frees it.
struct Registered {
    tracker: Arc<Tracker>,
    id: u64,
    slot: Arc<Slot>,
}

impl Drop for Registered {
    fn drop(&mut self) {
        let mut open = self.tracker.open.lock().unwrap_or_else(|e| e.into_inner());
        open.remove(&self.id);
    }
}

/// Marks a connection busy while it lives: from the handler's start until the response
/// body has been written (it travels inside the body).
struct Busy {
    slot: Arc<Slot>,
    report: bool,
}

impl Busy {
    #[cfg(test)]
    fn new(tracker: &Tracker, slot: Arc<Slot>) -> Busy {
        Busy::with_kind(tracker, slot, false)
    }

    /// Busy with a report page when `report`.
    fn with_kind(tracker: &Tracker, slot: Arc<Slot>, report: bool) -> Busy {
        if report {
            slot.reports.fetch_add(1, Ordering::AcqRel);
        }
        if slot.busy.fetch_add(1, Ordering::AcqRel) == 0 {
            slot.busy_since.store(tracker.now_ns(), Ordering::Release);
        }
        Busy { slot, report }
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.slot.busy.fetch_sub(1, Ordering::AcqRel);
        if self.report {
            self.slot.reports.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// The connection's byte stream, watched: a write that finds the socket full marks the
/// slot blocked (for the cap's choice of whom to evict), and one that makes no progress
/// for `stall` fails with `TimedOut`, which closes the connection.
struct Watched<I> {
    inner: I,
    slot: Arc<Slot>,
    tracker: Arc<Tracker>,
    stall: Duration,
    deadline: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<I> Watched<I> {
    /// After a write attempt: progress clears the mark, a full socket sets it and arms
    /// the stall timer (which wakes this task when it fires).
    fn after_write<T>(
        &mut self,
        cx: &mut Context<'_>,
        r: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        match r {
            Poll::Pending => {
                if self.slot.write_blocked().is_none() {
                    self.slot
                        .write_blocked_since
                        .store(self.tracker.now_ns().saturating_add(1), Ordering::Release);
                }
                let stall = self.stall;
                let timer = self
                    .deadline
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(stall)));
                if timer.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "the peer read nothing of its response for the write stall limit",
                    )));
                }
                Poll::Pending
            }
            ready => {
                self.slot.write_blocked_since.store(0, Ordering::Release);
                self.deadline = None;
                ready
            }
        }
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for Watched<I> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Watched<I> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.after_write(cx, r)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.after_write(cx, r)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.inner).poll_flush(cx);
        this.after_write(cx, r)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

/// A response body that keeps its connection marked busy until it is dropped.
pub(crate) struct Guarded {
    inner: Full<Bytes>,
    _busy: Busy,
}

impl Body for Guarded {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Pin::new(&mut self.get_mut().inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// Serves `app` on `listener` until `shutdown`; see [`super::serve`].
pub(crate) async fn run(
    listener: TcpListener,
    app: Arc<App>,
    mut shutdown: watch::Receiver<bool>,
    limits: Limits,
    web: WebHandle,
) -> io::Result<()> {
    let tracker = Arc::new(Tracker::new(&limits));
    let mut tasks: JoinSet<()> = JoinSet::new();
    let mut accept_log = CondLog::new("http");
    loop {
        tokio::select! {
            biased;
            _ = shutdown_requested(&mut shutdown) => break,
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    accept_log.ends("accept");
                    // At the cap with every connection busy: close the newcomer.
                    let Some(reg) = tracker.admit() else {
                        tracing::debug!(max = tracker.max, "http: every connection is busy; closed a new one");
                        continue;
                    };
                    let _ = stream.set_nodelay(true);
                    tasks.spawn(handshake(stream, peer.ip(), app.clone(), reg, limits.clone(), shutdown.clone(), web.clone()));
                }
                Err(e) => {
                    // A client that gave up is nobody's problem; anything else (out of
                    // file descriptors, memory) gets a pause so the loop does not spin.
                    if !matches!(
                        e.kind(),
                        io::ErrorKind::ConnectionAborted
                            | io::ErrorKind::ConnectionReset
                            | io::ErrorKind::ConnectionRefused
                            | io::ErrorKind::Interrupted
                            | io::ErrorKind::WouldBlock
                    ) {
                        // Said once while it lasts (and when it ends), not ten times a second.
                        accept_log.holds(
                            "accept",
                            Level::Warn,
                            format!("accept failed: {e}; retrying every 100 ms"),
                        );
                        tokio::select! {
                            _ = shutdown_requested(&mut shutdown) => break,
                            _ = tokio::time::sleep(Duration::from_millis(100)) => {}
                        }
                    }
                }
            },
        }
    }
    // Stop accepting; every connection was told through its own receiver: idle ones close
    // now, in-flight requests get the grace period, then whatever is left is aborted.
    drop(listener);
    let drained = async { while tasks.join_next().await.is_some() {} };
    if tokio::time::timeout(limits.shutdown_grace, drained)
        .await
        .is_err()
    {
        tasks.shutdown().await;
    }
    Ok(())
}

/// Serves one accepted TCP connection: as it is, or after a TLS handshake when the web
/// config in force has TLS. The handshake must finish within the header read timeout (a
/// client that sends its hello a byte at a time is dropped like a slow header), and the
/// connection counts as idle meanwhile (a newcomer at the cap may evict it).
async fn handshake(
    stream: TcpStream,
    peer: IpAddr,
    app: Arc<App>,
    reg: Registered,
    limits: Limits,
    mut shutdown: watch::Receiver<bool>,
    web: WebHandle,
) {
    let Some(tls) = web.current().and_then(|w| w.tls.clone()) else {
        return connection(stream, peer, app, reg, limits, shutdown, web).await;
    };
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    let slot = reg.slot.clone();
    let stream = tokio::select! {
        r = tokio::time::timeout(limits.header_read_timeout, acceptor.accept(stream)) => match r {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "http: TLS handshake failed");
                return;
            }
            Err(_) => {
                tracing::debug!(limit = ?limits.header_read_timeout, "http: TLS handshake not finished in time; closed");
                return;
            }
        },
        _ = slot.evict.notified() => return,
        _ = shutdown_requested(&mut shutdown) => return,
    };
    connection(stream, peer, app, reg, limits, shutdown, web).await
}

/// One HTTP/1.1 connection over any byte stream (TCP, or TLS over TCP). Returns when the
/// connection ends, is evicted, or after shutdown.
async fn connection<I>(
    io: I,
    peer: IpAddr,
    app: Arc<App>,
    reg: Registered,
    limits: Limits,
    mut shutdown: watch::Receiver<bool>,
    web: WebHandle,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let tracker = reg.tracker.clone();
    let slot = reg.slot.clone();
    let svc = {
        let (tracker, slot) = (tracker.clone(), slot.clone());
        service_fn(move |req: Request<Incoming>| {
            let report = matches!(routes::route(req.uri().path()), routes::Route::Report(_));
            let busy = Busy::with_kind(&tracker, slot.clone(), report);
            let app = app.clone();
            let web = web.current();
            async move {
                let head = req.method() == hyper::Method::HEAD;
                let mut resp = match web.as_ref().and_then(|w| w.auth.as_ref()) {
                    Some(auth) if !auth.check(req.headers(), peer).await => {
                        routes::unauthorized(head)
                    }
                    // The body (if any) is never read; GET and HEAD must not have one.
                    _ if (head || req.method() == hyper::Method::GET)
                        && !req.body().is_end_stream() =>
                    {
                        routes::body_refused(head)
                    }
                    _ => app.respond(req.method(), req.uri(), req.headers()).await,
                };
                if let Some(w) = &web {
                    for (k, v) in &w.headers {
                        resp.headers_mut().insert(k.clone(), v.clone());
                    }
                }
                Ok::<_, Infallible>(resp.map(|inner| Guarded { inner, _busy: busy }))
            }
        })
    };
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .keep_alive(true)
        .half_close(false);
    let io = Watched {
        inner: io,
        slot: slot.clone(),
        tracker: tracker.clone(),
        stall: limits.write_stall,
        deadline: None,
    };
    let conn = builder.serve_connection(TokioIo::new(io), svc);
    tokio::pin!(conn);
    tokio::select! {
        _ = conn.as_mut() => return,
        _ = slot.evict.notified() => {
            if tracker.evictable(&slot) {
                return; // dropping the connection closes the socket
            }
            // Became busy meanwhile: finish that request (within the stuck limit), then close.
            conn.as_mut().graceful_shutdown();
            let _ = tokio::time::timeout(limits.stuck_after, conn).await;
            return;
        }
        // The server aborts what is left after its grace period.
        _ = shutdown_requested(&mut shutdown) => conn.as_mut().graceful_shutdown(),
    }
    let _ = conn.await;
    drop(reg);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(max: usize) -> Limits {
        Limits {
            max_connections: max,
            stuck_after: Duration::from_secs(3600),
            ..Limits::default()
        }
    }

    #[test]
    fn the_cap_evicts_the_oldest_idle_connection() {
        let t = Arc::new(Tracker::new(&limits(3)));
        let a = t.admit().unwrap();
        let b = t.admit().unwrap();
        let c = t.admit().unwrap();
        let busy_a = Busy::new(&t, a.slot.clone());
        // a is busy: b (the oldest idle one) makes room.
        let d = t.admit().unwrap();
        assert_eq!(t.len(), 3);
        assert!(t.open.lock().unwrap().contains_key(&a.id));
        assert!(!t.open.lock().unwrap().contains_key(&b.id));
        drop(b);
        assert_eq!(t.len(), 3);
        // Every connection busy: nobody is admitted.
        let _busy = [Busy::new(&t, c.slot.clone()), Busy::new(&t, d.slot.clone())];
        assert!(t.admit().is_none());
        assert_eq!(t.len(), 3);
        // a finishes its response and becomes the one to go.
        drop(busy_a);
        let _e = t.admit().unwrap();
        assert!(!t.open.lock().unwrap().contains_key(&a.id));
        drop(a);
        assert_eq!(t.len(), 3);
    }

    #[test]
    fn the_cap_evicts_the_longest_blocked_writer_then_a_report() {
        let t = Arc::new(Tracker::new(&limits(3)));
        let a = t.admit().unwrap();
        let b = t.admit().unwrap();
        let c = t.admit().unwrap();
        let mut busy = vec![
            Busy::new(&t, a.slot.clone()),
            Busy::new(&t, b.slot.clone()),
            Busy::with_kind(&t, c.slot.clone(), true),
        ];
        // b has been blocked on writing longer than a: b goes first.
        b.slot.write_blocked_since.store(1, Ordering::Release);
        a.slot.write_blocked_since.store(5, Ordering::Release);
        let mut scrapes = Vec::new();
        for gone in [&b, &a, &c] {
            let n = t.admit().unwrap();
            assert!(!t.open.lock().unwrap().contains_key(&gone.id));
            // The newcomer is a scrape in flight.
            busy.push(Busy::new(&t, n.slot.clone()));
            scrapes.push(n);
        }
        // Only scrapes in flight now: none is evicted.
        assert!(t.admit().is_none());
        assert_eq!(t.len(), 3);
    }

    /// A peer that reads nothing: the write blocks, the slot says so, and after the stall
    /// limit the write fails (which closes the connection); progress clears the mark.
    #[tokio::test]
    async fn a_write_without_progress_fails_after_the_stall_limit() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let t = Arc::new(Tracker::new(&limits(1)));
        let reg = t.admit().unwrap();
        let (server, mut peer) = tokio::io::duplex(1024);
        let stall = Duration::from_millis(200);
        let mut w = Watched {
            inner: server,
            slot: reg.slot.clone(),
            tracker: t.clone(),
            stall,
            deadline: None,
        };
        // Progress: not blocked.
        w.write_all(&[1u8; 512]).await.unwrap();
        assert!(reg.slot.write_blocked().is_none());
        let t0 = Instant::now();
        let slot = reg.slot.clone();
        let watcher = tokio::spawn(async move {
            while slot.write_blocked().is_none() {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        });
        let e = w.write_all(&[2u8; 64 << 10]).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        assert!(t0.elapsed() >= stall, "{:?}", t0.elapsed());
        watcher.await.unwrap();
        // The peer reads: the next write makes progress and clears the mark.
        let mut buf = vec![0u8; 1024];
        peer.read_exact(&mut buf).await.unwrap();
        w.write_all(&[3u8; 16]).await.unwrap();
        assert!(reg.slot.write_blocked().is_none());
    }

    #[test]
    fn a_stuck_response_can_be_evicted() {
        let t = Arc::new(Tracker::new(&Limits {
            max_connections: 1,
            stuck_after: Duration::ZERO,
            ..Limits::default()
        }));
        let a = t.admit().unwrap();
        let _busy = Busy::new(&t, a.slot.clone());
        assert!(t.evictable(&a.slot));
        assert!(t.admit().is_some());
    }
}
