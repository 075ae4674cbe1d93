//! The fixtures of the scenario tests (the scripted API is in `scripted_api`).

#![allow(
    dead_code,
    unused_imports,
    reason = "each scenario uses a part of the harness"
)]

use crate::controller::{ClusterWrites, Policy};
use std::sync::Arc;
use std::time::Duration;

use crate::controller::Action;
use http::{Method, Request, Response, StatusCode};
use k8s_openapi::api::core::v1::PersistentVolume;
use kube::client::Body;
use kube::runtime::watcher;
use serde_json::{Value, json};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tower_test::mock::{Handle, SendResponse};

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
use crate::volume_migration::{FINALIZER, VolumeMigration};
use crate::volume_path::VolumePath;

pub(super) use super::scripted_api::*;

pub(super) const MIGRATIONS: &str = "/apis/volmig.io/v1alpha1/volumemigrations";
/// The CSI driver's cache objects (docs/design.md §8.1).
pub(super) const DRIVER_OBJECTS: &str = "/apis/cns.vmware.com/v1alpha1/cnsvspherevolumemigrations";
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
        cluster: ClusterWrites {
            migrations: kube::Api::all(client.clone()),
            status: StatusWriter::new(client.clone()),
            events: Events::new(client.clone(), INSTANCE),
            driver: driver.map(|index| {
                Arc::new(crate::controller::publish::DriverCache {
                    api: kube::Api::all(client.clone()),
                    index,
                    publish: true,
                })
            }),
        },
        registrar: Arc::new(registrar),
        index,
        leader,
        metrics: metrics.clone(),
        policy: Policy {
            on_pv_delete: PvDeletePolicy::Unregister,
            error_requeue: ERROR_REQUEUE,
        },
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
            fence: crate::backend::SendFence::none(),
        })
        .await
        .unwrap()
}

/// [`registered_volume`] under the ID `id` (the scenario's status names it): CNS confirms
/// it before it is first published (docs/design.md §8.1).
pub(super) async fn live_volume(backend: &InMemoryBackend, raw: &str, id: &str) {
    let made = registered_volume(backend, raw).await;
    backend.rename_volume(&made, &VolumeId::from(id));
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
    let cache = Arc::new(crate::controller::MigrationCache::default());
    cache.begin_list();
    cache.apply(&vm);
    cache.end_list();
    Arc::new(FullSync::new(
        Arc::clone(&f.ctx),
        kube::Api::<PersistentVolume>::all(f.client.clone()),
        cache,
        false,
        4,
        CancellationToken::new(),
    ))
}
