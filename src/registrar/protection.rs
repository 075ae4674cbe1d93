//! Protection from VM deletion and the CSI driver's ID (docs/design.md §8.3, §8.2):
//! keeping the disk of a registered volume when its VM is deleted, and taking over the ID
//! the driver's cache holds.

use tracing::{info, instrument, warn};

use super::{HeldSlot, Lane, RegisterError, Registrar, StatusUpdate, StoreErrorKind};
use crate::backend::{SendFence, VolumeId};
use crate::volume_path::VolumePath;

impl Registrar {
    /// Keeps the disk of `volume_id` when its VM is deleted (docs/design.md §8.3), under the
    /// slot in `held` if there is one; true only when the backend set or verified the flag
    /// (never for a vCenter release alone). A failure is logged; full sync tries again.
    pub(super) async fn try_protect(
        &self,
        path: &VolumePath,
        volume_id: &VolumeId,
        held: &mut HeldSlot,
    ) -> bool {
        if self.fence(path).is_err() {
            return false;
        }
        let fence = self.registration_fence();
        match self
            .call_held(path, held, Lane::Started, || {
                self.backend.protect_from_vm_delete(volume_id, &fence)
            })
            .await
        {
            Ok(protection) if protection.is_protected() => true,
            Ok(protection) => {
                warn!(%path, %volume_id, ?protection,
                    "the disk is not known to be protected from VM deletion; full sync tries again");
                false
            }
            Err(RegisterError::Backend { source: e, .. }) if e.is_called_off() => {
                info!(%path, %volume_id, reason = %e,
                    "protecting the disk from VM deletion registers it again, which only the holder of the CSI driver's syncer Lease may do; full sync tries again");
                false
            }
            Err(e) => {
                warn!(%path, %volume_id, error = %crate::error_chain(&e),
                    "could not protect the disk from VM deletion; full sync tries again");
                false
            }
        }
    }

    /// Asked right before a registration that only protects a volume (vCenter 8.0.3 and
    /// later) is sent: it is a create, so it needs leadership and the syncer's Lease like
    /// one (docs/design.md §8.2, §4.9).
    fn registration_fence(&self) -> SendFence {
        let leader = self.config.leader.clone();
        let mode = self.config.mode.clone();
        SendFence::new(move || {
            if !leader.is_open() {
                return Err("not the leader any more".to_owned());
            }
            mode.may_create().map_err(|e| e.to_string())
        })
    }

    /// Protects the disk of the stored volume `volume_id` of `path` from VM deletion and
    /// records it (full sync's repair of volumes registered without the flag). Returns
    /// false when the stored ID changed meanwhile or protecting failed.
    #[instrument(skip(self), fields(%path, %volume_id))]
    pub async fn protect(
        &self,
        path: &VolumePath,
        volume_id: &VolumeId,
    ) -> Result<bool, RegisterError> {
        let _key = self.locks.lock(path).await;
        let Some(state) = self.load(path).await? else {
            return Ok(false);
        };
        if state.registered_id() != Some(volume_id)
            || !self
                .try_protect(path, volume_id, &mut HeldSlot::none())
                .await
        {
            return Ok(false);
        }
        match self
            .store
            .save(path, &StatusUpdate::Protected, state.version.as_ref())
            .await
        {
            Ok(_) => Ok(true),
            Err(e) if e.kind == StoreErrorKind::Conflict => Ok(false),
            Err(source) => Err(RegisterError::Store {
                path: path.clone(),
                source,
            }),
        }
    }

    /// Replaces the stored ID `replaced` by `driver_id`, the ID the CSI driver's cache
    /// holds (docs/design.md §8.2: pods may be attached with it). Conditional on the stored ID
    /// still being `replaced`; returns false when it changed meanwhile.
    #[instrument(skip(self), fields(%path, %driver_id, %replaced))]
    pub async fn adopt_driver_id(
        &self,
        path: &VolumePath,
        driver_id: &VolumeId,
        replaced: &VolumeId,
    ) -> Result<bool, RegisterError> {
        let _key = self.locks.lock(path).await;
        let Some(state) = self.load(path).await? else {
            return Ok(false);
        };
        if state.registered_id() != Some(replaced) {
            return Ok(false);
        }
        self.fence(path)?;
        let protected = self
            .try_protect(path, driver_id, &mut HeldSlot::none())
            .await;
        let update = StatusUpdate::Registered {
            volume_id: driver_id.clone(),
            disk_uuid: None,
            adopted: true,
            attempts: state.attempts,
            protected,
        };
        match self.store.save(path, &update, state.version.as_ref()).await {
            Ok(_) => Ok(true),
            Err(e) if e.kind == StoreErrorKind::Conflict => Ok(false),
            Err(source) => Err(RegisterError::Store {
                path: path.clone(),
                source,
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::super::{InMemoryStatusStore, Registrar, RegistrarConfig, StatusUpdate};
    use crate::backend::memory::InMemoryBackend;
    use crate::backend::{CreateVolumeRequest, SendFence, VolumeBackend, VolumeId};
    use crate::volume_path::VolumePath;

    /// A registrar over `backend`, and a vmdk the CSI driver registered already.
    async fn registered_by_the_driver(
        backend: &Arc<InMemoryBackend>,
    ) -> (Registrar, Arc<InMemoryStatusStore>, VolumePath, VolumeId) {
        let path = VolumePath::parse("[LocalDS_0] kubevols/disk-0001.vmdk").expect("path");
        backend.add_disk(&path);
        let request = CreateVolumeRequest {
            path: path.clone(),
            name: "pvc-driver-1".into(),
            cluster_id: "cluster-1".into(),
            storage_policy_name: None,
            fence: SendFence::none(),
        };
        let id = backend
            .create_volume(&request)
            .await
            .expect("driver's create");
        let store = Arc::new(InMemoryStatusStore::default());
        let config = RegistrarConfig::new("cluster-1").with_rate_limit(None);
        let registrar = Registrar::new(backend.clone(), store.clone(), config);
        (registrar, store, path, id)
    }

    /// What the status recorded about protection, in order.
    fn recorded(store: &InMemoryStatusStore) -> Vec<bool> {
        let protected = |update: &StatusUpdate| match update {
            StatusUpdate::Registered { protected, .. } => Some(*protected),
            StatusUpdate::Protected => Some(true),
            _ => None,
        };
        store
            .history()
            .iter()
            .filter_map(|(_, u)| protected(u))
            .collect()
    }

    #[tokio::test]
    async fn from_803_an_adopted_volume_is_recorded_protected_only_once_its_flag_is_set() {
        let backend = Arc::new(InMemoryBackend::new());
        let (registrar, store, path, id) = registered_by_the_driver(&backend).await;
        backend.set_registration_protects(true);
        let registration = registrar.register(&path).await.expect("adopted");
        assert_eq!(registration.volume_id, id);
        assert_eq!(recorded(&store), [true]);
        assert!(backend.has_keep_flag(&id), "recorded, so actually set");
    }

    #[tokio::test]
    async fn a_flag_that_does_not_stick_is_never_recorded_as_protection() {
        let backend = Arc::new(InMemoryBackend::new());
        let (registrar, store, path, id) = registered_by_the_driver(&backend).await;
        backend.set_flags_ignored(true);
        registrar.register(&path).await.expect("adopted");
        assert!(!registrar.protect(&path, &id).await.expect("repair"));
        assert_eq!(recorded(&store), [false]);
        backend.set_flags_ignored(false);
        assert!(registrar.protect(&path, &id).await.expect("repair"));
        assert_eq!(recorded(&store), [false, true]);
        assert!(backend.has_keep_flag(&id));
    }
}
