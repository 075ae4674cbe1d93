//! End-to-end tests of the write-ahead marker under failures around a create
//! (docs/design.md §4.8–4.10), with the real `volmig` binary, the API test server and the
//! govmomi simulator harness (its injected failures and held replies: `Vcsim::fail_calls`,
//! `Vcsim::delay_replies`):
//!
//! - a successor whose first vCenter calls fail keeps the dead leader's marker and waits
//!   for the create still running in vCenter;
//! - every error after the create request left (here: task polls answered
//!   `NotAuthenticated` around a successful re-login) is an unknown outcome;
//! - the grace of a create is measured from the moment the request is written, after the
//!   storage policy look-up and `RegisterDisk`, however slow they were.
//! - a create task that outlives the grace is followed to its end through the task
//!   recorded in the marker, by a successor too: never a second create beside it.

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
use fencing::{CreateInFlight, canonical, create_in_flight, one_volume_each, registered};
use kube::api::PostParams;
use vcsim::{Vcsim, VcsimOptions};
use volmig::VolumePath;
use volmig::volume_migration::{Phase, VolumeMigration, VolumeMigrationStatus};

/// The one VolumeMigration of the test (panics when there is none).
async fn the_migration(cluster: &Cluster) -> VolumeMigration {
    cluster
        .list_migrations()
        .await
        .into_iter()
        .next()
        .expect("a VolumeMigration")
}

/// The one VolumeMigration's status once `ready` holds for it (waits up to 60 s).
async fn status_when(
    cluster: &Cluster,
    what: &str,
    ready: impl Fn(&VolumeMigrationStatus) -> bool,
) -> VolumeMigrationStatus {
    wait_for(Duration::from_secs(60), what, || async {
        let status = the_migration(cluster).await.status.unwrap_or_default();
        ready(&status).then_some(status)
    })
    .await
}

/// docs/design.md §4.8, §4.10: the leader is SIGKILLed 5 s into a 90 s create task; the
/// successor's first four `QueryVirtualDiskUuid` calls (its first call of the
/// registration, with the in-call retries) answer HTTP 503. The failure is recorded
/// beside the dead leader's marker (phase and token stay), the successor does not create
/// and adopts the volume once the task ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_successor_whose_first_call_fails_keeps_the_marker() {
    let timeouts = [
        "--vc-request-timeout",
        "60s",
        "--vc-task-timeout",
        "600s",
        "--lease-duration",
        "4s",
    ];
    let CreateInFlight {
        sim,
        cluster,
        path,
        mut first,
        sent_at: created_at,
    } = create_in_flight(Duration::from_secs(90), &timeouts).await;
    let paths = [path];
    tokio::time::sleep(Duration::from_secs(5)).await;
    first.kill().await;
    let marker = the_migration(&cluster).await.status.unwrap_or_default();
    assert_eq!(marker.phase, Some(Phase::Registering), "{marker:?}");
    let token = marker
        .registering_token
        .clone()
        .expect("a write-ahead token");

    sim.fail_calls("QueryVirtualDiskUuid", 4, "http503").await;
    let _second = Daemon::spawn(&cluster, &sim, "second", &timeouts);

    // The successor's registration fails on its first call: the failure is recorded,
    // the marker stays.
    let stalled = status_when(&cluster, "the successor's failure recorded", |s| {
        s.last_error.is_some()
    })
    .await;
    assert_eq!(sim.injected("QueryVirtualDiskUuid").await, 4);
    assert_eq!(
        (stalled.phase, stalled.registering_token.as_deref()),
        (Some(Phase::Registering), Some(token.as_str())),
        "the failure replaced the marker: {stalled:?}"
    );
    assert_eq!(sim.stats().await.calls("CnsCreateVolume"), 1);

    let ids = registered(&cluster, &paths, Duration::from_secs(180)).await;
    assert!(
        created_at.elapsed() >= Duration::from_secs(88),
        "registered {:?} after the create was sent: before its task could have ended",
        created_at.elapsed()
    );
    assert_eq!(
        sim.creates().await.len(),
        1,
        "the successor adopted instead of creating"
    );
    one_volume_each(&sim, &ids).await;
}

/// docs/design.md §4.4, §4.10: request timeout 2 s, task timeout 3 s (grace 5 s), a 20 s
/// create task. Following it times out after 3 s; the leader records the task in the
/// marker and is SIGKILLed then. The successor finds the task in the marker and follows
/// it past its grace: exactly one `CnsCreateVolume` in all, and the status holds that
/// task's volume (checked: without following the task, the leader creates again when its
/// grace is over, and the successor when its own is).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_successor_follows_the_create_task_recorded_in_the_marker() {
    let timeouts = [
        "--vc-request-timeout",
        "2s",
        "--vc-task-timeout",
        "3s",
        "--lease-duration",
        "4s",
    ];
    let CreateInFlight {
        sim,
        cluster,
        path,
        mut first,
        sent_at: created_at,
    } = create_in_flight(Duration::from_secs(20), &timeouts).await;
    let paths = [path];
    let marker = status_when(&cluster, "the task in the marker", |s| {
        s.registering_task.is_some()
    })
    .await;
    first.kill().await;
    let task = marker.registering_task.clone().expect("a recorded task");
    assert_eq!(
        (marker.phase, marker.registering_token.as_deref()),
        (Some(Phase::Registering), Some(task.token.as_str())),
        "the task belongs to the marker: {marker:?}"
    );
    assert!(task.task.starts_with("task-"), "{task:?}");
    assert!(
        created_at.elapsed() < Duration::from_secs(15),
        "recorded while the task ran"
    );

    let _second = Daemon::spawn(&cluster, &sim, "second", &timeouts);
    let ids = registered(&cluster, &paths, Duration::from_secs(90)).await;
    assert!(
        created_at.elapsed() >= Duration::from_secs(18),
        "registered {:?} after the create was sent: before its task could have ended",
        created_at.elapsed()
    );
    let stats = sim.stats().await;
    assert_eq!(stats.calls("CnsCreateVolume"), 1, "{stats:?}");
    let creates = sim.creates().await;
    assert_eq!(creates.len(), 1, "{creates:?}");
    one_volume_each(&sim, &ids).await;
}

/// docs/design.md §4.8: the first two task polls of a 30 s create are answered
/// `NotAuthenticated`, the re-login between them succeeds, so following the task fails
/// with `NotAuthenticated` after the create was sent. That is an unknown outcome: no
/// second create; the volume of the one create is adopted when it appears.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_poll_not_authenticated_is_an_unknown_outcome() {
    let sim = Vcsim::start(
        VcsimOptions::default()
            .vmdks(1)
            .cns_task_duration(Duration::from_secs(30)),
    )
    .await;
    sim.fail_calls("TaskPoll", 2, "NotAuthenticated").await;
    let cluster = Cluster::start().await;
    let path = sim.vmdk_path("kubevols", 1);
    cluster.create_pv("pv-1", &path).await;
    let paths = [canonical(&path)];
    // The grace (request + task timeout, 65 s) outlasts the 30 s task: a volmig that
    // knows the outcome is unknown waits for it.
    let _daemon = Daemon::spawn(
        &cluster,
        &sim,
        "relogin",
        &["--vc-request-timeout", "5s", "--vc-task-timeout", "60s"],
    );
    let ids = registered(&cluster, &paths, Duration::from_secs(150)).await;
    let stats = sim.stats().await;
    assert_eq!(
        sim.injected("RetrievePropertiesEx").await,
        2,
        "both task polls answered NotAuthenticated: {stats:?}"
    );
    assert!(
        stats.calls("Login") >= 2,
        "a re-login between the two polls: {stats:?}"
    );
    let creates = sim.creates().await;
    assert_eq!(creates.len(), 1, "{creates:?}");
    one_volume_each(&sim, &ids).await;
}

/// docs/design.md §4.9, §4.10: request timeout 3 s, task timeout 6 s (grace 9 s); a storage
/// policy (three PBM calls before the create) with every PBM reply 2.9 s late, and
/// `CnsCreateVolume`'s too; an 8 s create task. 8.7 s pass before the create is sent;
/// following the task times out 2.9 + ~4.5 s after the send, before the task ends. A
/// grace counted from before the policy look-up would be over then, and a second create
/// would race the first (checked: with the grace not restarted at the send fence, two
/// `CnsCreateVolume` calls and two volumes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_grace_counts_from_the_send_after_a_slow_policy_look_up() {
    slow_create(None, 8).await;
}

/// As above on vCenter 7.0.0, where `RegisterDisk` (its reply 2.9 s late too) runs between
/// the policy look-up and the create: 11.6 s before the send. (A second create attempt
/// would fail at `RegisterDisk` in the simulator, which refuses a vmdk that is an FCD
/// already; this case checks that the slow calls end in one create and the right spec.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_grace_counts_from_the_send_after_a_slow_register_disk() {
    slow_create(Some("7.0.0"), 8).await;
}

/// One registration with a storage policy, the replies of PBM, `RegisterDisk` and
/// `CnsCreateVolume` 2.9 s late, `--vc-request-timeout=3s --vc-task-timeout=6s`, a create
/// task of `task_secs`: exactly one create, adopted.
async fn slow_create(version: Option<&str>, task_secs: u64) {
    const POLICY: &str = "vSAN Default Storage Policy";
    let late = Duration::from_millis(2900);
    let mut options = VcsimOptions::default()
        .vmdks(1)
        .cns_task_duration(Duration::from_secs(task_secs));
    if let Some(version) = version {
        options = options.vcenter_version(version);
    }
    let sim = Vcsim::start(options).await;
    let slow = [
        "PbmRetrieveServiceContent",
        "PbmQueryProfile",
        "PbmRetrieveContent",
        "RegisterDisk",
        "CnsCreateVolume",
    ];
    for method in slow {
        sim.delay_replies(method, late).await;
    }
    let cluster = Cluster::start().await;
    let path = sim.vmdk_path("kubevols", 1);
    let mut vm = volmig::k8s::migrations::new_migration(&VolumePath::parse(&path).unwrap());
    vm.spec.storage_policy_name = Some(POLICY.into());
    cluster
        .migrations()
        .create(&PostParams::default(), &vm)
        .await
        .expect("a VolumeMigration that names a storage policy");
    cluster.create_pv("pv-1", &path).await;
    let paths = [canonical(&path)];
    let _daemon = Daemon::spawn(
        &cluster,
        &sim,
        "slow",
        &["--vc-request-timeout", "3s", "--vc-task-timeout", "6s"],
    );
    let ids = registered(&cluster, &paths, Duration::from_secs(120)).await;
    let stats = sim.stats().await;
    let register_disk = version.is_some();
    for method in slow {
        if method == "RegisterDisk" && !register_disk {
            assert_eq!(stats.calls(method), 0, "{stats:?}");
            continue;
        }
        assert!(
            sim.delayed(method).await >= 1,
            "{method} replies were held: {stats:?}"
        );
    }
    let creates = sim.creates().await;
    assert_eq!(creates.len(), 1, "{creates:?}");
    assert_eq!(
        creates[0].profile_ids.len(),
        1,
        "the policy was resolved: {creates:?}"
    );
    assert_eq!(
        !creates[0].backing_disk_id.is_empty(),
        register_disk,
        "registered by RegisterDisk's FCD on 7.0.0 only: {creates:?}"
    );
    one_volume_each(&sim, &ids).await;
}
