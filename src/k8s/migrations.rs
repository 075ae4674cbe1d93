//! Creating and deleting VolumeMigration objects. Names are derived from the canonical
//! path, so racing creators end with one object (the loser gets 409 AlreadyExists).

use kube::api::{Api, DeleteParams, ObjectMeta, PostParams};
use tracing::info;

use crate::api::{FIELD_MANAGER, FINALIZER, VolumeMigration, VolumeMigrationSpec};
use crate::volume_path::VolumePath;

/// The object volmig creates for `path`: canonical spec, finalizer already set (saving a
/// write).
pub fn new_migration(path: &VolumePath) -> VolumeMigration {
    VolumeMigration {
        metadata: ObjectMeta {
            name: Some(path.object_name()),
            finalizers: Some(vec![FINALIZER.to_owned()]),
            labels: Some(
                [(
                    "app.kubernetes.io/managed-by".to_owned(),
                    "volmig".to_owned(),
                )]
                .into(),
            ),
            ..Default::default()
        },
        spec: VolumeMigrationSpec {
            volume_path: path.canonical(),
            storage_policy_name: None,
        },
        status: None,
    }
}

/// Why the VolumeMigration of a path could not be ensured.
#[derive(Debug, thiserror::Error)]
pub enum EnsureError {
    /// The API call failed.
    #[error("creating VolumeMigration {name}")]
    Kube {
        /// The object name.
        name: String,
        /// The client error.
        source: kube::Error,
    },
    /// An object of that name exists and tracks another path (docs/design.md §2.6).
    #[error("VolumeMigration {name} exists but tracks {found:?}, not {path}")]
    NameCollision {
        /// The object name.
        name: String,
        /// The path asked for.
        path: VolumePath,
        /// The path the existing object tracks.
        found: String,
    },
}

/// Creates the VolumeMigration of `path` unless it exists. Returns true when created. An
/// existing object counts only when it tracks `path` (a 409 alone proves nothing).
pub async fn ensure_migration(
    api: &Api<VolumeMigration>,
    path: &VolumePath,
) -> Result<bool, EnsureError> {
    let name = path.object_name();
    let kube_error = |source| EnsureError::Kube {
        name: name.clone(),
        source,
    };
    let params = PostParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..Default::default()
    };
    match api.create(&params, &new_migration(path)).await {
        Ok(_) => {
            info!(%path, %name, "created VolumeMigration");
            Ok(true)
        }
        Err(kube::Error::Api(status)) if status.code == 409 => {
            let existing = api.get_opt(&name).await.map_err(kube_error)?;
            match existing {
                Some(vm) if !tracks(&vm, path) => Err(EnsureError::NameCollision {
                    name,
                    path: path.clone(),
                    found: vm.spec.volume_path,
                }),
                _ => Ok(false),
            }
        }
        Err(e) => Err(kube_error(e)),
    }
}

/// True when `vm` tracks `path` (its spec path canonicalizes to it).
pub fn tracks(vm: &VolumeMigration, path: &VolumePath) -> bool {
    VolumePath::parse(&vm.spec.volume_path).is_ok_and(|p| p == *path)
}

/// Deletes the VolumeMigration `name` (its finalizer then runs the deletion flow).
pub async fn delete_migration(api: &Api<VolumeMigration>, name: &str) -> kube::Result<()> {
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(status)) if status.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_migration_is_canonical_and_finalized() {
        let path = VolumePath::parse("[/DC0/datastore/ds]  a//b.vmdk").unwrap();
        let vm = new_migration(&path);
        assert_eq!(vm.spec.volume_path, "[ds] a/b.vmdk");
        assert_eq!(
            vm.metadata.name.as_deref(),
            Some(path.object_name().as_str())
        );
        assert_eq!(vm.metadata.finalizers, Some(vec![FINALIZER.to_owned()]));
    }
}
