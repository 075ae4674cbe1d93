//! Recording a create's task beside its marker (docs/design.md §4.4): it annotates this
//! process's own marker, so it is not leader-fenced, and a write that loses its condition
//! reads again and writes while the marker's token stands.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use super::*;
use crate::registrar::create::TASK_RECORD_AFTER;

/// A store that changes the version once, right before the first task write (another
/// writer touched the object: a PV list, a successor's `Stalled`).
struct BumpBeforeTask {
    inner: Arc<InMemoryStatusStore>,
    bumped: AtomicBool,
}

#[async_trait]
impl StatusStore for BumpBeforeTask {
    async fn load(&self, path: &VolumePath) -> Result<Option<StoredState>, StoreError> {
        self.inner.load(path).await
    }
    async fn save(
        &self,
        path: &VolumePath,
        update: &StatusUpdate,
        expect: Option<&Version>,
    ) -> Result<Version, StoreError> {
        if matches!(update, StatusUpdate::TaskRecorded { .. })
            && !self.bumped.swap(true, Ordering::SeqCst)
        {
            self.inner.write_behind(
                path,
                &StatusUpdate::Stalled {
                    reason: reason::TRANSIENT.into(),
                    message: "another writer".into(),
                },
            );
        }
        self.inner.save(path, update, expect).await
    }
}

/// A create whose task runs long; returns the running `register`.
fn held_create(
    backend: &Arc<InMemoryBackend>,
    registrar: &Arc<Registrar>,
    p: &VolumePath,
) -> tokio::task::JoinHandle<Result<Registration, RegisterError>> {
    backend.add_disk(p);
    backend.inject(op::CREATE, Fault::HeldTask(Duration::from_secs(600)), 1);
    let (r, p) = (registrar.clone(), p.clone());
    tokio::spawn(async move { r.register(&p).await })
}

/// The task write met a conflict and was given up: a successor then saw a marker without
/// a task and waited the whole grace.
#[tokio::test(start_paused = true)]
async fn a_task_write_that_loses_its_condition_reads_again() {
    let backend = Arc::new(InMemoryBackend::new());
    let inner = Arc::new(InMemoryStatusStore::default());
    let store = Arc::new(BumpBeforeTask {
        inner: inner.clone(),
        bumped: AtomicBool::new(false),
    });
    let registrar = Arc::new(Registrar::new(backend.clone(), store, config()));
    let p = path(95);
    let registering = held_create(&backend, &registrar, &p);
    tokio::time::sleep(TASK_RECORD_AFTER + Duration::from_secs(1)).await;
    let stored = inner.get(&p).unwrap();
    assert_eq!(stored.task.as_deref(), Some("task-1"), "recorded after all");
    assert!(stored.marker.is_some());
    registering.abort();
}

/// The task write was leader-fenced although it only annotates this process's marker: a
/// leader that lost the Lease while its create ran left the successor no task to ask about.
#[tokio::test(start_paused = true)]
async fn the_task_is_recorded_after_the_lease_was_lost() {
    let (leading, rx) = tokio::sync::watch::channel(true);
    let f = fixture(config().with_leader(LeaderGate::new(rx)));
    let p = path(96);
    let registering = held_create(&f.backend, &f.registrar, &p);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(f.backend.calls(op::CREATE), 1, "the create was sent");
    leading.send_replace(false);
    tokio::time::sleep(TASK_RECORD_AFTER + Duration::from_secs(1)).await;
    let stored = f.store.get(&p).unwrap();
    assert_eq!(stored.task.as_deref(), Some("task-1"));
    registering.abort();
}
