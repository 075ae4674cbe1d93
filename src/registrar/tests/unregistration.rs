//! Unregistration writes are leader-fenced and conditional on the state they were decided
//! on, and a volume CNS does not prove to be the path's is never unregistered
//! (docs/design.md §4.9, §5.1).

use std::time::Duration;

use super::*;

fn slow_config() -> RegistrarConfig {
    config()
        .with_in_flight_grace(Duration::from_secs(60))
        .with_adoption_poll(Duration::from_secs(1))
}

/// A replica waiting on its `CnsDeleteVolume` while the object is recreated for a new PV
/// and registered anew by another replica: its `Unregistered` write never clears the new
/// mapping.
#[tokio::test(start_paused = true)]
async fn a_slow_unregistration_never_clears_a_mapping_written_meanwhile() {
    let f = fixture(slow_config());
    let p = path(70);
    f.backend.add_disk(&p);
    f.registrar.register(&p).await.unwrap();
    f.backend.set_latency(op::DELETE, Duration::from_secs(5));
    let unregistering = {
        let (r, p) = (f.registrar.clone(), p.clone());
        tokio::spawn(async move { r.unregister(&p).await })
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    f.store.reset(&p);
    f.store.write_behind(
        &p,
        &StatusUpdate::Registered {
            volume_id: VolumeId::from("registered-anew"),
            disk_uuid: None,
            adopted: false,
            attempts: 1,
            protected: false,
        },
    );
    let result = unregistering.await.unwrap();
    assert!(
        matches!(&result, Err(RegisterError::Store { source, .. }) if source.kind == StoreErrorKind::Conflict),
        "{result:?}"
    );
    let stored = f.store.get(&p).unwrap();
    assert_eq!(
        (stored.phase, stored.volume_id),
        (
            Some(Phase::Registered),
            Some(VolumeId::from("registered-anew"))
        )
    );
}

/// A replica deposed while its delete runs writes no status.
#[tokio::test(start_paused = true)]
async fn a_deposed_replica_writes_no_unregistration_status() {
    let (leading, rx) = tokio::sync::watch::channel(true);
    let f = fixture(slow_config().with_leader(LeaderGate::new(rx)));
    let p = path(71);
    f.backend.add_disk(&p);
    f.registrar.register(&p).await.unwrap();
    let written = f.store.history().len();
    f.backend.set_latency(op::DELETE, Duration::from_secs(5));
    let unregistering = {
        let (r, p) = (f.registrar.clone(), p.clone());
        tokio::spawn(async move { r.unregister(&p).await })
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    leading.send(false).unwrap();
    let result = unregistering.await.unwrap();
    assert!(
        matches!(result, Err(RegisterError::NotLeader { .. })),
        "{result:?}"
    );
    let after: Vec<_> = f.store.history().into_iter().skip(written).collect();
    assert!(
        after
            .iter()
            .all(|(_, u)| !matches!(u, StatusUpdate::Unregistered)),
        "{after:?}"
    );
}

/// A stored ID whose volume CNS reports with neither a backing path nor volmig's name of
/// the path is in doubt: it is never unregistered.
#[tokio::test(start_paused = true)]
async fn a_volume_in_doubt_is_never_unregistered() {
    let f = fixture(slow_config());
    let (p, q) = (path(72), path(73));
    f.backend.add_disk(&p);
    f.backend.add_disk(&q);
    let mut request = create_request(&config(), &q, None);
    request.name = "pvc-foreign".into();
    let foreign = f.backend.create_volume(&request).await.unwrap();
    f.backend.clear_backing_path(&foreign);
    f.store
        .save(
            &p,
            &StatusUpdate::Registered {
                volume_id: foreign.clone(),
                disk_uuid: None,
                adopted: true,
                attempts: 1,
                protected: false,
            },
            None,
        )
        .await
        .unwrap();
    f.registrar.unregister(&p).await.unwrap();
    assert_eq!(f.backend.calls(op::DELETE), 0, "nothing proven to be p's");
    assert!(f.backend.volumes().iter().any(|v| v.id == foreign));
}
