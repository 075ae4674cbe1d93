//! Creates of the in-memory backend that outlive their caller: late creates
//! ([`Fault::LateCreate`], [`Fault::LostTask`]) and the tasks of [`Fault::HeldTask`]
//! creates, running until a test ends them and readable by MoRef value like a vCenter
//! task (docs/design.md §4.4).

use std::time::Duration;

use super::{Fault, InMemoryBackend, State, injected};
use crate::backend::{
    BackendError, CreateVolumeRequest, ErrorClass, Result, TaskState, VolumeId, op,
};

impl State {
    /// Completes the late creates that are due.
    pub(super) fn complete_due(&mut self) {
        let now = tokio::time::Instant::now();
        let (due, later): (Vec<_>, Vec<_>) = std::mem::take(&mut self.late)
            .into_iter()
            .partition(|(at, _)| *at <= now);
        self.late = later;
        for (_, request) in due {
            self.register(&request);
        }
    }

    /// Starts a running task for `request`; its MoRef value.
    pub(super) fn hold(&mut self, request: &CreateVolumeRequest) -> String {
        self.held_tasks += 1;
        let task = format!("task-{}", self.held_tasks);
        let running = (request.clone(), TaskState::Running);
        self.tasks.insert(task.clone(), running);
        task
    }
}

impl InMemoryBackend {
    /// Late creates ([`Fault::LateCreate`]) not completed yet.
    pub fn pending_creates(&self) -> usize {
        self.lock().late.len()
    }

    /// What [`crate::backend::VolumeBackend::create_task_state`] answers for `task`.
    pub(super) async fn task_state(&self, task: &str) -> Result<TaskState> {
        let (_g, fault) = self.enter(op::TASK_INFO).await;
        if let Some(Fault::Fail(class)) = fault {
            return Err(injected(class, op::TASK_INFO));
        }
        let s = self.lock();
        let state = s.tasks.get(task).map(|(_, state)| state.clone());
        Ok(state.unwrap_or(TaskState::Unknown))
    }

    /// The MoRef values of [`Fault::HeldTask`] tasks still running.
    pub fn running_tasks(&self) -> Vec<String> {
        let s = self.lock();
        let running = s
            .tasks
            .iter()
            .filter(|(_, (_, state))| *state == TaskState::Running);
        running.map(|(task, _)| task.clone()).collect()
    }

    /// Ends the running task `task`: `None` registers its volume, `Some(class)` fails it.
    pub fn end_task(&self, task: &str, error: Option<ErrorClass>) {
        let mut s = self.lock();
        let Some((request, _)) = s.tasks.get(task).cloned() else {
            return;
        };
        let state = match error {
            None => TaskState::Succeeded(s.register(&request)),
            Some(class) => TaskState::Failed(BackendError::new(
                class,
                op::CREATE,
                "CnsFault",
                format!("task {task} failed"),
            )),
        };
        s.tasks.insert(task.to_owned(), (request, state));
    }

    /// vCenter forgets the task `task` (its state reads `ManagedObjectNotFound`); a task
    /// still running then never lands.
    pub fn forget_task(&self, task: &str) {
        self.lock().tasks.remove(task);
    }

    /// Follows the [`Fault::HeldTask`] `task` for at most `follow`.
    pub(super) async fn follow(&self, task: &str, follow: Duration) -> Result<VolumeId> {
        let deadline = tokio::time::Instant::now() + follow;
        loop {
            let state = self.lock().tasks.get(task).map(|(_, state)| state.clone());
            match state {
                Some(TaskState::Succeeded(id)) => return Ok(id),
                Some(TaskState::Failed(e)) => return Err(e),
                Some(TaskState::Running) if tokio::time::Instant::now() < deadline => {}
                _ => {
                    let why = format!("task {task} did not finish within {follow:?}");
                    let timeout =
                        BackendError::new(ErrorClass::Transient, op::CREATE, "TaskTimeout", why);
                    return Err(timeout.after_send());
                }
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}
