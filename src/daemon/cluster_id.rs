//! The CNS cluster ID volmig writes on registrations (docs/design.md §8.5), decided once at
//! start-up: volmig's own (`--cluster-id`, else `[Global] cluster-id` of `--csi-config`)
//! and the vSphere CSI driver's must agree.
//!
//! The driver (kubernetes-sigs/vsphere-csi-driver @ bf80902) takes its cluster ID from
//! `[Global] cluster-id` of `csi-vsphere.conf`, else from the immutable ConfigMap
//! `vsphere-csi-cluster-id` (`ClusterIDConfigMapName`, pkg/common/config/config.go:110),
//! key `clusterID`, in its own namespace: its controller creates that ConfigMap with a
//! generated ID when the conf names none (pkg/csi/service/driver.go:155-184) and its syncer
//! reads it (pkg/syncer/util.go:425-436); both refuse a conf ID beside the ConfigMap
//! (driver.go:186-194, util.go:437-445). A registration carrying another cluster ID is
//! foreign to the driver: its stale clean-up and its full sync treat it as another
//! cluster's. So volmig refuses to start when the two differ, and takes the driver's ID
//! when it has none of its own; the same ID in both places is accepted.

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use tracing::{info, warn};

use crate::cli::RunArgs;
use crate::vcenter_config::ConfiguredClusterId;

/// The driver's ConfigMap holding its generated cluster ID.
pub const CONFIG_MAP: &str = "vsphere-csi-cluster-id";
/// The key of the ID in [`CONFIG_MAP`].
pub const KEY: &str = "clusterID";

/// The cluster ID decided on, and where it came from (for the start-up log).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterId {
    /// The ID written on registrations.
    pub id: String,
    /// Where it came from, e.g. `--cluster-id (the driver's ConfigMap agrees)`.
    pub from: String,
}

/// Why volmig does not start: no cluster ID anywhere, or two that differ. The message names
/// the values (a cluster ID is not a secret) and where each came from.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ClusterIdError(pub String);

/// The decision: `configured` is volmig's own cluster ID, `driver` the `clusterID` of the
/// driver's ConfigMap in `namespace` (`None`: no ConfigMap, or no ID in it).
///
/// Neither: an error saying where to set one. One: that one. Both and equal: that one.
/// Both and different: an error naming both values and where each came from.
pub fn decide(
    configured: Option<&ConfiguredClusterId>,
    driver: Option<&str>,
    namespace: &str,
) -> Result<ClusterId, ClusterIdError> {
    let config_map = format!("ConfigMap {namespace}/{CONFIG_MAP}");
    match (configured, driver) {
        (None, None) => Err(ClusterIdError(format!(
            "no cluster ID: set --cluster-id, [Global] cluster-id in --csi-config, or let the \
             driver create {config_map}"
        ))),
        (None, Some(id)) => Ok(ClusterId {
            id: id.to_owned(),
            from: format!("the vSphere CSI driver's {config_map}"),
        }),
        (Some(own), None) => Ok(ClusterId {
            id: own.id.clone(),
            from: format!("{} (no {config_map})", own.source),
        }),
        (Some(own), Some(id)) if own.id == id => Ok(ClusterId {
            id: own.id.clone(),
            from: format!("{} (the driver's {config_map} agrees)", own.source),
        }),
        (Some(own), Some(id)) => Err(ClusterIdError(format!(
            "cluster ID mismatch: {} is {:?} but the vSphere CSI driver's {config_map} (key \
             {KEY}) is {id:?}; registrations with another cluster's ID are foreign to the \
             driver (its stale clean-up and full sync treat them as another cluster's): set \
             --cluster-id to {id:?}, or leave --cluster-id and [Global] cluster-id unset to \
             use the driver's",
            own.source, own.id
        ))),
    }
}

/// The driver's cluster ID in `config_map`: its `clusterID`, unless missing or empty.
pub fn driver_cluster_id(config_map: &ConfigMap) -> Option<String> {
    config_map
        .data
        .as_ref()
        .and_then(|data| data.get(KEY))
        .filter(|id| !id.trim().is_empty())
        .cloned()
}

/// Reads the driver's ConfigMap in `namespace`: `None` when it does not exist (404) or
/// holds no ID; a 403 is an error naming the missing RBAC.
pub async fn read_driver_cluster_id(
    client: &kube::Client,
    namespace: &str,
) -> Result<Option<String>, ClusterIdError> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), namespace);
    match api.get(CONFIG_MAP).await {
        Ok(config_map) => {
            let id = driver_cluster_id(&config_map);
            if id.is_none() {
                warn!(
                    config_map = %format!("{namespace}/{CONFIG_MAP}"),
                    "the vSphere CSI driver's cluster-ID ConfigMap has no {KEY}; ignoring it"
                );
            }
            Ok(id)
        }
        Err(kube::Error::Api(status)) if status.code == 404 => {
            info!(
                config_map = %format!("{namespace}/{CONFIG_MAP}"),
                "the vSphere CSI driver's cluster-ID ConfigMap does not exist"
            );
            Ok(None)
        }
        Err(kube::Error::Api(status)) if status.code == 403 => Err(ClusterIdError(format!(
            "cannot read the vSphere CSI driver's cluster ID: {}; volmig's ServiceAccount \
             needs `get` on configmaps named {CONFIG_MAP} in namespace {namespace} (the \
             chart's Role <release>-driver-syncer grants it)",
            status.message
        ))),
        Err(e) => Err(ClusterIdError(format!(
            "cannot read the vSphere CSI driver's ConfigMap {namespace}/{CONFIG_MAP}: {}",
            crate::error_chain(&e)
        ))),
    }
}

/// The cluster ID of this run: volmig's own configuration checked against the driver's
/// ConfigMap in `--driver-namespace` ([`decide`]). Logged once.
pub async fn resolve(
    client: &kube::Client,
    args: &RunArgs,
    configured: Option<&crate::vcenter_config::ConfiguredClusterId>,
) -> anyhow::Result<String> {
    let driver = read_driver_cluster_id(client, &args.driver.driver_namespace).await?;
    let decided = decide(configured, driver.as_deref(), &args.driver.driver_namespace)?;
    info!(cluster_id = %decided.id, from = %decided.from, "CNS cluster ID");
    Ok(decided.id)
}

#[cfg(test)]
#[path = "cluster_id_tests.rs"]
mod tests;
