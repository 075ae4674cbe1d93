//! A recorded task's result is adopted only when CNS shows its volume to be this vmdk's
//! (docs/design.md §4.4): a hand-made or stale `registeringTask` may name another disk's
//! create.

use std::time::Duration;

use super::*;

#[tokio::test(start_paused = true)]
async fn a_task_of_another_disks_create_is_not_adopted() {
    let f = fixture(
        config()
            .with_in_flight_grace(Duration::from_secs(10))
            .with_adoption_poll(Duration::from_secs(1)),
    );
    let (p, q) = (path(110), path(111));
    f.backend.add_disk(&p);
    f.backend.add_disk(&q);
    // q's create runs as task-1 and ends with q's volume.
    f.backend
        .inject(op::CREATE, Fault::HeldTask(Duration::from_secs(1)), 1);
    assert!(f.registrar.register(&q).await.is_err(), "task-1 still runs");
    f.backend.end_task("task-1", None);
    let theirs = f.backend.volumes_for(&q)[0].id.clone();
    // p's status names q's task beside its marker.
    let token = "dead-replica/0002".to_owned();
    f.store.write_behind(
        &p,
        &StatusUpdate::Registering {
            attempts: 1,
            token: token.clone(),
        },
    );
    f.store.write_behind(
        &p,
        &StatusUpdate::TaskRecorded {
            token,
            task: "task-1".into(),
        },
    );
    let reg = f.registrar.register(&p).await.unwrap();
    assert_ne!(reg.volume_id, theirs, "another disk's volume adopted");
    assert_eq!(f.backend.volumes_for(&p).len(), 1, "p got its own volume");
    assert_eq!(f.backend.volumes_for(&p)[0].id, reg.volume_id);
}
