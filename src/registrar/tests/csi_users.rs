//! A volume the CSI driver's PVs or VolumeAttachments use after cut-over is never
//! unregistered: neither when the last in-tree PV goes nor as an orphan (docs/design.md
//! §5.1).

use std::sync::Mutex;

use super::*;

/// A registrar whose volume users are the IDs in the returned list.
fn with_users() -> (Fixture, Arc<Mutex<Vec<VolumeId>>>) {
    let used: Arc<Mutex<Vec<VolumeId>>> = Arc::default();
    let seen = used.clone();
    let users: VolumeUsers = Arc::new(move |id| {
        if seen.lock().unwrap().contains(id) {
            vec!["pv/static-a".to_owned()]
        } else {
            Vec::new()
        }
    });
    (fixture(config().with_volume_users(users)), used)
}

#[tokio::test(start_paused = true)]
async fn a_volume_with_csi_users_stays_registered_when_its_path_is_unregistered() {
    let (f, used) = with_users();
    let p = path(80);
    f.backend.add_disk(&p);
    let reg = f.registrar.register(&p).await.unwrap();
    used.lock().unwrap().push(reg.volume_id.clone());
    f.registrar.unregister(&p).await.unwrap();
    assert_eq!(f.backend.calls(op::DELETE), 0);
    assert_eq!(f.backend.volumes_for(&p).len(), 1, "the volume stays");

    // Once the CSI users are gone, it is unregistered as before.
    let q = path(81);
    f.backend.add_disk(&q);
    f.registrar.register(&q).await.unwrap();
    f.registrar.unregister(&q).await.unwrap();
    assert!(f.backend.volumes_for(&q).is_empty());
}

#[tokio::test(start_paused = true)]
async fn an_orphan_with_csi_users_is_kept() {
    let (f, used) = with_users();
    let p = path(82);
    f.backend.add_disk(&p);
    let orphan = f
        .backend
        .create_volume(&create_request(&config(), &p, None))
        .await
        .unwrap();
    used.lock().unwrap().push(orphan.clone());
    let collected = f.registrar.collect_orphan(&p, &orphan).await.unwrap();
    assert!(!collected, "reported as kept");
    assert_eq!(f.backend.calls(op::DELETE), 0);
}
