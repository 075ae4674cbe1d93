//! The Helm chart, the container image definition and the operations docs (docs/operations.md),
//! checked with the real helm 4 binary (`make helm`), the real `volmig` command line and, where a
//! cluster is needed, the real kubectl against the Kubernetes API test server.
//!
//! This file holds the rendering tests; the modules beside it in `helm_chart/` hold the
//! flag coverage, values validation, RBAC, image, docs, chart README and API-server tests.

#[path = "helm_chart/cluster.rs"]
mod cluster;
#[path = "helm_chart/docs.rs"]
mod docs;
#[path = "helm_chart/driver_crd.rs"]
mod driver_crd;
#[path = "helm_chart/flags.rs"]
mod flags;
#[path = "support/helm.rs"]
mod helm;
#[path = "helm_chart/image.rs"]
mod image;
#[path = "helm_chart/monitoring.rs"]
mod monitoring;
#[path = "helm_chart/rbac.rs"]
mod rbac;
#[path = "helm_chart/readme.rs"]
mod readme;
#[path = "helm_chart/values.rs"]
mod values;

use serde_json::{Value, json};

use flags::parse_run_args;
use helm::{
    all_features_values, assert_probes, assert_restricted_security, chart_dir, describe,
    read_repo_file, render, run,
};

#[test]
fn make_helm_provides_helm_4() {
    let output = run(helm::helm().args(["version", "--template", "{{.Version}}"]));
    assert!(
        output.status.success(),
        "helm version: {}",
        describe(&output)
    );
    let version = String::from_utf8_lossy(&output.stdout);
    assert!(
        version.starts_with("v4."),
        "expected helm v4, got {version:?}"
    );
}

#[test]
fn helm_lint_is_clean_for_default_and_all_features_values() {
    let all = all_features_values();
    // The defaults plus what they lack on purpose (a registry and a vCenter URL).
    let base = helm::base_values(&[]);
    let base: Vec<&std::ffi::OsStr> = base.iter().map(|a| a.as_ref()).collect();
    let cases: [Vec<&std::ffi::OsStr>; 2] = [base, vec!["--values".as_ref(), all.as_os_str()]];
    for extra in cases {
        let output = run(helm::helm()
            .args(["lint", "--strict"])
            .arg(chart_dir())
            .args(&extra));
        let text = describe(&output);
        assert!(
            output.status.success(),
            "helm lint --strict {extra:?}: {text}"
        );
        for bad in ["[WARNING]", "[ERROR]", "[INFO]"] {
            assert!(
                !text.contains(bad),
                "helm lint {extra:?} reports {bad}: {text}"
            );
        }
        assert!(
            text.contains("1 chart(s) linted, 0 chart(s) failed"),
            "{text}"
        );
    }
}

#[test]
fn chart_crd_is_the_generated_crd() {
    let chart_crd = read_repo_file("charts/volmig/crds/volumemigrations.yaml");
    let top_level = read_repo_file("crds/volumemigrations.yaml");
    assert!(
        chart_crd == top_level,
        "charts/volmig/crds/volumemigrations.yaml differs from crds/volumemigrations.yaml: \
         run `make crd` (it copies the CRD into the chart)"
    );
    let generated = volmig::volume_migration::crd_yaml().expect("render the CRD");
    assert!(
        chart_crd == generated,
        "the chart's CRD is not what `volmig crd` prints"
    );
    // helm installs crds/ before the templates and never templates them.
    let rendered = render(&["--include-crds"]);
    let crd = rendered.get("CustomResourceDefinition", "volumemigrations.volmig.io");
    assert_eq!(crd["spec"]["names"]["shortNames"], json!(["vmig"]));
    assert!(
        render(&[])
            .of_kind("CustomResourceDefinition")
            .next()
            .is_none()
    );
}

#[test]
fn chart_version_metadata_follows_the_crate() {
    let chart: Value = serde_saphyr::from_str(&read_repo_file("charts/volmig/Chart.yaml"))
        .expect("Chart.yaml parses");
    assert_eq!(chart["apiVersion"], "v2", "helm 3/4 chart format");
    assert_eq!(chart["name"], "volmig");
    assert_eq!(
        chart["appVersion"],
        env!("CARGO_PKG_VERSION"),
        "Chart.yaml appVersion must be the volmig crate version (the default image tag)"
    );
    let rendered = render(&[]);
    let image = helm::volmig_container(rendered.deployment())["image"].clone();
    assert_eq!(
        image,
        format!(
            "{}:{}",
            helm::TEST_IMAGE_REPOSITORY,
            env!("CARGO_PKG_VERSION")
        )
    );
}

#[test]
fn default_values_render_a_restricted_leader_elected_deployment() {
    // The defaults plus the two values they lack on purpose (helm::base_values): an image
    // repository with a registry and a vCenter URL.
    let rendered = render(&[]);
    assert_eq!(
        rendered.kind_names(),
        [
            "ClusterRole/volmig",
            "ClusterRole/volmig-reader",
            "ClusterRoleBinding/volmig",
            "Deployment/volmig",
            "PodDisruptionBudget/volmig",
            "Role/volmig-driver-syncer",
            "Role/volmig-events",
            "Role/volmig-leader-election",
            "RoleBinding/volmig-driver-syncer",
            "RoleBinding/volmig-events",
            "RoleBinding/volmig-leader-election",
            "Service/volmig-metrics",
            "ServiceAccount/volmig",
        ],
        "default values render these objects (no Secret: no credentials were given; \
         no PrometheusRule, dashboard or NetworkPolicy: they are opt-in)"
    );
    let deployment = rendered.deployment();
    assert_eq!(deployment["spec"]["replicas"], 2);
    assert_restricted_security(deployment);
    assert_probes(deployment);
    let container = helm::volmig_container(deployment);
    for kind in ["requests", "limits"] {
        for resource in ["cpu", "memory"] {
            assert!(
                container["resources"][kind][resource].is_string(),
                "resources.{kind}.{resource} missing: {}",
                container["resources"]
            );
        }
    }
    assert_eq!(
        rendered.args(),
        [
            "run",
            "--vc-url=https://vcenter.example/sdk",
            "--vc-credentials-file=/etc/volmig/vcenter/credentials",
            "--vc-requests-per-second=50",
            "--full-sync-interval=10m",
            "--max-concurrent-registrations=8",
            "--vc-request-timeout=60s",
            "--vc-task-timeout=10m",
            "--publish-driver-cache=auto",
            "--driver-namespace=vmware-system-csi",
            "--driver-syncer-lease=vsphere-syncer",
            "--driver-deployment=vsphere-csi-controller",
            "--inline-pod-volumes=true",
            "--on-pv-delete=unregister",
            "--leader-election=true",
            "--lease-namespace=volmig",
            "--lease-name=volmig",
            "--lease-duration=15s",
            "--lease-holder-id=$(POD_NAME)",
            "--http-addr=0.0.0.0:8080",
            "--probe-addr=0.0.0.0:8081",
            "--log-format=text",
            "--log-level=info",
            "--events-namespace=default",
            "--kube-request-timeout=70s",
        ],
        "defaults follow the docs/design.md §3 contract, with the Lease in the release namespace"
    );
    let env = &container["env"];
    assert_eq!(env[0]["name"], "POD_NAME");
    assert_eq!(
        env[0]["valueFrom"]["fieldRef"]["fieldPath"],
        "metadata.name"
    );
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], "volmig");
    let pdb = rendered.get("PodDisruptionBudget", "volmig");
    assert_eq!(
        pdb["spec"]["selector"]["matchLabels"],
        deployment["spec"]["selector"]["matchLabels"]
    );
    let service = rendered.get("Service", "volmig-metrics");
    assert_eq!(
        service["spec"]["selector"],
        deployment["spec"]["selector"]["matchLabels"]
    );
    assert_eq!(service["spec"]["ports"][0]["targetPort"], "http");
    // Without a cluster ID the flag is left out: volmig takes the driver's from its
    // ConfigMap at start-up.
    let parsed = parse_run_args(&rendered.args());
    assert_eq!(parsed.cluster_id, None);
    assert_eq!(parsed.lease_namespace, helm::NAMESPACE);
    assert!(parsed.leader_election);
}

#[test]
fn all_features_render_and_parse() {
    let all = all_features_values();
    let rendered = render(&["--values", all.to_str().expect("utf-8 path")]);
    for expected in [
        "ConfigMap/volmig-vcenter-ca",
        "ClusterRoleBinding/volmig-reader",
        "Secret/volmig-vcenter-credentials",
        "ServiceAccount/volmig-controller",
        "ServiceMonitor/volmig",
        "PrometheusRule/volmig",
        "ConfigMap/volmig-dashboard",
        "NetworkPolicy/volmig",
    ] {
        assert!(
            rendered.kind_names().iter().any(|k| k == expected),
            "{expected} missing"
        );
    }
    let deployment = rendered.deployment();
    assert_restricted_security(deployment);
    assert_probes(deployment);
    assert_eq!(deployment["spec"]["replicas"], 3);
    let parsed = parse_run_args(&rendered.args());
    assert_eq!(
        parsed.vc_url.as_ref().map(url::Url::as_str),
        Some("https://vcenter.example.com/sdk")
    );
    assert_eq!(parsed.cluster_id.as_deref(), Some("prod-cluster-1"));
    assert!(parsed.gc_orphans && parsed.vc_ca_file.is_some() && !parsed.vc_insecure);
    assert_eq!(parsed.http_addr.port(), 9090);
    let container = helm::volmig_container(deployment);
    assert_eq!(container["ports"][0]["containerPort"], 9090);
    assert_eq!(
        container["image"],
        "registry.example.com/storage/volmig@sha256:\
         0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
    );
    // Every mounted file the args name comes from a volume of the pod.
    let mounts: Vec<String> = container["volumeMounts"]
        .as_array()
        .expect("volumeMounts")
        .iter()
        .map(|m| m["mountPath"].as_str().expect("mountPath").to_owned())
        .collect();
    for file in [
        &parsed.vc_credentials_file,
        &parsed.vc_ca_file,
        &parsed.kube.kubeconfig,
    ] {
        let file = file
            .as_ref()
            .expect("file flag set")
            .to_str()
            .expect("utf-8");
        assert!(
            mounts.iter().any(|m| file.starts_with(&format!("{m}/"))),
            "{file} is not under a volume mount {mounts:?}"
        );
    }
    let volumes = deployment["spec"]["template"]["spec"]["volumes"].to_string();
    assert!(volumes.contains("volmig-kubeconfig") && volumes.contains("\"key\":\"config\""));
    let reader = rendered.get("ClusterRoleBinding", "volmig-reader");
    assert_eq!(reader["subjects"][0]["name"], "vsphere-csi-controller");
    let monitor = rendered.get("ServiceMonitor", "volmig");
    assert_eq!(monitor["spec"]["endpoints"][0]["port"], "http-metrics");
    assert_eq!(monitor["metadata"]["labels"]["release"], "prometheus");
    let service = rendered.get("Service", "volmig-metrics");
    assert_eq!(service["spec"]["ports"][0]["name"], "http-metrics");

    // The insecure variant (it excludes a CA bundle).
    let insecure = render(&[
        "--values",
        all.to_str().expect("utf-8 path"),
        "--set-string",
        "vcenter.caBundle.pem=",
        "--set",
        "vcenter.insecure=true",
    ]);
    let parsed = parse_run_args(&insecure.args());
    assert!(parsed.vc_insecure && parsed.vc_ca_file.is_none());
}
