//! The merge patch of `/status` each change writes (pure; docs/design.md §2.2).

use super::*;

fn time(t: jiff::Timestamp) -> Value {
    serde_json::to_value(Time(t)).unwrap_or(Value::Null)
}

fn conditions(now: jiff::Timestamp, registered: bool, reason: &str, message: &str) -> Value {
    let status = if registered { "True" } else { "False" };
    json!([
        {"type": condition::REGISTERED, "status": status, "reason": reason,
         "message": message, "lastTransitionTime": time(now)},
        {"type": condition::READY, "status": status, "reason": reason,
         "message": message, "lastTransitionTime": time(now)},
    ])
}

/// The merge patch of `/status` for one change (pure; `now` is injected).
pub fn status_patch(change: &StatusChange, now: jiff::Timestamp) -> Value {
    let status = match change {
        StatusChange::Registrar(update) => registrar_status(update, now),
        StatusChange::RegistrarWithPvs { update, extras } => {
            let mut s = registrar_status(update, now);
            if let (Some(s), Value::Object(pv)) = (
                s.as_object_mut(),
                pv_fields(&extras.pvs, extras.observed_generation),
            ) {
                s.extend(pv);
            }
            s
        }
        StatusChange::PersistentVolumes {
            pvs,
            observed_generation,
            pending,
        } => {
            let mut s = pv_fields(pvs, *observed_generation);
            if *pending {
                s["phase"] = json!(Phase::Pending.as_str());
            }
            s
        }
        StatusChange::InvalidPath { message } => json!({
            "phase": "Failed",
            "lastError": {"reason": reason::INVALID_PATH, "message": message, "time": time(now)},
            "nextRetryTime": null,
            "registeringToken": null,
            "conditions": conditions(now, false, reason::INVALID_PATH, message),
        }),
        StatusChange::VolumeGone { gone } => withdrawn(
            now,
            crate::k8s::events::reason::VOLUME_GONE,
            &format!(
                "CNS volume {gone} no longer exists; waiting for the CSI driver to register the \
                 path again"
            ),
        ),
        StatusChange::NameCollision { message } => json!({
            "phase": "Failed",
            "attempts": 0,
            "lastError": {"reason": reason::NAME_COLLISION, "message": message, "time": time(now)},
            "nextRetryTime": null,
            "registeringToken": null,
            "conditions": conditions(now, false, reason::NAME_COLLISION, message),
        }),
        StatusChange::Duplicates { ids } => json!({ "duplicateVolumeIDs": ids }),
        StatusChange::VolumeIdRepaired {
            volume_id,
            replaced,
        } => json!({
            "phase": "Registered",
            "volumeID": volume_id,
            "lastError": null,
            "nextRetryTime": null,
            "registeringToken": null,
            "protectedFromVMDelete": null,
            "conditions": conditions(
                now,
                true,
                crate::k8s::events::reason::VOLUME_ID_REPAIRED,
                &format!("CNS volume {volume_id} (the status held {replaced})"),
            ),
        }),
    };
    json!({ "status": status })
}

fn registrar_status(update: &StatusUpdate, now: jiff::Timestamp) -> Value {
    match update {
        StatusUpdate::Registering { attempts, token } => json!({
            "phase": "Registering",
            "attempts": attempts,
            "nextRetryTime": null,
            "registeringToken": token,
            "conditions": conditions(now, false, "Registering", "a CNS create may be in flight"),
        }),
        StatusUpdate::Registered {
            volume_id,
            disk_uuid,
            adopted,
            attempts,
            protected,
        } => {
            let how = if *adopted { "Adopted" } else { "Created" };
            let mut s = json!({
                "phase": "Registered",
                "volumeID": volume_id.0,
                "attempts": attempts,
                "lastError": null,
                "nextRetryTime": null,
                "registeringToken": null,
                "protectedFromVMDelete": protected,
                "registeredTime": time(now),
                "conditions": conditions(now, true, how, &format!("CNS volume {volume_id}")),
            });
            if let Some(uuid) = disk_uuid {
                s["diskUUID"] = json!(uuid);
            }
            s
        }
        StatusUpdate::Failed {
            reason,
            message,
            attempts,
            retry_after,
        } => {
            let next = retry_after
                .and_then(|d| jiff::SignedDuration::try_from(d).ok())
                .and_then(|d| now.checked_add(d).ok())
                .map_or(Value::Null, time);
            json!({
                "phase": "Failed",
                "attempts": attempts,
                "lastError": {"reason": reason, "message": message, "time": time(now)},
                "nextRetryTime": next,
                "registeringToken": null,
                "conditions": conditions(now, false, reason, message),
            })
        }
        StatusUpdate::TaskRecorded { token, task } => json!({
            "registeringTask": {"token": token, "task": task},
        }),
        StatusUpdate::Stalled { reason, message } => json!({
            "lastError": {"reason": reason, "message": message, "time": time(now)},
            "conditions": conditions(now, false, reason, message),
        }),
        StatusUpdate::Protected => json!({"protectedFromVMDelete": true}),
        StatusUpdate::Unregistering => json!({"phase": "Unregistering"}),
        StatusUpdate::Unregistered => withdrawn(now, "Unregistered", "CNS registration removed"),
    }
}

/// Back to `Pending` without a volume: every field of the registration cleared.
fn withdrawn(now: jiff::Timestamp, reason: &str, message: &str) -> Value {
    let mut status = json!({
        "phase": "Pending",
        "conditions": conditions(now, false, reason, message),
    });
    for cleared in REGISTRATION_FIELDS {
        status[cleared] = Value::Null;
    }
    status
}

/// The status fields a registration sets, which a withdrawn one clears.
const REGISTRATION_FIELDS: [&str; 5] = [
    "volumeID",
    "diskUUID",
    "registeredTime",
    "registeringToken",
    "protectedFromVMDelete",
];

#[cfg(test)]
mod tests {
    use super::super::stored_state;
    use super::*;

    #[test]
    fn a_recorded_task_counts_only_beside_its_own_marker() {
        let patch = status_patch(
            &StatusChange::Registrar(StatusUpdate::TaskRecorded {
                token: "a/1".into(),
                task: "task-7".into(),
            }),
            jiff::Timestamp::UNIX_EPOCH,
        );
        assert_eq!(
            patch,
            json!({"status": {"registeringTask": {"token": "a/1", "task": "task-7"}}}),
            "phase and marker stay"
        );
        let mut status: VolumeMigrationStatus = serde_json::from_value(json!({
            "phase": "Registering", "registeringToken": "a/1",
            "registeringTask": {"token": "a/1", "task": "task-7"},
        }))
        .unwrap();
        assert_eq!(stored_state(&status, None).task.as_deref(), Some("task-7"));
        status.registering_token = Some("b/2".into());
        assert_eq!(
            stored_state(&status, None).task,
            None,
            "another marker's task"
        );
        status.registering_token = Some("a/1".into());
        status.phase = Some(Phase::Registered);
        assert_eq!(stored_state(&status, None).task, None, "no marker, no task");
    }
}
