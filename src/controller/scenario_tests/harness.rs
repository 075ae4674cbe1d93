//! The scripted API and fixtures of the scenario tests.

#![allow(
    dead_code,
    unused_imports,
    reason = "each scenario uses a part of the harness"
)]

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

use crate::api::{FINALIZER, VolumeMigration};
use crate::backend::memory::InMemoryBackend;
use crate::backend::{CreateVolumeRequest, VolumeBackend, VolumeId, op};
use crate::controller::full_sync::{FullSync, PassSummary};
use crate::controller::pv_index::PvVolume;
use crate::controller::reconcile::{error_policy, reconcile};
use crate::controller::{Context, Error, PvDeletePolicy, PvIndex};
use crate::k8s::events::Events;
use crate::k8s::status::{KubeStatusStore, StatusWriter};
use crate::metrics::Metrics;
use crate::registrar::{LeaderGate, Registrar, RegistrarConfig};
use crate::volume_path::VolumePath;

pub(super) const MIGRATIONS: &str = "/apis/volmig.io/v1alpha1/volumemigrations";
pub(super) const EVENTS: &str = "/apis/events.k8s.io/v1/namespaces/default/events";
/// kube-core builds `<path>?` and appends pairs with `&`: the leading `&` is what goes out.
pub(super) const FIELD_MANAGER_QUERY: &str = "&fieldManager=volmig";
/// Hang guard only (a missing or extra call would otherwise block forever).
pub(super) const HANG_GUARD: Duration = Duration::from_secs(20);
/// `Context::error_requeue` of the fixture.
pub(super) const ERROR_REQUEUE: Duration = Duration::from_secs(7);
pub(super) const INSTANCE: &str = "test";

pub(super) const PATH_A: &str = "[ds] kubevols/a.vmdk";
pub(super) const PATH_B: &str = "[ds] kubevols/b.vmdk";

pub(super) fn path(raw: &str) -> VolumePath {
    VolumePath::parse(raw).unwrap()
}

pub(super) fn object_url(name: &str) -> String {
    format!("{MIGRATIONS}/{name}")
}

pub(super) fn status_url(name: &str) -> String {
    format!("{MIGRATIONS}/{name}/status")
}

// ---------------------------------------------------------------------------------------
// The scripted API
// ---------------------------------------------------------------------------------------

/// One request the controller made, waiting for its answer.
pub(super) struct Call {
    pub(super) method: Method,
    pub(super) path: String,
    pub(super) query: String,
    pub(super) body: Value,
    pub(super) respond: SendResponse<Response<Body>>,
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
    pub(super) fn expect(&self, method: Method, path: &str, query: &str) {
        assert_eq!(
            (&self.method, self.path.as_str(), self.query.as_str()),
            (&method, path, query),
            "unexpected call: {self:?}"
        );
    }

    pub(super) fn reply(self, code: StatusCode, body: &Value) {
        let response = Response::builder()
            .status(code)
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(Body::from(serde_json::to_vec(body).unwrap()))
            .unwrap();
        self.respond.send_response(response);
    }

    /// Answers with a `Status` failure, as the API server does.
    pub(super) fn fail(self, code: StatusCode, reason: &str, message: &str) {
        let body = json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {},
            "status": "Failure", "message": message, "reason": reason,
            "code": code.as_u16(),
        });
        self.reply(code, &body);
    }
}

/// The API side of the mock: hands out the controller's requests in order.
pub(super) struct ScriptedApi {
    pub(super) handle: Handle<Request<Body>, Response<Body>>,
}

impl ScriptedApi {
    /// The next request; fails the test when none comes.
    pub(super) async fn next(&mut self) -> Call {
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
    pub(super) async fn outcome<T>(&mut self, task: JoinHandle<T>) -> T {
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
    pub(super) async fn closed(mut self) {
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
pub(super) struct Stored {
    pub(super) value: Value,
    pub(super) version: u64,
}

pub(super) fn merge(target: &mut Value, patch: &Value) {
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
    pub(super) fn new(vm: &VolumeMigration) -> Self {
        let value = serde_json::to_value(vm).unwrap();
        let version = value["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        Self { value, version }
    }

    pub(super) fn version(&self) -> String {
        self.version.to_string()
    }

    pub(super) fn object(&self) -> VolumeMigration {
        serde_json::from_value(self.value.clone()).unwrap()
    }

    /// Answers a GET.
    pub(super) fn get(&self, call: Call) {
        call.reply(StatusCode::OK, &self.value);
    }

    /// Answers a merge patch of the object (`status == false`) or of `/status`.
    pub(super) fn patch(&mut self, call: Call, status: bool) {
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
pub(super) fn without_times(value: &Value) -> Value {
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
pub(super) fn conditions(status: &str, reason: &str, message: &str) -> Value {
    json!([
        {"type": "Registered", "status": status, "reason": reason, "message": message},
        {"type": "Ready", "status": status, "reason": reason, "message": message},
    ])
}

/// Asserts an Event POST and answers it; returns its note.
pub(super) fn expect_event(
    call: Call,
    kind: &str,
    name: &str,
    type_: &str,
    reason: &str,
) -> String {
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

pub(super) struct Fixture {
    pub(super) ctx: Arc<Context>,
    pub(super) client: kube::Client,
    pub(super) backend: Arc<InMemoryBackend>,
    pub(super) metrics: Metrics,
    pub(super) api: ScriptedApi,
}

/// A context over the scripted API, with `pvs` (name, path) in a synced PV index.
pub(super) fn fixture(pvs: &[(&str, &str)]) -> Fixture {
    fixture_with_driver(pvs, None, LeaderGate::always())
}

/// A fixture whose replica leads while `leader` is open.
pub(super) fn fixture_led_by(pvs: &[(&str, &str)], leader: LeaderGate) -> Fixture {
    fixture_with_driver(pvs, None, leader)
}

/// A fixture whose context publishes into the CSI driver's cache, indexed by `driver`.
pub(super) fn fixture_publishing(
    pvs: &[(&str, &str)],
    driver: Arc<crate::k8s::driver_cache::DriverIndex>,
) -> Fixture {
    fixture_with_driver(pvs, Some(driver), LeaderGate::always())
}

fn fixture_with_driver(
    pvs: &[(&str, &str)],
    driver: Option<Arc<crate::k8s::driver_cache::DriverIndex>>,
    leader: LeaderGate,
) -> Fixture {
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = kube::Client::new(service, "default");
    let backend = Arc::new(InMemoryBackend::new());
    let index = Arc::new(PvIndex::default());
    for (name, raw) in pvs {
        index.upsert(name, Some(PvVolume::Valid(path(raw))));
    }
    index.set_synced();
    // As the daemon wires it: registrar writes carry the PV list (generation 1: every
    // fixture object is at its first generation).
    let pvs_of = Arc::clone(&index);
    let store = Arc::new(KubeStatusStore::new(client.clone()).with_extras(Arc::new(
        move |p: &VolumePath| crate::k8s::status::StatusExtras {
            pvs: pvs_of.pvs_for(p),
            observed_generation: Some(1),
        },
    )));
    let registrar = Registrar::new(
        Arc::clone(&backend) as Arc<dyn VolumeBackend>,
        store,
        RegistrarConfig::new("cluster-1").with_instance(INSTANCE),
    );
    let metrics = Metrics::new();
    let ctx = Context {
        migrations: kube::Api::all(client.clone()),
        status: StatusWriter::new(client.clone()),
        registrar: Arc::new(registrar),
        index,
        leader,
        metrics: metrics.clone(),
        events: Events::new(client.clone(), INSTANCE),
        on_pv_delete: PvDeletePolicy::Unregister,
        error_requeue: ERROR_REQUEUE,
        driver: driver.map(|index| {
            Arc::new(crate::controller::publish::DriverCache {
                api: kube::Api::all(client.clone()),
                index,
                publish: true,
            })
        }),
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
    pub(super) async fn finish(self) -> (Arc<InMemoryBackend>, Metrics) {
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
    pub(super) fn reconcile(
        &self,
        vm: &VolumeMigration,
    ) -> JoinHandle<crate::controller::Result<Action>> {
        tokio::spawn(reconcile(Arc::new(vm.clone()), Arc::clone(&self.ctx)))
    }
}

/// A VolumeMigration at `resourceVersion` 1 (generation 1).
pub(super) fn migration(
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
pub(super) async fn registered_volume(backend: &InMemoryBackend, raw: &str) -> VolumeId {
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

pub(super) fn backend_calls(backend: &InMemoryBackend) -> Vec<(&'static str, u64)> {
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

pub(super) fn no_backend_calls() -> Vec<(&'static str, u64)> {
    backend_calls(&InMemoryBackend::new())
}

pub(super) fn reconcile_failures(metrics: &Metrics, reason: &str) -> String {
    let wanted = format!("volmig_reconcile_failures_total{{reason=\"{reason}\"}} ");
    metrics
        .encode()
        .lines()
        .find_map(|line| line.strip_prefix(&wanted).map(str::to_owned))
        .unwrap_or_else(|| panic!("no series {wanted}"))
}

/// Starts one full-sync pass; its calls are answered through the fixture's API.
pub(super) fn spawn_pass(
    sync: &Arc<FullSync>,
) -> JoinHandle<Result<PassSummary, crate::controller::full_sync::Error>> {
    let sync = Arc::clone(sync);
    tokio::spawn(async move { sync.run_pass().await })
}

/// An in-tree vSphere PV `name` on `raw_path`, as the API server lists it.
pub(super) fn vsphere_pv(name: &str, raw_path: &str) -> Value {
    json!({
        "metadata": {"name": name, "resourceVersion": "9"},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "vsphereVolume": {"volumePath": raw_path, "fsType": "ext4"},
        },
    })
}

/// A one-page PV list holding `items`.
pub(super) fn pv_list(items: Vec<Value>) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "PersistentVolumeList",
        "metadata": {"resourceVersion": "10"},
        "items": items,
    })
}

// ---------------------------------------------------------------------------------------
// Scenarios
// ---------------------------------------------------------------------------------------

/// A full sync over a cache holding PATH_A as Registered (pv-a, protected) with a CNS
/// volume in the in-memory backend: the starting point of the full-sync scenarios.
pub(super) async fn registered_full_sync(f: &Fixture) -> Arc<FullSync> {
    let name = path(PATH_A).object_name();
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
    Arc::new(FullSync::new(
        Arc::clone(&f.ctx),
        kube::Api::<PersistentVolume>::all(f.client.clone()),
        cache,
        false,
        4,
        CancellationToken::new(),
    ))
}
