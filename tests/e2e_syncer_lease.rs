//! How volmig stands beside the vSphere CSI driver's syncer (docs/design.md §8.2), end to end
//! with the real `volmig` binary, the API test server (the chart's RBAC as the daemon's
//! identity) and the simulator harness:
//! - a driver controller Deployment whose syncer runs without leader election registers
//!   without any Lease: volmig follows it (creates nothing) until it is gone;
//! - hold mode (`--hold-driver-syncer`) against the driver double (tests/support/csi_driver):
//!   the double cannot lead until volmig hands over, then finds every path in its cache and
//!   registers only what is new; a SIGKILL of the holding volmig mid-create never lets the
//!   double lead before that create has landed.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "test code: failures should panic"
)]

#[path = "support/csi_driver/mod.rs"]
mod csi_driver;
#[path = "support/e2e.rs"]
mod e2e;
#[path = "support/vcsim.rs"]
mod vcsim;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use csi_driver::{CsiDriverDouble, DriverOptions};
use e2e::{Cluster, Daemon, cluster_for_hold, phase, volume_id, wait_for};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use vcsim::{Vcsim, VcsimOptions};
use volmig::VolumePath;
use volmig::volume_migration::Phase;

const DRIVER_NAMESPACE: &str = "vmware-system-csi";

/// The driver's controller Deployment as its manifest has it, with the syncer's
/// `--leader-election` flag as given, and `available` replicas in its status.
async fn driver_deployment(cluster: &Cluster, syncer_args: &[&str], available: i32) {
    let api: Api<Deployment> = Api::namespaced(cluster.client.clone(), DRIVER_NAMESPACE);
    let deployment: Deployment = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "vsphere-csi-controller"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "vsphere-csi-controller"}},
            "template": {
                "metadata": {"labels": {"app": "vsphere-csi-controller"}},
                "spec": {"containers": [
                    {"name": "vsphere-csi-controller", "image": "csi-vsphere/driver:latest"},
                    {"name": "vsphere-syncer", "image": "csi-vsphere/syncer:latest", "args": syncer_args},
                ]}
            }
        }
    }))
    .unwrap();
    api.create(&PostParams::default(), &deployment)
        .await
        .expect("the driver's Deployment");
    let status = serde_json::json!({"status": {"replicas": 1, "availableReplicas": available, "readyReplicas": available}});
    api.patch_status(
        "vsphere-csi-controller",
        &PatchParams::default(),
        &Patch::Merge(&status),
    )
    .await
    .expect("the Deployment's status");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_driver_syncer_without_leader_election_is_followed_until_it_is_gone() {
    let sim = Vcsim::start(VcsimOptions::default().vmdks(3)).await;
    let cluster = Cluster::start().await;
    // No syncer Lease at all: the syncer runs without --leader-election.
    driver_deployment(&cluster, &["--fss-name=internal-feature-states"], 1).await;
    let paths: Vec<String> = (1..=3).map(|n| sim.vmdk_path("kubevols", n)).collect();
    for (n, path) in paths.iter().enumerate() {
        cluster.create_pv(&format!("pv-{n}"), path).await;
    }
    let daemon = Daemon::spawn(&cluster, &sim, "volmig-unelected", &[]);
    daemon.wait_ready().await;
    wait_for(Duration::from_secs(30), "registrar mode follow", || async {
        daemon
            .metric("volmig_registrar_mode{mode=\"follow\"}")
            .await
            .filter(|v| *v == 1.0)
    })
    .await;
    wait_for(Duration::from_secs(30), "two full-sync passes", || async {
        daemon
            .metric("volmig_full_sync_passes_total{result=\"ok\"}")
            .await
            .filter(|n| *n >= 2.0)
    })
    .await;
    assert!(
        sim.volumes().await.is_empty(),
        "volmig created beside a syncer that registers without a Lease: {:?}",
        sim.volumes().await
    );
    let events = cluster.events("RegistrarModeChanged").await;
    assert!(
        events
            .iter()
            .any(|(_, note)| note.contains("follow") && note.contains("--leader-election")),
        "an Event says why volmig follows: {events:?}"
    );

    // The driver is uninstalled: volmig registers every path itself.
    let api: Api<Deployment> = Api::namespaced(cluster.client.clone(), DRIVER_NAMESPACE);
    api.delete("vsphere-csi-controller", &DeleteParams::default())
        .await
        .expect("delete the Deployment");
    wait_for(Duration::from_secs(60), "every path Registered", || async {
        let all = cluster.list_migrations().await;
        (all.len() == paths.len() && all.iter().all(|vm| phase(vm) == Some(Phase::Registered)))
            .then_some(())
    })
    .await;
    assert_eq!(sim.volumes().await.len(), paths.len());
    assert!(sim.duplicates().await.is_empty());
    assert_eq!(
        daemon.metric("volmig_registrar_mode{mode=\"own\"}").await,
        Some(1.0)
    );
}

/// The stock manifest's Deployment stands (leader election on, one replica) and no syncer
/// Lease exists yet — a driver being installed, or a rollout between two terms: volmig never
/// takes the Lease and creates nothing (docs/design.md §8.2). Once the driver is gone (the
/// Deployment deleted) volmig takes the Lease and registers while it holds it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standing_driver_deployment_is_waited_for_until_it_is_gone() {
    let sim = Vcsim::start(VcsimOptions::default().vmdks(2)).await;
    let cluster = Cluster::start().await;
    driver_deployment(
        &cluster,
        &["--leader-election", "--leader-election-lease-duration=30s"],
        1,
    )
    .await;
    let paths: Vec<String> = (1..=2).map(|n| sim.vmdk_path("kubevols", n)).collect();
    for (n, path) in paths.iter().enumerate() {
        cluster.create_pv(&format!("pv-{n}"), path).await;
    }
    let daemon = Daemon::spawn(&cluster, &sim, "volmig-elected", &[]);
    daemon.wait_ready().await;
    wait_for(
        Duration::from_secs(30),
        "volmig waits (mode follow)",
        || async {
            daemon
                .metric("volmig_registrar_mode{mode=\"follow\"}")
                .await
                .filter(|v| *v == 1.0)
        },
    )
    .await;
    // Two full-sync periods: nothing is created, and the Lease is not volmig's.
    tokio::time::sleep(Duration::from_secs(7)).await;
    assert!(
        sim.volumes().await.is_empty(),
        "volmig created beside a standing driver"
    );
    assert_eq!(syncer_holder(&cluster).await, None);

    let deployments: Api<Deployment> = Api::namespaced(cluster.client.clone(), DRIVER_NAMESPACE);
    deployments
        .delete("vsphere-csi-controller", &DeleteParams::default())
        .await
        .expect("delete the driver's Deployment");
    wait_for(Duration::from_secs(60), "every path Registered", || async {
        let all = cluster.list_migrations().await;
        (all.len() == paths.len() && all.iter().all(|vm| phase(vm) == Some(Phase::Registered)))
            .then_some(())
    })
    .await;
    assert_eq!(sim.volumes().await.len(), paths.len());
    assert_eq!(
        syncer_holder(&cluster).await.as_deref(),
        Some("volmig/volmig-elected"),
        "volmig registered while it held the Lease"
    );
}

fn canonical(raw: &str) -> String {
    VolumePath::parse(raw).unwrap().canonical()
}

/// The syncer Lease's holder now (`None`: no Lease or no holder).
async fn syncer_holder(cluster: &Cluster) -> Option<String> {
    let api: Api<Lease> = Api::namespaced(cluster.client.clone(), DRIVER_NAMESPACE);
    api.get_opt("vsphere-syncer")
        .await
        .unwrap()
        .and_then(|l| l.spec?.holder_identity)
        .filter(|h| !h.is_empty())
}

/// Path → ID of every Registered VolumeMigration.
async fn registered_ids(cluster: &Cluster) -> BTreeMap<String, String> {
    cluster
        .list_migrations()
        .await
        .iter()
        .filter(|vm| phase(vm) == Some(Phase::Registered))
        .filter_map(|vm| Some((vm.spec.volume_path.clone(), volume_id(vm)?)))
        .collect()
}

/// Case b, docs/design.md §8.7: volmig holds the syncer's Lease from the start; the double
/// (stock leader election, registration on a miss) cannot lead until every path is
/// Registered and published, then its full sync creates nothing for them; a PV created
/// after the hand-over is registered by the double and adopted by volmig.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hold_hands_the_lease_over_once_every_path_is_registered_and_published() {
    // 7.0 U1 and later: volmig hands over only where CNS answers the cold term's
    // registrations of known disks with AlreadyRegistered (docs/design.md §8.2).
    let sim = Vcsim::start(VcsimOptions::default().vmdks(8).vcenter_version("7.0.3")).await;
    let cluster = cluster_for_hold().await;
    let paths: Vec<String> = (1..=6).map(|n| sim.vmdk_path("kubevols", n)).collect();
    for (n, path) in paths.iter().enumerate() {
        cluster.create_pv(&format!("pv-{n}"), path).await;
    }
    let daemon = Daemon::spawn(
        &cluster,
        &sim,
        "volmig-hold",
        &["--hold-driver-syncer", "--full-sync-interval", "2s"],
    );
    daemon.wait_ready().await;
    wait_for(
        Duration::from_secs(30),
        "volmig holds the syncer Lease",
        || async {
            syncer_holder(&cluster)
                .await
                .filter(|h| h == "volmig/volmig-hold")
        },
    )
    .await;
    // The driver starts while volmig holds: it campaigns and must not lead.
    let driver = CsiDriverDouble::start(&cluster, &sim, DriverOptions::default()).await;
    let mut led_early = false;
    let handed_over = Instant::now() + Duration::from_secs(90);
    loop {
        let registered = registered_ids(&cluster).await;
        let holder = syncer_holder(&cluster).await;
        if driver.is_leading() && registered.len() < paths.len() {
            led_early = true;
        }
        if holder.as_deref() == Some(DriverOptions::default().identity.as_str()) {
            break;
        }
        assert!(
            Instant::now() < handed_over,
            "no hand-over within 90 s (holder {holder:?}, {} of {} Registered)\n{}",
            registered.len(),
            paths.len(),
            daemon.log_text()
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(
        !led_early,
        "the driver led before every path was Registered: {:?}",
        driver.log()
    );
    let ids = registered_ids(&cluster).await;
    assert_eq!(ids.len(), paths.len(), "{ids:?}");
    assert!(
        daemon.log_text().contains("handed over"),
        "the hand-over is logged"
    );

    // The double now leads; its first term starts cold (its cache informer is not waited
    // for), so what it reaches before the list is registered again and answered
    // AlreadyRegistered: no second volume.
    let syncs = driver.full_syncs();
    wait_for(
        Duration::from_secs(30),
        "a full sync of the driver",
        || async { (driver.full_syncs() > syncs).then_some(()) },
    )
    .await;
    eprintln!(
        "figure: the driver's cold first term sent {} registrations of held paths",
        driver.creates()
    );
    assert_eq!(
        sim.volumes().await.len(),
        paths.len(),
        "the driver made a second volume of a held path: {:?}",
        driver.log()
    );
    for path in &paths {
        assert_eq!(
            driver.attach_lookup(path).as_deref(),
            ids.get(&canonical(path)).map(String::as_str),
            "{path}"
        );
    }

    // A new PV after the hand-over: the driver registers it, volmig adopts its ID.
    let late = sim.vmdk_path("kubevols", 7);
    cluster.create_pv("pv-late", &late).await;
    let adopted = wait_for(Duration::from_secs(60), "the late PV adopted", || async {
        registered_ids(&cluster)
            .await
            .get(&canonical(&late))
            .cloned()
    })
    .await;
    assert_eq!(
        driver.attach_lookup(&late).as_deref(),
        Some(adopted.as_str())
    );
    assert_eq!(sim.volumes().await.len(), paths.len() + 1);
    assert!(
        sim.duplicates().await.is_empty(),
        "{:?}",
        sim.duplicates().await
    );
    assert_eq!(
        daemon
            .metric("volmig_registrar_mode{mode=\"follow\"}")
            .await,
        Some(1.0)
    );
    let events = cluster.events("RegistrarModeChanged").await;
    assert!(
        events
            .iter()
            .any(|(_, note)| note.starts_with("registrar mode: hold")),
        "{events:?}"
    );
}

/// Case b, second part: the holding volmig is SIGKILLed while its create task runs (8 s on
/// an 8.0.3 profile, whose CNS answers a create of a registered disk with
/// `CnsAlreadyRegisteredFault`). The double starts at once; a second volmig takes the Lease
/// over. The double never leads before that create has landed, and every vmdk ends with
/// one CNS volume.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_holder_never_lets_the_driver_lead_before_its_create_lands() {
    let sim = Vcsim::start(
        VcsimOptions::default()
            .vmdks(3)
            .vcenter_version("8.0.3")
            .cns_task_duration(Duration::from_secs(8)),
    )
    .await;
    let cluster = cluster_for_hold().await;
    let paths: Vec<String> = (1..=3).map(|n| sim.vmdk_path("kubevols", n)).collect();
    for (n, path) in paths.iter().enumerate() {
        cluster.create_pv(&format!("pv-{n}"), path).await;
    }
    // Grace 3 s + 10 s: the Lease is written for 43 s, creates sent up to 30 s after a
    // renewal.
    let timeouts = [
        "--hold-driver-syncer",
        "--vc-request-timeout",
        "3s",
        "--vc-task-timeout",
        "10s",
    ];
    let mut first = Daemon::spawn(&cluster, &sim, "volmig-hold-1", &timeouts);
    wait_for(Duration::from_secs(60), "a create in flight", || async {
        (!sim.creates().await.is_empty()).then_some(())
    })
    .await;
    let sent = Instant::now();
    first.kill().await;
    let driver = CsiDriverDouble::start(&cluster, &sim, DriverOptions::default()).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let second = Daemon::spawn(&cluster, &sim, "volmig-hold-2", &timeouts);
    let task_end = sent + Duration::from_secs(8);
    let deadline = Instant::now() + Duration::from_secs(150);
    loop {
        if driver.is_leading() {
            assert!(
                Instant::now() > task_end,
                "the driver leads before the killed holder's create landed: {:?}",
                driver.log()
            );
        }
        let ids = registered_ids(&cluster).await;
        if ids.len() == paths.len() && driver.is_leading() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "not settled (registered {ids:?}, driver leading {})\n{}",
            driver.is_leading(),
            second.log_text()
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(
        sim.duplicates().await.is_empty(),
        "{:?}",
        sim.duplicates().await
    );
    assert_eq!(sim.volumes().await.len(), paths.len());
    let ids = registered_ids(&cluster).await;
    for path in &paths {
        assert_eq!(
            driver.attach_lookup(path).as_deref(),
            ids.get(&canonical(path)).map(String::as_str),
            "{path}: {:?}",
            driver.log()
        );
    }
}
