//! A real Kubernetes control plane for one test: an etcd and a kube-apiserver built from
//! their Go modules by `make controlplane` (tests/support/controlplane/, mk/controlplane.mk),
//! both on loopback with random ports, their data in a temp dir.
//!
//! The API server serves TLS with a CA and certificate made for this instance by the
//! module's `certs` program, authenticates an admin token (group `system:masters`) from
//! `--token-auth-file` and ServiceAccount tokens (`kubectl create token` works), and
//! authorizes with RBAC. There is no controller manager: PV phases are not set, namespaces
//! are not finalized and nothing is garbage-collected unless the test does it.
//!
//! Drop kills both processes and removes the directory.
#![allow(
    clippy::expect_used,
    reason = "test harness: a failed set-up step should fail the test loudly"
)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Where the binaries are found when `VOLMIG_CONTROL_PLANE_DIR` is unset:
/// `$CARGO_TARGET_DIR/controlplane`, else the repository's `target/controlplane`
/// (`make controlplane` builds them into `$(TARGET_DIR)/controlplane`).
pub const DIR_ENV: &str = "VOLMIG_CONTROL_PLANE_DIR";

/// The admin's bearer token (group `system:masters`); every instance has its own CA, so
/// a fixed token reaches no other instance.
const ADMIN_TOKEN: &str = "volmig-e2e-admin-token";

/// How long etcd and the API server get to answer `/readyz` with 200.
const READY_TIMEOUT: Duration = Duration::from_secs(90);

/// The directory holding `kube-apiserver`, `etcd` and `certs`.
pub fn binaries_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os(DIR_ENV) {
        return PathBuf::from(dir);
    }
    std::env::var_os("CARGO_TARGET_DIR")
        .map_or_else(
            || Path::new(env!("CARGO_MANIFEST_DIR")).join("target"),
            PathBuf::from,
        )
        .join("controlplane")
}

/// Whether the binaries are built (all three files exist).
pub fn binaries_built() -> bool {
    let dir = binaries_dir();
    ["kube-apiserver", "etcd", "certs"]
        .iter()
        .all(|b| dir.join(b).is_file())
}

/// One running etcd + kube-apiserver.
pub struct ControlPlane {
    etcd: Child,
    apiserver: Child,
    /// `https://127.0.0.1:PORT`.
    pub url: String,
    /// The admin kubeconfig (token + CA data).
    pub kubeconfig: PathBuf,
    /// Process start to the first `/readyz` 200.
    pub startup: Duration,
    /// The PEM of the CA that signed the serving certificate.
    ca_pem: String,
    dir: tempfile::TempDir,
}

impl ControlPlane {
    /// Starts etcd and kube-apiserver and waits for `/readyz`; panics, naming the
    /// `make` command, when the binaries are not built.
    pub async fn start() -> ControlPlane {
        let bin = binaries_dir();
        assert!(
            binaries_built(),
            "the real control plane is not built in {}: run `make controlplane` \
             (or set {DIR_ENV} to a directory with kube-apiserver, etcd and certs)",
            bin.display()
        );
        let started = Instant::now();
        let dir = tempfile::Builder::new()
            .prefix("volmig-controlplane-")
            .tempdir()
            .expect("temp dir");
        let path = |name: &str| dir.path().join(name);
        run_ok(Command::new(bin.join("certs")).arg(dir.path()));
        std::fs::write(
            path("tokens.csv"),
            format!("{ADMIN_TOKEN},volmig-e2e-admin,volmig-e2e-admin,\"system:masters\"\n"),
        )
        .expect("write the token file");

        let etcd_client = format!("http://127.0.0.1:{}", super::free_port());
        let etcd_peer = format!("http://127.0.0.1:{}", super::free_port());
        let etcd = spawn_logged(
            Command::new(bin.join("etcd")).args([
                "--name=e2e",
                &format!("--data-dir={}", path("etcd").display()),
                &format!("--listen-client-urls={etcd_client}"),
                &format!("--advertise-client-urls={etcd_client}"),
                &format!("--listen-peer-urls={etcd_peer}"),
                &format!("--initial-advertise-peer-urls={etcd_peer}"),
                &format!("--initial-cluster=e2e={etcd_peer}"),
                // A test's data need not survive a power cut.
                "--unsafe-no-fsync",
                "--log-level=warn",
            ]),
            &path("etcd.log"),
        );

        let port = super::free_port();
        let url = format!("https://127.0.0.1:{port}");
        let apiserver = spawn_logged(
            Command::new(bin.join("kube-apiserver")).args([
                &format!("--etcd-servers={etcd_client}"),
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                // The `kubernetes` Service's endpoints may not be loopback, and no pod
                // here reaches the API through it.
                "--endpoint-reconciler-type=none",
                &format!("--secure-port={port}"),
                &format!("--cert-dir={}", path("apiserver-certs").display()),
                &format!("--tls-cert-file={}", path("serving.crt").display()),
                &format!("--tls-private-key-file={}", path("serving.key").display()),
                &format!("--client-ca-file={}", path("ca.crt").display()),
                &format!("--token-auth-file={}", path("tokens.csv").display()),
                "--authorization-mode=Node,RBAC",
                &format!("--service-account-key-file={}", path("sa.pub").display()),
                &format!(
                    "--service-account-signing-key-file={}",
                    path("sa.key").display()
                ),
                "--service-account-issuer=https://kubernetes.default.svc",
                "--service-cluster-ip-range=10.96.0.0/24",
                // No controller manager: nothing creates a namespace's `default`
                // ServiceAccount (the ServiceAccount plugin would refuse every pod) and
                // nothing removes the `kubernetes.io/pv-protection` finalizer
                // (StorageObjectInUseProtection would leave every deleted PV in place).
                "--disable-admission-plugins=ServiceAccount,StorageObjectInUseProtection",
                "--profiling=false",
                "--v=1",
            ]),
            &path("apiserver.log"),
        );

        let ca_pem = std::fs::read_to_string(path("ca.crt")).expect("read ca.crt");
        let mut plane = ControlPlane {
            etcd,
            apiserver,
            url,
            kubeconfig: path("kubeconfig"),
            startup: Duration::ZERO,
            ca_pem,
            dir,
        };
        std::fs::write(
            &plane.kubeconfig,
            plane.kubeconfig_yaml_with_token(ADMIN_TOKEN),
        )
        .expect("write the admin kubeconfig");
        plane.wait_ready(started).await;
        plane.startup = started.elapsed();
        eprintln!(
            "control plane {} ready in {:.2?} ({})",
            plane.url,
            plane.startup,
            plane.dir.path().display()
        );
        plane
    }

    /// Polls `/readyz` as the admin until it answers 200; panics with the logs' tails when
    /// a process exits or [`READY_TIMEOUT`] passes.
    async fn wait_ready(&mut self, started: Instant) {
        let config = kube::Config::from_custom_kubeconfig(
            kube::config::Kubeconfig::read_from(&self.kubeconfig).expect("read kubeconfig"),
            &kube::config::KubeConfigOptions::default(),
        )
        .await
        .expect("kubeconfig");
        let client = kube::Client::try_from(config).expect("client");
        loop {
            let exited = [
                ("etcd", &mut self.etcd),
                ("kube-apiserver", &mut self.apiserver),
            ]
            .into_iter()
            .find_map(|(name, child)| {
                let status = child.try_wait().expect("poll the control plane")?;
                Some(format!("{name} exited ({status})"))
            });
            if let Some(exited) = exited {
                panic!("{exited} before /readyz:\n{}", self.logs());
            }
            let request = http::Request::get("/readyz")
                .body(Vec::new())
                .expect("request");
            if client.request_text(request).await.is_ok() {
                return;
            }
            assert!(
                started.elapsed() < READY_TIMEOUT,
                "the control plane did not answer /readyz within {READY_TIMEOUT:?}:\n{}",
                self.logs()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// A kubeconfig (YAML) for this API server that authenticates with `token`.
    pub fn kubeconfig_yaml_with_token(&self, token: &str) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: e2e\n  cluster:\n    \
             server: {}\n    certificate-authority-data: {}\nusers:\n- name: e2e\n  user:\n    \
             token: {token}\ncontexts:\n- name: e2e\n  context:\n    cluster: e2e\n    \
             user: e2e\ncurrent-context: e2e\n",
            self.url,
            base64(self.ca_pem.as_bytes())
        )
    }

    /// The last lines of both logs.
    pub fn logs(&self) -> String {
        ["etcd.log", "apiserver.log"]
            .iter()
            .map(|name| {
                let text = std::fs::read_to_string(self.dir.path().join(name)).unwrap_or_default();
                let tail: Vec<&str> = text.lines().rev().take(30).collect();
                let tail: Vec<&str> = tail.into_iter().rev().collect();
                format!("--- {name} ---\n{}", tail.join("\n"))
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("{}", self.logs());
        }
        for child in [&mut self.apiserver, &mut self.etcd] {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Runs `cmd` to its end; panics with its output on failure.
fn run_ok(cmd: &mut Command) {
    let output = cmd.output().expect("run the control plane's certs");
    assert!(
        output.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Spawns `cmd` with stdout and stderr appended to `log`.
fn spawn_logged(cmd: &mut Command, log: &Path) -> Child {
    let file = std::fs::File::create(log).expect("log file");
    cmd.stdin(Stdio::null())
        .stdout(file.try_clone().expect("log file"))
        .stderr(file)
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}"))
}

/// Standard base64 with padding (kubeconfig `*-data` fields).
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[(n >> (18 - 6 * i)) as usize & 63]));
            } else {
                out.push('=');
            }
        }
    }
    out
}
