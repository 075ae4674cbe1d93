use std::time::Duration;

use tokio::sync::oneshot;

use super::*;
use crate::metrics::RegistrationResult;

struct Server {
    base: String,
    metrics: Metrics,
    health: Health,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
    client: reqwest::Client,
}

async fn start() -> Server {
    let metrics = Metrics::new();
    let health = Health::new();
    let (stop, stopped) = oneshot::channel::<()>();
    let addr: SocketAddr = "127.0.0.1:0".parse().expect("loopback address");
    let (bound, task) = serve(addr, metrics.clone(), health.clone(), async move {
        let _ = stopped.await;
    })
    .await
    .expect("bind 127.0.0.1:0");
    assert!(bound.ip().is_loopback());
    assert_ne!(bound.port(), 0);
    let client = http_client();
    Server {
        base: format!("http://{bound}"),
        metrics,
        health,
        stop: Some(stop),
        task,
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

    async fn stop(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        tokio::time::timeout(Duration::from_secs(10), self.task)
            .await
            .expect("server stops after shutdown")
            .expect("server task did not panic");
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
    s.health.set_live(false);
    let (status, _, body) = s.get("/healthz", None).await;
    assert_eq!((status, body.as_str()), (503, "not live"));
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
    s.health.set_ready(true);
    assert!(s.health.is_ready());
    let (status, _, body) = s.get("/readyz", None).await;
    assert_eq!((status, body.as_str()), (200, "ok"));
    s.health.set_not_ready("caches not synced");
    let (status, _, body) = s.get("/readyz", None).await;
    assert_eq!((status, body.as_str()), (503, "caches not synced"));
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
}

#[tokio::test]
async fn shutdown_stops_the_server() {
    let s = start().await;
    let base = s.base.clone();
    assert_eq!(s.get("/healthz", None).await.0, 200);
    s.stop().await;
    let fresh = http_client();
    assert!(fresh.get(format!("{base}/healthz")).send().await.is_err());
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

// ---- Hostile clients: every resource a client can hold is bounded. ----

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Generous upper bound for "the server closed the connection": far above every limit, so
/// only a server that never closes fails it.
const CLOSE_WAIT: Duration = Duration::from_secs(60);

async fn connect(s: &Server) -> TcpStream {
    let addr = s.base.trim_start_matches("http://");
    TcpStream::connect(addr).await.expect("connect")
}

/// Reads until the server closes the connection (EOF or reset) and returns what it sent;
/// panics when the connection is still open after [`CLOSE_WAIT`].
async fn read_until_closed(stream: &mut TcpStream) -> String {
    let mut received = Vec::new();
    let result = tokio::time::timeout(CLOSE_WAIT, async {
        let mut buf = [0_u8; 8192];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => received.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    assert!(
        result.is_ok(),
        "the server kept the connection open for {CLOSE_WAIT:?}; got {:?}",
        String::from_utf8_lossy(&received)
    );
    String::from_utf8_lossy(&received).into_owned()
}

/// Sends `head` (and `body`), then reads the response until the server closes.
async fn raw_exchange(s: &Server, head: &str, body: &[u8]) -> String {
    let mut stream = connect(s).await;
    stream.write_all(head.as_bytes()).await.expect("send head");
    // The server may answer and close before reading the body: a failed write is fine.
    let _ = stream.write_all(body).await;
    read_until_closed(&mut stream).await
}

fn status_line(response: &str) -> &str {
    response.lines().next().unwrap_or("")
}

#[tokio::test]
async fn a_declared_huge_body_is_refused_with_413() {
    let s = start().await;
    let head = "GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 1073741824\r\n\
                Connection: close\r\n\r\n";
    let response = raw_exchange(&s, head, &[b'a'; 64 * 1024]).await;
    assert!(
        status_line(&response).starts_with("HTTP/1.1 413"),
        "{response}"
    );
    // Just over the limit is refused too, just under it is served.
    let over = format!(
        "GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        MAX_BODY_BYTES + 1
    );
    let response = raw_exchange(&s, &over, &vec![b'a'; MAX_BODY_BYTES + 1]).await;
    assert!(
        status_line(&response).starts_with("HTTP/1.1 413"),
        "{response}"
    );
    let under = format!(
        "GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: {MAX_BODY_BYTES}\r\nConnection: close\r\n\r\n"
    );
    let response = raw_exchange(&s, &under, &vec![b'a'; MAX_BODY_BYTES]).await;
    assert!(
        status_line(&response).starts_with("HTTP/1.1 200"),
        "{response}"
    );
    // Through a real client as well.
    let resp = s
        .client
        .get(format!("{}/metrics", s.base))
        .body(vec![b'x'; 1024 * 1024])
        .send()
        .await;
    if let Ok(resp) = resp {
        assert_eq!(resp.status().as_u16(), 413);
    }
    s.stop().await;
}

#[tokio::test]
async fn an_endless_chunked_body_does_not_hold_the_connection() {
    let s = start().await;
    let mut stream = connect(&s).await;
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n")
        .await
        .expect("send head");
    // Keep sending chunks while reading; the server must end the connection.
    let (mut reader, mut writer) = stream.into_split();
    let feeder = tokio::spawn(async move {
        loop {
            if writer.write_all(b"400\r\n").await.is_err()
                || writer.write_all(&[b'a'; 0x400]).await.is_err()
                || writer.write_all(b"\r\n").await.is_err()
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    let mut received = Vec::new();
    let closed = tokio::time::timeout(CLOSE_WAIT, async {
        let mut buf = [0_u8; 8192];
        loop {
            match reader.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => received.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    feeder.abort();
    assert!(closed.is_ok(), "the server kept an endless body open");
    let response = String::from_utf8_lossy(&received);
    assert!(
        status_line(&response).starts_with("HTTP/1.1 "),
        "an answer before the close: {response}"
    );
    s.stop().await;
}

#[tokio::test]
async fn huge_headers_are_refused_with_431() {
    let s = start().await;
    let one_huge = format!(
        "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: {}\r\n\r\n",
        "a".repeat(MAX_HEADER_BYTES + 1)
    );
    let response = raw_exchange(&s, &one_huge, b"").await;
    assert!(
        status_line(&response).starts_with("HTTP/1.1 431"),
        "{response}"
    );
    let endless_head = format!(
        "GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: {}",
        "a".repeat(1024 * 1024)
    );
    let response = raw_exchange(&s, &endless_head, b"").await;
    assert!(
        response.is_empty() || status_line(&response).starts_with("HTTP/1.1 431"),
        "{response}"
    );
    let many: String = (0..=MAX_HEADERS)
        .map(|i| format!("X-H{i}: v\r\n"))
        .collect();
    let response = raw_exchange(
        &s,
        &format!("GET /healthz HTTP/1.1\r\nHost: x\r\n{many}\r\n"),
        b"",
    )
    .await;
    assert!(
        status_line(&response).starts_with("HTTP/1.1 431"),
        "{response}"
    );
    // A long request line counts against the same limit.
    let long_uri = format!(
        "GET /metrics?{} HTTP/1.1\r\nHost: x\r\n\r\n",
        "q".repeat(MAX_HEADER_BYTES + 1)
    );
    let response = raw_exchange(&s, &long_uri, b"").await;
    assert!(
        response.is_empty()
            || status_line(&response).starts_with("HTTP/1.1 431")
            || status_line(&response).starts_with("HTTP/1.1 414"),
        "{response}"
    );
    s.stop().await;
}

#[tokio::test]
async fn half_a_request_line_then_silence_is_disconnected() {
    let s = start().await;
    let mut stream = connect(&s).await;
    stream.write_all(b"GET /metr").await.expect("send");
    let response = read_until_closed(&mut stream).await;
    assert!(!response.contains("200 OK"), "{response}");
    s.stop().await;
}

#[tokio::test]
async fn a_silent_connection_is_disconnected() {
    let s = start().await;
    let mut stream = connect(&s).await;
    let response = read_until_closed(&mut stream).await;
    assert!(!response.contains("200 OK"), "{response}");
    s.stop().await;
}

#[tokio::test]
async fn headers_trickled_byte_by_byte_are_disconnected() {
    let s = start().await;
    let stream = connect(&s).await;
    let (mut reader, mut writer) = stream.into_split();
    writer
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        .await
        .expect("send");
    // One byte every 200 ms: each read makes progress, the head never completes.
    let trickle = tokio::spawn(async move {
        while writer.write_all(b"a").await.is_ok() {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    });
    let closed = tokio::time::timeout(CLOSE_WAIT, async {
        let mut buf = [0_u8; 1024];
        loop {
            match reader.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
    })
    .await;
    trickle.abort();
    assert!(closed.is_ok(), "a trickling client held the connection");
    s.stop().await;
}

#[tokio::test]
async fn an_idle_keep_alive_connection_is_closed() {
    let s = start().await;
    let mut stream = connect(&s).await;
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .expect("send");
    let response = read_until_closed(&mut stream).await;
    assert!(
        status_line(&response).starts_with("HTTP/1.1 200"),
        "{response}"
    );
    assert!(response.ends_with("ok"), "{response}");
    s.stop().await;
}

#[tokio::test]
async fn connections_beyond_the_cap_wait_for_a_free_slot() {
    let s = start().await;
    let mut held = Vec::new();
    for _ in 0..MAX_CONNECTIONS {
        held.push(connect(&s).await);
    }
    let client = s.client.clone();
    let url = format!("{}/healthz", s.base);
    let extra = tokio::spawn(async move { client.get(url).send().await.map(|r| r.status()) });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !extra.is_finished(),
        "a request beyond {MAX_CONNECTIONS} open connections was served at once"
    );
    drop(held);
    let status = tokio::time::timeout(CLOSE_WAIT, extra)
        .await
        .expect("served once connections closed")
        .expect("task")
        .expect("request");
    assert_eq!(status.as_u16(), 200);
    s.stop().await;
}

#[tokio::test]
async fn a_slow_handler_is_answered_408() {
    let routes = bounded(Router::new().route(
        "/slow",
        get(|| async {
            tokio::time::sleep(REQUEST_TIMEOUT * 10).await;
            "late"
        }),
    ));
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(serve_routes(listener, routes, async move {
        let _ = stopped.await;
    }));
    let resp = tokio::time::timeout(
        CLOSE_WAIT,
        http_client().get(format!("http://{addr}/slow")).send(),
    )
    .await
    .expect("answered within the wait")
    .expect("request");
    assert_eq!(resp.status().as_u16(), 408);
    let _ = stop.send(());
    tokio::time::timeout(CLOSE_WAIT, task)
        .await
        .expect("server stops")
        .expect("no panic");
}

#[tokio::test]
async fn keep_alive_requests_are_still_served() {
    let s = start().await;
    for _ in 0..5 {
        assert_eq!(s.get("/healthz", None).await.0, 200);
        assert_eq!(s.get("/metrics", None).await.0, 200);
    }
    s.stop().await;
}
