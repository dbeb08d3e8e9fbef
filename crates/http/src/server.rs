//! An accept loop for an axum router that idle connections cannot exhaust.
//!
//! `axum::serve` keeps every connection it accepts until the client closes it: a connection
//! that sends nothing, or half a request head, is held forever, and enough of them (no
//! token needed) use up the process's file descriptors until nobody gets in. This loop
//! serves HTTP/1.1 and HTTP/2 (prior knowledge) as `axum::serve` does, with two bounds:
//!
//! Invariants:
//! - A request is *in progress* from its complete head until its response body has ended
//!   or been dropped; a live SSE stream is one request in progress for as long as it runs.
//! - A connection that has not sent a whole request head within [`Limits::idle_timeout`]
//!   of being accepted is closed: asked to close gracefully, and dropped [`CLOSE_GRACE`]
//!   later if it has not. One that has been answered and then sits idle is closed after
//!   [`Limits::keep_alive`]: much longer, since a client that pools connections (reqwest
//!   keeps them 90 s, browsers minutes) may send its next request just as the server
//!   closes the connection, and that request then fails. A connection with a request in
//!   progress is never closed for idleness.
//! - A request's body must all arrive within [`Limits::body_timeout`] of its head: past
//!   that, reading it fails (the route answers, and the connection, its body unread, is
//!   closed). A request still waiting for its body holds its connection no more than an
//!   idle one does: a client that sends a head and stalls its body cannot lock anyone out.
//! - At most [`Limits::max_connections`] connections are served. One more evicts an idle
//!   connection (closed as above): one that never sent a request or whose every request
//!   in progress is still waiting for its body first, the one idle (or waiting) the
//!   longest among them, else the served one idle the longest; when every connection has
//!   a request in progress whose body has arrived, the newcomer is closed at once. So a flood of idle connections
//!   makes room for a client that sends its request, rather than shutting it out, and
//!   costs a pooled client's connection only once the flood's own are gone.
//! - When the process is out of file descriptors, accepting evicts the longest-idle
//!   connection, or, when none is idle, closes the newcomer at once (with a descriptor kept
//!   spare for it), and waits a moment instead of spinning; the warning is logged at most
//!   once per [`OUT_OF_FILES_WARNING`].
//! - At shutdown nothing more is accepted, every connection is asked to close gracefully
//!   (an idle one closes at once), those still open [`SHUTDOWN_GRACE`] later (live SSE
//!   streams) are dropped, and [`serve`] returns once every connection is closed.

use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::{Request, Response};
use http_body::{Frame, SizeHint};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;

/// How long a connection asked to close (idle, evicted) may take before it is dropped.
pub const CLOSE_GRACE: Duration = Duration::from_secs(1);

/// How long connections may take to close at shutdown before they are dropped.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);

/// How long accepting pauses when the process is out of file descriptors.
const OUT_OF_FILES_PAUSE: Duration = Duration::from_millis(50);

/// The least time between two warnings that the process is out of file descriptors.
pub const OUT_OF_FILES_WARNING: Duration = Duration::from_secs(10);

/// The bounds on connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Most connections served at once (at least 1).
    pub max_connections: usize,
    /// How long a new connection may take to send its first whole request head.
    pub idle_timeout: Duration,
    /// How long a connection that has been answered may sit with no request in progress.
    pub keep_alive: Duration,
    /// How long a request's body may take to arrive, from its head.
    pub body_timeout: Duration,
}

impl Limits {
    /// The default [`Limits::max_connections`].
    pub const MAX_CONNECTIONS: usize = 1024;
    /// The default [`Limits::idle_timeout`].
    pub const IDLE_TIMEOUT: Duration = Duration::from_secs(10);
    /// The default [`Limits::keep_alive`].
    pub const KEEP_ALIVE: Duration = Duration::from_secs(600);
    /// The default [`Limits::body_timeout`].
    pub const BODY_TIMEOUT: Duration = Duration::from_secs(10);
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_connections: Limits::MAX_CONNECTIONS,
            idle_timeout: Limits::IDLE_TIMEOUT,
            keep_alive: Limits::KEEP_ALIVE,
            body_timeout: Limits::BODY_TIMEOUT,
        }
    }
}

/// Serves `router` on `listener` within `limits` until `shutdown` completes (see the module
/// invariants for what happens to open connections then).
pub async fn serve(
    listener: TcpListener,
    router: Router,
    limits: Limits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let registry = Arc::new(Registry {
        conns: Mutex::new(HashMap::new()),
        next_id: AtomicU64::new(0),
        max: limits.max_connections.max(1),
    });
    let (stop, stopped) = watch::channel(false);
    let mut tasks = JoinSet::new();
    let mut out_of_files = OutOfFiles::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => {
                    let Some(conn) = registry.admit() else {
                        tracing::debug!(target: "agent_http", "every connection is busy: a new one is closed");
                        drop(stream);
                        continue;
                    };
                    let service = Service {
                        router: router.clone(),
                        conn: Arc::clone(&conn),
                        body_timeout: limits.body_timeout,
                    };
                    let registry = Arc::clone(&registry);
                    let stopped = stopped.clone();
                    tasks.spawn(async move {
                        drive(stream, service, &conn, limits, stopped).await;
                        registry.remove(conn.id);
                    });
                }
                Err(err) if is_out_of_files(&err) => {
                    out_of_files.warn(&err);
                    if !registry.evict_longest_idle() {
                        out_of_files.refuse_one(&listener).await;
                    }
                    tokio::time::sleep(OUT_OF_FILES_PAUSE).await;
                }
                // A connection reset or aborted before it was accepted: nothing to do.
                Err(err) => tracing::debug!(target: "agent_http", %err, "accept failed"),
            },
        }
    }
    drop(listener);
    let _ = stop.send(true);
    while tasks.join_next().await.is_some() {}
    Ok(())
}

/// Whether an accept failed for want of file descriptors (EMFILE, ENFILE).
fn is_out_of_files(err: &std::io::Error) -> bool {
    matches!(err.raw_os_error(), Some(23 | 24))
}

/// What accepting does when the process is out of file descriptors: one kept spare to
/// accept and close a newcomer that no idle connection makes room for (it would wait in
/// the backlog, unanswered, else), and the warning's last time.
struct OutOfFiles {
    spare: Option<std::fs::File>,
    warned: Option<Instant>,
    since_warned: u64,
}

impl OutOfFiles {
    fn new() -> OutOfFiles {
        OutOfFiles {
            spare: std::fs::File::open("/dev/null").ok(),
            warned: None,
            since_warned: 0,
        }
    }

    /// Logs `err`, at most once per [`OUT_OF_FILES_WARNING`] (with how many were not).
    fn warn(&mut self, err: &std::io::Error) {
        let now = Instant::now();
        if self
            .warned
            .is_some_and(|at| now.duration_since(at) < OUT_OF_FILES_WARNING)
        {
            self.since_warned += 1;
            return;
        }
        tracing::warn!(
            target: "agent_http",
            %err,
            not_logged = self.since_warned,
            "accept failed: out of file descriptors (closing idle connections, refusing new ones)"
        );
        self.warned = Some(now);
        self.since_warned = 0;
    }

    /// Accepts one waiting connection with the spare descriptor and closes it at once.
    async fn refuse_one(&mut self, listener: &TcpListener) {
        self.spare = None;
        if let Ok(Ok((stream, _))) =
            tokio::time::timeout(OUT_OF_FILES_PAUSE, listener.accept()).await
        {
            drop(stream);
            tracing::debug!(target: "agent_http", "out of file descriptors: a new connection is closed");
        }
        self.spare = std::fs::File::open("/dev/null").ok();
    }
}

/// Serves one connection until it closes, its idle time runs out, it is evicted, or the
/// server stops.
async fn drive(
    stream: TcpStream,
    service: Service,
    conn: &Conn,
    limits: Limits,
    mut stopped: watch::Receiver<bool>,
) {
    let builder = auto::Builder::new(TokioExecutor::new());
    let connection = builder.serve_connection(TokioIo::new(stream), service);
    tokio::pin!(connection);
    // Once asked to close: when it is dropped if it has not closed by then.
    let mut closing: Option<Instant> = None;
    loop {
        let wake = closing.unwrap_or_else(|| conn.idle_deadline(limits));
        tokio::select! {
            served = connection.as_mut() => {
                if let Err(err) = served {
                    tracing::debug!(target: "agent_http", %err, "connection ended");
                }
                return;
            }
            () = tokio::time::sleep_until(wake) => {
                if closing.is_some() {
                    return;
                }
                if conn.idle_deadline(limits) <= Instant::now() {
                    connection.as_mut().graceful_shutdown();
                    closing = Some(Instant::now() + CLOSE_GRACE);
                }
            }
            () = conn.evict.notified(), if closing.is_none() => {
                connection.as_mut().graceful_shutdown();
                closing = Some(Instant::now() + CLOSE_GRACE);
            }
            _ = stopped.wait_for(|stop| *stop), if closing.is_none() => {
                connection.as_mut().graceful_shutdown();
                closing = Some(Instant::now() + SHUTDOWN_GRACE);
            }
        }
    }
}

/// The connections being served.
struct Registry {
    conns: Mutex<HashMap<u64, Arc<Conn>>>,
    next_id: AtomicU64,
    max: usize,
}

impl Registry {
    /// A new connection's record, evicting the longest-idle one when the server is full;
    /// `None` when it is full of connections with requests in progress.
    fn admit(&self) -> Option<Arc<Conn>> {
        let mut conns = self.conns.lock().unwrap_or_else(PoisonError::into_inner);
        let open = conns
            .values()
            .filter(|c| !c.evicted.load(Ordering::Acquire))
            .count();
        if open >= self.max && !evict_longest_idle(&conns) {
            return None;
        }
        let conn = Arc::new(Conn {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            in_flight: AtomicUsize::new(0),
            served: AtomicBool::new(false),
            idle_since: Mutex::new(Instant::now()),
            waiting: AtomicUsize::new(0),
            waiting_since: Mutex::new(Instant::now()),
            evict: Notify::new(),
            evicted: AtomicBool::new(false),
        });
        conns.insert(conn.id, Arc::clone(&conn));
        Some(conn)
    }

    fn evict_longest_idle(&self) -> bool {
        evict_longest_idle(&self.conns.lock().unwrap_or_else(PoisonError::into_inner))
    }

    fn remove(&self, id: u64) {
        self.conns
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&id);
    }
}

/// Asks an idle connection (not asked already) to close: one that never sent a request or
/// waits for every body it was sent, the one idle the longest, else the served one idle the
/// longest; whether there was one.
fn evict_longest_idle(conns: &HashMap<u64, Arc<Conn>>) -> bool {
    let victim = conns
        .values()
        .filter(|c| !c.evicted.load(Ordering::Acquire))
        .filter_map(|c| c.eviction_rank().map(|rank| (rank, c)))
        .min_by_key(|(rank, _)| *rank);
    match victim {
        Some((_, conn)) => {
            conn.evicted.store(true, Ordering::Release);
            conn.evict.notify_one();
            tracing::debug!(target: "agent_http", "connections at the limit: the longest-idle one is closed");
            true
        }
        None => false,
    }
}

/// One connection's record.
struct Conn {
    id: u64,
    /// Requests in progress.
    in_flight: AtomicUsize,
    /// Whether a whole request head has arrived on it.
    served: AtomicBool,
    /// When the last request in progress ended (or the connection was accepted).
    idle_since: Mutex<Instant>,
    /// Requests in progress whose body has not all arrived.
    waiting: AtomicUsize,
    /// When the latest of them arrived (its head).
    waiting_since: Mutex<Instant>,
    /// Asks the connection to close (eviction).
    evict: Notify,
    /// Whether it was asked to.
    evicted: AtomicBool,
}

impl Conn {
    /// Since when it has had no request in progress; `None` while it has one.
    fn idle_since(&self) -> Option<Instant> {
        let since = *self
            .idle_since
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        (self.in_flight.load(Ordering::Acquire) == 0).then_some(since)
    }

    /// How it ranks for eviction, lowest first: `(false, since)` when it never sent a
    /// request or every request in progress on it still waits for its body, `(true, since)`
    /// when it was served and is idle; `None` while a request whose body arrived is in
    /// progress.
    fn eviction_rank(&self) -> Option<(bool, Instant)> {
        if let Some(since) = self.idle_since() {
            return Some((self.served.load(Ordering::Acquire), since));
        }
        let in_flight = self.in_flight.load(Ordering::Acquire);
        let waiting = self.waiting.load(Ordering::Acquire);
        (waiting > 0 && waiting >= in_flight).then(|| {
            let since = *self
                .waiting_since
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            (false, since)
        })
    }

    /// When its idle time runs out: `idle_timeout` after it was accepted until it sends a
    /// request, `keep_alive` after its last answer since (while a request is in progress: a
    /// full timeout from now, to look again then).
    fn idle_deadline(&self, limits: Limits) -> Instant {
        let timeout = if self.served.load(Ordering::Acquire) {
            limits.keep_alive
        } else {
            limits.idle_timeout
        };
        self.idle_since()
            .unwrap_or_else(Instant::now)
            .checked_add(timeout)
            .unwrap_or_else(Instant::now)
    }
}

/// A request in progress on a connection, from its head until its response body is done.
struct Busy(Arc<Conn>);

impl Busy {
    fn new(conn: Arc<Conn>) -> Busy {
        conn.in_flight.fetch_add(1, Ordering::AcqRel);
        conn.served.store(true, Ordering::Release);
        Busy(conn)
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        // The time first, so that whoever sees no request in progress sees when it ended.
        *self
            .0
            .idle_since
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Instant::now();
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A request in progress whose body has not all arrived, counted on its connection.
struct Waiting(Arc<Conn>);

impl Waiting {
    fn new(conn: Arc<Conn>) -> Waiting {
        *conn
            .waiting_since
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Instant::now();
        conn.waiting.fetch_add(1, Ordering::AcqRel);
        Waiting(conn)
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        self.0.waiting.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The router, with each request counted on its connection.
#[derive(Clone)]
struct Service {
    router: Router,
    conn: Arc<Conn>,
    body_timeout: Duration,
}

impl hyper::service::Service<Request<Incoming>> for Service {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Response<Body>, Infallible>> + Send>>;

    fn call(&self, req: Request<Incoming>) -> Self::Future {
        let busy = Busy::new(Arc::clone(&self.conn));
        // A router is always ready (axum's `Router::poll_ready` never waits).
        let mut router = self.router.clone();
        let req = if http_body::Body::is_end_stream(req.body()) {
            req.map(Body::new)
        } else {
            let conn = Arc::clone(&self.conn);
            let timeout = self.body_timeout;
            req.map(|inner| Body::new(Arriving::new(inner, conn, timeout)))
        };
        let answer = tower_service::Service::call(&mut router, req);
        Box::pin(async move {
            let response = answer.await?;
            Ok(response.map(|inner| Body::new(Counted { inner, _busy: busy })))
        })
    }
}

/// A request body that must all arrive within a time of its head; until it has, its
/// connection counts it as waiting ([`Conn::eviction_rank`]).
struct Arriving {
    inner: Incoming,
    deadline: Pin<Box<tokio::time::Sleep>>,
    timeout: Duration,
    waiting: Option<Waiting>,
}

impl Arriving {
    fn new(inner: Incoming, conn: Arc<Conn>, timeout: Duration) -> Arriving {
        Arriving {
            inner,
            deadline: Box::pin(tokio::time::sleep(timeout)),
            timeout,
            waiting: Some(Waiting::new(conn)),
        }
    }
}

/// What reading a request body fails with.
type BodyError = Box<dyn std::error::Error + Send + Sync>;

impl http_body::Body for Arriving {
    type Data = Bytes;
    type Error = BodyError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BodyError>>> {
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if this.inner.is_end_stream() {
                    this.waiting = None;
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(err))) => {
                this.waiting = None;
                Poll::Ready(Some(Err(err.into())))
            }
            Poll::Ready(None) => {
                this.waiting = None;
                Poll::Ready(None)
            }
            Poll::Pending => {
                if this.waiting.is_some() && this.deadline.as_mut().poll(cx).is_ready() {
                    this.waiting = None;
                    let late = std::io::Error::new(
                        std::io::ErrorKind::TimedOut,
                        format!(
                            "the request body did not arrive within {} s",
                            this.timeout.as_secs_f64()
                        ),
                    );
                    return Poll::Ready(Some(Err(late.into())));
                }
                Poll::Pending
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// A response body that keeps its request in progress until it ends or is dropped.
struct Counted {
    inner: Body,
    _busy: Busy,
}

impl http_body::Body for Counted {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_server_evicts_the_longest_idle_connection_and_refuses_when_all_are_busy() {
        let registry = Registry {
            conns: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(0),
            max: 2,
        };
        let (Some(first), Some(second)) = (registry.admit(), registry.admit()) else {
            unreachable!("room for two");
        };
        let busy_second = Busy::new(Arc::clone(&second));
        // Full: the idle one goes, the busy one stays.
        assert!(registry.admit().is_some());
        assert!(first.evicted.load(Ordering::Acquire));
        assert!(!second.evicted.load(Ordering::Acquire));
        registry.remove(first.id);
        // Full again (the second busy, the third idle): the third goes.
        assert!(registry.admit().is_some());
        let conns = registry
            .conns
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        assert_eq!(
            conns
                .values()
                .filter(|c| c.evicted.load(Ordering::Acquire))
                .count(),
            1
        );
        drop(conns);
        // Every open connection busy: a newcomer is refused.
        let open: Vec<Arc<Conn>> = registry
            .conns
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .values()
            .filter(|c| !c.evicted.load(Ordering::Acquire))
            .cloned()
            .collect();
        let _busy: Vec<Busy> = open
            .iter()
            .filter(|c| c.id != second.id)
            .map(|c| Busy::new(Arc::clone(c)))
            .collect();
        assert!(registry.admit().is_none());
        // A request that ends makes its connection idle (and evictable) again.
        drop(busy_second);
        assert!(second.idle_since().is_some());
        assert!(registry.admit().is_some());
        assert!(second.evicted.load(Ordering::Acquire));
    }

    #[test]
    fn a_connection_that_never_sent_a_request_is_evicted_before_a_served_one() {
        let registry = Registry {
            conns: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(0),
            max: 2,
        };
        let Some(served) = registry.admit() else {
            unreachable!("room");
        };
        drop(Busy::new(Arc::clone(&served)));
        std::thread::sleep(Duration::from_millis(5));
        let Some(silent) = registry.admit() else {
            unreachable!("room");
        };
        // The served one has been idle longer, but the silent one goes.
        assert!(registry.admit().is_some());
        assert!(silent.evicted.load(Ordering::Acquire));
        assert!(!served.evicted.load(Ordering::Acquire));
        let limits = Limits {
            max_connections: 2,
            idle_timeout: Duration::from_secs(1),
            keep_alive: Duration::from_secs(100),
            body_timeout: Duration::from_secs(1),
        };
        let now = Instant::now();
        assert!(silent.idle_deadline(limits) < now + Duration::from_secs(2));
        assert!(served.idle_deadline(limits) > now + Duration::from_secs(50));
    }
}
