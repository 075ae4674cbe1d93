//! The chart's PrometheusRule and Grafana dashboard against the real promtool and a
//! running `volmig run`.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde_json::Value;

use crate::e2e::{Cluster, Daemon, wait_for};
use crate::helm::{describe, read_repo_file, render, run};
use crate::promql::{Exposition, Selector, exposition, selectors};
use crate::vcsim::{Vcsim, VcsimOptions};
use crate::{check_metrics, promtool};

/// The `promtool test rules` cases of the chart's alerts.
const ALERTS_TEST: &str = "tests/metrics_promtool/alerts-test.yaml";
/// Labels Prometheus attaches to a scrape target, not volmig.
const TARGET_LABELS: &[&str] = &[
    "job",
    "namespace",
    "pod",
    "instance",
    "service",
    "endpoint",
    "container",
];
/// The rules in the chart's PrometheusRule.
const ALERTS: &[&str] = &[
    "VolmigNoLeader",
    "VolmigMultipleLeaders",
    "VolmigRegistrationsFailing",
    "VolmigVolumesFailed",
    "VolmigFullSyncStale",
    "VolmigDuplicateVolumes",
    "VolmigBackendErrors",
    "VolmigDriverObjectsMissing",
    "VolmigRegistrarModeUnknown",
];

/// The `spec` of the chart's PrometheusRule, rendered by helm with `extra` values.
fn rules_spec(extra: &[&str]) -> Value {
    let mut args = vec!["--set", "prometheusRule.enabled=true"];
    args.extend_from_slice(extra);
    let rendered = render(&args);
    rendered.get("PrometheusRule", "volmig")["spec"].clone()
}

/// Every alerting expression of a rules spec, by alert name.
fn rule_exprs(spec: &Value) -> Vec<(String, String)> {
    spec["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .flat_map(|g| g["rules"].as_array().expect("rules").iter())
        .map(|r| {
            (
                r["alert"].as_str().expect("alert name").to_owned(),
                r["expr"].as_str().expect("expr").to_owned(),
            )
        })
        .collect()
}

/// Writes `spec` as `rules.yaml` (JSON is YAML) and the unit tests beside it. The unit
/// tests compare every annotation of a firing alert, so the long `description` texts and
/// the `runbook_url`s (checked against docs/operations.md by tests/helm_chart.rs) are left
/// out of the copy they run against; `promtool check rules` checks the full rules.
fn write_rules_and_tests(dir: &Path, spec: &Value) {
    let mut spec = spec.clone();
    for group in spec["groups"].as_array_mut().expect("groups") {
        for rule in group["rules"].as_array_mut().expect("rules") {
            if let Some(annotations) = rule["annotations"].as_object_mut() {
                annotations.remove("description");
                annotations.remove("runbook_url");
            }
        }
    }
    std::fs::write(dir.join("rules.yaml"), spec.to_string()).expect("write rules.yaml");
    std::fs::write(dir.join("alerts-test.yaml"), read_repo_file(ALERTS_TEST))
        .expect("write the unit tests");
}

fn promtool_rules(args: &[&str], file: &Path) -> (bool, String) {
    let output = run(Command::new(promtool()).args(args).arg(file));
    (output.status.success(), describe(&output))
}

#[test]
fn chart_alerts_pass_promtool_check_and_unit_tests() {
    let spec = rules_spec(&[]);
    let names: Vec<String> = rule_exprs(&spec).into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ALERTS, "the chart's alerts");

    let dir = tempfile::tempdir().expect("tempdir");
    let full = dir.path().join("full-rules.yaml");
    std::fs::write(&full, spec.to_string()).expect("write rules");
    let (ok, text) = promtool_rules(&["check", "rules"], &full);
    assert!(ok, "promtool check rules: {text}");
    assert!(
        text.contains(&format!("SUCCESS: {} rules found", ALERTS.len())),
        "{text}"
    );

    write_rules_and_tests(dir.path(), &spec);
    let tests = dir.path().join("alerts-test.yaml");
    let (ok, text) = promtool_rules(&["test", "rules"], &tests);
    assert!(ok, "promtool test rules: {text}");
    assert!(text.contains("SUCCESS"), "{text}");
    // Every alert is expected to fire in some case of the unit tests, and to stay quiet
    // in another.
    let cases: Value =
        serde_saphyr::from_str(&read_repo_file(ALERTS_TEST)).expect("alerts-test.yaml");
    let expectations: Vec<(String, bool)> = cases["tests"]
        .as_array()
        .expect("tests")
        .iter()
        .flat_map(|c| c["alert_rule_test"].as_array().expect("alert_rule_test"))
        .map(|t| {
            let fires = t["exp_alerts"].as_array().is_some_and(|a| !a.is_empty());
            (
                t["alertname"].as_str().expect("alertname").to_owned(),
                fires,
            )
        })
        .collect();
    for alert in ALERTS {
        for fires in [true, false] {
            assert!(
                expectations.contains(&((*alert).to_owned(), fires)),
                "no unit test expects {alert} {}",
                if fires { "to fire" } else { "to stay quiet" }
            );
        }
    }
}

#[test]
fn alert_unit_tests_follow_the_rendered_thresholds() {
    // Guards the test above against unit tests that pass whatever the rules say: with
    // other values the same cases must fail, naming the alert whose threshold moved.
    for (set, alert) in [
        (
            "prometheusRule.backendErrorRatio=0.5",
            "VolmigBackendErrors",
        ),
        ("fullSyncInterval=20m", "VolmigFullSyncStale"),
        ("fullSyncInterval=20m", "VolmigDriverObjectsMissing"),
        (
            "prometheusRule.selector=job=\"elsewhere\"",
            "VolmigNoLeader",
        ),
    ] {
        let flag = if set.contains('"') {
            "--set-string"
        } else {
            "--set"
        };
        let spec = rules_spec(&[flag, set]);
        let dir = tempfile::tempdir().expect("tempdir");
        write_rules_and_tests(dir.path(), &spec);
        let (ok, text) = promtool_rules(&["test", "rules"], &dir.path().join("alerts-test.yaml"));
        assert!(!ok, "{set}: promtool test rules still passes: {text}");
        assert!(
            text.contains(&format!("alertname: {alert}")),
            "{set}: {alert} not among the failures: {text}"
        );
    }
    // The interval reaches the rules in seconds, from any --full-sync-interval spelling.
    let spec = rules_spec(&["--set", "fullSyncInterval=1h30m"]);
    let exprs = rule_exprs(&spec);
    let stale = &exprs
        .iter()
        .find(|(n, _)| n == "VolmigFullSyncStale")
        .expect("stale alert")
        .1;
    assert!(stale.contains("> 16200"), "3 x 5400 s: {stale}");
}

#[test]
fn a_dry_run_release_has_no_leader_alerts_and_its_rules_pass_promtool() {
    // A dry run takes no Lease: every replica reports volmig_leader 0, so the leader alerts
    // would fire for ever; it follows no syncer Lease either (no registrar mode). The
    // remaining rules still pass promtool.
    let spec = rules_spec(&["--set", "dryRun=true"]);
    let names: Vec<String> = rule_exprs(&spec).into_iter().map(|(n, _)| n).collect();
    let expected: Vec<&str> = ALERTS
        .iter()
        .copied()
        .filter(|a| {
            ![
                "VolmigNoLeader",
                "VolmigMultipleLeaders",
                "VolmigRegistrarModeUnknown",
            ]
            .contains(a)
        })
        .collect();
    assert_eq!(names, expected, "the dry run's alerts");
    for (name, expr) in rule_exprs(&spec) {
        assert!(!expr.contains("volmig_leader"), "{name}: {expr}");
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("rules.yaml");
    std::fs::write(&file, spec.to_string()).expect("write rules");
    let (ok, text) = promtool_rules(&["check", "rules"], &file);
    assert!(ok, "promtool check rules: {text}");
    assert!(
        text.contains(&format!("SUCCESS: {} rules found", expected.len())),
        "{text}"
    );
}

/// Closed label value sets volmig declares, for values a short run may not produce.
fn declared_values(metric: &str, label: &str) -> Vec<String> {
    use volmig::backend::op;
    use volmig::metrics::{BackendResult, RegistrationResult};
    match (metric, label) {
        (m, "result") if m.starts_with("volmig_backend_request") => BackendResult::ALL
            .iter()
            .map(|r| r.as_str().to_owned())
            .collect(),
        ("volmig_registrations_total", "result") => RegistrationResult::ALL
            .iter()
            .map(|r| r.as_str().to_owned())
            .collect(),
        (m, "operation") if m.starts_with("volmig_backend_request") => {
            [op::DISK_UUID, op::FIND, op::CREATE, op::DELETE, op::LIST]
                .iter()
                .map(|o| (*o).to_owned())
                .collect()
        }
        _ => Vec::new(),
    }
}

/// What is wrong with `selector` against the exposition of a running daemon: an unknown
/// metric, a label the metric does not carry, or a label value it never takes.
fn problems(selector: &Selector, exp: &Exposition, origin: &str) -> Vec<String> {
    let Some(labels) = exp.get(&selector.metric) else {
        return vec![format!(
            "{origin}: volmig exports no metric {}",
            selector.metric
        )];
    };
    let mut out = Vec::new();
    for m in &selector.matchers {
        if TARGET_LABELS.contains(&m.name.as_str()) {
            continue;
        }
        let Some(values) = labels.get(&m.name) else {
            out.push(format!(
                "{origin}: {} has no label {}",
                selector.metric, m.name
            ));
            continue;
        };
        let declared = declared_values(&selector.metric, &m.name);
        let known = |v: &str| values.contains(v) || declared.iter().any(|d| d == v);
        let literal = m
            .value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '|');
        if m.value.contains('$') || !literal {
            continue;
        }
        let alternatives: Vec<&str> = if m.op.ends_with('~') {
            m.value.split('|').collect()
        } else {
            vec![m.value.as_str()]
        };
        for v in alternatives {
            if !known(v) {
                out.push(format!(
                    "{origin}: {}{{{}{}\"{}\"}}: value {v:?} never occurs (seen: {values:?})",
                    selector.metric, m.name, m.op, m.value
                ));
            }
        }
    }
    out
}

/// Every PromQL expression of the dashboard: panel targets, and the metric selectors of
/// `label_values(...)` template variables.
fn dashboard_exprs(dashboard: &Value, out: &mut Vec<String>) {
    match dashboard {
        Value::Object(map) => {
            for (key, value) in map {
                match (key.as_str(), value) {
                    ("expr", Value::String(e)) => out.push(e.clone()),
                    ("query" | "definition", Value::String(q))
                        if q.starts_with("label_values(") =>
                    {
                        let inner = &q["label_values(".len()..];
                        let selector = inner.rsplit_once(',').map_or(inner, |(s, _)| s);
                        out.push(selector.to_owned());
                    }
                    _ => dashboard_exprs(value, out),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| dashboard_exprs(v, out)),
        _ => {}
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alerts_and_dashboard_name_only_metrics_a_running_daemon_exports() {
    let sim = Vcsim::start(VcsimOptions::default().vmdks(3)).await;
    let cluster = Cluster::start().await;
    for n in 1..=3 {
        cluster
            .create_pv(&format!("pv-{n}"), &sim.vmdk_path("kubevols", n))
            .await;
    }
    let missing = format!("[{}] kubevols/missing.vmdk", sim.datastores[0].name);
    cluster.create_pv("pv-missing", &missing).await;
    let daemon = Daemon::spawn(&cluster, &sim, "volmig-metrics-0", &[]);
    daemon.wait_ready().await;
    // Leader, a completed full-sync pass, and registrations behind it.
    wait_for(
        Duration::from_secs(120),
        "leader, full sync, 3 registrations",
        || async {
            let leader = daemon.metric("volmig_leader").await? == 1.0;
            let synced = daemon
                .metric("volmig_full_sync_last_success_timestamp_seconds")
                .await?
                > 0.0;
            let created = daemon
                .metric("volmig_registrations_total{result=\"created\"}")
                .await?
                >= 3.0;
            (leader && synced && created).then_some(())
        },
    )
    .await;
    let (status, body) = daemon.get("/metrics").await.expect("GET /metrics");
    assert_eq!(status, 200);
    let (ok, report) = check_metrics(&body);
    assert!(
        ok && report.trim().is_empty(),
        "promtool check metrics: {report}"
    );
    let exp = exposition(&body);
    for name in [
        "volmig_build_info",
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
        "process_open_fds",
        "process_start_time_seconds",
        "volmig_driver_objects_missing",
    ] {
        assert!(exp.contains_key(name), "the daemon does not export {name}");
    }

    let mut found = Vec::new();
    let mut checked = 0;
    let mut check = |origin: String, expr: &str| {
        let sels = selectors(expr);
        assert!(!sels.is_empty(), "{origin}: no metric in {expr:?}");
        for sel in &sels {
            checked += 1;
            found.extend(problems(sel, &exp, &origin));
        }
    };
    for (alert, expr) in rule_exprs(&rules_spec(&[])) {
        check(format!("alert {alert}"), &expr);
    }
    let dashboard: Value =
        serde_json::from_str(&read_repo_file("charts/volmig/dashboards/volmig.json"))
            .expect("dashboard JSON");
    let mut exprs = Vec::new();
    dashboard_exprs(&dashboard, &mut exprs);
    assert!(exprs.len() > 20, "too few dashboard queries: {exprs:?}");
    for expr in &exprs {
        check("dashboard".to_owned(), expr);
    }
    let cases: Value =
        serde_saphyr::from_str(&read_repo_file(ALERTS_TEST)).expect("alerts-test.yaml");
    for case in cases["tests"].as_array().expect("tests") {
        for series in case["input_series"].as_array().expect("input_series") {
            let name = case["name"].as_str().unwrap_or("?");
            check(
                format!("alerts-test.yaml case {name:?}"),
                series["series"].as_str().expect("series"),
            );
        }
    }
    println!("{checked} metric selectors checked against the daemon's /metrics");
    assert!(found.is_empty(), "{}", found.join("\n"));

    // The checker itself rejects a wrong metric, label and value.
    let wrong = selectors(
        r#"volmig_leaders + volmig_registrations_total{reason="failed"} + volmig_volumes{phase="Broken"} + volmig_backend_requests_total{result!~"ok|notfound"}"#,
    );
    let complaints: Vec<String> = wrong
        .iter()
        .flat_map(|s| problems(s, &exp, "guard"))
        .collect();
    assert_eq!(complaints.len(), 4, "{complaints:#?}");
}
