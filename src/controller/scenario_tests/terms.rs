//! The two-pass deletion rule across leadership terms (docs/design.md §5.3; issue 12 item 9): a
//! path found without PVs by one pass is deleted only when the next pass of the same term
//! finds it so too. Before the fix, the set of paths missing their PVs outlived a term, and
//! a replica that led again long after acted on a single pass of its new term.

use std::sync::Arc;

use http::{Method, StatusCode};
use serde_json::json;

use super::harness::*;
use crate::controller::full_sync::{FullSync, PassSummary};

fn empty_pv_list() -> serde_json::Value {
    json!({
        "apiVersion": "v1",
        "kind": "PersistentVolumeList",
        "metadata": {"resourceVersion": "10"},
        "items": [],
    })
}

/// One pass that sees no PV; answers its list call (and a deletion, if it makes one).
async fn pass(
    f: &mut Fixture,
    sync: &Arc<FullSync>,
    name: &str,
    expect_delete: bool,
) -> PassSummary {
    let task = tokio::spawn({
        let sync = Arc::clone(sync);
        async move { sync.run_pass().await }
    });
    let call = f.api.next().await;
    call.expect(Method::GET, "/api/v1/persistentvolumes", "&limit=500");
    call.reply(StatusCode::OK, &empty_pv_list());
    if expect_delete {
        let call = f.api.next().await;
        assert_eq!(
            (&call.method, call.path.as_str()),
            (&Method::DELETE, object_url(name).as_str()),
            "the deletion flow starts: {call:?}"
        );
        call.reply(
            StatusCode::OK,
            &json!({"kind": "Status", "status": "Success"}),
        );
    }
    f.api.outcome(task).await.unwrap()
}

#[tokio::test]
async fn a_new_term_needs_two_passes_of_its_own_before_deleting() {
    let mut f = fixture(&[]);
    let name = path(PATH_A).object_name();
    let sync = registered_full_sync(&f).await;

    // Term 1: one pass sees the path without PVs (first strike), then leadership is lost.
    let first = pass(&mut f, &sync, &name, false).await;
    assert_eq!(first.repairs, 0, "a first strike only: nothing is deleted");
    // Term 2 starts, much later: what term 1 saw proves nothing now.
    sync.begin_term();
    pass(&mut f, &sync, &name, false).await;
    // The second pass of the same term deletes.
    pass(&mut f, &sync, &name, true).await;
    drop(sync);
    f.finish().await;
}
