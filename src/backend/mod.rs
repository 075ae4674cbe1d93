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
}

/// One page of [`VolumeBackend::list_volumes`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VolumePage {
    /// The volumes on this page.
    pub volumes: Vec<CnsVolume>,
    /// Cursor of the next page; `None` on the last page.
    pub next: Option<String>,
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
        }
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
    /// [`super::VolumeBackend::protect_from_vm_delete`].
    pub const PROTECT: &str = "VslmSetVStorageObjectControlFlags";
    /// [`super::VolumeBackend::is_protected`].
    pub const IS_PROTECTED: &str = "VslmRetrieveVStorageObject";
    /// [`super::VolumeBackend::creation_time`] (the FCD's `createTime`).
    pub const CREATION_TIME: &str = "VslmRetrieveVStorageObject";
    /// `RegisterDisk`, part of [`super::VolumeBackend::create_volume`] on vCenter 7.0.0.
    pub const REGISTER_DISK: &str = "RegisterDisk";
}

/// How a volume is kept when a VM it is attached to is deleted (the FCD's
/// `keepAfterDeleteVm` control flag).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Protection {
    /// volmig set the flag (vCenter below 8.0.3).
    FlagSet,
    /// The vCenter sets the flag on registration itself (8.0.3 and later); nothing to do.
    ByRegistration,
}

impl Protection {
    /// True: both ways leave the volume protected (for `protectvolumefromvmdelete`).
    pub fn is_protected(self) -> bool {
        matches!(self, Protection::FlagSet | Protection::ByRegistration)
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

    /// Keeps the volume's disk when a VM it is attached to is deleted: sets the FCD's
    /// `keepAfterDeleteVm` flag where the vCenter does not do that on registration (below
    /// 8.0.3); otherwise does nothing and answers [`Protection::ByRegistration`].
    /// Idempotent. A volume that does not exist is an error of class
    /// [`ErrorClass::NotFound`]. Backends without the notion answer `Permanent`.
    async fn protect_from_vm_delete(&self, id: &VolumeId) -> Result<Protection> {
        let _ = id;
        Err(not_supported(op::PROTECT))
    }

    /// When the volume was created (the FCD's `createTime`), where the backend can tell;
    /// asked only for duplicates, whose oldest is kept (see [`selection`]). A volume that
    /// does not exist is an error of class [`ErrorClass::NotFound`].
    async fn creation_time(&self, id: &VolumeId) -> Result<Option<jiff::Timestamp>> {
        let _ = id;
        Ok(None)
    }

    /// Whether the volume's disk already carries `keepAfterDeleteVm` (always true where
    /// registration sets it). A volume that does not exist is an error of class
    /// [`ErrorClass::NotFound`].
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
