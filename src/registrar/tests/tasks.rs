//! A create whose vCenter task is known is followed to its end (docs/design.md §4.4,
//! §4.10): no second create while the task runs, however long that is; its volume is
//! adopted when it succeeds; one new create follows only a task that failed.

use std::time::Duration;

use super::*;
use crate::backend::TaskState;
use crate::registrar::create::TASK_RECORD_AFTER;

const GRACE: Duration = Duration::from_secs(10);

fn task_config() -> RegistrarConfig {
    config()
        .with_in_flight_grace(GRACE)
        .with_adoption_poll(Duration::from_secs(1))
}

/// The stored state's task, and its marker.
fn stored_task(f: &Fixture, p: &VolumePath) -> (Option<String>, Option<String>) {
    let stored = f.store.get(p).unwrap_or_default();
    (stored.task, stored.marker)
}

fn recorded_tasks(f: &Fixture) -> usize {
    f.store
        .history()
        .iter()
        .filter(|(_, u)| matches!(u, StatusUpdate::TaskRecorded { .. }))
        .count()
}

/// Own path: the create's task poll ends in `TaskTimeout` while the task still runs. The
/// task is recorded beside the marker and followed past the grace; nothing is created
/// again until it ends, and its volume is adopted.
#[tokio::test(start_paused = true)]
async fn a_task_outliving_the_grace_is_followed_and_never_created_again() {
    let f = fixture(task_config());
    let p = path(70);
    f.backend.add_disk(&p);
    f.backend
        .inject(op::CREATE, Fault::HeldTask(Duration::from_secs(3)), 1);
    let err = f.registrar.register(&p).await.unwrap_err();
    assert!(
        matches!(err, RegisterError::OutcomeUnknown { .. }),
        "the task still runs after the grace: {err}"
    );
    let (task, marker) = stored_task(&f, &p);
    assert_eq!(task.as_deref(), Some("task-1"), "the task is in the marker");
    assert!(marker.is_some());
    // Long past the grace, the task still runs: looking again never creates.
    for _ in 0..3 {
        tokio::time::advance(Duration::from_secs(60)).await;
        let err = f.registrar.register(&p).await.unwrap_err();
        assert!(matches!(err, RegisterError::OutcomeUnknown { .. }), "{err}");
        assert_eq!(f.backend.calls(op::CREATE), 1, "no second create");
    }
    f.backend.end_task("task-1", None);
    let reg = f.registrar.register(&p).await.unwrap();
    let volumes = f.backend.volumes_for(&p);
    assert_eq!(volumes.len(), 1, "one volume for the vmdk");
    assert_eq!(reg.volume_id, volumes[0].id, "the task's volume is adopted");
    assert_eq!(f.backend.calls(op::CREATE), 1);
    let stored = f.store.get(&p).unwrap();
    assert_eq!(stored.registered_id(), Some(&reg.volume_id));
    assert_eq!(
        (stored.marker, stored.task),
        (None, None),
        "cleared with the ID"
    );
}

/// A task that ends in error proves no create can land: exactly one new create follows,
/// and only after the task ended.
#[tokio::test(start_paused = true)]
async fn a_task_that_fails_is_followed_by_one_new_create() {
    let f = fixture(task_config());
    let p = path(71);
    f.backend.add_disk(&p);
    f.backend
        .inject(op::CREATE, Fault::HeldTask(Duration::from_secs(3)), 1);
    let err = f.registrar.register(&p).await.unwrap_err();
    assert!(matches!(err, RegisterError::OutcomeUnknown { .. }), "{err}");
    tokio::time::advance(GRACE * 3).await;
    let err = f.registrar.register(&p).await.unwrap_err();
    assert!(matches!(err, RegisterError::OutcomeUnknown { .. }), "{err}");
    assert_eq!(f.backend.calls(op::CREATE), 1, "none while the task runs");

    f.backend.end_task("task-1", Some(ErrorClass::Transient));
    let reg = f.registrar.register(&p).await.unwrap();
    assert!(!reg.adopted, "created anew");
    assert_eq!(f.backend.calls(op::CREATE), 2, "exactly one new create");
    assert_eq!(f.backend.volumes_for(&p).len(), 1);
    assert_eq!(
        f.store.get(&p).unwrap().registered_id(),
        Some(&reg.volume_id)
    );
}

/// The leader dies while its create's task runs (after the task was recorded); a
/// successor finds the task in the marker and follows it instead of creating after its
/// grace.
#[tokio::test(start_paused = true)]
async fn a_successor_follows_the_task_in_the_dead_leaders_marker() {
    let f = fixture(task_config().with_instance("leader"));
    let p = path(72);
    f.backend.add_disk(&p);
    f.backend
        .inject(op::CREATE, Fault::HeldTask(Duration::from_secs(600)), 1);
    let leader = {
        let (r, p) = (f.registrar.clone(), p.clone());
        tokio::spawn(async move { r.register(&p).await })
    };
    tokio::time::sleep(TASK_RECORD_AFTER + Duration::from_secs(1)).await;
    leader.abort();
    let (task, marker) = stored_task(&f, &p);
    assert_eq!(task.as_deref(), Some("task-1"), "recorded while it ran");
    assert!(marker.is_some_and(|m| m.starts_with("leader/")));

    let successor = Registrar::new(
        f.backend.clone(),
        f.store.clone(),
        task_config().with_instance("successor"),
    );
    for _ in 0..3 {
        let err = successor.register(&p).await.unwrap_err();
        assert!(matches!(err, RegisterError::OutcomeUnknown { .. }), "{err}");
        assert_eq!(f.backend.calls(op::CREATE), 1, "no second create");
        tokio::time::advance(GRACE * 2).await;
    }
    f.backend.end_task("task-1", None);
    let reg = successor.register(&p).await.unwrap();
    assert!(reg.adopted);
    assert_eq!(f.backend.calls(op::CREATE), 1);
    let volumes = f.backend.volumes_for(&p);
    assert_eq!(volumes.len(), 1);
    assert_eq!(reg.volume_id, volumes[0].id, "the task's volume");
}

/// A task vCenter no longer knows proves nothing: the grace rule applies (look, wait out
/// the grace, look, then create).
#[tokio::test(start_paused = true)]
async fn a_task_vcenter_forgot_falls_back_to_the_grace() {
    let f = fixture(task_config());
    let p = path(73);
    f.backend.add_disk(&p);
    f.backend
        .inject(op::CREATE, Fault::HeldTask(Duration::from_secs(3)), 1);
    let err = f.registrar.register(&p).await.unwrap_err();
    assert!(matches!(err, RegisterError::OutcomeUnknown { .. }), "{err}");
    f.backend.forget_task("task-1");
    let before = tokio::time::Instant::now();
    let reg = f.registrar.register(&p).await.unwrap();
    assert!(!reg.adopted);
    assert_eq!(f.backend.calls(op::CREATE), 2);
    assert!(f.backend.calls(op::FIND) >= 2, "looked before creating");
    assert_eq!(
        f.backend.create_task_state("task-1").await.unwrap(),
        TaskState::Unknown
    );
    // Its own grace had run out already (10 s after the send, 3 s + following): at once.
    assert!(tokio::time::Instant::now() - before < GRACE);
}

/// Fast creates cost no status write more; one that outlives [`TASK_RECORD_AFTER`] costs
/// exactly one (the task), written while it runs.
#[tokio::test(start_paused = true)]
async fn only_a_create_outliving_the_record_delay_writes_its_task() {
    let f = fixture(task_config());
    let (fast, held, slow) = (path(74), path(75), path(76));
    for p in [&fast, &held, &slow] {
        f.backend.add_disk(p);
    }
    f.registrar.register(&fast).await.unwrap();
    assert_eq!(recorded_tasks(&f), 0, "a fast create writes no task");

    // A task that ends before the record delay: no write either.
    f.backend
        .inject(op::CREATE, Fault::HeldTask(Duration::from_secs(600)), 2);
    let end_soon = {
        let backend = f.backend.clone();
        tokio::spawn(async move {
            tokio::time::sleep(TASK_RECORD_AFTER / 2).await;
            backend.end_task("task-1", None);
        })
    };
    f.registrar.register(&held).await.unwrap();
    end_soon.await.unwrap();
    assert_eq!(recorded_tasks(&f), 0);

    let end_later = {
        let backend = f.backend.clone();
        tokio::spawn(async move {
            tokio::time::sleep(TASK_RECORD_AFTER * 3).await;
            backend.end_task("task-2", None);
        })
    };
    let reg = f.registrar.register(&slow).await.unwrap();
    end_later.await.unwrap();
    assert!(!reg.adopted);
    assert_eq!(recorded_tasks(&f), 1, "one task write for a slow create");
    let writes: Vec<_> = f
        .store
        .history()
        .into_iter()
        .filter(|(p, _)| *p == slow)
        .map(|(_, u)| u)
        .collect();
    assert!(
        matches!(
            writes.as_slice(),
            [
                StatusUpdate::Registering { .. },
                StatusUpdate::TaskRecorded { task, .. },
                StatusUpdate::Registered { .. },
            ] if task == "task-2"
        ),
        "{writes:?}"
    );
    assert_eq!(f.backend.calls(op::CREATE), 3);
}

/// Unregistration waits for a create whose task still runs past the grace, then removes
/// the volume that task made (docs/design.md §4.4, §5.4).
#[tokio::test(start_paused = true)]
async fn unregistration_waits_for_a_create_task_still_running() {
    let f = fixture(task_config());
    let p = path(77);
    f.backend.add_disk(&p);
    f.backend
        .inject(op::CREATE, Fault::HeldTask(Duration::from_secs(3)), 1);
    let err = f.registrar.register(&p).await.unwrap_err();
    assert!(matches!(err, RegisterError::OutcomeUnknown { .. }), "{err}");
    tokio::time::advance(GRACE * 2).await;
    let err = f.registrar.unregister(&p).await.unwrap_err();
    assert!(matches!(err, RegisterError::OutcomeUnknown { .. }), "{err}");
    assert_eq!(f.store.get(&p).unwrap().phase, Some(Phase::Registering));
    f.backend.end_task("task-1", None);
    f.registrar.unregister(&p).await.unwrap();
    assert!(
        f.backend.volumes_for(&p).is_empty(),
        "the task's volume is unregistered, none left behind"
    );
    assert_eq!(f.backend.calls(op::CREATE), 1);
}
