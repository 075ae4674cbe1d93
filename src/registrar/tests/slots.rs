//! Backend slots: the concurrency limit, the write-ahead's place after the wait, and the
//! order in which waiting calls get a slot.

use super::*;

/// Registers every path at once and waits for all of them.
async fn register_concurrently(f: &Fixture, paths: &[VolumePath]) {
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
    register_concurrently(&f, &paths).await;
    assert_eq!(f.backend.volumes().len(), 50);
    assert_eq!(f.backend.max_in_flight(op::CREATE), 4);
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

/// A burst of new registrations (a migration's start) must not queue every first call
/// ahead of the calls of registrations already under way: with one slot, the first
/// registration is stored before the burst has been looked at, instead of after every
/// other vmdk's look-ups (the FIFO order the slots had before).
#[tokio::test(start_paused = true)]
async fn registrations_under_way_go_before_new_ones() {
    let f = fixture(config().with_max_concurrent(1));
    let paths: Vec<VolumePath> = (30..38).map(path).collect();
    for p in &paths {
        f.backend.add_disk(p);
    }
    for operation in [op::DISK_UUID, op::FIND, op::CREATE, op::PROTECT] {
        f.backend.set_latency(operation, Duration::from_millis(10));
    }
    register_concurrently(&f, &paths).await;
    let history = f.store.history();
    let first_stored = history
        .iter()
        .position(|(_, u)| matches!(u, StatusUpdate::Registered { .. }))
        .unwrap();
    let write_aheads_before = history[..first_stored]
        .iter()
        .filter(|(_, u)| matches!(u, StatusUpdate::Registering { .. }))
        .count();
    assert!(
        write_aheads_before <= 2,
        "{write_aheads_before} registrations reached their create before the first one was stored"
    );
    assert_eq!(f.backend.calls(op::CREATE), paths.len() as u64);
    assert_eq!(f.backend.max_live_per_path(), 1);
}

/// Spawns `register(p)` and returns its handle.
fn spawn_register(
    f: &Fixture,
    p: &VolumePath,
) -> tokio::task::JoinHandle<Result<Registration, RegisterError>> {
    let (r, p) = (f.registrar.clone(), p.clone());
    tokio::spawn(async move { r.register(&p).await })
}

/// A registration keeps its slot from its first backend call to its last (the bare
/// client's one worker per slot): with one slot, the first of two registrations takes
/// exactly its own four calls' time. Taking a slot per call, it queued again behind the
/// other registration before each of its calls (finished at 70 ms, not 40).
#[tokio::test(start_paused = true)]
async fn a_registration_keeps_its_slot_between_its_calls() {
    let f = fixture(config().with_max_concurrent(1));
    let (a, b) = (path(40), path(41));
    f.backend.add_disk(&a);
    f.backend.add_disk(&b);
    for operation in [op::DISK_UUID, op::FIND, op::CREATE, op::PROTECT] {
        f.backend.set_latency(operation, Duration::from_millis(10));
    }
    let start = tokio::time::Instant::now();
    let (first, second) = (spawn_register(&f, &a), spawn_register(&f, &b));
    first.await.unwrap().unwrap();
    assert_eq!(start.elapsed(), Duration::from_millis(40));
    second.await.unwrap().unwrap();
    assert_eq!(start.elapsed(), Duration::from_millis(80));
    assert_eq!(f.backend.calls(op::CREATE), 2);
    assert_eq!(f.backend.max_in_flight(op::CREATE), 1);
    assert_eq!(f.backend.max_live_per_path(), 1);
}

/// The slot a registration keeps is freed while it waits out another create's grace: the
/// other vmdks are registered meanwhile, not after the grace.
#[tokio::test(start_paused = true)]
async fn waiting_for_a_grace_frees_the_slot() {
    let grace = Duration::from_secs(5);
    let f = fixture(
        config()
            .with_max_concurrent(1)
            .with_in_flight_grace(grace)
            .with_adoption_poll(Duration::from_millis(500)),
    );
    let (waits, other) = (path(42), path(43));
    f.backend.add_disk(&waits);
    f.backend.add_disk(&other);
    write_ahead_now(&f.store, &waits).await;
    let start = tokio::time::Instant::now();
    let waiting = spawn_register(&f, &waits);
    tokio::task::yield_now().await;
    f.registrar.register(&other).await.unwrap();
    assert!(
        start.elapsed() < grace,
        "the other vmdk waited for the grace: {:?}",
        start.elapsed()
    );
    let reg = waiting.await.unwrap().unwrap();
    assert!(
        !reg.adopted,
        "nothing appeared during the grace: created after it"
    );
    assert!(start.elapsed() >= grace);
    assert_eq!(f.backend.calls(op::CREATE), 2);
}

/// A transient failure frees the slot before the retry's delay: another registration
/// goes through during the delay instead of after the retried one.
#[tokio::test(start_paused = true)]
async fn a_retry_delay_frees_the_slot() {
    let f = fixture(config().with_max_concurrent(1));
    let (fails, other) = (path(44), path(45));
    f.backend.add_disk(&fails);
    f.backend.add_disk(&other);
    f.backend
        .set_latency(op::DISK_UUID, Duration::from_millis(1));
    f.backend
        .inject(op::FIND, Fault::Fail(ErrorClass::Transient), 1);
    let finished_at = |handle: tokio::task::JoinHandle<Result<Registration, RegisterError>>| async move {
        handle.await.unwrap().unwrap();
        tokio::time::Instant::now()
    };
    // `fails` takes the slot first; its look-up fails and it waits 10 ms to retry.
    let failing = tokio::spawn(finished_at(spawn_register(&f, &fails)));
    tokio::time::sleep(Duration::from_micros(500)).await;
    let passing = tokio::spawn(finished_at(spawn_register(&f, &other)));
    let (failed_at, passed_at) = (failing.await.unwrap(), passing.await.unwrap());
    assert!(
        passed_at < failed_at,
        "the other registration waited for the retried one"
    );
    assert_eq!(f.backend.calls(op::CREATE), 2);
    assert_eq!(f.backend.max_live_per_path(), 1);
}
