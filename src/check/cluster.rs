//! The cluster checks of `volmig check` (docs/operations.md, "Preflight: `volmig check`"):
//! the cluster ID against the vSphere CSI driver's (docs/design.md §8.5), the driver's
//! `CnsVSphereVolumeMigration` CRD and its syncer Lease (docs/design.md §8.7). Pure:
//! [`super::probe`] reads, these decide.

use crate::report::registrar::{Mode, Registrar};
use crate::vcenter_config::ConfiguredClusterId;

use super::cluster_id::{self, ClusterIdError};
use super::model::Check;

/// Name of the cluster-ID line.
pub const CLUSTER_ID: &str = "Cluster ID";
/// Name of the driver-CRD line.
pub const DRIVER_CRD: &str = "Driver CRD";
/// Name of the syncer line.
pub const SYNCER: &str = "Driver syncer";

/// The cluster-ID line: volmig's configured ID against the driver's ConfigMap as read
/// (the daemon's own decision, src/daemon/cluster_id.rs): ✗ on a mismatch, on none at all
/// and when the ConfigMap cannot be read.
pub fn cluster_id_check(
    configured: Option<&ConfiguredClusterId>,
    driver: &Result<Option<String>, ClusterIdError>,
    namespace: &str,
) -> Check {
    let driver = match driver {
        Ok(driver) => driver,
        Err(e) => {
            return Check::fail(
                CLUSTER_ID,
                e.to_string(),
                format!(
                    "grant `get` on configmaps/{} in {namespace}",
                    cluster_id::CONFIG_MAP
                ),
            );
        }
    };
    match cluster_id::decide(configured, driver.as_deref(), namespace) {
        Ok(decided) => Check::pass(
            CLUSTER_ID,
            format!("{:?} from {}", decided.id, decided.from),
        ),
        Err(e) => {
            let fix = match driver {
                Some(id) => format!(
                    "set --cluster-id / [Global] cluster-id to {id:?}, or unset both to use \
                     the driver's"
                ),
                None => "set --cluster-id (chart: clusterId) or [Global] cluster-id of \
                         csi-vsphere.conf"
                    .to_owned(),
            };
            Check::fail(CLUSTER_ID, e.to_string(), fix)
        }
    }
}

/// The driver-CRD line: `Ok(true)` when `cnsvspherevolumemigrations.cns.vmware.com` is
/// served, `Ok(false)` when the API answers 404 (a warning: volmig publishes once it is).
pub fn driver_crd_check(served: &Result<bool, String>) -> Check {
    const CRD: &str = "cnsvspherevolumemigrations.cns.vmware.com";
    match served {
        Ok(true) => Check::pass(DRIVER_CRD, format!("{CRD} served")),
        Ok(false) => Check::warn(
            DRIVER_CRD,
            format!("{CRD} not installed: volmig publishes once it is"),
            "install the vSphere CSI driver (or the chart's driverCache.installCrd)",
        ),
        Err(message) => Check::fail(
            DRIVER_CRD,
            format!("cannot list {CRD}: {message}"),
            "grant list on cnsvspherevolumemigrations.cns.vmware.com (the chart's ClusterRole)",
        ),
    }
}

/// The syncer line from one read of the driver syncer's Lease, decided as `volmig report`
/// decides it (src/report/registrar.rs): own or follow pass, unknown is a warning (the
/// RBAC lines name a missing permission).
pub fn syncer_check(registrar: &Registrar) -> Check {
    let holder = registrar
        .holder
        .as_deref()
        .map(|h| format!(" (held by {h})"))
        .unwrap_or_default();
    let detail = format!("{}{holder}: {}", registrar.mode, registrar.why);
    match registrar.mode {
        Mode::Own | Mode::Follow | Mode::Hold => Check::pass(SYNCER, detail),
        Mode::Unknown => Check::warn(
            SYNCER,
            detail,
            "grant get/list/watch on the syncer Lease (--driver-syncer-lease) in \
             --driver-namespace",
        ),
    }
}

#[cfg(test)]
#[path = "cluster_tests.rs"]
mod tests;
