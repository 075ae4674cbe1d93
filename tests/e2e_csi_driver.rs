//! volmig beside a faithful double of the vSphere CSI driver (tests/support/csi_driver/,
//! docs/design.md §8.3, §8.7, §8.8), end to end: the double's syncer leads through its
//! `vsphere-syncer` Lease and registers on its cache misses, the real `volmig` binary
//! follows (creates nothing), adopts, publishes alias spellings, and repairs what the
//! driver's own PV deletion breaks. API test server and simulator harness.

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

use std::sync::Arc;
use std::time::Duration;

use csi_driver::verdict::{creates_by_volmig, end_state_gap, live_pvs, sample_duplicates};
use csi_driver::{CsiDriverDouble, DriverOptions};
use e2e::{Cluster, Daemon, phase, wait_for};
use kube::api::{Api, ListParams};
use vcsim::{Vcsim, VcsimOptions};
use volmig::k8s::driver_cache::CnsVSphereVolumeMigration;
use volmig::volume_migration::Phase;

/// Waits until the double completes a full-sync pass after now.
async fn after_next_full_sync(driver: &CsiDriverDouble) {
    let n = driver.full_syncs();
    let done = tokio::time::timeout(Duration::from_secs(30), async {
        while driver.full_syncs() <= n {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    assert!(
        done.is_ok(),
        "no driver full sync within 30 s; driver log:\n{}",
        driver.log().join("\n")
    );
}

async fn follow_mode(daemon: &Daemon) {
    wait_for(Duration::from_secs(30), "registrar mode follow", || async {
        daemon
            .metric("volmig_registrar_mode{mode=\"follow\"}")
            .await
            .filter(|v| *v == 1.0)
    })
    .await;
}

/// What the double did, the driver's objects, volmig's statuses of unsettled paths, and
/// volmig's log lines about `focus` (a vmdk file name), for failure messages.
async fn diagnostics(
    cluster: &Cluster,
    driver: &CsiDriverDouble,
    daemon: &Daemon,
    focus: &str,
) -> String {
    let objects: Vec<String> = Api::<CnsVSphereVolumeMigration>::all(cluster.client.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|o| o.spec.volumepath.contains(focus))
        .map(|o| {
            format!(
                "{} {:?} -> {} labels={:?}",
                o.metadata.name.unwrap_or_default(),
                o.spec.volumepath,
                o.spec.volumeid,
                o.metadata.labels.unwrap_or_default()
            )
        })
        .collect();
    let statuses: Vec<String> = cluster
        .list_migrations()
        .await
        .into_iter()
        .filter(|vm| {
            vm.metadata
                .name
                .as_deref()
                .unwrap_or_default()
                .contains(&focus.replace(".vmdk", ""))
        })
        .map(|vm| format!("{:?}", vm.status))
        .collect();
    let log = daemon.log_text();
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains(focus) && !l.contains("DEBUG"))
        .collect();
    let tail = &lines[lines.len().saturating_sub(6)..];
    format!(
        "driver log:\n{}\ndriver objects for {focus}:\n{}\nvolmig status: {statuses:?}\nvolmig log about {focus} (last 6):\n{}",
        driver
            .log()
            .iter()
            .filter(|l| !l.contains(" registered \""))
            .cloned()
            .collect::<Vec<_>>()
            .join("\n"),
        objects.join("\n"),
        tail.join("\n")
    )
}

/// (a) volmig follows a leading driver through a burst, an alias, a PV deletion on a shared
/// vmdk and two clean-up passes: it never creates, no vmdk ever has two volumes, and every
/// live PV ends hitting the driver's cache with its vmdk's one volume.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follows_the_leading_driver_through_burst_alias_deletion_and_cleanup() {
    let sim = Arc::new(Vcsim::start(VcsimOptions::default().vmdks(58)).await);
    let cluster = Cluster::start().await;
    cluster.install_driver_crd().await;
    for n in 1..=40 {
        cluster
            .create_pv(&format!("pv-{n}"), &sim.vmdk_path("kubevols", n))
            .await;
    }
    let (duplicates, sampler) = sample_duplicates(&sim);
    let driver = CsiDriverDouble::start(&cluster, &sim, DriverOptions::default()).await;
    wait_for(
        Duration::from_secs(60),
        "the driver registers the 40",
        || async { (driver.is_leading() && driver.cache_snapshot().len() == 40).then_some(()) },
    )
    .await;

    let daemon = Daemon::spawn(&cluster, &sim, "volmig-follow", &[]);
    daemon.wait_ready().await;
    follow_mode(&daemon).await;
    wait_for(Duration::from_secs(60), "volmig adopts the 40", || async {
        let all = cluster.list_migrations().await;
        (all.len() == 40 && all.iter().all(|vm| phase(vm) == Some(Phase::Registered))).then_some(())
    })
    .await;

    // A burst right after a driver full sync: 18 new vmdks and two alias spellings.
    after_next_full_sync(&driver).await;
    let ds = sim.datastores[0].inventory_path.clone();
    for n in 41..=58 {
        cluster
            .create_pv(&format!("pv-{n}"), &sim.vmdk_path("kubevols", n))
            .await;
    }
    for n in 1..=2 {
        let alias = format!("[{ds}] kubevols//disk-{n:04}.vmdk");
        cluster.create_pv(&format!("pv-{n}-alias"), &alias).await;
    }
    wait_for(Duration::from_secs(90), "the burst settles", || async {
        end_state_gap(&cluster, &sim, &driver)
            .await
            .is_none()
            .then_some(())
    })
    .await;

    // The driver's PV deletion unregisters the volume the alias PV still uses.
    cluster.delete_pv("pv-1").await;
    let settled = tokio::time::timeout(Duration::from_secs(90), async {
        loop {
            tokio::time::sleep(Duration::from_secs(2)).await;
            if end_state_gap(&cluster, &sim, &driver).await.is_none() {
                return;
            }
        }
    })
    .await;
    for _ in 0..2 {
        let deleted = driver.run_cleanup().await.expect("clean-up pass");
        eprintln!("clean-up deleted {deleted:?}");
        tokio::time::sleep(Duration::from_secs(3)).await;
    }
    if settled.is_err() {
        // One more full-sync period after the clean-ups before judging.
        tokio::time::sleep(Duration::from_secs(12)).await;
    }
    sampler.abort();

    let gap = end_state_gap(&cluster, &sim, &driver).await;
    let live = live_pvs(&cluster).await;
    let misses_before = driver.attach_misses();
    for raw in live.values() {
        driver.attach_lookup(raw);
    }
    let (volmig_creates, all_creates) = creates_by_volmig(&sim).await;
    let why = diagnostics(&cluster, &driver, &daemon, "disk-0001.vmdk").await;
    assert_eq!(live.len(), 59, "58 vmdks, one alias PV left");
    assert!(
        volmig_creates.is_empty(),
        "volmig created {volmig_creates:?}\n{why}"
    );
    assert_eq!(
        all_creates,
        driver.creates(),
        "every create is the driver's\n{why}"
    );
    let duplicates = duplicates.lock().unwrap().clone();
    assert!(
        duplicates.is_empty(),
        "a vmdk had two volumes: {duplicates:?}\n{why}"
    );
    assert_eq!(gap, None, "end state\n{why}");
    assert_eq!(
        driver.attach_misses() - misses_before,
        0,
        "attach-time misses\n{why}"
    );
}

/// (c) The driver crashes and restarts mid-run: its cache is rebuilt from one list and
/// every PV hits. Its new term starts cold, so what it reaches before the list is
/// registered again: on 7.0 U1 and later CNS answers AlreadyRegistered with the same ID, and
/// no new volume appears (below it each such call is a second volume, the driver's own
/// bug; docs/design.md §8.8).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_driver_restart_rebuilds_its_cache_from_a_list_without_a_miss_or_a_new_volume() {
    let sim =
        Arc::new(Vcsim::start(VcsimOptions::default().vmdks(20).vcenter_version("7.0.3")).await);
    let cluster = Cluster::start().await;
    cluster.install_driver_crd().await;
    for n in 1..=20 {
        cluster
            .create_pv(&format!("pv-{n}"), &sim.vmdk_path("kubevols", n))
            .await;
    }
    let (duplicates, sampler) = sample_duplicates(&sim);
    let opts = DriverOptions {
        full_sync_interval: Duration::from_secs(5),
        ..DriverOptions::default()
    };
    let mut driver = CsiDriverDouble::start(&cluster, &sim, opts).await;
    wait_for(
        Duration::from_secs(60),
        "the driver registers the 20",
        || async { (driver.cache_snapshot().len() == 20).then_some(()) },
    )
    .await;
    let daemon = Daemon::spawn(&cluster, &sim, "volmig-follow", &[]);
    daemon.wait_ready().await;
    follow_mode(&daemon).await;
    after_next_full_sync(&driver).await;
    let ds = sim.datastores[0].inventory_path.clone();
    let alias = format!("[{ds}] kubevols//disk-0003.vmdk");
    cluster.create_pv("pv-3-alias", &alias).await;
    wait_for(
        Duration::from_secs(90),
        "volmig adopts and publishes",
        || async {
            end_state_gap(&cluster, &sim, &driver)
                .await
                .is_none()
                .then_some(())
        },
    )
    .await;

    let creates = driver.creates();
    let volumes = sim.volumes().await.len();
    let events = driver.cache_events().len();
    let before = driver.cache_snapshot();
    driver.restart().await;
    wait_for(
        Duration::from_secs(30),
        "the driver leads again",
        || async { (driver.is_leading() && driver.cache_synced()).then_some(()) },
    )
    .await;
    assert_eq!(
        driver.cache_snapshot(),
        before,
        "the same cache, from one list"
    );
    let rebuilt = driver.cache_events()[events..].to_vec();
    assert!(
        rebuilt
            .iter()
            .all(|e| e.from_list && e.kind == csi_driver::cache::CacheEventKind::Add),
        "{rebuilt:?}"
    );
    for raw in live_pvs(&cluster).await.values() {
        assert!(
            driver.attach_lookup(raw).is_some(),
            "{raw} misses after the restart"
        );
    }
    after_next_full_sync(&driver).await;
    after_next_full_sync(&driver).await;
    sampler.abort();
    let why = diagnostics(&cluster, &driver, &daemon, "disk-0003.vmdk").await;
    assert_eq!(driver.attach_misses(), 0, "{why}");
    eprintln!(
        "figure: the restarted driver's cold term sent {} registrations",
        driver.creates() - creates
    );
    assert_eq!(
        sim.volumes().await.len(),
        volumes,
        "no new volume after the restart\n{why}"
    );
    let (volmig_creates, _) = creates_by_volmig(&sim).await;
    assert!(volmig_creates.is_empty(), "{volmig_creates:?}");
    assert!(
        duplicates.lock().unwrap().is_empty(),
        "{:?}",
        duplicates.lock().unwrap()
    );
    assert_eq!(end_state_gap(&cluster, &sim, &driver).await, None, "{why}");
}
