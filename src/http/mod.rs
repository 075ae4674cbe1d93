//! The daemon's HTTP endpoints on `--http-addr`: `GET /metrics`, `GET /healthz` (live),
//! `GET /readyz` (ready).
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

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::header::{ACCEPT, CONTENT_TYPE};
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use tower_http::limit::RequestBodyLimitLayer;
use tower_http::timeout::TimeoutLayer;

use crate::metrics::Metrics;

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
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(|e| {
        std::io::Error::new(
            e.kind(),
            format!("cannot bind the HTTP server to {addr}: {e}"),
        )
    })?;
    let bound = listener.local_addr().map_err(|e| {
        std::io::Error::new(
            e.kind(),
            format!("cannot read the address the HTTP server bound for {addr}: {e}"),
        )
    })?;
    let task = tokio::spawn(serve_routes(listener, router(metrics, health), shutdown));
    tracing::info!(address = %bound, "serving /metrics, /healthz and /readyz");
    Ok((bound, task))
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
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) if is_connection_error(&e) => continue,
                Err(e) => {
                    tracing::warn!(error = %e, "HTTP server cannot accept a connection");
                    tokio::time::sleep(ACCEPT_ERROR_PAUSE).await;
                    continue;
                }
            },
        };
        tokio::spawn(serve_connection(
            stream,
            app.clone(),
            closing.clone(),
            permit,
        ));
    }
    drop(listener);
    closing.cancel();
    // Every open connection holds a permit until it is gone.
    let _all_closed = open.acquire_many(MAX_CONNECTIONS).await;
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

/// Serves one HTTP/1 connection within [`MAX_HEADER_BYTES`], [`MAX_HEADERS`],
/// [`HEADER_READ_TIMEOUT`] and [`MAX_CONNECTION_AGE`]; `_permit` counts it as open until
/// it ends.
async fn serve_connection(
    stream: TcpStream,
    app: Router,
    closing: CancellationToken,
    _permit: OwnedSemaphorePermit,
) {
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
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
        () = tokio::time::sleep(MAX_CONNECTION_AGE) => {}
    }
    connection.as_mut().graceful_shutdown();
    if tokio::time::timeout(CLOSE_GRACE, connection).await.is_err() {
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

async fn healthz(State(state): State<AppState>) -> impl IntoResponse {
    if state.health.is_live() {
        (StatusCode::OK, "ok".to_owned())
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "not live".to_owned())
    }
}

async fn readyz(State(state): State<AppState>) -> impl IntoResponse {
    match state.health.not_ready_reason() {
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
