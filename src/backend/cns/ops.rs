//! The [`VolumeBackend`] calls of [`CnsBackend`].

use async_trait::async_trait;

use crate::backend::{
    BackendError, CnsVolume, CreateVolumeRequest, ErrorClass, Result, VolumeBackend, VolumeId,
    VolumePage, op,
};
use crate::volume_path::VolumePath;

use super::soap::{self, Returnval};
use super::task::{self, TaskOutcome};
use super::transport::Endpoint;
use super::volumes::{self, BatchResult, VolumeOutcome};
use super::{CnsBackend, backing, fault, vim};

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
        let found = self
            .query_all(op::FIND, &[name])
            .await
            .map_err(|e| fault::about(e, &format!("volumes named {name}")))?;
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
        let location = self.resolve(path, op::CREATE).await?;
        let client = &self.inner.client;
        if let Some(policy) = &request.storage_policy_name {
            tracing::warn!(
                path = %what,
                policy = %policy,
                "storage policies are not applied on registration yet; registering without"
            );
        }
        let url = backing::backing_url(
            &self.inner.authority,
            &location.datacenter_path,
            path.datastore(),
            path,
        );
        let spec = volumes::CnsVolumeCreateSpec {
            name: &request.name,
            volume_type: "BLOCK",
            datastores: vec![location.datastore.clone()],
            metadata: volumes::CnsVolumeMetadata {
                container_cluster: volumes::CnsContainerCluster {
                    cluster_type: "KUBERNETES",
                    cluster_id: &request.cluster_id,
                    vsphere_user: client.username(),
                },
            },
            backing_object_details: volumes::CnsBlockBackingDetails {
                xsi_type: "CnsBlockBackingDetails",
                backing_disk_url_path: &url,
            },
        };
        let task = volumes::start_create(client, op::CREATE, spec)
            .await
            .map_err(|e| fault::about(self.note(e), &what))?;
        let outcome =
            task::wait::<BatchResult>(client, op::CREATE, &task, self.inner.task_timeout, &what)
                .await?;
        let outcome = match outcome {
            TaskOutcome::Success(result) => {
                volumes::volume_outcome(result.unwrap_or_default().volume_results.first())
            }
            TaskOutcome::Error(fault) => volumes::fault_outcome(*fault),
        };
        match outcome {
            VolumeOutcome::Ok(id) => {
                tracing::info!(path = %what, volume_id = %id, name = %request.name, "CNS volume created");
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
            VolumeOutcome::Missing => Err(fault::about(
                fault::malformed(
                    op::CREATE,
                    client.sdk_url().as_str(),
                    "CNS returned no volume",
                ),
                &what,
            )),
        }
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
}
