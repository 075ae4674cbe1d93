//! The kubelet's probes are answered within their timeout whatever other clients do.

use std::net::{IpAddr, Ipv4Addr};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

use super::*;

/// Hostile connections each load test opens.
const HOSTILE: usize = 200;

/// Probes each load test sends, one after the other.
const PROBES: usize = 10;

/// Time one probe may take: a third of the chart's 3 s probe timeout.
const PROBE_DEADLINE: Duration = Duration::from_secs(1);

/// Where the probes come from (the kubelet).
const KUBELET: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

/// Another address of the loopback network: a hostile pod.
const HOSTILE_PEER: IpAddr = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));

/// `host:port` of an `http://host:port` base URL.
fn host_port(base: &str) -> &str {
    base.trim_start_matches("http://")
}

/// A connection to `addr` from the loopback address `source`.
async fn connect_from(source: IpAddr, addr: &str) -> std::io::Result<TcpStream> {
    let addr: SocketAddr = addr.parse().expect("a socket address");
    let socket = TcpSocket::new_v4()?;
    socket.bind(SocketAddr::new(source, 0))?;
    socket.connect(addr).await
}

/// What each hostile connection does once open, in turn: nothing; half a request line;
/// a complete keep-alive request whose response it never reads.
const HOLDS: [&[u8]; 3] = [
    b"",
    b"GET /metr",
    b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n",
];

/// Opens [`HOSTILE`] connections from `source` to `addr` and keeps them open, never
/// reading. The server may close some at once: their writes may fail. On the metrics
/// port, once its connection slots and listen backlog are full, a connect waits until
/// the server frees slots (at their header deadline), as in a real flood.
async fn hostile_connections(source: IpAddr, addr: &str) -> Vec<TcpStream> {
    let mut held = Vec::with_capacity(HOSTILE);
    for i in 0..HOSTILE {
        let mut stream = connect_from(source, addr)
            .await
            .expect("a hostile connection");
        let _ = stream.write_all(HOLDS[i % HOLDS.len()]).await;
        held.push(stream);
    }
    held
}

/// One probe as the kubelet sends it, on a fresh connection from `source`: the status and
/// the body, or why there was none within [`PROBE_DEADLINE`].
async fn probe(source: IpAddr, addr: &str, path: &str) -> Result<(u16, String), String> {
    let exchange = async {
        let mut stream = connect_from(source, addr)
            .await
            .map_err(|e| format!("connect: {e}"))?;
        let request = format!(
            "GET {path} HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: kube-probe/1.33\r\n\
             Accept: */*\r\nConnection: close\r\n\r\n"
        );
        stream
            .write_all(request.as_bytes())
            .await
            .map_err(|e| format!("send: {e}"))?;
        let mut response = Vec::new();
        stream
            .read_to_end(&mut response)
            .await
            .map_err(|e| format!("read: {e}"))?;
        let response = String::from_utf8_lossy(&response).into_owned();
        let (head, body) = response
            .split_once("\r\n\r\n")
            .ok_or_else(|| format!("no complete response: {response:?}"))?;
        let status = head
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| format!("no status: {head:?}"))?;
        Ok((status, body.to_owned()))
    };
    tokio::time::timeout(PROBE_DEADLINE, exchange)
        .await
        .map_err(|_| format!("no answer within {PROBE_DEADLINE:?}"))?
}

/// [`PROBES`] liveness probes in a row, each answered 200 "ok" within [`PROBE_DEADLINE`].
async fn assert_probes_answered(s: &Server) {
    let addr = host_port(&s.probe_base);
    for i in 0..PROBES {
        let started = std::time::Instant::now();
        let answer = probe(KUBELET, addr, "/healthz").await;
        assert_eq!(
            answer,
            Ok((200, "ok".to_owned())),
            "liveness probe {i} of {PROBES} (after {:?})",
            started.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let answer = probe(KUBELET, addr, "/readyz").await;
    assert_eq!(answer, Ok((503, "starting".to_owned())), "readiness probe");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_are_answered_while_200_hostile_clients_hold_the_metrics_port() {
    let s = start().await;
    let held = hostile_connections(HOSTILE_PEER, host_port(&s.base)).await;
    assert_probes_answered(&s).await;
    drop(held);
    s.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_are_answered_while_one_peer_floods_the_probe_port() {
    let s = start().await;
    let held = hostile_connections(HOSTILE_PEER, host_port(&s.probe_base)).await;
    assert_probes_answered(&s).await;
    drop(held);
    s.stop().await;
}

/// How long until the server closes `stream` (EOF or reset), reading and discarding what
/// it sends; `None` when it is still open after `wait`.
async fn closed_within(stream: &mut TcpStream, wait: Duration) -> Option<Duration> {
    let started = std::time::Instant::now();
    let closed = tokio::time::timeout(wait, async {
        let mut buf = [0_u8; 1024];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
    })
    .await;
    closed.ok().map(|()| started.elapsed())
}

#[tokio::test]
async fn the_probe_port_serves_only_the_probes_one_per_connection() {
    let s = start().await;
    let addr = host_port(&s.probe_base);
    assert_eq!(s.probe_get("/metrics").await.0, 404);
    // A keep-alive request is answered, then the connection is closed.
    let mut stream = connect_from(KUBELET, addr).await.expect("connect");
    stream
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .expect("send");
    let mut response = Vec::new();
    tokio::time::timeout(PROBE_DEADLINE, stream.read_to_end(&mut response))
        .await
        .expect("answered and closed at once")
        .expect("read");
    let response = String::from_utf8_lossy(&response);
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    assert!(
        response.to_ascii_lowercase().contains("connection: close"),
        "{response}"
    );
    s.stop().await;
}

#[tokio::test]
async fn a_silent_or_half_sent_probe_connection_is_closed_at_the_header_deadline() {
    let s = start().await;
    let addr = host_port(&s.probe_base);
    let wait = PROBE_HEADER_READ_TIMEOUT + Duration::from_secs(2);
    let mut silent = connect_from(HOSTILE_PEER, addr).await.expect("connect");
    let mut half = connect_from(HOSTILE_PEER, addr).await.expect("connect");
    half.write_all(b"GET /heal").await.expect("send");
    for (what, stream) in [("silent", &mut silent), ("half a request line", &mut half)] {
        let closed = closed_within(stream, wait).await;
        assert!(closed.is_some(), "{what}: still open after {wait:?}");
    }
    s.stop().await;
}

#[tokio::test]
async fn connections_over_a_peers_cap_are_closed_at_once() {
    let s = start().await;
    let addr = host_port(&s.probe_base);
    let mut held = Vec::new();
    for _ in 0..PROBE_MAX_CONNECTIONS_PER_PEER {
        held.push(connect_from(HOSTILE_PEER, addr).await.expect("connect"));
    }
    let mut over = connect_from(HOSTILE_PEER, addr).await.expect("connect");
    let closed = closed_within(&mut over, PROBE_DEADLINE).await;
    assert!(
        closed.is_some(),
        "connection {} of one peer was not closed at once",
        PROBE_MAX_CONNECTIONS_PER_PEER + 1
    );
    // The peer's first connections are still open (until their header deadline), and the
    // kubelet is served meanwhile.
    let first = held.first_mut().expect("held connections");
    assert!(
        closed_within(first, Duration::from_millis(200))
            .await
            .is_none(),
        "a connection under the cap was closed at once"
    );
    assert_eq!(
        probe(KUBELET, addr, "/healthz").await,
        Ok((200, "ok".to_owned()))
    );
    drop(held);
    s.stop().await;
}
