//! Hostile clients of the HTTP endpoints: every resource a client can hold is bounded.

use super::*;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
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
async fn read_until_closed<R: AsyncRead + Unpin>(stream: &mut R) -> String {
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
    let response = read_until_closed(&mut reader).await;
    feeder.abort();
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
