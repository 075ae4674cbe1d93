//! A hostile vCenter (docs/security.md, "Hostile vCenter"): the govmomi simulator harness
//! answering with malformed, huge, absurdly nested, non-XML, redirecting, never-ending or
//! unknown-fault responses, or with a weak or misnamed certificate. Every case must end in a typed
//! `BackendError` naming what happened and where, in bounded time and memory, without a
//! panic, and never follow a redirect. One case runs through the real `volmig run`.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "test code: failures should panic"
)]

#[path = "support/e2e.rs"]
mod e2e;
#[path = "support/vcsim.rs"]
mod vcsim;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::io::AsyncReadExt;
use volmig::backend::cns::{CnsBackend, CnsConfig};
use volmig::backend::{BackendError, ErrorClass, VolumeBackend};

use e2e::{Cluster, Daemon, wait_for};
use vcsim::{Vcsim, VcsimOptions};

/// A configuration for `sim` that trusts its CA.
fn config(sim: &Vcsim, timeout: Duration) -> CnsConfig {
    let mut config = CnsConfig::new(
        sim.url.parse().unwrap(),
        sim.username.as_str(),
        sim.password.as_str(),
    );
    config.ca_file = sim.cert.clone();
    config.request_timeout = timeout;
    config
}

/// Connects (RetrieveServiceContent, Login, inventory) and expects an error.
async fn connect_err(sim: &Vcsim) -> BackendError {
    match CnsBackend::connect(config(sim, Duration::from_secs(20))).await {
        Ok(_) => panic!("connect to {} must fail", sim.url),
        Err(e) => e,
    }
}

async fn connect(sim: &Vcsim) -> CnsBackend {
    CnsBackend::connect(config(sim, Duration::from_secs(20)))
        .await
        .unwrap_or_else(|e| panic!("connect to {}: {e}", sim.url))
}

/// The peak resident memory of this process (VmHWM), in bytes.
fn peak_rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .expect("VmHWM in /proc/self/status");
    let kib: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .expect("VmHWM value");
    kib * 1024
}

/// A TCP listener that counts the connections it gets and the bytes sent to it (it never
/// answers): the "other host" of a redirect.
struct Trap {
    url: String,
    connections: Arc<AtomicUsize>,
    bytes: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Trap {
    async fn start() -> Trap {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let connections = Arc::new(AtomicUsize::new(0));
        let bytes = Arc::new(AtomicUsize::new(0));
        let (c, b) = (connections.clone(), bytes.clone());
        let task = tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                c.fetch_add(1, Ordering::SeqCst);
                let b = b.clone();
                tokio::spawn(async move {
                    let mut buf = [0u8; 4096];
                    while let Ok(n) = stream.read(&mut buf).await {
                        if n == 0 {
                            break;
                        }
                        b.fetch_add(n, Ordering::SeqCst);
                    }
                });
            }
        });
        Trap {
            url,
            connections,
            bytes,
            task,
        }
    }

    fn hits(&self) -> (usize, usize) {
        (
            self.connections.load(Ordering::SeqCst),
            self.bytes.load(Ordering::SeqCst),
        )
    }
}

impl Drop for Trap {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn assert_names_sdk(err: &BackendError, sim: &Vcsim) {
    assert!(
        err.message.contains(&sim.url),
        "the message names the endpoint {}: {err}",
        sim.url
    );
}

#[tokio::test]
async fn malformed_and_garbage_xml_are_invalid_responses_and_the_client_recovers() {
    let sim = Vcsim::start(VcsimOptions::default()).await;

    sim.set_hostile("malformed-xml", None).await;
    let err = connect_err(&sim).await;
    assert_eq!(err.fault, "InvalidResponse", "{err}");
    assert_eq!(err.operation, "RetrieveServiceContent");
    assert_eq!(err.class, ErrorClass::Transient);
    assert!(err.message.contains("truncated XML"), "{err}");
    assert_names_sdk(&err, &sim);

    sim.set_hostile("garbage-xml", None).await;
    let err = connect_err(&sim).await;
    assert_eq!(err.fault, "InvalidResponse", "{err}");
    assert!(err.message.contains("malformed XML"), "{err}");
    assert_names_sdk(&err, &sim);

    // Only the CNS endpoint misbehaves: the error names /vsanHealth.
    sim.set_hostile("malformed-xml", Some("CnsQueryVolume"))
        .await;
    let backend = connect(&sim).await;
    let err = backend.list_volumes(None).await.unwrap_err();
    assert_eq!(err.fault, "InvalidResponse", "{err}");
    assert!(err.message.contains("/vsanHealth"), "{err}");

    sim.clear_hostile().await;
    let page = backend.list_volumes(None).await.unwrap();
    assert!(page.volumes.is_empty());
}

#[tokio::test]
async fn a_100_mib_answer_is_cut_off_at_the_bound_with_bounded_memory() {
    let sim = Vcsim::start(VcsimOptions::default()).await;
    sim.set_hostile("huge-body", Some("RetrieveServiceContent"))
        .await;
    let before = peak_rss();
    let err = connect_err(&sim).await;
    let grown = peak_rss().saturating_sub(before);
    assert_eq!(err.fault, "ResponseTooLarge", "{err}");
    assert_eq!(err.operation, "RetrieveServiceContent");
    assert!(
        err.message
            .contains("more than 33554432 bytes (stopped reading there)"),
        "{err}"
    );
    assert_names_sdk(&err, &sim);
    // The body is streamed without Content-Length: reading stopped at 32 MiB (a Vec of at
    // most 32 MiB), never the 100 MiB sent.
    assert!(
        grown < 80 << 20,
        "peak memory grew by {} MiB reading a 100 MiB answer",
        grown >> 20
    );
    // Below the bound, the same stream is read to its end (and is then invalid XML).
    sim.set_hostile_size(1 << 20).await;
    let err = connect_err(&sim).await;
    assert_eq!(err.fault, "InvalidResponse", "{err}");
}

#[tokio::test]
async fn ten_thousand_nested_elements_are_refused_before_decoding() {
    let sim = Vcsim::start(VcsimOptions::default()).await;
    sim.set_hostile("deep-nesting", None).await;
    let err = connect_err(&sim).await;
    assert_eq!(err.fault, "InvalidResponse", "{err}");
    assert!(
        err.message.contains("XML nested deeper than 128 elements"),
        "{err}"
    );
    assert_names_sdk(&err, &sim);

    // 100 000 levels: still no stack overflow, the same answer.
    sim.set_hostile_depth(100_000).await;
    let err = connect_err(&sim).await;
    assert!(err.message.contains("deeper than 128"), "{err}");
}

#[tokio::test]
async fn an_html_login_page_is_an_unexpected_content_type() {
    let sim = Vcsim::start(VcsimOptions::default()).await;
    sim.set_hostile("html-login", None).await;
    let err = connect_err(&sim).await;
    assert_eq!(err.fault, "UnexpectedContentType", "{err}");
    assert!(
        err.message
            .contains("HTTP 200 with content type text/html; charset=utf-8"),
        "{err}"
    );
    assert!(err.message.contains("login page"), "{err}");
    assert_names_sdk(&err, &sim);
}

#[tokio::test]
async fn redirects_are_never_followed_and_nothing_reaches_the_other_host() {
    let sim = Vcsim::start(VcsimOptions::default()).await;
    let trap = Trap::start().await;

    // Login (the password in the body) answered with 307 and 302.
    for status in [307u16, 302] {
        sim.set_redirect(&trap.url, status).await;
        sim.set_hostile("redirect", Some("Login")).await;
        let err = connect_err(&sim).await;
        assert_eq!(err.fault, "HttpRedirect", "{err}");
        assert_eq!(err.operation, "Login");
        assert!(
            err.message.contains(&format!(
                "answered HTTP {status}, a redirect to {}/sdk",
                trap.url
            )),
            "{err}"
        );
        assert!(err.message.contains("does not follow redirects"), "{err}");
        assert!(!err.message.contains(&sim.password), "{err}");
    }

    // A call with the session cookie (CNS) answered with 307.
    sim.clear_hostile().await;
    let backend = connect(&sim).await;
    sim.set_hostile("redirect", Some("CnsQueryVolume")).await;
    let err = backend.list_volumes(None).await.unwrap_err();
    assert_eq!(err.fault, "HttpRedirect", "{err}");
    assert!(err.message.contains("/vsanHealth"), "{err}");

    // Give a (wrongly) followed request every chance to arrive before counting.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        trap.hits(),
        (0, 0),
        "the other host got (connections, bytes); no request may reach it"
    );
}

#[tokio::test]
async fn a_never_ending_answer_is_cut_off_by_the_request_timeout() {
    let sim = Vcsim::start(VcsimOptions::default()).await;
    sim.set_slowloris_interval(Duration::from_millis(500)).await;
    sim.set_hostile("slowloris", Some("RetrieveServiceContent"))
        .await;
    let started = Instant::now();
    let err = match CnsBackend::connect(config(&sim, Duration::from_secs(3))).await {
        Ok(_) => panic!("connect must time out"),
        Err(e) => e,
    };
    let took = started.elapsed();
    assert_eq!(err.fault, "Timeout", "{err}");
    assert_eq!(err.class, ErrorClass::Transient);
    assert!(err.message.contains("timed out after 3s"), "{err}");
    assert_names_sdk(&err, &sim);
    // Bounded by the request timeout, not by the answer (which would last 10 minutes).
    assert!(took >= Duration::from_secs(3), "{took:?}");
    assert!(took < Duration::from_secs(30), "{took:?}");
}

#[tokio::test]
async fn unknown_fault_types_keep_their_name_and_are_not_known_faults() {
    let sim = Vcsim::start(VcsimOptions::default()).await;
    sim.set_hostile("unknown-fault", Some("Login")).await;
    let err = connect_err(&sim).await;
    assert_eq!(err.fault, "VolmigHarnessUnknownFault", "{err}");
    assert_eq!(
        err.class,
        ErrorClass::Transient,
        "an unknown fault at login is no credential error: {err}"
    );
    assert!(
        err.message.contains("a fault type volmig does not know"),
        "{err}"
    );

    // A name that merely resembles a known fault is not that fault.
    sim.clear_hostile().await;
    let backend = connect(&sim).await;
    sim.set_unknown_fault_name("NotFoundInFutureRelease").await;
    sim.set_hostile("unknown-fault", Some("CnsQueryVolume"))
        .await;
    let err = backend.list_volumes(None).await.unwrap_err();
    assert_eq!(err.fault, "NotFoundInFutureRelease", "{err}");
    assert_eq!(err.class, ErrorClass::Transient, "{err}");
    assert_eq!(
        err.operation, "CnsQueryAllVolume",
        "volmig's name of the listing"
    );
}

#[tokio::test]
async fn a_1024_bit_rsa_certificate_is_refused_with_a_clear_message() {
    let sim = Vcsim::start(VcsimOptions::default()).await;
    sim.set_tls_cert("rsa1024").await;
    let err = connect_err(&sim).await;
    assert_eq!(err.fault, "TlsCertificate", "{err}");
    assert!(
        err.message.contains(
            "server certificate has a 1024-bit RSA key; volmig requires at least 2048 bits"
        ),
        "{err}"
    );
    assert_names_sdk(&err, &sim);

    // --vc-insecure skips trust, not the key check.
    let mut insecure = config(&sim, Duration::from_secs(20));
    insecure.ca_file = None;
    insecure.insecure = true;
    let err = match CnsBackend::connect(insecure).await {
        Ok(_) => panic!("a 1024-bit key must be refused with --vc-insecure too"),
        Err(e) => e,
    };
    assert_eq!(err.fault, "TlsCertificate", "{err}");
    assert!(err.message.contains("1024-bit RSA key"), "{err}");
}

#[tokio::test]
async fn a_certificate_for_another_name_is_refused_with_a_clear_message() {
    let sim = Vcsim::start(VcsimOptions::default()).await;
    sim.set_tls_cert("wrong-name").await;
    let err = connect_err(&sim).await;
    assert_eq!(err.fault, "TlsCertificate", "{err}");
    assert!(
        err.message.contains("not valid for name \"127.0.0.1\""),
        "{err}"
    );
    assert!(err.message.contains("vcenter.wrong-name.example"), "{err}");
    assert!(
        err.message.contains("issued for another host name"),
        "{err}"
    );
    assert_names_sdk(&err, &sim);
}

/// Through the real daemon: an unknown fault on the registration's first call ends up in the
/// VolumeMigration's `status.lastError` with its name, the daemon keeps running, and once
/// vCenter behaves again the volume is registered once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_reports_a_hostile_answer_in_the_status_and_recovers() {
    let sim = Vcsim::start(VcsimOptions::default().vmdks(1)).await;
    let cluster = Cluster::start().await;
    // QueryVirtualDiskUuid: the registration's first call (the full sync's listing and
    // a failed create would not name the path's object: the one stops the pass, the
    // other is "outcome unknown" and waits out its grace).
    sim.set_unknown_fault_name("HostileHarnessFault").await;
    sim.set_hostile("unknown-fault", Some("QueryVirtualDiskUuid"))
        .await;
    let path = sim.vmdk_path("kubevols", 1);
    cluster.create_pv("hostile-pv", &path).await;
    let mut daemon = Daemon::spawn(&cluster, &sim, "hostile", &[]);

    let last_error = wait_for(
        Duration::from_secs(60),
        "lastError naming the unknown fault",
        || async {
            let vm = cluster.migration(&path).await?;
            let err = vm.status?.last_error?;
            err.message.contains("HostileHarnessFault").then_some(err)
        },
    )
    .await;
    assert_eq!(last_error.reason, "BackendUnavailable", "{last_error:?}");
    assert!(
        last_error.message.contains("QueryVirtualDiskUuid"),
        "{last_error:?}"
    );
    assert!(
        daemon.log_text().contains("HostileHarnessFault"),
        "the daemon log names the fault"
    );
    assert!(
        daemon.exit_status().is_none(),
        "the daemon must keep running"
    );
    assert!(
        !daemon.log_text().contains("panicked"),
        "{}",
        daemon.log_text()
    );

    sim.clear_hostile().await;
    wait_for(Duration::from_secs(60), "the volume registered", || async {
        let vm = cluster.migration(&path).await?;
        e2e::volume_id(&vm)
    })
    .await;
    assert_eq!(sim.volumes_for(&path).await.len(), 1);
    let status = daemon.terminate(Duration::from_secs(30)).await;
    assert!(status.success(), "{status}");
}
