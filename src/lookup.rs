//! What a CSI controller needs: the volume ID of a registered path, read from the
//! VolumeMigration status. Never registers.

use kube::api::Api;

use crate::api::{Phase, VolumeMigration};
use crate::backend::VolumeId;
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
        // DESIGN.md §2: never another path's volume ID.
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
