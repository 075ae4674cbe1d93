//! Shared helpers: an in-process server with a kubeconfig and an isolated kubectl HOME.
#![allow(dead_code, clippy::expect_used, clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use kube_testserver::{Options, TestServer};

/// The real kubectl.
pub const KUBECTL: &str = "/usr/bin/kubectl";

/// A running server plus a private directory for kubeconfig and kubectl's cache.
pub struct Env {
    pub server: TestServer,
    pub dir: tempfile::TempDir,
    pub kubeconfig: PathBuf,
}

/// Starts a server with default options.
pub async fn start() -> Env {
    start_with(Options::default()).await
}

/// Starts a server with `opts`.
pub async fn start_with(opts: Options) -> Env {
    let server = TestServer::start(opts).await.expect("server starts");
    let dir = tempfile::tempdir().expect("tempdir");
    let kubeconfig = dir.path().join("kubeconfig");
    server
        .write_kubeconfig(&kubeconfig)
        .expect("kubeconfig written");
    Env {
        server,
        dir,
        kubeconfig,
    }
}

impl Env {
    /// A kubectl command with KUBECONFIG and HOME pointing into the private directory.
    pub fn kubectl_cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(KUBECTL);
        c.args(args)
            .env("KUBECONFIG", &self.kubeconfig)
            .env("HOME", self.dir.path())
            .stdin(Stdio::null());
        c
    }

    /// Runs kubectl and returns its output.
    pub fn kubectl(&self, args: &[&str]) -> Output {
        self.kubectl_cmd(args).output().expect("kubectl runs")
    }

    /// Runs kubectl, asserts success and returns stdout.
    pub fn kubectl_ok(&self, args: &[&str]) -> String {
        let out = self.kubectl(args);
        assert!(
            out.status.success(),
            "kubectl {args:?} failed: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Runs kubectl, asserts failure and returns stderr.
    pub fn kubectl_err(&self, args: &[&str]) -> String {
        let out = self.kubectl(args);
        assert!(
            !out.status.success(),
            "kubectl {args:?} unexpectedly succeeded"
        );
        String::from_utf8_lossy(&out.stderr).into_owned()
    }

    /// Writes `content` to a file in the private directory and returns its path.
    pub fn file(&self, name: &str, content: &str) -> String {
        let p = self.dir.path().join(name);
        std::fs::write(&p, content).expect("write file");
        p.display().to_string()
    }

    /// A kube-rs client for the server.
    pub async fn client(&self) -> kube::Client {
        kube::Client::try_from(self.config().await).expect("kube client")
    }

    /// A kube-rs client without kube's default retry of 429/503/504, so a test sees the
    /// injected answers themselves.
    pub async fn client_without_retries(&self) -> kube::Client {
        let mut cfg = self.config().await;
        cfg.default_retry = false;
        kube::Client::try_from(cfg).expect("kube client")
    }

    async fn config(&self) -> kube::Config {
        let kc = kube::config::Kubeconfig::from_yaml(&self.server.kubeconfig_yaml())
            .expect("kubeconfig parses");
        kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
            .await
            .expect("kube config")
    }

    /// Installs the VolumeMigration CRD with kubectl.
    pub fn install_crd(&self) {
        let path = crd_path();
        self.kubectl_ok(&["apply", "-f", &path.display().to_string()]);
    }
}

/// The VolumeMigration CRD: the project's generated file, or the test fixture of the same
/// shape while that file does not exist.
pub fn crd_path() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let real = manifest.join("../../../crds/volumemigrations.yaml");
    if real.exists() {
        real
    } else {
        manifest.join("tests/fixtures/volumemigrations.yaml")
    }
}

/// An in-tree vSphere PV manifest.
pub fn vsphere_pv_yaml(name: &str, path: &str) -> String {
    format!(
        "apiVersion: v1
kind: PersistentVolume
metadata:
  name: {name}
  annotations:
    pv.kubernetes.io/migrated-to: csi.vsphere.vmware.com
spec:
  capacity:
    storage: 5Gi
  accessModes: [ReadWriteOnce]
  persistentVolumeReclaimPolicy: Retain
  storageClassName: thin
  vsphereVolume:
    volumePath: \"{path}\"
    fsType: ext4
"
    )
}

/// A VolumeMigration manifest.
pub fn vmig_yaml(name: &str, path: &str) -> String {
    format!(
        "apiVersion: volmig.io/v1alpha1
kind: VolumeMigration
metadata:
  name: {name}
spec:
  volumePath: \"{path}\"
"
    )
}

/// Waits (polling) until `f` holds, panicking with `what` after ~10 s.
pub async fn eventually<F: FnMut() -> bool>(what: &str, mut f: F) {
    for _ in 0..200 {
        if f() {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("timed out waiting for {what}");
}
