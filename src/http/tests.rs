use std::time::Duration;

use tokio::sync::oneshot;

use super::*;
use crate::metrics::RegistrationResult;

/// Both listeners, [`serve`] and [`serve_probes`], on loopback ports.
struct Server {
    base: String,
    /// `http://host:port` of the probe listener.
    probe_base: String,
    metrics: Metrics,
    health: Health,
    stop: CancellationToken,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    client: reqwest::Client,
}

async fn start() -> Server {
    let metrics = Metrics::new();
    let health = Health::new();
    let stop = CancellationToken::new();
    let addr: SocketAddr = "127.0.0.1:0".parse().expect("loopback address");
    let (bound, task) = serve(
        addr,
        metrics.clone(),
        health.clone(),
        stop.clone().cancelled_owned(),
    )
    .await
    .expect("bind 127.0.0.1:0");
    assert!(bound.ip().is_loopback());
    assert_ne!(bound.port(), 0);
    let (probe_bound, probe_task) =
        serve_probes(addr, health.clone(), stop.clone().cancelled_owned())
            .await
            .expect("bind 127.0.0.1:0 for the probes");
    assert!(probe_bound.ip().is_loopback());
    assert_ne!(probe_bound.port(), bound.port());
    let client = http_client();
    Server {
        base: format!("http://{bound}"),
        probe_base: format!("http://{probe_bound}"),
        metrics,
        health,
        stop,
        tasks: vec![task, probe_task],
        client,
    }
}

impl Server {
    async fn get(&self, path: &str, accept: Option<&str>) -> (u16, String, String) {
        let mut req = self.client.get(format!("{}{path}", self.base));
        if let Some(accept) = accept {
            req = req.header(ACCEPT, accept);
        }
        let resp = req.send().await.expect("request");
        let status = resp.status().as_u16();
        let ctype = resp
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        (status, ctype, resp.text().await.expect("body"))
    }

    /// GET `path` of the probe listener: (status, body).
    async fn probe_get(&self, path: &str) -> (u16, String) {
        let resp = self
            .client
            .get(format!("{}{path}", self.probe_base))
            .send()
            .await
            .expect("request");
        let status = resp.status().as_u16();
        (status, resp.text().await.expect("body"))
    }

    async fn stop(self) {
        self.stop.cancel();
        for task in self.tasks {
            tokio::time::timeout(Duration::from_secs(10), task)
                .await
                .expect("server stops after shutdown")
                .expect("server task did not panic");
        }
    }
}

/// A plain-HTTP client. reqwest is built with `rustls-no-provider`, so even a client that
/// never speaks TLS needs a rustls config (ring provider, no roots: TLS is never used).
fn http_client() -> reqwest::Client {
    let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("ring supports the default TLS versions")
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
    reqwest::Client::builder()
        .no_proxy()
        .tls_backend_preconfigured(tls)
        .build()
        .expect("plain HTTP client")
}

/// What Prometheus 2.x/3.x sends when scraping.
const PROMETHEUS_ACCEPT: &str = "application/openmetrics-text;version=1.0.0,\
    application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";

#[tokio::test]
async fn metrics_are_openmetrics_when_asked_for() {
    let s = start().await;
    s.metrics
        .registration(RegistrationResult::Created, Duration::from_millis(80));
    let (status, ctype, body) = s.get("/metrics", Some(PROMETHEUS_ACCEPT)).await;
    assert_eq!(status, 200);
    assert_eq!(ctype, OPENMETRICS_CONTENT_TYPE);
    assert!(body.ends_with("# EOF\n"), "{body}");
    assert!(body.contains("volmig_registrations_total{result=\"created\"} 1\n"));
    // The process_* metrics are read from /proc at each scrape; the rest is deterministic.
    let volmig_lines = |text: &str| -> Vec<String> {
        text.lines()
            .filter(|l| !l.contains("process_"))
            .map(str::to_owned)
            .collect()
    };
    assert_eq!(volmig_lines(&body), volmig_lines(&s.metrics.encode()));
    s.stop().await;
}

#[tokio::test]
async fn metrics_are_prometheus_text_by_default() {
    let s = start().await;
    s.metrics.set_leader(true);
    for accept in [None, Some("*/*"), Some("text/plain")] {
        let (status, ctype, body) = s.get("/metrics", accept).await;
        assert_eq!(status, 200, "{accept:?}");
        assert_eq!(ctype, PROMETHEUS_TEXT_CONTENT_TYPE, "{accept:?}");
        assert!(!body.contains("# EOF"), "{accept:?}");
        assert!(body.contains("# TYPE volmig_registrations_total counter\n"));
        assert!(body.contains("\nvolmig_leader 1\n"));
    }
    s.stop().await;
}

#[tokio::test]
async fn healthz_follows_liveness() {
    let s = start().await;
    assert_eq!(
        s.get("/healthz", None).await,
        (200, ctype_text(), "ok".into())
    );
    assert_eq!(s.probe_get("/healthz").await, (200, "ok".into()));
    s.health.set_live(false);
    let (status, _, body) = s.get("/healthz", None).await;
    assert_eq!((status, body.as_str()), (503, "not live"));
    assert_eq!(s.probe_get("/healthz").await, (503, "not live".into()));
    s.stop().await;
}

fn ctype_text() -> String {
    "text/plain; charset=utf-8".into()
}

#[tokio::test]
async fn readyz_follows_readiness_with_a_reason() {
    let s = start().await;
    let (status, _, body) = s.get("/readyz", None).await;
    assert_eq!((status, body.as_str()), (503, "starting"));
    assert_eq!(s.probe_get("/readyz").await, (503, "starting".into()));
    s.health.set_ready(true);
    assert!(s.health.is_ready());
    let (status, _, body) = s.get("/readyz", None).await;
    assert_eq!((status, body.as_str()), (200, "ok"));
    assert_eq!(s.probe_get("/readyz").await, (200, "ok".into()));
    s.health.set_not_ready("caches not synced");
    let (status, _, body) = s.get("/readyz", None).await;
    assert_eq!((status, body.as_str()), (503, "caches not synced"));
    assert_eq!(
        s.probe_get("/readyz").await,
        (503, "caches not synced".into())
    );
    s.health.set_ready(false);
    assert!(!s.health.is_ready());
    let (status, _, body) = s.get("/readyz", None).await;
    assert_eq!((status, body.as_str()), (503, "not ready"));
    s.stop().await;
}

#[tokio::test]
async fn unknown_paths_and_methods_are_refused() {
    let s = start().await;
    assert_eq!(s.get("/nope", None).await.0, 404);
    let resp = s
        .client
        .post(format!("{}/metrics", s.base))
        .send()
        .await
        .expect("request");
    assert_eq!(resp.status().as_u16(), 405);
    s.stop().await;
}

#[tokio::test]
async fn bind_failure_names_the_address() {
    let taken = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = taken.local_addr().expect("local addr");
    let err = serve(addr, Metrics::new(), Health::new(), std::future::pending())
        .await
        .expect_err("address in use");
    assert_eq!(err.kind(), std::io::ErrorKind::AddrInUse);
    assert!(err.to_string().contains(&addr.to_string()), "{err}");
    let err = serve_probes(addr, Health::new(), std::future::pending())
        .await
        .expect_err("address in use");
    assert_eq!(err.kind(), std::io::ErrorKind::AddrInUse);
    assert!(err.to_string().contains(&addr.to_string()), "{err}");
    assert!(err.to_string().contains("probe server"), "{err}");
}

#[tokio::test]
async fn shutdown_stops_the_server() {
    let s = start().await;
    let bases = [s.base.clone(), s.probe_base.clone()];
    assert_eq!(s.get("/healthz", None).await.0, 200);
    assert_eq!(s.probe_get("/healthz").await.0, 200);
    s.stop().await;
    let fresh = http_client();
    for base in bases {
        assert!(fresh.get(format!("{base}/healthz")).send().await.is_err());
    }
}

#[test]
fn health_clones_share_state() {
    let h = Health::new();
    let other = h.clone();
    assert!(h.is_live());
    assert_eq!(h.not_ready_reason().as_deref(), Some("starting"));
    other.set_ready(true);
    other.set_live(false);
    assert!(h.is_ready());
    assert!(!h.is_live());
}

#[test]
fn accept_negotiation() {
    let cases: &[(Option<&str>, bool)] = &[
        (None, false),
        (Some(""), false),
        (Some("*/*"), false),
        (Some("text/plain"), false),
        (Some("text/html,application/xhtml+xml,*/*;q=0.8"), false),
        (Some(PROMETHEUS_ACCEPT), true),
        (Some("application/openmetrics-text"), true),
        (Some("Application/OpenMetrics-Text; version=1.0.0"), true),
        (Some("application/openmetrics-text;q=0"), false),
        (
            Some("application/openmetrics-text;q=0.3,text/plain;q=0.9"),
            false,
        ),
        (
            Some("text/plain;q=0.2, application/openmetrics-text;q=0.9"),
            true,
        ),
        (Some("application/openmetrics-text;q=bogus"), false),
    ];
    for (accept, expected) in cases {
        assert_eq!(wants_openmetrics(*accept), *expected, "{accept:?}");
    }
}

/// Hostile clients: every resource a client can hold is bounded.
#[path = "hostile_tests.rs"]
mod hostile;

/// The kubelet's probes under load from other clients.
#[path = "probe_tests.rs"]
mod probes;
