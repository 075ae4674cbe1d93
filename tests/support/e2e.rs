//! End-to-end harness: a Kubernetes API (a real kube-apiserver + etcd of the test's own,
//! see [`controlplane`]; the repository's API test server for tests that need its
//! counters or faults; or a real cluster when `VOLMIG_E2E_KUBECONFIG` is set), the vCenter
//! simulator, and the real `volmig` binary as a child process.
//!
//! `VOLMIG_E2E_BIN=<path>` runs another `volmig` binary instead of this build's (e.g. one
//! built from an older commit, to see a test fail against the unfixed code). Every spawn
//! goes through [`volmig_bin`] and [`compat_args`]: with the variable set, flags that
//! `<bin> <subcommand> --help` does not list are dropped (with their value) and named on
//! stderr; unset, the arguments are passed unchanged.
#![allow(dead_code)] // each test crate uses a different subset
#![allow(
    clippy::expect_used,
    reason = "test harness: a failed set-up step should fail the test loudly"
)]

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, PersistentVolume};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, Command};
use volmig::volume_migration::{Phase, VolumeMigration};

use super::vcsim::Vcsim;

#[path = "controlplane.rs"]
pub mod controlplane;
#[path = "helm.rs"]
pub mod helm;

/// Which Kubernetes API a [`Cluster`] runs on.
enum Backend {
    /// A kube-apiserver + etcd of this test's own ([`controlplane::ControlPlane`]).
    ControlPlane,
    /// The in-process API test server.
    TestServer,
    /// An existing cluster (`VOLMIG_E2E_KUBECONFIG`).
    Kubeconfig(PathBuf),
}

/// Where the Kubernetes API comes from.
pub struct Cluster {
    /// The in-process test server; `None` on the real control plane or an existing cluster.
    pub server: Option<kube_testserver::TestServer>,
    /// The real control plane this test started; `None` on the test server or an existing
    /// cluster.
    pub control_plane: Option<controlplane::ControlPlane>,
    /// Kubeconfig file for the daemon and kubectl.
    pub kubeconfig: PathBuf,
    /// The kubeconfig [`Daemon::spawn`] gives volmig: the chart's ServiceAccount (see
    /// [`Cluster::install_chart_identity`]) unless `VOLMIG_E2E_IDENTITY=admin`;
    /// [`Cluster::kubeconfig`] on an existing cluster.
    pub daemon_kubeconfig: PathBuf,
    /// A client for the test itself.
    pub client: kube::Client,
    /// Scratch directory (logs, credentials), removed on drop.
    pub dir: tempfile::TempDir,
}

impl Cluster {
    /// Starts a real control plane of this test's own (panics naming `make controlplane`
    /// when it is not built), or connects to `VOLMIG_E2E_KUBECONFIG`, or starts the API
    /// test server when `VOLMIG_E2E_API=test-server`; installs the CRD,
    /// the `kube-system` namespace and the chart's identity (unless
    /// `VOLMIG_E2E_IDENTITY=admin`, or on an existing cluster).
    pub async fn start() -> Cluster {
        let backend = match std::env::var_os("VOLMIG_E2E_KUBECONFIG") {
            Some(path) => Backend::Kubeconfig(path.into()),
            None => own_api(),
        };
        Cluster::start_on(backend).await
    }

    /// Like [`Cluster::start`], but always on the in-process API test server, for tests
    /// that need what only it offers: write and 403 counters, injected faults, held
    /// replies.
    pub async fn start_test_server() -> Cluster {
        Cluster::start_on(Backend::TestServer).await
    }

    async fn start_on(backend: Backend) -> Cluster {
        let external = matches!(backend, Backend::Kubeconfig(_));
        let mut cluster = Cluster::connect(backend).await;
        if !external && chart_identity_enabled() {
            cluster.install_chart_identity(&chart_rbac());
        }
        cluster
    }

    /// Like [`Cluster::start`], but always on an API server of this test's own (even
    /// when `VOLMIG_E2E_KUBECONFIG` is set) and with `objects` (e.g.
    /// [`chart_rbac_without`]) as the daemon's identity, whatever `VOLMIG_E2E_IDENTITY`
    /// says.
    pub async fn start_with_identity(objects: &[serde_json::Value]) -> Cluster {
        let mut cluster = Cluster::connect(own_api()).await;
        cluster.install_chart_identity(objects);
        cluster
    }

    /// [`Cluster::start_with_identity`] on the in-process API test server (for its 403
    /// counters).
    pub async fn start_test_server_with_identity(objects: &[serde_json::Value]) -> Cluster {
        let mut cluster = Cluster::connect(Backend::TestServer).await;
        cluster.install_chart_identity(objects);
        cluster
    }

    /// Starts `backend` (or connects to it); installs the CRD and the `kube-system`
    /// namespace. The daemon's identity is the admin's.
    async fn connect(backend: Backend) -> Cluster {
        let dir = tempfile::Builder::new()
            .prefix("volmig-e2e-")
            .tempdir()
            .expect("temp dir");
        let (server, control_plane, kubeconfig) = match backend {
            Backend::Kubeconfig(path) => (None, None, path),
            Backend::ControlPlane => {
                let plane = controlplane::ControlPlane::start().await;
                let path = plane.kubeconfig.clone();
                (None, Some(plane), path)
            }
            Backend::TestServer => {
                let server = kube_testserver::TestServer::start(Default::default())
                    .await
                    .expect("start the API test server");
                let path = dir.path().join("kubeconfig");
                server.write_kubeconfig(&path).expect("write kubeconfig");
                (Some(server), None, path)
            }
        };
        let kube = volmig::cli::KubeArgs {
            kubeconfig: Some(kubeconfig.clone()),
            kube_request_timeout: volmig::k8s::deadline::DEFAULT_KUBE_REQUEST_TIMEOUT,
        };
        let client = volmig::daemon::kube_client(&kube).await.expect("client");
        let cluster = Cluster {
            server,
            control_plane,
            daemon_kubeconfig: kubeconfig.clone(),
            kubeconfig,
            client,
            dir,
        };
        cluster.install_crd().await;
        let namespaces: Api<Namespace> = Api::all(cluster.client.clone());
        // kube-system for volmig's own Lease; the CSI driver's namespace for the driver
        // syncer's Lease, which volmig holds itself while no driver is installed.
        for name in ["kube-system", "vmware-system-csi"] {
            let ns: Namespace =
                serde_json::from_value(serde_json::json!({"metadata": {"name": name}}))
                    .expect("namespace");
            let _ = namespaces.create(&PostParams::default(), &ns).await;
        }
        cluster
    }

    /// Applies `objects` (from [`chart_rbac`] or [`chart_rbac_without`]) with kubectl as the
    /// admin, mints a token for the chart's ServiceAccount with `kubectl create token`, and
    /// makes [`Daemon::spawn`] use a kubeconfig with that token, the daemon's only identity.
    /// On the test server or a control plane of this test's own, never on an existing
    /// cluster.
    pub fn install_chart_identity(&mut self, objects: &[serde_json::Value]) {
        assert!(
            self.server.is_some() || self.control_plane.is_some(),
            "the chart identity is installed on this test's own API server only"
        );
        let namespace: Namespace = serde_json::from_value(
            serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": CHART_NAMESPACE}}),
        )
        .expect("namespace");
        // The CSI driver's namespace: the chart's Role for its syncer Lease lives there.
        let driver_namespace = serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "vmware-system-csi"}});
        let mut items = vec![
            serde_json::to_value(namespace).expect("namespace json"),
            driver_namespace,
        ];
        items.extend(objects.iter().cloned());
        let list = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": items});
        self.kubectl_ok(&["apply", "-f", "-"], Some(&list.to_string()));
        let token = self.kubectl_ok(
            &[
                "-n",
                CHART_NAMESPACE,
                "create",
                "token",
                CHART_SERVICE_ACCOUNT,
                "--duration",
                "24h",
            ],
            None,
        );
        let yaml = match (&self.server, &self.control_plane) {
            (Some(server), _) => server.kubeconfig_yaml_with_token(token.trim()),
            (None, Some(plane)) => plane.kubeconfig_yaml_with_token(token.trim()),
            (None, None) => unreachable!("asserted above"),
        };
        let path = self.path("volmig-sa-kubeconfig");
        std::fs::write(&path, yaml).expect("write the ServiceAccount kubeconfig");
        self.daemon_kubeconfig = path;
    }

    /// Runs the real kubectl as the admin against this cluster; panics on failure.
    pub fn kubectl_ok(&self, args: &[&str], stdin: Option<&str>) -> String {
        let mut cmd = std::process::Command::new("/usr/bin/kubectl");
        cmd.env("KUBECONFIG", &self.kubeconfig)
            .env("HOME", self.dir.path())
            .args(args);
        let output = helm::with_stdin(&mut cmd, stdin);
        assert!(
            output.status.success(),
            "kubectl {args:?}: {}",
            helm::describe(&output)
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    }

    /// The 403s the API test server answered so far, by message (empty on a real cluster).
    pub fn forbidden(&self) -> std::collections::BTreeMap<String, u64> {
        self.server
            .as_ref()
            .map(|s| s.stats().forbidden_messages)
            .unwrap_or_default()
    }

    async fn install_crd(&self) {
        let yaml = std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/crds/volumemigrations.yaml"
        ))
        .expect("read CRD");
        let crd: CustomResourceDefinition = serde_saphyr::from_str(&yaml).expect("parse CRD");
        let api: Api<CustomResourceDefinition> = Api::all(self.client.clone());
        match api.create(&PostParams::default(), &crd).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => panic!("install CRD: {e}"),
        }
        // A real API server serves a new CRD a moment after the create.
        let migrations = self.migrations();
        wait_for(Duration::from_secs(30), "the CRD served", || async {
            migrations
                .list(&ListParams::default().limit(1))
                .await
                .ok()
                .map(drop)
        })
        .await;
    }

    /// Installs the vSphere CSI driver's `CnsVSphereVolumeMigration` CRD (as the admin) and
    /// waits until it is served.
    pub async fn install_driver_crd(&self) {
        use volmig::k8s::driver_cache::CnsVSphereVolumeMigration;
        let yaml = volmig::k8s::driver_cache::crd_yaml().expect("render the driver's CRD");
        let crd: CustomResourceDefinition = serde_saphyr::from_str(&yaml).expect("parse CRD");
        Api::<CustomResourceDefinition>::all(self.client.clone())
            .create(&PostParams::default(), &crd)
            .await
            .expect("install the driver's CRD");
        let api: Api<CnsVSphereVolumeMigration> = Api::all(self.client.clone());
        wait_for(
            Duration::from_secs(30),
            "the driver's CRD served",
            || async { api.list(&ListParams::default()).await.ok().map(drop) },
        )
        .await;
    }

    /// Writes made to the API test server so far (`None` on a real cluster).
    pub fn writes(&self) -> Option<u64> {
        self.server.as_ref().map(|s| s.stats().writes)
    }

    /// The VolumeMigration API.
    pub fn migrations(&self) -> Api<VolumeMigration> {
        Api::all(self.client.clone())
    }

    /// The PV API.
    pub fn pvs(&self) -> Api<PersistentVolume> {
        Api::all(self.client.clone())
    }

    /// The in-process test server, for what only it offers (injected faults, held
    /// replies, counters); panics against a real API server (start the cluster with
    /// [`Cluster::start_test_server`]).
    pub fn test_server(&self) -> &kube_testserver::TestServer {
        self.server
            .as_ref()
            .expect("needs the in-process API test server (Cluster::start_test_server)")
    }

    /// Creates an in-tree vSphere PV (Retain) for `volume_path`.
    pub async fn create_pv(&self, name: &str, volume_path: &str) {
        let pv: PersistentVolume = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadWriteOnce"],
                "persistentVolumeReclaimPolicy": "Retain",
                "vsphereVolume": {"volumePath": volume_path, "fsType": "ext4"}
            }
        }))
        .expect("PV");
        self.pvs()
            .create(&PostParams::default(), &pv)
            .await
            .unwrap_or_else(|e| panic!("create PV {name}: {e}"));
    }

    /// Creates pod `name` in `default` with one inline vSphere volume `data` at `raw`.
    pub async fn create_pod(&self, name: &str, raw: &str) {
        let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "default"},
            "spec": {
                "containers": [{"name": "app", "image": "registry.example/app:1",
                                "volumeMounts": [{"name": "data", "mountPath": "/data"}]}],
                "volumes": [{"name": "data",
                             "vsphereVolume": {"volumePath": raw, "fsType": "ext4"}}]
            }
        }))
        .expect("pod");
        Api::<k8s_openapi::api::core::v1::Pod>::namespaced(self.client.clone(), "default")
            .create(&PostParams::default(), &pod)
            .await
            .unwrap_or_else(|e| panic!("create pod {name}: {e}"));
    }

    /// Creates a PV that is not a vSphere volume.
    pub async fn create_nfs_pv(&self, name: &str) {
        let pv: PersistentVolume = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadWriteMany"],
                "nfs": {"server": "nfs.example", "path": format!("/exports/{name}")}
            }
        }))
        .expect("PV");
        self.pvs()
            .create(&PostParams::default(), &pv)
            .await
            .unwrap_or_else(|e| panic!("create PV {name}: {e}"));
    }

    /// Deletes a PV.
    pub async fn delete_pv(&self, name: &str) {
        self.pvs()
            .delete(name, &DeleteParams::default())
            .await
            .unwrap_or_else(|e| panic!("delete PV {name}: {e}"));
    }

    /// Every VolumeMigration.
    pub async fn list_migrations(&self) -> Vec<VolumeMigration> {
        self.migrations()
            .list(&ListParams::default())
            .await
            .expect("list VolumeMigrations")
            .items
    }

    /// The VolumeMigration of `volume_path`, if any.
    pub async fn migration(&self, volume_path: &str) -> Option<VolumeMigration> {
        let name = volmig::VolumePath::parse(volume_path)
            .expect("valid path")
            .object_name();
        self.migrations().get_opt(&name).await.expect("get")
    }

    /// Events whose reason is `reason`, as (involved object name, message).
    pub async fn events(&self, reason: &str) -> Vec<(String, String)> {
        let api: Api<k8s_openapi::api::events::v1::Event> = Api::all(self.client.clone());
        api.list(&ListParams::default())
            .await
            .expect("list events")
            .items
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some(reason))
            .map(|e| {
                (
                    e.regarding.and_then(|r| r.name).unwrap_or_default(),
                    e.note.unwrap_or_default(),
                )
            })
            .collect()
    }

    /// A scratch file path.
    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let forbidden = self.forbidden();
        if !forbidden.is_empty() {
            eprintln!("--- 403 answers of the API test server (count, message) ---");
            for (message, count) in &forbidden {
                eprintln!("{count:>6}  {message}");
            }
        }
    }
}

/// The switch: `VOLMIG_E2E_API=test-server` runs the tests of [`Cluster::start`] and
/// [`Cluster::start_with_identity`] on the API test server instead of a control plane of
/// their own.
pub const API_ENV: &str = "VOLMIG_E2E_API";

/// A control plane of the test's own, or the API test server when
/// `VOLMIG_E2E_API=test-server`: an explicit switch, to tell a finding of the real API
/// server from one of volmig by running the same test on both.
fn own_api() -> Backend {
    if std::env::var(API_ENV).is_ok_and(|v| v == "test-server") {
        Backend::TestServer
    } else {
        Backend::ControlPlane
    }
}

/// Namespace the chart is rendered for (its ServiceAccount lives there).
pub const CHART_NAMESPACE: &str = helm::NAMESPACE;
/// The chart's ServiceAccount (release `volmig`).
pub const CHART_SERVICE_ACCOUNT: &str = "volmig";
/// The switch: `VOLMIG_E2E_IDENTITY=admin` runs the daemon with the admin kubeconfig
/// instead of the chart's ServiceAccount.
pub const IDENTITY_ENV: &str = "VOLMIG_E2E_IDENTITY";

/// Whether [`Cluster::start`] installs the chart's identity for the daemon.
pub fn chart_identity_enabled() -> bool {
    std::env::var(IDENTITY_ENV).map_or(true, |v| v != "admin")
}

/// The kinds of the chart's identity: its ServiceAccount and RBAC.
pub const RBAC_KINDS: &[&str] = &[
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
];

/// The chart's ServiceAccount and RBAC objects, rendered once per process by the real helm
/// (`helm template volmig charts/volmig -n volmig`) with the Lease in `kube-system`, the
/// namespace [`Daemon::spawn`]'s volmig uses (its `--lease-namespace` default).
pub fn chart_rbac() -> Vec<serde_json::Value> {
    static RENDERED: std::sync::OnceLock<Vec<serde_json::Value>> = std::sync::OnceLock::new();
    RENDERED.get_or_init(|| chart_rbac_with(&[])).clone()
}

/// [`chart_rbac`] rendered with more `helm --set` arguments (`extra`).
pub fn chart_rbac_with(extra: &[&str]) -> Vec<serde_json::Value> {
    let mut args = vec!["--set", "leaderElection.leaseNamespace=kube-system"];
    args.extend_from_slice(extra);
    helm::render(&args)
        .objects
        .into_iter()
        .filter(|o| RBAC_KINDS.iter().any(|k| o["kind"] == *k))
        .collect()
}

/// A control plane of the test's own with the chart's identity rendered for hold mode
/// (`driver.holdSyncer=true`) as the daemon's, and the CSI driver's CRD installed.
pub async fn cluster_for_hold() -> Cluster {
    let cluster =
        Cluster::start_with_identity(&chart_rbac_with(&["--set", "driver.holdSyncer=true"])).await;
    cluster.install_driver_crd().await;
    cluster
}

/// Names one rule of the chart's RBAC: the role's kind and name and the rule's index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleId {
    /// `ClusterRole` or `Role`.
    pub kind: String,
    /// The role's name.
    pub role: String,
    /// Index in `rules`.
    pub index: usize,
}

impl std::fmt::Display for RuleId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{} rule {}", self.kind, self.role, self.index)
    }
}

/// Every rule of the chart's roles with its id, in rendering order.
pub fn chart_rules() -> Vec<(RuleId, serde_json::Value)> {
    chart_rbac()
        .iter()
        .filter(|o| o["kind"] == "ClusterRole" || o["kind"] == "Role")
        .flat_map(|role| {
            let kind = role["kind"].as_str().unwrap_or_default().to_string();
            let name = role["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            role["rules"]
                .as_array()
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .enumerate()
                .map(move |(index, rule)| {
                    (
                        RuleId {
                            kind: kind.clone(),
                            role: name.clone(),
                            index,
                        },
                        rule,
                    )
                })
        })
        .collect()
}

/// [`chart_rbac`] with one rule removed (panics when the chart has no such rule).
pub fn chart_rbac_without(rule: &RuleId) -> Vec<serde_json::Value> {
    let mut objects = chart_rbac();
    let role = objects
        .iter_mut()
        .find(|o| o["kind"] == rule.kind.as_str() && o["metadata"]["name"] == rule.role.as_str())
        .unwrap_or_else(|| panic!("the chart renders no {} {}", rule.kind, rule.role));
    let rules = role["rules"]
        .as_array_mut()
        .unwrap_or_else(|| panic!("{} {} has no rules", rule.kind, rule.role));
    assert!(rule.index < rules.len(), "no {rule}");
    rules.remove(rule.index);
    objects
}

/// The phase of a VolumeMigration.
pub fn phase(vm: &VolumeMigration) -> Option<Phase> {
    vm.status.as_ref().and_then(|s| s.phase)
}

/// The published volume ID of a VolumeMigration.
pub fn volume_id(vm: &VolumeMigration) -> Option<String> {
    vm.status.as_ref().and_then(|s| s.volume_id.clone())
}

/// Polls `check` every 200 ms until it returns `Some`, or panics after `timeout` with `what`.
pub async fn wait_for<T, F, Fut>(timeout: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A running `volmig run`.
pub struct Daemon {
    child: Child,
    /// Address of `/metrics`, `/healthz`, `/readyz`.
    pub http: String,
    /// Address of the probe listener (`--probe-addr`: `/healthz`, `/readyz`).
    pub probes: String,
    /// Its log file (stderr).
    pub log: PathBuf,
    /// What it printed on stdout (`volmig run --dry-run --once` prints its plan there).
    pub stdout: PathBuf,
}

/// A free loopback port.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

impl Daemon {
    /// Starts `volmig run` against `cluster` and `vcsim` with a fast full sync and no
    /// request rate limit, plus `extra` flags (later flags win).
    pub fn spawn(cluster: &Cluster, vcsim: &Vcsim, name: &str, extra: &[&str]) -> Daemon {
        Daemon::spawn_without(cluster, vcsim, name, &[], extra)
    }

    /// [`Daemon::spawn`] without the default flags named in `without` (e.g. `--cluster-id`).
    pub fn spawn_without(
        cluster: &Cluster,
        vcsim: &Vcsim,
        name: &str,
        without: &[&str],
        extra: &[&str],
    ) -> Daemon {
        let credentials = cluster.path("credentials");
        std::fs::write(
            &credentials,
            format!(
                "username: {}\npassword: {}\n",
                vcsim.username, vcsim.password
            ),
        )
        .expect("write credentials");
        let http = format!("127.0.0.1:{}", free_port());
        let probes = format!("127.0.0.1:{}", free_port());
        let log = cluster.path(&format!("{name}.log"));
        let log_file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .expect("log file");
        let stdout = cluster.path(&format!("{name}.stdout"));
        let stdout_file = std::fs::File::create(&stdout).expect("stdout file");
        let mut flags: Vec<(String, Option<String>)> = vec![
            (
                "--kubeconfig".into(),
                Some(cluster.daemon_kubeconfig.display().to_string()),
            ),
            ("--vc-url".into(), Some(vcsim.url.clone())),
            (
                "--vc-credentials-file".into(),
                Some(credentials.display().to_string()),
            ),
            ("--cluster-id".into(), Some("e2e-cluster".into())),
            ("--http-addr".into(), Some(http.clone())),
            ("--probe-addr".into(), Some(probes.clone())),
            ("--full-sync-interval".into(), Some("3s".into())),
            ("--vc-requests-per-second".into(), Some("10000".into())),
            // Short vCenter timeouts keep the in-flight grace (their sum) at 15 s, so a
            // create left in flight by a killed daemon is waited out quickly.
            ("--vc-request-timeout".into(), Some("5s".into())),
            ("--vc-task-timeout".into(), Some("10s".into())),
            ("--lease-holder-id".into(), Some(name.into())),
        ];
        if let Some(cert) = &vcsim.cert {
            flags.push(("--vc-ca-file".into(), Some(cert.display().to_string())));
        }
        flags.retain(|(f, _)| !without.contains(&f.as_str()));
        // `extra` is `--flag value` pairs or lone `--switch`es; a flag given there replaces
        // the default above (clap rejects repeated flags).
        let mut i = 0;
        while i < extra.len() {
            let flag = extra[i].to_string();
            let value = extra
                .get(i + 1)
                .filter(|v| !v.starts_with("--"))
                .map(|v| v.to_string());
            i += if value.is_some() { 2 } else { 1 };
            flags.retain(|(f, _)| *f != flag);
            flags.push((flag, value));
        }
        let mut args = vec!["run".to_string()];
        for (flag, value) in flags {
            args.push(flag);
            args.extend(value);
        }
        let child = Command::new(volmig_bin())
            .args(compat_args(args))
            .env(
                "VOLMIG_LOG",
                std::env::var("VOLMIG_E2E_LOG")
                    .unwrap_or_else(|_| "info,volmig=debug,kube_runtime=warn".into()),
            )
            .stdin(Stdio::null())
            .stdout(stdout_file)
            .stderr(log_file)
            .kill_on_drop(true)
            .spawn()
            .expect("spawn volmig");
        Daemon {
            child,
            http,
            probes,
            log,
            stdout,
        }
    }

    /// GET a path of the daemon's HTTP endpoint: (status, body).
    pub async fn get(&self, path: &str) -> Option<(u16, String)> {
        let mut stream = tokio::net::TcpStream::connect(&self.http).await.ok()?;
        let request = format!("GET {path} HTTP/1.0\r\nHost: {}\r\n\r\n", self.http);
        stream.write_all(request.as_bytes()).await.ok()?;
        let mut response = String::new();
        stream.read_to_string(&mut response).await.ok()?;
        let (head, body) = response.split_once("\r\n\r\n")?;
        let status = head.split_whitespace().nth(1)?.parse().ok()?;
        Some((status, body.to_owned()))
    }

    /// Waits for `/readyz` = 200.
    pub async fn wait_ready(&self) {
        wait_for(Duration::from_secs(60), "volmig /readyz", || async {
            matches!(self.get("/readyz").await, Some((200, _))).then_some(())
        })
        .await;
    }

    /// The value of the sample `name{labels}` in `/metrics` (exact label text).
    pub async fn metric(&self, sample: &str) -> Option<f64> {
        let (_, body) = self.get("/metrics").await?;
        body.lines()
            .filter(|l| !l.starts_with('#'))
            .find_map(|l| l.strip_prefix(sample)?.trim().parse().ok())
    }

    /// Sends SIGTERM and waits for the exit code (panics after `timeout`).
    pub async fn terminate(&mut self, timeout: Duration) -> std::process::ExitStatus {
        let pid = self.child.id().expect("running");
        let status = std::process::Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .expect("kill");
        assert!(status.success());
        tokio::time::timeout(timeout, self.child.wait())
            .await
            .unwrap_or_else(|_| panic!("volmig did not exit within {timeout:?} of SIGTERM"))
            .expect("wait")
    }

    /// Sends a signal by name (KILL, STOP, CONT).
    pub fn signal(&self, signal: &str) {
        if let Some(pid) = self.child.id() {
            let _ = std::process::Command::new("kill")
                .args([format!("-{signal}"), pid.to_string()])
                .status();
        }
    }

    /// The exit status if the daemon has exited on its own (without waiting).
    pub fn exit_status(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().expect("poll the daemon")
    }

    /// What it printed on stdout so far.
    pub fn stdout_text(&self) -> String {
        std::fs::read_to_string(&self.stdout).unwrap_or_default()
    }

    /// SIGKILL and reap.
    pub async fn kill(&mut self) {
        let _ = self.child.kill().await;
    }

    /// The log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// The switch: `VOLMIG_E2E_BIN=<path>` runs that `volmig` binary in the e2e tests.
pub const BIN_ENV: &str = "VOLMIG_E2E_BIN";

/// The `volmig` binary under test: `VOLMIG_E2E_BIN`, else this build's.
pub fn volmig_bin() -> PathBuf {
    std::env::var_os(BIN_ENV).map_or_else(
        || PathBuf::from(env!("CARGO_BIN_EXE_volmig")),
        PathBuf::from,
    )
}

/// `args` (subcommand first) for [`volmig_bin`]: unchanged unless `VOLMIG_E2E_BIN` is set;
/// then every `--flag` (`--flag value` or `--flag=value`) that `<bin> <subcommand> --help`
/// does not list is dropped, and the dropped ones are named on stderr.
pub fn compat_args(args: Vec<String>) -> Vec<String> {
    if std::env::var_os(BIN_ENV).is_none() {
        return args;
    }
    let Some(subcommand) = args.first().cloned() else {
        return args;
    };
    let known = known_flags(&subcommand);
    let mut kept = vec![subcommand.clone()];
    let mut dropped = Vec::new();
    let mut rest = args.into_iter().skip(1).peekable();
    while let Some(arg) = rest.next() {
        let flag = arg.split_once('=').map_or(arg.as_str(), |(f, _)| f);
        if !flag.starts_with("--") || known.contains(flag) {
            kept.push(arg);
            continue;
        }
        dropped.push(arg.clone());
        if !arg.contains('=')
            && let Some(value) = rest.next_if(|v| !v.starts_with("--"))
        {
            dropped.push(value);
        }
    }
    if !dropped.is_empty() {
        eprintln!(
            "{BIN_ENV}: {} {subcommand} does not know, dropped: {}",
            volmig_bin().display(),
            dropped.join(" ")
        );
    }
    kept
}

/// The `--flags` `<bin> <subcommand> --help` lists, once per subcommand.
fn known_flags(subcommand: &str) -> std::collections::BTreeSet<String> {
    static CACHE: std::sync::Mutex<
        std::collections::BTreeMap<String, std::collections::BTreeSet<String>>,
    > = std::sync::Mutex::new(std::collections::BTreeMap::new());
    let mut cache = CACHE.lock().unwrap_or_else(|e| e.into_inner());
    cache
        .entry(subcommand.to_owned())
        .or_insert_with(|| {
            let output = std::process::Command::new(volmig_bin())
                .args([subcommand, "--help"])
                .output()
                .expect("run <VOLMIG_E2E_BIN> <subcommand> --help");
            assert!(
                output.status.success(),
                "{} {subcommand} --help: {}",
                volmig_bin().display(),
                helm::describe(&output)
            );
            String::from_utf8_lossy(&output.stdout)
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
                .filter(|w| w.starts_with("--") && w.len() > 2)
                .map(str::to_owned)
                .collect()
        })
        .clone()
}

/// Path of the repository root.
pub fn repo_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Every daemon of every end-to-end test is checked for panics when it goes away (a panic
/// in a spawned task need not end the process; docs/security.md counts them: 0).
impl Drop for Daemon {
    fn drop(&mut self) {
        let log = self.log_text();
        if std::thread::panicking() {
            let tail: Vec<&str> = log.lines().rev().take(60).collect();
            eprintln!("--- last lines of {} ---", self.log.display());
            for line in tail.iter().rev() {
                eprintln!("{line}");
            }
        } else if let Some(line) = log.lines().find(|l| l.contains("panicked")) {
            panic!("volmig panicked ({}): {line}", self.log.display());
        }
    }
}
