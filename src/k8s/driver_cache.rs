//! The vSphere CSI driver's own vmdk → volume-ID cache: cluster-scoped
//! `CnsVSphereVolumeMigration` objects (`cns.vmware.com/v1alpha1`, docs/design.md §8).
//!
//! The driver caches `spec.volumepath` (the raw spelling of the PV) → `spec.volumeid` and
//! registers the vmdk itself on a miss. volmig publishes one object per Registered path
//! and per raw spelling, so that the miss never happens, and adopts from objects the driver
//! wrote earlier.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard, PoisonError};

use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::{CustomResource, CustomResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::api::FIELD_MANAGER;
use crate::backend::VolumeId;
use crate::volume_path::VolumePath;

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

/// The driver's CRD as YAML (`volmig crd --driver`; the chart's `driverCache.installCrd`).
pub fn crd_yaml() -> Result<String, serde_saphyr::ser::Error> {
    serde_saphyr::to_string(&CnsVSphereVolumeMigration::crd())
}

/// The label volmig sets on the objects it creates (`app.kubernetes.io/managed-by`).
pub const MANAGED_BY: &str = "app.kubernetes.io/managed-by";

/// True when volmig created `object` (its [`MANAGED_BY`] label says `volmig`).
pub fn is_ours(object: &CnsVSphereVolumeMigration) -> bool {
    object
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(MANAGED_BY))
        .is_some_and(|v| v == "volmig")
}

/// The name of the object of `raw` spelling for `id`: the ID itself for the primary
/// (oldest PV's) spelling, `<id>-<first 8 hex of SHA-256(raw)>` for the others.
pub fn object_name(id: &VolumeId, raw: &str, primary: bool) -> String {
    if primary {
        id.0.clone()
    } else {
        let digest = hex::encode(Sha256::digest(raw.as_bytes()));
        format!("{}-{}", id.0, &digest[..8])
    }
}

/// The objects that should exist for a Registered path: `spellings` are the raw paths of
/// its PVs, oldest PV first (duplicates dropped). Keyed by object name.
pub fn desired_objects(
    id: &VolumeId,
    spellings: &[String],
    protected: bool,
) -> BTreeMap<String, CnsVSphereVolumeMigrationSpec> {
    let mut out = BTreeMap::new();
    let mut seen = std::collections::HashSet::new();
    for (i, raw) in spellings.iter().filter(|r| seen.insert(*r)).enumerate() {
        out.insert(
            object_name(id, raw, i == 0),
            CnsVSphereVolumeMigrationSpec {
                volumepath: raw.clone(),
                volumeid: id.0.clone(),
                protectvolumefromvmdelete: protected,
            },
        );
    }
    out
}

/// One change to the driver's objects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DriverChange {
    /// Create the object.
    Create(String, CnsVSphereVolumeMigrationSpec),
    /// Replace the spec of an existing object.
    Update(String, CnsVSphereVolumeMigrationSpec),
    /// Delete an object of this ID that no spelling needs any longer.
    Delete(String),
}

/// What to change so that the objects of `id` are exactly `desired` (pure). `existing`
/// holds the objects whose name is `id` or starts with `id-` (volmig's naming).
pub fn plan_changes(
    id: &VolumeId,
    desired: &BTreeMap<String, CnsVSphereVolumeMigrationSpec>,
    existing: &BTreeMap<String, CnsVSphereVolumeMigrationSpec>,
) -> Vec<DriverChange> {
    let mut changes = Vec::new();
    for (name, spec) in desired {
        match existing.get(name) {
            None => changes.push(DriverChange::Create(name.clone(), spec.clone())),
            Some(have) if have != spec => {
                changes.push(DriverChange::Update(name.clone(), spec.clone()));
            }
            Some(_) => {}
        }
    }
    let alias_prefix = format!("{}-", id.0);
    for name in existing.keys() {
        let ours = *name == id.0 || is_alias_of(name, &alias_prefix);
        if ours && !desired.contains_key(name) {
            changes.push(DriverChange::Delete(name.clone()));
        }
    }
    changes
}

fn is_alias_of(name: &str, prefix: &str) -> bool {
    name.strip_prefix(prefix)
        .is_some_and(|rest| rest.len() == 8 && rest.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// The driver's objects as volmig needs them: by name, and by canonical path (adoption).
#[derive(Default)]
pub struct DriverIndex {
    inner: Mutex<IndexState>,
}

#[derive(Default)]
struct IndexState {
    /// Ordered, so that the objects of one ID (`id`, `id-…`) are one range.
    by_name: BTreeMap<String, CnsVSphereVolumeMigrationSpec>,
    /// Objects volmig created (labelled [`MANAGED_BY`] = `volmig`); the others are the
    /// driver's own.
    ours: std::collections::HashSet<String>,
    by_path: HashMap<VolumePath, Vec<String>>,
    synced: bool,
}

impl DriverIndex {
    fn lock(&self) -> MutexGuard<'_, IndexState> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records an object as it is now; `ours` when volmig created it.
    pub fn upsert(&self, name: &str, spec: &CnsVSphereVolumeMigrationSpec, ours: bool) {
        let mut s = self.lock();
        Self::unlink(&mut s, name);
        if ours {
            s.ours.insert(name.to_owned());
        } else {
            s.ours.remove(name);
        }
        if let Ok(path) = VolumePath::parse(&spec.volumepath) {
            s.by_path.entry(path).or_default().push(name.to_owned());
        }
        s.by_name.insert(name.to_owned(), spec.clone());
    }

    /// Records an object volmig just wrote: created by volmig, or an update that keeps
    /// whoever created it.
    pub fn record_written(&self, name: &str, spec: &CnsVSphereVolumeMigrationSpec, created: bool) {
        let ours = created || self.lock().ours.contains(name);
        self.upsert(name, spec, ours);
    }

    /// Forgets an object.
    pub fn remove(&self, name: &str) {
        let mut s = self.lock();
        Self::unlink(&mut s, name);
        s.by_name.remove(name);
        s.ours.remove(name);
    }

    fn unlink(s: &mut IndexState, name: &str) {
        let Some(old) = s.by_name.get(name) else {
            return;
        };
        if let Ok(path) = VolumePath::parse(&old.volumepath)
            && let Some(names) = s.by_path.get_mut(&path)
        {
            names.retain(|n| n != name);
            if names.is_empty() {
                s.by_path.remove(&path);
            }
        }
    }

    /// Forgets every object not in `keep` (after a re-list).
    pub fn retain(&self, keep: &std::collections::HashSet<String>) {
        let gone: Vec<String> = self
            .lock()
            .by_name
            .keys()
            .filter(|n| !keep.contains(*n))
            .cloned()
            .collect();
        for name in gone {
            self.remove(&name);
        }
    }

    /// Marks the initial list as complete.
    pub fn set_synced(&self) {
        self.lock().synced = true;
    }

    /// True once the initial list has been indexed.
    pub fn is_synced(&self) -> bool {
        self.lock().synced
    }

    /// The volume IDs the driver's own objects (not volmig's) hold for `path` (any
    /// spelling), sorted, unique.
    pub fn ids_for(&self, path: &VolumePath) -> Vec<VolumeId> {
        let s = self.lock();
        let mut ids: Vec<VolumeId> = s
            .by_path
            .get(path)
            .into_iter()
            .flatten()
            .filter(|n| !s.ours.contains(*n))
            .filter_map(|n| s.by_name.get(n))
            .map(|spec| VolumeId(spec.volumeid.clone()))
            .collect();
        ids.sort();
        ids.dedup();
        ids
    }

    /// The objects named after `id` (its primary and its aliases): one range of the
    /// ordered names, so a full sync over every mapping stays linear.
    pub fn objects_of(&self, id: &VolumeId) -> BTreeMap<String, CnsVSphereVolumeMigrationSpec> {
        let prefix = format!("{}-", id.0);
        self.lock()
            .by_name
            .range(id.0.clone()..)
            .take_while(|(n, _)| n.starts_with(&id.0))
            .filter(|(n, _)| **n == id.0 || is_alias_of(n, &prefix))
            .map(|(n, s)| (n.clone(), s.clone()))
            .collect()
    }

    /// Names of volmig's own objects for `path` (any spelling) that hold another ID than
    /// `id`: left over from a mapping that changed.
    pub fn stale_ours(&self, path: &VolumePath, id: &VolumeId) -> Vec<String> {
        let s = self.lock();
        s.by_path
            .get(path)
            .into_iter()
            .flatten()
            .filter(|n| s.ours.contains(*n))
            .filter(|n| s.by_name.get(*n).is_some_and(|spec| spec.volumeid != id.0))
            .cloned()
            .collect()
    }

    /// Number of objects.
    pub fn len(&self) -> usize {
        self.lock().by_name.len()
    }

    /// True when there is no object.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Applies `changes` through `api`; an object created meanwhile (409) is updated instead.
pub async fn apply_changes(
    api: &Api<CnsVSphereVolumeMigration>,
    changes: &[DriverChange],
) -> kube::Result<()> {
    let post = PostParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PostParams::default()
    };
    let patch_params = PatchParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PatchParams::default()
    };
    for change in changes {
        match change {
            DriverChange::Create(name, spec) => {
                let mut object = CnsVSphereVolumeMigration::new(name, spec.clone());
                object.metadata.labels =
                    Some([(MANAGED_BY.to_owned(), "volmig".to_owned())].into());
                match api.create(&post, &object).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(s)) if s.code == 409 => {
                        let patch = serde_json::json!({ "spec": spec });
                        api.patch(name, &patch_params, &Patch::Merge(&patch))
                            .await?;
                    }
                    Err(e) => return Err(e),
                }
            }
            DriverChange::Update(name, spec) => {
                let patch = serde_json::json!({ "spec": spec });
                api.patch(name, &patch_params, &Patch::Merge(&patch))
                    .await?;
            }
            DriverChange::Delete(name) => match api.delete(name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(e),
            },
        }
    }
    Ok(())
}

#[cfg(test)]
#[path = "driver_cache_tests.rs"]
mod tests;
