//! The network layer of `volmig check`: every call it makes, all of them reads (a
//! SelfSubjectAccessReview writes nothing), each result handed to the pure checks of
//! [`super::vcenter`], [`super::cluster`] and [`super::rbac`].

use std::collections::BTreeMap;

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::PersistentVolume;
use kube::api::{Api, PostParams};

use crate::backend::cns::CnsBackend;
use crate::backend::{BackendError, VolumeBackend as _, VolumeId};
use crate::credentials::Password;
use crate::vcenter_config::VcenterSettings;
use crate::volume_path::VolumePath;

use super::rbac::Permission;
use super::vcenter::Trust;

/// A CNS volume ID no volume has: the CNS check's query finds nothing and changes nothing.
const ABSENT_VOLUME_ID: &str = "volmig-check-00000000-0000-0000-0000-000000000000";

/// The distinct datastores of the in-tree vSphere PVs, each with one of its paths, the
/// number of in-tree PVs and of those whose path does not parse.
#[derive(Debug, Default)]
pub struct PvDatastores {
    /// Datastore name → one path on it.
    pub datastores: BTreeMap<String, VolumePath>,
    /// In-tree vSphere PVs seen.
    pub pvs: usize,
    /// Of those, PVs with an invalid `volumePath`.
    pub invalid: usize,
}

/// Lists the PVs (paged) and collects the datastores of `spec.vsphereVolume.volumePath`.
pub async fn pv_datastores(client: &kube::Client) -> kube::Result<PvDatastores> {
    let api: Api<PersistentVolume> = Api::all(client.clone());
    let mut found = PvDatastores::default();
    crate::k8s::client::for_each_page(&api, 500, |page| {
        for pv in page {
            let Some(raw) = pv
                .spec
                .and_then(|s| s.vsphere_volume)
                .map(|v| v.volume_path)
            else {
                continue;
            };
            found.pvs += 1;
            match VolumePath::parse(&raw) {
                Ok(path) => {
                    found
                        .datastores
                        .entry(path.datastore().to_owned())
                        .or_insert(path);
                }
                Err(_) => found.invalid += 1,
            }
        }
    })
    .await?;
    Ok(found)
}

/// Connects (TLS, login, inventory) as `volmig run` would, with `settings` and the
/// credentials as read now.
pub async fn connect(
    settings: &VcenterSettings,
    username: String,
    password: Password,
    request_timeout: std::time::Duration,
) -> Result<CnsBackend, BackendError> {
    let (mut config, options) = crate::daemon::cns_connection(settings, username, password);
    config.user_agent = crate::k8s::client::user_agent("volmig-check");
    config.request_timeout = request_timeout;
    CnsBackend::connect_with(config, options).await
}

/// How `settings` trusts vCenter's certificate.
pub fn trust(settings: &VcenterSettings) -> Trust {
    match (&settings.ca_file, settings.insecure, &settings.thumbprint) {
        (Some(path), _, _) => Trust::CaFile(path.clone()),
        (None, true, _) => Trust::Insecure,
        (None, false, Some(thumbprint)) => Trust::Thumbprint(thumbprint.clone()),
        (None, false, None) => Trust::SystemRoots,
    }
}

/// One read-only CnsQueryVolume (by an ID no volume has).
pub async fn query_cns(backend: &CnsBackend) -> Result<usize, BackendError> {
    backend
        .volumes_by_id(&[VolumeId(ABSENT_VOLUME_ID.to_owned())])
        .await
        .map(|found| found.len())
}

/// Resolves each datastore in the configured datacenters (the backend's inventory, as a
/// registration resolves it).
pub async fn resolve_datastores(
    backend: &CnsBackend,
    found: &PvDatastores,
) -> BTreeMap<String, Result<(), BackendError>> {
    let mut resolved = BTreeMap::new();
    for (name, path) in &found.datastores {
        let result = backend.backing_url(path).await.map(|_| ());
        resolved.insert(name.clone(), result);
    }
    resolved
}

/// Whether the driver's CRD is served: a list of at most one object (404: not served).
pub async fn driver_crd_served(client: &kube::Client) -> Result<bool, String> {
    crate::k8s::driver_cache::crd_served(client)
        .await
        .map_err(|e| crate::error_chain(&e))
}

/// Asks the API server whether this identity has each permission (one
/// SelfSubjectAccessReview each, concurrently).
pub async fn review(
    client: &kube::Client,
    permissions: Vec<Permission>,
) -> Vec<(Permission, Result<bool, String>)> {
    let api: Api<SelfSubjectAccessReview> = Api::all(client.clone());
    let reviews = permissions.into_iter().map(|permission| {
        let api = api.clone();
        async move {
            let review = SelfSubjectAccessReview {
                spec: SelfSubjectAccessReviewSpec {
                    resource_attributes: Some(ResourceAttributes {
                        group: Some(permission.group.to_owned()),
                        resource: Some(permission.resource.to_owned()),
                        subresource: (!permission.subresource.is_empty())
                            .then(|| permission.subresource.to_owned()),
                        verb: Some(permission.verb.to_owned()),
                        namespace: permission.namespace.clone(),
                        name: permission.name.clone(),
                        ..ResourceAttributes::default()
                    }),
                    ..SelfSubjectAccessReviewSpec::default()
                },
                ..SelfSubjectAccessReview::default()
            };
            let result = api
                .create(&PostParams::default(), &review)
                .await
                .map(|answer| answer.status.is_some_and(|s| s.allowed))
                .map_err(|e| crate::error_chain(&e));
            (permission, result)
        }
    });
    futures::future::join_all(reviews).await
}
