//! A `Registering` marker is cleared only by the ID write or by proof that no create can
//! still land (docs/design.md §4.8): failures of any other call keep it, and every error
//! after a create was sent is an unknown outcome.

use std::time::Duration;

use super::*;

fn fenced_config() -> RegistrarConfig {
    config()
        .with_in_flight_grace(Duration::from_secs(60))
        .with_adoption_poll(Duration::from_secs(1))
}

/// Starts the create a dead leader sent after its write-ahead; it lands after `after`.
fn ghost_create(
    f: &Fixture,
    p: &VolumePath,
    after: Duration,
) -> tokio::task::JoinHandle<Result<VolumeId, crate::backend::BackendError>> {
    f.backend.set_latency(op::CREATE, after);
    let (backend, request) = (f.backend.clone(), create_request(&config(), p, None));
    tokio::spawn(async move { backend.create_volume(&request).await })
}

/// The successor's first vCenter calls fail (a burst of 503s during the takeover): the
/// failure it records keeps the dead leader's marker, so its next attempt waits for the
/// create in flight and adopts it instead of creating a second volume.
#[tokio::test(start_paused = true)]
async fn a_successors_failed_first_calls_keep_the_dead_leaders_marker() {
    for (class, operation) in [
        (ErrorClass::Transient, op::DISK_UUID),
        (ErrorClass::Transient, op::FIND),
        (ErrorClass::Permanent, op::DISK_UUID),
        (ErrorClass::NotAuthenticated, op::FIND),
    ] {
        let f = fixture(fenced_config());
        let p = path(50);
        f.backend.add_disk(&p);
        write_ahead_now(&f.store, &p).await;
        let ghost = ghost_create(&f, &p, Duration::from_secs(20));
        tokio::task::yield_now().await;
        f.backend.set_latency(op::CREATE, Duration::ZERO);
        // Enough failures for one call's retries.
        let failures = if class.is_retryable() { 4 } else { 1 };
        f.backend.inject(operation, Fault::Fail(class), failures);

        let err = f.registrar.register(&p).await.unwrap_err();
        let stored = f.store.get(&p).unwrap();
        assert_eq!(
            (stored.phase, stored.marker.as_deref()),
            (Some(Phase::Registering), Some("dead-replica/0001")),
            "{class:?} on {operation}: the marker stays ({err})"
        );
        let recorded = f.store.history().last().unwrap().1.clone();
        assert!(
            matches!(&recorded, StatusUpdate::Stalled { reason, .. } if reason == err.reason()),
            "the failure is recorded beside the marker: {recorded:?}"
        );

        let reg = f.registrar.register(&p).await.unwrap();
        let ghost_id = ghost.await.unwrap().unwrap();
        assert_eq!(
            (
                f.backend.calls(op::CREATE),
                reg.volume_id.clone(),
                reg.adopted
            ),
            (1, ghost_id, true),
            "{class:?} on {operation}: the create in flight is adopted, none is sent"
        );
        assert_eq!(f.backend.volumes_for(&p).len(), 1);
    }
}

/// The status lost its marker (another writer replaced it) while this process's own
/// create is still in doubt: the process's own record of it is a marker too.
#[tokio::test(start_paused = true)]
async fn an_own_create_in_doubt_counts_when_the_stored_marker_is_gone() {
    let f = fixture(fenced_config());
    let p = path(51);
    f.backend.add_disk(&p);
    f.backend
        .inject(op::CREATE, Fault::LateCreate(Duration::from_secs(20)), 1);
    let cut = tokio::time::timeout(Duration::from_secs(2), f.registrar.register(&p)).await;
    assert!(cut.is_err(), "still waiting for its create when cancelled");
    // A stale writer put `Failed` over the marker meanwhile.
    f.store.write_behind(
        &p,
        &StatusUpdate::Failed {
            reason: "BackendUnavailable".into(),
            message: "503".into(),
            attempts: 1,
            retry_after: None,
        },
    );
    let reg = f.registrar.register(&p).await.unwrap();
    assert_eq!(f.backend.calls(op::CREATE), 1, "no second create");
    assert!(reg.adopted);
    assert_eq!(f.backend.volumes_for(&p).len(), 1);
}

/// Every error after the create was sent is an unknown outcome, whatever its class: a
/// task poll answered `NotAuthenticated`, or a re-login refused after it.
#[tokio::test(start_paused = true)]
async fn any_error_after_the_create_was_sent_is_an_unknown_outcome() {
    for class in [
        ErrorClass::NotAuthenticated,
        ErrorClass::Permanent,
        ErrorClass::NotFound,
    ] {
        let f = fixture(fenced_config());
        let p = path(52);
        f.backend.add_disk(&p);
        f.backend.inject(
            op::CREATE,
            Fault::LostTask(class, Duration::from_secs(30)),
            1,
        );
        let reg = f.registrar.register(&p).await.unwrap();
        assert_eq!(
            f.backend.calls(op::CREATE),
            1,
            "{class:?}: the create in flight is awaited, never sent again"
        );
        assert!(reg.adopted, "{class:?}");
        assert_eq!(f.backend.volumes_for(&p).len(), 1, "{class:?}");
    }
}

/// A caller that gives up on an unknown outcome of its own create (any class) leaves the
/// marker for the next attempt.
#[tokio::test(start_paused = true)]
async fn an_unknown_outcome_of_any_class_keeps_the_marker() {
    let f = fixture(fenced_config());
    let p = path(53);
    f.backend.add_disk(&p);
    f.backend.inject(
        op::CREATE,
        Fault::LostTask(ErrorClass::NotAuthenticated, Duration::from_secs(30)),
        1,
    );
    // The look after the lost task fails for good (the password was rotated meanwhile).
    let registering = {
        let (r, p) = (f.registrar.clone(), p.clone());
        tokio::spawn(async move { r.register(&p).await })
    };
    tokio::task::yield_now().await;
    f.backend
        .inject(op::FIND, Fault::Fail(ErrorClass::NotAuthenticated), 100);
    let err = registering.await.unwrap().unwrap_err();
    let stored = f.store.get(&p).unwrap();
    assert_eq!(stored.phase, Some(Phase::Registering), "{err}");
    assert!(stored.marker.is_some());
    assert_eq!(f.registrar.creates_in_doubt(), 1);
}

/// A create vCenter refused before running it (a fault on the call itself) proves that
/// nothing is in flight: `Failed` replaces the marker and the next attempt creates at once.
#[tokio::test(start_paused = true)]
async fn a_refused_create_clears_its_own_marker() {
    let mut retry = quick_retry();
    retry.attempts_per_call = 1;
    let f = fixture(fenced_config().with_retry(retry));
    let p = path(54);
    f.backend.add_disk(&p);
    f.backend
        .inject(op::CREATE, Fault::Fail(ErrorClass::Permanent), 1);
    f.registrar.register(&p).await.unwrap_err();
    let stored = f.store.get(&p).unwrap();
    assert_eq!((stored.phase, stored.marker), (Some(Phase::Failed), None));
    let started = tokio::time::Instant::now();
    f.registrar.register(&p).await.unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "no grace to wait"
    );
    assert_eq!(f.backend.calls(op::CREATE), 2);
}

/// A `Failed` write is leader-fenced: a deposed replica records nothing.
#[tokio::test(start_paused = true)]
async fn a_deposed_replica_records_no_failure() {
    let (leading, rx) = tokio::sync::watch::channel(true);
    let f = fixture(fenced_config().with_leader(LeaderGate::new(rx)));
    let p = path(55);
    f.backend.add_disk(&p);
    let registering = {
        let (r, p) = (f.registrar.clone(), p.clone());
        tokio::spawn(async move { r.register(&p).await })
    };
    f.backend
        .inject(op::DISK_UUID, Fault::Fail(ErrorClass::Permanent), 1);
    f.backend.set_latency(op::DISK_UUID, Duration::from_secs(1));
    tokio::task::yield_now().await;
    leading.send(false).unwrap();
    registering.await.unwrap().unwrap_err();
    assert!(
        f.store.history().is_empty(),
        "nothing written: {:?}",
        f.store.history()
    );
}

#[test]
fn a_failure_clears_only_a_marker_whose_create_ended() {
    use super::super::failure::{FailureRecord, decide_failure_record};
    let marked = |phase| StoredState {
        phase: Some(phase),
        marker: Some("a/1".into()),
        ..StoredState::default()
    };
    let never = |_: &str| false;
    let refused = |t: &str| t == "a/1";
    let cases = [
        (
            marked(Phase::Registering),
            false,
            false,
            FailureRecord::BesideMarker,
        ),
        (
            marked(Phase::Registering),
            true,
            false,
            FailureRecord::BesideMarker,
        ),
        (
            marked(Phase::Registering),
            false,
            true,
            FailureRecord::Failed,
        ),
        (StoredState::default(), false, false, FailureRecord::Failed),
        (StoredState::default(), true, false, FailureRecord::Nothing),
        (marked(Phase::Failed), false, false, FailureRecord::Failed),
        (marked(Phase::Failed), true, false, FailureRecord::Nothing),
    ];
    for (state, own_in_doubt, was_refused, expected) in cases {
        let got = if was_refused {
            decide_failure_record(&state, refused, own_in_doubt)
        } else {
            decide_failure_record(&state, never, own_in_doubt)
        };
        assert_eq!(got, expected, "{state:?}, own in doubt {own_in_doubt}");
    }
}

/// Leadership is asked again immediately before the create is written, after its
/// preparation (policy resolution, RegisterDisk: here the backend's latency): a replica
/// deposed meanwhile sends nothing, and its marker proves nothing in flight.
#[tokio::test(start_paused = true)]
async fn a_leader_deposed_during_the_create_preparation_sends_nothing() {
    let (leading, rx) = tokio::sync::watch::channel(true);
    let f = fixture(fenced_config().with_leader(LeaderGate::new(rx)));
    let p = path(56);
    f.backend.add_disk(&p);
    f.backend.set_latency(op::CREATE, Duration::from_secs(5));
    let registering = {
        let (r, p) = (f.registrar.clone(), p.clone());
        tokio::spawn(async move { r.register(&p).await })
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    leading.send(false).unwrap();
    let err = registering.await.unwrap().unwrap_err();
    assert!(matches!(err, RegisterError::NotLeader { .. }), "{err}");
    assert!(f.backend.volumes_for(&p).is_empty(), "no create was sent");

    // Leading again: the marker left behind is no reason to wait a grace.
    leading.send(true).unwrap();
    f.backend.set_latency(op::CREATE, Duration::ZERO);
    let started = tokio::time::Instant::now();
    f.registrar.register(&p).await.unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(f.backend.volumes_for(&p).len(), 1);
}
