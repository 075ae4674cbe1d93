//! End-to-end tests of survival and repair (docs/design.md §3.3, §4, §5, §6): crashes,
//! replica hand-over, lost and duplicated registrations, deletion, and API faults. Real
//! `volmig` binary, the API test server and the govmomi simulator.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "test code: failures should panic"
)]

#[path = "support/e2e.rs"]
mod e2e;
#[path = "support/vcsim.rs"]
mod vcsim;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use e2e::{Cluster, Daemon, phase, volume_id, wait_for};
use rand::{Rng, SeedableRng};
use vcsim::{Vcsim, VcsimOptions};
use volmig::VolumePath;
use volmig::volume_migration::Phase;

/// How long convergence may take (`VOLMIG_E2E_CONVERGE_SECS` shortens it when checking
/// that a deliberately broken build fails).
fn converge() -> Duration {
    let secs = std::env::var("VOLMIG_E2E_CONVERGE_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(180);
    Duration::from_secs(secs)
}

fn canonical(path: &str) -> String {
    VolumePath::parse(path).expect("valid").canonical()
}

/// Creates `n` PVs over the simulator's first `n` vmdks; returns their canonical paths.
async fn create_pvs(
    cluster: &Cluster,
    sim: &Vcsim,
    range: std::ops::RangeInclusive<usize>,
) -> BTreeSet<String> {
    let mut paths = BTreeSet::new();
    for n in range {
        let path = sim.vmdk_path("kubevols", n);
        cluster.create_pv(&format!("pv-{n}"), &path).await;
        paths.insert(canonical(&path));
    }
    paths
}

/// Waits until every path is Registered with exactly one CNS volume whose ID the status
/// holds; returns path → ID.
async fn all_registered_once(
    cluster: &Cluster,
    sim: &Vcsim,
    paths: &BTreeSet<String>,
) -> BTreeMap<String, String> {
    wait_for(
        converge(),
        "every path Registered with the one CNS volume",
        || async {
            let volumes = sim.volumes().await;
            let mut by_path: BTreeMap<String, Vec<String>> = BTreeMap::new();
            for v in volumes {
                by_path.entry(v.backing_path).or_default().push(v.id);
            }
            let mut out = BTreeMap::new();
            for vm in cluster.list_migrations().await {
                if phase(&vm) != Some(Phase::Registered) {
                    continue;
                }
                let path = vm.spec.volume_path.clone();
                let ids = by_path.get(&path).cloned().unwrap_or_default();
                if ids.len() == 1 && volume_id(&vm).as_deref() == Some(ids[0].as_str()) {
                    out.insert(path, ids[0].clone());
                }
            }
            paths.iter().all(|p| out.contains_key(p)).then_some(out)
        },
    )
    .await
}

/// The crash workload of acceptance 1 (and 6 with API faults): 100 PVs, creates delayed
/// 500 ms, the daemon SIGKILLed at `kills` random moments and restarted each time.
async fn crash_workload(kills: usize, faults: bool) {
    let seed: u64 = std::env::var("VOLMIG_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| rand::rng().random());
    println!("kill moments from seed {seed} (VOLMIG_TEST_SEED={seed} replays them)");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let sim = Vcsim::start(
        VcsimOptions::default()
            .vmdks(100)
            .delay("CnsCreateVolume", 500),
    )
    .await;
    // Fault injection needs the API test server; the crashes alone run on the real one.
    let cluster = if faults {
        Cluster::start_test_server().await
    } else {
        Cluster::start().await
    };
    let paths = create_pvs(&cluster, &sim, 1..=100).await;
    let flags = ["--in-flight-grace", "2s", "--full-sync-interval", "2s"];

    let stop_faults = tokio_util::sync::CancellationToken::new();
    let fault_task = if faults {
        let server = cluster
            .server
            .as_ref()
            .expect("fault injection needs the API test server");
        let handle = server.faults();
        handle.set_seed(seed);
        handle.set_write_failures(0.10, 0.05);
        let stop = stop_faults.clone();
        Some(tokio::spawn(async move {
            let mut compacted = false;
            loop {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(Duration::from_secs(3)) => {}
                }
                handle.drop_watches();
                if !compacted {
                    handle.compact();
                    compacted = true;
                }
            }
        }))
    } else {
        None
    };

    for i in 0..kills {
        let mut daemon = Daemon::spawn(&cluster, &sim, "crashy", &flags);
        let alive = Duration::from_millis(rng.random_range(300..2500));
        tokio::time::sleep(alive).await;
        daemon.kill().await;
        println!(
            "kill {}: after {alive:?}, {} CNS volumes so far",
            i + 1,
            sim.volumes().await.len()
        );
    }
    let daemon = Daemon::spawn(&cluster, &sim, "crashy", &flags);
    let ids = all_registered_once(&cluster, &sim, &paths).await;
    stop_faults.cancel();
    if let Some(task) = fault_task {
        task.await.unwrap();
        let server = cluster.test_server();
        server.faults().clear();
        let injected = server.stats().injected_failures;
        assert!(injected > 0, "faults were injected");
        println!("{injected} API requests failed by injection");
    }
    assert!(
        sim.duplicates().await.is_empty(),
        "no vmdk has two CNS volumes"
    );
    assert_eq!(sim.volumes().await.len(), 100);
    assert_eq!(ids.len(), 100);
    drop(daemon);
    println!(
        "{kills} SIGKILLs: exactly one CNS volume per vmdk, every status holds the simulator's ID"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_at_random_moments_never_duplicates() {
    crash_workload(20, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_faults_during_crashes_change_nothing() {
    crash_workload(5, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_leader_registers_and_a_follower_takes_over() {
    let sim = Vcsim::start(VcsimOptions::default().vmdks(40)).await;
    let cluster = Cluster::start_test_server().await;
    let lease = ["--lease-duration", "4s", "--full-sync-interval", "2s"];
    let mut a = Daemon::spawn(&cluster, &sim, "replica-a", &lease);
    a.wait_ready().await;
    wait_for(Duration::from_secs(20), "replica-a leads", || async {
        (a.metric("volmig_leader").await == Some(1.0)).then_some(())
    })
    .await;
    let b = Daemon::spawn(&cluster, &sim, "replica-b", &lease);
    b.wait_ready().await;
    assert_eq!(
        b.metric("volmig_leader").await,
        Some(0.0),
        "b follows but is ready"
    );

    let first = create_pvs(&cluster, &sim, 1..=20).await;
    all_registered_once(&cluster, &sim, &first).await;
    let stats = sim.stats().await;
    let creates_by = |stats: &vcsim::SimStats, who: &str| -> u64 {
        stats
            .calls_by_user_agent
            .iter()
            .filter(|(ua, _)| ua.contains(who))
            .map(|(_, calls)| calls.get("CnsCreateVolume").copied().unwrap_or(0))
            .sum()
    };
    assert_eq!(creates_by(&stats, "replica-a"), 20, "{stats:?}");
    assert_eq!(
        creates_by(&stats, "replica-b"),
        0,
        "a follower never creates"
    );

    // SIGKILL the leader: the follower completes new work within lease + one interval.
    a.kill().await;
    let killed = Instant::now();
    let second = create_pvs(&cluster, &sim, 21..=30).await;
    all_registered_once(&cluster, &sim, &second).await;
    let took = killed.elapsed();
    assert!(
        took <= Duration::from_secs(4 + 2 + 5),
        "took over in {took:?}"
    );
    assert!(sim.duplicates().await.is_empty());
    assert_eq!(b.metric("volmig_leader").await, Some(1.0));
    println!(
        "leader SIGKILLed: replica-b registered the next 10 PVs {took:?} later, no duplicates"
    );

    // SIGSTOP the new leader past its lease; the restarted replica-a takes over; after
    // SIGCONT the paused one must not write anything but its own lease bookkeeping.
    let a = Daemon::spawn(&cluster, &sim, "replica-a", &lease);
    a.wait_ready().await;
    b.signal("STOP");
    wait_for(Duration::from_secs(20), "replica-a leads again", || async {
        (a.metric("volmig_leader").await == Some(1.0)).then_some(())
    })
    .await;
    let third = create_pvs(&cluster, &sim, 31..=40).await;
    all_registered_once(&cluster, &sim, &third).await;
    let server = cluster.server.as_ref();
    let writes_of = |who: &str| -> u64 {
        server.map_or(0, |s| {
            s.stats()
                .writes_by_user_agent
                .iter()
                .filter(|(ua, _)| ua.contains(who))
                .map(|(_, n)| *n)
                .sum()
        })
    };
    let lease_writes = || server.map_or(0, |s| s.stats().writes_to("leases"));
    let (b_writes, all_lease_writes) = (writes_of("replica-b"), lease_writes());
    let b_creates = creates_by(&sim.stats().await, "replica-b");
    b.signal("CONT");
    tokio::time::sleep(Duration::from_secs(5)).await;
    // Lease writes are the election itself; anything else from b would be a stale leader.
    let b_new_writes = writes_of("replica-b") - b_writes;
    let new_lease_writes = lease_writes() - all_lease_writes;
    assert!(
        b_new_writes <= new_lease_writes,
        "the woken replica wrote {b_new_writes} objects ({new_lease_writes} lease writes in all)"
    );
    assert_eq!(
        creates_by(&sim.stats().await, "replica-b"),
        b_creates,
        "no create after waking"
    );
    assert_eq!(b.metric("volmig_leader").await, Some(0.0));
    assert!(sim.duplicates().await.is_empty());
    println!("SIGSTOP past the lease, SIGCONT: the old leader made no create and no object write");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_registrations_are_registered_again() {
    let mut sim = Vcsim::start(VcsimOptions::default().vmdks(6)).await;
    let cluster = Cluster::start().await;
    let paths = create_pvs(&cluster, &sim, 1..=6).await;
    let daemon = Daemon::spawn(&cluster, &sim, "repair", &["--full-sync-interval", "2s"]);
    let before = all_registered_once(&cluster, &sim, &paths).await;

    let victim = paths.iter().next().unwrap().clone();
    assert!(sim.delete_volume(&before[&victim]).await);
    let after = wait_for(converge(), "the lost volume registered again", || async {
        let ids = all_registered_once(&cluster, &sim, &paths).await;
        (ids[&victim] != before[&victim]).then_some(ids)
    })
    .await;
    for p in paths.iter().filter(|p| **p != victim) {
        assert_eq!(after[p], before[p], "{p} must keep its ID");
    }
    let events = cluster.events("ReRegistered").await;
    assert!(
        events
            .iter()
            .any(|(_, note)| note.contains(&before[&victim])),
        "{events:?}"
    );
    println!("a CNS volume deleted behind volmig's back was registered again with a Warning event");

    sim.restart().await;
    assert!(
        sim.volumes().await.is_empty(),
        "the simulator forgot everything"
    );
    let again = wait_for(
        converge(),
        "every path registered after the restart",
        || async {
            let ids = all_registered_once(&cluster, &sim, &paths).await;
            paths.iter().all(|p| ids[p] != after[p]).then_some(ids)
        },
    )
    .await;
    assert_eq!(again.len(), 6);
    assert!(sim.duplicates().await.is_empty());
    drop(daemon);
    println!("simulator restart: every path registered again, statuses updated");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn planted_duplicates_are_reported() {
    let sim = Vcsim::start(VcsimOptions::default().vmdks(2)).await;
    let cluster = Cluster::start().await;
    let paths = create_pvs(&cluster, &sim, 1..=2).await;
    let daemon = Daemon::spawn(&cluster, &sim, "dups", &["--full-sync-interval", "2s"]);
    let ids = all_registered_once(&cluster, &sim, &paths).await;
    let target = paths.iter().next().unwrap().clone();

    let soap = sim.soap().await;
    let ds = &sim.datastores[0].name;
    let file = target.split_once("] ").unwrap().1;
    let mut planted = BTreeSet::new();
    for i in 0..2 {
        let id = soap
            .create_volume(
                &format!("pvc-planted-{i}"),
                &sim.datacenter,
                ds,
                file,
                "other-cluster",
            )
            .await;
        planted.insert(id);
    }
    let vm = wait_for(converge(), "duplicates reported in the status", || async {
        cluster.migration(&target).await.filter(|vm| {
            let dups: BTreeSet<String> = vm
                .status
                .as_ref()
                .and_then(|s| s.duplicate_volume_ids.clone())
                .unwrap_or_default()
                .into_iter()
                .collect();
            dups == planted
        })
    })
    .await;
    assert_eq!(
        volume_id(&vm),
        Some(ids[&target].clone()),
        "the status ID is kept"
    );
    let events = wait_for(
        Duration::from_secs(20),
        "DuplicateVolumes event",
        || async {
            let e = cluster.events("DuplicateVolumes").await;
            (!e.is_empty()).then_some(e)
        },
    )
    .await;
    assert!(events[0].1.contains(&ids[&target]), "{events:?}");
    assert_eq!(daemon.metric("volmig_duplicate_volumes").await, Some(1.0));
    println!("2 planted duplicates: listed in duplicateVolumeIDs, Warning event, metric = 1");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deletion_flows() {
    let sim = Vcsim::start(VcsimOptions::default().vmdks(3)).await;
    let cluster = Cluster::start().await;
    let paths = create_pvs(&cluster, &sim, 1..=3).await;
    let mut daemon = Daemon::spawn(&cluster, &sim, "deleter", &["--full-sync-interval", "2s"]);
    let ids = all_registered_once(&cluster, &sim, &paths).await;
    let mut it = paths.iter();
    let (by_hand, retained, kept) = (it.next().unwrap(), it.next().unwrap(), it.next().unwrap());

    // Deleted by hand while its PV is still there: back with the same ID.
    let name = VolumePath::parse(by_hand).unwrap().object_name();
    let uid_before = cluster
        .migration(by_hand)
        .await
        .and_then(|vm| vm.metadata.uid);
    cluster
        .migrations()
        .delete(&name, &Default::default())
        .await
        .expect("delete VolumeMigration");
    let back = wait_for(
        converge(),
        "the VolumeMigration recreated and Registered",
        || async {
            cluster.migration(by_hand).await.filter(|vm| {
                vm.metadata.uid != uid_before
                    && vm.metadata.deletion_timestamp.is_none()
                    && phase(vm) == Some(Phase::Registered)
            })
        },
    )
    .await;
    assert_eq!(
        volume_id(&back),
        Some(ids[by_hand].clone()),
        "same ID, adopted"
    );
    assert_eq!(sim.volumes_for(by_hand).await.len(), 1);
    println!("VolumeMigration deleted by hand came back with the same ID");

    // A Retain PV deleted: after two passes the CNS volume is unregistered, the vmdk stays.
    let n = |p: &str| {
        p.rsplit("disk-")
            .next()
            .unwrap()
            .trim_end_matches(".vmdk")
            .parse::<usize>()
            .unwrap()
    };
    cluster.delete_pv(&format!("pv-{}", n(retained))).await;
    wait_for(converge(), "unregistered and deleted", || async {
        let gone = cluster.migration(retained).await.is_none();
        let unregistered = sim.volumes_for(retained).await.is_empty();
        (gone && unregistered).then_some(())
    })
    .await;
    let file = sim.vmdk_file(retained).unwrap();
    assert!(file.exists(), "the vmdk {file:?} must stay");
    println!("Retain PV deleted: CNS volume unregistered (vmdk kept), VolumeMigration gone");

    // With --on-pv-delete=keep the CNS volume stays.
    daemon.terminate(Duration::from_secs(25)).await;
    let daemon = Daemon::spawn(
        &cluster,
        &sim,
        "keeper",
        &["--full-sync-interval", "2s", "--on-pv-delete", "keep"],
    );
    daemon.wait_ready().await;
    cluster.delete_pv(&format!("pv-{}", n(kept))).await;
    wait_for(converge(), "the VolumeMigration deleted", || async {
        cluster.migration(kept).await.is_none().then_some(())
    })
    .await;
    assert_eq!(
        sim.volumes_for(kept)
            .await
            .iter()
            .map(|v| v.id.clone())
            .collect::<Vec<_>>(),
        vec![ids[kept].clone()],
        "keep policy: the CNS volume stays"
    );
    println!("--on-pv-delete=keep: VolumeMigration gone, CNS volume kept");
}

/// A Kubernetes reply that never comes (a half-open connection, a stalled proxy) must not
/// hold the registrar. The write-ahead of the first PV is committed but its reply is held
/// for ten minutes; with one backend slot, that write-ahead holds the slot and the path's
/// lock. With `--kube-request-timeout 3s` the request fails, the registrar lets go of both,
/// and both PVs end up Registered, once each, long before the reply is released. Before the
/// deadline existed, nothing registered until the reply came.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubernetes_reply_that_never_comes_holds_nothing_for_good() {
    let sim = Vcsim::start(VcsimOptions::default().vmdks(2)).await;
    let cluster = Cluster::start_test_server().await;
    let server = cluster.test_server();
    let daemon = Daemon::spawn(
        &cluster,
        &sim,
        "deadline",
        &[
            "--kube-request-timeout",
            "3s",
            "--max-concurrent-registrations",
            "1",
            "--full-sync-interval",
            "1h",
        ],
    );
    daemon.wait_ready().await;
    server
        .faults()
        .hold_replies("\"Registering\"", Duration::from_secs(600), 1);
    let first = create_pvs(&cluster, &sim, 1..=1).await;
    wait_for(
        Duration::from_secs(30),
        "the first write-ahead committed and its reply held",
        || async { (server.faults().config().hold_reply_count == 0).then_some(()) },
    )
    .await;
    let second = create_pvs(&cluster, &sim, 2..=2).await;
    let started = Instant::now();
    let paths: BTreeSet<String> = first.union(&second).cloned().collect();
    let ids = all_registered_once(&cluster, &sim, &paths).await;
    assert!(
        started.elapsed() < Duration::from_secs(300),
        "registered while the reply was still held ({:?})",
        started.elapsed()
    );
    assert_eq!(ids.len(), 2, "{ids:?}");
    assert_eq!(
        sim.stats().await.calls("CnsCreateVolume"),
        2,
        "one create per vmdk"
    );
    let log = daemon.log_text();
    assert!(
        log.contains("--kube-request-timeout"),
        "the timed-out write-ahead is logged: {}",
        log.lines().rev().take(30).collect::<Vec<_>>().join("\n")
    );
}
