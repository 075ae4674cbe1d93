//! `settle`: the create in flight of an object being deleted is resolved without a create
//! (docs/design.md §5.4).

use std::time::Duration;

use super::*;

fn settle_config() -> RegistrarConfig {
    config()
        .with_in_flight_grace(Duration::from_secs(60))
        .with_adoption_poll(Duration::from_secs(5))
}

/// A dead process's create landed: its volume is recorded, nothing is created.
#[tokio::test(start_paused = true)]
async fn the_volume_that_landed_is_recorded() {
    let f = fixture(settle_config());
    let p = path(90);
    f.backend.add_disk(&p);
    write_ahead_now(&f.store, &p).await;
    let landed = f
        .backend
        .create_volume(&create_request(&config(), &p, None))
        .await
        .unwrap();
    f.registrar.settle(&p).await.unwrap();
    let stored = f.store.get(&p).unwrap();
    assert_eq!(stored.phase, Some(Phase::Registered));
    assert_eq!(stored.volume_id, Some(landed));
    assert_eq!(f.backend.calls(op::CREATE), 1, "only the dead process's");
}

/// Nothing landed within the grace: the marker is released (`Failed`), never a create.
#[tokio::test(start_paused = true)]
async fn a_marker_nothing_landed_under_is_released_after_its_grace() {
    let f = fixture(settle_config());
    let p = path(91);
    f.backend.add_disk(&p);
    write_ahead_now(&f.store, &p).await;
    let started = tokio::time::Instant::now();
    f.registrar.settle(&p).await.unwrap();
    assert!(
        started.elapsed() >= Duration::from_secs(60),
        "waited the grace"
    );
    let stored = f.store.get(&p).unwrap();
    assert_eq!(stored.phase, Some(Phase::Failed));
    assert_eq!(stored.marker, None);
    assert_eq!(f.backend.calls(op::CREATE), 0);
    // Without a marker there is nothing to settle.
    f.registrar.settle(&p).await.unwrap();
    assert_eq!(f.backend.calls(op::CREATE), 0);
}
