//! The seam between the registrar and vCenter: one trait, one error type, two backends
//! (the vSphere CNS backend over SOAP and an in-memory backend for tests).

use std::fmt;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::volume_path::VolumePath;

pub mod cns;
#[cfg(any(test, feature = "testing"))]
pub mod memory;
pub mod metered;
pub mod on_demand;
pub mod selection;

/// A CNS volume ID (`CnsVolumeId.id`), opaque to volmig.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct VolumeId(pub String);

impl fmt::Display for VolumeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<&str> for VolumeId {
    fn from(value: &str) -> Self {
        Self(value.to_owned())
    }
}

/// What the backend knows about one registered CNS volume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CnsVolume {
    /// The CNS volume ID.
    pub id: VolumeId,
    /// The CNS volume name (volmig's are `volmig-<sha256>`).
    pub name: String,
    /// The backing vmdk, canonical, when CNS reports one that parses.
    pub backing_path: Option<VolumePath>,
    /// When CNS created the volume, if it says; used to keep the oldest of duplicates.
    pub created: Option<jiff::Timestamp>,
    /// The container clusters its metadata names (`containerCluster.clusterId` and every
    /// `containerClusterArray` entry), without repeats; empty when CNS reports none. Only
    /// a volume of this cluster alone can be its orphan (docs/design.md §6.4).
    pub cluster_ids: Vec<String>,
}

/// Everything needed to register one vmdk as a CNS volume.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateVolumeRequest {
    /// The vmdk to register.
    pub path: VolumePath,
    /// The deterministic CNS volume name (the idempotency key).
    pub name: String,
    /// CNS container-cluster ID written on the registration.
    pub cluster_id: String,
    /// Optional storage policy name from the VolumeMigration spec.
    pub storage_policy_name: Option<String>,
    /// Asked immediately before the create request is written, after every preparation
    /// (policy resolution, `RegisterDisk`): an `Err` calls the create off unsent
    /// (docs/design.md §4.9).
    pub fence: SendFence,
}

/// The fault name of a create its [`SendFence`] called off unsent.
pub const CREATE_CALLED_OFF: &str = "CreateCalledOff";

/// The last check before a create is sent: whether this replica may still send it; and
/// who hears of the create's vCenter task once it was sent (docs/design.md §4.4).
#[derive(Clone, Default)]
pub struct SendFence {
    check: Option<std::sync::Arc<FenceCheck>>,
    task: Option<std::sync::Arc<TaskSink>>,
}

/// The check of a [`SendFence`].
type FenceCheck = dyn Fn() -> Result<(), String> + Send + Sync;
/// Who hears of a create's task (see [`SendFence::with_task_sink`]).
type TaskSink = dyn Fn(&str) + Send + Sync;

impl SendFence {
    /// No check: the create is always sent.
    pub fn none() -> Self {
        Self::default()
    }

    /// Checks `check` right before sending.
    pub fn new(check: impl Fn() -> Result<(), String> + Send + Sync + 'static) -> Self {
        Self {
            check: Some(std::sync::Arc::new(check)),
            task: None,
        }
    }

    /// Tells `sink` the MoRef value of the create's task (`task-123`) as soon as vCenter
    /// answered the create with it.
    #[must_use]
    pub fn with_task_sink(mut self, sink: impl Fn(&str) + Send + Sync + 'static) -> Self {
        self.task = Some(std::sync::Arc::new(sink));
        self
    }

    /// `Ok` when the create may be sent now; else why not.
    pub fn check(&self) -> Result<(), String> {
        self.check.as_ref().map_or(Ok(()), |check| check())
    }

    /// Called by a backend once the create was sent and vCenter runs it as `task`.
    pub fn task_started(&self, task: &str) {
        if let Some(sink) = &self.task {
            sink(task);
        }
    }
}

impl fmt::Debug for SendFence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.check.is_some() {
            "SendFence(set)"
        } else {
            "SendFence(none)"
        })
    }
}

/// Fences compare equal: a request is the same request whoever fences it.
impl PartialEq for SendFence {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for SendFence {}

/// One page of [`VolumeBackend::list_volumes`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VolumePage {
    /// The volumes on this page.
    pub volumes: Vec<CnsVolume>,
    /// Cursor of the next page; `None` on the last page.
    pub next: Option<String>,
}

/// What vCenter says of a create's task, read by its MoRef (docs/design.md §4.4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaskState {
    /// Queued or running: the create may still land.
    Running,
    /// Ended with a volume: the one it created, or the existing one a
    /// `CnsAlreadyRegisteredFault` names, read as the create itself reads its result.
    Succeeded(VolumeId),
    /// Ended in error: the create can no longer land.
    Failed(BackendError),
    /// vCenter does not know the task (`ManagedObjectNotFound`: purged, or another
    /// vCenter), or it ended without naming a volume: nothing is proven either way.
    Unknown,
}

/// How the caller should react to a backend error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorClass {
    /// Network trouble, 5xx, busy server, conflicts: retry with backoff.
    Transient,
    /// Will fail the same way until something changes (bad input, permission denied).
    Permanent,
    /// The session is gone or the credentials are wrong.
    NotAuthenticated,
    /// The disk or volume does not exist.
    NotFound,
}

impl ErrorClass {
    /// True for classes worth retrying without a change of input.
    pub fn is_retryable(self) -> bool {
        matches!(self, ErrorClass::Transient | ErrorClass::NotAuthenticated)
    }
}

/// An error from a backend call, with its class, the fault name and the server's message
/// (kept for `status.lastError`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{operation} failed ({fault}): {message}")]
pub struct BackendError {
    /// How to react.
    pub class: ErrorClass,
    /// Which call failed, e.g. `CnsCreateVolume`.
    pub operation: &'static str,
    /// Short machine-readable fault name, e.g. `FileNotFound`, `CnsFault`, `Timeout`.
    pub fault: String,
    /// Human-readable detail (never credentials).
    pub message: String,
    /// True when the call's request had been sent and vCenter may still carry it out (a
    /// create whose task could not be followed to its end): whatever the class, the
    /// outcome is unknown (docs/design.md §4.8).
    pub outcome_unknown: bool,
}

impl BackendError {
    /// Builds an error of `class` for `operation`.
    pub fn new(
        class: ErrorClass,
        operation: &'static str,
        fault: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Self {
            class,
            operation,
            fault: fault.into(),
            message: message.into(),
            outcome_unknown: false,
        }
    }

    /// The create was called off by its [`SendFence`] before its request was written:
    /// nothing was sent.
    pub fn called_off(operation: &'static str, why: impl Into<String>) -> Self {
        Self::new(ErrorClass::Permanent, operation, CREATE_CALLED_OFF, why)
    }

    /// True for [`Self::called_off`] errors.
    pub fn is_called_off(&self) -> bool {
        self.fault == CREATE_CALLED_OFF && !self.outcome_unknown
    }

    /// The same error, marked as coming after the request was sent (its outcome unknown).
    #[must_use]
    pub fn after_send(mut self) -> Self {
        self.outcome_unknown = true;
        self
    }

    /// True when the call may still take effect in vCenter: a transient failure (timeout,
    /// lost reply) or any error after the request was sent.
    pub fn may_still_complete(&self) -> bool {
        self.outcome_unknown || self.class == ErrorClass::Transient
    }
}

/// The fault name of rejected credentials (vim25 `InvalidLogin`).
pub const INVALID_LOGIN_FAULT: &str = "InvalidLogin";

/// Result alias for backend calls.
pub type Result<T, E = BackendError> = std::result::Result<T, E>;

/// Operation names, shared by backends, metrics and call counters.
pub mod op {
    /// [`super::VolumeBackend::disk_uuid`].
    pub const DISK_UUID: &str = "QueryVirtualDiskUuid";
    /// [`super::VolumeBackend::find_volumes`].
    pub const FIND: &str = "CnsQueryVolume";
    /// [`super::VolumeBackend::create_volume`].
    pub const CREATE: &str = "CnsCreateVolume";
    /// [`super::VolumeBackend::delete_volume`].
    pub const DELETE: &str = "CnsDeleteVolume";
    /// [`super::VolumeBackend::list_volumes`].
    pub const LIST: &str = "CnsQueryAllVolume";
    /// [`super::VolumeBackend::protect_from_vm_delete`] (named after its call below
    /// vCenter 8.0.3; from 8.0.3 it is a `CnsCreateVolume` by the volume's ID).
    pub const PROTECT: &str = "VslmSetVStorageObjectControlFlags";
    /// [`super::VolumeBackend::is_protected`].
    pub const IS_PROTECTED: &str = "VslmRetrieveVStorageObject";
    /// [`super::VolumeBackend::creation_time`] (the FCD's `createTime`).
    pub const CREATION_TIME: &str = "VslmRetrieveVStorageObject";
    /// [`super::VolumeBackend::create_task_state`] (the task's `info`).
    pub const TASK_INFO: &str = "RetrieveTaskInfo";
    /// `RegisterDisk`, part of [`super::VolumeBackend::create_volume`] on vCenter 7.0.0.
    pub const REGISTER_DISK: &str = "RegisterDisk";
}

/// What [`VolumeBackend::protect_from_vm_delete`] achieved for the FCD's
/// `keepAfterDeleteVm` control flag (the disk is kept when a VM it is attached to is
/// deleted). Only the first three are protection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Protection {
    /// volmig set the flag through VSLM and read it back set (vCenter below 8.0.3).
    FlagSet,
    /// volmig's own registration of the volume, just made, set the flag (8.0.3 and later).
    ByRegistration,
    /// volmig registered the existing volume again by its ID, as the CSI driver protects
    /// one from 8.0.3 on; CNS set the flag (it answers success or `AlreadyRegistered`).
    ByReRegistration,
    /// volmig set the flag, but reading it back finds it unset: not protected.
    NotKept,
}

impl Protection {
    /// True when volmig set or verified the flag (for `protectedFromVMDelete` and
    /// `protectvolumefromvmdelete`).
    pub fn is_protected(self) -> bool {
        matches!(
            self,
            Protection::FlagSet | Protection::ByRegistration | Protection::ByReRegistration
        )
    }
}

fn not_supported(operation: &'static str) -> BackendError {
    BackendError::new(
        ErrorClass::Permanent,
        operation,
        "NotSupported",
        format!("this backend does not implement {operation}"),
    )
}

/// What volmig needs from vCenter. Implementations must be safe to call concurrently.
#[async_trait]
pub trait VolumeBackend: Send + Sync + 'static {
    /// Checks that the vmdk exists and returns its disk UUID.
    /// A missing file is an error of class [`ErrorClass::NotFound`].
    async fn disk_uuid(&self, path: &VolumePath) -> Result<String>;

    /// CNS volumes whose name is `name` or whose backing disk is `path`.
    /// Implementations verify both client-side: servers may ignore filters.
    async fn find_volumes(&self, name: &str, path: &VolumePath) -> Result<Vec<CnsVolume>>;

    /// Registers the vmdk as a CNS volume and returns the new ID. Not idempotent on the
    /// server (vCenter hands out a new ID per call); idempotency is the registrar's job.
    async fn create_volume(&self, request: &CreateVolumeRequest) -> Result<VolumeId>;

    /// The state of the create task `task` (its MoRef value, as a [`SendFence`]'s task
    /// sink heard it): `TaskInfo.state`, `result` and `error`. Backends without tasks
    /// answer [`TaskState::Unknown`].
    async fn create_task_state(&self, task: &str) -> Result<TaskState> {
        let _ = task;
        Ok(TaskState::Unknown)
    }

    /// Unregisters a CNS volume with `deleteDisk=false`: the vmdk stays.
    /// A volume that does not exist is an error of class [`ErrorClass::NotFound`].
    async fn delete_volume(&self, id: &VolumeId) -> Result<()>;

    /// One page of all CNS volumes; pass the previous page's `next` to continue.
    async fn list_volumes(&self, cursor: Option<String>) -> Result<VolumePage>;

    /// The CNS volumes among `ids` that exist (e.g. IDs the CSI driver's cache holds).
    /// The default lists every volume; backends with a server-side filter override it.
    async fn volumes_by_id(&self, ids: &[VolumeId]) -> Result<Vec<CnsVolume>> {
        let all = list_all_volumes(self).await?;
        Ok(all.into_iter().filter(|v| ids.contains(&v.id)).collect())
    }

    /// Whether this vCenter's CNS answers a create of a disk that already backs a volume
    /// with `CnsAlreadyRegisteredFault` (7.0 Update 1 and later) instead of a second
    /// volume; `None` while unknown (not connected yet). The CSI driver's syncer starts
    /// every term with an empty cache and registers what it misses, so only on such a
    /// vCenter may volmig hand it the Lease (docs/design.md §8.2).
    fn refuses_re_registration(&self) -> Option<bool> {
        None
    }

    /// Keeps the volume's disk when a VM it is attached to is deleted (the FCD's
    /// `keepAfterDeleteVm` flag), as the vSphere CSI driver does: below 8.0.3 sets the flag
    /// through VSLM and reads it back; from 8.0.3 registers the volume again by its ID
    /// (the volume this backend just created is protected by that create). Never answers a
    /// protecting [`Protection`] without a call that set or read the flag. Idempotent. A
    /// volume that does not exist is an error of class [`ErrorClass::NotFound`]. Backends
    /// without the notion answer `Permanent`. `fence` is asked right before a registration
    /// is sent (from 8.0.3 protecting is a create: only the registrar may send it,
    /// docs/design.md §8.2); a refusal is a [`BackendError::called_off`] error.
    async fn protect_from_vm_delete(&self, id: &VolumeId, fence: &SendFence) -> Result<Protection> {
        let _ = (id, fence);
        Err(not_supported(op::PROTECT))
    }

    /// When the volume was created (the FCD's `createTime`), where the backend can tell;
    /// asked only for duplicates, whose oldest is kept (see [`selection`]). A volume that
    /// does not exist is an error of class [`ErrorClass::NotFound`].
    async fn creation_time(&self, id: &VolumeId) -> Result<Option<jiff::Timestamp>> {
        let _ = id;
        Ok(None)
    }

    /// Whether the volume's disk carries `keepAfterDeleteVm`, as vCenter reports it now
    /// (read, never assumed from the release). A volume that does not exist is an error of
    /// class [`ErrorClass::NotFound`].
    async fn is_protected(&self, id: &VolumeId) -> Result<bool> {
        let _ = id;
        Err(not_supported(op::IS_PROTECTED))
    }
}

/// Lists every CNS volume by following the cursor to the end.
pub async fn list_all_volumes<B: VolumeBackend + ?Sized>(backend: &B) -> Result<Vec<CnsVolume>> {
    let mut all = Vec::new();
    let mut cursor = None;
    loop {
        let page = backend.list_volumes(cursor).await?;
        all.extend(page.volumes);
        match page.next {
            Some(next) => cursor = Some(next),
            None => return Ok(all),
        }
    }
}
