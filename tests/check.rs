//! `volmig check` end to end (docs/operations.md, "Preflight: `volmig check`"): the real
//! binary against the govmomi simulator harness and the Kubernetes API test server, as the
//! chart's ServiceAccount. A good setup passes every line (exit 0); then one fault at a
//! time fails its own line (exit 1): a CA that did not sign vCenter's certificate, a wrong
//! password, a PV on a datastore that does not exist, the driver's ConfigMap with another
//! cluster ID, and the chart's RBAC without one rule.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "test code: failures should panic"
)]

#[path = "support/e2e.rs"]
mod e2e;
#[path = "support/vcsim.rs"]
mod vcsim;

use std::process::Stdio;

use e2e::{Cluster, chart_rbac, chart_rbac_without, chart_rules};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use vcsim::{Vcsim, VcsimOptions};

const CLUSTER_ID: &str = "check-e2e";
const WRONG_PASSWORD: &str = "wr0ng-Pa55-check";

/// A self-signed CA that signed nothing the simulator serves (`openssl req -x509`, EC P-256).
const OTHER_CA: &str = "-----BEGIN CERTIFICATE-----\nMIIBiDCCAS2gAwIBAgIUHPIesMIiRSmQ9g9eXe5/8SrbK1QwCgYIKoZIzj0EAwIw\nGTEXMBUGA1UEAwwOdm9sbWlnLXRlc3QtZWMwHhcNMjYxMjAyMjM1NjI1WhcNMzYx\nMTI5MjM1NjI1WjAZMRcwFQYDVQQDDA52b2xtaWctdGVzdC1lYzBZMBMGByqGSM49\nAgEGCCqGSM49AwEHA0IABGQuulF8XSE+hPrL0UJhaqnoaOUsFt8Y8ZFUZJJEsouV\nIvY6zE6jS9nwUViWLhdiZLqvuKLJHf4eThlPkbPlJumjUzBRMB0GA1UdDgQWBBT0\nKC+jivCdAZ/PWirUloQLg4uWNjAfBgNVHSMEGDAWgBT0KC+jivCdAZ/PWirUloQL\ng4uWNjAPBgNVHRMBAf8EBTADAQH/MAoGCCqGSM49BAMCA0kAMEYCIQDJ1OssbN8+\nJNajnmujr6SD2wpbFAeD0qsirjKRFQtOkgIhAM0NR37tyu57RErXEQQyOpMG4UAg\nkM/u6R9f/cZ8CVr4\n-----END CERTIFICATE-----\n";

/// The simulator (one vmdk) and a control plane with `identity` as volmig's, the
/// driver's CRD and a PV on the simulator's datastore.
async fn set_up(identity: &[serde_json::Value]) -> (Vcsim, Cluster) {
    let (sim, cluster) = tokio::join!(
        Vcsim::start(VcsimOptions::default().vmdks(1)),
        Cluster::start_with_identity(identity)
    );
    cluster.install_driver_crd().await;
    cluster
        .create_pv("pv-good", &sim.vmdk_path("kubevols", 1))
        .await;
    (sim, cluster)
}

/// The flags of a good setup, as `volmig run` takes them.
fn good_flags(cluster: &Cluster, sim: &Vcsim, password: &str) -> Vec<String> {
    let credentials = cluster.path(&format!("credentials-{password}"));
    std::fs::write(
        &credentials,
        format!("username: {}\npassword: {password}\n", sim.username),
    )
    .unwrap();
    vec![
        format!("--kubeconfig={}", cluster.daemon_kubeconfig.display()),
        format!("--vc-url={}", sim.url),
        format!("--vc-credentials-file={}", credentials.display()),
        format!(
            "--vc-ca-file={}",
            sim.cert
                .as_ref()
                .expect("the harness serves https")
                .display()
        ),
        format!("--cluster-id={CLUSTER_ID}"),
        "--vc-request-timeout=20s".to_owned(),
    ]
}

/// What one `volmig check` printed.
struct Checked {
    code: i32,
    json: serde_json::Value,
    stdout: String,
}

impl Checked {
    /// The checks named `name`.
    fn lines(&self, name: &str) -> Vec<&serde_json::Value> {
        self.json["checks"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["name"] == name)
            .collect()
    }

    /// The one check named `name`.
    fn line(&self, name: &str) -> &serde_json::Value {
        let lines = self.lines(name);
        assert_eq!(lines.len(), 1, "one {name} line in {}", self.stdout);
        lines[0]
    }

    /// Names of the failed checks.
    fn failed(&self) -> Vec<String> {
        self.json["checks"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["ok"] == false)
            .map(|c| c["name"].as_str().unwrap().to_owned())
            .collect()
    }
}

/// Runs `volmig check -o <output> <flags>`.
fn check(flags: &[String], output: &str) -> (i32, String) {
    let mut args = vec!["check".to_owned(), format!("--output={output}")];
    args.extend_from_slice(flags);
    let out = std::process::Command::new(e2e::volmig_bin())
        .args(e2e::compat_args(args))
        .env_remove("VOLMIG_VC_USERNAME")
        .env_remove("VOLMIG_VC_PASSWORD")
        .stdin(Stdio::null())
        .output()
        .expect("run volmig check");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    (
        out.status.code().unwrap_or(-1),
        format!("{stdout}\n--- stderr:\n{stderr}"),
    )
}

fn check_json(flags: &[String]) -> Checked {
    let (code, stdout) = check(flags, "json");
    let text = stdout.split("\n--- stderr:").next().unwrap_or_default();
    let json = serde_json::from_str(text).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    Checked { code, json, stdout }
}

/// Replaces the flag `--name=...` in `flags` by `value`.
fn with(flags: &[String], name: &str, value: String) -> Vec<String> {
    let prefix = format!("--{name}=");
    let mut flags: Vec<String> = flags
        .iter()
        .filter(|f| !f.starts_with(&prefix))
        .cloned()
        .collect();
    flags.push(format!("{prefix}{value}"));
    flags
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_good_setup_passes_every_check() {
    let (sim, cluster) = set_up(&chart_rbac()).await;
    let flags = good_flags(&cluster, &sim, &sim.password);
    let (code, table) = check(&flags, "table");
    assert_eq!(code, 0, "{table}");
    assert!(!table.contains('✗'), "{table}");
    for line in table.lines().take_while(|l| !l.starts_with("all ")) {
        assert!(
            line.starts_with('✓') || line.starts_with("  "),
            "{line}\n{table}"
        );
    }
    let checked = check_json(&flags);
    assert_eq!(checked.code, 0);
    assert_eq!(checked.json["ok"], true, "{}", checked.stdout);
    for name in [
        "vCenter TLS",
        "vCenter login",
        "vCenter version",
        "CNS",
        "Datastores",
        "Cluster ID",
        "Driver CRD",
        "Driver syncer",
        "RBAC",
    ] {
        let line = checked.line(name);
        assert_eq!(line["ok"], true, "{name}: {}", checked.stdout);
        assert_eq!(line["warning"], false, "{name}: {}", checked.stdout);
    }
    let cert = sim.cert.as_ref().unwrap().display().to_string();
    let tls = checked.line("vCenter TLS")["detail"].as_str().unwrap();
    assert!(tls.contains(&cert), "names the CA file: {tls}");
    let datastore = &sim.datastores[0].name;
    let datastores = checked.line("Datastores")["detail"].as_str().unwrap();
    assert!(datastores.contains(datastore.as_str()), "{datastores}");
    assert!(
        !checked.stdout.contains(&sim.password),
        "shows the password"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_ca_fails_the_tls_line() {
    let (sim, cluster) = set_up(&chart_rbac()).await;
    let other = cluster.path("other-ca.pem");
    std::fs::write(&other, OTHER_CA).unwrap();
    let flags = with(
        &good_flags(&cluster, &sim, &sim.password),
        "vc-ca-file",
        other.display().to_string(),
    );
    let checked = check_json(&flags);
    assert_eq!(checked.code, 1, "{}", checked.stdout);
    let tls = checked.line("vCenter TLS");
    assert_eq!(tls["ok"], false, "{}", checked.stdout);
    assert!(
        tls["detail"]
            .as_str()
            .unwrap()
            .contains(&other.display().to_string())
    );
    assert!(
        tls["fix"]
            .as_str()
            .unwrap()
            .contains("wrong CA? set --vc-ca-file / vcenter.caBundle"),
        "{}",
        checked.stdout
    );
    // The Kubernetes side still passes.
    assert_eq!(checked.line("Cluster ID")["ok"], true, "{}", checked.stdout);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_fails_the_login_line_without_printing_it() {
    let (sim, cluster) = set_up(&chart_rbac()).await;
    let checked = check_json(&good_flags(&cluster, &sim, WRONG_PASSWORD));
    assert_eq!(checked.code, 1, "{}", checked.stdout);
    assert_eq!(
        checked.line("vCenter TLS")["ok"],
        true,
        "{}",
        checked.stdout
    );
    let login = checked.line("vCenter login");
    assert_eq!(login["ok"], false);
    assert!(
        login["fix"]
            .as_str()
            .unwrap()
            .starts_with("InvalidLogin: check the credentials Secret"),
        "{}",
        checked.stdout
    );
    assert!(
        !checked.stdout.contains(WRONG_PASSWORD),
        "{}",
        checked.stdout
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pv_on_a_missing_datastore_fails_the_datastores_line_naming_it() {
    let (sim, cluster) = set_up(&chart_rbac()).await;
    cluster
        .create_pv("pv-lost", "[NoSuchDatastore] kubevols/lost.vmdk")
        .await;
    let checked = check_json(&good_flags(&cluster, &sim, &sim.password));
    assert_eq!(checked.code, 1, "{}", checked.stdout);
    assert_eq!(checked.failed(), ["Datastores"], "{}", checked.stdout);
    let detail = checked.line("Datastores")["detail"].as_str().unwrap();
    assert!(detail.contains("NoSuchDatastore"), "{detail}");
    assert!(!detail.contains(&sim.datastores[0].name), "{detail}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_drivers_other_cluster_id_fails_the_cluster_id_line() {
    let (sim, cluster) = set_up(&chart_rbac()).await;
    let config_map: ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "vsphere-csi-cluster-id", "namespace": "vmware-system-csi"},
        "data": {"clusterID": "driver-other-id"},
        "immutable": true
    }))
    .unwrap();
    Api::<ConfigMap>::namespaced(cluster.client.clone(), "vmware-system-csi")
        .create(&PostParams::default(), &config_map)
        .await
        .unwrap();
    let checked = check_json(&good_flags(&cluster, &sim, &sim.password));
    assert_eq!(checked.code, 1, "{}", checked.stdout);
    assert_eq!(checked.failed(), ["Cluster ID"], "{}", checked.stdout);
    let line = checked.line("Cluster ID");
    assert!(line["detail"].as_str().unwrap().contains("driver-other-id"));
    assert!(line["fix"].as_str().unwrap().contains("driver-other-id"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_chart_rbac_without_one_rule_fails_an_rbac_line_naming_it() {
    let (rule, _) = chart_rules()
        .into_iter()
        .find(|(_, rule)| {
            // The daemon's own rule, not the reader role's (which also names the resource).
            rule["resources"] == serde_json::json!(["volumemigrations/status"])
        })
        .expect("the chart grants volumemigrations/status");
    let (sim, cluster) = set_up(&chart_rbac_without(&rule)).await;
    let checked = check_json(&good_flags(&cluster, &sim, &sim.password));
    assert_eq!(checked.code, 1, "{}", checked.stdout);
    assert_eq!(checked.failed(), ["RBAC"; 3], "{}", checked.stdout);
    let lines = checked.lines("RBAC");
    for (line, verb) in lines.iter().zip(["get", "patch", "update"]) {
        assert_eq!(
            line["detail"],
            format!("cannot {verb} volumemigrations.volmig.io/status (cluster-wide)"),
            "{}",
            checked.stdout
        );
        assert!(
            line["fix"]
                .as_str()
                .unwrap()
                .contains("resources: [\"volumemigrations/status\"]"),
            "{}",
            checked.stdout
        );
    }
}
