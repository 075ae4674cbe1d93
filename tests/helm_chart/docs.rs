//! docs/operations.md documents every flag and every value.

use serde_json::Value;

use crate::flags::run_flags;
use crate::helm::read_repo_file;

#[test]
fn operations_doc_lists_every_metric_the_daemon_exposes() {
    let doc = read_repo_file("docs/operations.md");
    let exposition = volmig::metrics::Metrics::new().encode_prometheus_text();
    let families: Vec<(&str, &str)> = exposition
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE ")?.split_once(' '))
        .collect();
    assert!(
        families.len() >= 10,
        "too few metric families: {exposition}"
    );
    for (name, kind) in families {
        let row = doc
            .lines()
            .find(|l| l.starts_with(&format!("| `{name}` |")))
            .unwrap_or_else(|| panic!("docs/operations.md has no metrics row for {name}"));
        assert!(
            row.contains(&format!("| {kind} |")),
            "{name} is a {kind}: {row}"
        );
    }
}

#[test]
fn operations_doc_troubleshoots_every_status_and_event_reason() {
    use volmig::k8s::events::reason as event;
    use volmig::registrar::reason as status;
    let doc = read_repo_file("docs/operations.md");
    let status_reasons = [
        status::INVALID_PATH,
        status::DISK_NOT_FOUND,
        status::PERMANENT,
        status::TRANSIENT,
        status::NOT_AUTHENTICATED,
        status::INVALID_LOGIN,
        status::CREATE_OUTCOME_UNKNOWN,
        status::NAME_COLLISION,
    ];
    let event_reasons = [
        event::REGISTERED,
        event::REGISTRATION_FAILED,
        event::INVALID_VOLUME_PATH,
        event::UNREGISTERED,
        event::RE_REGISTERED,
        event::DUPLICATE_VOLUMES,
        event::NAME_COLLISION,
    ];
    for reason in status_reasons.iter().chain(&event_reasons) {
        assert!(
            doc.lines()
                .any(|l| l.starts_with(&format!("| `{reason}` |"))),
            "docs/operations.md has no troubleshooting row for reason {reason}"
        );
    }
}

#[test]
fn operations_doc_covers_every_flag_and_value() {
    let doc = read_repo_file("docs/operations.md");
    let missing_flags: Vec<String> = run_flags()
        .into_iter()
        .filter(|f| !doc.contains(&format!("--{f}")))
        .collect();
    assert!(
        missing_flags.is_empty(),
        "docs/operations.md lacks flags {missing_flags:?}"
    );

    let values: Value = serde_saphyr::from_str(&read_repo_file("charts/volmig/values.yaml"))
        .expect("values.yaml parses");
    let mut paths = Vec::new();
    value_paths(&values, "", &mut paths);
    let missing: Vec<&String> = paths
        .iter()
        .filter(|p| !doc.contains(&format!("`{p}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/operations.md does not document values {missing:?}"
    );

    for needle in [
        "volmig lookup",
        "exit code 3",
        "helm install",
        "helm upgrade",
        "status.volumeID",
        "DiskNotFound",
        "/metrics",
        "```mermaid",
    ] {
        assert!(
            doc.contains(needle),
            "docs/operations.md does not mention {needle:?}"
        );
    }
}

/// Dotted paths of values.yaml; maps that are passed through whole (resources, security
/// contexts, probes) count as one value.
fn value_paths(value: &Value, prefix: &str, out: &mut Vec<String>) {
    const WHOLE: &[&str] = &[
        "resources",
        "podSecurityContext",
        "securityContext",
        "livenessProbe",
        "readinessProbe",
        "grafanaDashboard.labels",
        "networkPolicy.dns.namespaceSelector",
        "networkPolicy.dns.podSelector",
    ];
    match value {
        Value::Object(map) if !map.is_empty() && !WHOLE.contains(&prefix) => {
            for (key, child) in map {
                let path = if prefix.is_empty() {
                    key.clone()
                } else {
                    format!("{prefix}.{key}")
                };
                value_paths(child, &path, out);
            }
        }
        _ => out.push(prefix.to_owned()),
    }
}
