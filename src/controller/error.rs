//! Why a reconciliation failed, one variant per action, and how to react to it.

use crate::k8s::migrations::EnsureError;
use crate::k8s::status::{WriteError, WriteErrorKind};
use crate::registrar::RegisterError;

/// Why a reconciliation failed. The message says what was being done on which object; the
/// cause is the `source`.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Adding volmig's finalizer failed.
    #[error("adding the finalizer to VolumeMigration {name}")]
    AddFinalizer {
        /// The object.
        name: String,
        /// The client error.
        source: kube::Error,
    },
    /// Removing volmig's finalizer failed.
    #[error("removing the finalizer from VolumeMigration {name}")]
    RemoveFinalizer {
        /// The object.
        name: String,
        /// The client error.
        source: kube::Error,
    },
    /// A status write failed.
    #[error("recording the status")]
    WriteStatus(#[from] WriteError),
    /// Recreating an object deleted by hand failed.
    #[error("recreating the VolumeMigration of a path still in use")]
    Recreate(#[source] EnsureError),
    /// Writing the CSI driver's cache objects failed.
    #[error("publishing the mapping of VolumeMigration {name} to the CSI driver's cache")]
    Publish {
        /// The object.
        name: String,
        /// The client error.
        source: kube::Error,
    },
    /// Unregistration failed.
    #[error("unregistering VolumeMigration {name}")]
    Unregister {
        /// The object.
        name: String,
        /// The registrar error.
        source: RegisterError,
    },
}

/// Result alias of the controller.
pub type Result<T, E = Error> = std::result::Result<T, E>;

fn kube_is_permanent(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(s) if s.code == 403 || s.code == 422 || s.code == 400)
}

impl Error {
    /// Every value [`Error::metric_label`] returns (the series start at zero).
    pub const METRIC_LABELS: &[&str] = &[
        "add_finalizer",
        "remove_finalizer",
        "write_status",
        "recreate",
        "unregister",
        "publish",
    ];

    /// The label of `volmig_reconcile_failures_total` for this error.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::AddFinalizer { .. } => "add_finalizer",
            Error::RemoveFinalizer { .. } => "remove_finalizer",
            Error::WriteStatus(_) => "write_status",
            Error::Recreate(_) => "recreate",
            Error::Unregister { .. } => "unregister",
            Error::Publish { .. } => "publish",
        }
    }

    /// True when retrying without a change of input will fail the same way (403, 422,
    /// a name collision): wait for a change instead of backing off.
    pub fn is_permanent(&self) -> bool {
        match self {
            Error::AddFinalizer { source, .. }
            | Error::RemoveFinalizer { source, .. }
            | Error::Publish { source, .. } => kube_is_permanent(source),
            Error::WriteStatus(e) => e.kind == WriteErrorKind::Rejected,
            Error::Recreate(EnsureError::NameCollision { .. }) => true,
            Error::Recreate(EnsureError::Kube { source, .. }) => kube_is_permanent(source),
            Error::Unregister { source, .. } => !source.is_retryable(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::volume_path::VolumePath;

    fn api_error(code: u16) -> kube::Error {
        kube::Error::Api(
            kube::core::Status::failure("test", "Test")
                .with_code(code)
                .boxed(),
        )
    }

    #[test]
    fn permanent_errors_wait_for_a_change() {
        let forbidden = Error::AddFinalizer {
            name: "x".into(),
            source: api_error(403),
        };
        assert!(forbidden.is_permanent());
        assert_eq!(forbidden.metric_label(), "add_finalizer");
        let unavailable = Error::RemoveFinalizer {
            name: "x".into(),
            source: api_error(503),
        };
        assert!(!unavailable.is_permanent());
        let collision = Error::Recreate(EnsureError::NameCollision {
            name: "x".into(),
            path: VolumePath::parse("[ds] a.vmdk").unwrap(),
            found: "[ds] b.vmdk".into(),
        });
        assert!(collision.is_permanent());
        let conflict = Error::WriteStatus(WriteError {
            name: "x".into(),
            kind: WriteErrorKind::Conflict,
            source: api_error(409),
        });
        assert!(
            !conflict.is_permanent(),
            "a conflict resolves on the next read"
        );
    }
}
