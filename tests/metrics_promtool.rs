//! `/metrics` as served over HTTP passes the real `promtool check metrics` (Debian package
//! `prometheus`, installed by `make deps`), and its OpenMetrics answer carries the same
//! samples. The chart's alerts pass `promtool check rules` and `promtool test rules`, and
//! every metric the alerts, their unit tests and the Grafana dashboard name is one a running
//! `volmig run` exports.

#![allow(
    clippy::expect_used,
    reason = "test helpers: a failed expectation is a test failure"
)]

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::Duration;

#[path = "support/e2e.rs"]
mod e2e;
// support/e2e.rs may load the same helpers as its own submodule; this copy is the one
// this crate's tests use.
#[allow(
    clippy::duplicate_mod,
    reason = "shared helpers; this crate uses a few"
)]
#[path = "support/helm.rs"]
mod helm;
#[path = "metrics_promtool/monitoring.rs"]
mod monitoring;
#[path = "metrics_promtool/promql.rs"]
mod promql;
#[path = "support/vcsim.rs"]
mod vcsim;

use volmig::backend::op;
use volmig::http::{self, Health, OPENMETRICS_CONTENT_TYPE, PROMETHEUS_TEXT_CONTENT_TYPE};
use volmig::metrics::{BackendResult, Metrics, RegistrationResult, SyncAction};
use volmig::volume_migration::Phase;

/// A Metrics that has seen activity in every family and every closed label value.
fn busy_metrics() -> Metrics {
    let m = Metrics::new();
    for (i, &result) in RegistrationResult::ALL.iter().enumerate() {
        m.registration(result, Duration::from_millis(15 * (i as u64 + 1)));
    }
    m.set_volumes_by_phase(&[
        (Phase::Pending, 3),
        (Phase::Registering, 1),
        (Phase::Registered, 40),
        (Phase::Failed, 2),
    ]);
    m.full_sync_pass(Duration::from_millis(1500), true);
    m.full_sync_pass(Duration::from_millis(200), false);
    for (i, &action) in SyncAction::ALL.iter().enumerate() {
        m.full_sync_action(action, i as u64 + 1);
    }
    m.set_duplicate_volumes(1);
    m.set_orphan_volumes(2);
    for operation in [op::DISK_UUID, op::FIND, op::CREATE, op::DELETE, op::LIST] {
        for &result in BackendResult::ALL {
            m.backend_request(operation, result, Duration::from_millis(12));
        }
    }
    m.set_leader(true);
    m.set_pvs_tracked(46);
    m
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

fn promtool() -> &'static str {
    let found = Command::new("promtool")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        found,
        "promtool not found on PATH: run `make deps` (installs the Debian package `prometheus`)"
    );
    "promtool"
}

/// Runs `promtool check metrics` on `exposition`; returns (success, stdout + stderr).
fn check_metrics(exposition: &str) -> (bool, String) {
    let mut child = Command::new(promtool())
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn promtool");
    child
        .stdin
        .take()
        .expect("stdin piped")
        .write_all(exposition.as_bytes())
        .expect("write to promtool");
    let out = child.wait_with_output().expect("wait for promtool");
    let mut report = String::from_utf8_lossy(&out.stdout).into_owned();
    report.push_str(&String::from_utf8_lossy(&out.stderr));
    (out.status.success(), report)
}

async fn fetch(client: &reqwest::Client, url: &str, accept: Option<&str>) -> (String, String) {
    let mut req = client.get(url);
    if let Some(accept) = accept {
        req = req.header("accept", accept);
    }
    let resp = req.send().await.expect("GET /metrics");
    assert_eq!(resp.status().as_u16(), 200);
    let ctype = resp
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    (ctype, resp.text().await.expect("body"))
}

/// One sample, normalised across the two formats: metric name, labels sorted by name with
/// `le` bounds as numbers (`1` vs `1.0`), and the value.
type Sample = (String, BTreeMap<String, String>, String);

fn samples(body: &str) -> BTreeSet<Sample> {
    body.lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| parse_sample(l).unwrap_or_else(|| panic!("unparsable sample line {l:?}")))
        .collect()
}

fn parse_sample(line: &str) -> Option<Sample> {
    let (series, value) = line.rsplit_once(' ')?;
    let value = value.parse::<f64>().ok()?.to_string();
    let Some((name, rest)) = series.split_once('{') else {
        return Some((series.to_owned(), BTreeMap::new(), value));
    };
    let mut labels = BTreeMap::new();
    let mut rest = rest.strip_suffix('}')?;
    while !rest.is_empty() {
        let (key, after) = rest.split_once("=\"")?;
        let mut val = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            match chars.next()? {
                (_, '\\') => val.push(chars.next()?.1),
                (i, '"') => break i,
                (_, c) => val.push(c),
            }
        };
        if key == "le" {
            val = val.parse::<f64>().ok()?.to_string();
        }
        labels.insert(key.to_owned(), val);
        rest = after[end + 1..].trim_start_matches(',');
    }
    Some((name.to_owned(), labels, value))
}

#[tokio::test]
async fn served_metrics_pass_promtool() {
    let metrics = busy_metrics();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let addr: SocketAddr = "127.0.0.1:0".parse().expect("addr");
    let (bound, task) = http::serve(addr, metrics.clone(), Health::new(), async move {
        let _ = stopped.await;
    })
    .await
    .expect("start HTTP server");
    let client = http_client();
    let url = format!("http://{bound}/metrics");

    let (ctype, text) = fetch(&client, &url, None).await;
    assert_eq!(ctype, PROMETHEUS_TEXT_CONTENT_TYPE);
    let (ctype, openmetrics) = fetch(
        &client,
        &url,
        Some("application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"),
    )
    .await;
    assert_eq!(ctype, OPENMETRICS_CONTENT_TYPE);
    assert!(openmetrics.ends_with("# EOF\n"));

    // Every family is present with non-trivial content.
    for family in [
        "volmig_registrations_total{result=\"invalid_path\"} 1",
        "volmig_registration_duration_seconds_count 5",
        "volmig_volumes{phase=\"Registered\"} 40",
        "volmig_full_sync_duration_seconds_count 2",
        "volmig_full_sync_actions_total{action=\"delete_migration\"} 8",
        "volmig_full_sync_passes_total{result=\"failed\"} 1",
        "volmig_duplicate_volumes 1",
        "volmig_orphan_volumes 2",
        "volmig_backend_requests_total{operation=\"CnsCreateVolume\",result=\"not_authenticated\"} 1",
        "volmig_backend_request_duration_seconds_count{operation=\"CnsQueryAllVolume\"} 5",
        "volmig_leader 1",
        "volmig_pvs_tracked 46",
    ] {
        assert!(text.contains(family), "missing `{family}` in:\n{text}");
        assert!(
            openmetrics.contains(family),
            "missing `{family}` in:\n{openmetrics}"
        );
    }

    // promtool lints the Prometheus text format, which is what a client gets unless it asks
    // for OpenMetrics: it must pass with no findings at all.
    let (ok, report) = check_metrics(&text);
    println!("promtool check metrics on the text format: ok={ok}, findings={report:?}");
    assert!(
        ok,
        "promtool rejected the exposition:\n{report}\n---\n{text}"
    );
    assert!(
        report.trim().is_empty(),
        "promtool lint findings:\n{report}\n---\n{text}"
    );

    // promtool cannot lint OpenMetrics (it reads OpenMetrics counter families as lacking help
    // text), so the OpenMetrics answer is held to carrying exactly the samples promtool just
    // accepted: the two formats differ in metadata lines only.
    // The process_* samples are read from /proc at each scrape and differ between the two.
    let volmig_only = |body: &str| -> BTreeSet<Sample> {
        samples(body)
            .into_iter()
            .filter(|(name, _, _)| !name.starts_with("process_"))
            .collect()
    };
    let (from_text, from_openmetrics) = (volmig_only(&text), volmig_only(&openmetrics));
    assert!(from_text.len() > 100, "{from_text:?}");
    assert_eq!(from_text, from_openmetrics);
    println!(
        "the OpenMetrics answer carries the same {} samples",
        from_text.len()
    );

    stop.send(()).expect("server still running");
    task.await.expect("server task");
}

#[test]
fn promtool_catches_a_bad_exposition() {
    // Guards the test above against a promtool that accepts anything.
    let (ok, report) = check_metrics(
        "# HELP volmig_bad A counter without the _total suffix\n# TYPE volmig_bad counter\n\
         volmig_bad 1\n",
    );
    let lint_or_error = !ok || !report.trim().is_empty();
    assert!(
        lint_or_error,
        "promtool accepted a lint-worthy exposition: {report}"
    );
}
