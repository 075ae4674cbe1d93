//! vCenter credentials from Kubernetes Secrets (docs/design.md §8.5), end to end: the real
//! binary, the govmomi simulator harness and the Kubernetes API test server.
//!
//! - `--csi-config-secret`: the vSphere CSI driver's own Secret, read through the API with
//!   the chart's RBAC (a Role for that one Secret), supplies URL, credentials and cluster
//!   ID; a password rotated in vCenter and in the Secret, with the sessions expired, is
//!   used at the next login by the same process.
//! - `--vc-credentials-file` naming a directory with files `username` and `password` (a
//!   `kubernetes.io/basic-auth` Secret mounted whole), read again when they change.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "test code: failures should panic"
)]

#[path = "support/e2e.rs"]
mod e2e;
#[path = "support/vcsim.rs"]
mod vcsim;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use e2e::{Cluster, Daemon, RBAC_KINDS, phase, volume_id, wait_for};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, PostParams};
use vcsim::{SimStats, Vcsim, VcsimOptions};
use volmig::volume_migration::Phase;

const NAMESPACE: &str = "vmware-system-csi";
const SECRET: &str = "vsphere-config-secret";

fn csi_conf(sim: &Vcsim, user: &str, password: &str) -> String {
    let (host, port) = sim.host_port().rsplit_once(':').unwrap();
    format!(
        "[Global]\ncluster-id = \"secret-e2e\"\n\n[VirtualCenter {host:?}]\nuser = {user:?}\npassword = {password:?}\nport = \"{port}\"\ndatacenters = \"{}\"\n",
        sim.datacenters.join(",")
    )
}

fn secret(conf: &str) -> Secret {
    Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(SECRET.to_owned()),
            namespace: Some(NAMESPACE.to_owned()),
            ..Default::default()
        },
        data: Some(BTreeMap::from([(
            "csi-vsphere.conf".to_owned(),
            ByteString(conf.as_bytes().to_vec()),
        )])),
        ..Default::default()
    }
}

/// Calls of `method` by the daemon `name` (its User-Agent names its holder ID).
fn calls(stats: &SimStats, name: &str, method: &str, faults: bool) -> u64 {
    let by_agent = if faults {
        &stats.faults_by_user_agent
    } else {
        &stats.calls_by_user_agent
    };
    by_agent
        .iter()
        .filter(|(ua, _)| ua.contains(&format!("({name})")))
        .map(|(_, m)| m.get(method).copied().unwrap_or(0))
        .sum()
}

async fn all_registered(cluster: &Cluster, paths: &[String]) {
    wait_for(
        Duration::from_secs(90),
        "every VolumeMigration Registered",
        || async {
            for path in paths {
                let vm = cluster.migration(path).await?;
                if phase(&vm) != Some(Phase::Registered) || volume_id(&vm).is_none() {
                    return None;
                }
            }
            Some(())
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_drivers_secret_is_read_through_the_api_and_a_rotation_needs_no_restart() {
    let mut sim = Vcsim::start(VcsimOptions::default().vmdks(6)).await;
    // The chart's RBAC with the value set: the daemon may read that one Secret only.
    let rbac: Vec<serde_json::Value> = e2e::helm::render(&[
        "--set",
        "leaderElection.leaseNamespace=kube-system",
        "--set-string",
        &format!("vcenter.csiConfig.secretRef={NAMESPACE}/{SECRET}"),
    ])
    .objects
    .into_iter()
    .filter(|o| RBAC_KINDS.iter().any(|k| o["kind"] == *k))
    .collect();
    let cluster = Cluster::start_with_identity(&rbac).await;
    let secrets: Api<Secret> = Api::namespaced(cluster.client.clone(), NAMESPACE);
    let user = sim.username.clone();
    secrets
        .create(
            &PostParams::default(),
            &secret(&csi_conf(&sim, &user, &sim.password)),
        )
        .await
        .expect("create the driver's Secret");
    let paths: Vec<String> = (1..=6).map(|n| sim.vmdk_path("kubevols", n)).collect();
    let name = "from-secret";
    // URL, credentials and cluster ID from the Secret; only the simulator's CA is a flag.
    let mut daemon = Daemon::spawn_without(
        &cluster,
        &sim,
        name,
        &["--vc-url", "--vc-credentials-file", "--cluster-id"],
        &["--csi-config-secret", &format!("{NAMESPACE}/{SECRET}")],
    );
    for (n, path) in paths[..3].iter().enumerate() {
        cluster.create_pv(&format!("before-{n}"), path).await;
    }
    all_registered(&cluster, &paths[..3]).await;
    assert_eq!(calls(&sim.stats().await, name, "Login", false), 1);

    // Rotate: vCenter accepts only the new password, the Secret has it, and every session
    // ends (as an idle timeout would).
    const ROTATED: &str = "r0tated\"Secret'Pa55";
    sim.set_credentials(&user, ROTATED).await;
    let mut updated = secrets.get(SECRET).await.expect("get the Secret");
    updated.data = secret(&csi_conf(&sim, &user, ROTATED)).data;
    secrets
        .replace(SECRET, &PostParams::default(), &updated)
        .await
        .expect("update the Secret");
    wait_for(
        Duration::from_secs(30),
        "the watcher sees the change",
        || {
            let seen = daemon.log_text().contains("CSI config Secret changed");
            async move { seen.then_some(()) }
        },
    )
    .await;
    sim.expire_sessions().await;
    for (n, path) in paths[3..].iter().enumerate() {
        cluster.create_pv(&format!("after-{n}"), path).await;
    }
    all_registered(&cluster, &paths).await;
    assert!(
        daemon.exit_status().is_none(),
        "the daemon restarted or exited:\n{}",
        daemon.log_text()
    );
    let stats = sim.stats().await;
    assert_eq!(
        calls(&stats, name, "Login", true),
        0,
        "a login with the old password was refused: {:?}",
        stats.calls_by_user_agent
    );
    assert!(calls(&stats, name, "Login", false) >= 2, "logged in again");
    assert_eq!(sim.volumes().await.len(), 6, "one CNS volume per vmdk");
    let log = daemon.log_text();
    assert!(!log.contains("r0tated"), "the password is in the log");

    // The preflight and the one-shot dry run read the same Secret through the API, with the
    // daemon's identity, and log in with the rotated password.
    let secret_flag = format!("{NAMESPACE}/{SECRET}");
    let kubeconfig = cluster.daemon_kubeconfig.display().to_string();
    let mut base = vec![
        "--kubeconfig".to_owned(),
        kubeconfig,
        "--csi-config-secret".to_owned(),
        secret_flag,
    ];
    if let Some(ca) = &sim.cert {
        base.extend(["--vc-ca-file".to_owned(), ca.display().to_string()]);
    }
    let run = |args: Vec<String>| {
        let out = std::process::Command::new(e2e::volmig_bin())
            .args(e2e::compat_args(args))
            .env_remove("VOLMIG_VC_USERNAME")
            .env_remove("VOLMIG_VC_PASSWORD")
            .stdin(std::process::Stdio::null())
            .output()
            .expect("run volmig");
        let text = format!(
            "{}\n--- stderr:\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.code(), text)
    };
    let mut check = vec!["check".to_owned(), "--output=json".to_owned()];
    check.extend(base.iter().cloned());
    let (_, text) = run(check);
    let json: serde_json::Value =
        serde_json::from_str(text.split("\n--- stderr:").next().unwrap_or_default())
            .unwrap_or_else(|e| panic!("{e}: {text}"));
    for name in ["vCenter TLS", "vCenter login"] {
        let line = json["checks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| {
                c["name"]
                    .as_str()
                    .is_some_and(|n| n.eq_ignore_ascii_case(name))
            })
            .unwrap_or_else(|| panic!("no {name} line: {text}"));
        assert_eq!(line["ok"], true, "{name}: {text}");
    }
    let mut once = vec![
        "run".to_owned(),
        "--dry-run".to_owned(),
        "--once".to_owned(),
    ];
    once.extend(base);
    let (code, text) = run(once);
    assert_eq!(
        code,
        Some(0),
        "every path Registered: nothing to do\n{text}"
    );
}

/// Replaces `path` the way the kubelet updates a mounted Secret: a new file renamed over.
fn write_atomically(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_basic_auth_directory_supplies_the_credentials_and_its_rotation() {
    let mut sim = Vcsim::start(VcsimOptions::default().vmdks(4)).await;
    let cluster = Cluster::start().await;
    let dir = cluster.path("basic-auth");
    std::fs::create_dir(&dir).unwrap();
    let user = sim.username.clone();
    write_atomically(&dir.join("username"), &format!("{user}\n"));
    write_atomically(&dir.join("password"), &sim.password);
    let paths: Vec<String> = (1..=4).map(|n| sim.vmdk_path("kubevols", n)).collect();
    let name = "basic-auth";
    let mut daemon = Daemon::spawn(
        &cluster,
        &sim,
        name,
        &["--vc-credentials-file", dir.to_str().unwrap()],
    );
    for (n, path) in paths[..2].iter().enumerate() {
        cluster.create_pv(&format!("dir-before-{n}"), path).await;
    }
    all_registered(&cluster, &paths[..2]).await;

    sim.set_credentials(&user, "n3w-Dir-Pa55").await;
    write_atomically(&dir.join("password"), "n3w-Dir-Pa55");
    sim.expire_sessions().await;
    for (n, path) in paths[2..].iter().enumerate() {
        cluster.create_pv(&format!("dir-after-{n}"), path).await;
    }
    all_registered(&cluster, &paths).await;
    assert!(daemon.exit_status().is_none(), "{}", daemon.log_text());
    let stats = sim.stats().await;
    assert_eq!(
        calls(&stats, name, "Login", true),
        0,
        "{:?}",
        stats.calls_by_user_agent
    );
    assert!(calls(&stats, name, "Login", false) >= 2);
    assert!(!daemon.log_text().contains("n3w-Dir"));
}
