//! End-to-end test of adoption with proof (docs/design.md §4.4): the result of a task
//! recorded beside a marker is adopted only when CNS shows its volume to be this vmdk's.
//! Real `volmig` binary, the API server and the govmomi simulator harness.

#![allow(
    clippy::expect_used,
    clippy::unwrap_used,
    reason = "test code: failures should panic"
)]

#[path = "support/e2e.rs"]
mod e2e;
#[path = "support/fencing.rs"]
mod fencing;
#[path = "support/vcsim.rs"]
mod vcsim;

use std::time::Duration;

use e2e::{Cluster, Daemon, wait_for};
use fencing::{canonical, one_volume_each, registered};
use kube::api::{Patch, PatchParams, PostParams};
use vcsim::{Vcsim, VcsimOptions};
use volmig::VolumePath;
use volmig::k8s::migrations::new_migration;

/// Q is registered by a create whose task runs 8 s; P's object then comes back (a stale
/// backup, a hand edit) with a marker naming Q's task. The daemon must not adopt Q's
/// volume for P: P gets a volume of its own. Before the fix P was Registered with Q's ID.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_disks_task_result_is_not_adopted() {
    let sim = Vcsim::start(
        VcsimOptions::default()
            .vmdks(2)
            .cns_task_duration(Duration::from_secs(8)),
    )
    .await;
    let cluster = Cluster::start().await;
    let (raw_p, raw_q) = (sim.vmdk_path("kubevols", 1), sim.vmdk_path("kubevols", 2));
    let (p, q) = (canonical(&raw_p), canonical(&raw_q));
    cluster.create_pv("pv-q", &raw_q).await;
    let flags = ["--in-flight-grace", "15s"];
    let mut first = Daemon::spawn(&cluster, &sim, "first", &flags);
    let task = wait_for(Duration::from_secs(60), "Q's task recorded", || async {
        cluster
            .migration(&q)
            .await
            .and_then(|vm| vm.status)
            .and_then(|s| s.registering_task)
            .map(|t| t.task)
    })
    .await;
    let theirs = registered(&cluster, std::slice::from_ref(&q), Duration::from_secs(60)).await;
    assert!(first.terminate(Duration::from_secs(30)).await.success());

    let path = VolumePath::parse(&raw_p).unwrap();
    let migrations = cluster.migrations();
    migrations
        .create(&PostParams::default(), &new_migration(&path))
        .await
        .expect("P's object");
    let stale = serde_json::json!({"status": {
        "phase": "Registering",
        "registeringToken": "dead-replica/0001",
        "registeringTask": {"token": "dead-replica/0001", "task": task},
    }});
    migrations
        .patch_status(
            &path.object_name(),
            &PatchParams::default(),
            &Patch::Merge(&stale),
        )
        .await
        .expect("P's stale marker");
    cluster.create_pv("pv-p", &raw_p).await;

    let _second = Daemon::spawn(&cluster, &sim, "second", &flags);
    let ids = registered(&cluster, &[p.clone(), q.clone()], Duration::from_secs(90)).await;
    assert_ne!(ids[&p], theirs[&q], "P was given Q's volume");
    one_volume_each(&sim, &ids).await;
}
