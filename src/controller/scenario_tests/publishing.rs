//! Publishing into the CSI driver's cache (docs/design.md §8.1) at the API: created once, no write
//! while in sync, never removed because no PV spells the path for a moment (a removed object
//! is a cache miss, and on a miss the driver registers by itself), removed on unpublish.

use std::sync::Arc;

use http::{Method, StatusCode};
use serde_json::json;

use super::harness::*;
use crate::backend::VolumeId;
use crate::controller::publish::{publish, unpublish};
use crate::k8s::driver_cache::DriverIndex;

#[tokio::test]
async fn published_once_kept_while_no_pv_spells_it_removed_with_the_registration() {
    let index = Arc::new(DriverIndex::default());
    let mut f = fixture_publishing(&[("pv-a", PATH_A)], Arc::clone(&index));
    let a = path(PATH_A);
    let id = VolumeId::from("vol-a");
    live_volume(&f.backend, PATH_A, "vol-a").await;

    let task = tokio::spawn({
        let (ctx, a, id) = (Arc::clone(&f.ctx), a.clone(), id.clone());
        async move { publish(&ctx, &a, &id, true).await }
    });
    let call = f.api.next().await;
    assert_eq!(
        (&call.method, call.path.as_str()),
        (&Method::POST, DRIVER_OBJECTS),
        "{call:?}"
    );
    assert_eq!(call.body["metadata"]["name"], "vol-a");
    assert_eq!(
        call.body["spec"],
        json!({"volumepath": PATH_A, "volumeid": "vol-a", "protectvolumefromvmdelete": true})
    );
    let created = call.body.clone();
    call.reply(StatusCode::CREATED, &created);
    assert_eq!(f.api.outcome(task).await.unwrap(), 1);

    // In sync: no call at all (a call would wait for an answer that never comes).
    let quiet = tokio::time::timeout(HANG_GUARD, publish(&f.ctx, &a, &id, true));
    assert_eq!(quiet.await.expect("an API call in sync").unwrap(), 0);
    // The PV is gone from the index (deleted, or a re-list in progress): nothing removed.
    f.ctx.index.remove("pv-a");
    let quiet = tokio::time::timeout(HANG_GUARD, publish(&f.ctx, &a, &id, true));
    assert_eq!(quiet.await.expect("an API call without PVs").unwrap(), 0);
    assert_eq!(index.objects_of(&id).len(), 1);

    // Unregistered: the object goes.
    let task = tokio::spawn({
        let (ctx, id, a) = (Arc::clone(&f.ctx), id.clone(), a.clone());
        async move { unpublish(&ctx, &a, &id).await }
    });
    let call = f.api.next().await;
    assert_eq!(
        (&call.method, call.path.as_str()),
        (&Method::DELETE, format!("{DRIVER_OBJECTS}/vol-a").as_str()),
        "{call:?}"
    );
    call.reply(
        StatusCode::OK,
        &json!({"kind": "Status", "status": "Success"}),
    );
    assert_eq!(f.api.outcome(task).await.unwrap(), 1);
    assert!(index.objects_of(&id).is_empty());
    f.finish().await;
}
