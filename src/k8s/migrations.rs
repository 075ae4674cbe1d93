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

/// Creates the VolumeMigration of `path` unless it exists. Returns true when created.
pub async fn ensure_migration(api: &Api<VolumeMigration>, path: &VolumePath) -> kube::Result<bool> {
    let params = PostParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..Default::default()
    };
    match api.create(&params, &new_migration(path)).await {
        Ok(_) => {
            info!(%path, name = %path.object_name(), "created VolumeMigration");
            Ok(true)
        }
        Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
        Err(e) => Err(e),
    }
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
