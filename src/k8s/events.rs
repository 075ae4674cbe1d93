//! Kubernetes Events on VolumeMigrations and PersistentVolumes. Publishing is best effort:
//! a failed Event is logged, never a reason to fail the work it reports.
//!
//! Both kinds are cluster-scoped, so every Event is written in one namespace, the events
//! namespace (`--events-namespace`, docs/operations.md "Events"). kube-runtime's Recorder
//! writes Events about cluster-scoped objects into `default` only, so volmig writes them
//! itself, the way the Recorder does: `events.k8s.io/v1`, a repeat within six minutes
//! becoming a series (a PATCH of the first) where folding is wanted.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event as K8sEvent, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, Patch, PatchParams, PostParams};
pub use kube::runtime::events::EventType;
use kube::{Resource, ResourceExt as _};
use tracing::warn;

use crate::volume_migration::VolumeMigration;

/// The namespaces the API server accepts an `events.k8s.io/v1` Event about a cluster-scoped
/// object in (its Event validation: `default`, or `kube-system`).
pub const EVENTS_NAMESPACES: [&str; 2] = ["default", "kube-system"];

/// How long a published Event may still be folded into: kube-runtime's Recorder's window.
const FOLD_WINDOW: SignedDuration = SignedDuration::from_mins(6);

/// Event reasons volmig publishes.
pub mod reason {
    /// A vmdk got (or adopted) its CNS volume.
    pub const REGISTERED: &str = "Registered";
    /// A registration attempt failed; the note says why.
    pub const REGISTRATION_FAILED: &str = "RegistrationFailed";
    /// A PV's in-tree path does not parse.
    pub const INVALID_VOLUME_PATH: &str = "InvalidVolumePath";
    /// The CNS registration was removed (disk kept).
    pub const UNREGISTERED: &str = "Unregistered";
    /// Who registers in-tree vmdks changed: volmig or the CSI driver's syncer.
    pub const REGISTRAR_MODE_CHANGED: &str = "RegistrarModeChanged";
    /// A Registered volume was missing in CNS and was registered again.
    pub const RE_REGISTERED: &str = "ReRegistered";
    /// A Registered volume is missing in CNS while the CSI driver registers: its ID was
    /// withdrawn so the driver registers the path again.
    pub const VOLUME_GONE: &str = "VolumeGone";
    /// The CSI driver's cache maps a path to another disk's volume: not adopted.
    pub const DRIVER_ID_OF_ANOTHER_DISK: &str = "DriverIdOfAnotherDisk";
    /// `status.volumeID` did not name this path's CNS volume (edited by hand, or gone) and
    /// was restored from CNS; the note names the old and the new ID.
    pub const VOLUME_ID_REPAIRED: &str = "VolumeIdRepaired";
    /// Two or more CNS volumes exist for one disk.
    pub const DUPLICATE_VOLUMES: &str = "DuplicateVolumes";
    /// The object named after a path tracks another path (docs/design.md §2.6).
    pub const NAME_COLLISION: &str = "NameCollision";
}

/// Publishes Events as the `volmig` controller.
#[derive(Clone)]
pub struct Events {
    client: kube::Client,
    namespace: String,
    instance: String,
    /// Events published in the last [`FOLD_WINDOW`] that a repeat folds into, by
    /// [`fold_key`].
    folded: Arc<Mutex<HashMap<String, K8sEvent>>>,
}

/// What makes two Events one series: type, reason and the object.
fn fold_key(target: &ObjectReference, type_: EventType, reason: &str) -> String {
    format!(
        "{type_:?}/{reason}/{}/{}/{}",
        target.kind.as_deref().unwrap_or_default(),
        target.name.as_deref().unwrap_or_default(),
        target.uid.as_deref().unwrap_or_default()
    )
}

impl Events {
    /// A publisher identified by `instance` (the replica's holder ID), writing into
    /// `default`, the namespace `--events-namespace` defaults to.
    pub fn new(client: kube::Client, instance: &str) -> Self {
        Self::in_namespace(client, instance, "default")
    }

    /// A publisher identified by `instance` (the replica's holder ID), writing into
    /// `namespace` (the events namespace, one of [`EVENTS_NAMESPACES`]).
    pub fn in_namespace(client: kube::Client, instance: &str, namespace: &str) -> Self {
        Self {
            client,
            namespace: namespace.to_owned(),
            instance: instance.to_owned(),
            folded: Arc::default(),
        }
    }

    /// A new Event (no series) on `target`, in `namespace`.
    fn new_event(
        &self,
        namespace: &str,
        target: &ObjectReference,
        type_: EventType,
        reason: &str,
        note: String,
    ) -> K8sEvent {
        let now = Timestamp::now();
        K8sEvent {
            action: Some(reason.to_owned()),
            reason: Some(reason.to_owned()),
            event_time: Some(MicroTime(now)),
            regarding: Some(target.clone()),
            note: Some(note),
            metadata: ObjectMeta {
                namespace: Some(namespace.to_owned()),
                name: Some(format!(
                    "{}.{:x}",
                    target.name.as_deref().unwrap_or("volmig"),
                    now.as_nanosecond()
                )),
                ..Default::default()
            },
            reporting_controller: Some("volmig".into()),
            reporting_instance: Some(self.instance.clone()),
            type_: Some(
                match type_ {
                    EventType::Normal => "Normal",
                    EventType::Warning => "Warning",
                }
                .into(),
            ),
            ..Default::default()
        }
    }

    /// Publishes an Event; with `fold`, a repeat of one published within [`FOLD_WINDOW`]
    /// becomes a count on it (a series) instead of a new object.
    async fn publish(
        &self,
        target: &ObjectReference,
        type_: EventType,
        reason: &str,
        note: String,
        fold: bool,
    ) {
        // An Event about a namespaced object lives in its namespace (the API server's
        // validation); about a cluster-scoped one, in the events namespace.
        let namespace = target.namespace.as_deref().unwrap_or(&self.namespace);
        let api: Api<K8sEvent> = Api::namespaced(self.client.clone(), namespace);
        let key = fold_key(target, type_, reason);
        let earlier = if fold {
            let now = Timestamp::now();
            let mut folded = self.folded.lock().unwrap_or_else(PoisonError::into_inner);
            folded.retain(|_, e| {
                let last = e
                    .series
                    .as_ref()
                    .map(|s| s.last_observed_time.0)
                    .or_else(|| e.event_time.as_ref().map(|t| t.0));
                last.is_some_and(|t| t + FOLD_WINDOW > now)
            });
            folded.get(&key).cloned()
        } else {
            None
        };
        let result = match earlier {
            Some(mut event) => {
                event.series = Some(EventSeries {
                    count: event.series.as_ref().map_or(2, |s| s.count + 1),
                    last_observed_time: MicroTime(Timestamp::now()),
                });
                api.patch(
                    &event.name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(&event),
                )
                .await
                .map(|_| event)
            }
            None => {
                let event = self.new_event(namespace, target, type_, reason, note);
                api.create(&PostParams::default(), &event)
                    .await
                    .map(|_| event)
            }
        };
        match result {
            Ok(event) if fold => {
                self.folded
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(key, event);
            }
            Ok(_) => {}
            Err(e) => warn!(object = ?target.name, reason, error = %e, "could not publish event"),
        }
    }

    /// An Event on a VolumeMigration.
    pub async fn on_migration(
        &self,
        vm: &VolumeMigration,
        type_: EventType,
        reason: &str,
        note: String,
    ) {
        self.publish(&vm.object_ref(&()), type_, reason, note, true)
            .await;
    }

    /// An Event on a VolumeMigration that is never folded into an earlier one: a second
    /// Event of the same reason on the same object (within minutes) would otherwise become a
    /// count on the first, keeping the first note. Use this when the note carries facts that
    /// differ each time (e.g. the volume IDs of a repair).
    pub async fn on_migration_distinct(
        &self,
        vm: &VolumeMigration,
        type_: EventType,
        reason: &str,
        note: String,
    ) {
        self.publish(&vm.object_ref(&()), type_, reason, note, false)
            .await;
    }

    /// An Event on the Lease `namespace/name` (the CSI driver syncer's: who registers
    /// changed), written in that namespace.
    pub async fn on_lease(
        &self,
        namespace: &str,
        name: &str,
        type_: EventType,
        reason: &str,
        note: String,
    ) {
        let target = ObjectReference {
            api_version: Some("coordination.k8s.io/v1".into()),
            kind: Some("Lease".into()),
            namespace: Some(namespace.to_owned()),
            name: Some(name.to_owned()),
            ..Default::default()
        };
        self.publish(&target, type_, reason, note, false).await;
    }

    /// An Event on the PersistentVolume `name`. PVs get one Event per registration (and
    /// one per invalid path), nothing that repeats, so nothing is folded: remembering every
    /// PV Event for the fold window would mean one entry per PV during a migration (tens of
    /// thousands) and a walk over all of them per registration.
    pub async fn on_pv(&self, name: &str, type_: EventType, reason: &str, note: String) {
        let target = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("PersistentVolume".into()),
            name: Some(name.to_owned()),
            ..Default::default()
        };
        self.publish(&target, type_, reason, note, false).await;
    }
}

#[cfg(test)]
mod tests {
    use http::{Request, Response};
    use kube::client::Body;

    use super::*;

    /// Serves `requests` Event writes, answering each with the body it was sent; returns
    /// "METHOD path" of each.
    async fn serve(
        handle: tower_test::mock::Handle<Request<Body>, Response<Body>>,
        requests: usize,
    ) -> Vec<String> {
        serve_bodies(handle, requests)
            .await
            .into_iter()
            .map(|(line, _)| line)
            .collect()
    }

    /// [`serve`], also returning the JSON body of each request.
    async fn serve_bodies(
        mut handle: tower_test::mock::Handle<Request<Body>, Response<Body>>,
        requests: usize,
    ) -> Vec<(String, serde_json::Value)> {
        let mut seen = Vec::new();
        for _ in 0..requests {
            let (request, send) = handle.next_request().await.expect("a request");
            let line = format!("{} {}", request.method(), request.uri().path());
            let body = request.into_body().collect_bytes().await.expect("a body");
            seen.push((line, serde_json::from_slice(&body).expect("a JSON body")));
            send.send_response(
                Response::builder()
                    .status(201)
                    .body(Body::from(body.to_vec()))
                    .expect("response"),
            );
        }
        seen
    }

    #[tokio::test]
    async fn events_go_to_the_configured_namespace_about_cluster_scoped_objects() {
        let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let events = Events::in_namespace(
            kube::Client::new(service, "volmig"),
            "volmig-0",
            "kube-system",
        );
        let server = tokio::spawn(serve_bodies(handle, 3));
        events
            .on_pv("pv-1", EventType::Normal, reason::REGISTERED, "ok".into())
            .await;
        let spec =
            serde_json::from_value(serde_json::json!({"volumePath": "[ds] a.vmdk"})).expect("spec");
        let vm = VolumeMigration::new("vm-1", spec);
        for _ in 0..2 {
            events
                .on_migration(
                    &vm,
                    EventType::Warning,
                    reason::DUPLICATE_VOLUMES,
                    "x".into(),
                )
                .await;
        }
        let seen = server.await.expect("server");
        let events_path = "/apis/events.k8s.io/v1/namespaces/kube-system/events";
        assert_eq!(seen[0].0, format!("POST {events_path}"));
        assert_eq!(seen[1].0, format!("POST {events_path}"));
        assert!(
            seen[2].0.starts_with(&format!("PATCH {events_path}/")),
            "{seen:?}"
        );
        for (line, body) in &seen {
            assert_eq!(
                body["metadata"]["namespace"], "kube-system",
                "{line}: {body}"
            );
            // The object stays cluster-scoped: the reference names no namespace.
            assert!(
                body["regarding"].get("namespace").is_none(),
                "{line}: {body}"
            );
            assert_eq!(body["reportingController"], "volmig");
            assert_eq!(body["reportingInstance"], "volmig-0");
        }
        assert_eq!(seen[0].1["regarding"]["kind"], "PersistentVolume");
        assert_eq!(seen[2].1["series"]["count"], 2);
    }

    #[tokio::test]
    async fn pv_events_are_never_folded_migration_events_are() {
        let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let events = Events::new(kube::Client::new(service, "default"), "volmig-0");
        let server = tokio::spawn(serve(handle, 4));
        for _ in 0..2 {
            events
                .on_pv(
                    "pv-1",
                    EventType::Normal,
                    reason::REGISTERED,
                    "registered".into(),
                )
                .await;
        }
        let spec =
            serde_json::from_value(serde_json::json!({"volumePath": "[ds] a.vmdk"})).expect("spec");
        let vm = VolumeMigration::new("vm-1", spec);
        for _ in 0..2 {
            events
                .on_migration(
                    &vm,
                    EventType::Warning,
                    reason::REGISTRATION_FAILED,
                    "x".into(),
                )
                .await;
        }
        let seen = server.await.expect("server");
        let events_path = "/apis/events.k8s.io/v1/namespaces/default/events";
        assert_eq!(
            seen[..3],
            [
                format!("POST {events_path}"),
                format!("POST {events_path}"),
                format!("POST {events_path}")
            ]
        );
        assert!(
            seen[3].starts_with(&format!("PATCH {events_path}/")),
            "the second migration Event is a count on the first: {seen:?}"
        );
    }
}
