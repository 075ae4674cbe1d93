//! A backend that logs in to vCenter on first use (only the leader calls the backend, so
//! followers never open a session) and retries the login on later calls if it failed.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use async_trait::async_trait;
use tokio::sync::OnceCell;

use super::{CnsVolume, CreateVolumeRequest, Result, VolumeBackend, VolumeId, VolumePage};
use crate::volume_path::VolumePath;

type Connect =
    dyn Fn() -> Pin<Box<dyn Future<Output = Result<Arc<dyn VolumeBackend>>> + Send>> + Send + Sync;

/// Connects lazily through `connect`, then forwards every call.
pub struct OnDemandBackend {
    connect: Box<Connect>,
    backend: OnceCell<Arc<dyn VolumeBackend>>,
}

impl OnDemandBackend {
    /// A backend created by `connect` on first use.
    pub fn new<F, Fut>(connect: F) -> Self
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Arc<dyn VolumeBackend>>> + Send + 'static,
    {
        Self {
            connect: Box::new(move || Box::pin(connect())),
            backend: OnceCell::new(),
        }
    }

    async fn get(&self) -> Result<&Arc<dyn VolumeBackend>> {
        self.backend.get_or_try_init(|| (self.connect)()).await
    }

    /// The connected backend, if a call has connected it.
    pub fn connected(&self) -> Option<&Arc<dyn VolumeBackend>> {
        self.backend.get()
    }
}

#[async_trait]
impl VolumeBackend for OnDemandBackend {
    async fn disk_uuid(&self, path: &VolumePath) -> Result<String> {
        self.get().await?.disk_uuid(path).await
    }
    async fn find_volumes(&self, name: &str, path: &VolumePath) -> Result<Vec<CnsVolume>> {
        self.get().await?.find_volumes(name, path).await
    }
    async fn create_volume(&self, request: &CreateVolumeRequest) -> Result<VolumeId> {
        self.get().await?.create_volume(request).await
    }
    async fn delete_volume(&self, id: &VolumeId) -> Result<()> {
        self.get().await?.delete_volume(id).await
    }
    async fn list_volumes(&self, cursor: Option<String>) -> Result<VolumePage> {
        self.get().await?.list_volumes(cursor).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::memory::InMemoryBackend;
    use crate::backend::{BackendError, ErrorClass};
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test]
    async fn connects_once_on_first_use_and_retries_failed_logins() {
        let attempts = Arc::new(AtomicUsize::new(0));
        let counter = attempts.clone();
        let backend = OnDemandBackend::new(move || {
            let n = counter.fetch_add(1, Ordering::SeqCst);
            async move {
                if n == 0 {
                    Err(BackendError::new(
                        ErrorClass::Transient,
                        "Login",
                        "Timeout",
                        "vCenter did not answer",
                    ))
                } else {
                    Ok(Arc::new(InMemoryBackend::new()) as Arc<dyn VolumeBackend>)
                }
            }
        });
        assert!(
            backend.connected().is_none(),
            "no login before the first call"
        );
        assert_eq!(attempts.load(Ordering::SeqCst), 0);
        let first = backend.list_volumes(None).await;
        assert_eq!(first.unwrap_err().class, ErrorClass::Transient);
        backend.list_volumes(None).await.unwrap();
        backend.list_volumes(None).await.unwrap();
        assert_eq!(
            attempts.load(Ordering::SeqCst),
            2,
            "one failed and one good login"
        );
        assert!(backend.connected().is_some());
    }
}
