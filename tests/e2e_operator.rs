//! End-to-end tests of `volmig run` (docs/design.md §3.1): the real binary against the
//! Kubernetes API test server (or `VOLMIG_E2E_KUBECONFIG`) and the govmomi vCenter
//! simulator.

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
use std::time::Duration;

use e2e::{Cluster, Daemon, phase, volume_id, wait_for};
use vcsim::{Vcsim, VcsimOptions};
use volmig::VolumePath;
use volmig::volume_migration::Phase;

const CONVERGE: Duration = Duration::from_secs(120);

/// Waits until every VolumeMigration of `paths` is in a final phase; returns them by path.
async fn converged(
    cluster: &Cluster,
    paths: &BTreeSet<String>,
) -> BTreeMap<String, volmig::volume_migration::VolumeMigration> {
    wait_for(
        CONVERGE,
        "every VolumeMigration Registered or Failed",
        || async {
            let all = cluster.list_migrations().await;
            let done: BTreeMap<String, _> = all
                .into_iter()
                .filter(|vm| matches!(phase(vm), Some(Phase::Registered | Phase::Failed)))
                .map(|vm| (vm.spec.volume_path.clone(), vm))
                .collect();
            paths.iter().all(|p| done.contains_key(p)).then_some(done)
        },
    )
    .await
}

/// Spawns `volmig run` (full sync hourly) and waits until it is ready and its start-up
/// pass is over: from then on only new PVs cause work.
async fn spawn_past_start_up(cluster: &Cluster, sim: &Vcsim, name: &str) -> Daemon {
    let daemon = Daemon::spawn(cluster, sim, name, &["--full-sync-interval", "1h"]);
    daemon.wait_ready().await;
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
    daemon
}

/// Waits up to `timeout` until the VolumeMigration of `volume_path` is Registered.
async fn registered_within(
    cluster: &Cluster,
    volume_path: &str,
    timeout: Duration,
    what: &str,
) -> volmig::volume_migration::VolumeMigration {
    wait_for(timeout, what, || async {
        cluster
            .migration(volume_path)
            .await
            .filter(|vm| phase(vm) == Some(Phase::Registered))
    })
    .await
}

fn canonical(path: &str) -> String {
    VolumePath::parse(path).expect("valid").canonical()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registers_200_pvs_once_each() {
    let sim = Vcsim::start(VcsimOptions::default().vmdks(160)).await;
    let cluster = Cluster::start().await;
    let mut valid = BTreeSet::new();
    let mut missing = BTreeSet::new();
    // 20 pairs sharing a vmdk, spelled differently.
    for n in 1..=20 {
        let path = sim.vmdk_path("kubevols", n);
        cluster.create_pv(&format!("pair-{n}-a"), &path).await;
        let other = path
            .replace("] ", "] ./")
            .replace("kubevols/", "kubevols//");
        cluster.create_pv(&format!("pair-{n}-b"), &other).await;
        valid.insert(canonical(&path));
    }
    for n in 21..=160 {
        let path = sim.vmdk_path("kubevols", n);
        cluster.create_pv(&format!("single-{n}"), &path).await;
        valid.insert(canonical(&path));
    }
    for n in 1..=10 {
        let path = format!("[{}] kubevols/missing-{n}.vmdk", sim.datastores[0].name);
        cluster.create_pv(&format!("missing-{n}"), &path).await;
        missing.insert(canonical(&path));
    }
    let malformed = [
        "no-brackets.vmdk",
        "[LocalDS_0 unbalanced.vmdk",
        "[LocalDS_0] ../escape.vmdk",
        "[LocalDS_0] not-a-disk.txt",
        "[] empty-datastore.vmdk",
    ];
    for (i, path) in malformed.iter().enumerate() {
        cluster.create_pv(&format!("malformed-{i}"), path).await;
    }
    for i in 0..5 {
        cluster.create_nfs_pv(&format!("nfs-{i}")).await;
    }

    let daemon = Daemon::spawn(&cluster, &sim, "registers-200", &[]);
    daemon.wait_ready().await;
    let all: BTreeSet<String> = valid.union(&missing).cloned().collect();
    let done = converged(&cluster, &all).await;

    let volumes = sim.volumes().await;
    let mut by_path: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for v in &volumes {
        by_path
            .entry(v.backing_path.clone())
            .or_default()
            .push(v.id.clone());
    }
    for path in &valid {
        let vm = &done[path];
        assert_eq!(
            phase(vm),
            Some(Phase::Registered),
            "{path}: {:?}",
            vm.status
        );
        let ids = by_path.get(path).cloned().unwrap_or_default();
        assert_eq!(ids.len(), 1, "{path}: CNS volumes {ids:?}");
        assert_eq!(volume_id(vm).as_deref(), Some(ids[0].as_str()), "{path}");
    }
    // The pairs list both PVs.
    for n in 1..=20 {
        let vm = &done[&canonical(&sim.vmdk_path("kubevols", n))];
        let pvs = vm
            .status
            .as_ref()
            .and_then(|s| s.persistent_volumes.clone());
        assert_eq!(
            pvs,
            Some(vec![format!("pair-{n}-a"), format!("pair-{n}-b")])
        );
    }
    for path in &missing {
        let vm = &done[path];
        assert_eq!(phase(vm), Some(Phase::Failed));
        let reason = vm
            .status
            .as_ref()
            .and_then(|s| s.last_error.clone())
            .map(|e| e.reason);
        assert_eq!(reason.as_deref(), Some("DiskNotFound"), "{path}");
        assert!(!by_path.contains_key(path), "{path} must not be registered");
    }
    assert_eq!(
        volumes.len(),
        valid.len(),
        "one CNS volume per valid vmdk, nothing else"
    );
    let migrations = cluster.list_migrations().await;
    assert_eq!(
        migrations.len(),
        valid.len() + missing.len(),
        "no object for malformed or NFS PVs"
    );
    let invalid_events = wait_for(
        Duration::from_secs(30),
        "InvalidVolumePath events",
        || async {
            let events = cluster.events("InvalidVolumePath").await;
            let names: BTreeSet<String> = events.into_iter().map(|(n, _)| n).collect();
            (names.len() == malformed.len()).then_some(names)
        },
    )
    .await;
    assert!(invalid_events.iter().all(|n| n.starts_with("malformed-")));
    println!(
        "200 PVs: {} registered (one CNS volume each), {} DiskNotFound, {} malformed with Warning events, 5 NFS untouched",
        valid.len(),
        missing.len(),
        malformed.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_path_registers_when_its_vmdk_appears() {
    let sim = Vcsim::start(VcsimOptions::default().vmdks(1)).await;
    let cluster = Cluster::start().await;
    let late = format!("[{}] kubevols/late.vmdk", sim.datastores[0].name);
    cluster.create_pv("late", &late).await;
    let daemon = Daemon::spawn(&cluster, &sim, "late-vmdk", &["--full-sync-interval", "2s"]);
    daemon.wait_ready().await;
    let paths = BTreeSet::from([canonical(&late)]);
    let done = converged(&cluster, &paths).await;
    assert_eq!(phase(&done[&canonical(&late)]), Some(Phase::Failed));

    sim.create_vmdk(&late).await;
    let vm = registered_within(
        &cluster,
        &late,
        Duration::from_secs(30),
        "Registered after the vmdk appeared",
    )
    .await;
    let ids: Vec<String> = sim
        .volumes_for(&canonical(&late))
        .await
        .into_iter()
        .map(|v| v.id)
        .collect();
    assert_eq!(ids, vec![volume_id(&vm).unwrap()]);
    let log = daemon.log_text();
    assert!(log.contains("full sync pass"), "full sync logged its pass");
    // The log goes to a file here, as under kubectl logs: no terminal colour codes.
    assert!(
        !log.contains('\u{1b}'),
        "ANSI escapes in a log written to a file"
    );
    println!("Failed (DiskNotFound) → Registered by full sync once the vmdk appeared, no restart");
}

/// One vmdk's story can be followed in JSON logs: every line a reconcile writes (the
/// registrar's, the CNS backend's, publishing's) carries the `vmdk` span with the path and
/// the VolumeMigration's name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_log_line_of_a_registration_names_its_vmdk() {
    let sim = Vcsim::start(VcsimOptions::default().vmdks(2)).await;
    let cluster = Cluster::start().await;
    let paths: Vec<String> = (1..=2).map(|n| sim.vmdk_path("kubevols", n)).collect();
    for (n, path) in paths.iter().enumerate() {
        cluster.create_pv(&format!("pv-{n}"), path).await;
    }
    let daemon = Daemon::spawn(
        &cluster,
        &sim,
        "span-json",
        &["--log-format", "json", "--driver-syncer-lease", ""],
    );
    daemon.wait_ready().await;
    for path in &paths {
        registered_within(&cluster, path, Duration::from_secs(60), "Registered").await;
    }
    let lines: Vec<serde_json::Value> = daemon
        .log_text()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    for path in &paths {
        let canonical = canonical(path);
        let object = volmig::VolumePath::parse(path).unwrap().object_name();
        let created: Vec<&serde_json::Value> = lines
            .iter()
            .filter(|l| {
                l["fields"]["message"] == "CNS volume created"
                    && l["fields"]["path"].as_str() == Some(canonical.as_str())
            })
            .collect();
        assert_eq!(created.len(), 1, "one create logged for {path}");
        let span = &created[0]["span"];
        let spans = created[0]["spans"].as_array().expect("the span list");
        let vmdk = spans
            .iter()
            .find(|s| s["name"] == "vmdk")
            .unwrap_or_else(|| {
                panic!("the create of {path} is logged outside a vmdk span: {span}")
            });
        assert_eq!(vmdk["path"], canonical.as_str(), "{vmdk}");
        assert_eq!(vmdk["object"], object.as_str(), "{vmdk}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steady_state_pass_makes_no_writes() {
    const N: usize = 1000;
    let sim = Vcsim::start(VcsimOptions::default().vmdks(N)).await;
    let cluster = Cluster::start_test_server().await;
    let mut paths = BTreeSet::new();
    for n in 1..=N {
        let path = sim.vmdk_path("kubevols", n);
        cluster.create_pv(&format!("pv-{n}"), &path).await;
        paths.insert(canonical(&path));
    }
    let daemon = Daemon::spawn(
        &cluster,
        &sim,
        "steady",
        &[
            "--full-sync-interval",
            "2s",
            "--max-concurrent-registrations",
            "32",
        ],
    );
    daemon.wait_ready().await;
    let done = converged(&cluster, &paths).await;
    assert!(done.values().all(|vm| phase(vm) == Some(Phase::Registered)));

    // Let one pass run over the converged state, then measure the next full passes.
    async fn passes(d: &Daemon) -> f64 {
        d.metric("volmig_full_sync_passes_total{result=\"ok\"}")
            .await
            .unwrap_or(0.0)
    }
    let start = passes(&daemon).await;
    wait_for(Duration::from_secs(30), "one more pass", || async {
        (passes(&daemon).await > start).then_some(())
    })
    .await;
    let server = cluster.test_server();
    server.reset_stats();
    sim.reset_stats().await;
    let before = passes(&daemon).await;
    wait_for(Duration::from_secs(30), "two more passes", || async {
        (passes(&daemon).await >= before + 2.0).then_some(())
    })
    .await;
    let stats = server.stats();
    let sim_stats = sim.stats().await;
    let creates = sim_stats.calls.get("CnsCreateVolume").copied().unwrap_or(0);
    // Lease renewals are leader election, not the pass: everything else must be zero.
    let writes = stats.writes - stats.writes_to("leases");
    assert_eq!(writes, 0, "a steady pass must not write: {stats:?}");
    assert_eq!(creates, 0, "a steady pass must not create CNS volumes");
    println!(
        "steady state, {N} volumes: 2 full passes made 0 API writes, 0 CNS creates ({} API reads in all)",
        stats.reads
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lookup_prints_the_id_or_exits_3() {
    let sim = Vcsim::start(VcsimOptions::default().vmdks(1)).await;
    let cluster = Cluster::start().await;
    let path = sim.vmdk_path("kubevols", 1);
    cluster.create_pv("pv-1", &path).await;
    let daemon = Daemon::spawn(&cluster, &sim, "lookup", &[]);
    daemon.wait_ready().await;
    let vm = registered_within(&cluster, &path, CONVERGE, "Registered").await;

    let lookup = |p: String| {
        let kubeconfig = cluster.kubeconfig.clone();
        async move {
            tokio::process::Command::new(env!("CARGO_BIN_EXE_volmig"))
                .arg("lookup")
                .arg("--kubeconfig")
                .arg(kubeconfig)
                .arg(p)
                .output()
                .await
                .expect("run volmig lookup")
        }
    };
    // Another spelling of the same vmdk.
    let out = lookup(path.replace("] ", "] ./")).await;
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        volume_id(&vm).unwrap()
    );

    let creates_before = sim.stats().await.calls.get("CnsCreateVolume").copied();
    let pending = format!("[{}] kubevols/not-yet.vmdk", sim.datastores[0].name);
    let out = lookup(pending).await;
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("not registered yet, retry later"));
    let out = lookup("garbage".into()).await;
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert_eq!(
        sim.stats().await.calls.get("CnsCreateVolume").copied(),
        creates_before,
        "lookup never registers"
    );
    println!(
        "volmig lookup: ID for a registered path (any spelling), exit 3 when pending, 2 when invalid"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_pass_promtool_and_match_the_simulator() {
    let sim = Vcsim::start(VcsimOptions::default().vmdks(12)).await;
    let cluster = Cluster::start().await;
    let mut paths = BTreeSet::new();
    for n in 1..=12 {
        let path = sim.vmdk_path("kubevols", n);
        cluster.create_pv(&format!("pv-{n}"), &path).await;
        paths.insert(canonical(&path));
    }
    let daemon = Daemon::spawn(&cluster, &sim, "metrics", &[]);
    daemon.wait_ready().await;
    converged(&cluster, &paths).await;
    let (status, body) = daemon.get("/metrics").await.expect("GET /metrics");
    assert_eq!(status, 200);

    let mut promtool = tokio::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("promtool (Debian package prometheus; run `make deps`)");
    use tokio::io::AsyncWriteExt;
    let mut stdin = promtool.stdin.take().expect("stdin");
    stdin.write_all(body.as_bytes()).await.expect("write");
    drop(stdin);
    let out = promtool.wait_with_output().await.expect("promtool");
    assert!(
        out.status.success() && out.stdout.is_empty() && out.stderr.is_empty(),
        "promtool: {out:?}"
    );

    let created = daemon
        .metric("volmig_registrations_total{result=\"created\"}")
        .await
        .expect("registrations metric");
    let creates = sim
        .stats()
        .await
        .calls
        .get("CnsCreateVolume")
        .copied()
        .unwrap_or(0);
    assert_eq!(
        created as u64, creates,
        "counter equals the creates the simulator saw"
    );
    assert_eq!(creates, 12);
    assert_eq!(daemon.metric("volmig_leader").await, Some(1.0));
    println!(
        "/metrics passes promtool; registrations_total{{created}} = {creates} = simulator creates"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_during_registration_keeps_every_id() {
    let sim = Vcsim::start(
        VcsimOptions::default()
            .vmdks(50)
            .delay("CnsCreateVolume", 500),
    )
    .await;
    let cluster = Cluster::start().await;
    let mut paths = BTreeSet::new();
    for n in 1..=50 {
        let path = sim.vmdk_path("kubevols", n);
        cluster.create_pv(&format!("pv-{n}"), &path).await;
        paths.insert(canonical(&path));
    }
    let mut daemon = Daemon::spawn(&cluster, &sim, "sigterm", &[]);
    daemon.wait_ready().await;
    wait_for(CONVERGE, "a few registrations", || async {
        (sim.volumes().await.len() >= 5).then_some(())
    })
    .await;
    let status = daemon.terminate(Duration::from_secs(25)).await;
    assert_eq!(
        status.code(),
        Some(0),
        "graceful exit; log:\n{}",
        daemon.log_text()
    );
    let created_before_restart: BTreeSet<String> =
        sim.volumes().await.into_iter().map(|v| v.id).collect();
    assert!(created_before_restart.len() < 50, "SIGTERM arrived mid-way");

    let daemon = Daemon::spawn(&cluster, &sim, "sigterm-restarted", &[]);
    daemon.wait_ready().await;
    let done = converged(&cluster, &paths).await;
    let published: BTreeSet<String> = done.values().filter_map(volume_id).collect();
    for id in &created_before_restart {
        assert!(
            published.contains(id),
            "CNS volume {id} created before SIGTERM has no status"
        );
    }
    assert!(sim.duplicates().await.is_empty(), "no duplicates");
    assert_eq!(sim.volumes().await.len(), 50);
    println!(
        "SIGTERM mid-registration: exit 0; {} volumes created before it all kept their IDs; 50 volumes, no duplicates",
        created_before_restart.len()
    );
}

/// docs/design.md §4.4: at most four API writes per new PV, Events counted (the
/// VolumeMigration create, the write-ahead carrying the PV list, the ID, one Event on the
/// PV), counted at the API test server by resource (the Lease's renewals and the test's own
/// PV creates are not volmig's per-PV work).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_most_four_api_writes_per_new_pv() {
    const N: usize = 8;
    let sim = Vcsim::start(VcsimOptions::default().vmdks(N)).await;
    let cluster = Cluster::start_test_server().await;
    let _daemon = spawn_past_start_up(&cluster, &sim, "writes").await;
    let server = cluster
        .server
        .as_ref()
        .expect("the API test server counts writes");
    let per_pv_writes = || {
        server
            .stats()
            .requests
            .iter()
            .filter(|r| r.verb.is_write())
            .filter(|r| matches!(r.resource.as_str(), "volumemigrations" | "events"))
            .map(|r| r.count)
            .sum::<u64>()
    };
    let before = per_pv_writes();
    let mut paths = BTreeSet::new();
    for n in 1..=N {
        let raw = sim.vmdk_path("kubevols", n);
        cluster.create_pv(&format!("pv-{n}"), &raw).await;
        paths.insert(canonical(&raw));
    }
    let done = converged(&cluster, &paths).await;
    assert!(done.values().all(|vm| phase(vm) == Some(Phase::Registered)));
    // Let the Events of the last registrations land.
    wait_for(
        Duration::from_secs(30),
        "one Registered Event per PV",
        || async { (cluster.events("Registered").await.len() >= N).then_some(()) },
    )
    .await;
    let writes = per_pv_writes() - before;
    assert!(
        writes <= 4 * N as u64,
        "{writes} writes for {N} new PVs ({:.2} per PV): {:?}",
        writes as f64 / N as f64,
        server.stats().requests
    );
    for vm in done.values() {
        assert_eq!(
            vm.status
                .as_ref()
                .and_then(|s| s.persistent_volumes.as_ref())
                .map(Vec::len),
            Some(1)
        );
    }
    println!("{writes} API writes for {N} new PVs");
}

/// A burst of new PVs reaches the registrar together: the PV watcher creates the
/// VolumeMigration of a new PV while the create of another one still waits for its reply.
/// Before, it awaited each create before reading the next PV event, so the PVs of a burst
/// reached the registrar one API round trip apart, whatever `--max-concurrent-registrations`
/// allowed. Here the first create's reply is held for two minutes: the second PV must be
/// Registered well before it is released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_volume_migration_create_does_not_hold_up_the_next_pv() {
    let sim = Vcsim::start(VcsimOptions::default().vmdks(2)).await;
    let cluster = Cluster::start_test_server().await;
    let server = cluster.test_server();
    let _daemon = spawn_past_start_up(&cluster, &sim, "held-create").await;
    let (first, second) = (sim.vmdk_path("kubevols", 1), sim.vmdk_path("kubevols", 2));
    // The object's name appears in its create and nowhere before it.
    let held = VolumePath::parse(&first).expect("valid").object_name();
    server
        .faults()
        .hold_replies(&held, Duration::from_secs(120), 1);
    cluster.create_pv("first", &first).await;
    wait_for(
        Duration::from_secs(30),
        "the first PV's VolumeMigration stored and its create's reply held",
        || async {
            let held = server.faults().config().hold_reply_count == 0;
            cluster.migration(&first).await.filter(|_| held)
        },
    )
    .await;
    cluster.create_pv("second", &second).await;
    let registered = registered_within(
        &cluster,
        &second,
        Duration::from_secs(60),
        "the second PV Registered while the first create's reply is held",
    )
    .await;
    assert!(volume_id(&registered).is_some(), "{registered:?}");
    println!(
        "checked: the second PV registered while the first PV's VolumeMigration create was held"
    );
}
