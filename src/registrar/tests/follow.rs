//! While the CSI driver's syncer leads, volmig creates nothing (docs/design.md §8.2): it
//! adopts the driver's volume, writes no write-ahead, and creates only once it holds the
//! syncer's Lease itself.

use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::LeaseSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;

use super::*;
use crate::syncer_lease::{HoldPhase, RegistrarMode, RegistrarModeGate, SyncerObserver};

/// A gate over an observer that saw the driver's syncer renew its 30 s Lease just now.
fn driver_leads() -> (Arc<Mutex<SyncerObserver>>, RegistrarModeGate) {
    let observer = Arc::new(Mutex::new(SyncerObserver::default()));
    renew(&observer, 0);
    (observer.clone(), RegistrarModeGate::observing(observer))
}

fn renew(observer: &Mutex<SyncerObserver>, second: i64) {
    let spec = LeaseSpec {
        holder_identity: Some("vsphere-csi-controller-7d9".into()),
        renew_time: Some(MicroTime(
            jiff::Timestamp::from_second(1_800_000_000 + second).unwrap(),
        )),
        lease_duration_seconds: Some(30),
        ..LeaseSpec::default()
    };
    observer
        .lock()
        .unwrap()
        .on_lease(Some(&spec), tokio::time::Instant::now());
}

/// This replica holds the syncer's Lease for the next `seconds` (its holder wrote it).
fn hold(observer: &Mutex<SyncerObserver>, seconds: u64) {
    observer.lock().unwrap().set_hold(HoldPhase::Held {
        holder: "volmig/volmig-0".into(),
        sends_until: tokio::time::Instant::now() + Duration::from_secs(seconds),
    });
}

fn following(gate: RegistrarModeGate) -> RegistrarConfig {
    config()
        .with_in_flight_grace(Duration::from_secs(60))
        .with_adoption_poll(Duration::from_secs(1))
        .with_follow_poll(Duration::from_secs(7))
        .with_mode_gate(gate)
}

#[tokio::test(start_paused = true)]
async fn while_the_driver_leads_nothing_is_created_or_written_ahead() {
    let (_observer, gate) = driver_leads();
    let f = fixture(following(gate));
    let p = path(60);
    f.backend.add_disk(&p);
    let err = f.registrar.register(&p).await.unwrap_err();
    assert!(
        matches!(&err, RegisterError::NotRegistrar { source, .. }
            if matches!(source.0, RegistrarMode::Follow { .. })),
        "{err}"
    );
    assert_eq!(err.reason(), reason::AWAITING_CSI_DRIVER);
    assert!(err.is_retryable());
    assert_eq!(err.retry_after(), Some(Duration::from_secs(7)));
    assert_eq!(f.backend.calls(op::CREATE), 0);
    assert!(
        f.store.history().is_empty(),
        "no write-ahead, no Failed: {:?}",
        f.store.history()
    );
}

#[tokio::test(start_paused = true)]
async fn the_volume_the_driver_registered_is_adopted() {
    let (_observer, gate) = driver_leads();
    let f = fixture(following(gate));
    let p = path(61);
    f.backend.add_disk(&p);
    // The driver's syncer registers under a random name of its own.
    let mut request = create_request(&config(), &p, None);
    request.name = "pvc-7f3a9c".into();
    let theirs = f.backend.create_volume(&request).await.unwrap();

    let reg = f.registrar.register(&p).await.unwrap();
    assert_eq!((reg.volume_id, reg.adopted), (theirs, true));
    assert_eq!(f.backend.calls(op::CREATE), 1, "only the driver's create");
    assert!(
        !f.store
            .history()
            .iter()
            .any(|(_, u)| matches!(u, StatusUpdate::Registering { .. })),
        "no write-ahead while following"
    );
}

#[tokio::test(start_paused = true)]
async fn a_lapsed_syncer_lease_is_no_licence_to_create_only_holding_it_is() {
    let (observer, gate) = driver_leads();
    let f = fixture(following(gate));
    let p = path(62);
    f.backend.add_disk(&p);
    tokio::time::advance(Duration::from_secs(20)).await;
    renew(&observer, 20);
    tokio::time::advance(Duration::from_secs(25)).await;
    assert!(
        f.registrar.register(&p).await.is_err(),
        "renewed at 20 s: live until 50 s"
    );
    tokio::time::advance(Duration::from_secs(3600)).await;
    let err = f.registrar.register(&p).await.unwrap_err();
    assert!(
        matches!(&err, RegisterError::NotRegistrar { source, .. }
            if matches!(source.0, RegistrarMode::Waiting { .. } | RegistrarMode::Acquiring)),
        "lapsed for an hour, still not volmig's: {err}"
    );
    assert_eq!(f.backend.calls(op::CREATE), 0);
    hold(&observer, 30);
    let reg = f.registrar.register(&p).await.unwrap();
    assert!(!reg.adopted);
    assert_eq!(f.backend.calls(op::CREATE), 1);
}

/// The driver starts leading while a write-ahead is being stored: the create is called
/// off, and the marker it left proves nothing in flight (no grace is waited later).
#[tokio::test(start_paused = true)]
async fn a_syncer_that_starts_leading_during_the_write_ahead_stops_the_create() {
    let observer = Arc::new(Mutex::new(SyncerObserver::default()));
    observer
        .lock()
        .unwrap()
        .on_lease(None, tokio::time::Instant::now());
    hold(&observer, 3600);
    let gate = RegistrarModeGate::observing(observer.clone());
    let backend = Arc::new(InMemoryBackend::new());
    let p = path(63);
    backend.add_disk(&p);
    let inner = Arc::new(InMemoryStatusStore::default());
    let flip = observer.clone();
    let flipped = std::sync::atomic::AtomicBool::new(false);
    let store = Arc::new(fencing::SlowWriteAhead {
        inner: inner.clone(),
        delay: Duration::from_secs(2),
        during: Box::new(move || {
            if !flipped.swap(true, std::sync::atomic::Ordering::SeqCst) {
                renew(&flip, 0);
            }
        }),
    });
    let registrar = Registrar::new(backend.clone(), store, following(gate));
    let err = registrar.register(&p).await.unwrap_err();
    assert!(matches!(err, RegisterError::NotRegistrar { .. }), "{err}");
    assert_eq!(backend.calls(op::CREATE), 0);

    // The driver's holder is gone and this replica holds the Lease again: the next attempt
    // creates without waiting a grace (the marker proved nothing in flight).
    observer
        .lock()
        .unwrap()
        .on_lease(None, tokio::time::Instant::now());
    let started = tokio::time::Instant::now();
    registrar.register(&p).await.unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(backend.calls(op::CREATE), 1);
}

#[tokio::test(start_paused = true)]
async fn before_the_syncer_lease_was_read_nothing_is_created() {
    let observer = Arc::new(Mutex::new(SyncerObserver::default()));
    let f = fixture(following(RegistrarModeGate::observing(observer)));
    let p = path(64);
    f.backend.add_disk(&p);
    let err = f.registrar.register(&p).await.unwrap_err();
    assert!(
        matches!(&err, RegisterError::NotRegistrar { source, .. } if source.0 == RegistrarMode::Unknown),
        "{err}"
    );
    assert_eq!(f.backend.calls(op::CREATE), 0);
}

/// The driver's cache maps path P to the volume of another disk Q (a stale or hand-made
/// object): P never adopts Q's volume, whatever the mode.
#[tokio::test(start_paused = true)]
async fn a_driver_cache_id_of_another_disk_is_never_adopted() {
    let backend = Arc::new(InMemoryBackend::new());
    let (p, q) = (path(65), path(66));
    backend.add_disk(&p);
    backend.add_disk(&q);
    let q_id = backend
        .create_volume(&create_request(&config(), &q, None))
        .await
        .unwrap();
    let (p_seen, q_id_seen) = (p.clone(), q_id.clone());
    let lookup: crate::registrar::DriverIds = Arc::new(move |asked: &VolumePath| {
        if *asked == p_seen {
            vec![q_id_seen.clone()]
        } else {
            Vec::new()
        }
    });
    let store = Arc::new(InMemoryStatusStore::default());
    let registrar = Registrar::new(backend.clone(), store, config().with_driver_ids(lookup));
    let reg = registrar.register(&p).await.unwrap();
    assert_ne!(reg.volume_id, q_id, "P's status never names Q's volume");
    assert_eq!(backend.volumes_for(&p).len(), 1);
    assert_eq!(
        backend.volumes_for(&q),
        vec![backend.volumes_for(&q)[0].clone()]
    );
}

#[test]
fn the_syncer_lease_waits_the_registrars_default_grace() {
    assert_eq!(
        crate::syncer_lease::DEFAULT_TAKE_GRACE,
        crate::registrar::DEFAULT_IN_FLIGHT_GRACE
    );
}
