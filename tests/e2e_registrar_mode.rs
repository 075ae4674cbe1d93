//! One registrar beside the vSphere CSI driver (docs/design.md §8.2), end to end: while the
//! driver's syncer renews its `vsphere-syncer` Lease the real `volmig` binary creates no CNS
//! volume and adopts what the syncer registered; once the Lease runs out unrenewed it
//! registers the rest itself. The API test server (with the chart's RBAC as the daemon's
//! identity) and the simulator harness.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "test code: failures should panic"
)]

#[path = "support/driver_registration.rs"]
mod driver_registration;
#[path = "support/e2e.rs"]
mod e2e;
#[path = "support/vcsim.rs"]
mod vcsim;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use driver_registration::driver_registers;
use e2e::{Cluster, Daemon, phase, volume_id, wait_for};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, Patch, PatchParams, PostParams};
use vcsim::{Vcsim, VcsimOptions};
use volmig::VolumePath;
use volmig::api::Phase;

const DRIVER_NAMESPACE: &str = "vmware-system-csi";
const SYNCER_HOLDER: &str = "vsphere-csi-controller-5d9c7-x2x8q";

/// Plays the driver's syncer leading: creates its Lease (4 s) and renews it every second
/// while `renewing` holds.
async fn syncer_leads(cluster: &Cluster, renewing: Arc<AtomicBool>) -> tokio::task::JoinHandle<()> {
    let namespaces: Api<Namespace> = Api::all(cluster.client.clone());
    let ns: Namespace =
        serde_json::from_value(serde_json::json!({"metadata": {"name": DRIVER_NAMESPACE}}))
            .unwrap();
    let _ = namespaces.create(&PostParams::default(), &ns).await;
    let leases: Api<Lease> = Api::namespaced(cluster.client.clone(), DRIVER_NAMESPACE);
    let lease: Lease = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "vsphere-syncer"},
        "spec": {
            "holderIdentity": SYNCER_HOLDER,
            "leaseDurationSeconds": 4,
            "acquireTime": MicroTime(jiff::Timestamp::now()),
            "renewTime": MicroTime(jiff::Timestamp::now()),
        }
    }))
    .unwrap();
    leases
        .create(&PostParams::default(), &lease)
        .await
        .expect("the syncer's Lease");
    tokio::spawn(async move {
        while renewing.load(Ordering::SeqCst) {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let patch =
                serde_json::json!({"spec": {"renewTime": MicroTime(jiff::Timestamp::now())}});
            let _ = leases
                .patch(
                    "vsphere-syncer",
                    &PatchParams::default(),
                    &Patch::Merge(&patch),
                )
                .await;
        }
    })
}

fn canonical(path: &str) -> String {
    VolumePath::parse(path).unwrap().canonical()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follows_a_leading_driver_syncer_then_registers_when_it_stops() {
    let sim = Vcsim::start(VcsimOptions::default().vmdks(6)).await;
    let cluster = Cluster::start().await;
    cluster.install_driver_crd().await;
    let renewing = Arc::new(AtomicBool::new(true));
    let renewer = syncer_leads(&cluster, renewing.clone()).await;
    let paths: Vec<String> = (1..=6).map(|n| sim.vmdk_path("kubevols", n)).collect();
    for (n, path) in paths.iter().enumerate() {
        cluster.create_pv(&format!("pv-{n}"), path).await;
    }

    let daemon = Daemon::spawn(&cluster, &sim, "volmig-follow", &[]);
    daemon.wait_ready().await;
    wait_for(Duration::from_secs(30), "registrar mode follow", || async {
        daemon
            .metric("volmig_registrar_mode{mode=\"follow\"}")
            .await
            .filter(|v| *v == 1.0)
    })
    .await;
    // Every path was looked at (the start-up full sync) and none was created.
    wait_for(
        Duration::from_secs(30),
        "the first full-sync pass",
        || async {
            daemon
                .metric("volmig_full_sync_passes_total{result=\"ok\"}")
                .await
                .filter(|n| *n >= 1.0)
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(
        sim.volumes().await.is_empty(),
        "volmig created while the driver's syncer leads: {:?}",
        sim.volumes().await
    );
    for path in &paths {
        let vm = cluster.migration(&canonical(path)).await;
        assert!(
            vm.as_ref().and_then(phase) != Some(Phase::Registering),
            "no write-ahead while following: {vm:?}"
        );
    }

    // The syncer registers two vmdks under names of its own and writes its cache object
    // named by the ID; volmig adopts them.
    let mut theirs = Vec::new();
    for (n, path) in paths.iter().take(2).enumerate() {
        theirs.push(driver_registers(&cluster, &sim, path, &format!("pvc-driver-{n}")).await);
    }
    for (path, id) in paths.iter().zip(&theirs) {
        let vm = wait_for(
            Duration::from_secs(60),
            "the driver's volume adopted",
            || async {
                cluster
                    .migration(&canonical(path))
                    .await
                    .filter(|vm| phase(vm) == Some(Phase::Registered))
            },
        )
        .await;
        assert_eq!(volume_id(&vm).as_deref(), Some(id.as_str()), "{path}");
    }
    assert_eq!(sim.volumes().await.len(), 2, "still no create by volmig");

    // The syncer stops renewing: after its 4 s lease volmig registers the rest.
    renewing.store(false, Ordering::SeqCst);
    renewer.await.unwrap();
    wait_for(Duration::from_secs(60), "every path Registered", || async {
        let all = cluster.list_migrations().await;
        (all.len() == paths.len() && all.iter().all(|vm| phase(vm) == Some(Phase::Registered)))
            .then_some(())
    })
    .await;
    assert_eq!(
        daemon.metric("volmig_registrar_mode{mode=\"own\"}").await,
        Some(1.0)
    );
    let volumes = sim.volumes().await;
    assert_eq!(
        volumes.len(),
        paths.len(),
        "one volume per vmdk: {volumes:?}"
    );
    assert!(sim.duplicates().await.is_empty());
    for (path, id) in paths.iter().zip(&theirs) {
        let vm = cluster.migration(&canonical(path)).await.unwrap();
        assert_eq!(
            volume_id(&vm).as_deref(),
            Some(id.as_str()),
            "adopted IDs stay"
        );
    }
    let log = daemon.log_text();
    assert!(log.contains("registrar mode"), "the change is logged");
}
