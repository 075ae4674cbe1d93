//! `volmig run --dry-run` with the real binary (docs/design.md §3.2): it decides and counts what it
//! would do — register new PVs, delete a VolumeMigration whose PV is gone, report an invalid path —
//! and makes no write at the API test server and no write call at the vCenter simulator.

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
use std::time::Duration;

use e2e::{Cluster, Daemon, phase, wait_for};
use vcsim::{Vcsim, VcsimOptions};
use volmig::VolumePath;
use volmig::volume_migration::Phase;

/// SOAP methods that only read: the dry run may call these and nothing else.
fn read_only(method: &str) -> bool {
    const PREFIXES: [&str; 6] = ["Retrieve", "Login", "Logout", "Query", "CnsQuery", "Find"];
    PREFIXES.iter().any(|p| method.starts_with(p))
        || matches!(method, "CurrentTime" | "SessionIsActive")
}

/// The SOAP methods called since the last reset that are not [`read_only`].
async fn written(sim: &Vcsim) -> Vec<String> {
    let stats = sim.stats().await;
    stats
        .calls
        .keys()
        .filter(|m| !read_only(m))
        .cloned()
        .collect()
}

/// Waits for `daemon` to exit on its own; a `--once` run that keeps going fails.
async fn exited(daemon: &mut Daemon) -> std::process::ExitStatus {
    wait_for(
        Duration::from_secs(90),
        "volmig to exit after one pass",
        || {
            let status = daemon.exit_status();
            async move { status }
        },
    )
    .await
}

/// `(name, resourceVersion)` of every VolumeMigration, to show nothing changed.
async fn versions(cluster: &Cluster) -> BTreeMap<String, Option<String>> {
    cluster
        .list_migrations()
        .await
        .into_iter()
        .map(|vm| (vm.metadata.name.unwrap(), vm.metadata.resource_version))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_decides_and_writes_nothing() {
    let sim = Vcsim::start(VcsimOptions::default().vmdks(6)).await;
    let cluster = Cluster::start_test_server().await;
    for n in 1..=3 {
        cluster
            .create_pv(&format!("pv-{n}"), &sim.vmdk_path("kubevols", n))
            .await;
    }
    let mut real = Daemon::spawn(&cluster, &sim, "real", &[]);
    wait_for(
        Duration::from_secs(90),
        "three paths Registered",
        || async {
            let vms = cluster.list_migrations().await;
            (vms.len() == 3 && vms.iter().all(|vm| phase(vm) == Some(Phase::Registered)))
                .then_some(())
        },
    )
    .await;
    assert!(real.terminate(Duration::from_secs(30)).await.success());

    // What a dry run should find: two new PVs, one PV gone, one invalid path.
    for n in 4..=5 {
        cluster
            .create_pv(&format!("pv-{n}"), &sim.vmdk_path("kubevols", n))
            .await;
    }
    cluster.delete_pv("pv-1").await;
    cluster.create_pv("bad-path", "[] no-datastore.vmdk").await;

    let writes_before = cluster.writes().expect("the API test server counts writes");
    let migrations_before = versions(&cluster).await;
    let creates_before = sim.creates().await.len();
    let volumes_before = sim.volumes().await.len();
    sim.reset_stats().await;

    let mut dry = Daemon::spawn(&cluster, &sim, "dry", &["--dry-run"]);
    dry.wait_ready().await;
    wait_for(Duration::from_secs(60), "three dry-run passes", || async {
        dry.metric("volmig_full_sync_passes_total{result=\"ok\"}")
            .await
            .filter(|n| *n >= 3.0)
    })
    .await;

    let action = |source: &str, action: &str| {
        format!("volmig_dry_run_actions{{source=\"{source}\",action=\"{action}\"}}")
    };
    assert_eq!(
        dry.metric(&action("full_sync", "create_migration")).await,
        Some(2.0),
        "the two new PVs need VolumeMigrations"
    );
    assert_eq!(
        dry.metric(&action("full_sync", "delete_migration")).await,
        Some(1.0),
        "pv-1's path has had no PV for two passes"
    );
    assert_eq!(
        dry.metric(&action("reconcile", "set_pvs")).await,
        Some(1.0),
        "pv-1's VolumeMigration still lists it"
    );
    let log = dry.log_text();
    assert!(log.contains("dry run: full sync would repair"), "{log}");
    assert!(log.contains("would record an InvalidVolumePath"), "{log}");

    // Nothing written anywhere.
    assert_eq!(
        cluster.writes(),
        Some(writes_before),
        "writes at the API server"
    );
    assert_eq!(versions(&cluster).await, migrations_before);
    assert_eq!(sim.creates().await.len(), creates_before);
    assert_eq!(sim.volumes().await.len(), volumes_before);
    let stats = sim.stats().await;
    let written: Vec<&String> = stats.calls.keys().filter(|m| !read_only(m)).collect();
    assert!(
        written.is_empty(),
        "the dry run called {written:?} at vCenter"
    );
    assert!(
        stats.calls.keys().any(|m| m.starts_with("CnsQuery")),
        "the dry run read CNS: {:?}",
        stats.calls
    );
    assert!(dry.terminate(Duration::from_secs(30)).await.success());
    assert!(!dry.log_text().contains("panicked"));
}

/// `--dry-run --once`: one pass, then the plan on stdout and exit 1 while something would
/// be done, 0 once nothing would; it writes nothing either way. The long interval shows
/// that it does not wait for a second pass.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_once_prints_the_plan_and_exits_by_it() {
    const ONCE: &[&str] = &["--dry-run", "--once", "--full-sync-interval", "1h"];
    let sim = Vcsim::start(VcsimOptions::default().vmdks(3)).await;
    let cluster = Cluster::start_test_server().await;
    let paths: Vec<String> = (1..=3)
        .map(|n| {
            VolumePath::parse(&sim.vmdk_path("kubevols", n))
                .unwrap()
                .canonical()
        })
        .collect();
    for (n, path) in paths.iter().enumerate() {
        cluster.create_pv(&format!("pv-{n}"), path).await;
    }
    let writes_before = cluster.writes().expect("the API test server counts writes");
    let volumes_before = sim.volumes().await.len();
    sim.reset_stats().await;

    let mut once = Daemon::spawn(&cluster, &sim, "once", ONCE);
    let status = exited(&mut once).await;
    let plan = once.stdout_text();
    assert_eq!(status.code(), Some(1), "{plan}\n{}", once.log_text());
    for path in &paths {
        let line = plan
            .lines()
            .find(|l| l.starts_with("register ") && l.contains(path.as_str()))
            .unwrap_or_else(|| panic!("{path} is not to be registered:\n{plan}"));
        assert!(line.contains("full_sync/create_migration"), "{line}");
    }
    assert_eq!(
        plan.lines().last(),
        Some("WOULD ACT: 3 actions (register 3)"),
        "{plan}"
    );

    let mut json = Daemon::spawn(
        &cluster,
        &sim,
        "once-json",
        &[ONCE, &["-o", "json"]].concat(),
    );
    let status = exited(&mut json).await;
    let text = json.stdout_text();
    assert_eq!(status.code(), Some(1), "{text}\n{}", json.log_text());
    let document: serde_json::Value =
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"));
    assert_eq!(document["nothingToDo"], false, "{document:#}");
    let mut registered: Vec<&str> = document["actions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|a| a["group"] == "register")
        .filter_map(|a| a["path"].as_str())
        .collect();
    registered.sort_unstable();
    assert_eq!(registered, paths);

    // Nothing written anywhere.
    assert_eq!(
        cluster.writes(),
        Some(writes_before),
        "writes at the API server"
    );
    assert!(cluster.list_migrations().await.is_empty());
    assert!(sim.creates().await.is_empty());
    assert_eq!(sim.volumes().await.len(), volumes_before);
    let written = written(&sim).await;
    assert!(
        written.is_empty(),
        "the dry run called {written:?} at vCenter"
    );

    // Settled: Registered, protected from VM deletion (else full sync would still protect
    // it) and listing its PV.
    let settled = |vm: &volmig::volume_migration::VolumeMigration| {
        let status = vm.status.as_ref();
        phase(vm) == Some(Phase::Registered)
            && status.and_then(|s| s.protected_from_vm_delete) == Some(true)
            && status
                .and_then(|s| s.persistent_volumes.as_ref())
                .is_some_and(|pvs| pvs.len() == 1)
    };
    let mut real = Daemon::spawn(&cluster, &sim, "real", &[]);
    wait_for(Duration::from_secs(90), "three paths settled", || async {
        let vms = cluster.list_migrations().await;
        (vms.len() == 3 && vms.iter().all(settled)).then_some(())
    })
    .await;
    assert!(real.terminate(Duration::from_secs(30)).await.success());

    let writes_before = cluster.writes();
    let volumes_before = sim.volumes().await.len();
    let mut after = Daemon::spawn(&cluster, &sim, "once-after", ONCE);
    let status = exited(&mut after).await;
    let plan = after.stdout_text();
    assert_eq!(status.code(), Some(0), "{plan}\n{}", after.log_text());
    assert!(plan.contains("No actions."), "{plan}");
    assert_eq!(
        plan.lines().last(),
        Some("NOTHING TO DO: all 3 in-tree vSphere PVs are Registered"),
        "{plan}"
    );
    assert_eq!(cluster.writes(), writes_before);
    assert_eq!(sim.volumes().await.len(), volumes_before);
}
