//! What one volume's entry of a CNS batch result (or a task's own fault) means.

use super::*;

/// The outcome of one volume in a CNS batch result.
#[derive(Debug)]
pub(crate) enum VolumeOutcome {
    /// The volume ID, without fault.
    Ok(VolumeId),
    /// CNS says the disk is registered already and names its volume.
    AlreadyRegistered(VolumeId, Fault),
    /// A fault for this volume.
    Failed(Fault),
    /// The batch holds no result.
    Missing,
}

/// Interprets a single-volume batch result (or the task's own fault).
pub(crate) fn volume_outcome(result: Option<&VolumeOperationResult>) -> VolumeOutcome {
    let Some(result) = result else {
        return VolumeOutcome::Missing;
    };
    match &result.fault {
        Some(fault) => fault_outcome(Fault::from_localized(fault.clone())),
        None => match &result.volume_id {
            Some(id) if !id.id.is_empty() => VolumeOutcome::Ok(VolumeId(id.id.clone())),
            _ => VolumeOutcome::Missing,
        },
    }
}

/// A fault, unless it is `CnsAlreadyRegisteredFault` carrying a volume ID.
pub(crate) fn fault_outcome(fault: Fault) -> VolumeOutcome {
    if fault.name == "CnsAlreadyRegisteredFault"
        && let Some(id) = fault.data.volume_id.as_ref().filter(|id| !id.id.is_empty())
    {
        return VolumeOutcome::AlreadyRegistered(VolumeId(id.id.clone()), fault);
    }
    VolumeOutcome::Failed(fault)
}

/// A delete fault: like any fault, except that a CNS fault saying "not found" counts as
/// [`ErrorClass::NotFound`].
pub(crate) fn delete_error(operation: &'static str, fault: &Fault) -> BackendError {
    let mut err = fault::from_fault(operation, fault);
    let text = fault.message.to_ascii_lowercase();
    if err.class == ErrorClass::Transient
        && fault.name.starts_with("Cns")
        && (text.contains("not found") || text.contains("could not be found"))
    {
        err.class = ErrorClass::NotFound;
    }
    err
}

/// The error for a delete whose batch result does not mention the volume.
pub(crate) fn volume_not_found(operation: &'static str, id: &VolumeId) -> BackendError {
    BackendError::new(
        ErrorClass::NotFound,
        operation,
        names::VOLUME_NOT_FOUND,
        format!("CNS volume {id} does not exist"),
    )
}
