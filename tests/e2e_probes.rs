//! End-to-end: the kubelet's probes are answered on `--probe-addr` while hostile clients
//! hold every connection of the metrics port. Real `volmig` binary, the API test server
//! and the govmomi simulator; loopback only.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "test code: failures should panic"
)]

#[path = "support/e2e.rs"]
mod e2e;
#[path = "support/vcsim.rs"]
mod vcsim;

use std::time::{Duration, Instant};

use e2e::{Cluster, Daemon};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use vcsim::{Vcsim, VcsimOptions};

/// Hostile connections to the metrics port.
const HOSTILE: usize = 200;

/// Liveness probes sent one after the other.
const PROBES: usize = 10;

/// Time one probe may take: a third of the chart's 3 s probe timeout.
const PROBE_DEADLINE: Duration = Duration::from_secs(1);

/// What each hostile connection does once open, in turn: nothing; half a request line;
/// a complete keep-alive request whose response it never reads.
const HOLDS: [&[u8]; 3] = [
    b"",
    b"GET /metr",
    b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n",
];

/// One probe as the kubelet sends it, on a fresh connection: the status and the body, or
/// why there was none within [`PROBE_DEADLINE`].
async fn probe(addr: &str, path: &str) -> Result<(u16, String), String> {
    let exchange = async {
        let mut stream = TcpStream::connect(addr)
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_are_answered_while_hostile_clients_hold_the_metrics_port() {
    let sim = Vcsim::start(VcsimOptions::default().vmdks(1)).await;
    let cluster = Cluster::start().await;
    let mut daemon = Daemon::spawn(&cluster, &sim, "probes", &[]);
    daemon.wait_ready().await;

    // Once the metrics port's connection slots and listen backlog are full, a connect
    // waits until the daemon frees slots (their header deadline), as in a real flood.
    let mut held = Vec::with_capacity(HOSTILE);
    for i in 0..HOSTILE {
        let mut stream = TcpStream::connect(&daemon.http)
            .await
            .expect("a hostile connection");
        let _ = stream.write_all(HOLDS[i % HOLDS.len()]).await;
        held.push(stream);
    }

    for i in 0..PROBES {
        let started = Instant::now();
        let answer = probe(&daemon.probes, "/healthz").await;
        assert_eq!(
            answer,
            Ok((200, "ok".to_owned())),
            "liveness probe {i} of {PROBES} (after {:?}); log:\n{}",
            started.elapsed(),
            daemon.log_text()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        probe(&daemon.probes, "/readyz").await,
        Ok((200, "ok".to_owned())),
        "readiness probe"
    );
    // The probe port serves nothing else.
    assert_eq!(
        probe(&daemon.probes, "/metrics").await.map(|r| r.0),
        Ok(404)
    );

    drop(held);
    let status = daemon.terminate(Duration::from_secs(30)).await;
    assert!(
        status.success(),
        "exit {status:?}; log:\n{}",
        daemon.log_text()
    );
}
