//! Why a reconciliation failed, one variant per action, and how to react to it.

use crate::k8s::error_class::{after_kube_error, classify};
use crate::k8s::migrations::EnsureError;
use crate::k8s::status::WriteError;
use crate::registrar::RegisterError;
use crate::requeue::{ERROR_REQUEUE, Requeue};

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

    /// What this failure leads to (docs/design.md §4.6): a Kubernetes error by its class
    /// ([`classify`], [`after_kube_error`]); a name collision waits for a change; an
    /// unregistration by whether the registrar calls its error retryable.
    pub fn requeue(&self) -> Requeue {
        match self {
            Error::AddFinalizer { source, .. }
            | Error::RemoveFinalizer { source, .. }
            | Error::Publish { source, .. }
            | Error::Recreate(EnsureError::Kube { source, .. }) => {
                after_kube_error(classify(source))
            }
            Error::WriteStatus(e) => after_kube_error(classify(&e.source)),
            Error::Recreate(EnsureError::NameCollision { .. }) => Requeue::AwaitChange,
            Error::Unregister { source, .. } if source.is_retryable() => {
                Requeue::After(ERROR_REQUEUE)
            }
            Error::Unregister { .. } => Requeue::AwaitChange,
        }
    }

    /// True when retrying without a change of input will fail the same way (403, 422,
    /// a name collision): wait for a change instead of backing off.
    pub fn is_permanent(&self) -> bool {
        self.requeue() == Requeue::AwaitChange
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

    /// Every write kind against every answer class: (status code or timeout, requeue).
    #[test]
    fn every_write_kind_requeues_by_the_one_classification() {
        let after = Requeue::After(ERROR_REQUEUE);
        let rows: [(Option<u16>, Requeue); 11] = [
            (Some(400), Requeue::AwaitChange),
            (Some(401), after),
            (Some(403), Requeue::AwaitChange),
            (Some(404), after),
            (Some(409), after),
            (Some(410), after),
            (Some(422), Requeue::AwaitChange),
            (Some(429), after),
            (Some(500), after),
            (Some(503), after),
            (None, after),
        ];
        let failure = |code: Option<u16>| match code {
            Some(code) => api_error(code),
            None => kube::Error::Service(Box::new(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the request deadline passed",
            ))),
        };
        let path = VolumePath::parse("[ds] a.vmdk").unwrap();
        type Kind = fn(kube::Error, &VolumePath) -> Error;
        let kinds: [(&str, Kind); 5] = [
            ("add_finalizer", |source, _| Error::AddFinalizer {
                name: "x".into(),
                source,
            }),
            ("remove_finalizer", |source, _| Error::RemoveFinalizer {
                name: "x".into(),
                source,
            }),
            ("publish", |source, _| Error::Publish {
                name: "x".into(),
                source,
            }),
            ("write_status", |source, _| {
                Error::WriteStatus(WriteError {
                    name: "x".into(),
                    kind: crate::k8s::status::write_error_kind(&source),
                    source,
                })
            }),
            ("recreate", |source, path| {
                Error::Recreate(EnsureError::Kube {
                    name: path.object_name(),
                    source,
                })
            }),
        ];
        for (label, kind) in kinds {
            for (code, want) in rows {
                let error = kind(failure(code), &path);
                assert_eq!(error.metric_label(), label);
                assert_eq!(error.requeue(), want, "{label} after {code:?}");
            }
        }
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
            kind: crate::k8s::status::WriteErrorKind::Conflict,
            source: api_error(409),
        });
        assert!(
            !conflict.is_permanent(),
            "a conflict resolves on the next read"
        );
    }
}
