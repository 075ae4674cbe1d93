//! What a failed write leads to, at the API: each answer class of the one classification
//! (docs/design.md §4.6) for the finalizer patch and the status write, through the real
//! reconcile and `error_policy`. (Every write kind and a timeout: `controller::error`'s
//! table.)

use std::sync::Arc;

use http::{Method, StatusCode};
use serde_json::json;

use super::harness::*;
use crate::controller::Action;
use crate::controller::reconcile::error_policy;
use crate::volume_migration::VolumeMigration;

/// (status code, reason, the reconcile's next step).
fn rows() -> Vec<(u16, &'static str, Action)> {
    let retry = Action::requeue(ERROR_REQUEUE);
    let wait = Action::await_change();
    vec![
        (400, "BadRequest", wait),
        (401, "Unauthorized", retry),
        (403, "Forbidden", wait),
        (404, "NotFound", retry),
        (409, "Conflict", retry),
        (410, "Gone", retry),
        (422, "Invalid", wait),
        (429, "TooManyRequests", retry),
        (500, "InternalError", retry),
        (503, "ServiceUnavailable", retry),
    ]
}

/// Runs every row against the first write the reconcile of `vm` makes (`url`), whose
/// failure is counted as `label`.
async fn table(vm: &VolumeMigration, url: &str, label: &str) {
    for (code, reason, want) in rows() {
        let mut f = fixture(&[("pv-a", PATH_A)]);
        let task = f.reconcile(vm);
        let call = f.api.next().await;
        call.expect(Method::PATCH, url, FIELD_MANAGER_QUERY);
        call.fail(StatusCode::from_u16(code).unwrap(), reason, "scripted");
        let error = f.api.outcome(task).await.unwrap_err();
        assert_eq!(error.metric_label(), label, "HTTP {code}");
        let action = error_policy(Arc::new(vm.clone()), &error, Arc::clone(&f.ctx));
        assert_eq!(action, want, "{label} answered {code}");
        f.finish().await;
    }
}

#[tokio::test]
async fn a_failed_finalizer_patch_requeues_by_its_class() {
    let name = path(PATH_A).object_name();
    // Created by hand, without volmig's finalizer: the reconciler adds it first.
    let vm = migration(&name, PATH_A, false, None);
    table(&vm, &object_url(&name), "add_finalizer").await;
}

#[tokio::test]
async fn a_failed_status_write_requeues_by_its_class() {
    let name = path(PATH_A).object_name();
    // Registered with an out-of-date PV list: the reconciler writes the list.
    let status =
        json!({"phase": "Registered", "volumeID": "vol-a", "persistentVolumes": ["pv-old"]});
    let vm = migration(&name, PATH_A, true, Some(status));
    table(&vm, &status_url(&name), "write_status").await;
}
