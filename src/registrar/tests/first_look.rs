//! The first look at CNS and the write-ahead beside it (no marker in the status, so no
//! create can be in flight): the write-ahead is stored while the look runs, and neither
//! a failed look nor a lost write-ahead may lead to a create the status does not date.

use std::sync::atomic::{AtomicBool, Ordering};

use super::*;

fn graced_config() -> RegistrarConfig {
    config()
        .with_in_flight_grace(Duration::from_secs(30))
        .with_adoption_poll(Duration::from_secs(1))
}

/// The write-ahead does not wait for the look: it is stored while the look is still
/// running, and the create comes only after both.
#[tokio::test(start_paused = true)]
async fn the_write_ahead_is_stored_while_the_look_runs() {
    let f = fixture(config());
    let p = path(60);
    f.backend.add_disk(&p);
    f.backend.set_latency(op::FIND, Duration::from_millis(100));
    let handle = {
        let (r, p) = (f.registrar.clone(), p.clone());
        tokio::spawn(async move { r.register(&p).await })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    let stored = f.store.get(&p).expect("the write-ahead is stored");
    assert_eq!(stored.phase, Some(Phase::Registering));
    assert!(stored.marker.is_some());
    assert_eq!(
        f.backend.calls(op::CREATE),
        0,
        "no create before the look ends"
    );
    let reg = handle.await.unwrap().unwrap();
    assert!(!reg.adopted);
    assert_eq!(f.backend.calls(op::CREATE), 1);
    assert_eq!(f.store.get(&p).unwrap().volume_id, Some(reg.volume_id));
}

/// A look that fails for good leaves a marker of a create that was never sent: the
/// failure replaces it, so the next attempt creates at once instead of waiting a grace.
#[tokio::test(start_paused = true)]
async fn a_failed_look_replaces_its_write_ahead_by_the_failure() {
    let f = fixture(graced_config());
    let p = path(61);
    f.backend.add_disk(&p);
    f.backend
        .inject(op::FIND, Fault::Fail(ErrorClass::Permanent), 1);
    let err = f.registrar.register(&p).await.unwrap_err();
    assert!(!err.is_retryable(), "{err}");
    let stored = f.store.get(&p).unwrap();
    assert_eq!(stored.phase, Some(Phase::Failed));
    assert_eq!(stored.marker, None, "no create was sent");
    assert_eq!(f.backend.calls(op::CREATE), 0);
    assert_eq!(f.registrar.creates_in_doubt(), 0);

    let started = tokio::time::Instant::now();
    let reg = f.registrar.register(&p).await.unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "waited a grace for a create never sent: {:?}",
        started.elapsed()
    );
    assert!(!reg.adopted);
    assert_eq!(f.backend.volumes_for(&p).len(), 1);
}

/// A volume found by the first look is adopted, conditional on the write-ahead's version:
/// no create, one volume, its ID stored.
#[tokio::test(start_paused = true)]
async fn a_volume_found_by_the_first_look_is_adopted() {
    let f = fixture(config());
    let p = path(62);
    f.backend.add_disk(&p);
    let first = f.registrar.register(&p).await.unwrap();
    // A new process over an empty status (the object recreated by hand).
    let store = Arc::new(InMemoryStatusStore::default());
    let restarted = Registrar::new(f.backend.clone(), store.clone(), config());
    let reg = restarted.register(&p).await.unwrap();
    assert!(reg.adopted);
    assert_eq!(reg.volume_id, first.volume_id);
    assert_eq!(f.backend.calls(op::CREATE), 1, "adopted, not created again");
    assert_eq!(f.backend.volumes_for(&p).len(), 1);
    assert_eq!(store.get(&p).unwrap().volume_id, Some(first.volume_id));
    assert_eq!(store.get(&p).unwrap().marker, None);
}

/// A store where another replica's write-ahead lands just before ours (once).
struct OtherReplicaFirst {
    inner: InMemoryStatusStore,
    done: AtomicBool,
}

#[async_trait]
impl StatusStore for OtherReplicaFirst {
    async fn load(&self, path: &VolumePath) -> Result<Option<StoredState>, StoreError> {
        self.inner.load(path).await
    }
    async fn save(
        &self,
        path: &VolumePath,
        update: &StatusUpdate,
        expect: Option<&Version>,
    ) -> Result<Version, StoreError> {
        if matches!(update, StatusUpdate::Registering { .. })
            && !self.done.swap(true, Ordering::SeqCst)
        {
            let other = StatusUpdate::Registering {
                attempts: 1,
                token: "other-replica/0001".into(),
            };
            self.inner.write_behind(path, &other);
        }
        self.inner.save(path, update, expect).await
    }
}

/// Our write-ahead loses to another replica's: the empty look must not lead to a create
/// (the other replica's create may be in flight); the fresh read shows its marker, whose
/// grace is waited out before creating.
#[tokio::test(start_paused = true)]
async fn a_lost_write_ahead_does_not_create_from_the_stale_look() {
    let backend = Arc::new(InMemoryBackend::new());
    let p = path(63);
    backend.add_disk(&p);
    let store = Arc::new(OtherReplicaFirst {
        inner: InMemoryStatusStore::default(),
        done: AtomicBool::new(false),
    });
    // The object exists (the PV watcher made it), so every write is conditional.
    store.inner.reset(&p);
    let registrar = Registrar::new(backend.clone(), store.clone(), graced_config());
    let started = tokio::time::Instant::now();
    let reg = registrar.register(&p).await.unwrap();
    assert!(
        started.elapsed() >= Duration::from_secs(30),
        "created without waiting for the other replica's create: {:?}",
        started.elapsed()
    );
    assert_eq!(backend.calls(op::CREATE), 1);
    assert_eq!(backend.volumes_for(&p).len(), 1);
    assert_eq!(store.inner.get(&p).unwrap().volume_id, Some(reg.volume_id));
}
