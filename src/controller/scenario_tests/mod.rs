//! Scenario tests at the reconcile seam: the real [`reconcile`], [`error_policy`] and
//! [`FullSync::run_pass`] against a scripted Kubernetes API (a tower-test mock service
//! behind a real `kube::Client`). Each scenario answers the calls one by one, in order,
//! and asserts method, path, query and body of each; a call the script does not expect
//! fails the test, and so does any call left once the controller is done.
//!
//! The registrar is real too, over the in-memory backend and the real
//! [`KubeStatusStore`], so its reads and writes appear in the sequence.

mod harness;
mod publishing;
mod requeue_table;
mod scripted_api;
mod terms;

use crate::backend::{VolumeBackend, op};
use crate::controller::Action;
use crate::controller::full_sync::PassSummary;
use crate::controller::reconcile::error_policy;
use crate::controller::{Error, RecordError};
use crate::volume_migration::FINALIZER;
use crate::volume_path::VolumePath;
use http::{Method, StatusCode};
use serde_json::json;
use std::sync::Arc;

#[allow(
    clippy::wildcard_imports,
    reason = "the harness is this module's vocabulary"
)]
use harness::*;

#[tokio::test]
async fn scenario_new_migration_is_registered_with_write_ahead_and_one_event() {
    let mut f = fixture(&[("pv-a", PATH_A)]);
    let a = path(PATH_A);
    f.backend.add_disk(&a);
    let disk_uuid = f.backend.disk_uuid(&a).await.unwrap();
    let name = a.object_name();
    let vm = migration(&name, PATH_A, true, None);
    let mut stored = Stored::new(&vm);
    let task = f.reconcile(&vm);

    // 1. No separate PV-list write: the write-ahead carries it (4 writes per new PV,
    //    docs/design.md §4.4). 2. The registrar reads the stored state under the path's lock.
    let call = f.api.next().await;
    call.expect(Method::GET, &object_url(&name), "");
    stored.get(call);

    // 3. The write-ahead with the PV list, conditional on the version just read.
    let call = f.api.next().await;
    call.expect(Method::PATCH, &status_url(&name), FIELD_MANAGER_QUERY);
    let token = call.body["status"]["registeringToken"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(token.starts_with("test/"), "token {token:?}");
    assert_eq!(
        without_times(&call.body),
        json!({
            "metadata": {"resourceVersion": "1"},
            "status": {
                "phase": "Registering",
                "attempts": 1,
                "nextRetryTime": null,
                "registeringToken": token,
                "conditions": conditions("False", "Registering", "a CNS create may be in flight"),
                "persistentVolumes": ["pv-a"],
                "persistentVolumeCount": 1,
                "observedGeneration": 1,
            },
        })
    );
    stored.patch(call, true);

    // 4. The ID the backend created, conditional on the write-ahead's version.
    let call = f.api.next().await;
    call.expect(Method::PATCH, &status_url(&name), FIELD_MANAGER_QUERY);
    let volumes = f.backend.volumes_for(&a);
    assert_eq!(volumes.len(), 1);
    let id = volumes[0].id.0.clone();
    assert_eq!(
        without_times(&call.body),
        json!({
            "metadata": {"resourceVersion": "2"},
            "status": {
                "phase": "Registered",
                "volumeID": id,
                "diskUUID": disk_uuid,
                "attempts": 1,
                "lastError": null,
                "nextRetryTime": null,
                "registeringToken": null,
                "protectedFromVMDelete": true,
                "conditions": conditions("True", "Created", &format!("CNS volume {id}")),
                "persistentVolumes": ["pv-a"],
                "persistentVolumeCount": 1,
                "observedGeneration": 1,
            },
        })
    );
    assert!(call.body["status"]["registeredTime"].is_string());
    stored.patch(call, true);

    // 5. One Event, on the PV (the status tells the VolumeMigration's readers).
    let note = format!("{a} is CNS volume {id}");
    let call = f.api.next().await;
    assert_eq!(
        expect_event(call, "PersistentVolume", "pv-a", "Normal", "Registered"),
        note
    );

    let result = f.api.outcome(task).await;
    assert_eq!(result.unwrap(), Action::await_change());
    let published = stored.object().status.unwrap();
    assert_eq!(published.volume_id.as_deref(), Some(id.as_str()));
    assert_eq!(published.persistent_volumes, Some(vec!["pv-a".to_owned()]));
    let (backend, _) = f.finish().await;
    assert_eq!(backend.calls(op::CREATE), 1);
    assert_eq!(backend.calls(op::PROTECT), 1);
    assert_eq!(backend.volumes().len(), 1);
}

#[tokio::test]
async fn scenario_registered_object_in_sync_makes_no_call() {
    let mut f = fixture(&[("pv-a", PATH_A)]);
    let a = path(PATH_A);
    let name = a.object_name();
    let vm = migration(
        &name,
        PATH_A,
        true,
        Some(json!({
            "phase": "Registered",
            "volumeID": "vol-1",
            "persistentVolumes": ["pv-a"],
            "attempts": 1,
            "protectedFromVMDelete": true,
        })),
    );
    let task = f.reconcile(&vm);
    let result = f.api.outcome(task).await;
    assert_eq!(result.unwrap(), Action::await_change());
    let (backend, _) = f.finish().await;
    assert_eq!(backend_calls(&backend), no_backend_calls());
}

#[tokio::test]
async fn scenario_invalid_path_is_recorded_once() {
    let mut f = fixture(&[]);
    let raw = "kubevols/no-datastore.vmdk";
    let message = VolumePath::parse(raw).unwrap_err().to_string();
    let vm = migration("bad-path", raw, true, None);
    let mut stored = Stored::new(&vm);
    let task = f.reconcile(&vm);

    let call = f.api.next().await;
    call.expect(Method::PATCH, &status_url("bad-path"), FIELD_MANAGER_QUERY);
    assert_eq!(
        without_times(&call.body),
        json!({
            "metadata": {"resourceVersion": "1"},
            "status": {
                "phase": "Failed",
                "lastError": {"reason": "InvalidPath", "message": message},
                "nextRetryTime": null,
                "registeringToken": null,
                "conditions": conditions("False", "InvalidPath", &message),
            },
        })
    );
    stored.patch(call, true);
    let call = f.api.next().await;
    let note = expect_event(
        call,
        "VolumeMigration",
        "bad-path",
        "Warning",
        "RegistrationFailed",
    );
    assert_eq!(note, format!("InvalidPath: {message}"));
    let result = f.api.outcome(task).await;
    assert_eq!(result.unwrap(), Action::await_change());

    // The object as the watch delivers it next: recorded, so nothing more to do.
    let task = f.reconcile(&stored.object());
    let result = f.api.outcome(task).await;
    assert_eq!(result.unwrap(), Action::await_change());
    let (backend, _) = f.finish().await;
    assert_eq!(backend_calls(&backend), no_backend_calls());
}

#[tokio::test]
async fn scenario_status_conflict_is_a_transient_write_status_failure() {
    let mut f = fixture(&[("pv-a", PATH_A)]);
    let name = path(PATH_A).object_name();
    // Registered, with a PV list that is out of date: the reconciler writes the list.
    let status =
        json!({"phase": "Registered", "volumeID": "vol-a", "persistentVolumes": ["pv-old"]});
    let vm = migration(&name, PATH_A, true, Some(status));
    // The object changed since the reconciler's cache saw it.
    let mut stored = Stored::new(&vm);
    stored.version = 2;
    stored.value["metadata"]["resourceVersion"] = json!("2");
    let task = f.reconcile(&vm);

    let call = f.api.next().await;
    call.expect(Method::PATCH, &status_url(&name), FIELD_MANAGER_QUERY);
    assert_eq!(call.body["metadata"], json!({"resourceVersion": "1"}));
    stored.patch(call, true);

    let error = f.api.outcome(task).await.unwrap_err();
    assert_eq!(error.metric_label(), "write_status");
    assert!(!error.is_permanent(), "{error:?}");
    assert!(
        matches!(error, Error::Record(RecordError::PvList(_))),
        "{error:?}"
    );
    let action = error_policy(Arc::new(vm), &error, Arc::clone(&f.ctx));
    assert_eq!(action, Action::requeue(ERROR_REQUEUE));
    assert_ne!(action, Action::await_change());
    let (backend, metrics) = f.finish().await;
    assert_eq!(reconcile_failures(&metrics, "write_status"), "1");
    assert_eq!(reconcile_failures(&metrics, "add_finalizer"), "0");
    assert_eq!(backend_calls(&backend), no_backend_calls());
}

#[tokio::test]
async fn scenario_forbidden_finalizer_patch_waits_for_a_change() {
    let mut f = fixture(&[("pv-a", PATH_A)]);
    let name = path(PATH_A).object_name();
    // Created by hand, without volmig's finalizer.
    let vm = migration(&name, PATH_A, false, None);
    let task = f.reconcile(&vm);

    let call = f.api.next().await;
    call.expect(Method::PATCH, &object_url(&name), FIELD_MANAGER_QUERY);
    assert_eq!(
        call.body,
        json!({"metadata": {"finalizers": [FINALIZER], "resourceVersion": "1"}})
    );
    call.fail(
        StatusCode::FORBIDDEN,
        "Forbidden",
        "volumemigrations.volmig.io is forbidden: cannot patch resource",
    );

    let error = f.api.outcome(task).await.unwrap_err();
    assert_eq!(error.metric_label(), "add_finalizer");
    assert!(error.is_permanent(), "{error:?}");
    let action = error_policy(Arc::new(vm), &error, Arc::clone(&f.ctx));
    assert_eq!(action, Action::await_change());
    let (backend, metrics) = f.finish().await;
    assert_eq!(reconcile_failures(&metrics, "add_finalizer"), "1");
    assert_eq!(backend_calls(&backend), no_backend_calls());
}

#[tokio::test]
async fn scenario_deleting_a_registered_object_without_pvs_unregisters_and_releases_it() {
    let mut f = fixture(&[]);
    let a = path(PATH_A);
    let name = a.object_name();
    let id = registered_volume(&f.backend, PATH_A).await;
    let mut vm = migration(
        &name,
        PATH_A,
        true,
        Some(json!({
            "phase": "Registered",
            "volumeID": id.0,
            "persistentVolumes": ["pv-a"],
            "attempts": 1,
            "protectedFromVMDelete": true,
        })),
    );
    vm.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        jiff::Timestamp::now(),
    ));
    let mut stored = Stored::new(&vm);
    let task = f.reconcile(&vm);

    // The registrar reads the stored state.
    let call = f.api.next().await;
    call.expect(Method::GET, &object_url(&name), "");
    stored.get(call);
    // Unregistering, then (after the CNS delete) Pending without the ID, each conditional
    // on the version before it.
    let call = f.api.next().await;
    call.expect(Method::PATCH, &status_url(&name), FIELD_MANAGER_QUERY);
    assert_eq!(
        call.body,
        json!({"metadata": {"resourceVersion": "1"}, "status": {"phase": "Unregistering"}})
    );
    assert_eq!(f.backend.calls(op::DELETE), 0, "Unregistering comes first");
    stored.patch(call, true);
    let call = f.api.next().await;
    call.expect(Method::PATCH, &status_url(&name), FIELD_MANAGER_QUERY);
    assert_eq!(f.backend.calls(op::DELETE), 1);
    assert_eq!(
        without_times(&call.body),
        json!({
            "metadata": {"resourceVersion": "2"},
            "status": {
                "phase": "Pending",
                "volumeID": null,
                "diskUUID": null,
                "registeredTime": null,
                "registeringToken": null,
                "protectedFromVMDelete": null,
                "conditions": conditions("False", "Unregistered", "CNS registration removed"),
            },
        })
    );
    stored.patch(call, true);
    let call = f.api.next().await;
    let note = expect_event(call, "VolumeMigration", &name, "Normal", "Unregistered");
    assert_eq!(
        note,
        format!("CNS registration of {a} removed; the vmdk is kept")
    );
    // The finalizer goes, conditional on a version; the API server holds version 3 now
    // (each status write made a new one), so the object is read again first.
    let call = f.api.next().await;
    call.expect(Method::GET, &object_url(&name), "");
    stored.get(call);
    let call = f.api.next().await;
    call.expect(Method::PATCH, &object_url(&name), FIELD_MANAGER_QUERY);
    assert_eq!(call.body["metadata"]["finalizers"], json!([]));
    let precondition = call.body["metadata"]["resourceVersion"].clone();
    let current = stored.version();
    stored.patch(call, false);

    // No recreate: no PV uses the path.
    let result = f.api.outcome(task).await;
    let (backend, _) = f.finish().await;
    assert_eq!(backend.calls(op::DELETE), 1);
    assert!(
        backend.volumes().is_empty(),
        "the CNS volume is unregistered"
    );
    assert_eq!(
        precondition,
        json!(current),
        "the finalizer removal must be conditional on the version after the registrar's \
         status writes; the version read before them is stale and the API server answers \
         409 (reconcile returned {result:?})"
    );
    assert_eq!(result.unwrap(), Action::await_change());
    assert_eq!(stored.object().metadata.finalizers, Some(vec![]));
}

#[tokio::test]
async fn scenario_name_collision_is_reported_without_registering() {
    let mut f = fixture(&[("pv-b", PATH_B)]);
    let b = path(PATH_B);
    // Named after path A, tracking path B.
    let name = path(PATH_A).object_name();
    let vm = migration(&name, PATH_B, true, None);
    let mut stored = Stored::new(&vm);
    let task = f.reconcile(&vm);

    let message = format!(
        "this object tracks {b}, whose VolumeMigration is {}; volmig neither registers nor \
         publishes anything through {name}",
        b.object_name()
    );
    let call = f.api.next().await;
    call.expect(Method::PATCH, &status_url(&name), FIELD_MANAGER_QUERY);
    assert_eq!(
        without_times(&call.body),
        json!({
            "metadata": {"resourceVersion": "1"},
            "status": {
                "phase": "Failed",
                "attempts": 0,
                "lastError": {"reason": "NameCollision", "message": message},
                "nextRetryTime": null,
                "registeringToken": null,
                "conditions": conditions("False", "NameCollision", &message),
            },
        })
    );
    stored.patch(call, true);
    let call = f.api.next().await;
    let note = expect_event(call, "VolumeMigration", &name, "Warning", "NameCollision");
    assert_eq!(note, message);
    let result = f.api.outcome(task).await;
    assert_eq!(result.unwrap(), Action::await_change());

    // Recorded: the next reconciliation does nothing.
    let task = f.reconcile(&stored.object());
    let result = f.api.outcome(task).await;
    assert_eq!(result.unwrap(), Action::await_change());
    let (backend, metrics) = f.finish().await;
    assert_eq!(backend_calls(&backend), no_backend_calls());
    assert!(
        metrics
            .encode()
            .lines()
            .any(|l| l == "volmig_name_collisions_total 1"),
        "{}",
        metrics.encode()
    );
}

#[tokio::test]
async fn scenario_steady_full_sync_pass_lists_once_and_writes_nothing() {
    let mut f = fixture(&[("pv-a", PATH_A)]);
    let sync = registered_full_sync(&f).await;
    let task = spawn_pass(&sync);

    let call = f.api.next().await;
    call.expect(Method::GET, "/api/v1/persistentvolumes", "&limit=500");
    call.reply(
        StatusCode::OK,
        &pv_list(vec![
            vsphere_pv("pv-a", PATH_A),
            json!({
                "metadata": {"name": "nfs", "resourceVersion": "8"},
                "spec": {"nfs": {"server": "nfs.example", "path": "/x"}},
            }),
        ]),
    );

    let summary = f.api.outcome(task).await.unwrap();
    assert_eq!(
        summary,
        PassSummary {
            pvs: 1,
            migrations: 1,
            volumes: 1,
            ..PassSummary::default()
        }
    );
    drop(sync);
    let (backend, _) = f.finish().await;
    let mut expected = no_backend_calls();
    for (operation, calls) in &mut expected {
        if *operation == op::LIST {
            *calls = 1;
        }
        if *operation == op::CREATE {
            *calls = 1; // registered_volume
        }
    }
    assert_eq!(backend_calls(&backend), expected);
}
