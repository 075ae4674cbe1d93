//! CNS volume calls on `/vsanHealth`: create (and wait for the task), query with cursor
//! paging, delete with `deleteDisk=false`. Request types follow the WSDL element order.

use serde::{Deserialize, Serialize};

use crate::backend::{BackendError, CnsVolume, ErrorClass, VolumeId};

use super::backing;
use super::fault::{self, names};
use super::session::SoapClient;
use super::soap::{CnsVolumeIdXml, Fault, LocalizedMethodFault, MoRef, Returnval};
use super::transport::Endpoint;

/// Page size of volume queries.
pub(crate) const PAGE_SIZE: i64 = 500;

fn volume_manager() -> MoRef {
    MoRef::new("CnsVolumeManager", "cns-volume-manager")
}

/// `CnsCreateVolume`.
#[derive(Serialize)]
pub(crate) struct CnsCreateVolume<'a> {
    #[serde(rename = "_this")]
    pub this: MoRef,
    #[serde(rename = "createSpecs")]
    pub create_specs: Vec<CnsVolumeCreateSpec<'a>>,
}

/// `CnsVolumeCreateSpec` for a static (existing vmdk) BLOCK volume, as the vSphere CSI
/// driver writes it.
#[derive(Serialize)]
pub(crate) struct CnsVolumeCreateSpec<'a> {
    pub name: &'a str,
    #[serde(rename = "volumeType")]
    pub volume_type: &'a str,
    pub datastores: Vec<MoRef>,
    pub metadata: CnsVolumeMetadata<'a>,
    #[serde(rename = "backingObjectDetails")]
    pub backing_object_details: CnsBlockBackingDetails<'a>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub profile: Vec<VirtualMachineDefinedProfileSpec<'a>>,
}

/// `CnsVolumeMetadata`: the container cluster, and the same in `containerClusterArray`.
#[derive(Serialize)]
pub(crate) struct CnsVolumeMetadata<'a> {
    #[serde(rename = "containerCluster")]
    pub container_cluster: CnsContainerCluster<'a>,
    #[serde(rename = "containerClusterArray")]
    pub container_cluster_array: Vec<CnsContainerCluster<'a>>,
}

impl<'a> CnsVolumeMetadata<'a> {
    /// The metadata of a volume of the one cluster `cluster`.
    pub fn of(cluster: CnsContainerCluster<'a>) -> Self {
        Self {
            container_cluster: cluster.clone(),
            container_cluster_array: vec![cluster],
        }
    }
}

/// `CnsContainerCluster`.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct CnsContainerCluster<'a> {
    #[serde(rename = "clusterType")]
    pub cluster_type: &'a str,
    #[serde(rename = "clusterId")]
    pub cluster_id: &'a str,
    #[serde(rename = "vSphereUser")]
    pub vsphere_user: &'a str,
    /// Left out when empty, as govmomi does (`omitempty`).
    #[serde(rename = "clusterFlavor", skip_serializing_if = "str::is_empty")]
    pub cluster_flavor: &'a str,
    /// Left out when empty, as the driver does.
    #[serde(rename = "clusterDistribution", skip_serializing_if = "str::is_empty")]
    pub cluster_distribution: &'a str,
}

impl<'a> CnsContainerCluster<'a> {
    /// A vanilla Kubernetes cluster, as the vSphere CSI driver describes it.
    pub fn kubernetes(cluster_id: &'a str, vsphere_user: &'a str, distribution: &'a str) -> Self {
        Self {
            cluster_type: "KUBERNETES",
            cluster_id,
            vsphere_user,
            cluster_flavor: "VANILLA",
            cluster_distribution: distribution,
        }
    }
}

/// `CnsBlockBackingDetails`: an existing vmdk by FCD ID (after `RegisterDisk`) or by URL.
#[derive(Serialize)]
pub(crate) struct CnsBlockBackingDetails<'a> {
    #[serde(rename = "@xsi:type")]
    pub xsi_type: &'static str,
    #[serde(rename = "backingDiskId", skip_serializing_if = "Option::is_none")]
    pub backing_disk_id: Option<&'a str>,
    #[serde(rename = "backingDiskUrlPath", skip_serializing_if = "Option::is_none")]
    pub backing_disk_url_path: Option<&'a str>,
}

impl<'a> CnsBlockBackingDetails<'a> {
    /// The disk named by its backing URL.
    pub fn url(url: &'a str) -> Self {
        Self {
            xsi_type: "CnsBlockBackingDetails",
            backing_disk_id: None,
            backing_disk_url_path: Some(url),
        }
    }

    /// The disk named by its FCD ID.
    pub fn disk_id(id: &'a str) -> Self {
        Self {
            xsi_type: "CnsBlockBackingDetails",
            backing_disk_id: Some(id),
            backing_disk_url_path: None,
        }
    }
}

/// `VirtualMachineDefinedProfileSpec`: a storage policy by profile ID.
#[derive(Serialize)]
pub(crate) struct VirtualMachineDefinedProfileSpec<'a> {
    #[serde(rename = "@xsi:type")]
    pub xsi_type: &'static str,
    #[serde(rename = "profileId")]
    pub profile_id: &'a str,
}

impl<'a> VirtualMachineDefinedProfileSpec<'a> {
    /// The policy whose profile ID is `profile_id`.
    pub fn new(profile_id: &'a str) -> Self {
        Self {
            xsi_type: "VirtualMachineDefinedProfileSpec",
            profile_id,
        }
    }
}

/// `CnsQueryVolume`.
#[derive(Serialize)]
pub(crate) struct CnsQueryVolume<'a> {
    #[serde(rename = "_this")]
    pub this: MoRef,
    pub filter: CnsQueryFilter<'a>,
}

/// `CnsQueryFilter`, the parts volmig sets.
#[derive(Serialize)]
pub(crate) struct CnsQueryFilter<'a> {
    #[serde(rename = "volumeIds", skip_serializing_if = "Vec::is_empty")]
    pub volume_ids: Vec<CnsVolumeIdXml>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub names: Vec<&'a str>,
    /// After `containerClusterIds` and `storagePolicyId` (never set), before `cursor`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub datastores: Vec<MoRef>,
    pub cursor: CnsCursor,
}

/// `CnsCursor`.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub(crate) struct CnsCursor {
    #[serde(default)]
    pub offset: i64,
    #[serde(default)]
    pub limit: i64,
    #[serde(
        rename = "totalRecords",
        skip_serializing_if = "Option::is_none",
        default
    )]
    pub total_records: Option<i64>,
}

/// `CnsQueryResult`.
#[derive(Debug, Deserialize)]
pub(crate) struct CnsQueryResult {
    #[serde(default)]
    pub volumes: Vec<CnsVolumeXml>,
    pub cursor: Option<CnsCursor>,
}

/// `CnsVolume`, the parts volmig reads.
#[derive(Debug, Deserialize)]
pub(crate) struct CnsVolumeXml {
    #[serde(rename = "volumeId")]
    pub volume_id: CnsVolumeIdXml,
    #[serde(default)]
    pub name: String,
    #[serde(rename = "volumeType", default)]
    pub volume_type: String,
    #[serde(rename = "backingObjectDetails")]
    pub backing: Option<BackingDetailsXml>,
    pub metadata: Option<VolumeMetadataXml>,
}

/// `CnsVolumeMetadata`, the parts volmig reads: the container clusters (not the entity
/// metadata, whose `clusterId` names where a PV or pod lives, not whose volume it is).
#[derive(Debug, Default, Deserialize)]
pub(crate) struct VolumeMetadataXml {
    #[serde(rename = "containerCluster")]
    pub container_cluster: Option<ContainerClusterXml>,
    #[serde(rename = "containerClusterArray", default)]
    pub container_cluster_array: Vec<ContainerClusterXml>,
}

/// `CnsContainerCluster` as a query reports it.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub(crate) struct ContainerClusterXml {
    pub cluster_type: String,
    pub cluster_id: String,
    #[serde(rename = "vSphereUser")]
    pub vsphere_user: String,
    pub cluster_flavor: String,
    pub cluster_distribution: String,
}

impl VolumeMetadataXml {
    /// The cluster IDs named, the deprecated `containerCluster` first, each once; empty
    /// IDs are left out.
    fn cluster_ids(self) -> Vec<String> {
        let mut ids: Vec<String> = Vec::with_capacity(1);
        let named = self
            .container_cluster
            .into_iter()
            .chain(self.container_cluster_array);
        for cluster in named {
            if !cluster.cluster_id.is_empty() && !ids.contains(&cluster.cluster_id) {
                ids.push(cluster.cluster_id);
            }
        }
        ids
    }
}

/// `CnsBackingObjectDetails` and its block subtype, the parts volmig reads.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct BackingDetailsXml {
    #[serde(rename = "backingDiskUrlPath")]
    pub url_path: Option<String>,
    #[serde(rename = "backingDiskPath")]
    pub disk_path: Option<String>,
}

impl CnsVolumeXml {
    /// The trait's view of this volume.
    pub fn into_volume(self) -> CnsVolume {
        let backing_path = self.backing.and_then(|b| {
            b.url_path
                .as_deref()
                .and_then(backing::path_from_backing_url)
                .or_else(|| {
                    b.disk_path
                        .as_deref()
                        .and_then(backing::path_from_datastore_path)
                })
        });
        CnsVolume {
            id: VolumeId(self.volume_id.id),
            name: self.name,
            backing_path,
            created: None,
            cluster_ids: self
                .metadata
                .map(VolumeMetadataXml::cluster_ids)
                .unwrap_or_default(),
        }
    }
}

/// `CnsDeleteVolume`.
#[derive(Serialize)]
pub(crate) struct CnsDeleteVolume {
    #[serde(rename = "_this")]
    pub this: MoRef,
    #[serde(rename = "volumeIds")]
    pub volume_ids: Vec<CnsVolumeIdXml>,
    #[serde(rename = "deleteDisk")]
    pub delete_disk: bool,
}

/// `CnsVolumeOperationBatchResult`.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct BatchResult {
    #[serde(rename = "volumeResults", default)]
    pub volume_results: Vec<VolumeOperationResult>,
}

/// `CnsVolumeOperationResult` (and subtypes), the parts volmig reads.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct VolumeOperationResult {
    #[serde(rename = "volumeId")]
    pub volume_id: Option<CnsVolumeIdXml>,
    pub fault: Option<LocalizedMethodFault>,
}

/// Starts `CnsCreateVolume` and returns its task; `fence` is asked right before each send
/// (the first, and the one after a re-login).
pub(crate) async fn start_create(
    client: &SoapClient,
    operation: &'static str,
    spec: CnsVolumeCreateSpec<'_>,
    fence: &crate::backend::SendFence,
) -> Result<MoRef, BackendError> {
    let request = CnsCreateVolume {
        this: volume_manager(),
        create_specs: vec![spec],
    };
    let before_send = || {
        fence
            .check()
            .map_err(|why| BackendError::called_off(operation, why))
    };
    task_ref(
        client
            .call_checked(
                Endpoint::Cns,
                operation,
                "CnsCreateVolume",
                &request,
                &before_send,
            )
            .await?,
        client,
        operation,
    )
}

/// Starts `CnsDeleteVolume` with `deleteDisk=false` and returns its task.
pub(crate) async fn start_delete(
    client: &SoapClient,
    operation: &'static str,
    id: &VolumeId,
) -> Result<MoRef, BackendError> {
    let request = CnsDeleteVolume {
        this: volume_manager(),
        volume_ids: vec![CnsVolumeIdXml { id: id.0.clone() }],
        delete_disk: false,
    };
    task_ref(
        client
            .call(Endpoint::Cns, operation, "CnsDeleteVolume", &request)
            .await?,
        client,
        operation,
    )
}

fn task_ref(
    response: Returnval<MoRef>,
    client: &SoapClient,
    operation: &'static str,
) -> Result<MoRef, BackendError> {
    response
        .returnval
        .ok_or_else(|| fault::malformed(operation, client.sdk_url().as_str(), "no task returned"))
}

/// One `CnsQueryVolume` page from `offset`, filtered by `names` where the server
/// supports it. Returns the volumes and the offset of the next page, if any.
pub(crate) async fn query_page(
    client: &SoapClient,
    operation: &'static str,
    names: &[&str],
    offset: i64,
) -> Result<(Vec<CnsVolume>, Option<i64>), BackendError> {
    filtered_page(client, operation, names, &[], offset).await
}

/// One `CnsQueryVolume` page from `offset`, filtered by `names` and `datastores` (each
/// left out when empty). Returns the volumes and the offset of the next page, if any.
pub(crate) async fn filtered_page(
    client: &SoapClient,
    operation: &'static str,
    names: &[&str],
    datastores: &[MoRef],
    offset: i64,
) -> Result<(Vec<CnsVolume>, Option<i64>), BackendError> {
    let request = CnsQueryVolume {
        this: volume_manager(),
        filter: CnsQueryFilter {
            volume_ids: Vec::new(),
            names: names.to_vec(),
            datastores: datastores.to_vec(),
            cursor: CnsCursor {
                offset,
                limit: PAGE_SIZE,
                total_records: None,
            },
        },
    };
    let response: Returnval<CnsQueryResult> = client
        .call(Endpoint::Cns, operation, "CnsQueryVolume", &request)
        .await?;
    let result = response.returnval.unwrap_or(CnsQueryResult {
        volumes: Vec::new(),
        cursor: None,
    });
    let next = next_offset(offset, result.volumes.len(), result.cursor);
    let volumes = result
        .volumes
        .into_iter()
        .map(CnsVolumeXml::into_volume)
        .collect();
    Ok((volumes, next))
}

/// The volumes with these IDs as CNS reports them (one `CnsQueryVolume` filtered by
/// `volumeIds`; the IDs are checked again, since servers may ignore filters).
pub(crate) async fn query_ids(
    client: &SoapClient,
    operation: &'static str,
    ids: &[VolumeId],
) -> Result<Vec<CnsVolumeXml>, BackendError> {
    let request = CnsQueryVolume {
        this: volume_manager(),
        filter: CnsQueryFilter {
            volume_ids: ids
                .iter()
                .map(|id| CnsVolumeIdXml { id: id.0.clone() })
                .collect(),
            names: Vec::new(),
            datastores: Vec::new(),
            cursor: CnsCursor {
                offset: 0,
                limit: PAGE_SIZE,
                total_records: None,
            },
        },
    };
    let response: Returnval<CnsQueryResult> = client
        .call(Endpoint::Cns, operation, "CnsQueryVolume", &request)
        .await?;
    Ok(response
        .returnval
        .map(|r| r.volumes)
        .unwrap_or_default()
        .into_iter()
        .filter(|v| ids.iter().any(|id| id.0 == v.volume_id.id))
        .collect())
}

/// The next page's offset, or `None` on the last page. Servers that ignore the cursor
/// (the simulator returns everything with a zero cursor) end paging after one page.
pub(crate) fn next_offset(offset: i64, returned: usize, cursor: Option<CnsCursor>) -> Option<i64> {
    let cursor = cursor?;
    let returned = i64::try_from(returned).ok()?;
    if returned == 0 || returned > PAGE_SIZE || cursor.offset <= offset {
        return None;
    }
    let more = match cursor.total_records {
        Some(total) if total > 0 => cursor.offset < total,
        _ => returned >= PAGE_SIZE,
    };
    more.then_some(cursor.offset)
}

#[path = "volumes_outcome.rs"]
mod outcome;
pub(crate) use outcome::{
    VolumeOutcome, delete_error, fault_outcome, volume_not_found, volume_outcome,
};

#[path = "volumes_by_disk.rs"]
mod by_disk;

#[cfg(test)]
#[path = "volumes_tests.rs"]
mod tests;
