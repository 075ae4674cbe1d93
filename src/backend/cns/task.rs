//! Waiting for a vCenter `Task` by polling `info` through the PropertyCollector.

use std::time::Duration;

use serde::de::DeserializeOwned;
use tokio::time::Instant;

use crate::backend::{BackendError, ErrorClass, TaskState, op};

use super::fault::{self, names};
use super::session::SoapClient;
use super::soap::{Fault, MoRef, Returnval};
use super::transport::Endpoint;
use super::vim::{
    ObjectSpec, PropertyFilterSpec, PropertySpec, RetrieveOptions, RetrievePropertiesEx,
    RetrieveResult, TaskInfo,
};
use super::volumes::{self, BatchResult, VolumeOutcome};

const FIRST_POLL: Duration = Duration::from_millis(20);
const MAX_POLL: Duration = Duration::from_secs(2);

/// How a task ended.
#[derive(Debug)]
pub(crate) enum TaskOutcome<R> {
    /// `success`, with the task's result if it has one.
    Success(Option<R>),
    /// `error`, with the task's fault.
    Error(Box<Fault>),
}

/// Polls `task` until it succeeds or fails, or `timeout` passes (a transient
/// `TaskTimeout` error naming `what`).
pub(crate) async fn wait<R: DeserializeOwned>(
    client: &SoapClient,
    operation: &'static str,
    task: &MoRef,
    timeout: Duration,
    what: &str,
) -> Result<TaskOutcome<R>, BackendError> {
    let deadline = Instant::now() + timeout;
    let mut delay = FIRST_POLL;
    loop {
        let info = task_info::<R>(client, operation, task).await?;
        match info.state.as_str() {
            "success" => return Ok(TaskOutcome::Success(info.result)),
            "error" => {
                return Ok(TaskOutcome::Error(Box::new(Fault::from_localized(
                    info.error.unwrap_or_default(),
                ))));
            }
            state => tracing::trace!(%task, state, "waiting for vCenter task"),
        }
        if Instant::now() + delay > deadline {
            return Err(BackendError::new(
                ErrorClass::Transient,
                operation,
                names::TASK_TIMEOUT,
                format!(
                    "{what}: vCenter task {} did not finish within {timeout:?}",
                    task.value
                ),
            ));
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(MAX_POLL);
    }
}

/// What a CNS create's (or re-registration's) ended task says of its volume: the
/// result's first entry, or the task's own fault (`CnsAlreadyRegisteredFault` naming the
/// existing volume included).
pub(crate) fn create_outcome(outcome: TaskOutcome<BatchResult>) -> VolumeOutcome {
    match outcome {
        TaskOutcome::Success(result) => {
            volumes::volume_outcome(result.unwrap_or_default().volume_results.first())
        }
        TaskOutcome::Error(fault) => volumes::fault_outcome(*fault),
    }
}

/// The state of the `CnsCreateVolume` task `task` now, read once as [`wait`] reads it
/// (docs/design.md §4.4): a task vCenter no longer knows (`ManagedObjectNotFound`) is
/// [`TaskState::Unknown`].
pub(crate) async fn create_state(
    client: &SoapClient,
    task: &str,
) -> Result<TaskState, BackendError> {
    let moref = MoRef::new("Task", task);
    let info = match task_info::<BatchResult>(client, op::TASK_INFO, &moref).await {
        Ok(info) => info,
        Err(e) if e.fault == "ManagedObjectNotFound" => return Ok(TaskState::Unknown),
        Err(e) => return Err(e),
    };
    let outcome = match info.state.as_str() {
        "success" => TaskOutcome::Success(info.result),
        "error" => TaskOutcome::Error(Box::new(Fault::from_localized(
            info.error.unwrap_or_default(),
        ))),
        _ => return Ok(TaskState::Running),
    };
    Ok(match create_outcome(outcome) {
        VolumeOutcome::Ok(id) | VolumeOutcome::AlreadyRegistered(id, _) => TaskState::Succeeded(id),
        VolumeOutcome::Failed(fault) => TaskState::Failed(fault::from_fault(op::CREATE, &fault)),
        VolumeOutcome::Missing => TaskState::Unknown,
    })
}

async fn task_info<R: DeserializeOwned>(
    client: &SoapClient,
    operation: &'static str,
    task: &MoRef,
) -> Result<TaskInfo<R>, BackendError> {
    let request = RetrievePropertiesEx {
        this: &client.content().property_collector,
        spec_set: PropertyFilterSpec {
            prop_set: vec![PropertySpec {
                kind: "Task",
                all: false,
                path_set: vec!["info"],
            }],
            object_set: vec![ObjectSpec {
                obj: task.clone(),
                skip: false,
                select_set: Vec::new(),
            }],
        },
        options: RetrieveOptions { max_objects: None },
    };
    let response: Returnval<RetrieveResult<TaskInfo<R>>> = client
        .call(Endpoint::Sdk, operation, "RetrievePropertiesEx", &request)
        .await?;
    response
        .returnval
        .into_iter()
        .flat_map(|r| r.objects)
        .flat_map(|o| o.prop_set)
        .find(|p| p.name == "info")
        .map(|p| p.val)
        .ok_or_else(|| {
            fault::malformed(
                operation,
                client.sdk_url().as_str(),
                &format!("no info for task {}", task.value),
            )
        })
}
