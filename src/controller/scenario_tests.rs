//! Scenario tests at the reconcile seam: the real [`reconcile`], [`error_policy`] and
//! [`FullSync::run_pass`] against a scripted Kubernetes API (a tower-test mock service
//! behind a real `kube::Client`). Each scenario answers the calls one by one, in order,
//! and asserts method, path, query and body of each; a call the script does not expect
//! fails the test, and so does any call left once the controller is done.
//!
//! The registrar is real too, over the in-memory backend and the real
//! [`KubeStatusStore`], so its reads and writes appear in the sequence.

use std::sync::Arc;
use std::time::Duration;

use http::{Method, Request, Response, StatusCode};
use k8s_openapi::api::core::v1::PersistentVolume;
use kube::client::Body;
use kube::runtime::controller::Action;
use kube::runtime::watcher;
use serde_json::{Value, json};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tower_test::mock::{Handle, SendResponse};

use super::full_sync::{FullSync, PassSummary};
use super::pv_index::PvVolume;
use super::reconcile::{error_policy, reconcile};
use super::{Context, Error, PvDeletePolicy, PvIndex};
use crate::api::{FINALIZER, VolumeMigration};
use crate::backend::memory::InMemoryBackend;
use crate::backend::{CreateVolumeRequest, VolumeBackend, VolumeId, op};
use crate::k8s::events::Events;
use crate::k8s::status::{KubeStatusStore, StatusWriter};
use crate::metrics::Metrics;
use crate::registrar::{LeaderGate, Registrar, RegistrarConfig};
use crate::volume_path::VolumePath;

const MIGRATIONS: &str = "/apis/volmig.io/v1alpha1/volumemigrations";
const EVENTS: &str = "/apis/events.k8s.io/v1/namespaces/default/events";
/// kube-core builds `<path>?` and appends pairs with `&`: the leading `&` is what goes out.
const FIELD_MANAGER_QUERY: &str = "&fieldManager=volmig";
/// Hang guard only (a missing or extra call would otherwise block forever).
const HANG_GUARD: Duration = Duration::from_secs(20);
/// `Context::error_requeue` of the fixture.
const ERROR_REQUEUE: Duration = Duration::from_secs(7);
const INSTANCE: &str = "test";

const PATH_A: &str = "[ds] kubevols/a.vmdk";
const PATH_B: &str = "[ds] kubevols/b.vmdk";

fn path(raw: &str) -> VolumePath {
    VolumePath::parse(raw).unwrap()
}

fn object_url(name: &str) -> String {
    format!("{MIGRATIONS}/{name}")
}

fn status_url(name: &str) -> String {
    format!("{MIGRATIONS}/{name}/status")
}

// ---------------------------------------------------------------------------------------
// The scripted API
// ---------------------------------------------------------------------------------------

/// One request the controller made, waiting for its answer.
struct Call {
    method: Method,
    path: String,
    query: String,
    body: Value,
    respond: SendResponse<Response<Body>>,
}

impl std::fmt::Debug for Call {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {}?{} {}",
            self.method, self.path, self.query, self.body
        )
    }
}

impl Call {
    /// Asserts what the call is.
    fn expect(&self, method: Method, path: &str, query: &str) {
        assert_eq!(
            (&self.method, self.path.as_str(), self.query.as_str()),
            (&method, path, query),
            "unexpected call: {self:?}"
        );
    }

    fn reply(self, code: StatusCode, body: &Value) {
        let response = Response::builder()
            .status(code)
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(Body::from(serde_json::to_vec(body).unwrap()))
            .unwrap();
        self.respond.send_response(response);
    }

    /// Answers with a `Status` failure, as the API server does.
    fn fail(self, code: StatusCode, reason: &str, message: &str) {
        let body = json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {},
            "status": "Failure", "message": message, "reason": reason,
            "code": code.as_u16(),
        });
        self.reply(code, &body);
    }
}

/// The API side of the mock: hands out the controller's requests in order.
struct ScriptedApi {
    handle: Handle<Request<Body>, Response<Body>>,
}

impl ScriptedApi {
    /// The next request; fails the test when none comes.
    async fn next(&mut self) -> Call {
        let (request, respond) = tokio::time::timeout(HANG_GUARD, self.handle.next_request())
            .await
            .expect("the controller made no further call")
            .expect("the client is gone");
        let (parts, body) = request.into_parts();
        let bytes = body.collect_bytes().await.unwrap();
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).unwrap()
        };
        Call {
            method: parts.method,
            path: parts.uri.path().to_owned(),
            query: parts.uri.query().unwrap_or_default().to_owned(),
            body,
            respond,
        }
    }

    /// Waits for `task` to finish; any call it makes meanwhile is unexpected.
    async fn outcome<T>(&mut self, task: JoinHandle<T>) -> T {
        let next = async {
            let call = self.next().await;
            panic!("unexpected call: {call:?}");
        };
        tokio::select! {
            result = task => result.unwrap(),
            () = next => unreachable!(),
        }
    }

    /// Once every client is dropped: asserts that no call is left.
    async fn closed(mut self) {
        match tokio::time::timeout(HANG_GUARD, self.handle.next_request()).await {
            Ok(None) => {}
            Ok(Some((request, _))) => panic!(
                "unexpected call after the controller was done: {} {}",
                request.method(),
                request.uri()
            ),
            Err(_) => panic!("a client is still alive (the Context was not dropped)"),
        }
    }
}

/// One VolumeMigration as the API server holds it: merge patches apply like on the real
/// server (`metadata.resourceVersion` in a patch is a precondition, answered 409 when
/// stale; `/status` changes only the status, the main resource everything but the
/// status), and every write bumps the `resourceVersion`.
struct Stored {
    value: Value,
    version: u64,
}

fn merge(target: &mut Value, patch: &Value) {
    let Value::Object(fields) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = json!({});
    }
    let Value::Object(target) = target else {
        unreachable!()
    };
    for (key, value) in fields {
        if value.is_null() {
            target.remove(key);
        } else {
            merge(target.entry(key.clone()).or_insert(Value::Null), value);
        }
    }
}

impl Stored {
    fn new(vm: &VolumeMigration) -> Self {
        let value = serde_json::to_value(vm).unwrap();
        let version = value["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        Self { value, version }
    }

    fn version(&self) -> String {
        self.version.to_string()
    }

    fn object(&self) -> VolumeMigration {
        serde_json::from_value(self.value.clone()).unwrap()
    }

    /// Answers a GET.
    fn get(&self, call: Call) {
        call.reply(StatusCode::OK, &self.value);
    }

    /// Answers a merge patch of the object (`status == false`) or of `/status`.
    fn patch(&mut self, call: Call, status: bool) {
        let precondition = call.body["metadata"]["resourceVersion"].as_str();
        if precondition.is_some_and(|v| v != self.version()) {
            call.fail(
                StatusCode::CONFLICT,
                "Conflict",
                "the object has been modified; please apply your changes to the latest version",
            );
            return;
        }
        if status {
            merge(&mut self.value["status"], &call.body["status"]);
        } else {
            let mut metadata = call.body["metadata"].clone();
            if let Some(m) = metadata.as_object_mut() {
                m.remove("resourceVersion");
            }
            merge(&mut self.value["metadata"], &metadata);
        }
        self.version += 1;
        self.value["metadata"]["resourceVersion"] = json!(self.version());
        call.reply(StatusCode::OK, &self.value);
    }
}

/// The body with every timestamp (`registeredTime`, `lastTransitionTime`, `lastError.time`)
/// removed, after checking that each one is an RFC 3339 time (nulls stay).
fn without_times(value: &Value) -> Value {
    match value {
        Value::Object(fields) => Value::Object(
            fields
                .iter()
                .filter(|(key, value)| {
                    // A null clears the field: it stays in the comparison.
                    let is_time = matches!(
                        key.as_str(),
                        "registeredTime" | "lastTransitionTime" | "time"
                    ) && !value.is_null();
                    if is_time {
                        let text = value.as_str().unwrap_or_default();
                        assert!(
                            text.parse::<jiff::Timestamp>().is_ok(),
                            "{key} is not a time: {value}"
                        );
                    }
                    !is_time
                })
                .map(|(key, value)| (key.clone(), without_times(value)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(without_times).collect()),
        other => other.clone(),
    }
}

/// The `Registered` and `Ready` conditions of a status patch, timestamps removed.
fn conditions(status: &str, reason: &str, message: &str) -> Value {
    json!([
        {"type": "Registered", "status": status, "reason": reason, "message": message},
        {"type": "Ready", "status": status, "reason": reason, "message": message},
    ])
}

/// Asserts an Event POST and answers it; returns its note.
fn expect_event(call: Call, kind: &str, name: &str, type_: &str, reason: &str) -> String {
    call.expect(Method::POST, EVENTS, "");
    let event = &call.body;
    assert_eq!(event["regarding"]["kind"], kind, "{call:?}");
    assert_eq!(event["regarding"]["name"], name, "{call:?}");
    assert_eq!(event["type"], type_, "{call:?}");
    assert_eq!(event["reason"], reason, "{call:?}");
    assert_eq!(event["reportingController"], "volmig", "{call:?}");
    assert_eq!(event["reportingInstance"], INSTANCE, "{call:?}");
    let note = event["note"].as_str().unwrap_or_default().to_owned();
    let echo = call.body.clone();
    call.reply(StatusCode::CREATED, &echo);
    note
}

// ---------------------------------------------------------------------------------------
// Fixture
// ---------------------------------------------------------------------------------------

struct Fixture {
    ctx: Arc<Context>,
    client: kube::Client,
    backend: Arc<InMemoryBackend>,
    metrics: Metrics,
    api: ScriptedApi,
}

/// A context over the scripted API, with `pvs` (name, path) in a synced PV index.
fn fixture(pvs: &[(&str, &str)]) -> Fixture {
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = kube::Client::new(service, "default");
    let backend = Arc::new(InMemoryBackend::new());
    let store = Arc::new(KubeStatusStore::new(client.clone()));
    let registrar = Registrar::new(
        Arc::clone(&backend) as Arc<dyn VolumeBackend>,
        store,
        RegistrarConfig::new("cluster-1").with_instance(INSTANCE),
    );
    let index = PvIndex::default();
    for (name, raw) in pvs {
        index.upsert(name, Some(PvVolume::Valid(path(raw))));
    }
    index.set_synced();
    let metrics = Metrics::new();
    let ctx = Context {
        migrations: kube::Api::all(client.clone()),
        status: StatusWriter::new(client.clone()),
        registrar: Arc::new(registrar),
        index: Arc::new(index),
        leader: LeaderGate::always(),
        metrics: metrics.clone(),
        events: Events::new(client.clone(), INSTANCE),
        on_pv_delete: PvDeletePolicy::Unregister,
        error_requeue: ERROR_REQUEUE,
        driver: None,
    };
    Fixture {
        ctx: Arc::new(ctx),
        client,
        backend,
        metrics,
        api: ScriptedApi { handle },
    }
}

impl Fixture {
    /// Drops every client, then asserts that no call is left.
    async fn finish(self) -> (Arc<InMemoryBackend>, Metrics) {
        let Fixture {
            ctx,
            client,
            backend,
            metrics,
            api,
        } = self;
        assert_eq!(Arc::strong_count(&ctx), 1, "the Context is still shared");
        drop(ctx);
        drop(client);
        api.closed().await;
        (backend, metrics)
    }

    /// Runs `reconcile` in a task.
    fn reconcile(&self, vm: &VolumeMigration) -> JoinHandle<super::Result<Action>> {
        tokio::spawn(reconcile(Arc::new(vm.clone()), Arc::clone(&self.ctx)))
    }
}

/// A VolumeMigration at `resourceVersion` 1 (generation 1).
fn migration(
    name: &str,
    raw_path: &str,
    finalizer: bool,
    status: Option<Value>,
) -> VolumeMigration {
    let mut value = json!({
        "apiVersion": "volmig.io/v1alpha1",
        "kind": "VolumeMigration",
        "metadata": {
            "name": name,
            "uid": "0e2a4c8e-0000-4000-8000-000000000001",
            "resourceVersion": "1",
            "generation": 1,
        },
        "spec": {"volumePath": raw_path},
    });
    if finalizer {
        value["metadata"]["finalizers"] = json!([FINALIZER]);
    }
    if let Some(status) = status {
        value["status"] = status;
    }
    serde_json::from_value(value).unwrap()
}

/// Registers `raw` in the in-memory backend as volmig would have; returns the volume ID.
async fn registered_volume(backend: &InMemoryBackend, raw: &str) -> VolumeId {
    let p = path(raw);
    backend.add_disk(&p);
    backend
        .create_volume(&CreateVolumeRequest {
            path: p.clone(),
            name: p.cns_volume_name(),
            cluster_id: "cluster-1".into(),
            storage_policy_name: None,
        })
        .await
        .unwrap()
}

fn backend_calls(backend: &InMemoryBackend) -> Vec<(&'static str, u64)> {
    [
        op::DISK_UUID,
        op::FIND,
        op::CREATE,
        op::DELETE,
        op::LIST,
        op::PROTECT,
        op::IS_PROTECTED,
        op::REGISTER_DISK,
    ]
    .into_iter()
    .map(|o| (o, backend.calls(o)))
    .collect()
}

fn no_backend_calls() -> Vec<(&'static str, u64)> {
    backend_calls(&InMemoryBackend::new())
}

fn reconcile_failures(metrics: &Metrics, reason: &str) -> String {
    let wanted = format!("volmig_reconcile_failures_total{{reason=\"{reason}\"}} ");
    metrics
        .encode()
        .lines()
        .find_map(|line| line.strip_prefix(&wanted).map(str::to_owned))
        .unwrap_or_else(|| panic!("no series {wanted}"))
}

// ---------------------------------------------------------------------------------------
// Scenarios
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn scenario_new_migration_is_registered_with_write_ahead_and_events() {
    let mut f = fixture(&[("pv-a", PATH_A)]);
    let a = path(PATH_A);
    f.backend.add_disk(&a);
    let disk_uuid = f.backend.disk_uuid(&a).await.unwrap();
    let name = a.object_name();
    let vm = migration(&name, PATH_A, true, None);
    let mut stored = Stored::new(&vm);
    let task = f.reconcile(&vm);

    // 1. The PV list and Pending, conditional on the version the reconciler read.
    let call = f.api.next().await;
    call.expect(Method::PATCH, &status_url(&name), FIELD_MANAGER_QUERY);
    assert_eq!(
        call.body,
        json!({
            "metadata": {"resourceVersion": "1"},
            "status": {"persistentVolumes": ["pv-a"], "observedGeneration": 1, "phase": "Pending"},
        })
    );
    stored.patch(call, true);

    // 2. The registrar reads the stored state under the path's lock.
    let call = f.api.next().await;
    call.expect(Method::GET, &object_url(&name), "");
    stored.get(call);

    // 3. The write-ahead, conditional on the version just read.
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
            "metadata": {"resourceVersion": "2"},
            "status": {
                "phase": "Registering",
                "attempts": 1,
                "nextRetryTime": null,
                "registeringToken": token,
                "conditions": conditions("False", "Registering", "a CNS create may be in flight"),
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
            "metadata": {"resourceVersion": "3"},
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
            },
        })
    );
    assert!(call.body["status"]["registeredTime"].is_string());
    stored.patch(call, true);

    // 5. Events on the VolumeMigration and on its PV.
    let note = format!("{a} is CNS volume {id}");
    let call = f.api.next().await;
    assert_eq!(
        expect_event(call, "VolumeMigration", &name, "Normal", "Registered"),
        note
    );
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
    let vm = migration(&name, PATH_A, true, None);
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
    assert!(matches!(error, Error::WriteStatus(_)), "{error:?}");
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
    // Unregistering, then (after the CNS delete) Pending without the ID.
    let call = f.api.next().await;
    call.expect(Method::PATCH, &status_url(&name), FIELD_MANAGER_QUERY);
    assert_eq!(call.body, json!({"status": {"phase": "Unregistering"}}));
    assert_eq!(f.backend.calls(op::DELETE), 0, "Unregistering comes first");
    stored.patch(call, true);
    let call = f.api.next().await;
    call.expect(Method::PATCH, &status_url(&name), FIELD_MANAGER_QUERY);
    assert_eq!(f.backend.calls(op::DELETE), 1);
    assert_eq!(
        without_times(&call.body),
        json!({
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
    let a = path(PATH_A);
    let name = a.object_name();
    let id = registered_volume(&f.backend, PATH_A).await;
    let vm = migration(
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
    let (cache, mut writer) = kube::runtime::reflector::store::<VolumeMigration>();
    writer.apply_watcher_event(&watcher::Event::Init);
    writer.apply_watcher_event(&watcher::Event::InitApply(vm));
    writer.apply_watcher_event(&watcher::Event::InitDone);
    let sync = Arc::new(FullSync::new(
        Arc::clone(&f.ctx),
        kube::Api::<PersistentVolume>::all(f.client.clone()),
        cache,
        false,
        4,
        CancellationToken::new(),
    ));
    let task = tokio::spawn({
        let sync = Arc::clone(&sync);
        async move { sync.run_pass().await }
    });

    let call = f.api.next().await;
    call.expect(Method::GET, "/api/v1/persistentvolumes", "&limit=500");
    call.reply(
        StatusCode::OK,
        &json!({
            "apiVersion": "v1",
            "kind": "PersistentVolumeList",
            "metadata": {"resourceVersion": "10"},
            "items": [
                {
                    "metadata": {"name": "pv-a", "resourceVersion": "9"},
                    "spec": {
                        "capacity": {"storage": "1Gi"},
                        "accessModes": ["ReadWriteOnce"],
                        "vsphereVolume": {"volumePath": PATH_A, "fsType": "ext4"},
                    },
                },
                {
                    "metadata": {"name": "nfs", "resourceVersion": "8"},
                    "spec": {"nfs": {"server": "nfs.example", "path": "/x"}},
                },
            ],
        }),
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
