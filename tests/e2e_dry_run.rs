//! `volmig run --dry-run` with the real binary (issue 16): it decides and counts what it
//! would do — register new PVs, delete a VolumeMigration whose PV is gone, report an
//! invalid path — and makes no write at the API test server and no write call at the
//! vCenter simulator.

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
use volmig::api::Phase;

/// SOAP methods that only read: the dry run may call these and nothing else.
fn read_only(method: &str) -> bool {
    const PREFIXES: [&str; 6] = ["Retrieve", "Login", "Logout", "Query", "CnsQuery", "Find"];
    PREFIXES.iter().any(|p| method.starts_with(p))
        || matches!(method, "CurrentTime" | "SessionIsActive")
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
    let cluster = Cluster::start().await;
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
