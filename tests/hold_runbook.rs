//! The hold-mode runbook as written (docs/operations.md, "The migration runbook", case B):
//! its `sh` block is read from the document and each command run in order on the test
//! components — a real kube-apiserver of the test's own, the govmomi vCenter simulator
//! and the vSphere CSI driver double (tests/support/csi_driver/). `kubectl`, `helm` and
//! `volmig` commands run as written (the admin's kubeconfig, the chart from this
//! repository). Three steps have stand-ins, since no kubelet runs pods here:
//!
//! - after `helm install`, the Deployment's pod is `volmig run` with the env of the
//!   Deployment as installed, the ServiceAccount's token as its kubeconfig, its HTTP
//!   listeners on free loopback ports and a 2 s full sync (the driver double compresses
//!   its durations the same way);
//! - `kubectl exec deploy/volmig -- CMD` runs CMD with that same env and identity;
//! - `kubectl apply -f vsphere-csi-driver.yaml` starts the driver double with the cluster
//!   ID of the Secret's `csi-vsphere.conf`.
//!
//! A command the walk does not know fails the test: a changed runbook changes this test.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "test code: failures should panic"
)]

#[path = "support/csi_driver/mod.rs"]
mod csi_driver;
#[path = "support/e2e.rs"]
mod e2e;
#[path = "support/runbook.rs"]
mod runbook;
#[path = "support/vcsim.rs"]
mod vcsim;

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use csi_driver::{CsiDriverDouble, DriverOptions};
use e2e::{Cluster, helm};
use runbook::{decommission_commands, runbook_commands, words};
use serde_json::Value;
use vcsim::{Vcsim, VcsimOptions};

const CLUSTER_ID: &str = "hold-runbook";
const POD_NAME: &str = "volmig-5b8f9d7c6-q4w2e";
const PVS: usize = 4;

/// The test components and what the walk started.
struct Walk {
    cluster: Cluster,
    sim: Vcsim,
    /// The admin's working directory: `charts` (this repository's), `csi-vsphere.conf`.
    cwd: tempfile::TempDir,
    /// `volmig` on PATH.
    bin: std::path::PathBuf,
    /// The pod's env and identity, once the chart is installed.
    pod_env: Vec<(String, String)>,
    pod: Option<std::process::Child>,
    driver: Option<CsiDriverDouble>,
}

impl Drop for Walk {
    fn drop(&mut self) {
        if let Some(pod) = &mut self.pod {
            let _ = pod.kill();
            let _ = pod.wait();
        }
    }
}

impl Walk {
    async fn start() -> Walk {
        // volmig hands the Lease over only on 7.0 U1 and later (docs/design.md §8.2).
        let sim = Vcsim::start(VcsimOptions::default().vmdks(PVS).vcenter_version("7.0.3")).await;
        let plane = e2e::controlplane::ControlPlane::start().await;
        let kubeconfig = plane.kubeconfig.clone();
        let client = volmig::daemon::kube_client(&volmig::cli::KubeArgs {
            kubeconfig: Some(kubeconfig.clone()),
            kube_request_timeout: volmig::k8s::deadline::DEFAULT_KUBE_REQUEST_TIMEOUT,
        })
        .await
        .unwrap();
        // Nothing of volmig or the driver yet: the walk installs them.
        let cluster = Cluster {
            server: None,
            control_plane: Some(plane),
            daemon_kubeconfig: kubeconfig.clone(),
            kubeconfig,
            client,
            dir: tempfile::tempdir().unwrap(),
        };
        let cwd = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(
            helm::chart_dir().parent().unwrap(),
            cwd.path().join("charts"),
        )
        .unwrap();
        let bin = cwd.path().join("bin");
        std::fs::create_dir(&bin).unwrap();
        std::os::unix::fs::symlink(e2e::volmig_bin(), bin.join("volmig")).unwrap();
        Walk {
            cluster,
            sim,
            cwd,
            bin,
            pod_env: Vec::new(),
            pod: None,
            driver: None,
        }
    }

    /// The in-tree PVs the migration is about (`PVS` vmdks of the simulator).
    async fn create_pvs(&self) {
        let pvs: Vec<String> = (1..=PVS)
            .map(|n| self.sim.vmdk_path("kubevols", n))
            .collect();
        for (n, path) in pvs.iter().enumerate() {
            let pv: k8s_openapi::api::core::v1::PersistentVolume =
                serde_json::from_value(serde_json::json!({
                    "metadata": {"name": format!("pv-{n}")},
                    "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                             "vsphereVolume": {"volumePath": path, "fsType": "ext4"}}
                }))
                .unwrap();
            kube::Api::all(self.cluster.client.clone())
                .create(&kube::api::PostParams::default(), &pv)
                .await
                .unwrap();
        }
    }

    /// The driver's `csi-vsphere.conf`, as the admin writes it before step 2.
    fn write_csi_conf(&self) {
        let (host, port) = self.sim.host_port().rsplit_once(':').unwrap();
        let conf = format!(
            "[Global]\ncluster-id = \"{CLUSTER_ID}\"\n\n[VirtualCenter \"{host}\"]\nuser = \"{}\"\npassword = \"{}\"\nport = \"{port}\"\ndatacenters = \"{}\"\nca-file = \"{}\"\n",
            self.sim.username,
            self.sim.password,
            self.sim.datacenters.join(","),
            self.sim.cert.as_ref().unwrap().display()
        );
        std::fs::write(self.cwd.path().join("csi-vsphere.conf"), conf).unwrap();
    }

    /// Runs `words` in the admin's directory, with the admin's kubeconfig and `volmig`
    /// on PATH.
    fn admin(&self, words: &[String]) -> Output {
        Command::new(&words[0])
            .args(&words[1..])
            .current_dir(self.cwd.path())
            .env("KUBECONFIG", &self.cluster.kubeconfig)
            .env("HELM", helm::helm_bin())
            .env("PATH", self.path())
            .env_remove("VOLMIG_KUBECONFIG")
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("run {words:?}: {e}"))
    }

    fn path(&self) -> String {
        let helm_dir = helm::helm_bin().parent().unwrap().display().to_string();
        format!(
            "{}:{helm_dir}:{}",
            self.bin.display(),
            std::env::var("PATH").unwrap_or_default()
        )
    }

    fn admin_ok(&self, words: &[String]) -> String {
        let out = self.admin(words);
        assert!(out.status.success(), "{words:?}: {}", describe(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The pod of the installed Deployment: its env (fieldRef and `$(VAR)` resolved) and
    /// a kubeconfig with its ServiceAccount's token; then `volmig run` as its container.
    fn start_pod(&mut self) {
        let deployment: Value = serde_json::from_str(&self.admin_ok(&strings(&[
            "kubectl", "-n", "volmig", "get", "deploy", "volmig", "-o", "json",
        ])))
        .unwrap();
        let container = helm::volmig_container(&deployment);
        let mut env: Vec<(String, String)> = Vec::new();
        for var in container["env"].as_array().unwrap() {
            let name = var["name"].as_str().unwrap().to_owned();
            let value = match var["value"].as_str() {
                Some(v) => env
                    .iter()
                    .fold(v.to_owned(), |v, (k, r)| v.replace(&format!("$({k})"), r)),
                None => POD_NAME.to_owned(),
            };
            env.push((name, value));
        }
        let token = self.admin_ok(&strings(&[
            "kubectl",
            "-n",
            "volmig",
            "create",
            "token",
            "volmig",
            "--duration",
            "1h",
        ]));
        let plane = self.cluster.control_plane.as_ref().unwrap();
        let kubeconfig = self.cwd.path().join("pod-kubeconfig");
        std::fs::write(&kubeconfig, plane.kubeconfig_yaml_with_token(token.trim())).unwrap();
        env.push(("VOLMIG_KUBECONFIG".into(), kubeconfig.display().to_string()));
        // Stand-ins: loopback listeners on free ports, a compressed full sync.
        for (name, value) in [
            (
                "VOLMIG_HTTP_ADDR",
                format!("127.0.0.1:{}", e2e::free_port()),
            ),
            (
                "VOLMIG_PROBE_ADDR",
                format!("127.0.0.1:{}", e2e::free_port()),
            ),
            ("VOLMIG_FULL_SYNC_INTERVAL", "2s".to_owned()),
        ] {
            env.retain(|(k, _)| k != name);
            env.push((name.into(), value));
        }
        let args = helm::strings(&container["args"]);
        let log = std::fs::File::create(self.cwd.path().join("pod.log")).unwrap();
        self.pod = Some(
            Command::new(self.bin.join("volmig"))
                .args(&args)
                .env_clear()
                .env("PATH", self.path())
                .envs(env.iter().map(|(k, v)| (k, v)))
                .stdin(Stdio::null())
                .stdout(log.try_clone().unwrap())
                .stderr(log)
                .spawn()
                .unwrap(),
        );
        self.pod_env = env;
    }

    /// `kubectl exec deploy/volmig -- CMD`: CMD with the pod's env and identity.
    fn exec_in_pod(&self, argv: &[String]) -> Output {
        Command::new(&argv[0])
            .args(&argv[1..])
            .env_clear()
            .env("PATH", self.path())
            .envs(self.pod_env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .output()
            .unwrap()
    }

    fn pod_log(&self) -> String {
        std::fs::read_to_string(self.cwd.path().join("pod.log")).unwrap_or_default()
    }

    /// Runs one command of the runbook.
    async fn step(&mut self, command: &str) {
        let words = words(command);
        let w: Vec<&str> = words.iter().map(String::as_str).collect();
        match w.as_slice() {
            ["kubectl", "create", "namespace", ..] => {
                self.admin_ok(&words);
            }
            [
                "kubectl",
                ..,
                "create",
                "secret",
                "generic",
                _,
                "--from-file=csi-vsphere.conf",
            ] => {
                self.write_csi_conf();
                self.admin_ok(&words);
            }
            ["helm", "install", ..] => {
                self.admin_ok(&words);
                self.start_pod();
            }
            [
                "kubectl",
                "-n",
                "volmig",
                "exec",
                "deploy/volmig",
                "--",
                argv @ ..,
            ] => {
                let argv: Vec<String> = argv.iter().map(|s| (*s).to_owned()).collect();
                // The pod needs a moment to lead and take the syncer's Lease.
                let out = self
                    .retry(Duration::from_secs(60), |walk| walk.exec_in_pod(&argv))
                    .await;
                assert!(out.status.success(), "{command}: {}", describe(&out));
            }
            ["until", rest @ ..] => {
                let (test, body) = rest.split_at(rest.iter().position(|w| *w == "do").unwrap());
                let test: Vec<String> = test
                    .iter()
                    .map(|s| s.trim_end_matches(';').to_owned())
                    .collect();
                assert_eq!(body.first(), Some(&"do"), "{command}");
                let out = self
                    .retry(Duration::from_secs(120), |walk| walk.admin(&test))
                    .await;
                assert!(
                    out.status.success(),
                    "{command} never passed: {}\n{}",
                    describe(&out),
                    self.pod_log()
                );
            }
            ["kubectl", "apply", "-f", "vsphere-csi-driver.yaml"] => {
                let options = DriverOptions {
                    cluster_id: CLUSTER_ID.into(),
                    ..DriverOptions::default()
                };
                self.driver = Some(CsiDriverDouble::start(&self.cluster, &self.sim, options).await);
            }
            [
                "kubectl",
                "-n",
                "vmware-system-csi",
                "get",
                "lease",
                "vsphere-syncer",
                ..,
            ] => {
                let identity = DriverOptions::default().identity;
                let out = self
                    .retry(Duration::from_secs(90), |walk| {
                        let out = walk.admin(&words);
                        let holder = String::from_utf8_lossy(&out.stdout).trim().to_owned();
                        if holder == identity { out } else { failed(out) }
                    })
                    .await;
                assert!(
                    out.status.success(),
                    "the Lease never named the driver's pod: {}\n{}",
                    describe(&out),
                    self.pod_log()
                );
            }
            ["volmig", "report"] => {
                let out = self
                    .retry(Duration::from_secs(60), |walk| {
                        let out = walk.admin(&words);
                        let follows =
                            String::from_utf8_lossy(&out.stdout).contains("Registrar: follow");
                        if follows { out } else { failed(out) }
                    })
                    .await;
                assert!(
                    out.status.success(),
                    "{}\n{}",
                    describe(&out),
                    self.pod_log()
                );
            }
            _ => panic!("the runbook has a command this walk does not know: {command}"),
        }
    }

    /// Runs `attempt` until it succeeds or `timeout` passes; the last output.
    async fn retry(&self, timeout: Duration, attempt: impl Fn(&Walk) -> Output) -> Output {
        let deadline = Instant::now() + timeout;
        loop {
            let out = attempt(self);
            if out.status.success() || Instant::now() > deadline {
                return out;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
}

/// `out` marked as failed (exit status 1).
fn failed(mut out: Output) -> Output {
    use std::os::unix::process::ExitStatusExt as _;
    out.status = std::process::ExitStatus::from_raw(1 << 8);
    out
}

fn strings(words: &[&str]) -> Vec<String> {
    words.iter().map(|s| (*s).to_owned()).collect()
}

fn describe(out: &Output) -> String {
    format!(
        "exit {:?}\n{}\n--- stderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Walks case B of the runbook.
async fn migrate() -> Walk {
    let commands = runbook_commands();
    assert!(commands.len() >= 8, "{commands:#?}");
    let mut walk = Walk::start().await;
    walk.create_pvs().await;
    for command in &commands {
        walk.step(command).await;
    }
    walk
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hold_mode_runbook_migrates_before_the_driver_runs_and_hands_over() {
    let walk = migrate().await;
    // The one registrar: every vmdk registered once, by volmig. The driver's first term
    // starts cold: what it reached before its cache listed was sent again and answered
    // AlreadyRegistered (a figure, not a volume).
    let driver = walk
        .driver
        .as_ref()
        .expect("the runbook installs the driver");
    eprintln!(
        "figure: the driver's cold first term sent {} registrations",
        driver.creates()
    );
    assert_eq!(walk.sim.volumes().await.len(), PVS);
    assert!(walk.sim.duplicates().await.is_empty());
    for n in 1..=PVS {
        let path = walk.sim.vmdk_path("kubevols", n);
        assert!(
            driver.attach_lookup(&path).is_some(),
            "{path} not in the driver's cache"
        );
    }
    assert!(
        walk.pod_log().contains("handed over"),
        "the hand-over is logged: {}",
        walk.pod_log()
    );
}

/// After the migration, "Decommissioning volmig" as written: every command through `sh`
/// with the admin's kubeconfig. Stand-ins: scaling the Deployment to 0 also ends the pod's
/// process (no controller here does), and deleting a namespace does not wait (no
/// namespace controller finalizes it here). Nothing of the driver's or of CNS is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decommissioning_keeps_every_cns_volume_and_the_drivers_cache() {
    let mut walk = migrate().await;
    let cache_before = walk.driver.as_ref().unwrap().cache_snapshot();
    assert_eq!(cache_before.len(), PVS, "{cache_before:?}");
    let commands = decommission_commands();
    assert!(commands.len() >= 7, "{commands:#?}");
    for command in &commands {
        let mut command = command.clone();
        if command.contains("scale deploy/volmig --replicas=0")
            && let Some(pod) = &mut walk.pod
        {
            pod.kill().unwrap();
            pod.wait().unwrap();
        }
        if command.starts_with("kubectl delete namespace ") {
            command.push_str(" --wait=false");
        }
        let out = walk.admin(&strings(&["sh", "-c", &command]));
        assert!(out.status.success(), "{command}: {}", describe(&out));
    }
    // volmig's objects are gone, the CRD too.
    let crds = walk.admin_ok(&strings(&["kubectl", "get", "crd", "-o", "name"]));
    assert!(!crds.contains("volumemigrations.volmig.io"), "{crds}");
    assert!(
        crds.contains("cnsvspherevolumemigrations.cns.vmware.com"),
        "{crds}"
    );
    // CNS and the driver's cache as they were: the driver registers nothing.
    assert_eq!(walk.sim.volumes().await.len(), PVS);
    let driver = walk.driver.as_ref().unwrap();
    assert_eq!(driver.cache_snapshot(), cache_before);
    let objects = walk.admin_ok(&strings(&[
        "kubectl",
        "get",
        "cnsvspherevolumemigrations",
        "-o",
        "name",
    ]));
    assert_eq!(objects.lines().count(), PVS, "{objects}");
    // The driver's first term starts cold: a registration it sent before its cache listed
    // is answered AlreadyRegistered with the same ID (the volume count above holds).
    eprintln!(
        "figure: the driver's cold first term sent {} registrations",
        driver.creates()
    );
}
