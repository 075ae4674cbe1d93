//! An ID is confirmed in CNS before this process first publishes it (docs/design.md §8.1).

use super::*;

#[tokio::test(start_paused = true)]
async fn only_a_live_volume_of_this_disk_is_confirmed() {
    let f = fixture(config());
    let (p, q) = (path(100), path(101));
    f.backend.add_disk(&p);
    f.backend.add_disk(&q);
    let own = f.registrar.register(&p).await.unwrap().volume_id;
    let other = f.registrar.register(&q).await.unwrap().volume_id;
    assert!(f.registrar.confirm(&p, &own).await.unwrap());
    assert!(
        !f.registrar.confirm(&p, &other).await.unwrap(),
        "another disk's"
    );
    assert!(
        !f.registrar
            .confirm(&p, &VolumeId::from("dead"))
            .await
            .unwrap(),
        "not in CNS"
    );
}
