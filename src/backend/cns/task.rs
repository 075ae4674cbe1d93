//! Waiting for a vCenter `Task` by polling `info` through the PropertyCollector.

use std::time::Duration;

use serde::de::DeserializeOwned;
use tokio::time::Instant;

use crate::backend::{BackendError, ErrorClass};

use super::fault::{self, names};
use super::session::SoapClient;
use super::soap::{Fault, MoRef, Returnval};
use super::transport::Endpoint;
use super::vim::{
    ObjectSpec, PropertyFilterSpec, PropertySpec, RetrieveOptions, RetrievePropertiesEx,
    RetrieveResult, TaskInfo,
};

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
