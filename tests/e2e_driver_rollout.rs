//! One registrar through the CSI driver's own life (docs/design.md §8.2): a rollout of its
//! controller Deployment (3 syncer replicas, the leading pod deleted mid-burst: it exits
//! without releasing the Lease and a standby leads one lease duration later), and the
//! hand-over of hold mode to a driver whose every term starts cold. The real `volmig`
//! binary beside the driver double (tests/support/csi_driver/, faithful to
//! kubernetes-sigs/vsphere-csi-driver @ bf80902), with the simulator's CNS task latency at
//! zero and at several seconds (a loaded vCenter).
//!
//! Lease timings are the stock manifest's (30 s / 20 s / 10 s, jitter 1.2,
//! `manifests/vanilla/vsphere-csi-driver.yaml:347-350`) divided by five.

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

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use csi_driver::verdict::{creates_by_volmig, end_state_gap, sample_duplicates, settles};
use csi_driver::{CsiDriverDouble, DriverOptions};
use e2e::{Cluster, Daemon, wait_for};
use vcsim::{Vcsim, VcsimOptions};

/// vCenter 8.0.3: registration sets protection, and an existing volume is protected by
/// registering it again (a create), which only the Lease holder may send.
const MODERN_VCENTER: &str = "8.0.3";

/// The stock manifest's syncer, 3 replicas and its Deployment, timings divided by five.
fn stock_driver() -> DriverOptions {
    DriverOptions {
        replicas: 3,
        deployment: true,
        lease_duration: Duration::from_secs(6),
        renew_deadline: Duration::from_secs(4),
        retry_period: Duration::from_secs(2),
        full_sync_interval: Duration::from_secs(10),
        // The PV controller's status update right after a PV's creation (see syncer.rs).
        register_on_pv_add: true,
        ..DriverOptions::default()
    }
}

/// Waits for `/readyz`; panics with the tail of volmig's log.
async fn ready(daemon: &Daemon) {
    let ok = tokio::time::timeout(Duration::from_secs(60), async {
        while !matches!(daemon.get("/readyz").await, Some((200, _))) {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;
    if ok.is_err() {
        let log = daemon.log_text();
        let tail: Vec<&str> = log.lines().rev().take(40).collect();
        panic!(
            "volmig not ready within 60 s; its log, newest first:\n{}",
            tail.join("\n")
        );
    }
}

/// The driver's registration calls answered with a volume that already existed (CNS's
/// AlreadyRegistered from 7.0 U1): every create call beyond the volumes its names made.
async fn already_registered_calls(sim: &Vcsim, driver: &CsiDriverDouble) -> usize {
    let names: BTreeSet<String> = driver.created_names().into_iter().collect();
    let made = sim
        .volumes()
        .await
        .iter()
        .filter(|v| names.contains(&v.name))
        .count();
    driver.creates().saturating_sub(made)
}

/// 12 PVs the driver registers and volmig follows; a burst of 8 new PVs during which the
/// leading syncer's pod is deleted; then the next syncer leads. volmig never creates, no vmdk
/// gets two volumes, and every PV ends published with the driver's ID.
async fn rollout(task_latency: Duration) {
    let sim = Arc::new(Vcsim::start(VcsimOptions::default().vmdks(20)).await);
    // A release whose CNS answers a second registration of a disk with AlreadyRegistered:
    // below 7.0 U1 the driver's own cold terms make second volumes (docs/design.md §8.1).
    sim.set_vcenter_version(MODERN_VCENTER).await;
    sim.set_cns_task_duration(task_latency).await;
    let cluster = Cluster::start().await;
    cluster.install_driver_crd().await;
    for n in 1..=12 {
        cluster
            .create_pv(&format!("pv-{n}"), &sim.vmdk_path("kubevols", n))
            .await;
    }
    let (duplicates, sampler) = sample_duplicates(&sim);
    let mut driver = CsiDriverDouble::start(&cluster, &sim, stock_driver()).await;
    let daemon = Daemon::spawn(&cluster, &sim, "volmig-rollout", &[]);
    ready(&daemon).await;
    wait_for(Duration::from_secs(120), "the first 12 settle", || async {
        end_state_gap(&cluster, &sim, &driver)
            .await
            .is_none()
            .then_some(())
    })
    .await;

    for n in 13..=16 {
        cluster
            .create_pv(&format!("pv-{n}"), &sim.vmdk_path("kubevols", n))
            .await;
    }
    let deleted = driver.delete_leader_pod().await.expect("a syncer leads");
    for n in 17..=20 {
        cluster
            .create_pv(&format!("pv-{n}"), &sim.vmdk_path("kubevols", n))
            .await;
    }
    wait_for(Duration::from_secs(60), "a standby leads", || async {
        driver.leader().filter(|l| *l != deleted)
    })
    .await;
    let settled = settles(&cluster, &sim, &driver, Duration::from_secs(120)).await;
    sampler.abort();

    let (volmig_creates, all_creates) = creates_by_volmig(&sim).await;
    let duplicates = duplicates.lock().unwrap().clone();
    let gap = end_state_gap(&cluster, &sim, &driver).await;
    let log = driver.log().join("\n");
    eprintln!(
        "figures (task latency {task_latency:?}): driver terms {}, driver create calls {}, \
         of which answered with an existing volume {}; all creates {all_creates}",
        driver.terms(),
        driver.creates(),
        already_registered_calls(&sim, &driver).await,
    );
    assert!(
        volmig_creates.is_empty(),
        "volmig created {volmig_creates:?} while the driver's Deployment stood\n{log}"
    );
    assert_eq!(
        all_creates,
        driver.creates(),
        "every CnsCreateVolume is the driver's (a protecting re-registration is one too)\n{log}"
    );
    assert!(
        duplicates.is_empty(),
        "a vmdk had two volumes: {duplicates:?}\n{log}"
    );
    assert!(settled, "not settled: {gap:?}\n{log}");
    assert_eq!(gap, None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_driver_rollout_never_makes_volmig_a_registrar() {
    rollout(Duration::ZERO).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_driver_rollout_on_a_slow_vcenter_never_gives_a_vmdk_two_volumes() {
    rollout(Duration::from_secs(4)).await;
}

/// Hold mode on a slow vCenter: volmig holds the syncer's Lease while the stock Deployment
/// stands, registers every path, hands over; the driver's first term starts cold and calls
/// CNS for what its cache has not listed yet. No vmdk is created by both sides, none gets
/// two volumes, and every PV ends published with the one ID.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hold_hands_over_to_a_cold_driver_without_a_second_volume() {
    let sim = Arc::new(Vcsim::start(VcsimOptions::default().vmdks(10)).await);
    sim.set_vcenter_version(MODERN_VCENTER).await;
    sim.set_cns_task_duration(Duration::from_secs(3)).await;
    let cluster = Cluster::start().await;
    cluster.install_driver_crd().await;
    for n in 1..=10 {
        cluster
            .create_pv(&format!("pv-{n}"), &sim.vmdk_path("kubevols", n))
            .await;
    }
    let (duplicates, sampler) = sample_duplicates(&sim);
    let daemon = Daemon::spawn(
        &cluster,
        &sim,
        "volmig-hold",
        &["--hold-driver-syncer", "--in-flight-grace", "15s"],
    );
    ready(&daemon).await;
    wait_for(
        Duration::from_secs(30),
        "volmig holds the Lease",
        || async {
            daemon
                .metric("volmig_registrar_mode{mode=\"hold\"}")
                .await
                .filter(|v| *v == 1.0)
        },
    )
    .await;
    // The driver is installed while volmig holds: its syncers campaign and wait.
    let driver = CsiDriverDouble::start(&cluster, &sim, stock_driver()).await;
    let led = tokio::time::timeout(Duration::from_secs(180), async {
        while driver.leader().is_none() {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;
    let settled = settles(&cluster, &sim, &driver, Duration::from_secs(120)).await;
    sampler.abort();

    let (volmig_creates, _) = creates_by_volmig(&sim).await;
    let volmig_paths: BTreeSet<String> = sim
        .volumes()
        .await
        .into_iter()
        .filter(|v| v.name.starts_with("volmig-"))
        .map(|v| v.backing_path)
        .collect();
    let driver_names: BTreeSet<String> = driver.created_names().into_iter().collect();
    let both: Vec<String> = sim
        .volumes()
        .await
        .into_iter()
        .filter(|v| driver_names.contains(&v.name) && volmig_paths.contains(&v.backing_path))
        .map(|v| v.backing_path)
        .collect();
    let duplicates = duplicates.lock().unwrap().clone();
    let log = driver.log().join("\n");
    eprintln!(
        "figures: volmig creates {}, driver terms {}, driver create calls {} (answered with an \
         existing volume: {})",
        volmig_creates.len(),
        driver.terms(),
        driver.creates(),
        already_registered_calls(&sim, &driver).await,
    );
    assert!(
        led.is_ok(),
        "the driver never led after the hand-over\n{log}"
    );
    assert_eq!(volmig_creates.len(), 10, "volmig registered every path");
    assert!(both.is_empty(), "created by both sides: {both:?}\n{log}");
    assert!(
        duplicates.is_empty(),
        "a vmdk had two volumes: {duplicates:?}\n{log}"
    );
    assert!(
        settled,
        "not settled: {:?}\n{log}",
        end_state_gap(&cluster, &sim, &driver).await
    );
}
