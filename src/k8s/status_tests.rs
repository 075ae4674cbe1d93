use std::time::Duration;

use super::*;

fn now() -> jiff::Timestamp {
    "2026-12-02T10:00:00Z".parse().unwrap()
}

fn registrar(update: StatusUpdate) -> Value {
    status_patch(&StatusChange::Registrar(update), now())
}

#[test]
fn registered_patch_publishes_id_and_clears_errors_and_marker() {
    let patch = registrar(StatusUpdate::Registered {
        volume_id: VolumeId::from("vol-1"),
        disk_uuid: Some("uuid-1".into()),
        adopted: false,
        attempts: 1,
        protected: false,
    });
    let s = &patch["status"];
    assert_eq!(s["phase"], "Registered");
    assert_eq!(s["volumeID"], "vol-1");
    assert_eq!(s["diskUUID"], "uuid-1");
    assert!(s["lastError"].is_null() && s.get("lastError").is_some());
    assert!(s.get("registeringToken").is_some_and(Value::is_null));
    assert_eq!(s["conditions"][0]["type"], "Registered");
    assert_eq!(s["conditions"][0]["status"], "True");
    assert_eq!(s["conditions"][0]["reason"], "Created");
    assert_eq!(s["registeredTime"], "2026-12-02T10:00:00Z");
    let typed: VolumeMigrationStatus = serde_json::from_value(s.clone()).unwrap();
    assert_eq!(typed.volume_id.as_deref(), Some("vol-1"));
}

#[test]
fn adopted_without_uuid_keeps_stored_uuid() {
    let patch = registrar(StatusUpdate::Registered {
        volume_id: VolumeId::from("v"),
        disk_uuid: None,
        adopted: true,
        attempts: 2,
        protected: false,
    });
    assert!(patch["status"].get("diskUUID").is_none());
    assert_eq!(patch["status"]["conditions"][1]["reason"], "Adopted");
}

#[test]
fn failed_patch_schedules_retry() {
    let patch = registrar(StatusUpdate::Failed {
        reason: "BackendUnavailable".into(),
        message: "timeout".into(),
        attempts: 3,
        retry_after: Some(Duration::from_secs(90)),
    });
    let s = &patch["status"];
    assert_eq!(s["phase"], "Failed");
    assert_eq!(s["lastError"]["reason"], "BackendUnavailable");
    assert_eq!(s["nextRetryTime"], "2026-12-02T10:01:30Z");
    let typed: VolumeMigrationStatus = serde_json::from_value(s.clone()).unwrap();
    assert_eq!(retry_due_in(&typed, now()), Some(Duration::from_secs(90)));
    let permanent = registrar(StatusUpdate::Failed {
        reason: "DiskNotFound".into(),
        message: "gone".into(),
        attempts: 1,
        retry_after: None,
    });
    assert!(permanent["status"]["nextRetryTime"].is_null());
}

#[test]
fn stalled_patch_records_the_error_and_leaves_phase_and_marker() {
    let s = &registrar(StatusUpdate::Stalled {
        reason: "BackendUnavailable".into(),
        message: "503".into(),
    })["status"];
    assert_eq!(s["lastError"]["reason"], "BackendUnavailable");
    for untouched in ["phase", "registeringToken", "volumeID", "attempts"] {
        assert!(s.get(untouched).is_none(), "{untouched} is written: {s}");
    }
}

#[test]
fn registering_patch_carries_the_marker_token() {
    let s = &registrar(StatusUpdate::Registering {
        attempts: 2,
        token: "replica-a/00ff".into(),
    })["status"];
    let typed: VolumeMigrationStatus = serde_json::from_value(s.clone()).unwrap();
    let state = stored_state(&typed, Some("41".into()));
    assert_eq!(state.phase, Some(Phase::Registering));
    assert_eq!(state.marker.as_deref(), Some("replica-a/00ff"));
    assert_eq!(state.version, Some(Version("41".into())));
    assert_eq!(state.attempts, 2);
}

#[test]
fn a_token_outside_registering_is_no_marker() {
    let status = VolumeMigrationStatus {
        phase: Some(Phase::Failed),
        registering_token: Some("stale/1".into()),
        ..Default::default()
    };
    assert_eq!(stored_state(&status, None).marker, None);
}

#[test]
fn unregistered_patch_clears_the_mapping() {
    let s = &registrar(StatusUpdate::Unregistered)["status"];
    assert_eq!(s["phase"], "Pending");
    assert!(s["volumeID"].is_null());
    let typed: VolumeMigrationStatus = serde_json::from_value(s.clone()).unwrap();
    assert_eq!(
        stored_state(&typed, None),
        StoredState {
            phase: Some(Phase::Pending),
            ..StoredState::default()
        }
    );
}

#[test]
fn pv_list_sets_pending_only_when_asked() {
    let change = |pending| StatusChange::PersistentVolumes {
        pvs: vec!["pv-a".into(), "pv-b".into()],
        observed_generation: Some(3),
        pending,
    };
    let with = status_patch(&change(true), now());
    assert_eq!(with["status"]["phase"], "Pending");
    assert_eq!(with["status"]["persistentVolumes"][1], "pv-b");
    assert_eq!(with["status"]["observedGeneration"], 3);
    let without = status_patch(&change(false), now());
    assert!(without["status"].get("phase").is_none());
}

#[test]
fn invalid_path_fails_without_retry_and_drops_the_marker() {
    let s = &status_patch(
        &StatusChange::InvalidPath {
            message: "no [datastore]".into(),
        },
        now(),
    )["status"];
    assert_eq!(s["phase"], "Failed");
    assert_eq!(s["lastError"]["reason"], reason::INVALID_PATH);
    assert!(s["nextRetryTime"].is_null());
    assert_eq!(s["conditions"][0]["status"], "False");
}

#[test]
fn duplicates_patch_lists_only_the_ids() {
    let patch = status_patch(
        &StatusChange::Duplicates {
            ids: vec!["b".into(), "c".into()],
        },
        now(),
    );
    assert_eq!(patch, json!({"status": {"duplicateVolumeIDs": ["b", "c"]}}));
}

#[test]
fn an_object_tracking_another_path_is_a_collision() {
    let mine = VolumePath::parse("[ds] a/x.vmdk").unwrap();
    let mut vm = crate::k8s::migrations::new_migration(&mine);
    assert!(check_tracks(&vm, &mine).is_ok());
    vm.spec.volume_path = "[/DC0/datastore/ds]  a//x.vmdk".into();
    assert!(
        check_tracks(&vm, &mine).is_ok(),
        "another spelling of the same path"
    );
    vm.spec.volume_path = "[ds] a/y.vmdk".into();
    let err = check_tracks(&vm, &mine).unwrap_err();
    assert!(
        matches!(err.kind, StoreErrorKind::NameCollision { ref found } if found == "[ds] a/y.vmdk")
    );
}

/// One status write against a mock API server: answers the first request with `status`
/// and `reply`; returns what was written and what the writer made of the reply.
async fn write_once(
    status: u16,
    reply: Value,
) -> (http::Request<Vec<u8>>, Result<Option<String>, WriteError>) {
    use http::{Request, Response};
    use kube::client::Body;
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let writer = StatusWriter::new(kube::Client::new(service, "default"));
    let server = tokio::spawn(async move {
        let (request, send) = handle.next_request().await.expect("a request");
        let (parts, body) = request.into_parts();
        let body = body.collect_bytes().await.expect("a body").to_vec();
        send.send_response(
            Response::builder()
                .status(status)
                .body(Body::from(serde_json::to_vec(&reply).expect("reply")))
                .expect("response"),
        );
        Request::from_parts(parts, body)
    });
    let change = StatusChange::Registrar(StatusUpdate::Registering {
        attempts: 1,
        token: "volmig-0/1".into(),
    });
    let written = writer.write("vm-a", &change, Some("41")).await;
    (server.await.expect("server"), written)
}

#[tokio::test]
async fn a_status_write_is_a_conditional_merge_patch_and_returns_the_new_version() {
    let reply = json!({
        "apiVersion": "volmig.io/v1alpha1", "kind": "VolumeMigration",
        "metadata": {"name": "vm-a", "resourceVersion": "42", "managedFields": [
            {"manager": "volmig", "operation": "Update", "subresource": "status",
             "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {"f:phase": {}}}}]},
        "spec": {"volumePath": "[ds] a.vmdk"},
        "status": {"phase": "Registering", "registeringToken": "volmig-0/1"}
    });
    let (request, written) = write_once(200, reply).await;
    assert_eq!(written.expect("written"), Some("42".to_owned()));
    assert_eq!(request.method(), http::Method::PATCH);
    assert_eq!(
        request.uri().path(),
        "/apis/volmig.io/v1alpha1/volumemigrations/vm-a/status"
    );
    assert!(
        request
            .uri()
            .query()
            .is_some_and(|q| q.contains(&format!("fieldManager={FIELD_MANAGER}"))),
        "{}",
        request.uri()
    );
    assert_eq!(
        request.headers()[http::header::CONTENT_TYPE],
        "application/merge-patch+json"
    );
    let patch: Value = serde_json::from_slice(request.body()).expect("a JSON patch");
    assert_eq!(patch["metadata"]["resourceVersion"], "41");
    assert_eq!(patch["status"]["phase"], "Registering");
    assert_eq!(patch["status"]["registeringToken"], "volmig-0/1");
}

#[tokio::test]
async fn a_lost_condition_is_a_conflict_and_a_reply_without_a_version_is_none() {
    let conflict = json!({
        "kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Conflict",
        "message": "the object has been modified", "code": 409
    });
    let (_, written) = write_once(409, conflict).await;
    let error = written.expect_err("a conflict");
    assert_eq!(error.kind, WriteErrorKind::Conflict, "{error:?}");
    assert_eq!(error.name, "vm-a");

    let (_, written) = write_once(200, json!({"kind": "VolumeMigration"})).await;
    assert_eq!(written.expect("written"), None);
}
