//! Fencing (docs/design.md §4.8–4.11): each scenario below failed on the code before
//! the fix.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use super::*;

fn fenced_config() -> RegistrarConfig {
    config()
        .with_in_flight_grace(Duration::from_secs(60))
        .with_adoption_poll(Duration::from_secs(1))
}

/// docs/design.md §4.8: a create whose outcome is unknown (timeout; the task completes 3 s later)
/// was retried after ~100 ms, and the second create made a duplicate.
#[tokio::test(start_paused = true)]
async fn unknown_create_outcome_is_awaited_not_recreated() {
    let f = fixture(fenced_config());
    let p = path(30);
    f.backend.add_disk(&p);
    f.backend
        .inject(op::CREATE, Fault::LateCreate(Duration::from_secs(3)), 1);
    let reg = f.registrar.register(&p).await.unwrap();
    assert_eq!(f.backend.calls(op::CREATE), 1, "no second create");
    let volumes = f.backend.volumes_for(&p);
    assert_eq!(volumes.len(), 1);
    assert_eq!(reg.volume_id, volumes[0].id, "the late volume is adopted");
    assert_eq!(f.store.get(&p).unwrap().volume_id, Some(reg.volume_id));
    assert_eq!(f.registrar.creates_in_doubt(), 0, "resolved");
}

/// docs/design.md §4.8: a caller that dies right after an unknown outcome leaves the `Registering`
/// marker (not `Failed`), so the next registrar waits the grace too.
#[tokio::test(start_paused = true)]
async fn unknown_outcome_keeps_the_marker_for_the_next_process() {
    let f = fixture(fenced_config());
    let p = path(31);
    f.backend.add_disk(&p);
    f.backend
        .inject(op::CREATE, Fault::LateCreate(Duration::from_secs(20)), 1);
    let cut = tokio::time::timeout(Duration::from_secs(2), f.registrar.register(&p)).await;
    assert!(cut.is_err(), "still waiting for the create when cancelled");
    let stored = f.store.get(&p).unwrap();
    assert_eq!(stored.phase, Some(Phase::Registering));
    assert!(stored.marker.is_some());

    // A restarted process over the same store and vCenter.
    let restarted = Registrar::new(f.backend.clone(), f.store.clone(), fenced_config());
    let reg = restarted.register(&p).await.unwrap();
    assert_eq!(
        f.backend.calls(op::CREATE),
        1,
        "the successor waited and adopted"
    );
    assert_eq!(f.backend.volumes_for(&p).len(), 1);
    assert!(reg.adopted);
}

/// After the grace a create is presumed ended; only then may a second one be sent.
#[tokio::test(start_paused = true)]
async fn a_create_lost_for_good_is_retried_after_the_grace() {
    let f = fixture(fenced_config());
    let p = path(32);
    f.backend.add_disk(&p);
    f.backend
        .inject(op::CREATE, Fault::Fail(ErrorClass::Transient), 1);
    let started = tokio::time::Instant::now();
    let reg = f.registrar.register(&p).await.unwrap();
    assert!(
        started.elapsed() >= Duration::from_secs(60),
        "second create only after the grace: {:?}",
        started.elapsed()
    );
    assert_eq!(f.backend.calls(op::CREATE), 2);
    assert_eq!(f.backend.volumes_for(&p).len(), 1);
    assert!(!reg.adopted);
}

/// A store whose `Registering` writes take `delay` and run `during` meanwhile (the Lease
/// passes to another replica while the write-ahead is slow).
pub(super) struct SlowWriteAhead {
    pub(super) inner: Arc<InMemoryStatusStore>,
    pub(super) delay: Duration,
    pub(super) during: Box<dyn Fn() + Send + Sync>,
}

#[async_trait]
impl StatusStore for SlowWriteAhead {
    async fn load(&self, path: &VolumePath) -> Result<Option<StoredState>, StoreError> {
        self.inner.load(path).await
    }
    async fn save(
        &self,
        path: &VolumePath,
        update: &StatusUpdate,
        expect: Option<&Version>,
    ) -> Result<Version, StoreError> {
        if matches!(update, StatusUpdate::Registering { .. }) {
            (self.during)();
            tokio::time::sleep(self.delay).await;
        }
        self.inner.save(path, update, expect).await
    }
}

/// docs/design.md §4.9: leadership was only checked when the work was admitted; a deposed leader
/// whose write-ahead was slow still sent its create.
#[tokio::test(start_paused = true)]
async fn deposed_leader_does_not_create_after_a_slow_write_ahead() {
    let backend = Arc::new(InMemoryBackend::new());
    let p = path(33);
    backend.add_disk(&p);
    let (leading, rx) = tokio::sync::watch::channel(true);
    let leading = Arc::new(leading);
    let flip = leading.clone();
    let store = Arc::new(SlowWriteAhead {
        inner: Arc::new(InMemoryStatusStore::default()),
        delay: Duration::from_secs(20),
        during: Box::new(move || {
            let _ = flip.send(false);
        }),
    });
    let registrar = Registrar::new(
        backend.clone(),
        store.clone(),
        fenced_config().with_leader(LeaderGate::new(rx)),
    );
    let err = registrar.register(&p).await.unwrap_err();
    assert!(matches!(err, RegisterError::NotLeader { .. }), "{err}");
    assert_eq!(
        backend.calls(op::CREATE),
        0,
        "no create after losing the Lease"
    );
    drop(leading);
}

/// docs/design.md §4.9: the deposed leader's unconditional status write replaced the ID the new
/// leader had stored. Now the ID write is conditional and yields.
#[tokio::test(start_paused = true)]
async fn an_id_never_replaces_another_stored_meanwhile() {
    let f = fixture(fenced_config());
    let p = path(34);
    f.backend.add_disk(&p);
    f.backend.set_latency(op::CREATE, Duration::from_secs(5));
    let registering = {
        let (r, p) = (f.registrar.clone(), p.clone());
        tokio::spawn(async move { r.register(&p).await })
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    // Meanwhile another replica (the new leader) registered the disk as "theirs".
    f.store.write_behind(
        &p,
        &StatusUpdate::Registered {
            volume_id: VolumeId::from("theirs"),
            disk_uuid: None,
            adopted: false,
            attempts: 1,
            protected: false,
        },
    );
    let reg = registering.await.unwrap().unwrap();
    assert_eq!(reg.volume_id, VolumeId::from("theirs"));
    assert_eq!(
        f.store.get(&p).unwrap().volume_id,
        Some(VolumeId::from("theirs")),
        "the published ID never changes"
    );
    assert_eq!(f.registrar.unsaved_ids(), 0);
}

/// docs/design.md §4.9: an ID kept in memory (its write failed) was written later over an ID
/// another leader had stored in between.
#[tokio::test(start_paused = true)]
async fn stale_in_memory_id_never_overwrites_a_newer_stored_id() {
    let mut retry = quick_retry();
    retry.attempts_per_call = 1;
    let f = fixture(fenced_config().with_retry(retry));
    let p = path(35);
    f.backend.add_disk(&p);
    f.backend.set_latency(op::CREATE, Duration::from_millis(50));
    let registering = {
        let (r, p) = (f.registrar.clone(), p.clone());
        tokio::spawn(async move { r.register(&p).await })
    };
    tokio::time::sleep(Duration::from_millis(10)).await;
    f.store.fail_next_saves(1);
    assert!(registering.await.unwrap().is_err());
    assert_eq!(f.registrar.unsaved_ids(), 1);
    // Leadership flapped: another replica stored its own registration.
    f.store.write_behind(
        &p,
        &StatusUpdate::Registered {
            volume_id: VolumeId::from("newer"),
            disk_uuid: None,
            adopted: false,
            attempts: 1,
            protected: false,
        },
    );
    let reg = f.registrar.register(&p).await.unwrap();
    assert_eq!(reg.volume_id, VolumeId::from("newer"));
    assert_eq!(
        f.store.get(&p).unwrap().volume_id,
        Some(VolumeId::from("newer"))
    );
    assert_eq!(f.registrar.unsaved_ids(), 0, "the stale ID is dropped");
}

/// docs/design.md §4.9: an ID kept in memory that CNS no longer has is not published.
#[tokio::test(start_paused = true)]
async fn in_memory_id_is_rechecked_against_cns() {
    let mut retry = quick_retry();
    retry.attempts_per_call = 1;
    let f = fixture(fenced_config().with_retry(retry));
    let p = path(36);
    f.backend.add_disk(&p);
    f.backend.set_latency(op::CREATE, Duration::from_millis(50));
    let registering = {
        let (r, p) = (f.registrar.clone(), p.clone());
        tokio::spawn(async move { r.register(&p).await })
    };
    tokio::time::sleep(Duration::from_millis(10)).await;
    f.store.fail_next_saves(1);
    assert!(registering.await.unwrap().is_err());
    let lost = f.backend.volumes_for(&p)[0].id.clone();
    f.backend.forget_volume(&lost);
    let reg = f.registrar.register(&p).await.unwrap();
    assert_ne!(reg.volume_id, lost, "a vanished ID is not published");
    assert_eq!(f.backend.volumes_for(&p)[0].id, reg.volume_id);
}

/// docs/design.md §6.4: `--gc-orphans` unregistered through `unregister`, which also deleted the
/// ID a new PV's VolumeMigration had just adopted.
#[tokio::test(start_paused = true)]
async fn orphan_collection_keeps_a_volume_adopted_meanwhile() {
    let f = fixture(fenced_config());
    let p = path(37);
    f.backend.add_disk(&p);
    let reg = f.registrar.register(&p).await.unwrap();
    // The pass planned to collect it as an orphan; a new PV adopted it since.
    let kept = f
        .registrar
        .collect_orphan(&p, &reg.volume_id)
        .await
        .unwrap();
    assert!(!kept, "reported as kept");
    assert_eq!(f.backend.calls(op::DELETE), 0);
    assert_eq!(f.backend.volumes_for(&p).len(), 1);

    // A real orphan (nothing stored for its path) is collected.
    let q = path(38);
    f.backend.add_disk(&q);
    let orphan = f
        .backend
        .create_volume(&create_request(&config(), &q, None))
        .await
        .unwrap();
    assert!(f.registrar.collect_orphan(&q, &orphan).await.unwrap());
    assert!(f.backend.volumes_for(&q).is_empty());
}

/// docs/design.md §4.8, §5.4: unregister during `Registering` did not wait for the create,
/// which then completed and left a registered volume nobody tracks.
#[tokio::test(start_paused = true)]
async fn unregister_waits_for_a_create_in_flight() {
    let f = fixture(fenced_config());
    let p = path(39);
    f.backend.add_disk(&p);
    write_ahead_now(&f.store, &p).await;
    // The dead process's create lands 10 s later.
    f.backend.set_latency(op::CREATE, Duration::from_secs(10));
    let ghost = {
        let (backend, request) = (f.backend.clone(), create_request(&config(), &p, None));
        tokio::spawn(async move { backend.create_volume(&request).await })
    };
    tokio::task::yield_now().await;
    f.registrar.unregister(&p).await.unwrap();
    ghost.await.unwrap().unwrap();
    assert!(
        f.backend.volumes_for(&p).is_empty(),
        "the late volume was unregistered too"
    );
    assert_eq!(f.store.get(&p).unwrap().volume_id, None);
}

/// docs/design.md §4.4, §5.2: an object deleted by hand and recreated empty during a
/// create: the ID is still stored once, never lost.
#[tokio::test(start_paused = true)]
async fn an_id_survives_its_object_being_recreated_empty() {
    let f = fixture(fenced_config());
    let p = path(40);
    f.backend.add_disk(&p);
    f.backend.set_latency(op::CREATE, Duration::from_secs(5));
    let registering = {
        let (r, p) = (f.registrar.clone(), p.clone());
        tokio::spawn(async move { r.register(&p).await })
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    f.store.reset(&p);
    let reg = registering.await.unwrap().unwrap();
    assert_eq!(f.store.get(&p).unwrap().volume_id, Some(reg.volume_id));
    assert_eq!(f.backend.volumes_for(&p).len(), 1);
}

/// docs/design.md §2.6: an object whose spec names another path is never read as this path's.
#[tokio::test(start_paused = true)]
async fn name_collision_fails_without_backend_calls() {
    let f = fixture(fenced_config());
    let p = path(41);
    f.backend.add_disk(&p);
    f.store.collide(&p, "[LocalDS_0] kubevols/other.vmdk");
    let err = f.registrar.register(&p).await.unwrap_err();
    assert_eq!(err.reason(), reason::NAME_COLLISION);
    assert!(!err.is_retryable());
    assert_eq!(f.backend.calls(op::CREATE) + f.backend.calls(op::FIND), 0);
    assert!(
        f.registrar.lookup(&p).await.is_err(),
        "lookup never yields it"
    );
}
