//! End-to-end: two Kubernetes clusters on one vCenter (docs/design.md §6.4). CNS volume
//! names carry no cluster ID and full sync lists every CNS volume of the vCenter, so
//! cluster A sees cluster B's volmig-named volumes, with no PV or VolumeMigration of A
//! behind them. `--gc-orphans` on A must unregister A's own orphans only: B's live volume
//! keeps its ID. Real `volmig` binaries, two control planes, one govmomi simulator.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "test code: failures should panic"
)]

#[path = "support/e2e.rs"]
mod e2e;
#[path = "support/vcsim.rs"]
mod vcsim;

use std::time::Duration;

use e2e::{Cluster, Daemon, phase, volume_id, wait_for};
use vcsim::{Vcsim, VcsimOptions};
use volmig::VolumePath;
use volmig::volume_migration::Phase;

/// The cluster ID of cluster A ([`Daemon::spawn`]'s default).
const CLUSTER_A: &str = "e2e-cluster";
/// The cluster ID of cluster B.
const CLUSTER_B: &str = "cluster-b";
/// How long registration or a repair may take.
const CONVERGE: Duration = Duration::from_secs(120);

/// Waits until `volume_path` is Registered in `cluster`; returns its volume ID.
async fn registered(cluster: &Cluster, volume_path: &str, who: &str) -> String {
    wait_for(
        CONVERGE,
        &format!("{who}: {volume_path} Registered"),
        || async {
            let vm = cluster.migration(volume_path).await?;
            (phase(&vm) == Some(Phase::Registered))
                .then(|| volume_id(&vm))
                .flatten()
        },
    )
    .await
}

/// The `ok` full-sync passes `daemon` has made.
async fn passes(daemon: &Daemon) -> f64 {
    daemon
        .metric("volmig_full_sync_passes_total{result=\"ok\"}")
        .await
        .unwrap_or(0.0)
}

/// Waits until `daemon` has completed `n` more full-sync passes than `since`.
async fn more_passes(daemon: &Daemon, since: f64, n: f64, who: &str) {
    wait_for(
        CONVERGE,
        &format!("{who}: {n} more full-sync passes"),
        || async { (passes(daemon).await >= since + n).then_some(()) },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gc_orphans_unregisters_this_clusters_orphans_never_another_clusters_volumes() {
    let sim = Vcsim::start(VcsimOptions::default().vmdks(3)).await;
    let canonical = |n| VolumePath::parse(&sim.vmdk_path("kubevols", n)).unwrap();
    let (disk_a, disk_b, disk_orphan) = (canonical(1), canonical(2), canonical(3));

    // Cluster B (always a control plane of its own, even with VOLMIG_E2E_KUBECONFIG) registers disk 2 and
    // keeps running: its volume is live, in use by B's PV.
    let cluster_b = Cluster::start_with_identity(&e2e::chart_rbac()).await;
    cluster_b.create_pv("pv-b", &disk_b.canonical()).await;
    let daemon_b = Daemon::spawn(
        &cluster_b,
        &sim,
        "cluster-b",
        &["--cluster-id", CLUSTER_B, "--full-sync-interval", "1s"],
    );
    let b_id = registered(&cluster_b, &disk_b.canonical(), "cluster B").await;
    let b_volume = sim.volumes_for(&disk_b.canonical()).await;
    assert_eq!(
        b_volume
            .iter()
            .map(|v| (&v.id, &v.cluster_id))
            .collect::<Vec<_>>(),
        [(&b_id, &CLUSTER_B.to_owned())],
        "B's registration names B's cluster"
    );
    assert_eq!(b_volume[0].name, disk_b.cns_volume_name());

    // A real orphan of cluster A: registered under volmig's name for disk 3 with A's
    // cluster ID, and nothing in A uses disk 3.
    let soap = sim.soap().await;
    let orphan_file = disk_orphan.canonical();
    let orphan_file = orphan_file.split_once("] ").unwrap().1;
    let orphan_id = soap
        .create_volume(
            &disk_orphan.cns_volume_name(),
            &sim.datacenter,
            &sim.datastores[0].name,
            orphan_file,
            CLUSTER_A,
        )
        .await;

    // Cluster A uses disk 1 only, and collects orphans.
    let cluster_a = Cluster::start().await;
    cluster_a.create_pv("pv-a", &disk_a.canonical()).await;
    let daemon_a = Daemon::spawn(
        &cluster_a,
        &sim,
        "cluster-a",
        &["--gc-orphans", "--full-sync-interval", "1s"],
    );
    registered(&cluster_a, &disk_a.canonical(), "cluster A").await;

    // A's own orphan goes (so A's passes do collect, and read the cluster metadata)...
    wait_for(CONVERGE, "cluster A collects its own orphan", || async {
        let ids: Vec<String> = sim.volumes().await.into_iter().map(|v| v.id).collect();
        (!ids.contains(&orphan_id)).then_some(())
    })
    .await;
    // ... and two more passes of A leave B's volume alone.
    let since = passes(&daemon_a).await;
    more_passes(&daemon_a, since, 2.0, "cluster A").await;

    let b_now = sim.volumes_for(&disk_b.canonical()).await;
    assert_eq!(
        b_now.iter().map(|v| v.id.as_str()).collect::<Vec<_>>(),
        [b_id.as_str()],
        "cluster B's volume is untouched: same ID, no re-registration"
    );
    assert_eq!(
        registered(&cluster_b, &disk_b.canonical(), "cluster B").await,
        b_id,
        "cluster B still publishes the ID it registered"
    );
    assert!(
        !daemon_a.log_text().contains(&b_id),
        "cluster A never acted on (nor reported) B's volume {b_id}"
    );
    // The orphan gauge of each daemon counts its own cluster's orphans only: none left
    // in A, and A's volume of disk 1 is not B's orphan.
    let since_b = passes(&daemon_b).await;
    more_passes(&daemon_b, since_b, 1.0, "cluster B").await;
    for (daemon, who) in [(&daemon_a, "A"), (&daemon_b, "B")] {
        assert_eq!(
            daemon.metric("volmig_orphan_volumes").await,
            Some(0.0),
            "cluster {who}'s orphan gauge"
        );
    }
    assert_eq!(
        sim.volumes().await.len(),
        2,
        "one volume each for disks 1 (A) and 2 (B)"
    );
}
