//! `volmig check` as an admin runs it (docs/operations.md, "Preflight: `volmig check`"):
//!
//! - in the pod, with the documented command (`kubectl -n volmig exec deploy/volmig --
//!   volmig check`): the argv after `--` taken from the docs, the environment exactly as
//!   the chart's rendered Deployment gives it (`$(POD_NAME)` and `fieldRef` resolved as
//!   the kubelet does) and the Deployment's Secret and ConfigMap volumes at their
//!   mountPaths (a private mount namespace puts them over `/etc`, where the chart mounts
//!   them). The one stand-in is `VOLMIG_KUBECONFIG`, a kubeconfig with the ServiceAccount's
//!   token, for the in-cluster config (the API test server speaks plain HTTP);
//! - from a workstation as the admin: `--service-account` reviews the ServiceAccount's
//!   rights (SubjectAccessReview), a missing rule is ✗ with the rule to add; without it
//!   the caller's own rights are reviewed, with a warning;
//! - with the API server unreachable: one line says so, no RBAC line.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "test code: failures should panic"
)]

#[path = "support/e2e.rs"]
mod e2e;
#[path = "support/vcsim.rs"]
mod vcsim;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use e2e::{CHART_NAMESPACE, Cluster, chart_rbac, chart_rbac_without, chart_rules, helm};
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use vcsim::{Vcsim, VcsimOptions};

const CLUSTER_ID: &str = "check-in-pod";
const CREDENTIALS_SECRET: &str = "vcenter-credentials";
const POD_NAME: &str = "volmig-6f7d8c9b5-k2x4p";

/// The documented in-pod command: the argv after `--` of the `kubectl ... exec
/// deploy/volmig -- volmig check` line of docs/operations.md.
fn documented_in_pod_command() -> Vec<String> {
    let docs = helm::read_repo_file("docs/operations.md");
    let line = docs
        .lines()
        .find(|l| l.contains("exec deploy/volmig --") && l.contains("volmig check"))
        .expect("docs/operations.md documents `kubectl exec deploy/volmig -- volmig check`");
    let command = line.split_once(" -- ").unwrap().1;
    let command = command.split('#').next().unwrap();
    let argv: Vec<String> = command.split_whitespace().map(str::to_owned).collect();
    assert_eq!(argv, ["volmig", "check"], "the documented command: {line}");
    argv
}

/// The simulator (one vmdk), the API test server with `identity`, the driver's CRD, a PV
/// and the credentials Secret the chart's `existingSecret` names.
async fn set_up(identity: &[Value]) -> (Vcsim, Cluster) {
    let (sim, cluster) = tokio::join!(
        Vcsim::start(VcsimOptions::default().vmdks(1)),
        Cluster::start_with_identity(identity)
    );
    cluster.install_driver_crd().await;
    cluster
        .create_pv("pv-good", &sim.vmdk_path("kubevols", 1))
        .await;
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": CREDENTIALS_SECRET, "namespace": CHART_NAMESPACE},
        "stringData": {"credentials": format!("username: {}\npassword: {}\n", sim.username, sim.password)},
    }))
    .unwrap();
    Api::<Secret>::namespaced(cluster.client.clone(), CHART_NAMESPACE)
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    (sim, cluster)
}

/// The chart rendered as `chart_rbac` renders the identity, for the simulator.
fn render_for(sim: &Vcsim) -> helm::Rendered {
    let ca = sim.cert.as_ref().expect("the harness serves https");
    helm::render(&[
        "--set",
        "leaderElection.leaseNamespace=kube-system",
        "--set-string",
        &format!("vcenter.url={}", sim.url),
        "--set-string",
        &format!("clusterId={CLUSTER_ID}"),
        "--set-string",
        &format!("vcenter.credentials.existingSecret={CREDENTIALS_SECRET}"),
        "--set-file",
        &format!("vcenter.caBundle.pem={}", ca.display()),
        "--set-string",
        "vcenter.requestTimeout=20s",
    ])
}

/// The container's env as the kubelet resolves it: `fieldRef: metadata.name` is the pod's
/// name, `$(VAR)` in a value is an earlier variable's value.
fn pod_env(container: &Value) -> Vec<(String, String)> {
    let mut env: Vec<(String, String)> = Vec::new();
    for var in container["env"].as_array().expect("env") {
        let name = var["name"].as_str().unwrap().to_owned();
        let value = match var["value"].as_str() {
            Some(value) => {
                let mut value = value.to_owned();
                for (earlier, resolved) in &env {
                    value = value.replace(&format!("$({earlier})"), resolved);
                }
                value
            }
            None => {
                assert_eq!(
                    var["valueFrom"]["fieldRef"]["fieldPath"], "metadata.name",
                    "a valueFrom this test does not resolve: {var}"
                );
                POD_NAME.to_owned()
            }
        };
        env.push((name, value));
    }
    env
}

/// Writes the Secret and ConfigMap volumes the container mounts under `/etc` into
/// `root` (standing for `/etc`): Secrets as the API serves them, ConfigMaps as the chart
/// renders them, each item's key at its path.
async fn materialize_mounts(rendered: &helm::Rendered, cluster: &Cluster, root: &Path) {
    let deployment = rendered.deployment();
    let pod = &deployment["spec"]["template"]["spec"];
    let container = helm::volmig_container(deployment);
    let secrets: Api<Secret> = Api::namespaced(cluster.client.clone(), CHART_NAMESPACE);
    for mount in container["volumeMounts"].as_array().expect("volumeMounts") {
        let path = mount["mountPath"].as_str().unwrap();
        let Some(relative) = path.strip_prefix("/etc/") else {
            assert_eq!(path, "/tmp", "a mount this test does not place: {mount}");
            continue;
        };
        let volume = pod["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|v| v["name"] == mount["name"])
            .unwrap_or_else(|| panic!("no volume for {mount}"));
        let dir = root.join(relative);
        std::fs::create_dir_all(&dir).unwrap();
        let (items, data): (&Value, Value) = if volume["secret"].is_object() {
            let name = volume["secret"]["secretName"].as_str().unwrap();
            let secret = secrets.get(name).await.unwrap();
            let data = secret
                .data
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| (k, json!(String::from_utf8(v.0).unwrap())))
                .collect();
            (&volume["secret"]["items"], Value::Object(data))
        } else {
            let name = volume["configMap"]["name"].as_str().unwrap();
            let config_map = rendered.get("ConfigMap", name);
            (&volume["configMap"]["items"], config_map["data"].clone())
        };
        for item in items.as_array().expect("items") {
            let key = item["key"].as_str().unwrap();
            let content = data[key]
                .as_str()
                .unwrap_or_else(|| panic!("{key} missing from {volume}"));
            std::fs::write(dir.join(item["path"].as_str().unwrap()), content).unwrap();
        }
    }
}

/// Runs `argv` with exactly `env` (plus PATH, on which `volmig` is the binary under
/// test) in a private mount namespace where `etc` is mounted over `/etc`.
fn run_in_pod(
    cluster: &Cluster,
    etc: &Path,
    env: &[(String, String)],
    argv: &[String],
) -> (i32, String) {
    let bin = cluster.path("pod-bin");
    std::fs::create_dir_all(&bin).unwrap();
    let link = bin.join("volmig");
    if !link.exists() {
        std::os::unix::fs::symlink(e2e::volmig_bin(), &link).unwrap();
    }
    let out = Command::new("unshare")
        .args(["--user", "--map-root-user", "--mount", "--", "sh", "-c"])
        .arg(r#"mount --bind "$0" /etc && exec "$@""#)
        .arg(etc)
        .args(argv)
        .env_clear()
        .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
        .envs(env.iter().map(|(k, v)| (k, v)))
        .env("VOLMIG_KUBECONFIG", &cluster.daemon_kubeconfig)
        .stdin(Stdio::null())
        .output()
        .expect("run unshare (util-linux)");
    (
        out.status.code().unwrap_or(-1),
        format!(
            "{}\n--- stderr:\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_in_pod_check_passes_with_the_charts_env_and_mounts() {
    let argv = documented_in_pod_command();
    let (sim, cluster) = set_up(&chart_rbac()).await;
    let rendered = render_for(&sim);
    let container = helm::volmig_container(rendered.deployment());
    assert_eq!(
        helm::strings(&container["args"]),
        ["run"],
        "settings are env, not args: `volmig check` in the pod reads them"
    );
    let env = pod_env(container);
    let etc: PathBuf = cluster.path("pod-etc");
    materialize_mounts(&rendered, &cluster, &etc).await;
    let (code, output) = run_in_pod(&cluster, &etc, &env, &argv);
    assert_eq!(code, 0, "{output}");
    for line in output.lines().take_while(|l| !l.starts_with("all ")) {
        assert!(line.starts_with('✓'), "{line}\n{output}");
    }
    for expected in [
        "✓ vCenter TLS",
        "✓ vCenter login",
        "✓ Datastores",
        "✓ Cluster ID",
        "/etc/volmig/vcenter-ca/ca.crt",
        "granted to system:serviceaccount:volmig:volmig",
    ] {
        assert!(output.contains(expected), "{expected}: {output}");
    }
}

/// Runs `volmig check -o json` with `flags` and no `VOLMIG_*` from the test's environment.
fn check_json(flags: &[String]) -> (i32, Value, String) {
    let out = Command::new(e2e::volmig_bin())
        .args(["check", "-o", "json"])
        .args(flags)
        .env_remove("VOLMIG_VC_USERNAME")
        .env_remove("VOLMIG_VC_PASSWORD")
        .env_remove("VOLMIG_SERVICE_ACCOUNT")
        .stdin(Stdio::null())
        .output()
        .expect("run volmig check");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let json = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {stdout}\n--- stderr:\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().unwrap_or(-1), json, stdout)
}

/// The lines named `name`.
fn lines<'a>(json: &'a Value, name: &str) -> Vec<&'a Value> {
    json["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["name"] == name)
        .collect()
}

/// Flags of a workstation run as the admin (the test server's admin kubeconfig).
fn admin_flags(cluster: &Cluster, sim: &Vcsim) -> Vec<String> {
    let credentials = cluster.path("credentials");
    std::fs::write(
        &credentials,
        format!("username: {}\npassword: {}\n", sim.username, sim.password),
    )
    .unwrap();
    vec![
        format!("--kubeconfig={}", cluster.kubeconfig.display()),
        format!("--vc-url={}", sim.url),
        format!("--vc-credentials-file={}", credentials.display()),
        format!("--vc-ca-file={}", sim.cert.as_ref().unwrap().display()),
        format!("--cluster-id={CLUSTER_ID}"),
        "--lease-namespace=kube-system".to_owned(),
        "--vc-request-timeout=20s".to_owned(),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_reviews_the_service_accounts_rights_and_sees_a_missing_rule() {
    let (rule, _) = chart_rules()
        .into_iter()
        .find(|(_, rule)| rule["resources"] == json!(["volumemigrations/status"]))
        .expect("the chart grants volumemigrations/status");
    let (sim, cluster) = set_up(&chart_rbac_without(&rule)).await;
    let mut flags = admin_flags(&cluster, &sim);

    // As the admin, without naming the ServiceAccount: the admin may do everything, and
    // the check says whose rights it reviewed.
    let (code, json, stdout) = check_json(&flags);
    assert_eq!(code, 0, "{stdout}");
    let rbac = lines(&json, "RBAC");
    assert_eq!(rbac.len(), 2, "{stdout}");
    assert_eq!(rbac[0]["warning"], true, "{stdout}");
    assert!(
        rbac[0]["fix"]
            .as_str()
            .unwrap()
            .contains("--service-account"),
        "{stdout}"
    );

    // Naming it: one SubjectAccessReview per permission, for the ServiceAccount.
    flags.push(format!("--service-account={CHART_NAMESPACE}/volmig"));
    let (code, json, stdout) = check_json(&flags);
    assert_eq!(code, 1, "{stdout}");
    let rbac = lines(&json, "RBAC");
    assert_eq!(rbac.len(), 3, "{stdout}");
    for (line, verb) in rbac.iter().zip(["get", "patch", "update"]) {
        assert_eq!(line["ok"], false, "{stdout}");
        assert_eq!(
            line["detail"],
            format!("cannot {verb} volumemigrations.volmig.io/status (cluster-wide)")
        );
        assert_eq!(
            line["fix"],
            format!(
                "add the rule {{apiGroups: [\"volmig.io\"], resources: \
                 [\"volumemigrations/status\"], verbs: [\"{verb}\"]}} to ClusterRole <release>"
            )
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_api_server_is_one_line() {
    let sim = Vcsim::start(VcsimOptions::default().vmdks(1)).await;
    let dir = tempfile::tempdir().unwrap();
    // A port nothing listens on: bound, then released.
    let port = e2e::free_port();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: http://127.0.0.1:{port}\ncontexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\nusers:\n- name: u\n  user:\n    token: t\n"
        ),
    )
    .unwrap();
    let credentials = dir.path().join("credentials");
    std::fs::write(
        &credentials,
        format!("username: {}\npassword: {}\n", sim.username, sim.password),
    )
    .unwrap();
    let (code, json, stdout) = check_json(&[
        format!("--kubeconfig={}", kubeconfig.display()),
        format!("--vc-url={}", sim.url),
        format!("--vc-credentials-file={}", credentials.display()),
        format!("--vc-ca-file={}", sim.cert.as_ref().unwrap().display()),
        "--service-account=volmig/volmig".to_owned(),
        "--kube-request-timeout=5s".to_owned(),
    ]);
    assert_eq!(code, 1, "{stdout}");
    assert!(lines(&json, "RBAC").is_empty(), "{stdout}");
    let api = lines(&json, "Kubernetes API");
    assert_eq!(api.len(), 1, "{stdout}");
    assert!(
        api[0]["detail"]
            .as_str()
            .unwrap()
            .starts_with("cannot reach the API server"),
        "{stdout}"
    );
    let failed: Vec<&str> = json["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["ok"] == false)
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    // The datastores of the PVs need the PV list: not checked.
    assert_eq!(failed, ["Datastores", "Kubernetes API"], "{stdout}");
}
