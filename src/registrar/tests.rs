use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::*;
use crate::backend::memory::{Fault, InMemoryBackend};
use crate::backend::{CnsVolume, op};

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
        let (backend, request) = (f.backend.clone(), create_request(&config(), &p));
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

/// The write-ahead dates the create for a restarted registrar's grace, so it must be made
/// after waiting for a backend slot, not before (found by the SIGKILL end-to-end test).
#[tokio::test(start_paused = true)]
async fn write_ahead_happens_after_waiting_for_a_slot() {
    let f = fixture(config().with_max_concurrent(1));
    let (a, b) = (path(15), path(16));
    f.backend.add_disk(&a);
    f.backend.add_disk(&b);
    f.backend.set_latency(op::CREATE, Duration::from_secs(1));
    let first = {
        let (r, a) = (f.registrar.clone(), a.clone());
        tokio::spawn(async move { r.register(&a).await.map(|_| ()) })
    };
    tokio::time::sleep(Duration::from_millis(10)).await;
    f.registrar.register(&b).await.unwrap();
    first.await.unwrap().unwrap();
    let order: Vec<(VolumePath, &str)> = f
        .store
        .history()
        .into_iter()
        .map(|(p, u)| {
            let kind = match u {
                StatusUpdate::Registering { .. } => "Registering",
                StatusUpdate::Registered { .. } => "Registered",
                _ => "other",
            };
            (p, kind)
        })
        .collect();
    assert_eq!(
        order,
        [
            (a.clone(), "Registering"),
            (a, "Registered"),
            (b.clone(), "Registering"),
            (b, "Registered")
        ]
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
async fn global_concurrency_limit_holds() {
    let f = fixture(config().with_max_concurrent(4));
    f.backend
        .set_latency(op::CREATE, Duration::from_millis(100));
    let paths: Vec<_> = (100..150).map(path).collect();
    for p in &paths {
        f.backend.add_disk(p);
    }
    let tasks: Vec<_> = paths
        .iter()
        .map(|p| {
            let (r, p) = (f.registrar.clone(), p.clone());
            tokio::spawn(async move { r.register(&p).await.map(|_| ()) })
        })
        .collect();
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    assert_eq!(f.backend.volumes().len(), 50);
    assert_eq!(f.backend.max_in_flight(op::CREATE), 4);
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

/// One random schedule of register / unregister / lookup from 16 tasks over 20 paths.
async fn run_interleaving(seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let f = fixture(config().with_max_concurrent(rng.random_range(1..=8)));
    let paths: Vec<_> = (0..20).map(path).collect();
    for p in &paths {
        f.backend.add_disk(p);
    }
    f.backend
        .set_latency(op::CREATE, Duration::from_millis(rng.random_range(0..20)));
    f.backend
        .set_latency(op::FIND, Duration::from_millis(rng.random_range(0..5)));
    f.backend
        .inject(op::CREATE, Fault::FailAfterCreate, rng.random_range(0..3));
    let late = Duration::from_millis(rng.random_range(1..50));
    f.backend
        .inject(op::CREATE, Fault::LateCreate(late), rng.random_range(0..3));
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let task_seed = rng.random();
        let (r, store, paths) = (f.registrar.clone(), f.store.clone(), paths.clone());
        tasks.push(tokio::spawn(async move {
            let mut rng = StdRng::seed_from_u64(task_seed);
            for _ in 0..8 {
                tokio::time::sleep(Duration::from_millis(rng.random_range(0..10))).await;
                let p = &paths[rng.random_range(0..paths.len())];
                match rng.random_range(0..10) {
                    0..=5 => {
                        if let Ok(reg) = r.register(p).await {
                            let stored = store.history().iter().any(|(q, u)| {
                                q == p && matches!(u, StatusUpdate::Registered { volume_id, .. } if *volume_id == reg.volume_id)
                            });
                            assert!(stored, "seed {seed}: {} returned but never stored", reg.volume_id);
                        }
                    }
                    6..=7 => r.unregister(p).await.unwrap(),
                    _ => {
                        let _ = r.lookup(p).await;
                    }
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(
        f.backend.max_live_per_path(),
        1,
        "seed {seed}: two live volumes for one path"
    );
    assert!(f.backend.duplicated_paths().is_empty(), "seed {seed}");
    assert_eq!(f.registrar.locked_keys(), 0, "seed {seed}: key leaked");
    assert_eq!(f.registrar.unsaved_ids(), 0, "seed {seed}: ID left unsaved");
    assert_eq!(
        f.backend.pending_creates(),
        0,
        "seed {seed}: a create outlived its call"
    );
    // The store and CNS agree at the end.
    for p in &paths {
        let stored = f.store.get(p).and_then(|s| s.volume_id);
        let live: Vec<_> = f.backend.volumes_for(p).into_iter().map(|v| v.id).collect();
        match stored {
            Some(id) => assert_eq!(live, vec![id], "seed {seed}: {p}"),
            None => assert!(live.is_empty(), "seed {seed}: {p} has an unrecorded volume"),
        }
    }
}

#[test]
fn random_interleavings_never_duplicate() {
    let base: u64 = std::env::var("VOLMIG_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| rand::rng().random());
    println!("random interleavings: base seed {base} (set VOLMIG_TEST_SEED={base} to replay)");
    for i in 0..2000 {
        let seed = base.wrapping_add(i);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        rt.block_on(run_interleaving(seed));
    }
}

// ---- Fencing (DESIGN.md §4.8–4.11): each scenario below failed on the code before it. ----

fn fenced_config() -> RegistrarConfig {
    config()
        .with_in_flight_grace(Duration::from_secs(60))
        .with_adoption_poll(Duration::from_secs(1))
}

/// Issue 12.1: a create whose outcome is unknown (timeout; the task completes 3 s later)
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

/// Issue 12.1: a caller that dies right after an unknown outcome leaves the `Registering`
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
struct SlowWriteAhead {
    inner: Arc<InMemoryStatusStore>,
    delay: Duration,
    during: Box<dyn Fn() + Send + Sync>,
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

/// Issue 12.2: leadership was only checked when the work was admitted; a deposed leader
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

/// Issue 12.2: the deposed leader's unconditional status write replaced the ID the new
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

/// Issue 12.5: an ID kept in memory (its write failed) was written later over an ID
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

/// Issue 12.5: an ID kept in memory that CNS no longer has is not published.
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

/// Issue 12.6: `--gc-orphans` unregistered through `unregister`, which also deleted the
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
        .create_volume(&create_request(&config(), &q))
        .await
        .unwrap();
    assert!(f.registrar.collect_orphan(&q, &orphan).await.unwrap());
    assert!(f.backend.volumes_for(&q).is_empty());
}

/// Issue 12.8: unregister during `Registering` did not wait for the create, which then
/// completed and left a registered volume nobody tracks.
#[tokio::test(start_paused = true)]
async fn unregister_waits_for_a_create_in_flight() {
    let f = fixture(fenced_config());
    let p = path(39);
    f.backend.add_disk(&p);
    write_ahead_now(&f.store, &p).await;
    // The dead process's create lands 10 s later.
    f.backend.set_latency(op::CREATE, Duration::from_secs(10));
    let ghost = {
        let (backend, request) = (f.backend.clone(), create_request(&config(), &p));
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

/// Issue 12.8: an object deleted by hand and recreated empty during a create: the ID is
/// still stored once, never lost.
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

/// DESIGN.md §2: an object whose spec names another path is never read as this path's.
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
