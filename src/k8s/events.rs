//! Kubernetes Events on VolumeMigrations and PersistentVolumes. Publishing is best effort:
//! a failed Event is logged, never a reason to fail the work it reports.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Resource;
pub use kube::runtime::events::EventType;
use kube::runtime::events::{Event, Recorder, Reporter};
use tracing::warn;

use crate::api::VolumeMigration;

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
    /// A Registered volume was missing in CNS and was registered again.
    pub const RE_REGISTERED: &str = "ReRegistered";
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
    recorder: Recorder,
    client: kube::Client,
    reporter: Reporter,
}

impl Events {
    /// A publisher identified by `instance` (the replica's holder ID).
    pub fn new(client: kube::Client, instance: &str) -> Self {
        let reporter = Reporter {
            controller: "volmig".into(),
            instance: Some(instance.to_owned()),
        };
        Self {
            recorder: Recorder::new(client.clone(), reporter.clone()),
            client,
            reporter,
        }
    }

    async fn publish(
        &self,
        target: &ObjectReference,
        type_: EventType,
        reason: &str,
        note: String,
    ) {
        publish_with(&self.recorder, target, type_, reason, note).await;
    }

    /// Publishes through a recorder of its own, which has no memory of earlier Events to
    /// fold this one into.
    async fn publish_unfolded(
        &self,
        target: &ObjectReference,
        type_: EventType,
        reason: &str,
        note: String,
    ) {
        let recorder = Recorder::new(self.client.clone(), self.reporter.clone());
        publish_with(&recorder, target, type_, reason, note).await;
    }

    /// An Event on a VolumeMigration.
    pub async fn on_migration(
        &self,
        vm: &VolumeMigration,
        type_: EventType,
        reason: &str,
        note: String,
    ) {
        self.publish(&vm.object_ref(&()), type_, reason, note).await;
    }

    /// An Event on a VolumeMigration that is never folded into an earlier one: the shared
    /// recorder turns a second Event of the same reason on the same object (within minutes)
    /// into a count on the first, keeping the first note. Use this when the note carries
    /// facts that differ each time (e.g. the volume IDs of a repair).
    pub async fn on_migration_distinct(
        &self,
        vm: &VolumeMigration,
        type_: EventType,
        reason: &str,
        note: String,
    ) {
        self.publish_unfolded(&vm.object_ref(&()), type_, reason, note)
            .await;
    }

    /// An Event on the PersistentVolume `name`. PVs get one Event per registration (and
    /// one per invalid path), nothing that repeats, so nothing is folded. The shared recorder keeps every Event it published in
    /// the last six minutes and walks them all on each publish; during a migration that
    /// would be one per PV (tens of thousands, a megabyte per thousand, and a walk over all
    /// of them per registration).
    pub async fn on_pv(&self, name: &str, type_: EventType, reason: &str, note: String) {
        let target = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("PersistentVolume".into()),
            name: Some(name.to_owned()),
            ..Default::default()
        };
        self.publish_unfolded(&target, type_, reason, note).await;
    }
}

async fn publish_with(
    recorder: &Recorder,
    target: &ObjectReference,
    type_: EventType,
    reason: &str,
    note: String,
) {
    let event = Event {
        type_,
        reason: reason.to_owned(),
        note: Some(note),
        action: reason.to_owned(),
        secondary: None,
    };
    if let Err(e) = recorder.publish(&event, target).await {
        warn!(object = ?target.name, reason, error = %e, "could not publish event");
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
        mut handle: tower_test::mock::Handle<Request<Body>, Response<Body>>,
        requests: usize,
    ) -> Vec<String> {
        let mut seen = Vec::new();
        for _ in 0..requests {
            let (request, send) = handle.next_request().await.expect("a request");
            seen.push(format!("{} {}", request.method(), request.uri().path()));
            let body = request.into_body().collect_bytes().await.expect("a body");
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
