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

#[path = "support/csi_driver/mod.rs"]
mod csi_driver;
#[path = "support/e2e.rs"]
mod e2e;
#[path = "support/vcsim.rs"]
mod vcsim;

use std::time::Duration;

use csi_driver::{CsiDriverDouble, DriverOptions};
use e2e::{Cluster, Daemon, phase, volume_id, wait_for};
use vcsim::{Vcsim, VcsimOptions};
use volmig::VolumePath;
use volmig::volume_migration::Phase;

fn canonical(path: &str) -> String {
    VolumePath::parse(path).unwrap().canonical()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follows_a_leading_driver_syncer_then_registers_when_it_stops() {
    let sim = Vcsim::start(VcsimOptions::default().vmdks(6)).await;
    let cluster = Cluster::start().await;
    cluster.install_driver_crd().await;
    let paths: Vec<String> = (1..=6).map(|n| sim.vmdk_path("kubevols", n)).collect();
    // The driver's syncer leads (4 s Lease renewed every second); its first full sync
    // registers the two PVs that exist, under names of its own, and writes its objects.
    for (n, path) in paths.iter().take(2).enumerate() {
        cluster.create_pv(&format!("pv-{n}"), path).await;
    }
    let opts = DriverOptions {
        // No second full sync during the test: the later PVs stay unregistered by it.
        full_sync_interval: Duration::from_secs(600),
        cleanup_interval: None,
        ..DriverOptions::default()
    };
    let mut driver = CsiDriverDouble::start(&cluster, &sim, opts).await;
    let cached = wait_for(
        Duration::from_secs(30),
        "the driver registers two",
        || async {
            let cache = driver.cache_snapshot();
            (driver.is_leading() && cache.len() == 2).then_some(cache)
        },
    )
    .await;
    let theirs: Vec<String> = paths.iter().take(2).map(|p| cached[p].clone()).collect();
    for (n, path) in paths.iter().enumerate().skip(2) {
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
    // volmig adopts what the syncer registered.
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
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        sim.volumes().await.len(),
        2,
        "volmig created while the driver's syncer leads: {:?}",
        sim.volumes().await
    );
    for path in paths.iter().skip(2) {
        let vm = cluster.migration(&canonical(path)).await;
        assert!(
            vm.as_ref().and_then(phase) != Some(Phase::Registering),
            "no write-ahead while following: {vm:?}"
        );
    }

    // The syncer dies without releasing its Lease: after its 4 s volmig registers the rest.
    driver.crash().await;
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
