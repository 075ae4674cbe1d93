//! The network layer of `volmig check`: every call it makes, all of them reads (a
//! SelfSubjectReview or an access review writes nothing), each result handed to the pure
//! checks of [`super::vcenter`], [`super::cluster`], [`super::subject`] and [`super::rbac`].

use std::collections::BTreeMap;

use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec, SubjectAccessReview,
    SubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::PersistentVolume;
use kube::api::{Api, PostParams};

use crate::backend::cns::CnsBackend;
use crate::backend::{BackendError, VolumeBackend as _, VolumeId};
use crate::credentials::Password;
use crate::vcenter_config::VcenterSettings;
use crate::volume_path::VolumePath;

use super::rbac::Permission;
use super::subject::Subject;
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

/// One request the API server answers whenever it is reachable (`/version`): `Err` says
/// why it could not be reached.
pub async fn reachable(client: &kube::Client) -> Result<(), String> {
    client
        .apiserver_version()
        .await
        .map(|_| ())
        .map_err(|e| crate::error_chain(&e))
}

/// The caller's user name, from a SelfSubjectReview (authentication.k8s.io/v1, every
/// authenticated user may create one); `None` when the API server does not say.
pub async fn caller(client: &kube::Client) -> Option<String> {
    let api: Api<SelfSubjectReview> = Api::all(client.clone());
    api.create(&PostParams::default(), &SelfSubjectReview::default())
        .await
        .ok()
        .and_then(|review| review.status?.user_info?.username)
}

/// Asks the API server whether `subject` has each permission (concurrently): one
/// SelfSubjectAccessReview each when the subject is the caller, else one
/// SubjectAccessReview each for the ServiceAccount's user and groups.
pub async fn review(
    client: &kube::Client,
    subject: &Subject,
    permissions: Vec<Permission>,
) -> Vec<(Permission, Result<bool, String>)> {
    let by_name = match subject {
        Subject::ServiceAccount {
            account,
            as_caller: false,
        } => Some((account.username(), account.groups())),
        _ => None,
    };
    let reviews = permissions.into_iter().map(|permission| {
        let by_name = by_name.clone();
        async move {
            let attributes = attributes(&permission);
            let result = match by_name {
                Some((user, groups)) => {
                    let review = SubjectAccessReview {
                        spec: SubjectAccessReviewSpec {
                            resource_attributes: Some(attributes),
                            user: Some(user),
                            groups: Some(groups),
                            ..SubjectAccessReviewSpec::default()
                        },
                        ..SubjectAccessReview::default()
                    };
                    Api::<SubjectAccessReview>::all(client.clone())
                        .create(&PostParams::default(), &review)
                        .await
                        .map(|answer| answer.status.is_some_and(|s| s.allowed))
                }
                None => {
                    let review = SelfSubjectAccessReview {
                        spec: SelfSubjectAccessReviewSpec {
                            resource_attributes: Some(attributes),
                            ..SelfSubjectAccessReviewSpec::default()
                        },
                        ..SelfSubjectAccessReview::default()
                    };
                    Api::<SelfSubjectAccessReview>::all(client.clone())
                        .create(&PostParams::default(), &review)
                        .await
                        .map(|answer| answer.status.is_some_and(|s| s.allowed))
                }
            };
            (permission, result.map_err(|e| crate::error_chain(&e)))
        }
    });
    futures::future::join_all(reviews).await
}

/// The resource attributes of one permission.
fn attributes(permission: &Permission) -> ResourceAttributes {
    ResourceAttributes {
        group: Some(permission.group.to_owned()),
        resource: Some(permission.resource.to_owned()),
        subresource: (!permission.subresource.is_empty())
            .then(|| permission.subresource.to_owned()),
        verb: Some(permission.verb.to_owned()),
        namespace: permission.namespace.clone(),
        name: permission.name.clone(),
        ..ResourceAttributes::default()
    }
}
