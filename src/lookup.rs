//! What a CSI controller needs: the volume ID of a registered path, read from the
//! VolumeMigration status. Never registers.

use k8s_openapi::api::core::v1::PersistentVolume;
use kube::api::Api;

use crate::backend::VolumeId;
use crate::volume_migration::{Phase, VolumeMigration};
use crate::volume_path::{PathError, VolumePath};

/// Why a lookup gave no volume ID.
#[derive(Debug, thiserror::Error)]
pub enum LookupError {
    /// The path is not a valid in-tree volume path.
    #[error(transparent)]
    InvalidPath(#[from] PathError),
    /// Not registered yet (no object, or not in phase Registered): retry later.
    #[error("{path} is not registered yet, retry later ({state})")]
    NotRegisteredYet {
        /// The canonical path.
        path: VolumePath,
        /// What was found instead.
        state: String,
    },
    /// The object named after the path tracks another path.
    #[error(
        "VolumeMigration {name} tracks {found:?}, not {path}: name collision, see docs/design.md"
    )]
    NameCollision {
        /// The object name.
        name: String,
        /// The path asked for.
        path: VolumePath,
        /// The path the object tracks.
        found: String,
    },
    /// The API server could not be asked.
    #[error("looking up VolumeMigration {name}: {source}")]
    Kube {
        /// The object name.
        name: String,
        /// The client error.
        source: kube::Error,
    },
    /// `lookup --pv`: no PersistentVolume of that name.
    #[error("PersistentVolume {name} not found")]
    PvNotFound {
        /// The PV name asked for.
        name: String,
    },
    /// `lookup --pv`: the PV has no `spec.vsphereVolume`.
    #[error(
        "PersistentVolume {name} is not an in-tree vSphere volume (no spec.vsphereVolume){hint}"
    )]
    NotInTreeVsphere {
        /// The PV name asked for.
        name: String,
        /// More detail, e.g. the CSI volume handle of a CSI PV (may be empty).
        hint: String,
    },
    /// `lookup --pv`: the PV could not be read.
    #[error("reading PersistentVolume {name}: {source}")]
    KubePv {
        /// The PV name.
        name: String,
        /// The client error.
        source: kube::Error,
    },
}

/// The CNS volume ID published for the in-tree vSphere PV `name`: reads the PV, takes
/// its `spec.vsphereVolume.volumePath` and looks that path up like [`lookup`].
pub async fn lookup_pv(client: kube::Client, name: &str) -> Result<VolumeId, LookupError> {
    let pvs: Api<PersistentVolume> = Api::all(client.clone());
    let pv = pvs
        .get_opt(name)
        .await
        .map_err(|source| LookupError::KubePv {
            name: name.to_owned(),
            source,
        })?
        .ok_or_else(|| LookupError::PvNotFound {
            name: name.to_owned(),
        })?;
    let spec = pv.spec.unwrap_or_default();
    let Some(volume) = spec.vsphere_volume else {
        let hint = match spec.csi {
            Some(csi) => format!(
                "; it is a CSI volume of driver {} with volume handle {}",
                csi.driver, csi.volume_handle
            ),
            None => String::new(),
        };
        return Err(LookupError::NotInTreeVsphere {
            name: name.to_owned(),
            hint,
        });
    };
    lookup(client, &volume.volume_path).await
}

/// The CNS volume ID published for `raw` (any accepted spelling of the path).
pub async fn lookup(client: kube::Client, raw: &str) -> Result<VolumeId, LookupError> {
    let path = VolumePath::parse(raw)?;
    let name = path.object_name();
    let api: Api<VolumeMigration> = Api::all(client);
    let object = api
        .get_opt(&name)
        .await
        .map_err(|source| LookupError::Kube {
            name: name.clone(),
            source,
        })?;
    let Some(vm) = object else {
        return Err(LookupError::NotRegisteredYet {
            path,
            state: format!("no VolumeMigration {name}"),
        });
    };
    if !crate::k8s::migrations::tracks(&vm, &path) {
        // docs/design.md §2.6: never another path's volume ID.
        return Err(LookupError::NameCollision {
            name,
            path,
            found: vm.spec.volume_path,
        });
    }
    let status = vm.status.unwrap_or_default();
    match (status.phase, status.volume_id) {
        (Some(Phase::Registered), Some(id)) if vm.metadata.deletion_timestamp.is_none() => {
            Ok(VolumeId(id))
        }
        (phase, _) => Err(LookupError::NotRegisteredYet {
            path,
            state: format!("phase {}", phase.map_or("none", Phase::as_str)),
        }),
    }
}
