//! The `kube-testserver` binary: start-up line, kubeconfig, admin endpoints for a separate
//! process, loopback-only listening, SIGTERM; and 10,000 PVs listed through kubectl and
//! kube-rs within 200 MB of server RSS.
#![allow(clippy::expect_used, clippy::unwrap_used)] // test helpers outside #[test] fns

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::PersistentVolume;
use kube::api::{Api, ListParams, PostParams};
use serde_json::{Value, json};

const BIN: &str = env!("CARGO_BIN_EXE_kube-testserver");

struct Proc {
    child: Child,
    url: String,
    kubeconfig: String,
    _dir: tempfile::TempDir,
}

impl Proc {
    fn start() -> Proc {
        let dir = tempfile::tempdir().expect("tempdir");
        let kc = dir.path().join("kubeconfig");
        let mut child = Command::new(BIN)
            .args(["--listen", "127.0.0.1:0", "--kubeconfig-out"])
            .arg(&kc)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn kube-testserver");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout"))
            .read_line(&mut line)
            .expect("start-up line");
        let v: Value = serde_json::from_str(&line).expect("one JSON line");
        let url = v["url"].as_str().expect("url").to_string();
        let kubeconfig = v["kubeconfig"].as_str().expect("kubeconfig").to_string();
        assert_eq!(kubeconfig, kc.display().to_string());
        Proc {
            child,
            url,
            kubeconfig,
            _dir: dir,
        }
    }

    fn kubectl(&self, args: &[&str]) -> String {
        let out = Command::new(common::KUBECTL)
            .args(args)
            .env("KUBECONFIG", &self.kubeconfig)
            .env("HOME", self._dir.path())
            .output()
            .expect("kubectl");
        assert!(
            out.status.success(),
            "kubectl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    async fn client(&self) -> kube::Client {
        let yaml = std::fs::read_to_string(&self.kubeconfig).expect("kubeconfig file");
        let kc = kube::config::Kubeconfig::from_yaml(&yaml).expect("parses");
        let cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
            .await
            .expect("config");
        kube::Client::try_from(cfg).expect("client")
    }

    fn rss_kib(&self) -> (u64, u64) {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .expect("proc status");
        let field = |name: &str| {
            status
                .lines()
                .find(|l| l.starts_with(name))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|n| n.parse::<u64>().ok())
                .expect("field")
        };
        (field("VmRSS:"), field("VmHWM:"))
    }

    fn terminate(mut self) -> std::process::ExitStatus {
        let pid = self.child.id().to_string();
        let ok = Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .expect("kill");
        assert!(ok.success());
        for _ in 0..100 {
            if let Some(status) = self.child.try_wait().expect("wait") {
                return status;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        panic!("kube-testserver did not exit after SIGTERM");
    }
}

async fn admin(client: &kube::Client, method: &str, path: &str, body: Value) -> Value {
    let req = http::Request::builder()
        .method(method)
        .uri(path)
        .body(serde_json::to_vec(&body).expect("json"))
        .expect("req");
    serde_json::from_str(&client.request_text(req).await.expect("admin request")).expect("json")
}

#[tokio::test]
async fn binary_serves_admin_endpoints_and_stops_on_sigterm() {
    let p = Proc::start();
    assert!(p.url.starts_with("http://127.0.0.1:"), "{}", p.url);
    let ns = p.kubectl(&["get", "namespaces", "-o", "name"]);
    assert!(ns.contains("namespace/default"), "{ns}");
    let client = p.client().await;
    let cfg = admin(
        &client,
        "POST",
        "/_testserver/faults",
        json!({"writes": {"fail_500": 1.0}, "seed": 3}),
    )
    .await;
    assert_eq!(cfg["writes"]["fail_500"], 1.0);
    let api: Api<PersistentVolume> = Api::all(client.clone());
    let pv: PersistentVolume =
        serde_json::from_value(json!({"metadata": {"name": "x"}, "spec": {}})).expect("pv");
    assert!(
        api.create(&PostParams::default(), &pv).await.is_err(),
        "the fault set over HTTP applies"
    );
    admin(&client, "POST", "/_testserver/faults", json!({})).await;
    api.create(&PostParams::default(), &pv)
        .await
        .expect("faults cleared");
    let stats = admin(&client, "GET", "/_testserver/stats", json!(null)).await;
    assert_eq!(stats["writes"], 2);
    assert_eq!(stats["injected_failures"], 1);
    let compacted = admin(&client, "POST", "/_testserver/compact", json!(null)).await;
    assert!(
        compacted["resourceVersion"]
            .as_str()
            .is_some_and(|s| s.parse::<u64>().is_ok())
    );
    let dropped = admin(&client, "POST", "/_testserver/drop-watches", json!(null)).await;
    assert_eq!(dropped["dropped"], 0);
    admin(&client, "POST", "/_testserver/stats/reset", json!(null)).await;
    let stats = admin(&client, "GET", "/_testserver/stats", json!(null)).await;
    assert_eq!(
        (stats["writes"].as_u64(), stats["reads"].as_u64()),
        (Some(0), Some(0))
    );
    let status = p.terminate();
    assert!(status.success(), "exit status {status:?}");
    println!(
        "checked: start-up JSON line, kubeconfig, admin faults/stats/compact/drop-watches over HTTP, exit 0 on SIGTERM"
    );
}

#[tokio::test]
async fn non_loopback_addresses_are_refused() {
    let out = Command::new(BIN)
        .args(["--listen", "0.0.0.0:0"])
        .output()
        .expect("run");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("non-loopback"), "{err}");
    let opts = kube_testserver::Options {
        listen: "0.0.0.0:0".parse().expect("addr"),
        ..Default::default()
    };
    assert!(kube_testserver::TestServer::start(opts).await.is_err());
    println!("checked: 0.0.0.0 is refused by the binary and the library");
}

#[tokio::test]
async fn ten_thousand_pvs_listed_by_kubectl_and_kube_rs_under_200_mb() {
    const N: usize = 10_000;
    let p = Proc::start();
    let api: Api<PersistentVolume> = Api::all(p.client().await);
    futures::stream::iter(0..N)
        .map(|i| {
            let api = api.clone();
            async move {
                let name = format!("pv-{i:05}");
                let pv: PersistentVolume = serde_json::from_value(json!({
                    "metadata": {"name": name, "annotations": {"pv.kubernetes.io/migrated-to": "csi.vsphere.vmware.com"}},
                    "spec": {"capacity": {"storage": "10Gi"}, "accessModes": ["ReadWriteOnce"],
                             "persistentVolumeReclaimPolicy": "Retain", "storageClassName": "thin",
                             "vsphereVolume": {"volumePath": format!("[LocalDS_0] kubevols/{name}.vmdk"), "fsType": "ext4"}}
                }))
                .expect("pv");
                api.create(&PostParams::default(), &pv).await.map(|_| ())
            }
        })
        .buffer_unordered(32)
        .try_collect::<Vec<()>>()
        .await
        .expect("10,000 creates");
    let listed = api
        .list(&ListParams::default())
        .await
        .expect("kube-rs list");
    assert_eq!(listed.items.len(), N);
    let table = p.kubectl(&["get", "pv", "--no-headers"]);
    assert_eq!(table.lines().count(), N);
    assert!(table.lines().all(|l| l.contains("10Gi")));
    let (rss, hwm) = p.rss_kib();
    println!(
        "server RSS holding {N} PVs after listing them: {} MiB (peak {} MiB)",
        rss / 1024,
        hwm / 1024
    );
    assert!(rss < 200 * 1024, "RSS {rss} KiB");
    let status = p.terminate();
    assert!(status.success());
    println!(
        "checked: {N} PVs created, listed by kube-rs ({}) and kubectl ({} rows), RSS {} KiB < 200 MiB",
        listed.items.len(),
        N,
        rss
    );
}
