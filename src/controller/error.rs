//! Why a reconciliation failed, one enum per step of the pipeline (docs/design.md §4.6),
//! and how to react to it.

use crate::k8s::error_class::{after_kube_error, classify};
use crate::k8s::migrations::EnsureError;
use crate::k8s::status::WriteError;
use crate::registrar::RegisterError;
use crate::requeue::{ERROR_REQUEUE, Requeue};

/// Why a reconciliation failed: the step that failed, whose error says what was being done
/// on which object (the cause is its `source`). Registration failures are not here: the
/// registrar records them in the status and the reconcile requeues by them.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Taking charge of a live object: its finalizer.
    #[error(transparent)]
    Finalizer(#[from] FinalizerError),
    /// Recording what was found in the status.
    #[error(transparent)]
    Record(#[from] RecordError),
    /// Keeping the CSI driver's cache in step with the registration.
    #[error(transparent)]
    Publish(#[from] PublishError),
    /// Letting a deleted object go.
    #[error(transparent)]
    Finalize(#[from] FinalizeError),
}

/// Taking charge of a live object: volmig's finalizer goes on before anything else (its
/// removal belongs to [`FinalizeError`]).
#[derive(Debug, thiserror::Error)]
pub enum FinalizerError {
    /// Adding volmig's finalizer failed.
    #[error("adding the finalizer to VolumeMigration {name}")]
    Add {
        /// The object.
        name: String,
        /// The client error.
        source: kube::Error,
    },
}

/// Recording in the status: each write says what it records; the [`WriteError`] names
/// the object.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    /// The PV list was out of date.
    #[error("recording the PV list")]
    PvList(#[source] WriteError),
    /// The spec path does not parse.
    #[error("recording the invalid spec path")]
    InvalidPath(#[source] WriteError),
    /// The object's name belongs to another path (docs/design.md §2.6).
    #[error("recording the name collision")]
    NameCollision(#[source] WriteError),
}

impl RecordError {
    /// The failed status write.
    pub fn write(&self) -> &WriteError {
        match self {
            RecordError::PvList(e)
            | RecordError::InvalidPath(e)
            | RecordError::NameCollision(e) => e,
        }
    }
}

/// Writing the CSI driver's cache objects (docs/design.md §8.1).
#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    /// Publishing a Registered mapping failed.
    #[error("publishing the mapping of VolumeMigration {name} to the CSI driver's cache")]
    Publish {
        /// The object.
        name: String,
        /// The client error.
        source: kube::Error,
    },
    /// Removing the mapping of an unregistered volume failed.
    #[error("removing the mapping of VolumeMigration {name} from the CSI driver's cache")]
    Unpublish {
        /// The object.
        name: String,
        /// The client error.
        source: kube::Error,
    },
}

/// Letting a deleted object go (docs/design.md §5): unregister, drop the finalizer, bring
/// the object back when PVs still use its path.
#[derive(Debug, thiserror::Error)]
pub enum FinalizeError {
    /// Unregistration failed.
    #[error("unregistering VolumeMigration {name}")]
    Unregister {
        /// The object.
        name: String,
        /// The registrar error.
        source: RegisterError,
    },
    /// Removing volmig's finalizer (or reading the object again for it) failed.
    #[error("removing the finalizer from VolumeMigration {name}")]
    RemoveFinalizer {
        /// The object.
        name: String,
        /// The client error.
        source: kube::Error,
    },
    /// Recreating an object deleted by hand failed.
    #[error("recreating the VolumeMigration of a path still in use")]
    Recreate(#[source] EnsureError),
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

    /// The label of `volmig_reconcile_failures_total` for this error: the action that
    /// failed, one of [`Error::METRIC_LABELS`].
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Finalizer(FinalizerError::Add { .. }) => "add_finalizer",
            Error::Record(_) => "write_status",
            Error::Publish(_) => "publish",
            Error::Finalize(FinalizeError::Unregister { .. }) => "unregister",
            Error::Finalize(FinalizeError::RemoveFinalizer { .. }) => "remove_finalizer",
            Error::Finalize(FinalizeError::Recreate(_)) => "recreate",
        }
    }

    /// What this failure leads to (docs/design.md §4.6): a Kubernetes error by its class
    /// ([`classify`], [`after_kube_error`]); a name collision waits for a change; an
    /// unregistration by whether the registrar calls its error retryable.
    pub fn requeue(&self) -> Requeue {
        match self {
            Error::Finalizer(FinalizerError::Add { source, .. })
            | Error::Publish(
                PublishError::Publish { source, .. } | PublishError::Unpublish { source, .. },
            )
            | Error::Finalize(
                FinalizeError::RemoveFinalizer { source, .. }
                | FinalizeError::Recreate(EnsureError::Kube { source, .. }),
            ) => after_kube_error(classify(source)),
            Error::Record(e) => after_kube_error(classify(&e.write().source)),
            Error::Finalize(FinalizeError::Recreate(EnsureError::NameCollision { .. })) => {
                Requeue::AwaitChange
            }
            Error::Finalize(FinalizeError::Unregister { source, .. }) if source.is_retryable() => {
                Requeue::After(ERROR_REQUEUE)
            }
            Error::Finalize(FinalizeError::Unregister { .. }) => Requeue::AwaitChange,
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
    /// These are the requeues of errors a step returned. Answers a step takes as success
    /// never become an error: a 409 on the create of a driver object (the object of that
    /// name is read and recorded) and a 404 or 410 on the finalizer removal (the object is
    /// gone); the scenario table (`scenario_tests/requeue_table.rs`) runs those rows end
    /// to end.
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
        let kinds: [(&str, Kind); 6] = [
            ("add_finalizer", |source, _| {
                FinalizerError::Add {
                    name: "x".into(),
                    source,
                }
                .into()
            }),
            ("remove_finalizer", |source, _| {
                FinalizeError::RemoveFinalizer {
                    name: "x".into(),
                    source,
                }
                .into()
            }),
            ("publish", |source, _| {
                PublishError::Publish {
                    name: "x".into(),
                    source,
                }
                .into()
            }),
            ("publish", |source, _| {
                PublishError::Unpublish {
                    name: "x".into(),
                    source,
                }
                .into()
            }),
            ("write_status", |source, _| {
                RecordError::PvList(WriteError {
                    name: "x".into(),
                    kind: crate::k8s::status::write_error_kind(&source),
                    source,
                })
                .into()
            }),
            ("recreate", |source, path| {
                FinalizeError::Recreate(EnsureError::Kube {
                    name: path.object_name(),
                    source,
                })
                .into()
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

    /// Each step's message, with its causes, says what failed on which object.
    #[test]
    fn every_message_says_what_failed_on_which_object() {
        let write = |source| WriteError {
            name: "vm-1".into(),
            kind: crate::k8s::status::write_error_kind(&source),
            source,
        };
        let cases: [(Error, &str); 5] = [
            (
                FinalizerError::Add {
                    name: "vm-1".into(),
                    source: api_error(503),
                }
                .into(),
                "adding the finalizer to VolumeMigration vm-1: ",
            ),
            (
                RecordError::PvList(write(api_error(409))).into(),
                "recording the PV list: writing the status of VolumeMigration vm-1: ",
            ),
            (
                PublishError::Unpublish {
                    name: "vm-1".into(),
                    source: api_error(503),
                }
                .into(),
                "removing the mapping of VolumeMigration vm-1 from the CSI driver's cache: ",
            ),
            (
                FinalizeError::RemoveFinalizer {
                    name: "vm-1".into(),
                    source: api_error(503),
                }
                .into(),
                "removing the finalizer from VolumeMigration vm-1: ",
            ),
            (
                FinalizeError::Recreate(EnsureError::Kube {
                    name: "vm-1".into(),
                    source: api_error(503),
                })
                .into(),
                "recreating the VolumeMigration of a path still in use: creating VolumeMigration \
                 vm-1: ",
            ),
        ];
        for (error, start) in cases {
            let chain = crate::error_chain(&error);
            assert!(chain.starts_with(start), "{chain}");
        }
    }

    #[test]
    fn permanent_errors_wait_for_a_change() {
        let forbidden = Error::from(FinalizerError::Add {
            name: "x".into(),
            source: api_error(403),
        });
        assert!(forbidden.is_permanent());
        assert_eq!(forbidden.metric_label(), "add_finalizer");
        let unavailable = Error::from(FinalizeError::RemoveFinalizer {
            name: "x".into(),
            source: api_error(503),
        });
        assert!(!unavailable.is_permanent());
        let collision = Error::from(FinalizeError::Recreate(EnsureError::NameCollision {
            name: "x".into(),
            path: VolumePath::parse("[ds] a.vmdk").unwrap(),
            found: "[ds] b.vmdk".into(),
        }));
        assert!(collision.is_permanent());
        assert_eq!(collision.metric_label(), "recreate");
        let conflict = Error::from(RecordError::PvList(WriteError {
            name: "x".into(),
            kind: crate::k8s::status::WriteErrorKind::Conflict,
            source: api_error(409),
        }));
        assert!(
            !conflict.is_permanent(),
            "a conflict resolves on the next read"
        );
    }
}
