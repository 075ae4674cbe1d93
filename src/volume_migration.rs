//! The `VolumeMigration` custom resource (`volmig.io/v1alpha1`, cluster-scoped), docs/design.md §2.
//!
//! One object per distinct canonical volume path; its status is the published
//! vmdk → CNS volume-ID mapping.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, CustomResourceExt, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Finalizer that guards unregistration (docs/design.md §2.5, §5).
pub const FINALIZER: &str = "volmig.io/registration";

/// Field manager of every write volmig makes.
pub const FIELD_MANAGER: &str = "volmig";

/// At most this many PV names are listed in `status.persistentVolumes`: 1,000 names of at
/// most 253 characters keep the object far below etcd's 1.5 MiB limit, however many PVs
/// share one vmdk. `status.persistentVolumeCount` always holds the full count.
pub const MAX_STATUS_PVS: usize = 1000;

/// The names listed in `status.persistentVolumes` for the PVs `pvs` (sorted): the first
/// [`MAX_STATUS_PVS`].
pub fn status_pv_names(pvs: &[String]) -> &[String] {
    &pvs[..pvs.len().min(MAX_STATUS_PVS)]
}

/// Desired state: which vmdk this object tracks.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "volmig.io",
    version = "v1alpha1",
    kind = "VolumeMigration",
    plural = "volumemigrations",
    singular = "volumemigration",
    shortname = "vmig",
    doc = "A vmdk tracked by volmig: its CNS registration and the PersistentVolumes that use it.",
    status = "VolumeMigrationStatus",
    printcolumn = r#"{"name":"Path","type":"string","jsonPath":".spec.volumePath"}"#,
    printcolumn = r#"{"name":"Volume-ID","type":"string","jsonPath":".status.volumeID"}"#,
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"PV","type":"string","jsonPath":".status.persistentVolumes[*]"}"#,
    printcolumn = r#"{"name":"Attempts","type":"integer","jsonPath":".status.attempts"}"#,
    printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".status.lastError.reason"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct VolumeMigrationSpec {
    /// The in-tree vSphere volume path, canonical form `[datastore] folder/file.vmdk`.
    /// Set at creation and immutable.
    #[x_kube(validation = Rule::new("self == oldSelf").message("volumePath is immutable"))]
    pub volume_path: String,

    /// Optional storage policy name to record on the CNS registration.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage_policy_name: Option<String>,
}

/// Where a VolumeMigration stands.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum Phase {
    /// Seen, not yet registered.
    Pending,
    /// Write-ahead: a CNS create may be in flight.
    Registering,
    /// Registered; `volumeID` holds the CNS volume ID.
    Registered,
    /// The last attempt failed; see `lastError` and `nextRetryTime`.
    Failed,
    /// The CNS registration is being removed (the vmdk stays).
    Unregistering,
}

impl Phase {
    /// The name as written in the status.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Pending => "Pending",
            Phase::Registering => "Registering",
            Phase::Registered => "Registered",
            Phase::Failed => "Failed",
            Phase::Unregistering => "Unregistering",
        }
    }
}

/// The last error seen while registering or unregistering.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LastError {
    /// Machine-readable reason: `InvalidPath` (fix the PV's volumePath), `DiskNotFound`
    /// (the vmdk does not exist), `InvalidLogin` (vCenter rejected the credentials),
    /// `NotAuthenticated` (the session could not be renewed), `BackendRejected` (vCenter
    /// refused the call, e.g. permission), `BackendUnavailable` (vCenter unreachable or
    /// failing; retried), `CreateOutcomeUnknown` (a create may still run in vCenter;
    /// volmig waits for it before creating again), `NameCollision` (this object's name
    /// belongs to another path's hash; see docs/design.md).
    pub reason: String,
    /// Human-readable detail.
    pub message: String,
    /// When it happened.
    pub time: Time,
}

/// The vCenter task of a create in flight (`status.registeringTask`, docs/design.md §4.4).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
pub struct RegisteringTask {
    /// The `registeringToken` of the write-ahead the create was sent under.
    pub token: String,
    /// The task's managed object reference value, e.g. `task-123`.
    pub task: String,
}

/// Observed state: the published mapping and how it got there.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VolumeMigrationStatus {
    /// Pending, Registering, Registered, Failed or Unregistering.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
    /// The CNS volume ID of this vmdk, once registered.
    #[serde(default, rename = "volumeID", skip_serializing_if = "Option::is_none")]
    pub volume_id: Option<String>,
    /// The virtual disk UUID reported by vCenter.
    #[serde(default, rename = "diskUUID", skip_serializing_if = "Option::is_none")]
    pub disk_uuid: Option<String>,
    /// Names of the PersistentVolumes that reference this vmdk, sorted; at most the
    /// first 1000 (see `persistentVolumeCount`). A pod that names the vmdk inline
    /// (`spec.volumes[].vsphereVolume`) is listed as `pod/<namespace>/<pod>/<volume>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persistent_volumes: Option<Vec<String>>,
    /// How many PersistentVolumes (and inline pod volumes) reference this vmdk
    /// (`persistentVolumes` lists at most 1000 of them, to keep the object well under
    /// etcd's size limit).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub persistent_volume_count: Option<u64>,
    /// Registration attempts made by the current (or last) registration run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempts: Option<u32>,
    /// The last error, cleared on success.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<LastError>,
    /// Earliest time of the next automatic retry.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_retry_time: Option<Time>,
    /// When the registration was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registered_time: Option<Time>,
    /// Other CNS volume IDs found for the same disk (duplicates made outside volmig).
    #[serde(
        default,
        rename = "duplicateVolumeIDs",
        skip_serializing_if = "Option::is_none"
    )]
    pub duplicate_volume_ids: Option<Vec<String>>,
    /// Token of the `Registering` write-ahead: while the phase is `Registering`, a CNS
    /// create under this token may be in flight; volmig waits out its grace before
    /// creating again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registering_token: Option<String>,
    /// The vCenter task of the create sent under `registeringToken`, recorded when it ran
    /// longer than a few seconds: a successor follows that task to its end instead of
    /// creating again (docs/design.md §4.4). Meaningful only while its `token` is the
    /// `registeringToken` of a `Registering` status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub registering_task: Option<RegisteringTask>,
    /// True once the disk is kept when a VM it is attached to is deleted (the FCD's
    /// `keepAfterDeleteVm` flag; docs/design.md §8.3).
    #[serde(
        default,
        rename = "protectedFromVMDelete",
        skip_serializing_if = "Option::is_none"
    )]
    pub protected_from_vm_delete: Option<bool>,
    /// The metadata.generation this status reflects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Standard conditions: `Registered` and `Ready`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<Condition>>,
}

/// The CRD as YAML, exactly what `volmig crd` prints and `crds/volumemigrations.yaml` holds.
pub fn crd_yaml() -> Result<String, serde_saphyr::ser::Error> {
    serde_saphyr::to_string(&VolumeMigration::crd())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crd_has_the_contract_shape() {
        let crd = serde_json::to_value(VolumeMigration::crd()).unwrap();
        let spec = &crd["spec"];
        assert_eq!(spec["group"], "volmig.io");
        assert_eq!(spec["scope"], "Cluster");
        assert_eq!(spec["names"]["shortNames"][0], "vmig");
        let version = &spec["versions"][0];
        assert_eq!(version["name"], "v1alpha1");
        assert!(version["subresources"]["status"].is_object());
        let columns: Vec<&str> = version["additionalPrinterColumns"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            columns,
            [
                "Path",
                "Volume-ID",
                "Phase",
                "PV",
                "Attempts",
                "Reason",
                "Age"
            ]
        );
        let spec_schema = &version["schema"]["openAPIV3Schema"]["properties"]["spec"];
        assert_eq!(spec_schema["required"][0], "volumePath");
        let rule = &spec_schema["properties"]["volumePath"]["x-kubernetes-validations"][0];
        assert_eq!(rule["rule"], "self == oldSelf");
        let status = &version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"];
        for field in [
            "phase",
            "volumeID",
            "diskUUID",
            "persistentVolumes",
            "attempts",
            "lastError",
            "nextRetryTime",
            "registeredTime",
            "duplicateVolumeIDs",
            "observedGeneration",
            "conditions",
        ] {
            assert!(
                status[field].is_object(),
                "status.{field} missing from schema"
            );
            assert!(
                status[field]["description"].is_string(),
                "status.{field} has no description for kubectl explain"
            );
        }
    }

    #[test]
    fn status_serializes_the_documented_field_names() {
        let status = VolumeMigrationStatus {
            phase: Some(Phase::Registered),
            volume_id: Some("id-1".into()),
            ..Default::default()
        };
        let json = serde_json::to_value(&status).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"phase": "Registered", "volumeID": "id-1"})
        );
    }
}
