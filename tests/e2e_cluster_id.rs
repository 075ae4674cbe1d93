//! End-to-end tests of the CNS cluster ID at start-up (docs/design.md §8.5): the real
//! `volmig run`, as the chart's ServiceAccount, beside the vSphere CSI driver's immutable
//! ConfigMap `vsphere-csi-cluster-id` (key `clusterID`) in `vmware-system-csi`. A cluster ID
//! that differs from the driver's is refused before anything is registered; without
//! `--cluster-id` the driver's ID is the one written on registrations.
//!
//! Always on a control plane of the test's own (`Cluster::start_with_identity`), never on
//! an existing cluster: the tests write the driver's own ConfigMap.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "test code: failures should panic"
)]

#[path = "support/e2e.rs"]
mod e2e;
#[path = "support/vcsim.rs"]
mod vcsim;

use std::time::{Duration, Instant};

use e2e::{Cluster, Daemon, chart_rbac, phase, volume_id};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, PostParams};
use vcsim::{Vcsim, VcsimOptions};
use volmig::volume_migration::Phase;

/// The driver's namespace (`--driver-namespace` default).
const DRIVER_NAMESPACE: &str = "vmware-system-csi";
/// The cluster ID the driver generated and stored in its ConfigMap.
const DRIVER_CLUSTER_ID: &str = "driver-generated-4f1c";
/// The cluster ID `Daemon::spawn` gives volmig (`--cluster-id`).
const FLAG_CLUSTER_ID: &str = "e2e-cluster";

/// Starts the simulator (one vmdk) and a control plane with the chart's identity, the
/// driver's ConfigMap holding [`DRIVER_CLUSTER_ID`], and a PV for the vmdk.
async fn set_up() -> (Vcsim, Cluster, String) {
    let identity = chart_rbac();
    let (sim, cluster) = tokio::join!(
        Vcsim::start(VcsimOptions::default().vmdks(1)),
        Cluster::start_with_identity(&identity)
    );
    let config_map: ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "vsphere-csi-cluster-id", "namespace": DRIVER_NAMESPACE},
        "immutable": true,
        "data": {"clusterID": DRIVER_CLUSTER_ID}
    }))
    .unwrap();
    Api::<ConfigMap>::namespaced(cluster.client.clone(), DRIVER_NAMESPACE)
        .create(&PostParams::default(), &config_map)
        .await
        .expect("create the driver's cluster-ID ConfigMap");
    let path = sim.vmdk_path("kubevols", 1);
    cluster.create_pv("pv-1", &path).await;
    (sim, cluster, path)
}

/// `--cluster-id` differs from the driver's ConfigMap: the daemon refuses to start,
/// names both IDs and where each came from, and creates no CNS volume.
#[tokio::test(flavor = "multi_thread")]
async fn a_cluster_id_other_than_the_drivers_is_refused_at_start_up() {
    let (sim, cluster, _path) = set_up().await;
    let mut daemon = Daemon::spawn(&cluster, &sim, "mismatch", &[]);
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = daemon.exit_status() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "volmig still runs 30 s after start with --cluster-id {FLAG_CLUSTER_ID} and the \
             driver's ConfigMap saying {DRIVER_CLUSTER_ID}; log:\n{}",
            daemon.log_text()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let log = daemon.log_text();
    assert!(
        !status.success() && status.code().is_some(),
        "exit: {status}; log:\n{log}"
    );
    let failed = log
        .lines()
        .find(|l| l.contains("volmig run failed"))
        .unwrap_or_else(|| panic!("no `volmig run failed` line in:\n{log}"));
    for needle in [
        FLAG_CLUSTER_ID,
        "--cluster-id",
        DRIVER_CLUSTER_ID,
        "vmware-system-csi/vsphere-csi-cluster-id",
    ] {
        assert!(failed.contains(needle), "{needle:?} missing in {failed}");
    }
    assert_eq!(sim.volumes().await, [], "no CNS volume may be created");
    assert!(
        cluster
            .list_migrations()
            .await
            .iter()
            .all(|vm| volume_id(vm).is_none()),
        "nothing registered"
    );
}

/// No `--cluster-id`, no `--csi-config`: the driver's ConfigMap supplies the ID, and
/// the registration carries it.
#[tokio::test(flavor = "multi_thread")]
async fn without_a_cluster_id_the_drivers_config_map_supplies_it() {
    let (sim, cluster, path) = set_up().await;
    let mut daemon = Daemon::spawn_without(&cluster, &sim, "from-driver", &["--cluster-id"], &[]);
    let deadline = Instant::now() + Duration::from_secs(120);
    let id = loop {
        if let Some(status) = daemon.exit_status() {
            panic!(
                "volmig exited ({status}) without --cluster-id although the driver's \
                 ConfigMap holds one; log:\n{}",
                daemon.log_text()
            );
        }
        if let Some(vm) = cluster.migration(&path).await
            && phase(&vm) == Some(Phase::Registered)
        {
            break volume_id(&vm).expect("a Registered path has a volume ID");
        }
        assert!(
            Instant::now() < deadline,
            "{path} not Registered within 120 s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let volumes = sim.volumes().await;
    assert_eq!(volumes.len(), 1, "{volumes:?}");
    assert_eq!(volumes[0].id, id);
    assert_eq!(
        volumes[0].cluster_id, DRIVER_CLUSTER_ID,
        "the registration carries the driver's cluster ID"
    );
    assert!(
        daemon.terminate(Duration::from_secs(30)).await.success(),
        "SIGTERM exit"
    );
}
