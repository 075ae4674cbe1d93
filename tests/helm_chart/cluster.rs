//! The chart against the Kubernetes API test server: `kubectl apply --dry-run=server` of
//! the rendered templates, and `helm install` / `helm uninstall`.

use serde_json::{Value, json};

use crate::flags::parse_run_args;
use crate::helm::{
    self, Cluster, NAMESPACE, RELEASE, SERVICE_MONITOR_CRD, all_features_values,
    assert_no_wildcards_or_secrets, assert_probes, assert_restricted_security, chart_dir, describe,
    render, run,
};

/// `(kind, name)` of a rendered object, for messages and kubectl.
fn kind_and_name(object: &Value) -> (String, String) {
    let field = |v: &Value| {
        v.as_str()
            .unwrap_or_else(|| panic!("{v} in {object}"))
            .to_owned()
    };
    (field(&object["kind"]), field(&object["metadata"]["name"]))
}

#[tokio::test]
async fn rendered_chart_passes_kubectl_server_side_dry_run() {
    let cluster = Cluster::start().await;
    cluster.kubectl_ok(&["create", "namespace", NAMESPACE], None);
    // The CSI driver's namespace, where the chart reads its syncer's Lease.
    cluster.kubectl_ok(&["create", "namespace", "vmware-system-csi"], None);
    // The dashboard ConfigMap of the all-features values goes to Grafana's namespace.
    cluster.kubectl_ok(&["create", "namespace", "monitoring"], None);
    // The ServiceMonitor kind of the optional feature comes from the Prometheus Operator.
    cluster.kubectl_ok(&["apply", "-f", "-"], Some(SERVICE_MONITOR_CRD));
    // So is the PrometheusRule kind of the optional alerts.
    cluster.kubectl_ok(
        &["apply", "-f", "-"],
        Some(&helm::read_repo_file(
            "tests/fixtures/prometheusrule-crd.yaml",
        )),
    );

    let all = all_features_values();
    let all = all.to_str().expect("utf-8 path");
    for (what, extra) in [
        ("default values", vec!["--include-crds"]),
        (
            "every optional feature",
            vec!["--include-crds", "--values", all],
        ),
    ] {
        let rendered = render(&extra);
        // The API test server does not serve networking.k8s.io; the NetworkPolicy is
        // checked against the Kubernetes types in monitoring.rs instead.
        let objects: Vec<&Value> = rendered
            .objects
            .iter()
            .filter(|o| o["kind"] != "NetworkPolicy")
            .collect();
        let text: Vec<String> = objects.iter().map(|o| o.to_string()).collect();
        let before = cluster.server.stats();
        let out = cluster.kubectl_ok(
            &["apply", "--dry-run=server", "-f", "-"],
            Some(&text.join("\n---\n")),
        );
        let after = cluster.server.stats();
        for object in &objects {
            let (kind, name) = kind_and_name(object);
            let kind = kind.to_lowercase();
            assert!(
                out.lines().any(|line| {
                    (line.starts_with(&format!("{kind}/")) || line.starts_with(&format!("{kind}.")))
                        && line.contains(&format!("/{name} "))
                        && line.ends_with("(server dry run)")
                }),
                "{what}: kubectl did not dry-run {kind}/{name}:\n{out}"
            );
        }
        assert_eq!(
            out.lines()
                .filter(|l| l.ends_with("(server dry run)"))
                .count(),
            objects.len(),
            "{what}: one dry-run line per rendered object:\n{out}"
        );
        assert_eq!(
            after.writes, before.writes,
            "{what}: a server-side dry run stored something"
        );
        assert!(
            after.dry_run_writes >= before.dry_run_writes + objects.len() as u64,
            "{what}: the server saw fewer dry-run writes than objects"
        );
    }
    assert!(
        cluster
            .get_json(&["deployment", "volmig", "-n", NAMESPACE])
            .is_none()
    );
    assert!(
        cluster
            .get_json(&["crd", "volumemigrations.volmig.io"])
            .is_none()
    );
}

#[tokio::test]
async fn helm_install_then_uninstall_against_the_api_server() {
    let cluster = Cluster::start().await;
    // The CSI driver runs (its namespace exists): the chart reads its syncer's Lease there.
    cluster.kubectl_ok(&["create", "namespace", "vmware-system-csi"], None);
    let password = "install-test-password";
    let install = run(cluster
        .helm()
        .args(["install", RELEASE])
        .arg(chart_dir())
        .args(["--namespace", NAMESPACE, "--create-namespace"])
        .args([
            "--set-string",
            &format!("image.repository={}", helm::TEST_IMAGE_REPOSITORY),
        ])
        .args(["--set-string", "vcenter.url=https://vc.install.example/sdk"])
        .args(["--set-string", "clusterId=install-cluster"])
        .args([
            "--set-string",
            "vcenter.credentials.username=volmig@vsphere.local",
        ])
        .args([
            "--set-string",
            &format!("vcenter.credentials.password={password}"),
        ])
        .args([
            "--set-string",
            "vcenter.caBundle.pem=-----BEGIN CERTIFICATE-----",
        ]));
    let text = describe(&install);
    assert!(install.status.success(), "helm install: {text}");
    assert!(text.contains("STATUS: deployed"), "helm install: {text}");

    // The stored Deployment, as the API server returns it.
    let deployment = cluster
        .get_json(&["deployment", "volmig", "-n", NAMESPACE])
        .expect("helm install stored the Deployment");
    assert_eq!(deployment["spec"]["replicas"], 2);
    assert_restricted_security(&deployment);
    assert_probes(&deployment);
    assert_eq!(
        deployment["metadata"]["labels"]["app.kubernetes.io/managed-by"],
        "Helm"
    );
    assert_eq!(
        deployment["metadata"]["annotations"]["meta.helm.sh/release-name"],
        RELEASE
    );
    assert!(
        !deployment.to_string().contains(password),
        "password in the stored Deployment"
    );
    let parsed = parse_run_args(&helm::container_args(&deployment));
    assert_eq!(parsed.lease_namespace, NAMESPACE);
    assert_eq!(parsed.cluster_id.as_deref(), Some("install-cluster"));

    // RBAC as stored: no wildcard, no Secrets anywhere, Leases only in a namespaced Role.
    let role = cluster
        .get_json(&["clusterrole", "volmig"])
        .expect("ClusterRole volmig");
    assert_no_wildcards_or_secrets(&role["rules"], "stored ClusterRole volmig");
    assert!(
        !role["rules"].to_string().contains("leases"),
        "cluster-wide Lease access"
    );
    let labelled = format!("app.kubernetes.io/instance={RELEASE}");
    for kind in ["clusterroles", "roles"] {
        let list = cluster
            .get_json(&[kind, "--all-namespaces", "-l", &labelled])
            .expect("list RBAC objects");
        let items = list["items"].as_array().expect("items");
        assert!(!items.is_empty(), "no {kind} installed");
        for item in items {
            let (_, name) = kind_and_name(item);
            assert_no_wildcards_or_secrets(&item["rules"], &format!("stored {kind} {name}"));
        }
    }
    let lease_role = cluster
        .get_json(&["role", "volmig-leader-election", "-n", NAMESPACE])
        .expect("the leader-election Role");
    assert!(lease_role["rules"].to_string().contains("leases"));
    // helm installs the chart's crds/ first.
    assert!(
        cluster
            .get_json(&["crd", "volumemigrations.volmig.io"])
            .is_some()
    );

    // Everything the release manifest names exists now...
    let manifest = run(cluster
        .helm()
        .args(["get", "manifest", RELEASE, "-n", NAMESPACE]));
    assert!(
        manifest.status.success(),
        "helm get manifest: {}",
        describe(&manifest)
    );
    let installed = helm::parse_yaml_documents(&String::from_utf8_lossy(&manifest.stdout));
    let names: Vec<(String, String)> = installed.iter().map(kind_and_name).collect();
    for expected in [
        "Deployment",
        "ServiceAccount",
        "Service",
        "PodDisruptionBudget",
        "Secret",
    ] {
        assert!(
            names.iter().any(|(k, _)| k == expected),
            "release lacks a {expected}"
        );
    }
    // Objects keep their own namespace (the events Role lives in `default`).
    let namespaces: Vec<String> = installed
        .iter()
        .map(|o| {
            o["metadata"]["namespace"]
                .as_str()
                .unwrap_or(NAMESPACE)
                .to_owned()
        })
        .collect();
    assert!(
        names
            .iter()
            .zip(&namespaces)
            .any(|((k, n), ns)| k == "Role" && n == "volmig-events" && ns == "default"),
        "the events Role is not in namespace default: {names:?} {namespaces:?}"
    );
    for ((kind, name), ns) in names.iter().zip(&namespaces) {
        assert!(
            cluster
                .get_json(&[&kind.to_lowercase(), name, "-n", ns])
                .is_some(),
            "{kind}/{name} of the release is not stored in {ns}"
        );
    }
    let list = run(cluster.helm().args(["list", "-n", NAMESPACE, "-o", "json"]));
    let releases: Value = serde_json::from_slice(&list.stdout).expect("helm list -o json");
    assert_eq!(releases[0]["name"], RELEASE, "{releases}");
    assert_eq!(releases[0]["status"], "deployed", "{releases}");

    // ... and helm uninstall removes all of it (the CRD stays, as helm keeps crds/).
    let uninstall = run(cluster.helm().args(["uninstall", RELEASE, "-n", NAMESPACE]));
    assert!(
        uninstall.status.success(),
        "helm uninstall: {}",
        describe(&uninstall)
    );
    for ((kind, name), ns) in names.iter().zip(&namespaces) {
        assert!(
            cluster
                .get_json(&[&kind.to_lowercase(), name, "-n", ns])
                .is_none(),
            "{kind}/{name} survived helm uninstall"
        );
    }
    let list = run(cluster.helm().args(["list", "-n", NAMESPACE, "-o", "json"]));
    let releases: Value = serde_json::from_slice(&list.stdout).expect("helm list -o json");
    assert_eq!(
        releases,
        json!([]),
        "the release record survived helm uninstall"
    );
    assert!(
        cluster
            .get_json(&["crd", "volumemigrations.volmig.io"])
            .is_some()
    );
}
