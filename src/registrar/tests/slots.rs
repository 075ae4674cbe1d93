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
