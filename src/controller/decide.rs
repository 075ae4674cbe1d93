//! What the VolumeMigration reconciler should do, as a pure function of what it read.

use std::time::Duration;

use super::PvDeletePolicy;
use crate::k8s::status::retry_due_in;
use crate::registrar::reason;
use crate::volume_migration::{FINALIZER, Phase, VolumeMigration};
use crate::volume_path::VolumePath;

/// What the reconciler read about one VolumeMigration.
#[derive(Debug, Clone)]
pub struct Observed<'a> {
    /// The object.
    pub migration: &'a VolumeMigration,
    /// The PVs that reference its path now (sorted).
    pub pvs: &'a [String],
    /// Current time.
    pub now: jiff::Timestamp,
    /// `--on-pv-delete`.
    pub on_pv_delete: PvDeletePolicy,
}

/// The main step of a reconciliation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Register (or adopt) the path.
    Register(VolumePath),
    /// Failed transiently; try again after this long.
    RetryAfter(Duration),
    /// The spec path is invalid: record it (once).
    RecordInvalidPath(String),
    /// The object's name belongs to another path (docs/design.md §2.6): report it (once), never
    /// register or publish anything through it.
    RecordNameCollision(VolumePath),
    /// The object is being deleted: unregister if asked, then drop the finalizer.
    Finalize {
        /// Unregister the CNS volume first (no PV is left and the policy says so).
        unregister: Option<VolumePath>,
        /// PVs still use the path: recreate the object once it is gone.
        recreate: Option<VolumePath>,
    },
    /// The object is being deleted while a create may be in flight: resolve it (record
    /// the volume that landed, or release the marker) before finalizing.
    Settle(VolumePath),
    /// Nothing to do until something changes (or the next full sync).
    Idle,
}

/// A Registered mapping to keep published in the CSI driver's cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Publish {
    /// The path.
    pub path: VolumePath,
    /// Its volume ID.
    pub volume_id: crate::backend::VolumeId,
    /// Whether the disk is protected from VM deletion.
    pub protected: bool,
}

/// Everything one reconciliation does, in order: finalizer, PV list, then the step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// Add volmig's finalizer first.
    pub add_finalizer: bool,
    /// Write this PV list to the status first.
    pub set_pvs: Option<Vec<String>>,
    /// The main step.
    pub step: Step,
    /// Keep this mapping published (after the step).
    pub publish: Option<Publish>,
}

fn has_finalizer(vm: &VolumeMigration) -> bool {
    vm.metadata
        .finalizers
        .as_ref()
        .is_some_and(|f| f.iter().any(|x| x == FINALIZER))
}

/// Reasons that will not change by retrying: wait for a spec change or a full sync.
fn is_permanent_reason(r: &str) -> bool {
    matches!(
        r,
        reason::DISK_NOT_FOUND | reason::INVALID_PATH | reason::PERMANENT | reason::INVALID_LOGIN
    )
}

/// Whether the status PV list (at most [`crate::volume_migration::MAX_STATUS_PVS`] names, plus the
/// count once the list is cut) no longer describes `pvs`. A complete list is its own count:
/// objects written before the count existed are not rewritten for it.
pub fn pv_list_stale(
    status: &crate::volume_migration::VolumeMigrationStatus,
    pvs: &[String],
) -> bool {
    let listed = status.persistent_volumes.as_deref().unwrap_or_default();
    listed != crate::volume_migration::status_pv_names(pvs)
        || (pvs.len() > crate::volume_migration::MAX_STATUS_PVS
            && status.persistent_volume_count != Some(pvs.len() as u64))
}

/// Decides the plan for one VolumeMigration.
pub fn decide(observed: &Observed<'_>) -> Decision {
    let vm = observed.migration;
    let status = vm.status.clone().unwrap_or_default();
    let path = VolumePath::parse(&vm.spec.volume_path);

    let collision = path
        .as_ref()
        .ok()
        .filter(|p| vm.metadata.name.as_deref() != Some(p.object_name().as_str()))
        .cloned();

    if vm.metadata.deletion_timestamp.is_some() {
        let step = if collision.is_some() {
            // Not volmig's object for this path: let it go without touching CNS.
            Step::Finalize {
                unregister: None,
                recreate: None,
            }
        } else if status.phase == Some(Phase::Registering)
            && has_finalizer(vm)
            && let Ok(path) = path
        {
            // A create may be in flight: finalizing now would lose its ID (and recreating
            // would start from an empty status). The registrar resolves it first
            // (docs/design.md §5.4): the unregistration waits for it and releases what
            // landed; otherwise the volume that landed is recorded, or the marker released.
            if observed.pvs.is_empty() && observed.on_pv_delete == PvDeletePolicy::Unregister {
                Step::Finalize {
                    unregister: Some(path),
                    recreate: None,
                }
            } else {
                Step::Settle(path)
            }
        } else if has_finalizer(vm) {
            let path = path.ok();
            let still_used = !observed.pvs.is_empty();
            let holds_volume = status.volume_id.is_some()
                || matches!(
                    status.phase,
                    Some(Phase::Registering | Phase::Unregistering | Phase::Failed)
                );
            Step::Finalize {
                unregister: path.clone().filter(|_| {
                    !still_used
                        && holds_volume
                        && observed.on_pv_delete == PvDeletePolicy::Unregister
                }),
                recreate: path.filter(|_| still_used),
            }
        } else {
            Step::Idle
        };
        return Decision {
            add_finalizer: false,
            set_pvs: None,
            step,
            publish: None,
        };
    }

    if let Some(path) = collision {
        let recorded = status
            .last_error
            .as_ref()
            .is_some_and(|l| l.reason == reason::NAME_COLLISION);
        return Decision {
            add_finalizer: false,
            set_pvs: None,
            publish: None,
            step: if recorded {
                Step::Idle
            } else {
                Step::RecordNameCollision(path)
            },
        };
    }

    let set_pvs = pv_list_stale(&status, observed.pvs).then(|| observed.pvs.to_vec());
    let mut plan = Decision {
        add_finalizer: !has_finalizer(vm),
        set_pvs,
        step: Step::Idle,
        publish: None,
    };

    let path = match path {
        Ok(path) => path,
        Err(e) => {
            let recorded = status
                .last_error
                .as_ref()
                .is_some_and(|l| l.reason == reason::INVALID_PATH);
            if !recorded {
                plan.step = Step::RecordInvalidPath(e.to_string());
            }
            return plan;
        }
    };
    if observed.pvs.is_empty() {
        // Unused paths are registered by nobody; full sync handles their deletion.
        return plan;
    }
    if status.phase == Some(Phase::Registered)
        && let Some(id) = &status.volume_id
    {
        plan.publish = Some(Publish {
            path: path.clone(),
            volume_id: crate::backend::VolumeId(id.clone()),
            protected: status.protected_from_vm_delete == Some(true),
        });
    }
    plan.step = match status.phase {
        Some(Phase::Registered) if status.volume_id.is_some() => Step::Idle,
        Some(Phase::Failed) => {
            let permanent = status
                .last_error
                .as_ref()
                .is_some_and(|l| is_permanent_reason(&l.reason));
            match retry_due_in(&status, observed.now) {
                _ if permanent => Step::Idle,
                Some(wait) if !wait.is_zero() => Step::RetryAfter(wait),
                _ => Step::Register(path),
            }
        }
        _ => Step::Register(path),
    };
    plan
}

#[cfg(test)]
#[path = "decide_tests.rs"]
mod tests;
