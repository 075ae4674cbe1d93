//! The daemon's HTTP endpoints on `--http-addr`: `GET /metrics`, `GET /healthz` (live),
//! `GET /readyz` (ready).
//!
//! `/metrics` negotiates its format: OpenMetrics text when the `Accept` header asks for
//! `application/openmetrics-text` (as Prometheus does), the Prometheus text format 0.0.4
//! otherwise (curl, browsers, `promtool check metrics`).

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError, RwLock};

use axum::Router;
use axum::extract::State;
use axum::http::header::{ACCEPT, CONTENT_TYPE};
use axum::http::{HeaderMap, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;

use crate::metrics::Metrics;

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

/// The routes, for embedding or for tests that drive the router without a socket.
pub fn router(metrics: Metrics, health: Health) -> Router {
    Router::new()
        .route("/metrics", get(metrics_handler))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(AppState { metrics, health })
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
    let app = router(metrics, health);
    let task = tokio::spawn(async move {
        let server = axum::serve(listener, app).with_graceful_shutdown(shutdown);
        if let Err(e) = server.await {
            tracing::error!(address = %bound, error = %e, "HTTP server failed");
        }
    });
    tracing::info!(address = %bound, "serving /metrics, /healthz and /readyz");
    Ok((bound, task))
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
