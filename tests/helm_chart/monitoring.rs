//! The optional monitoring and network objects of the chart (PrometheusRule, Grafana
//! dashboard, NetworkPolicy) and the pod extras (extra volumes, host aliases). The alerts'
//! PromQL is tested with promtool, and every metric name against a running daemon, in
//! tests/metrics_promtool.rs.

use k8s_openapi::api::networking::v1::NetworkPolicy;
use serde_json::{Value, json};

use crate::helm::{
    self, all_features_values, read_repo_file, render, strings, template, volmig_container,
};

fn all_features() -> helm::Rendered {
    let values = all_features_values();
    render(&["--values", &values.to_string_lossy()])
}

#[test]
fn monitoring_and_network_policy_are_off_by_default() {
    let rendered = render(&[]);
    for kind in ["PrometheusRule", "NetworkPolicy", "ConfigMap"] {
        assert!(
            rendered.of_kind(kind).next().is_none(),
            "default values render a {kind}"
        );
    }
    assert!(
        !rendered.text.contains("monitoring.coreos.com"),
        "{}",
        rendered.text
    );
    let pod = &rendered.deployment()["spec"]["template"]["spec"];
    assert!(pod["hostAliases"].is_null(), "{pod}");
    let volumes = pod["volumes"].as_array().expect("volumes");
    assert!(volumes.iter().all(|v| v["name"] != "extra-ca"));
}

#[test]
fn prometheus_rule_carries_the_values() {
    let rendered = all_features();
    let rule = rendered.get("PrometheusRule", "volmig");
    assert_eq!(rule["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(rule["metadata"]["namespace"], helm::NAMESPACE);
    assert_eq!(rule["metadata"]["labels"]["release"], "prometheus");
    let rules = rule["spec"]["groups"][0]["rules"]
        .as_array()
        .expect("rules");
    for r in rules {
        let alert = r["alert"].as_str().expect("alert");
        assert_eq!(r["labels"]["team"], "storage", "{alert}");
        assert!(
            ["warning", "critical"].contains(&r["labels"]["severity"].as_str().unwrap_or("")),
            "{alert}: {r}"
        );
        assert!(r["annotations"]["summary"].is_string(), "{alert}");
        assert!(r["annotations"]["description"].is_string(), "{alert}");
        let expr = r["expr"].as_str().expect("expr");
        // Every selector is narrowed to volmig's targets.
        assert!(
            expr.matches("volmig-metrics").count() == expr.matches('{').count(),
            "{alert}: a selector without the target matchers: {expr}"
        );
    }
    let by_name = |name: &str| -> &Value {
        rules
            .iter()
            .find(|r| r["alert"] == name)
            .unwrap_or_else(|| panic!("no alert {name}"))
    };
    assert_eq!(by_name("VolmigNoLeader")["for"], "3m");
    assert!(
        by_name("VolmigNoLeader")["expr"]
            .as_str()
            .expect("expr")
            .contains("absent(volmig_leader{")
    );
    assert!(
        by_name("VolmigBackendErrors")["expr"]
            .as_str()
            .expect("expr")
            .ends_with("> 0.2")
    );
    // fullSyncInterval 5m: stale after 3 x 300 s, driver objects missing for 2 x 300 s.
    assert!(
        by_name("VolmigFullSyncStale")["expr"]
            .as_str()
            .expect("expr")
            .contains("> 900")
    );
    assert_eq!(by_name("VolmigDriverObjectsMissing")["for"], "600s");
    // Prometheus templates in the annotations survive helm's own templating.
    assert!(
        by_name("VolmigRegistrationsFailing")["annotations"]["summary"]
            .as_str()
            .expect("summary")
            .contains("{{ $labels.result }}")
    );

    let custom = render(&[
        "--set",
        "prometheusRule.enabled=true",
        "--set-string",
        "prometheusRule.selector=service=\"volmig\"",
    ]);
    let expr =
        custom.get("PrometheusRule", "volmig")["spec"]["groups"][0]["rules"][0]["expr"].to_string();
    assert!(
        expr.contains("volmig_leader{service=\\\"volmig\\\"}") && !expr.contains("job="),
        "{expr}"
    );
}

#[test]
fn dashboard_configmap_holds_the_dashboard_for_the_sidecar() {
    let rendered = all_features();
    let cm = rendered.get("ConfigMap", "volmig-dashboard");
    assert_eq!(cm["metadata"]["namespace"], "monitoring");
    assert_eq!(cm["metadata"]["labels"]["grafana_dashboard"], "1");
    assert_eq!(cm["metadata"]["annotations"]["grafana_folder"], "Storage");
    let text = cm["data"]["volmig.json"].as_str().expect("volmig.json");
    let file = read_repo_file("charts/volmig/dashboards/volmig.json");
    assert_eq!(
        text,
        file.trim_end(),
        "the ConfigMap carries the file unchanged"
    );
    let dashboard: Value = serde_json::from_str(text).expect("dashboard JSON");
    assert_eq!(dashboard["uid"], "volmig");
    let panels = dashboard["panels"].as_array().expect("panels");
    assert!(panels.len() >= 15, "{} panels", panels.len());
    assert!(
        panels.iter().any(|p| p["targets"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|t| t["expr"]
                .as_str()
                .is_some_and(|e| e.contains("volmig_registrar_mode")))),
        "a panel shows the registrar mode"
    );
    let mut ids = std::collections::BTreeSet::new();
    for panel in panels {
        assert!(
            ids.insert(panel["id"].as_i64().expect("id")),
            "duplicate id"
        );
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"].as_str().expect("expr");
            assert!(
                expr.contains("job=\"$job\",namespace=\"$namespace\""),
                "{}: a query not narrowed to the selected volmig: {expr}",
                panel["title"]
            );
            assert_eq!(target["datasource"]["uid"], "${datasource}");
        }
    }
    let variables: Vec<&str> = dashboard["templating"]["list"]
        .as_array()
        .expect("variables")
        .iter()
        .map(|v| v["name"].as_str().expect("name"))
        .collect();
    assert_eq!(variables, ["datasource", "namespace", "job"]);

    // The sidecar label is configurable.
    let relabelled = render(&[
        "--set",
        "grafanaDashboard.enabled=true",
        "--set-string",
        "grafanaDashboard.labels.grafana_dashboard=volmig",
    ]);
    let cm = relabelled.get("ConfigMap", "volmig-dashboard");
    assert_eq!(cm["metadata"]["namespace"], helm::NAMESPACE);
    assert_eq!(cm["metadata"]["labels"]["grafana_dashboard"], "volmig");
}

#[test]
fn network_policy_allows_api_server_vcenter_dns_and_metrics_only() {
    let rendered = all_features();
    let object = rendered.get("NetworkPolicy", "volmig");
    // Well-formed against the Kubernetes type: parsing into it and back loses nothing
    // (an unknown or misplaced field would be dropped).
    let typed: NetworkPolicy = serde_json::from_value(object.clone()).expect("a NetworkPolicy");
    assert_eq!(
        &serde_json::to_value(&typed).expect("serialize"),
        object,
        "fields the NetworkPolicy type does not know"
    );
    let spec = &object["spec"];
    assert_eq!(
        spec["podSelector"]["matchLabels"],
        rendered.deployment()["spec"]["selector"]["matchLabels"]
    );
    assert_eq!(strings(&spec["policyTypes"]), ["Ingress", "Egress"]);
    assert_eq!(
        spec["ingress"],
        json!([{
            "ports": [{"port": "http", "protocol": "TCP"}],
            "from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]
        }])
    );
    let egress = spec["egress"].as_array().expect("egress");
    assert_eq!(egress.len(), 3, "API server, vCenter, DNS: {egress:?}");
    assert_eq!(
        egress[0],
        json!({"to": [{"ipBlock": {"cidr": "10.0.0.5/32"}}, {"ipBlock": {"cidr": "10.0.0.6/32"}}],
               "ports": [{"port": 6443, "protocol": "TCP"}]})
    );
    assert_eq!(
        egress[1],
        json!({"to": [{"ipBlock": {"cidr": "192.168.10.0/24"}}],
               "ports": [{"port": 443, "protocol": "TCP"}]})
    );
    assert_eq!(
        egress[2]["to"][0]["podSelector"]["matchLabels"]["k8s-app"],
        "kube-dns"
    );
    let dns_ports: Vec<String> = egress[2]["ports"]
        .as_array()
        .expect("ports")
        .iter()
        .map(|p| format!("{}/{}", p["port"], p["protocol"].as_str().unwrap_or("")))
        .collect();
    assert_eq!(dns_ports, ["53/UDP", "53/TCP"]);
    // The ingress port is the container port of the metrics. The probes' port has no
    // rule: only the pod's own node (the kubelet) reaches it, never another pod.
    let container = volmig_container(rendered.deployment());
    assert_eq!(container["ports"][0]["name"], "http");
    assert_eq!(container["ports"][1]["name"], "probes");
    assert!(
        !spec["ingress"].to_string().contains("probes"),
        "the probes' port is open to pods: {}",
        spec["ingress"]
    );

    // Without DNS, and with any metrics source.
    let minimal = render(&[
        "--set",
        "networkPolicy.enabled=true",
        "--set",
        "networkPolicy.apiServer.cidrs={172.18.0.2/32}",
        "--set",
        "networkPolicy.vcenter.cidrs={10.9.9.9/32}",
        "--set",
        "networkPolicy.dns.enabled=false",
    ]);
    let spec = &minimal.get("NetworkPolicy", "volmig")["spec"];
    assert_eq!(spec["egress"].as_array().expect("egress").len(), 2);
    assert!(spec["ingress"][0]["from"].is_null(), "{spec}");
    assert_eq!(
        spec["egress"][0]["ports"][1]["port"], 6443,
        "default ports 443, 6443"
    );

    // The addresses are required: an empty list would deny all traffic to them.
    for (sets, message) in [
        (
            vec![
                "networkPolicy.enabled=true",
                "networkPolicy.vcenter.cidrs={10.9.9.9/32}",
            ],
            "networkPolicy.apiServer.cidrs",
        ),
        (
            vec![
                "networkPolicy.enabled=true",
                "networkPolicy.apiServer.cidrs={10.0.0.1/32}",
            ],
            "networkPolicy.vcenter.cidrs",
        ),
        (
            vec![
                "networkPolicy.enabled=true",
                "networkPolicy.apiServer.cidrs={vcenter.example.com}",
                "networkPolicy.vcenter.cidrs={10.9.9.9/32}",
            ],
            "cidrs",
        ),
    ] {
        let args: Vec<&str> = sets.iter().flat_map(|s| ["--set", *s]).collect();
        let err = template(&args).expect_err("refused");
        assert!(err.contains(message), "{sets:?}: {err}");
    }
}

#[test]
fn extra_volumes_and_host_aliases_reach_the_pod() {
    let rendered = all_features();
    let deployment = rendered.deployment();
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(
        pod["hostAliases"],
        json!([{"ip": "192.168.10.20", "hostnames": ["vcenter.example.com"]}])
    );
    let volumes = pod["volumes"].as_array().expect("volumes");
    assert!(
        volumes
            .iter()
            .any(|v| v == &json!({"name": "extra-ca", "configMap": {"name": "corp-ca"}})),
        "{volumes:?}"
    );
    let mounts = volmig_container(deployment)["volumeMounts"]
        .as_array()
        .expect("mounts");
    assert!(
        mounts.iter().any(|m| m
            == &json!({"name": "extra-ca", "mountPath": "/etc/volmig/extra-ca", "readOnly": true})),
        "{mounts:?}"
    );
    // The chart's own volumes are still there.
    for name in ["vcenter-credentials", "tmp"] {
        assert!(volumes.iter().any(|v| v["name"] == name), "{name} lost");
    }
    let err = template(&["--set-json", r#"hostAliases=[{"ip":"10.0.0.1"}]"#])
        .expect_err("a host alias without hostnames");
    assert!(err.contains("hostnames"), "{err}");
}

/// The anchors GitHub generates for the headings of a Markdown document: lower case,
/// punctuation other than `-` and `_` dropped, blanks as `-`, repeats suffixed `-1`, `-2`.
fn github_anchors(markdown: &str) -> Vec<String> {
    let mut anchors: Vec<String> = Vec::new();
    let mut in_code = false;
    for line in markdown.lines() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if in_code || !line.starts_with('#') {
            continue;
        }
        let heading = line.trim_start_matches('#').trim();
        let slug: String = heading
            .to_lowercase()
            .chars()
            .filter_map(|c| match c {
                ' ' => Some('-'),
                c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
                _ => None,
            })
            .collect();
        let seen = anchors
            .iter()
            .filter(|a| {
                **a == slug
                    || a.strip_prefix(&format!("{slug}-"))
                        .is_some_and(|n| n.parse::<u32>().is_ok())
            })
            .count();
        anchors.push(if seen == 0 {
            slug
        } else {
            format!("{slug}-{seen}")
        });
    }
    anchors
}

/// Every alerting rule of the rendered PrometheusRule.
fn alert_rules(rendered: &helm::Rendered) -> Vec<Value> {
    let spec = &rendered.get("PrometheusRule", "volmig")["spec"];
    spec["groups"]
        .as_array()
        .unwrap_or_else(|| panic!("no groups: {spec}"))
        .iter()
        .flat_map(|g| {
            g["rules"]
                .as_array()
                .unwrap_or_else(|| panic!("no rules: {g}"))
                .clone()
        })
        .collect()
}

#[test]
fn every_alert_has_a_runbook_in_the_operations_doc_and_a_for_duration() {
    let doc = read_repo_file("docs/operations.md");
    let anchors = github_anchors(&doc);
    assert!(
        anchors.contains(&"alerts-and-dashboard".to_owned())
            && anchors.contains(&"runbooks".to_owned()),
        "{anchors:?}"
    );
    let rendered = render(&["--set", "prometheusRule.enabled=true"]);
    let rules = alert_rules(&rendered);
    assert!(rules.len() >= 9, "{rules:?}");
    for rule in &rules {
        let alert = rule["alert"].as_str().expect("alert name");
        let url = rule["annotations"]["runbook_url"]
            .as_str()
            .unwrap_or_else(|| panic!("{alert} has no runbook_url: {rule}"));
        let (base, anchor) = url
            .split_once('#')
            .unwrap_or_else(|| panic!("{alert}: runbook_url {url:?} has no anchor"));
        assert_eq!(
            base, "https://github.com/volmig/volmig/blob/main/docs/operations.md",
            "{alert}: an absolute URL under Chart.yaml's home"
        );
        assert!(
            anchors.iter().any(|a| a == anchor),
            "{alert}: docs/operations.md has no heading with the anchor #{anchor}"
        );
        assert_eq!(
            anchor,
            alert.to_lowercase(),
            "{alert}: one runbook per alert"
        );
        let for_ = rule["for"]
            .as_str()
            .unwrap_or_else(|| panic!("{alert} has no `for:`"));
        assert!(
            volmig::cli::parse_duration(for_).is_ok(),
            "{alert}: for {for_:?}"
        );
        // The alerts table lists it too.
        assert!(
            doc.contains(&format!("| `{alert}` |")),
            "{alert} not in the alerts table"
        );
    }
    assert!(
        rules
            .iter()
            .any(|r| r["alert"] == "VolmigRegistrarModeUnknown"),
        "no alert on volmig_registrar_mode"
    );
    let chart = read_repo_file("charts/volmig/Chart.yaml");
    assert!(
        chart.contains("\nhome: https://github.com/volmig/volmig\n"),
        "Chart.yaml names the home the runbooks are under"
    );
    // Not absolute https, or with an anchor of its own: refused by the schema.
    for bad in [
        "",
        "docs/operations.md",
        "http://wiki.example/operations.md",
        "https://wiki.example/operations.md#runbooks",
    ] {
        let refused = helm::template(&[
            "--set",
            "prometheusRule.enabled=true",
            "--set-string",
            &format!("prometheusRule.runbookBaseUrl={bad}"),
        ]);
        assert!(
            refused
                .as_ref()
                .is_err_and(|e| e.contains("runbookBaseUrl")),
            "{bad:?}: {refused:?}"
        );
    }
    // The base URL is a value.
    let elsewhere = render(&[
        "--set",
        "prometheusRule.enabled=true",
        "--set-string",
        "prometheusRule.runbookBaseUrl=https://wiki.example/volmig/operations.md",
    ]);
    for rule in alert_rules(&elsewhere) {
        let url = rule["annotations"]["runbook_url"]
            .as_str()
            .expect("runbook_url");
        assert!(
            url.starts_with("https://wiki.example/volmig/operations.md#volmig"),
            "{url}"
        );
    }
}

#[test]
fn a_dry_run_release_has_no_leader_alerts() {
    let leader_alerts = |rendered: &helm::Rendered| -> Vec<String> {
        alert_rules(rendered)
            .iter()
            .filter(|r| {
                r["expr"]
                    .as_str()
                    .is_some_and(|e| e.contains("volmig_leader"))
            })
            .map(|r| r["alert"].as_str().expect("alert").to_owned())
            .collect()
    };
    let normal = render(&["--set", "prometheusRule.enabled=true"]);
    assert_eq!(
        leader_alerts(&normal),
        [
            "VolmigNoLeader",
            "VolmigMultipleLeaders",
            "VolmigRegistrarModeUnknown"
        ]
    );
    let dry = render(&[
        "--set",
        "prometheusRule.enabled=true",
        "--set",
        "dryRun=true",
    ]);
    assert!(leader_alerts(&dry).is_empty(), "{:?}", leader_alerts(&dry));
    assert!(
        alert_rules(&dry)
            .iter()
            .any(|r| r["alert"] == "VolmigBackendErrors"),
        "the other alerts stay"
    );
}
