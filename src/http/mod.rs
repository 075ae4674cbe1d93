//! The daemon's HTTP endpoints on `--http-addr`: `GET /metrics`, `GET /healthz` (live),
//! `GET /readyz` (ready); and the kubelet's probe listener on `--probe-addr` (`/healthz`
//! and `/readyz` only, see [`serve_probes`]), which no client of `--http-addr` can delay.
//!
//! `/metrics` negotiates its format: OpenMetrics text when the `Accept` header asks for
//! `application/openmetrics-text` (as Prometheus does), the Prometheus text format 0.0.4
//! otherwise (curl, browsers, `promtool check metrics`).
//!
//! The server is reachable by anything on the pod network, so every resource a client can
//! hold is bounded: request head size and count of headers ([`MAX_HEADER_BYTES`],
//! [`MAX_HEADERS`], answered with 431), request body ([`MAX_BODY_BYTES`], 413), the time to
//! send a request head ([`HEADER_READ_TIMEOUT`], also the keep-alive idle time), the time
//! to answer ([`REQUEST_TIMEOUT`], 408), the lifetime of a connection
//! ([`MAX_CONNECTION_AGE`]) and the number of open connections ([`MAX_CONNECTIONS`]).
//! Connections beyond that number wait, so a client holding them all delays everyone
//! else on this port: the kubelet's probes therefore go to the probe listener.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use axum::Router;
use axum::extract::{FromRef, State};
use axum::http::header::{ACCEPT, CONTENT_TYPE};
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tower_http::limit::RequestBodyLimitLayer;
use tower_http::timeout::TimeoutLayer;

use crate::metrics::Metrics;

mod probes;

pub use probes::{
    PROBE_CONNECTION_AGE, PROBE_HEADER_READ_TIMEOUT, PROBE_MAX_CONNECTIONS,
    PROBE_MAX_CONNECTIONS_PER_PEER, probe_router, serve_probes,
};

/// Longest request head (request line and headers) accepted, in bytes; a longer one is
/// answered 431 and the connection closed. Prometheus and kubelet probes send well under
/// 1 KiB; 16 KiB leaves room for proxies' headers while keeping the per-connection buffer
/// small. It is also the read buffer limit (hyper's minimum is 8 KiB).
pub const MAX_HEADER_BYTES: usize = 16 * 1024;

/// Most headers accepted in one request (hyper's default is 100); more is answered 431.
pub const MAX_HEADERS: usize = 64;

/// Largest request body accepted, in bytes. The endpoints are `GET`s that read no body;
/// a declared larger body is answered 413 without reading it.
pub const MAX_BODY_BYTES: usize = 1024;

/// Time a client gets to send a complete request head, counted from the moment the server
/// starts waiting for it (connection open, or the previous response on a keep-alive
/// connection). A client that sends half a request line and stalls, or trickles headers
/// a byte at a time (slowloris), is disconnected after this, and so is an idle
/// keep-alive connection. Probes and scrapers send their head in one packet.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(5);

/// Time a request may take from its head to its response; a slower one is answered 408.
/// The handlers only read in-memory state; this bounds a stuck one.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Longest a connection stays open, whatever it does (a client that never reads its
/// response, a body trickled forever, endless keep-alive use). At this age the connection
/// is closed gracefully: the request in flight gets [`CLOSE_GRACE`] to finish.
pub const MAX_CONNECTION_AGE: Duration = Duration::from_secs(60);

/// Time a connection gets to finish its request in flight after a graceful close (server
/// shutdown or [`MAX_CONNECTION_AGE`]) before it is dropped.
pub const CLOSE_GRACE: Duration = Duration::from_secs(5);

/// Most connections open at once (HTTP/1 only, so also the most requests in flight). More
/// clients wait in the listen backlog until a connection ends, which every bound above
/// guarantees; file descriptors and memory stay bounded whatever clients do.
pub const MAX_CONNECTIONS: u32 = 64;

/// The per-connection bounds of [`serve`]'s listener.
const METRICS_LIMITS: ConnectionLimits = ConnectionLimits {
    header_read_timeout: HEADER_READ_TIMEOUT,
    max_age: MAX_CONNECTION_AGE,
    close_grace: CLOSE_GRACE,
    keep_alive: true,
};

/// Pause after an accept error other than a connection's own failure (e.g. out of file
/// descriptors), so the loop does not spin.
const ACCEPT_ERROR_PAUSE: Duration = Duration::from_secs(1);

const _: () = assert!(
    MAX_HEADER_BYTES >= 8192,
    "hyper's smallest read buffer is 8 KiB"
);

/// `Content-Type` of the OpenMetrics text exposition.
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// `Content-Type` of the Prometheus text exposition format 0.0.4.
pub const PROMETHEUS_TEXT_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Why a fresh [`Health`] is not ready.
const STARTING: &str = "starting";

/// Liveness and readiness, shared between the daemon (which sets them) and the HTTP server
/// (which reports them). Cloning shares the state. A new `Health` is live and not ready.
#[derive(Debug, Clone)]
pub struct Health {
    inner: Arc<HealthInner>,
}

#[derive(Debug)]
struct HealthInner {
    live: AtomicBool,
    /// `None` when ready, else why not.
    not_ready: RwLock<Option<String>>,
}

impl Default for Health {
    fn default() -> Self {
        Self::new()
    }
}

impl Health {
    /// Live, not ready (reason "starting").
    pub fn new() -> Self {
        Self {
            inner: Arc::new(HealthInner {
                live: AtomicBool::new(true),
                not_ready: RwLock::new(Some(STARTING.to_owned())),
            }),
        }
    }

    /// Marks the process ready, or not ready with the generic reason "not ready".
    pub fn set_ready(&self, ready: bool) {
        let reason = (!ready).then(|| "not ready".to_owned());
        *self.write() = reason;
    }

    /// Marks the process not ready and says why (shown by `/readyz`).
    pub fn set_not_ready(&self, reason: impl Into<String>) {
        *self.write() = Some(reason.into());
    }

    /// True once [`Health::set_ready`] was called with `true` (and not undone).
    pub fn is_ready(&self) -> bool {
        self.not_ready_reason().is_none()
    }

    /// Why the process is not ready; `None` when it is.
    pub fn not_ready_reason(&self) -> Option<String> {
        self.inner
            .not_ready
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Marks the process live or not (a dead process gets restarted by its kubelet).
    pub fn set_live(&self, live: bool) {
        self.inner.live.store(live, Ordering::SeqCst);
    }

    /// True while live.
    pub fn is_live(&self) -> bool {
        self.inner.live.load(Ordering::SeqCst)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Option<String>> {
        self.inner
            .not_ready
            .write()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

#[derive(Clone)]
struct AppState {
    metrics: Metrics,
    health: Health,
}

impl FromRef<AppState> for Health {
    fn from_ref(state: &AppState) -> Self {
        state.health.clone()
    }
}

/// The routes, for embedding or for tests that drive the router without a socket, with
/// the body limit and the request timeout.
pub fn router(metrics: Metrics, health: Health) -> Router {
    bounded(
        Router::new()
            .route("/metrics", get(metrics_handler))
            .route("/healthz", get(healthz))
            .route("/readyz", get(readyz))
            .with_state(AppState { metrics, health }),
    )
}

/// Adds the request-level bounds: [`MAX_BODY_BYTES`] (413) and [`REQUEST_TIMEOUT`] (408).
fn bounded(routes: Router) -> Router {
    routes
        .layer(RequestBodyLimitLayer::new(MAX_BODY_BYTES))
        .layer(TimeoutLayer::with_status_code(
            StatusCode::REQUEST_TIMEOUT,
            REQUEST_TIMEOUT,
        ))
}

/// Binds `addr` and serves the routes until `shutdown` completes. Returns the bound
/// address (useful with port 0) and the server task, which ends after `shutdown` once open
/// connections have finished. A bind failure names the address.
pub async fn serve(
    addr: SocketAddr,
    metrics: Metrics,
    health: Health,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let (listener, bound) = bind(addr, "HTTP server").await?;
    let task = tokio::spawn(serve_routes(listener, router(metrics, health), shutdown));
    tracing::info!(address = %bound, "serving /metrics, /healthz and /readyz");
    Ok((bound, task))
}

/// Binds `addr` for `what`; returns the listener and the bound address. Errors name both.
async fn bind(addr: SocketAddr, what: &str) -> std::io::Result<(TcpListener, SocketAddr)> {
    let listener = TcpListener::bind(addr).await.map_err(|e| {
        std::io::Error::new(e.kind(), format!("cannot bind the {what} to {addr}: {e}"))
    })?;
    let bound = listener.local_addr().map_err(|e| {
        std::io::Error::new(
            e.kind(),
            format!("cannot read the address the {what} bound for {addr}: {e}"),
        )
    })?;
    Ok((listener, bound))
}

/// The accept loop: at most [`MAX_CONNECTIONS`] connections, each served by
/// [`serve_connection`]. After `shutdown`, stops accepting, closes the open connections
/// gracefully and returns once all are gone.
async fn serve_routes(
    listener: TcpListener,
    app: Router,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let open = Arc::new(Semaphore::new(MAX_CONNECTIONS as usize));
    let closing = CancellationToken::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let permit = tokio::select! {
            () = &mut shutdown => break,
            permit = Arc::clone(&open).acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break,
            },
        };
        let stream = tokio::select! {
            () = &mut shutdown => break,
            accepted = accept(&listener) => match accepted {
                Some((stream, _)) => stream,
                None => continue,
            },
        };
        tokio::spawn(serve_connection(
            stream,
            app.clone(),
            closing.clone(),
            METRICS_LIMITS,
            permit,
        ));
    }
    drop(listener);
    closing.cancel();
    // Every open connection holds a permit until it is gone.
    let _all_closed = open.acquire_many(MAX_CONNECTIONS).await;
}

/// The next connection and its peer's address; `None` after a failure (one connection's
/// own, or the listener's, which is logged and paused on for [`ACCEPT_ERROR_PAUSE`]).
async fn accept(listener: &TcpListener) -> Option<(TcpStream, SocketAddr)> {
    match listener.accept().await {
        Ok(accepted) => Some(accepted),
        Err(e) if is_connection_error(&e) => None,
        Err(e) => {
            tracing::warn!(error = %e, "HTTP server cannot accept a connection");
            tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
            None
        }
    }
}

/// Errors of one incoming connection, not of the listener.
fn is_connection_error(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::ConnectionRefused
            | std::io::ErrorKind::ConnectionAborted
            | std::io::ErrorKind::ConnectionReset
    )
}

/// The per-connection bounds of one listener.
#[derive(Debug, Clone, Copy)]
struct ConnectionLimits {
    /// Time to send a request head (on a keep-alive connection, also the idle time).
    header_read_timeout: Duration,
    /// Age at which the connection is closed gracefully.
    max_age: Duration,
    /// Time a gracefully closed connection gets to finish before it is dropped.
    close_grace: Duration,
    /// Whether a connection may carry more than one request.
    keep_alive: bool,
}

/// Serves one HTTP/1 connection within [`MAX_HEADER_BYTES`], [`MAX_HEADERS`] and `limits`;
/// `_slot` (e.g. a semaphore permit) counts it as open until it ends.
async fn serve_connection<S: Send + 'static>(
    stream: TcpStream,
    app: Router,
    closing: CancellationToken,
    limits: ConnectionLimits,
    _slot: S,
) {
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .keep_alive(limits.keep_alive)
        .max_buf_size(MAX_HEADER_BYTES)
        .max_header_size(MAX_HEADER_BYTES)
        .max_headers(MAX_HEADERS);
    let connection = builder.serve_connection(TokioIo::new(stream), TowerToHyperService::new(app));
    let mut connection = std::pin::pin!(connection);
    tokio::select! {
        result = connection.as_mut() => {
            if let Err(e) = result {
                tracing::debug!(error = %e, "HTTP connection ended with an error");
            }
            return;
        }
        () = closing.cancelled() => {}
        () = tokio::time::sleep(limits.max_age) => {}
    }
    connection.as_mut().graceful_shutdown();
    if tokio::time::timeout(limits.close_grace, connection)
        .await
        .is_err()
    {
        tracing::debug!("HTTP connection dropped after the close grace period");
    }
}

async fn metrics_handler(State(state): State<AppState>, headers: HeaderMap) -> impl IntoResponse {
    let accept = headers.get(ACCEPT).and_then(|v| v.to_str().ok());
    if wants_openmetrics(accept) {
        (
            [(CONTENT_TYPE, OPENMETRICS_CONTENT_TYPE)],
            state.metrics.encode(),
        )
    } else {
        (
            [(CONTENT_TYPE, PROMETHEUS_TEXT_CONTENT_TYPE)],
            state.metrics.encode_prometheus_text(),
        )
    }
}

async fn healthz(State(health): State<Health>) -> impl IntoResponse {
    if health.is_live() {
        (StatusCode::OK, "ok".to_owned())
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not live".to_owned())
    }
}

async fn readyz(State(health): State<Health>) -> impl IntoResponse {
    match health.not_ready_reason() {
        None => (StatusCode::OK, "ok".to_owned()),
        Some(reason) => (StatusCode::SERVICE_UNAVAILABLE, reason),
    }
}

/// True when the `Accept` header prefers OpenMetrics text over the Prometheus text format:
/// `application/openmetrics-text` is listed with a non-zero quality at least as high as
/// that of `text/plain` (or a wildcard matching it).
pub fn wants_openmetrics(accept: Option<&str>) -> bool {
    let Some(accept) = accept else {
        return false;
    };
    let mut openmetrics: f32 = 0.0;
    let mut text: f32 = 0.0;
    for item in accept.split(',') {
        let mut parts = item.split(';');
        let media = parts.next().unwrap_or("").trim().to_ascii_lowercase();
        let q = parts
            .filter_map(|p| p.split_once('='))
            .find(|(k, _)| k.trim().eq_ignore_ascii_case("q"))
            .map_or(1.0, |(_, v)| v.trim().parse::<f32>().unwrap_or(0.0));
        match media.as_str() {
            "application/openmetrics-text" => openmetrics = openmetrics.max(q),
            "text/plain" | "text/*" | "*/*" => text = text.max(q),
            _ => {}
        }
    }
    openmetrics > 0.0 && openmetrics >= text
}

#[cfg(test)]
mod tests;
