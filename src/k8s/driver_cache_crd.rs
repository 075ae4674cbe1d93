//! The driver's CRD as volmig declares it: `CnsVSphereVolumeMigration`
//! (`cns.vmware.com/v1alpha1`, cluster-scoped), whether it is served, and its YAML.

use kube::api::Api;
use kube::{CustomResource, CustomResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The driver's object: one cached mapping. Field names are lower-case, as the driver's
/// CRD has them.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[kube(
    group = "cns.vmware.com",
    version = "v1alpha1",
    kind = "CnsVSphereVolumeMigration",
    plural = "cnsvspherevolumemigrations",
    doc = "The vSphere CSI driver's mapping of an in-tree vmdk path to its CNS volume ID."
)]
pub struct CnsVSphereVolumeMigrationSpec {
    /// The in-tree volume path exactly as the PV spells it.
    pub volumepath: String,
    /// The CNS volume ID.
    pub volumeid: String,
    /// True when the FCD is kept if the VM it is attached to is deleted.
    #[serde(default)]
    pub protectvolumefromvmdelete: bool,
}

/// True when the API server serves the driver's CRD: a list of at most one object's
/// metadata (404: not served).
pub async fn crd_served(client: &kube::Client) -> kube::Result<bool> {
    let api: Api<CnsVSphereVolumeMigration> = Api::all(client.clone());
    match api
        .list_metadata(&kube::api::ListParams::default().limit(1))
        .await
    {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(false),
        Err(e) => Err(e),
    }
}

/// The driver's CRD as YAML (`volmig crd --driver`; the chart's `driverCache.installCrd`).
pub fn crd_yaml() -> Result<String, serde_saphyr::ser::Error> {
    serde_saphyr::to_string(&CnsVSphereVolumeMigration::crd())
}
