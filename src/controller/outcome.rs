//! Reports what a registration did: the metric, a log line and Events on the PVs (and,
//! for failures, on the VolumeMigration). Shared by the reconciler and full sync.

use std::time::Instant;

use tracing::warn;

use super::Context;
use crate::k8s::events::{EventType, reason as event_reason};
use crate::k8s::inline_volumes::is_pod_user;
use crate::metrics::RegistrationResult;
use crate::registrar::{RegisterError, reason};
use crate::volume_migration::VolumeMigration;
use crate::volume_path::VolumePath;

/// Registers `path` for `vm` through the registrar, then records the outcome. Nothing is
/// reported when the status already held the ID (someone reported it before), when this
/// replica is not the leader, or while a create may still be in flight.
pub async fn register_and_report(
    ctx: &Context,
    vm: &VolumeMigration,
    path: &VolumePath,
    pvs: &[String],
) -> Result<(), RegisterError> {
    let started = Instant::now();
    let (result, type_, event, metric, note) = match ctx.registrar.register(path).await {
        Ok(registration) if registration.unchanged => return Ok(()),
        Ok(registration) => {
            let metric = if registration.adopted {
                RegistrationResult::Adopted
            } else {
                RegistrationResult::Created
            };
            let note = format!("{path} is CNS volume {}", registration.volume_id);
            (
                Ok(()),
                EventType::Normal,
                event_reason::REGISTERED,
                metric,
                note,
            )
        }
        Err(error @ (RegisterError::NotLeader { .. } | RegisterError::OutcomeUnknown { .. })) => {
            return Err(error);
        }
        Err(error) => {
            let metric = match error.reason() {
                reason::DISK_NOT_FOUND => RegistrationResult::DiskNotFound,
                reason::INVALID_PATH => RegistrationResult::InvalidPath,
                _ => RegistrationResult::Failed,
            };
            let message = crate::error_chain(&error);
            warn!(%path, reason = error.reason(), error = %message, "registration failed");
            let note = format!("{}: {message}", error.reason());
            (
                Err(error),
                EventType::Warning,
                event_reason::REGISTRATION_FAILED,
                metric,
                note,
            )
        }
    };
    ctx.metrics.registration(metric, started.elapsed());
    // A success is told where users look, on the PVs; the VolumeMigration's status carries
    // it already (one Event per new PV, docs/design.md §2.2). A failure is told on both.
    // Inline pod volumes have no PV: a path only pods use is told on the VolumeMigration.
    let pvs: Vec<&String> = pvs.iter().filter(|u| !is_pod_user(u)).collect();
    if type_ == EventType::Warning || pvs.is_empty() {
        ctx.cluster
            .events
            .on_migration(vm, type_, event, note.clone())
            .await;
    }
    for pv in pvs {
        ctx.cluster
            .events
            .on_pv(pv, type_, event, note.clone())
            .await;
    }
    result
}
