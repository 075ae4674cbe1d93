//! Why a registrar operation failed ([`RegisterError`], with the status reason and retry
//! policy each failure maps to) and why a lookup found no volume ID ([`LookupError`]).

use std::time::Duration;

use super::{NotLeader, NotRegistrar, StoreError, StoreErrorKind, reason};
use crate::backend::{BackendError, ErrorClass};
use crate::volume_path::{PathError, VolumePath};

/// Why a registrar operation failed. Messages name the path and what failed; the cause
/// is the error's `source` (print the chain with [`crate::error_chain`]).
#[derive(Debug, thiserror::Error)]
pub enum RegisterError {
    /// The path is not a valid in-tree volume path.
    #[error(transparent)]
    InvalidPath(#[from] PathError),
    /// The vmdk does not exist; nothing was registered.
    #[error("disk {path} not found: {message}")]
    DiskNotFound {
        /// The missing vmdk.
        path: VolumePath,
        /// What vCenter said.
        message: String,
    },
    /// vCenter failed or refused the call.
    #[error("registering {path}")]
    Backend {
        /// The vmdk concerned.
        path: VolumePath,
        /// The backend error, with its class.
        source: BackendError,
    },
    /// A create may still be running in vCenter and the volume has not appeared yet; the
    /// path stays `Registering` and is looked at again after `retry_after`.
    #[error("registering {path}: a create may still be running in vCenter")]
    OutcomeUnknown {
        /// The vmdk concerned.
        path: VolumePath,
        /// When to look again.
        retry_after: Duration,
    },
    /// Reading or writing the status failed.
    #[error("recording the registration of {path}")]
    Store {
        /// The vmdk concerned.
        path: VolumePath,
        /// The store error.
        source: StoreError,
    },
    /// Not the leader: no backend call was made.
    #[error("{path}: not starting a backend call")]
    NotLeader {
        /// The vmdk concerned.
        path: VolumePath,
        /// Always [`NotLeader`].
        source: NotLeader,
    },
    /// The CSI driver's syncer registers now (or it is not known yet whether it does): no
    /// volume was found to adopt and none was created (docs/design.md §8.2).
    #[error("{path}: not creating a CNS volume")]
    NotRegistrar {
        /// The vmdk concerned.
        path: VolumePath,
        /// Who registers.
        source: NotRegistrar,
        /// When to look again for the driver's volume.
        retry_after: Duration,
    },
}

impl RegisterError {
    /// The `status.lastError.reason` for this error.
    pub fn reason(&self) -> &'static str {
        match self {
            RegisterError::InvalidPath(_) => reason::INVALID_PATH,
            RegisterError::DiskNotFound { .. } => reason::DISK_NOT_FOUND,
            RegisterError::Backend { source, .. }
                if source.fault == crate::backend::INVALID_LOGIN_FAULT =>
            {
                reason::INVALID_LOGIN
            }
            RegisterError::Backend { source, .. } => match source.class {
                ErrorClass::Permanent | ErrorClass::NotFound => reason::PERMANENT,
                ErrorClass::NotAuthenticated => reason::NOT_AUTHENTICATED,
                ErrorClass::Transient => reason::TRANSIENT,
            },
            RegisterError::OutcomeUnknown { .. } => reason::CREATE_OUTCOME_UNKNOWN,
            RegisterError::Store { source, .. } => match source.kind {
                StoreErrorKind::NameCollision { .. } => reason::NAME_COLLISION,
                _ => reason::TRANSIENT,
            },
            RegisterError::NotLeader { .. } => reason::TRANSIENT,
            RegisterError::NotRegistrar { .. } => reason::AWAITING_CSI_DRIVER,
        }
    }

    /// True when retrying later without a change of input may succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            RegisterError::InvalidPath(_) | RegisterError::DiskNotFound { .. } => false,
            RegisterError::Backend { source, .. } => source.class.is_retryable(),
            RegisterError::OutcomeUnknown { .. }
            | RegisterError::NotLeader { .. }
            | RegisterError::NotRegistrar { .. } => true,
            RegisterError::Store { source, .. } => source.is_retryable(),
        }
    }

    /// When to try again, if the error says (a create in flight).
    pub fn retry_after(&self) -> Option<Duration> {
        match self {
            RegisterError::OutcomeUnknown { retry_after, .. }
            | RegisterError::NotRegistrar { retry_after, .. } => Some(*retry_after),
            _ => None,
        }
    }
}

/// Returned by [`Registrar::lookup`] when the path has no stored volume ID.
#[derive(Debug, thiserror::Error)]
pub enum LookupError {
    /// Not registered yet; a caller should retry later.
    #[error("{path} is not registered yet (phase {phase}), retry later")]
    NotRegisteredYet {
        /// The path asked for.
        path: VolumePath,
        /// The stored phase, or `none` when nothing is stored.
        phase: String,
    },
    /// The status could not be read (or the object tracks another path).
    #[error(transparent)]
    Store(#[from] StoreError),
}
