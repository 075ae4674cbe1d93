//! The registrar's status store in the cluster: every transition is one JSON merge patch
//! on `/status` of the path's VolumeMigration, under one field manager.

use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

use crate::api::{FIELD_MANAGER, Phase, VolumeMigration, VolumeMigrationStatus};
use crate::backend::VolumeId;
use crate::registrar::{StatusStore, StatusUpdate, StoreError, StoredState};
use crate::volume_path::VolumePath;

/// Condition types written in `status.conditions`.
pub mod condition {
    /// True once the vmdk has a CNS volume ID.
    pub const REGISTERED: &str = "Registered";
    /// True when the mapping can be used by the CSI controller.
    pub const READY: &str = "Ready";
}

/// Stores registrar state in VolumeMigration statuses.
#[derive(Clone)]
pub struct KubeStatusStore {
    api: Api<VolumeMigration>,
}

impl KubeStatusStore {
    /// A store writing through `client`.
    pub fn new(client: kube::Client) -> Self {
        Self {
            api: Api::all(client),
        }
    }

    /// Applies a raw status merge patch to the object of `path` (also used by the
    /// controller for `persistentVolumes` and duplicates).
    pub async fn patch_status(&self, path: &VolumePath, patch: Value) -> Result<(), StoreError> {
        let name = path.object_name();
        self.api
            .patch_status(
                &name,
                &PatchParams::apply(FIELD_MANAGER),
                &Patch::Merge(&patch),
            )
            .await
            .map(drop)
            .map_err(|e| store_error(path, &e))
    }
}

/// Classifies a Kubernetes client error for the registrar.
pub fn store_error(path: &VolumePath, error: &kube::Error) -> StoreError {
    let retryable = match error {
        kube::Error::Api(status) => status.code == 409 || status.code == 429 || status.code >= 500,
        _ => true,
    };
    StoreError {
        path: path.to_string(),
        message: format!("VolumeMigration {}: {error}", path.object_name()),
        retryable,
    }
}

/// Condition reason of the `Registering` write-ahead; its time dates the write-ahead.
const REGISTERING: &str = "Registering";

/// The state the registrar decides on, read from a status.
pub fn stored_state(status: &VolumeMigrationStatus) -> StoredState {
    let registering_since = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == condition::REGISTERED && c.reason == REGISTERING)
        .map(|c| c.last_transition_time.0);
    StoredState {
        phase: status.phase,
        volume_id: status.volume_id.as_deref().map(VolumeId::from),
        attempts: status.attempts.unwrap_or(0),
        registering_since: registering_since.filter(|_| status.phase == Some(Phase::Registering)),
    }
}

fn time(t: jiff::Timestamp) -> Value {
    serde_json::to_value(Time(t)).unwrap_or(Value::Null)
}

fn conditions(now: jiff::Timestamp, registered: bool, reason: &str, message: &str) -> Value {
    let status = if registered { "True" } else { "False" };
    json!([
        {"type": condition::REGISTERED, "status": status, "reason": reason,
         "message": message, "lastTransitionTime": time(now)},
        {"type": condition::READY, "status": status, "reason": reason,
         "message": message, "lastTransitionTime": time(now)},
    ])
}

/// The merge patch of `/status` for one registrar transition (pure; `now` is injected).
pub fn status_patch(update: &StatusUpdate, now: jiff::Timestamp) -> Value {
    let status = match update {
        StatusUpdate::Registering { attempts, since } => json!({
            "phase": "Registering",
            "attempts": attempts,
            "nextRetryTime": null,
            "conditions": conditions(*since, false, REGISTERING, "a CNS create may be in flight"),
        }),
        StatusUpdate::Registered {
            volume_id,
            disk_uuid,
            adopted,
            attempts,
        } => {
            let how = if *adopted { "Adopted" } else { "Created" };
            let mut s = json!({
                "phase": "Registered",
                "volumeID": volume_id.0,
                "attempts": attempts,
                "lastError": null,
                "nextRetryTime": null,
                "registeredTime": time(now),
                "conditions": conditions(now, true, how, &format!("CNS volume {volume_id}")),
            });
            if let Some(uuid) = disk_uuid {
                s["diskUUID"] = json!(uuid);
            }
            s
        }
        StatusUpdate::Failed {
            reason,
            message,
            attempts,
            retry_after,
        } => {
            let next = retry_after
                .and_then(|d| jiff::SignedDuration::try_from(d).ok())
                .and_then(|d| now.checked_add(d).ok())
                .map_or(Value::Null, time);
            json!({
                "phase": "Failed",
                "attempts": attempts,
                "lastError": {"reason": reason, "message": message, "time": time(now)},
                "nextRetryTime": next,
                "conditions": conditions(now, false, reason, message),
            })
        }
        StatusUpdate::Unregistering => json!({"phase": "Unregistering"}),
        StatusUpdate::Unregistered => json!({
            "phase": "Pending",
            "volumeID": null,
            "diskUUID": null,
            "registeredTime": null,
            "conditions": conditions(now, false, "Unregistered", "CNS registration removed"),
        }),
    };
    json!({ "status": status })
}

#[async_trait]
impl StatusStore for KubeStatusStore {
    async fn load(&self, path: &VolumePath) -> Result<Option<StoredState>, StoreError> {
        let object = self
            .api
            .get_opt(&path.object_name())
            .await
            .map_err(|e| store_error(path, &e))?;
        Ok(object.map(|vm| vm.status.as_ref().map(stored_state).unwrap_or_default()))
    }

    async fn save(&self, path: &VolumePath, update: StatusUpdate) -> Result<(), StoreError> {
        self.patch_status(path, status_patch(&update, jiff::Timestamp::now()))
            .await
    }
}

/// When a failed status should be retried, from its `nextRetryTime`.
pub fn retry_due_in(status: &VolumeMigrationStatus, now: jiff::Timestamp) -> Option<Duration> {
    let next = status.next_retry_time.as_ref()?.0;
    let wait = now.duration_until(next);
    Some(Duration::try_from(wait).unwrap_or(Duration::ZERO))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> jiff::Timestamp {
        "2026-12-02T10:00:00Z".parse().unwrap()
    }

    #[test]
    fn registered_patch_publishes_id_and_clears_errors() {
        let patch = status_patch(
            &StatusUpdate::Registered {
                volume_id: VolumeId::from("vol-1"),
                disk_uuid: Some("uuid-1".into()),
                adopted: false,
                attempts: 1,
            },
            now(),
        );
        let s = &patch["status"];
        assert_eq!(s["phase"], "Registered");
        assert_eq!(s["volumeID"], "vol-1");
        assert_eq!(s["diskUUID"], "uuid-1");
        assert!(s["lastError"].is_null() && s.get("lastError").is_some());
        assert_eq!(s["conditions"][0]["type"], "Registered");
        assert_eq!(s["conditions"][0]["status"], "True");
        assert_eq!(s["conditions"][0]["reason"], "Created");
        assert_eq!(s["registeredTime"], "2026-12-02T10:00:00Z");
        // The patch deserializes into the typed status.
        let typed: VolumeMigrationStatus = serde_json::from_value(s.clone()).unwrap();
        assert_eq!(typed.volume_id.as_deref(), Some("vol-1"));
    }

    #[test]
    fn adopted_without_uuid_keeps_stored_uuid() {
        let patch = status_patch(
            &StatusUpdate::Registered {
                volume_id: VolumeId::from("v"),
                disk_uuid: None,
                adopted: true,
                attempts: 2,
            },
            now(),
        );
        assert!(patch["status"].get("diskUUID").is_none());
        assert_eq!(patch["status"]["conditions"][1]["reason"], "Adopted");
    }

    #[test]
    fn failed_patch_schedules_retry() {
        let patch = status_patch(
            &StatusUpdate::Failed {
                reason: "BackendUnavailable".into(),
                message: "timeout".into(),
                attempts: 3,
                retry_after: Some(Duration::from_secs(90)),
            },
            now(),
        );
        let s = &patch["status"];
        assert_eq!(s["phase"], "Failed");
        assert_eq!(s["lastError"]["reason"], "BackendUnavailable");
        assert_eq!(s["nextRetryTime"], "2026-12-02T10:01:30Z");
        let typed: VolumeMigrationStatus = serde_json::from_value(s.clone()).unwrap();
        assert_eq!(
            retry_due_in(&typed, now()),
            Some(Duration::from_secs(90)),
            "due in 90 s"
        );
        let permanent = status_patch(
            &StatusUpdate::Failed {
                reason: "DiskNotFound".into(),
                message: "gone".into(),
                attempts: 1,
                retry_after: None,
            },
            now(),
        );
        assert!(permanent["status"]["nextRetryTime"].is_null());
    }

    #[test]
    fn registering_patch_dates_the_write_ahead() {
        let s = &status_patch(
            &StatusUpdate::Registering {
                attempts: 2,
                since: now(),
            },
            jiff::Timestamp::now(),
        )["status"];
        let typed: VolumeMigrationStatus = serde_json::from_value(s.clone()).unwrap();
        let state = stored_state(&typed);
        assert_eq!(state.phase, Some(Phase::Registering));
        assert_eq!(state.registering_since, Some(now()));
        assert_eq!(state.attempts, 2);
    }

    #[test]
    fn unregistered_patch_clears_the_mapping() {
        let s = &status_patch(&StatusUpdate::Unregistered, now())["status"];
        assert_eq!(s["phase"], "Pending");
        assert!(s["volumeID"].is_null());
        let typed: VolumeMigrationStatus = serde_json::from_value(s.clone()).unwrap();
        assert_eq!(
            stored_state(&typed),
            StoredState {
                phase: Some(crate::api::Phase::Pending),
                volume_id: None,
                attempts: 0,
                registering_since: None,
            }
        );
    }
}
