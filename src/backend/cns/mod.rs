//! The vSphere CNS backend: SOAP 1.1 over HTTPS to vCenter's `/sdk` (vim25) and
//! `/vsanHealth` (CNS) endpoints, sharing one `vmware_soap_session` login.
//!
//! Submodules by concept: `soap` (envelopes, faults), `fault` (error classes), `tls`
//! (certificate trust), `session` (transport, login, re-login), `inventory`
//! (datacenter/datastore resolution), `backing` (backing-disk URLs), `task` (waiting for
//! vCenter tasks) and `volumes` (the CNS calls).
//!
//! Behaviour worth knowing:
//! - Every SOAP fault becomes a [`BackendError`] with the fault type as `fault` and the
//!   server's message: `NotAuthenticated`/`InvalidLogin` → [`ErrorClass::NotAuthenticated`],
//!   `FileNotFound`/`NotFound` → [`ErrorClass::NotFound`], `NoPermission`/`InvalidArgument`
//!   (and other "the request is wrong" faults) → [`ErrorClass::Permanent`], everything else
//!   (network, timeouts, HTTP 5xx, `CnsFault`, ...) → [`ErrorClass::Transient`].
//! - A `NotAuthenticated` answer (expired session, vCenter restart) triggers one re-login
//!   (shared by concurrent callers) and one retry of the call.
//! - Datastores are found by name in the configured datacenters (all when none are
//!   configured, datacenters inside folders included); the mapping is cached and read
//!   again when a name is missing.
//! - `find_volumes` asks CNS for the name and checks name and backing path client-side.
//!   A volume of the same disk under another name surfaces, from vCenter 7.0 Update 1
//!   on, as `CnsAlreadyRegisteredFault` on create, whose volume ID is adopted; on older
//!   vCenters it is found by a look-up of the datastore's volumes by backing disk
//!   (`volumes_by_disk`, `disk_snapshot`; docs/design.md §4.3).
//! - `about.version`/`about.apiVersion` are read at connect ([`CnsBackend::version`]) and
//!   decide two things, as in the vSphere CSI driver: on API versions above 6.7.3 up to
//!   7.0.0, and on 6.7.3 from build 17137327 (6.7 Update 3l), a registration first makes
//!   the vmdk an FCD (`RegisterDisk`) and creates the volume with `backingDiskId`,
//!   otherwise with `backingDiskUrlPath`; below 8.0.3 `protect_from_vm_delete` sets
//!   `keepAfterDeleteVm` through VSLM (`/vslm/sdk`) and reads it back; from 8.0.3 a volume
//!   this backend just created counts as protected, and any other is registered again by
//!   its ID (`backingDiskId`), as the driver does.
//! - The create spec is the driver's: BLOCK, `containerCluster` {KUBERNETES, cluster ID,
//!   login user, VANILLA, cluster distribution} and the same in `containerClusterArray`,
//!   and the storage policy (`CreateVolumeRequest::storage_policy_name`) resolved by name
//!   through PBM (`/pbm/sdk`, cached) as `profile`; an unknown name is a permanent error.
//! - A datastore name found in several of the configured datacenters is tried in the
//!   configured order until a create succeeds.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::backend::{BackendError, CnsVolume, ErrorClass, Result, op};
use crate::volume_path::VolumePath;

mod about;
mod backing;
mod config;
mod disk_snapshot;
mod fault;
mod inventory;
mod ops;
mod pbm;
mod session;
mod soap;
mod task;
mod tls;
mod transport;
mod vim;
mod volumes;
mod vslm;

pub use about::{ApiVersion, VcenterVersion};
pub use config::{CnsConfig, DEFAULT_REQUEST_TIMEOUT, DEFAULT_USER_AGENT};
use fault::names;
use inventory::Inventory;
use session::SoapClient;
use transport::Transport;

/// The vSphere CNS backend. Cheap to clone; clones share one session.
#[derive(Clone)]
pub struct CnsBackend {
    inner: Arc<Inner>,
}

struct Inner {
    client: SoapClient,
    inventory: Inventory,
    /// `host[:port]` for backing URLs.
    authority: String,
    task_timeout: Duration,
    version: VcenterVersion,
    options: CnsOptions,
    policies: pbm::PolicyCache,
    vslm: vslm::Vslm,
    /// Volumes by backing disk per datastore (vCenter before 7.0 U1 only, §4.3).
    disks: disk_snapshot::DiskSnapshots,
}

/// What the create spec says beyond [`CnsConfig`] (the driver's `[Global]` settings).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CnsOptions {
    /// `containerCluster.clusterDistribution` (the driver's `cluster-distribution`, e.g.
    /// `OpenShift`); left out of the spec when empty.
    pub cluster_distribution: String,
}

impl fmt::Debug for CnsBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CnsBackend")
            .field("vcenter", &self.inner.client.sdk_url().as_str())
            .field("user", &self.inner.client.username())
            .finish_non_exhaustive()
    }
}

fn config_error(message: String) -> BackendError {
    BackendError::new(ErrorClass::Permanent, "Connect", names::CONFIG, message)
}

impl CnsBackend {
    /// Connects to vCenter, logs in and reads the datacenter inventory. Wrong credentials
    /// give an error of class [`ErrorClass::NotAuthenticated`] naming the URL and user.
    pub async fn connect(config: CnsConfig) -> Result<Self> {
        Self::connect_with(config, CnsOptions::default()).await
    }

    /// [`CnsBackend::connect`] with create-spec options.
    pub async fn connect_with(config: CnsConfig, options: CnsOptions) -> Result<Self> {
        let mut url = config.url.clone();
        if !url.username().is_empty() || url.password().is_some() {
            tracing::warn!("ignoring credentials embedded in the vCenter URL");
            let _ = url.set_username("");
            let _ = url.set_password(None);
        }
        if url.path().is_empty() || url.path() == "/" {
            url.set_path("/sdk");
        }
        let server = url.as_str().to_owned();
        let trust = match (url.scheme(), config.insecure, config.ca_file.as_deref()) {
            ("https", true, Some(_)) => {
                return Err(config_error(
                    "--vc-ca-file and --vc-insecure exclude each other".to_owned(),
                ));
            }
            ("https", true, None) => tls::Trust::Insecure,
            ("https", false, Some(path)) => tls::Trust::CaFile(path),
            ("https", false, None) => match config.thumbprint.as_deref() {
                // `thumbprint` of csi-vsphere.conf (docs/design.md §8.5): a self-signed vCenter.
                Some(thumbprint) => tls::Trust::Thumbprint(thumbprint),
                None => tls::Trust::SystemRoots,
            },
            ("http", ..) => {
                tracing::warn!(vcenter = %server, "vCenter URL is plain http: nothing is encrypted");
                tls::Trust::Nothing
            }
            (scheme, ..) => {
                return Err(config_error(format!(
                    "vCenter URL {server} has scheme {scheme}; expected https"
                )));
            }
        };
        let authority = backing::authority(&url)
            .ok_or_else(|| config_error(format!("vCenter URL {server} has no host")))?;
        let tls = tls::client_config(trust, &server)
            .map_err(|e| config_error(format!("TLS setup for {server}: {e}")))?;
        let transport = Transport::new(url, tls, config.request_timeout, &config.user_agent)?;
        let client = SoapClient::new(transport, config.username, config.password).await?;
        let version = VcenterVersion::from_about(&client.content().about);
        client.login().await?;
        let inventory = Inventory::new(&config.datacenters);
        inventory.refresh(&client, true).await?;
        let task_timeout = config.task_timeout;
        Ok(Self {
            inner: Arc::new(Inner {
                client,
                inventory,
                authority,
                task_timeout,
                version,
                options,
                policies: pbm::PolicyCache::default(),
                vslm: vslm::Vslm::default(),
                disks: disk_snapshot::DiskSnapshots::default(),
            }),
        })
    }

    /// The vCenter's version, as `ServiceContent.about` gave it at connect.
    pub fn version(&self) -> &VcenterVersion {
        &self.inner.version
    }

    /// Ends the vCenter session (errors are logged). Later calls log in again.
    pub async fn logout(&self) {
        self.inner.client.logout().await;
    }

    /// The backing-disk URL CNS gets for `path`.
    pub async fn backing_url(&self, path: &VolumePath) -> Result<String> {
        let location = self.resolve(path, op::CREATE).await?;
        Ok(backing::backing_url(
            &self.inner.authority,
            &location.datacenter_path,
            path.datastore(),
            path,
        ))
    }

    async fn resolve(
        &self,
        path: &VolumePath,
        operation: &'static str,
    ) -> Result<inventory::DatastoreLocation> {
        self.inner
            .inventory
            .resolve(&self.inner.client, path.datastore(), operation)
            .await
            .map_err(|e| fault::about(e, &path.canonical()))
    }

    /// Forgets cached inventory references that vCenter no longer knows.
    fn note(&self, err: BackendError) -> BackendError {
        if err.fault == "ManagedObjectNotFound" {
            self.inner.inventory.invalidate();
        }
        err
    }

    /// Every volume `CnsQueryVolume` finds with `names` and `datastores` (each left out of
    /// the filter when empty), through every page of the cursor.
    async fn query_all(
        &self,
        operation: &'static str,
        names: &[&str],
        datastores: &[soap::MoRef],
    ) -> Result<Vec<CnsVolume>> {
        let mut all = Vec::new();
        let mut offset = 0;
        loop {
            let (page, next) =
                volumes::filtered_page(&self.inner.client, operation, names, datastores, offset)
                    .await?;
            all.extend(page);
            match next {
                Some(next) => offset = next,
                None => return Ok(all),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use url::Url;

    use super::*;
    use crate::credentials::Password;

    #[test]
    fn the_password_never_prints() {
        let password = Password::new("s3cr3t-pa55");
        assert_eq!(format!("{password}"), "***");
        assert_eq!(format!("{password:?}"), "***");
        assert_eq!(password.expose(), "s3cr3t-pa55");
        let config = CnsConfig::new(
            Url::parse("https://vc.example/sdk").unwrap(),
            "admin",
            "s3cr3t-pa55",
        );
        let debug = format!("{config:?}");
        assert!(!debug.contains("s3cr3t"), "{debug}");
        assert!(debug.contains("admin"), "{debug}");
    }

    #[tokio::test]
    async fn conflicting_tls_options_are_rejected_before_connecting() {
        let mut config = CnsConfig::new(Url::parse("https://127.0.0.1:1/sdk").unwrap(), "u", "p");
        config.insecure = true;
        config.ca_file = Some(PathBuf::from("/etc/ssl/ca.pem"));
        let err = CnsBackend::connect(config).await.unwrap_err();
        assert_eq!(err.class, ErrorClass::Permanent);
        assert!(err.message.contains("exclude each other"), "{err}");
        let config = CnsConfig::new(Url::parse("ftp://vc/sdk").unwrap(), "u", "p");
        let err = CnsBackend::connect(config).await.unwrap_err();
        assert!(err.message.contains("expected https"), "{err}");
    }
}
