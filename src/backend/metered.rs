//! A [`VolumeBackend`] decorator that records every call in [`Metrics`]: operation, result
//! class and latency (`volmig_backend_requests_total`,
//! `volmig_backend_request_duration_seconds`).

use std::future::Future;
use std::sync::Arc;

use async_trait::async_trait;
use tokio::time::Instant;

use super::{
    BackendError, CnsVolume, CreateVolumeRequest, ErrorClass, Protection, Result, SendFence,
    TaskState, VolumeBackend, VolumeId, VolumePage, op,
};
use crate::metrics::{BackendResult, Metrics};
use crate::volume_path::VolumePath;

/// The label value of an error class.
impl From<ErrorClass> for BackendResult {
    fn from(class: ErrorClass) -> Self {
        match class {
            ErrorClass::Transient => BackendResult::Transient,
            ErrorClass::Permanent => BackendResult::Permanent,
            ErrorClass::NotAuthenticated => BackendResult::NotAuthenticated,
            ErrorClass::NotFound => BackendResult::NotFound,
        }
    }
}

impl BackendResult {
    /// The class of a backend call's result (the backend owns the mapping of its error
    /// classes to the metric's label values: metrics imports nothing from the backend).
    pub fn of<T>(result: &Result<T, BackendError>) -> Self {
        match result {
            Ok(_) => BackendResult::Ok,
            Err(e) => e.class.into(),
        }
    }
}

/// Wraps a backend and meters each call. A call that is cancelled (its future dropped)
/// before it finishes is not recorded: it has no result.
#[derive(Clone)]
pub struct MeteredBackend {
    inner: Arc<dyn VolumeBackend>,
    metrics: Metrics,
}

impl std::fmt::Debug for MeteredBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MeteredBackend").finish_non_exhaustive()
    }
}

impl MeteredBackend {
    /// Meters `inner` into `metrics`.
    pub fn new(inner: Arc<dyn VolumeBackend>, metrics: Metrics) -> Self {
        Self { inner, metrics }
    }

    /// The wrapped backend.
    pub fn inner(&self) -> &Arc<dyn VolumeBackend> {
        &self.inner
    }

    async fn metered<T>(
        &self,
        operation: &'static str,
        call: impl Future<Output = Result<T>>,
    ) -> Result<T> {
        let start = Instant::now();
        let result = call.await;
        self.metrics
            .backend_request(operation, BackendResult::of(&result), start.elapsed());
        result
    }
}

#[async_trait]
impl VolumeBackend for MeteredBackend {
    async fn disk_uuid(&self, path: &VolumePath) -> Result<String> {
        self.metered(op::DISK_UUID, self.inner.disk_uuid(path))
            .await
    }

    async fn find_volumes(&self, name: &str, path: &VolumePath) -> Result<Vec<CnsVolume>> {
        self.metered(op::FIND, self.inner.find_volumes(name, path))
            .await
    }

    async fn create_volume(&self, request: &CreateVolumeRequest) -> Result<VolumeId> {
        self.metered(op::CREATE, self.inner.create_volume(request))
            .await
    }

    async fn create_task_state(&self, task: &str) -> Result<TaskState> {
        self.metered(op::TASK_INFO, self.inner.create_task_state(task))
            .await
    }

    async fn delete_volume(&self, id: &VolumeId) -> Result<()> {
        self.metered(op::DELETE, self.inner.delete_volume(id)).await
    }

    async fn list_volumes(&self, cursor: Option<String>) -> Result<VolumePage> {
        self.metered(op::LIST, self.inner.list_volumes(cursor))
            .await
    }

    async fn volumes_by_id(&self, ids: &[VolumeId]) -> Result<Vec<CnsVolume>> {
        self.metered(op::FIND, self.inner.volumes_by_id(ids)).await
    }

    fn refuses_re_registration(&self) -> Option<bool> {
        self.inner.refuses_re_registration()
    }

    async fn protect_from_vm_delete(&self, id: &VolumeId, fence: &SendFence) -> Result<Protection> {
        self.metered(op::PROTECT, self.inner.protect_from_vm_delete(id, fence))
            .await
    }

    async fn is_protected(&self, id: &VolumeId) -> Result<bool> {
        self.metered(op::IS_PROTECTED, self.inner.is_protected(id))
            .await
    }

    async fn creation_time(&self, id: &VolumeId) -> Result<Option<jiff::Timestamp>> {
        self.metered(op::CREATION_TIME, self.inner.creation_time(id))
            .await
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::backend::memory::{Fault, InMemoryBackend};
    use crate::backend::{ErrorClass, list_all_volumes};

    fn path(s: &str) -> VolumePath {
        s.parse().expect("valid test path")
    }

    fn request(p: &VolumePath) -> CreateVolumeRequest {
        CreateVolumeRequest {
            path: p.clone(),
            name: "volmig-test".into(),
            cluster_id: "cluster".into(),
            storage_policy_name: None,
            fence: crate::backend::SendFence::none(),
        }
    }

    fn setup() -> (Arc<InMemoryBackend>, Metrics, MeteredBackend) {
        let mem = Arc::new(InMemoryBackend::new());
        let metrics = Metrics::new();
        let metered = MeteredBackend::new(mem.clone(), metrics.clone());
        (mem, metrics, metered)
    }

    #[tokio::test]
    async fn records_operation_and_result_class_of_every_call() {
        let (mem, metrics, backend) = setup();
        let disk = path("[ds1] vols/a.vmdk");
        let missing = path("[ds1] vols/missing.vmdk");
        mem.add_disk(&disk);

        assert!(backend.disk_uuid(&disk).await.is_ok());
        let err = backend.disk_uuid(&missing).await.expect_err("missing disk");
        assert_eq!(err.class, ErrorClass::NotFound);
        let id = backend
            .create_volume(&request(&disk))
            .await
            .expect("create");
        assert_eq!(
            backend
                .find_volumes("volmig-test", &disk)
                .await
                .expect("find")
                .len(),
            1
        );
        assert_eq!(list_all_volumes(&backend).await.expect("list").len(), 1);
        backend.delete_volume(&id).await.expect("delete");
        let err = backend
            .delete_volume(&id)
            .await
            .expect_err("already deleted");
        assert_eq!(err.class, ErrorClass::NotFound);

        assert_eq!(
            metrics.backend_requests(op::DISK_UUID, BackendResult::Ok),
            1
        );
        assert_eq!(
            metrics.backend_requests(op::DISK_UUID, BackendResult::NotFound),
            1
        );
        assert_eq!(metrics.backend_requests(op::CREATE, BackendResult::Ok), 1);
        assert_eq!(metrics.backend_requests(op::FIND, BackendResult::Ok), 1);
        assert_eq!(metrics.backend_requests(op::LIST, BackendResult::Ok), 1);
        assert_eq!(metrics.backend_requests(op::DELETE, BackendResult::Ok), 1);
        assert_eq!(
            metrics.backend_requests(op::DELETE, BackendResult::NotFound),
            1
        );
        // The metrics agree with the backend's own call counters.
        for operation in [op::DISK_UUID, op::FIND, op::CREATE, op::DELETE, op::LIST] {
            assert_eq!(
                metrics.backend_requests_total(operation),
                mem.calls(operation)
            );
        }
    }

    #[tokio::test]
    async fn injected_faults_are_classified() {
        let (mem, metrics, backend) = setup();
        let disk = path("[ds1] b.vmdk");
        mem.add_disk(&disk);
        mem.inject(op::CREATE, Fault::Fail(ErrorClass::Transient), 1);
        mem.inject(op::CREATE, Fault::Fail(ErrorClass::Permanent), 1);
        mem.inject(op::CREATE, Fault::Fail(ErrorClass::NotAuthenticated), 1);
        mem.inject(op::CREATE, Fault::FailAfterCreate, 1);
        for _ in 0..4 {
            assert!(backend.create_volume(&request(&disk)).await.is_err());
        }
        assert!(backend.create_volume(&request(&disk)).await.is_ok());
        assert_eq!(
            metrics.backend_requests(op::CREATE, BackendResult::Transient),
            2
        );
        assert_eq!(
            metrics.backend_requests(op::CREATE, BackendResult::Permanent),
            1
        );
        assert_eq!(
            metrics.backend_requests(op::CREATE, BackendResult::NotAuthenticated),
            1
        );
        assert_eq!(metrics.backend_requests(op::CREATE, BackendResult::Ok), 1);
        assert_eq!(mem.calls(op::CREATE), 5);
    }

    #[tokio::test(start_paused = true)]
    async fn latency_is_observed_in_the_operation_histogram() {
        let (mem, metrics, backend) = setup();
        let disk = path("[ds1] c.vmdk");
        mem.add_disk(&disk);
        mem.set_latency(op::DISK_UUID, Duration::from_secs(3));
        backend.disk_uuid(&disk).await.expect("disk exists");
        let text = metrics.encode();
        let bucket = |le: &str| {
            let series = format!(
                "volmig_backend_request_duration_seconds_bucket{{le=\"{le}\",operation=\"{}\"}} ",
                op::DISK_UUID
            );
            text.lines()
                .find_map(|l| l.strip_prefix(&series))
                .unwrap_or_else(|| panic!("no {series} in\n{text}"))
                .to_owned()
        };
        // The paused clock advances exactly by the injected latency.
        assert_eq!(bucket("2.5"), "0");
        assert_eq!(bucket("5.0"), "1");
    }

    #[tokio::test]
    async fn protection_calls_are_forwarded_and_metered() {
        let (mem, metrics, backend) = setup();
        let disk = path("[ds1] e.vmdk");
        mem.add_disk(&disk);
        let id = backend
            .create_volume(&request(&disk))
            .await
            .expect("create");
        assert!(!backend.is_protected(&id).await.expect("read flag"));
        assert_eq!(
            backend
                .protect_from_vm_delete(&id, &SendFence::none())
                .await
                .expect("protect"),
            crate::backend::Protection::FlagSet
        );
        assert!(mem.has_keep_flag(&id));
        assert!(backend.is_protected(&id).await.expect("read flag"));
        let err = backend
            .protect_from_vm_delete(&VolumeId::from("gone"), &SendFence::none())
            .await
            .expect_err("unknown volume");
        assert_eq!(err.class, ErrorClass::NotFound);
        assert_eq!(metrics.backend_requests(op::PROTECT, BackendResult::Ok), 1);
        assert_eq!(
            metrics.backend_requests(op::PROTECT, BackendResult::NotFound),
            1
        );
        assert_eq!(
            metrics.backend_requests(op::IS_PROTECTED, BackendResult::Ok),
            2
        );
        assert_eq!(mem.calls(op::PROTECT), 2);
        assert_eq!(mem.calls(op::IS_PROTECTED), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn a_cancelled_call_is_not_recorded() {
        let (mem, metrics, backend) = setup();
        let disk = path("[ds1] d.vmdk");
        mem.add_disk(&disk);
        mem.set_latency(op::DISK_UUID, Duration::from_secs(10));
        let timed_out =
            tokio::time::timeout(Duration::from_secs(1), backend.disk_uuid(&disk)).await;
        assert!(timed_out.is_err());
        assert_eq!(mem.calls(op::DISK_UUID), 1);
        assert_eq!(metrics.backend_requests_total(op::DISK_UUID), 0);
    }
}
