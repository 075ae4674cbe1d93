//! Label values and label sets of volmig's metrics.

use std::fmt::{self, Write as _};

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue, LabelValueEncoder};

use crate::volume_migration::Phase;

/// Declares a closed set of label values with a `snake_case` spelling.
macro_rules! label_enum {
    ($(#[$doc:meta])* $name:ident { $($(#[$vdoc:meta])* $variant:ident => $text:literal,)+ }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$vdoc])* $variant,)+
        }

        impl $name {
            /// Every value, in declaration order.
            pub const ALL: &[$name] = &[$($name::$variant,)+];

            /// The label value.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)+
                }
            }
        }

        impl EncodeLabelValue for $name {
            fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> fmt::Result {
                encoder.write_str(self.as_str())
            }
        }
    };
}

label_enum! {
    /// How one registration ended (label `result` of `volmig_registrations_total`).
    RegistrationResult {
        /// A new CNS volume was created.
        Created => "created",
        /// An existing CNS volume for the vmdk was adopted.
        Adopted => "adopted",
        /// The attempt failed (backend error, retries exhausted).
        Failed => "failed",
        /// The vmdk does not exist.
        DiskNotFound => "disk_not_found",
        /// The volume path is malformed.
        InvalidPath => "invalid_path",
    }
}

label_enum! {
    /// A repair made by a full-sync pass (label `action` of
    /// `volmig_full_sync_actions_total`).
    SyncAction {
        /// Created a missing VolumeMigration.
        CreateMigration => "create_migration",
        /// Retried a `Failed` VolumeMigration.
        RetryFailed => "retry_failed",
        /// Re-registered a volume whose ID vanished from CNS.
        Reregister => "reregister",
        /// Found a duplicate CNS volume for one vmdk.
        Duplicate => "duplicate",
        /// Found an orphan volmig-named CNS volume.
        Orphan => "orphan",
        /// Unregistered an orphan (`--gc-orphans`).
        GcOrphan => "gc_orphan",
        /// Removed a deleted PV from a VolumeMigration.
        RemovePv => "remove_pv",
        /// Deleted a VolumeMigration no PV references any more.
        DeleteMigration => "delete_migration",
        /// Found a CSI driver cache object mapping a path to another disk's volume.
        ForeignDriverId => "foreign_driver_id",
    }
}

label_enum! {
    /// Where the time of one registration inside the registrar went (label `stage` of
    /// `volmig_registration_stage_seconds`). The stages of one registration add up to its
    /// time in the registrar.
    RegistrationStage {
        /// Waiting for the per-vmdk lock (another operation on the same path).
        PathLockWait => "path_lock_wait",
        /// Waiting for one of the `--max-concurrent-registrations` backend slots and the
        /// `--vc-requests-per-second` limiter, summed over the registration's calls.
        BackendSlotWait => "backend_slot_wait",
        /// Calls to vCenter (lookups, the create and its task, protection), summed.
        VcenterCall => "vcenter_call",
        /// Reading the stored status (the VolumeMigration) before deciding.
        StatusRead => "status_read",
        /// Writing the `Registering` write-ahead (made while holding the create's backend
        /// slot).
        StatusWriteAhead => "status_write_ahead",
        /// Writing the outcome: the volume ID (`Registered`) or the failure.
        StatusWriteResult => "status_write_result",
        /// Everything else: retry backoff, waiting for a create in flight, CPU.
        Other => "other",
    }
}

label_enum! {
    /// Which action of a reconcile failed (label `reason` of
    /// `volmig_reconcile_failures_total`): the controller's error names its own with
    /// `controller::Error::metric_label`, and a test keeps both lists equal. The series
    /// start at zero for each value.
    ReconcileFailure {
        /// Adding volmig's finalizer.
        AddFinalizer => "add_finalizer",
        /// Removing volmig's finalizer.
        RemoveFinalizer => "remove_finalizer",
        /// A status write.
        WriteStatus => "write_status",
        /// Recreating an object deleted by hand.
        Recreate => "recreate",
        /// Unregistration.
        Unregister => "unregister",
        /// Writing the CSI driver's cache objects.
        Publish => "publish",
    }
}

label_enum! {
    /// The outcome class of one backend call (label `result` of
    /// `volmig_backend_requests_total`).
    BackendResult {
        /// The call succeeded.
        Ok => "ok",
        /// [`ErrorClass::Transient`](crate::backend::ErrorClass::Transient).
        Transient => "transient",
        /// [`ErrorClass::Permanent`](crate::backend::ErrorClass::Permanent).
        Permanent => "permanent",
        /// [`ErrorClass::NotAuthenticated`](crate::backend::ErrorClass::NotAuthenticated).
        NotAuthenticated => "not_authenticated",
        /// [`ErrorClass::NotFound`](crate::backend::ErrorClass::NotFound).
        NotFound => "not_found",
    }
}

/// The label value of a [`Phase`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) struct PhaseValue(pub(super) Phase);

impl EncodeLabelValue for PhaseValue {
    fn encode(&self, encoder: &mut LabelValueEncoder<'_>) -> fmt::Result {
        encoder.write_str(self.0.as_str())
    }
}

/// Every phase, for zero-initialising `volmig_volumes`.
pub(super) const PHASES: [Phase; 5] = [
    Phase::Pending,
    Phase::Registering,
    Phase::Registered,
    Phase::Failed,
    Phase::Unregistering,
];

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(super) struct RegistrationLabels {
    pub(super) result: RegistrationResult,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(super) struct PhaseLabels {
    pub(super) phase: PhaseValue,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(super) struct DryRunLabels {
    pub(super) source: String,
    pub(super) action: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(super) struct ActionLabels {
    pub(super) action: SyncAction,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(super) struct PassLabels {
    pub(super) result: &'static str,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(super) struct BackendLabels {
    pub(super) operation: &'static str,
    pub(super) result: BackendResult,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(super) struct StageLabels {
    pub(super) stage: RegistrationStage,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(super) struct ModeLabels {
    pub(super) mode: &'static str,
}

/// The values of `volmig_registrar_mode`'s `mode` label.
pub(super) const REGISTRAR_MODES: [&str; 4] = ["unknown", "own", "follow", "hold"];

#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(super) struct OperationLabels {
    pub(super) operation: &'static str,
}

pub(super) fn pass_labels(ok: bool) -> PassLabels {
    PassLabels {
        result: if ok { "ok" } else { "failed" },
    }
}

/// Labels of `volmig_build_info`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(super) struct BuildLabels {
    /// The crate version.
    pub(super) version: &'static str,
    /// Operating system the binary was built for.
    pub(super) os: &'static str,
    /// CPU architecture the binary was built for.
    pub(super) arch: &'static str,
}

impl BuildLabels {
    pub(super) const CURRENT: BuildLabels = BuildLabels {
        version: env!("CARGO_PKG_VERSION"),
        os: std::env::consts::OS,
        arch: std::env::consts::ARCH,
    };
}

/// Labels of `volmig_reconcile_failures_total`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, EncodeLabelSet)]
pub(super) struct ReasonLabels {
    pub(super) reason: String,
}
