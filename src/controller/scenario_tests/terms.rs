//! The two-pass deletion rule across leadership terms (docs/design.md §5.3): a
//! path found without PVs by one pass is deleted only when the next pass of the same term
//! finds it so too. Before the fix, the set of paths missing their PVs outlived a term, and
//! a replica that led again long after acted on a single pass of its new term.

use std::sync::Arc;

use http::{Method, StatusCode};
use serde_json::json;

use super::harness::*;
use crate::controller::full_sync::{FullSync, PassSummary};
use crate::registrar::LeaderGate;

/// One pass that sees no PV; answers its list call (and a deletion, if it makes one).
async fn pass(
    f: &mut Fixture,
    sync: &Arc<FullSync>,
    name: &str,
    expect_delete: bool,
) -> PassSummary {
    let task = spawn_pass(sync);
    let call = f.api.next().await;
    call.expect(Method::GET, "/api/v1/persistentvolumes", "&limit=500");
    call.reply(StatusCode::OK, &pv_list(Vec::new()));
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

/// A replica that loses its Lease while a pass is under way (e.g. SIGSTOPped past the
/// Lease, then continued) makes none of the pass's planned repairs: another replica leads
/// now, and writes planned from this replica's snapshot would race its writes. Before the
/// fix, leadership was looked at only when a term started, and the deposed replica sent
/// the `persistentVolumes` repair below.
#[tokio::test]
async fn a_pass_that_loses_leadership_after_listing_writes_nothing() {
    let (leading, signal) = tokio::sync::watch::channel(true);
    let mut f = fixture_led_by(&[("pv-b", PATH_A)], LeaderGate::new(signal));
    let sync = registered_full_sync(&f).await;
    let task = spawn_pass(&sync);
    let call = f.api.next().await;
    call.expect(Method::GET, "/api/v1/persistentvolumes", "&limit=500");
    // The Lease passes on while the list is in flight.
    leading.send_replace(false);
    // The stored status lists pv-a; the cluster now has pv-b on the path: a status repair
    // would be planned and, by a leader, written.
    call.reply(StatusCode::OK, &pv_list(vec![vsphere_pv("pv-b", PATH_A)]));
    let summary = f.api.outcome(task).await.unwrap();
    assert_eq!(
        summary.repairs, 0,
        "no repair is made by a deposed leader: {summary:?}"
    );
    assert_eq!(
        summary.failed, 0,
        "skipped repairs are not failures: {summary:?}"
    );
    drop(sync);
    f.finish().await;
}
