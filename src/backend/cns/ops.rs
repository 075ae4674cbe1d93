//! The [`VolumeBackend`] calls of [`CnsBackend`].

use async_trait::async_trait;

use crate::backend::{
    BackendError, CnsVolume, CreateVolumeRequest, ErrorClass, Protection, Result, SendFence,
    TaskState, VolumeBackend, VolumeId, VolumePage, op,
};
use crate::volume_path::VolumePath;

use super::inventory::DatastoreLocation;
use super::soap::{self, Returnval};
use super::task::{self, TaskOutcome};
use super::transport::Endpoint;
use super::volumes::{self, BatchResult, VolumeOutcome};
use super::{CnsBackend, backing, fault, vim};

impl CnsBackend {
    /// One `CnsCreateVolume` of `request` with the vmdk in `location`.
    async fn create_at(
        &self,
        request: &CreateVolumeRequest,
        location: &DatastoreLocation,
        profile_id: Option<&str>,
    ) -> Result<VolumeId> {
        let path = &request.path;
        let what = path.canonical();
        let client = &self.inner.client;
        let url = backing::backing_url(
            &self.inner.authority,
            &location.datacenter_path,
            path.datastore(),
            path,
        );
        let disk_id = if self.inner.version.registers_disk_first() {
            self.register_disk(&url, &request.name, &what).await?
        } else {
            None
        };
        let backing = match disk_id.as_deref() {
            Some(id) => volumes::CnsBlockBackingDetails::disk_id(id),
            None => volumes::CnsBlockBackingDetails::url(&url),
        };
        let cluster = volumes::CnsContainerCluster::kubernetes(
            &request.cluster_id,
            client.username(),
            &self.inner.options.cluster_distribution,
        );
        let spec = volumes::CnsVolumeCreateSpec {
            name: &request.name,
            volume_type: "BLOCK",
            datastores: vec![location.datastore.clone()],
            metadata: volumes::CnsVolumeMetadata::of(cluster),
            backing_object_details: backing,
            profile: profile_id
                .map(volumes::VirtualMachineDefinedProfileSpec::new)
                .into_iter()
                .collect(),
        };
        // The fence is asked at the last moment before the request is written, policy
        // resolution and RegisterDisk behind us, and again before a re-send after a
        // re-login (docs/design.md §4.9).
        let task = volumes::start_create(client, op::CREATE, spec, &request.fence)
            .await
            .map_err(|e| fault::about(self.note(e), &what))?;
        request.fence.task_started(&task.value);
        // vCenter runs the task now: an error of any class while following it leaves the
        // create's outcome unknown (docs/design.md §4.8).
        let outcome =
            task::wait::<BatchResult>(client, op::CREATE, &task, self.inner.task_timeout, &what)
                .await
                .map_err(BackendError::after_send)?;
        let outcome = task::create_outcome(outcome);
        match outcome {
            VolumeOutcome::Ok(id) => {
                tracing::info!(path = %what, volume_id = %id, name = %request.name, "CNS volume created");
                if self.inner.version.registration_protects() {
                    self.inner.vslm.note_registered(&id);
                }
                Ok(id)
            }
            VolumeOutcome::AlreadyRegistered(id, fault) => {
                tracing::info!(
                    path = %what,
                    volume_id = %id,
                    message = %fault.message,
                    "disk is already registered in CNS; adopting its volume"
                );
                Ok(id)
            }
            VolumeOutcome::Failed(fault) => Err(fault::about(
                self.note(fault::from_fault(op::CREATE, &fault)),
                &what,
            )),
            // The task succeeded without naming a volume: one may exist all the same.
            VolumeOutcome::Missing => Err(fault::about(
                fault::malformed(
                    op::CREATE,
                    client.sdk_url().as_str(),
                    "CNS returned no volume",
                ),
                &what,
            )
            .after_send()),
        }
    }

    /// Protects the existing volume `id` from VM deletion the way the vSphere CSI driver
    /// does on vCenter 8.0.3 and later (kubernetes-sigs/vsphere-csi-driver@bf80902,
    /// `pkg/common/cns-lib/volume/manager.go:3650-3692`, `ProtectVolumeFromVMDeletion`):
    /// read the volume (the driver's `QueryVolumeAsync` by ID for type, name and metadata),
    /// then `CnsCreateVolume` of a spec with its name, volume type, `containerCluster` and
    /// `containerClusterArray` as CNS reported them and `backingDiskId` = the ID; nothing
    /// else (no datastores, no profile). CNS sets `keepAfterDeleteVm` and answers
    /// `CnsAlreadyRegisteredFault`, which counts as success as in the driver's
    /// `createVolume` (`manager.go:995-1016`, `util.go:313-327`). Unlike the driver, an
    /// answer naming another volume is an error, not protection.
    async fn register_again(&self, id: &VolumeId, fence: &SendFence) -> Result<Protection> {
        let client = &self.inner.client;
        let what = format!("CNS volume {id}");
        let found = volumes::query_ids(client, op::PROTECT, std::slice::from_ref(id))
            .await
            .map_err(|e| fault::about(e, &what))?;
        let Some(volume) = found.first() else {
            return Err(volumes::volume_not_found(op::PROTECT, id));
        };
        let task = volumes::start_create(client, op::PROTECT, spec_again(volume), fence)
            .await
            .map_err(|e| fault::about(e, &what))?;
        let outcome =
            task::wait::<BatchResult>(client, op::PROTECT, &task, self.inner.task_timeout, &what)
                .await?;
        let outcome = task::create_outcome(outcome);
        match outcome {
            VolumeOutcome::Ok(got) | VolumeOutcome::AlreadyRegistered(got, _) if got == *id => {
                tracing::debug!(volume_id = %id, "registered again by its ID: keepAfterDeleteVm set");
                Ok(Protection::ByReRegistration)
            }
            VolumeOutcome::Ok(got) | VolumeOutcome::AlreadyRegistered(got, _) => {
                let detail = format!("registering {id} again by its ID answered volume {got}");
                Err(fault::malformed(
                    op::PROTECT,
                    client.sdk_url().as_str(),
                    &detail,
                ))
            }
            // A CNS fault saying the FCD is not found is NotFound, as for a delete.
            VolumeOutcome::Failed(fault) => Err(fault::about(
                volumes::delete_error(op::PROTECT, &fault),
                &what,
            )),
            VolumeOutcome::Missing => Err(fault::malformed(
                op::PROTECT,
                client.sdk_url().as_str(),
                &format!("registering {id} again by its ID: CNS returned no volume"),
            )),
        }
    }

    /// `RegisterDisk` of the vmdk at `url` as an FCD named `name`; its ID, or `None` when
    /// the vmdk is an FCD already (`AlreadyExists`: the create then names it by URL).
    async fn register_disk(&self, url: &str, name: &str, what: &str) -> Result<Option<String>> {
        let client = &self.inner.client;
        let manager = client
            .content()
            .vstorage_object_manager
            .as_ref()
            .ok_or_else(|| {
                BackendError::new(
                    ErrorClass::Permanent,
                    op::REGISTER_DISK,
                    "NotSupported",
                    format!("{} has no VStorageObjectManager", client.sdk_url()),
                )
            })?;
        let request = vim::RegisterDisk {
            this: manager,
            path: url,
            name: Some(name),
        };
        let response: Result<Returnval<vim::VStorageObject>> = client
            .call(Endpoint::Sdk, op::REGISTER_DISK, "RegisterDisk", &request)
            .await;
        match response {
            Ok(response) => {
                let object = response.returnval.ok_or_else(|| {
                    fault::malformed(
                        op::REGISTER_DISK,
                        client.sdk_url().as_str(),
                        "no VStorageObject",
                    )
                })?;
                tracing::info!(path = %what, fcd_id = %object.config.id.id, "vmdk registered as FCD");
                Ok(Some(object.config.id.id))
            }
            Err(err) if err.fault == "AlreadyExists" => {
                tracing::info!(
                    path = %what,
                    "vmdk is an FCD already; creating the CNS volume by backing URL"
                );
                Ok(None)
            }
            Err(err) => Err(fault::about(self.note(err), what)),
        }
    }
}

#[async_trait]
impl VolumeBackend for CnsBackend {
    async fn disk_uuid(&self, path: &VolumePath) -> Result<String> {
        let location = self.resolve(path, op::DISK_UUID).await?;
        let client = &self.inner.client;
        let manager = client
            .content()
            .virtual_disk_manager
            .as_ref()
            .ok_or_else(|| {
                BackendError::new(
                    ErrorClass::Permanent,
                    op::DISK_UUID,
                    "NotSupported",
                    format!("{} has no VirtualDiskManager", client.sdk_url()),
                )
            })?;
        let name = path.canonical();
        let request = vim::QueryVirtualDiskUuid {
            this: manager,
            name: &name,
            datacenter: &location.datacenter,
        };
        let response: Returnval<String> = client
            .call(
                Endpoint::Sdk,
                op::DISK_UUID,
                "QueryVirtualDiskUuid",
                &request,
            )
            .await
            .map_err(|e| fault::about(self.note(e), &name))?;
        response
            .returnval
            .map(|uuid| uuid.trim().to_owned())
            .filter(|uuid| !uuid.is_empty())
            .ok_or_else(|| {
                fault::malformed(op::DISK_UUID, client.sdk_url().as_str(), "empty disk UUID")
            })
    }

    async fn find_volumes(&self, name: &str, path: &VolumePath) -> Result<Vec<CnsVolume>> {
        let mut found = self
            .query_all(op::FIND, &[name], &[])
            .await
            .map_err(|e| fault::about(e, &format!("volumes named {name}")))?;
        // docs/design.md §4.3: by backing disk on vCenters older than 7.0 Update 1.
        found.extend(self.volumes_missed_by_name(path, &found).await?);
        let mut matching: Vec<CnsVolume> = Vec::new();
        for volume in found {
            let wanted = volume.name == name || volume.backing_path.as_ref() == Some(path);
            if wanted && !matching.iter().any(|v| v.id == volume.id) {
                matching.push(volume);
            }
        }
        Ok(matching)
    }

    async fn create_volume(&self, request: &CreateVolumeRequest) -> Result<VolumeId> {
        let path = &request.path;
        let what = path.canonical();
        let client = &self.inner.client;
        let profile_id = match request.storage_policy_name.as_deref().map(str::trim) {
            Some(name) if !name.is_empty() => Some(
                self.inner
                    .policies
                    .profile_id(client, op::CREATE, name)
                    .await
                    .map_err(|e| fault::about(e, &what))?,
            ),
            _ => None,
        };
        let locations = self
            .inner
            .inventory
            .resolve_all(client, path.datastore(), op::CREATE)
            .await
            .map_err(|e| fault::about(e, &what))?;
        let count = locations.len();
        let mut last = None;
        for (n, location) in locations.into_iter().enumerate() {
            match self
                .create_at(request, &location, profile_id.as_deref())
                .await
            {
                Ok(id) => return Ok(id),
                // A create that may still complete in this datacenter is never followed by
                // one in the next.
                Err(err)
                    if n + 1 < count
                        && err.class != ErrorClass::NotAuthenticated
                        && !err.may_still_complete() =>
                {
                    tracing::warn!(
                        path = %what,
                        datacenter = %location.datacenter_path,
                        error = %err,
                        "registration failed in this datacenter; trying the next one"
                    );
                    last = Some(err);
                }
                Err(err) => return Err(err),
            }
        }
        Err(last.unwrap_or_else(|| {
            fault::malformed(
                op::CREATE,
                client.sdk_url().as_str(),
                "no datacenter to try",
            )
        }))
    }

    async fn create_task_state(&self, task: &str) -> Result<TaskState> {
        task::create_state(&self.inner.client, task)
            .await
            .map_err(|e| fault::about(e, &format!("create task {task}")))
    }

    async fn delete_volume(&self, id: &VolumeId) -> Result<()> {
        let client = &self.inner.client;
        let what = format!("CNS volume {id}");
        let task = volumes::start_delete(client, op::DELETE, id)
            .await
            .map_err(|e| fault::about(e, &what))?;
        let outcome =
            task::wait::<BatchResult>(client, op::DELETE, &task, self.inner.task_timeout, &what)
                .await?;
        let results = match outcome {
            TaskOutcome::Success(result) => result.unwrap_or_default().volume_results,
            TaskOutcome::Error(fault) => {
                return Err(fault::about(
                    volumes::delete_error(op::DELETE, &fault),
                    &what,
                ));
            }
        };
        let mine = results
            .iter()
            .find(|r| r.volume_id.as_ref().is_some_and(|v| v.id == id.0))
            .or_else(|| results.iter().find(|r| r.fault.is_some()));
        match mine {
            None => Err(volumes::volume_not_found(op::DELETE, id)),
            Some(result) => match &result.fault {
                Some(fault) => {
                    let fault = soap::Fault::from_localized(fault.clone());
                    Err(fault::about(
                        volumes::delete_error(op::DELETE, &fault),
                        &what,
                    ))
                }
                None => {
                    tracing::info!(volume_id = %id, "CNS volume unregistered (disk kept)");
                    Ok(())
                }
            },
        }
    }

    async fn list_volumes(&self, cursor: Option<String>) -> Result<VolumePage> {
        let offset = match cursor.as_deref() {
            None => 0,
            Some(raw) => raw.parse::<i64>().ok().filter(|o| *o >= 0).ok_or_else(|| {
                BackendError::new(
                    ErrorClass::Permanent,
                    op::LIST,
                    "InvalidArgument",
                    format!("invalid volume list cursor {raw:?}"),
                )
            })?,
        };
        let (volumes, next) =
            volumes::query_page(&self.inner.client, op::LIST, &[], offset).await?;
        Ok(VolumePage {
            volumes,
            next: next.map(|n| n.to_string()),
        })
    }

    async fn volumes_by_id(&self, ids: &[VolumeId]) -> Result<Vec<CnsVolume>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let client = &self.inner.client;
        let found = volumes::query_ids(client, op::FIND, ids)
            .await
            .map_err(|e| fault::about(e, "volumes by ID"))?;
        Ok(found
            .into_iter()
            .map(volumes::CnsVolumeXml::into_volume)
            .collect())
    }

    fn refuses_re_registration(&self) -> Option<bool> {
        Some(self.inner.version.refuses_re_registration())
    }

    async fn protect_from_vm_delete(&self, id: &VolumeId, fence: &SendFence) -> Result<Protection> {
        if self.inner.version.registration_protects() {
            // The create that just returned this ID set the flag; any other volume is
            // registered again by its ID, as the driver does.
            if self.inner.vslm.take_registered(id) {
                return Ok(Protection::ByRegistration);
            }
            return self.register_again(id, fence).await;
        }
        let kept = self
            .inner
            .vslm
            .keep_and_verify(&self.inner.client, op::PROTECT, id)
            .await
            .map_err(|e| fault::about(e, &format!("CNS volume {id}")))?;
        if !kept {
            tracing::warn!(volume_id = %id, "keepAfterDeleteVm was set but reads back unset");
            return Ok(Protection::NotKept);
        }
        // The status records it (`protected`); one info line per registration is enough.
        tracing::debug!(volume_id = %id, "disk protected from VM deletion (keepAfterDeleteVm)");
        Ok(Protection::FlagSet)
    }

    async fn is_protected(&self, id: &VolumeId) -> Result<bool> {
        // VSLM reports the flag on every release (`BaseConfigInfo.keepAfterDeleteVm`, vSphere
        // API 6.7 and later), 8.0.3 included.
        self.inner
            .vslm
            .keeps_after_delete_vm(&self.inner.client, op::IS_PROTECTED, id)
            .await
            .map_err(|e| fault::about(e, &format!("CNS volume {id}")))
    }

    async fn creation_time(&self, id: &VolumeId) -> Result<Option<jiff::Timestamp>> {
        self.inner
            .vslm
            .create_time(&self.inner.client, op::CREATION_TIME, id)
            .await
            .map_err(|e| fault::about(e, &format!("CNS volume {id}")))
    }
}

/// No container cluster (a volume whose metadata names none).
static NO_CLUSTER: volumes::ContainerClusterXml = volumes::ContainerClusterXml {
    cluster_type: String::new(),
    cluster_id: String::new(),
    vsphere_user: String::new(),
    cluster_flavor: String::new(),
    cluster_distribution: String::new(),
};

/// The spec that registers `volume` again by its ID, as the driver writes it (see
/// `CnsBackend::register_again`): its name, type and container clusters as CNS reported
/// them, `backingDiskId` = its ID, no datastores, no profile.
pub(super) fn spec_again(volume: &volumes::CnsVolumeXml) -> volumes::CnsVolumeCreateSpec<'_> {
    let metadata = volume.metadata.as_ref();
    let cluster = metadata.and_then(|m| m.container_cluster.as_ref());
    volumes::CnsVolumeCreateSpec {
        name: &volume.name,
        volume_type: &volume.volume_type,
        datastores: Vec::new(),
        metadata: volumes::CnsVolumeMetadata {
            container_cluster: as_spec(cluster.unwrap_or(&NO_CLUSTER)),
            container_cluster_array: metadata
                .map(|m| m.container_cluster_array.iter().map(as_spec).collect())
                .unwrap_or_default(),
        },
        backing_object_details: volumes::CnsBlockBackingDetails::disk_id(&volume.volume_id.id),
        profile: Vec::new(),
    }
}

/// A container cluster as CNS reported it, field for field in a create spec.
fn as_spec(cluster: &volumes::ContainerClusterXml) -> volumes::CnsContainerCluster<'_> {
    volumes::CnsContainerCluster {
        cluster_type: &cluster.cluster_type,
        cluster_id: &cluster.cluster_id,
        vsphere_user: &cluster.vsphere_user,
        cluster_flavor: &cluster.cluster_flavor,
        cluster_distribution: &cluster.cluster_distribution,
    }
}
