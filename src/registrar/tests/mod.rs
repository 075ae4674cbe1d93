use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use super::*;
use crate::backend::memory::{Fault, InMemoryBackend};
use crate::backend::{CnsVolume, ErrorClass, op};
use crate::volume_path::PathError;

fn path(n: usize) -> VolumePath {
    VolumePath::parse(&format!("[LocalDS_0] kubevols/disk-{n:04}.vmdk")).unwrap()
}

fn quick_retry() -> RetryPolicy {
    RetryPolicy {
        initial: Duration::from_millis(10),
        max: Duration::from_millis(100),
        attempts_per_call: 4,
        jitter: false,
    }
}

struct Fixture {
    backend: Arc<InMemoryBackend>,
    store: Arc<InMemoryStatusStore>,
    registrar: Arc<Registrar>,
}

fn fixture(config: RegistrarConfig) -> Fixture {
    let backend = Arc::new(InMemoryBackend::new());
    let store = Arc::new(InMemoryStatusStore::default());
    let registrar = Arc::new(Registrar::new(backend.clone(), store.clone(), config));
    Fixture {
        backend,
        store,
        registrar,
    }
}

/// Stores a `Registering` write-ahead, as another process (that then died) left it.
async fn write_ahead_now(store: &InMemoryStatusStore, p: &VolumePath) {
    let update = StatusUpdate::Registering {
        attempts: 1,
        token: "dead-replica/0001".into(),
    };
    store.save(p, &update, None).await.unwrap();
}

fn config() -> RegistrarConfig {
    RegistrarConfig::new("cluster-1")
        .with_rate_limit(None)
        .with_retry(quick_retry())
}

#[tokio::test(start_paused = true)]
async fn sixty_four_concurrent_registers_make_one_create() {
    let f = fixture(config());
    let p = path(1);
    f.backend.add_disk(&p);
    f.backend
        .set_latency(op::CREATE, Duration::from_millis(100));
    let tasks: Vec<_> = (0..64)
        .map(|_| {
            let (r, p) = (f.registrar.clone(), p.clone());
            tokio::spawn(async move { r.register(&p).await.unwrap() })
        })
        .collect();
    let mut ids = Vec::new();
    let mut reported = 0;
    for t in tasks {
        let registration = t.await.unwrap();
        reported += usize::from(!registration.unchanged);
        ids.push(registration.volume_id);
    }
    assert_eq!(
        reported, 1,
        "only the caller that registered has news to report"
    );
    assert_eq!(f.backend.calls(op::CREATE), 1, "exactly one backend create");
    assert!(ids.iter().all(|id| *id == ids[0]), "all callers get one ID");
    assert_eq!(f.store.get(&p).unwrap().volume_id.as_ref(), Some(&ids[0]));
    assert_eq!(
        f.registrar.locked_keys(),
        0,
        "keyed-lock table must be empty"
    );
    println!("64 callers, 1 create, id {}", ids[0]);
}

#[tokio::test(start_paused = true)]
async fn create_succeeded_but_caller_saw_error_is_adopted() {
    let f = fixture(config());
    let p = path(2);
    f.backend.add_disk(&p);
    f.backend.inject(op::CREATE, Fault::FailAfterCreate, 1);
    let reg = f.registrar.register(&p).await.unwrap();
    assert!(
        reg.adopted,
        "the retry must adopt the volume the failed call created"
    );
    assert_eq!(f.backend.volumes_for(&p).len(), 1);
    assert_eq!(f.backend.volumes_for(&p)[0].id, reg.volume_id);
    assert_eq!(f.backend.calls(op::CREATE), 1);
}

#[tokio::test(start_paused = true)]
async fn definite_create_failure_is_recorded_and_a_later_call_creates() {
    let mut retry = quick_retry();
    retry.attempts_per_call = 1;
    let f = fixture(config().with_retry(retry));
    let p = path(3);
    f.backend.add_disk(&p);
    f.backend
        .inject(op::CREATE, Fault::Fail(ErrorClass::Permanent), 1);
    let err = f.registrar.register(&p).await.unwrap_err();
    assert!(!err.is_retryable(), "{err}");
    let stored = f.store.get(&p).unwrap();
    assert_eq!(stored.phase, Some(Phase::Failed));
    assert_eq!(
        stored.marker, None,
        "a refused create leaves nothing in flight"
    );
    assert_eq!(f.registrar.creates_in_doubt(), 0);
    let reg = f.registrar.register(&p).await.unwrap();
    assert!(!reg.adopted);
    assert_eq!(f.backend.volumes_for(&p).len(), 1);
    assert_eq!(f.backend.calls(op::CREATE), 2);
    assert_eq!(f.store.get(&p).unwrap().volume_id, Some(reg.volume_id));
}

/// A store whose `Registered` writes never finish: lets a test drop the registering
/// future right after the backend create, before the ID is stored.
struct StallOnRegistered(InMemoryStatusStore);

#[async_trait]
impl StatusStore for StallOnRegistered {
    async fn load(&self, path: &VolumePath) -> Result<Option<StoredState>, StoreError> {
        self.0.load(path).await
    }
    async fn save(
        &self,
        path: &VolumePath,
        update: &StatusUpdate,
        expect: Option<&Version>,
    ) -> Result<Version, StoreError> {
        if matches!(update, StatusUpdate::Registered { .. }) {
            std::future::pending::<()>().await;
        }
        self.0.save(path, update, expect).await
    }
}

#[tokio::test(start_paused = true)]
async fn cancelled_after_create_next_attempt_adopts() {
    let backend = Arc::new(InMemoryBackend::new());
    let p = path(4);
    backend.add_disk(&p);
    let stalled = Arc::new(StallOnRegistered(InMemoryStatusStore::default()));
    let crashed = Registrar::new(backend.clone(), stalled.clone(), config());
    let attempt = tokio::time::timeout(Duration::from_secs(1), crashed.register(&p)).await;
    assert!(
        attempt.is_err(),
        "the first attempt must have been cancelled"
    );
    assert_eq!(
        backend.calls(op::CREATE),
        1,
        "the backend create did happen"
    );
    assert_eq!(
        stalled.0.get(&p).unwrap().phase,
        Some(Phase::Registering),
        "write-ahead stored before the create"
    );
    assert_eq!(crashed.locked_keys(), 0, "cancellation frees the key");
    drop(crashed);

    // A fresh registrar (a restarted process) over the same store and vCenter.
    let store = Arc::new(InMemoryStatusStore::default());
    write_ahead_now(&store, &p).await;
    let restarted = Registrar::new(backend.clone(), store.clone(), config());
    let reg = restarted.register(&p).await.unwrap();
    assert!(reg.adopted);
    assert_eq!(backend.calls(op::CREATE), 1, "no second create");
    assert_eq!(backend.volumes_for(&p).len(), 1);
}

#[tokio::test(start_paused = true)]
async fn id_is_kept_in_memory_until_stored() {
    let mut retry = quick_retry();
    retry.attempts_per_call = 2;
    let f = fixture(config().with_retry(retry));
    let p = path(5);
    f.backend.add_disk(&p);
    // Write-ahead succeeds, then both attempts to store the ID fail.
    let backend = f.backend.clone();
    let store = f.store.clone();
    let registrar = f.registrar.clone();
    let p2 = p.clone();
    let handle = tokio::spawn(async move {
        // Let the write-ahead through, then fail the two writes of the ID.
        registrar.register(&p2).await
    });
    // The write-ahead is the first save; arm the failures right after the create starts.
    backend.set_latency(op::CREATE, Duration::from_millis(50));
    tokio::time::sleep(Duration::from_millis(10)).await;
    store.fail_next_saves(2);
    let err = handle.await.unwrap().unwrap_err();
    assert!(matches!(err, RegisterError::Store { .. }), "{err}");
    assert_eq!(f.registrar.unsaved_ids(), 1, "the ID must stay in memory");
    assert_eq!(f.backend.calls(op::CREATE), 1);

    let reg = f.registrar.register(&p).await.unwrap();
    assert_eq!(
        f.backend.calls(op::CREATE),
        1,
        "stored from memory, no new create"
    );
    assert_eq!(f.backend.volumes()[0].id, reg.volume_id);
    assert_eq!(f.store.get(&p).unwrap().volume_id, Some(reg.volume_id));
    assert_eq!(f.registrar.unsaved_ids(), 0);
}

#[tokio::test(start_paused = true)]
async fn create_in_flight_from_a_dead_process_is_awaited_and_adopted() {
    let grace = Duration::from_secs(5);
    let f = fixture(
        config()
            .with_in_flight_grace(grace)
            .with_adoption_poll(Duration::from_millis(500)),
    );
    let p = path(13);
    f.backend.add_disk(&p);
    // A process wrote ahead and sent a create, then died; vCenter finishes it 2 s later.
    write_ahead_now(&f.store, &p).await;
    f.backend.set_latency(op::CREATE, Duration::from_secs(2));
    let ghost = {
        let (backend, request) = (f.backend.clone(), create_request(&config(), &p, None));
        tokio::spawn(async move { backend.create_volume(&request).await })
    };
    tokio::task::yield_now().await;
    let started = tokio::time::Instant::now();
    let reg = f.registrar.register(&p).await.unwrap();
    let ghost_id = ghost.await.unwrap().unwrap();
    assert!(reg.adopted, "the in-flight create must be adopted");
    assert_eq!(reg.volume_id, ghost_id);
    assert_eq!(f.backend.calls(op::CREATE), 1, "no second create");
    assert!(
        started.elapsed() >= Duration::from_secs(2) && started.elapsed() < grace,
        "looked again until the create appeared, adopted it before the grace ended: {:?}",
        started.elapsed()
    );

    // Without a recent write-ahead there is nothing to wait for.
    let q = path(14);
    f.backend.add_disk(&q);
    f.backend.set_latency(op::CREATE, Duration::ZERO);
    let started = tokio::time::Instant::now();
    f.registrar.register(&q).await.unwrap();
    assert!(
        started.elapsed() < grace,
        "no grace without a stored Registering"
    );
}

#[tokio::test(start_paused = true)]
async fn missing_disk_is_not_a_registration() {
    let f = fixture(config());
    let p = path(6);
    let err = f.registrar.register(&p).await.unwrap_err();
    assert!(matches!(err, RegisterError::DiskNotFound { .. }), "{err}");
    assert_eq!(err.reason(), "DiskNotFound");
    assert!(!err.is_retryable());
    assert_eq!(f.backend.calls(op::CREATE), 0);
    let history = f.store.history();
    assert!(matches!(
        &history.last().unwrap().1,
        StatusUpdate::Failed { reason, retry_after: None, .. } if reason == "DiskNotFound"
    ));
}

#[tokio::test(start_paused = true)]
async fn invalid_path_fails_before_any_backend_call() {
    let f = fixture(config());
    let err = f
        .registrar
        .register_raw("LocalDS_0/disk.vmdk")
        .await
        .unwrap_err();
    assert!(matches!(
        err,
        RegisterError::InvalidPath(PathError::MissingDatastore { .. })
    ));
    assert_eq!(err.reason(), "InvalidPath");
    for operation in [op::DISK_UUID, op::FIND, op::CREATE, op::DELETE, op::LIST] {
        assert_eq!(f.backend.calls(operation), 0, "{operation} called");
    }
}

#[tokio::test(start_paused = true)]
async fn transient_errors_are_retried_then_recorded() {
    let f = fixture(config());
    let p = path(7);
    f.backend.add_disk(&p);
    f.backend
        .inject(op::DISK_UUID, Fault::Fail(ErrorClass::Transient), 2);
    f.registrar.register(&p).await.unwrap();
    assert_eq!(f.backend.calls(op::DISK_UUID), 3);

    let q = path(8);
    f.backend.add_disk(&q);
    f.backend
        .inject(op::FIND, Fault::Fail(ErrorClass::Transient), 4);
    let err = f.registrar.register(&q).await.unwrap_err();
    assert_eq!(err.reason(), "BackendUnavailable");
    assert!(err.is_retryable());
    let state = f.store.get(&q).unwrap();
    assert_eq!(state.phase, Some(Phase::Failed));
    assert!(matches!(
        &f.store.history().last().unwrap().1,
        StatusUpdate::Failed {
            retry_after: Some(_),
            ..
        }
    ));

    let r = path(9);
    f.backend.add_disk(&r);
    f.backend
        .inject(op::FIND, Fault::Fail(ErrorClass::Permanent), 1);
    let err = f.registrar.register(&r).await.unwrap_err();
    assert!(!err.is_retryable());
    assert_eq!(f.backend.calls(op::CREATE), 1, "only path 7 was created");
}

#[tokio::test(start_paused = true)]
async fn follower_makes_no_backend_call() {
    let (tx, rx) = tokio::sync::watch::channel(false);
    let f = fixture(config().with_leader(LeaderGate::new(rx)));
    let p = path(10);
    f.backend.add_disk(&p);
    let err = f.registrar.register(&p).await.unwrap_err();
    assert!(matches!(err, RegisterError::NotLeader { .. }));
    assert_eq!(f.backend.calls(op::DISK_UUID), 0);
    assert!(f.store.history().is_empty(), "a follower writes no status");
    tx.send(true).unwrap();
    f.registrar.register(&p).await.unwrap();
    assert_eq!(f.backend.calls(op::CREATE), 1);
}

#[tokio::test(start_paused = true)]
async fn unregister_keeps_disk_and_is_idempotent() {
    let f = fixture(config());
    let p = path(11);
    f.backend.add_disk(&p);
    let reg = f.registrar.register(&p).await.unwrap();
    assert_eq!(f.registrar.lookup(&p).await.unwrap(), reg.volume_id);
    f.registrar.unregister(&p).await.unwrap();
    assert!(f.backend.volumes().is_empty());
    assert!(f.backend.disk_uuid(&p).await.is_ok(), "the vmdk stays");
    f.registrar.unregister(&p).await.unwrap();
    let err = f.registrar.lookup(&p).await.unwrap_err();
    assert!(err.to_string().contains("not registered yet"), "{err}");
    assert_eq!(f.backend.calls(op::DELETE), 1);
}

/// A status whose volume ID was edited by hand to another disk's volume: unregistering
/// the path must not unregister the other disk's volume (docs/security.md).
#[tokio::test(start_paused = true)]
async fn unregister_never_deletes_another_disks_volume_named_in_the_status() {
    let f = fixture(config());
    let (p, q) = (path(12), path(13));
    f.backend.add_disk(&p);
    f.backend.add_disk(&q);
    let own = f.registrar.register(&p).await.unwrap().volume_id;
    let other = f.registrar.register(&q).await.unwrap().volume_id;
    let edited = StatusUpdate::Registered {
        volume_id: other.clone(),
        disk_uuid: None,
        adopted: false,
        attempts: 1,
        protected: false,
    };
    f.store.save(&p, &edited, None).await.unwrap();

    f.registrar.unregister(&p).await.unwrap();
    let left: Vec<VolumeId> = f.backend.volumes().into_iter().map(|v| v.id).collect();
    assert_eq!(left, vec![other], "q's volume stays; p's own ({own}) goes");
    assert_eq!(f.registrar.lookup(&q).await.unwrap(), left[0]);
}

#[tokio::test(start_paused = true)]
async fn lookup_never_registers() {
    let f = fixture(config());
    let p = path(12);
    f.backend.add_disk(&p);
    assert!(matches!(
        f.registrar.lookup(&p).await,
        Err(LookupError::NotRegisteredYet { .. })
    ));
    assert_eq!(
        f.backend.calls(op::CREATE) + f.backend.calls(op::DISK_UUID),
        0
    );
}

#[test]
fn adoption_prefers_own_name_then_oldest() {
    let vol = |id: &str, name: &str, t: Option<i64>| CnsVolume {
        id: VolumeId(id.into()),
        name: name.into(),
        backing_path: None,
        created: t.map(|s| jiff::Timestamp::from_second(s).unwrap()),
        cluster_ids: Vec::new(),
    };
    let vols = [
        vol("b", "other", Some(1)),
        vol("a", "mine", Some(5)),
        vol("c", "x", None),
    ];
    assert_eq!(choose_adoptee(&vols, "mine").unwrap().id.0, "a");
    assert_eq!(choose_adoptee(&vols, "none").unwrap().id.0, "b");
    assert!(choose_adoptee(&[], "none").is_none());
}

#[tokio::test(start_paused = true)]
async fn adoption_among_duplicates_keeps_the_oldest_even_when_cns_reports_no_times() {
    let f = fixture(config());
    let p = path(3);
    f.backend.add_disk(&p);
    let request = crate::backend::CreateVolumeRequest {
        path: p.clone(),
        name: p.cns_volume_name(),
        cluster_id: "cluster-1".into(),
        storage_policy_name: None,
        fence: crate::backend::SendFence::none(),
    };
    // Two volumes carrying volmig's name: the older one's ID sorts last.
    let first = f.backend.create_volume(&request).await.unwrap();
    let second = f.backend.create_volume(&request).await.unwrap();
    let (older, newer) = (VolumeId::from("zz-older"), VolumeId::from("aa-newer"));
    f.backend.rename_volume(&first, &older);
    f.backend.rename_volume(&second, &newer);
    f.backend.set_queries_report_created(false);

    let reg = f.registrar.register(&p).await.unwrap();
    assert!(reg.adopted);
    assert_eq!(reg.volume_id, older, "the oldest, not the smallest ID");
    assert_eq!(f.backend.calls(op::CREATION_TIME), 2);
    assert_eq!(
        f.backend.calls(op::CREATE),
        2,
        "the two set-up creates only"
    );
}

mod confirm;
mod csi_users;
mod fencing;
mod first_look;
mod follow;
mod id_write;
mod interleavings;
mod markers;
mod settle;
mod slots;
mod stages;
mod task_proof;
mod task_record;
mod tasks;
mod unregistration;
