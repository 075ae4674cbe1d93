//! Creating and deleting VolumeMigration objects. Names are derived from the canonical
//! path, so racing creators end with one object (the loser gets 409 AlreadyExists).

use super::error_class::{KubeErrorClass, classify};
use kube::api::{Api, DeleteParams, ObjectMeta, PostParams};
use tracing::debug;

use crate::volume_migration::{FIELD_MANAGER, FINALIZER, VolumeMigration, VolumeMigrationSpec};
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
            // Debug: one line per new PV at info would double the log of a migration;
            // the registration's own lines (create, outcome) say what matters.
            debug!(%path, %name, "created VolumeMigration");
            Ok(true)
        }
        Err(e) if classify(&e) == KubeErrorClass::Conflict => {
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
        Err(e) if classify(&e) == KubeErrorClass::Gone => Ok(()),
        Err(e) => Err(e),
    }
}

/// Drops the fields of a VolumeMigration volmig never reads: the reference for what the
/// compact VolumeMigration cache keeps (`controller::migration_cache`, whose tests check that
/// it rebuilds exactly this). Kept: name, uid and resourceVersion (Events and
/// preconditions), generation, finalizers, deletion, spec, status without conditions.
pub fn strip_for_cache(vm: &mut VolumeMigration) {
    let meta = &mut vm.metadata;
    meta.managed_fields = None;
    meta.annotations = None;
    meta.labels = None;
    meta.owner_references = None;
    meta.generate_name = None;
    meta.self_link = None;
    meta.creation_timestamp = None;
    if let Some(status) = vm.status.as_mut() {
        status.conditions = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_keeps_what_decisions_read_and_drops_the_rest() {
        let mut vm: VolumeMigration = serde_json::from_value(serde_json::json!({
            "apiVersion": "volmig.io/v1alpha1",
            "kind": "VolumeMigration",
            "metadata": {
                "name": "disk-1", "resourceVersion": "7", "generation": 2,
                "finalizers": ["volmig.io/registration"],
                "labels": {"app.kubernetes.io/managed-by": "volmig"},
                "creationTimestamp": "2026-01-01T00:00:00Z",
                "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{...}"},
                "managedFields": [{"manager": "kubectl", "operation": "Apply"}],
            },
            "spec": {"volumePath": "[ds] kubevols/a.vmdk"},
            "status": {
                "phase": "Registered", "volumeID": "vol-1", "persistentVolumes": ["pv-a"],
                "conditions": [{"type": "Ready", "status": "True", "reason": "Created",
                    "message": "CNS volume vol-1", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
            },
        }))
        .unwrap();
        let before = crate::controller::full_sync::record(&vm);
        strip_for_cache(&mut vm);
        assert_eq!(crate::controller::full_sync::record(&vm), before);
        assert!(vm.metadata.managed_fields.is_none());
        assert!(vm.metadata.annotations.is_none());
        assert!(vm.metadata.labels.is_none());
        assert!(vm.metadata.creation_timestamp.is_none());
        assert_eq!(vm.metadata.resource_version.as_deref(), Some("7"));
        assert_eq!(vm.metadata.generation, Some(2));
        let status = vm.status.as_ref().unwrap();
        assert!(status.conditions.is_none());
        assert_eq!(status.volume_id.as_deref(), Some("vol-1"));
        assert_eq!(vm.metadata.finalizers.as_ref().map(Vec::len), Some(1));
    }

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
