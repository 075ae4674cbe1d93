//! The report's reads from the Kubernetes API: PVs, pods (their inline vSphere volumes),
//! VolumeMigrations and (unless turned off) the vSphere CSI driver's
//! `CnsVSphereVolumeMigration` objects, each as one paged
//! list (500 per page, `continue` tokens), run concurrently, and one GET of the driver's
//! syncer Lease. Read-only: no writes, no per-PV requests.

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::PersistentVolume;
use kube::Resource;
use kube::api::Api;
use kube::core::ApiResource;
use serde::Deserialize;
use serde::de::DeserializeOwned;

use super::model::{
    DriverCache, DriverCacheRequirement, DriverObject, InTreePv, InlineVolumes, Inputs,
};
use super::registrar::{SyncerLease, SyncerLeaseRead};
use crate::k8s::inline_volumes::for_each_inline_volume;
use crate::k8s::paged::{ItemMeta, PvPath, for_each_item_page};
use crate::syncer_lease::SyncerLeaseConfig;
use crate::volume_migration::VolumeMigration;

/// Objects per list page.
pub const PAGE_SIZE: u32 = 500;

/// Group of the vSphere CSI driver's cache objects.
pub const DRIVER_GROUP: &str = "cns.vmware.com";
/// Version of the vSphere CSI driver's cache objects.
pub const DRIVER_VERSION: &str = "v1alpha1";
/// Kind of the vSphere CSI driver's cache objects.
pub const DRIVER_KIND: &str = "CnsVSphereVolumeMigration";
/// Plural (resource) name of the vSphere CSI driver's cache objects.
pub const DRIVER_PLURAL: &str = "cnsvspherevolumemigrations";

/// A list the report could not read.
#[derive(Debug)]
pub struct FetchError {
    /// What was being listed.
    pub what: &'static str,
    /// The client error.
    pub error: kube::Error,
}

impl std::fmt::Display for FetchError {
    /// One line: what was listed, the API server's own message (or the whole chain of a
    /// connection error), and a hint for the usual causes.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "listing {}: ", self.what)?;
        match &self.error {
            kube::Error::Api(status) => {
                write!(f, "{} (HTTP {})", status.message, status.code)?;
                if status.code == 404 && self.what == VOLUME_MIGRATIONS {
                    write!(
                        f,
                        "; is volmig's CRD installed? (`volmig crd | kubectl apply -f -`)"
                    )?;
                }
                if status.code == 401 || status.code == 403 {
                    write!(f, "; the report needs list on {}", self.what)?;
                }
                Ok(())
            }
            other => f.write_str(&error_chain(other)),
        }
    }
}

/// The error and its whole chain of causes, each once (some errors repeat their source's
/// text).
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

impl std::error::Error for FetchError {}

const VOLUME_MIGRATIONS: &str = "VolumeMigrations";

/// `spec` of a `CnsVSphereVolumeMigration`; the field names are lower-case in the
/// driver's CRD.
#[derive(Debug, Clone, Default, Deserialize)]
struct DriverSpec {
    #[serde(default)]
    volumepath: String,
    #[serde(default)]
    volumeid: String,
}

/// The `ApiResource` of the driver's cache objects (for callers that want a dynamic `Api`).
pub fn driver_resource() -> ApiResource {
    ApiResource {
        group: DRIVER_GROUP.into(),
        version: DRIVER_VERSION.into(),
        api_version: format!("{DRIVER_GROUP}/{DRIVER_VERSION}"),
        kind: DRIVER_KIND.into(),
        plural: DRIVER_PLURAL.into(),
    }
}

/// Reads everything the report needs.
pub async fn read_inputs(
    client: kube::Client,
    requirement: DriverCacheRequirement,
) -> Result<Inputs, FetchError> {
    let pvs = read_pvs(client.clone());
    let migrations = read_migrations(client.clone());
    let driver = async {
        match requirement {
            DriverCacheRequirement::Off => Ok(DriverCache::NotChecked),
            DriverCacheRequirement::Auto | DriverCacheRequirement::On => {
                read_driver_objects(client.clone()).await
            }
        }
    };
    let inline = read_inline_volumes(client.clone());
    let ((pvs, other_pvs), migrations, driver, inline) =
        tokio::try_join!(pvs, migrations, driver, inline)?;
    Ok(Inputs {
        pvs,
        other_pvs,
        migrations,
        driver,
        inline,
    })
}

/// The vSphere CSI driver's syncer Lease of `config`, with one GET; never fails the report:
/// a 404 is [`SyncerLeaseRead::Absent`], any other error (a 403: no RBAC for it) is
/// [`SyncerLeaseRead::Unreadable`]. An empty Lease name reads nothing.
pub async fn read_syncer_lease(
    client: kube::Client,
    config: &SyncerLeaseConfig,
) -> SyncerLeaseRead {
    if config.lease_name.is_empty() {
        return SyncerLeaseRead::NotNamed;
    }
    let api: Api<Lease> = Api::namespaced(client, &config.namespace);
    match api.get_opt(&config.lease_name).await {
        Ok(None) => SyncerLeaseRead::Absent,
        Ok(Some(lease)) => SyncerLeaseRead::Found(
            lease
                .spec
                .as_ref()
                .map(SyncerLease::from)
                .unwrap_or_default(),
        ),
        Err(kube::Error::Api(status)) => SyncerLeaseRead::Unreadable {
            code: Some(status.code),
            message: status.message.clone(),
        },
        Err(other) => SyncerLeaseRead::Unreadable {
            code: None,
            message: error_chain(&other),
        },
    }
}

/// Reads the driver's controller Deployment of `config` and judges it
/// ([`crate::syncer_lease::deployment::presence`]). Not named or unreadable: `None` (the
/// Lease decides).
pub async fn read_driver_presence(
    client: kube::Client,
    config: &SyncerLeaseConfig,
) -> Option<crate::syncer_lease::DriverPresence> {
    if config.deployment.is_empty() || config.lease_name.is_empty() {
        return None;
    }
    let api: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(client, &config.namespace);
    let deployment = api.get_opt(&config.deployment).await.ok()?;
    Some(crate::syncer_lease::deployment::presence(
        deployment.as_ref(),
    ))
}

#[derive(Debug, Deserialize)]
struct Driver {
    #[serde(default)]
    metadata: ItemMeta,
    #[serde(default)]
    spec: Option<DriverSpec>,
}

/// Lists the collection at `url_path` page by page ([`PAGE_SIZE`] items) and hands every
/// page's items to `each`.
async fn for_each_page<T, F>(
    client: &kube::Client,
    url_path: &str,
    what: &'static str,
    each: F,
) -> Result<(), FetchError>
where
    T: DeserializeOwned,
    F: FnMut(Vec<T>),
{
    for_each_item_page(client, url_path, PAGE_SIZE, each)
        .await
        .map_err(|error| FetchError { what, error })
}

async fn read_pvs(client: kube::Client) -> Result<(Vec<InTreePv>, usize), FetchError> {
    let mut in_tree = Vec::new();
    let mut others = 0;
    let url = PersistentVolume::url_path(&(), None);
    for_each_page(&client, &url, "PersistentVolumes", |items: Vec<PvPath>| {
        for pv in items {
            match pv.into_in_tree() {
                Some((name, volume_path)) => in_tree.push(InTreePv { name, volume_path }),
                None => others += 1,
            }
        }
    })
    .await?;
    Ok((in_tree, others))
}

/// The pods' inline vSphere volumes; a list refused for want of RBAC (401, 403) leaves
/// them out of the report with the reason, any other failure fails the report.
async fn read_inline_volumes(client: kube::Client) -> Result<InlineVolumes, FetchError> {
    let mut volumes = Vec::new();
    let listed = for_each_inline_volume(&client, PAGE_SIZE, |volume| {
        volumes.push(InTreePv {
            name: volume.key,
            volume_path: volume.raw,
        });
    })
    .await;
    match listed {
        Ok(()) => Ok(InlineVolumes::Read(volumes)),
        Err(kube::Error::Api(status)) if status.code == 401 || status.code == 403 => {
            Ok(InlineVolumes::Unreadable(format!(
                "listing Pods: {} (HTTP {}); the report needs list on Pods to count inline \
                 vSphere volumes",
                status.message, status.code
            )))
        }
        Err(error) => Err(FetchError {
            what: "Pods",
            error,
        }),
    }
}

async fn read_migrations(client: kube::Client) -> Result<Vec<VolumeMigration>, FetchError> {
    let mut all = Vec::new();
    let url = VolumeMigration::url_path(&(), None);
    for_each_page(&client, &url, VOLUME_MIGRATIONS, |items| all.extend(items)).await?;
    Ok(all)
}

/// The driver's objects, or [`DriverCache::NotServed`] when the API answers 404 (the CRD
/// is not installed or not yet established).
async fn read_driver_objects(client: kube::Client) -> Result<DriverCache, FetchError> {
    let mut all = Vec::new();
    let url = format!("/apis/{DRIVER_GROUP}/{DRIVER_VERSION}/{DRIVER_PLURAL}");
    let listed = for_each_page(
        &client,
        &url,
        "CnsVSphereVolumeMigrations",
        |items: Vec<Driver>| {
            all.extend(items.into_iter().map(|o| {
                let spec = o.spec.unwrap_or_default();
                DriverObject {
                    name: o.metadata.name.unwrap_or_default(),
                    volume_path: spec.volumepath,
                    volume_id: spec.volumeid,
                }
            }));
        },
    )
    .await;
    match listed {
        Ok(()) => Ok(DriverCache::Served(all)),
        Err(FetchError {
            error: kube::Error::Api(status),
            ..
        }) if status.code == 404 && all.is_empty() => Ok(DriverCache::NotServed),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::k8s::paged::Page;
    use kube::core::Status;

    fn api_error(what: &'static str, code: u16, message: &str) -> String {
        FetchError {
            what,
            error: kube::Error::Api(Box::new(Status::failure(message, "x").with_code(code))),
        }
        .to_string()
    }

    #[test]
    fn api_errors_are_one_readable_line_with_a_hint() {
        assert_eq!(
            api_error(
                VOLUME_MIGRATIONS,
                404,
                "the server could not find the requested resource"
            ),
            "listing VolumeMigrations: the server could not find the requested resource \
             (HTTP 404); is volmig's CRD installed? (`volmig crd | kubectl apply -f -`)"
        );
        assert_eq!(
            api_error("PersistentVolumes", 403, "persistentvolumes is forbidden"),
            "listing PersistentVolumes: persistentvolumes is forbidden (HTTP 403); the report \
             needs list on PersistentVolumes"
        );
        assert_eq!(
            api_error("PersistentVolumes", 500, "boom"),
            "listing PersistentVolumes: boom (HTTP 500)"
        );
    }

    #[test]
    fn connection_errors_name_each_cause_once() {
        let error = FetchError {
            what: "PersistentVolumes",
            error: kube::Error::Service(Box::new(std::io::Error::other("connection refused"))),
        };
        assert_eq!(
            error.to_string(),
            "listing PersistentVolumes: ServiceError: connection refused"
        );
    }

    #[test]
    fn the_driver_resource_is_the_drivers() {
        let r = driver_resource();
        assert_eq!(r.api_version, "cns.vmware.com/v1alpha1");
        assert_eq!(r.plural, "cnsvspherevolumemigrations");
        assert_eq!(r.kind, "CnsVSphereVolumeMigration");
    }

    #[test]
    fn only_names_and_the_driver_spec_fields_are_decoded() {
        let page: Page<Driver> = serde_json::from_value(serde_json::json!({
            "metadata": {},
            "items": [{"metadata": {"name": "id-1"},
                       "spec": {"volumepath": "[ds] a.vmdk", "volumeid": "id-1",
                                "protectvolumefromvmdelete": true}}]
        }))
        .unwrap();
        assert_eq!(page.metadata.continue_, None);
        let spec = page.items[0].spec.as_ref().unwrap();
        assert_eq!(
            (spec.volumepath.as_str(), spec.volumeid.as_str()),
            ("[ds] a.vmdk", "id-1")
        );
    }

    #[test]
    fn collection_paths() {
        assert_eq!(
            PersistentVolume::url_path(&(), None),
            "/api/v1/persistentvolumes"
        );
        assert_eq!(
            VolumeMigration::url_path(&(), None),
            "/apis/volmig.io/v1alpha1/volumemigrations"
        );
    }
}
