//! The one status writer: every change of a VolumeMigration status — the registrar's
//! transitions, the PV list, an invalid path, duplicates — is a typed [`StatusChange`],
//! turned into a JSON merge patch by a pure function and sent by [`StatusWriter::write`],
//! optionally conditional on a `resourceVersion` (docs/design.md §4.9).

use super::error_class::{KubeErrorClass, classify};
use async_trait::async_trait;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Resource as _;
use kube::api::{Api, Patch, PatchParams};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::backend::VolumeId;
use crate::registrar::{
    StatusStore, StatusUpdate, StoreError, StoreErrorKind, StoredState, Version, reason,
};
use crate::volume_migration::{FIELD_MANAGER, Phase, VolumeMigration, VolumeMigrationStatus};
use crate::volume_path::VolumePath;

/// Condition types written in `status.conditions`.
pub mod condition {
    /// True once the vmdk has a CNS volume ID.
    pub const REGISTERED: &str = "Registered";
    /// True when the mapping can be used by the CSI controller.
    pub const READY: &str = "Ready";
}

/// Every change volmig makes to a status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StatusChange {
    /// A registrar transition.
    Registrar(StatusUpdate),
    /// The PVs that reference the path now (and `Pending` when no phase is set yet).
    PersistentVolumes {
        /// PV names, sorted.
        pvs: Vec<String>,
        /// The object's `metadata.generation`.
        observed_generation: Option<i64>,
        /// Also set phase `Pending`.
        pending: bool,
    },
    /// The CNS volume of the status ID is gone while the CSI driver registers (docs/design.md
    /// §8.3): the ID is withdrawn (phase `Pending`, no volume ID), so nothing publishes it
    /// and the registrar adopts the driver's next registration.
    VolumeGone {
        /// The ID CNS no longer holds.
        gone: String,
    },
    /// The object's name belongs to another path (docs/design.md §2.6): `Failed` with
    /// reason `NameCollision`, no retry; nothing is registered through it.
    NameCollision {
        /// What collides with what.
        message: String,
    },
    /// The spec's path is invalid: `Failed` with reason `InvalidPath`, no retry.
    InvalidPath {
        /// Why the path is invalid.
        message: String,
    },
    /// The stored volume ID was not this path's CNS volume (edited by hand, or gone) and is
    /// replaced by the path's volume found in CNS. Protection is unknown for that volume
    /// until checked again (full sync's `Protect` repair).
    VolumeIdRepaired {
        /// The path's CNS volume.
        volume_id: String,
        /// The ID the status held.
        replaced: String,
    },
    /// Other CNS volumes found for the same disk.
    Duplicates {
        /// Their IDs, sorted.
        ids: Vec<String>,
    },
    /// A registrar transition that also carries the PV list (one write instead of two for
    /// a new PV, docs/design.md §4.4).
    RegistrarWithPvs {
        /// The transition.
        update: StatusUpdate,
        /// The PV list and generation to record with it.
        extras: StatusExtras,
    },
}

/// What a registrar write carries besides its transition: the PVs that use the path now
/// and the object's generation.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct StatusExtras {
    /// PV names, sorted.
    pub pvs: Vec<String>,
    /// The object's `metadata.generation`, when known.
    pub observed_generation: Option<i64>,
}

/// Where a [`KubeStatusStore`] reads the [`StatusExtras`] of a path at write time.
pub type StatusExtrasSource = std::sync::Arc<dyn Fn(&VolumePath) -> StatusExtras + Send + Sync>;

fn pv_fields(pvs: &[String], observed_generation: Option<i64>) -> Value {
    json!({
        "persistentVolumes": crate::volume_migration::status_pv_names(pvs),
        "persistentVolumeCount": pvs.len(),
        "observedGeneration": observed_generation,
    })
}

/// What kind of failure a status write met.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteErrorKind {
    /// The `resourceVersion` precondition failed (409).
    Conflict,
    /// The object is gone (404).
    NotFound,
    /// Timeout, 401, 429 or 5xx: retry.
    Unavailable,
    /// Refused for good (other 4xx: validation, permission).
    Rejected,
}

/// A failed status write.
#[derive(Debug, thiserror::Error)]
#[error("writing the status of VolumeMigration {name}")]
pub struct WriteError {
    /// The object.
    pub name: String,
    /// How to react.
    pub kind: WriteErrorKind,
    /// The client error.
    pub source: kube::Error,
}

/// Classifies a client error ([`classify`], the one classification).
pub fn write_error_kind(error: &kube::Error) -> WriteErrorKind {
    match classify(error) {
        KubeErrorClass::Conflict => WriteErrorKind::Conflict,
        KubeErrorClass::Gone => WriteErrorKind::NotFound,
        KubeErrorClass::Transient => WriteErrorKind::Unavailable,
        KubeErrorClass::Permanent => WriteErrorKind::Rejected,
    }
}

/// Writes VolumeMigration statuses: the only place that patches `/status`.
#[derive(Clone)]
pub struct StatusWriter {
    client: kube::Client,
    request: kube::core::Request,
}

/// The one field volmig reads from the object a status write returns: decoding all of it
/// (managedFields, the PV list, conditions) only to drop it took a quarter of the write's
/// CPU in volmig.
#[derive(Deserialize)]
struct Written {
    #[serde(default)]
    metadata: WrittenMeta,
}

#[derive(Deserialize, Default)]
struct WrittenMeta {
    #[serde(rename = "resourceVersion")]
    resource_version: Option<String>,
}

impl StatusWriter {
    /// A writer through `client`.
    pub fn new(client: kube::Client) -> Self {
        Self {
            client,
            request: kube::core::Request::new(VolumeMigration::url_path(&(), None)),
        }
    }

    /// Applies `change` to the status of `name` (a merge patch under volmig's field
    /// manager), only if its `resourceVersion` is still `precondition` when given.
    /// Returns the new `resourceVersion`.
    pub async fn write(
        &self,
        name: &str,
        change: &StatusChange,
        precondition: Option<&str>,
    ) -> Result<Option<String>, WriteError> {
        let mut patch = status_patch(change, jiff::Timestamp::now());
        if let Some(version) = precondition {
            patch["metadata"] = json!({ "resourceVersion": version });
        }
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.to_owned()),
            ..PatchParams::default()
        };
        let sent = async {
            let mut request = self
                .request
                .patch_subresource("status", name, &params, &Patch::Merge(&patch))
                .map_err(kube::Error::BuildRequest)?;
            request.extensions_mut().insert("patch_subresource");
            self.client.request::<Written>(request).await
        };
        sent.await
            .map(|written| written.metadata.resource_version)
            .map_err(|source| WriteError {
                name: name.to_owned(),
                kind: write_error_kind(&source),
                source,
            })
    }
}

#[path = "status_patch.rs"]
mod patch;
pub use patch::status_patch;

/// The state the registrar decides on, read from a status.
pub fn stored_state(status: &VolumeMigrationStatus, version: Option<String>) -> StoredState {
    StoredState {
        phase: status.phase,
        volume_id: status.volume_id.as_deref().map(VolumeId::from),
        attempts: status.attempts.unwrap_or(0),
        marker: status
            .registering_token
            .clone()
            .filter(|_| status.phase == Some(Phase::Registering)),
        // The task of the create sent under this marker only (docs/design.md §4.4): one
        // left beside an older token proves nothing.
        task: status
            .registering_task
            .as_ref()
            .filter(|t| {
                status.phase == Some(Phase::Registering)
                    && status.registering_token.as_ref() == Some(&t.token)
            })
            .map(|t| t.task.clone()),
        version: version.map(Version),
        storage_policy: None,
    }
}

/// Checks that `vm` tracks `path` (docs/design.md §2.6: object names are derived from paths, so a
/// different path under the same name is a collision, never the other path's mapping).
pub fn check_tracks(vm: &VolumeMigration, path: &VolumePath) -> Result<(), StoreError> {
    match VolumePath::parse(&vm.spec.volume_path) {
        Ok(found) if found == *path => Ok(()),
        _ => Err(StoreError::new(
            path,
            StoreErrorKind::NameCollision {
                found: vm.spec.volume_path.clone(),
            },
            format!(
                "VolumeMigration {} tracks {:?}, not {path}",
                path.object_name(),
                vm.spec.volume_path
            ),
        )),
    }
}

/// The registrar's status store in the cluster.
#[derive(Clone)]
pub struct KubeStatusStore {
    api: Api<VolumeMigration>,
    writer: StatusWriter,
    extras: Option<StatusExtrasSource>,
}

impl KubeStatusStore {
    /// A store reading and writing through `client`.
    pub fn new(client: kube::Client) -> Self {
        Self {
            api: Api::all(client.clone()),
            writer: StatusWriter::new(client),
            extras: None,
        }
    }

    /// Every write-ahead, stored ID and failure also records the path's PV list (and
    /// generation) read from `source` at write time, so a new PV needs no separate PV-list
    /// write.
    pub fn with_extras(mut self, source: StatusExtrasSource) -> Self {
        self.extras = Some(source);
        self
    }
}

fn store_error(path: &VolumePath, error: &kube::Error) -> StoreError {
    let kind = match write_error_kind(error) {
        WriteErrorKind::Conflict => StoreErrorKind::Conflict,
        WriteErrorKind::NotFound => StoreErrorKind::NotFound,
        WriteErrorKind::Unavailable => StoreErrorKind::Unavailable,
        WriteErrorKind::Rejected => StoreErrorKind::Rejected,
    };
    StoreError::new(
        path,
        kind,
        format!("VolumeMigration {}: {error}", path.object_name()),
    )
}

#[async_trait]
impl StatusStore for KubeStatusStore {
    async fn load(&self, path: &VolumePath) -> Result<Option<StoredState>, StoreError> {
        let Some(vm) = self
            .api
            .get_opt(&path.object_name())
            .await
            .map_err(|e| store_error(path, &e))?
        else {
            return Ok(None);
        };
        check_tracks(&vm, path)?;
        let version = vm.metadata.resource_version.clone();
        let status = vm.status.unwrap_or_default();
        Ok(Some(StoredState {
            storage_policy: vm.spec.storage_policy_name.clone(),
            ..stored_state(&status, version)
        }))
    }

    async fn save(
        &self,
        path: &VolumePath,
        update: &StatusUpdate,
        expect: Option<&Version>,
    ) -> Result<Version, StoreError> {
        let carries_pvs = matches!(
            update,
            StatusUpdate::Registering { .. }
                | StatusUpdate::Registered { .. }
                | StatusUpdate::Failed { .. }
        );
        let change = match &self.extras {
            Some(source) if carries_pvs => StatusChange::RegistrarWithPvs {
                update: update.clone(),
                extras: source(path),
            },
            _ => StatusChange::Registrar(update.clone()),
        };
        let written = self
            .writer
            .write(&path.object_name(), &change, expect.map(|v| v.0.as_str()))
            .await
            .map_err(|e| store_error(path, &e.source))?;
        Ok(Version(written.unwrap_or_default()))
    }

    fn records_pvs(&self) -> bool {
        self.extras.is_some()
    }
}

/// When a failed status should be retried, from its `nextRetryTime`.
pub fn retry_due_in(
    status: &VolumeMigrationStatus,
    now: jiff::Timestamp,
) -> Option<std::time::Duration> {
    let next = status.next_retry_time.as_ref()?.0;
    let wait = now.duration_until(next);
    Some(std::time::Duration::try_from(wait).unwrap_or(std::time::Duration::ZERO))
}

#[cfg(test)]
#[path = "status_tests.rs"]
mod tests;
