//! The vSphere CSI driver's own vmdk → volume-ID cache: cluster-scoped
//! `CnsVSphereVolumeMigration` objects (`cns.vmware.com/v1alpha1`, docs/design.md §8).
//!
//! The driver caches `spec.volumepath` (the raw spelling of the PV) → `spec.volumeid` and
//! registers the vmdk itself on a miss. volmig publishes one object per Registered path
//! and per raw spelling, so that the miss never happens, and adopts from objects the driver
//! wrote earlier.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::{CustomResource, CustomResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::api::FIELD_MANAGER;
use crate::backend::VolumeId;
use crate::path_intern;
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

/// One object, compactly: names and canonical paths are shared between both maps, the raw
/// path is kept only when it is not canonical, and the ID only when it is not the name (a
/// primary object is named after its ID). Paths come from [`path_intern`], shared with the
/// PV index; every handle the index lets go of goes back through [`path_intern::release`].
struct DriverEntry {
    /// The canonical path; `None` when `volumepath` does not parse.
    path: Option<Arc<VolumePath>>,
    /// `volumepath` as written, when it is not the canonical path.
    raw: Option<Box<str>>,
    volumeid: Option<Box<str>>,
    protect: bool,
    /// volmig created it (labelled [`MANAGED_BY`] = `volmig`); else the driver's own.
    ours: bool,
}

impl DriverEntry {
    fn volumeid<'a>(&'a self, name: &'a str) -> &'a str {
        self.volumeid.as_deref().unwrap_or(name)
    }

    fn volumepath(&self) -> &str {
        match (&self.raw, &self.path) {
            (Some(raw), _) => raw,
            (None, Some(path)) => path.as_str(),
            (None, None) => "",
        }
    }

    fn spec(&self, name: &str) -> CnsVSphereVolumeMigrationSpec {
        CnsVSphereVolumeMigrationSpec {
            volumepath: self.volumepath().to_owned(),
            volumeid: self.volumeid(name).to_owned(),
            protectvolumefromvmdelete: self.protect,
        }
    }
}

#[derive(Default)]
struct IndexState {
    /// Ordered, so that the objects of one ID (`id`, `id-…`) are one range.
    by_name: BTreeMap<Arc<str>, DriverEntry>,
    by_path: HashMap<Arc<VolumePath>, Vec<Arc<str>>>,
    synced: bool,
}

impl Drop for IndexState {
    fn drop(&mut self) {
        for (_, entry) in std::mem::take(&mut self.by_name) {
            if let Some(path) = entry.path {
                path_intern::release(path);
            }
        }
        for (path, _) in self.by_path.drain() {
            path_intern::release(path);
        }
    }
}

impl DriverIndex {
    fn lock(&self) -> MutexGuard<'_, IndexState> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records an object as it is now; `ours` when volmig created it.
    pub fn upsert(&self, name: &str, spec: &CnsVSphereVolumeMigrationSpec, ours: bool) {
        // Interned before the old entry lets go of its path: an update that keeps the path
        // does not take it out of the interner only to put it back.
        let path = VolumePath::parse(&spec.volumepath)
            .ok()
            .map(path_intern::intern);
        let mut s = self.lock();
        let name = Self::unlink(&mut s, name).unwrap_or_else(|| Arc::from(name));
        if let Some(path) = &path {
            match s.by_path.get_mut(&**path) {
                Some(names) => names.push(name.clone()),
                None => {
                    s.by_path.insert(Arc::clone(path), vec![name.clone()]);
                }
            }
        }
        let canonical = path.as_ref().is_some_and(|p| p.as_str() == spec.volumepath);
        let entry = DriverEntry {
            raw: (!canonical).then(|| spec.volumepath.as_str().into()),
            path,
            volumeid: (spec.volumeid != *name).then(|| spec.volumeid.as_str().into()),
            protect: spec.protectvolumefromvmdelete,
            ours,
        };
        s.by_name.insert(name, entry);
    }

    /// Records an object volmig just wrote: created by volmig, or an update that keeps
    /// whoever created it.
    pub fn record_written(&self, name: &str, spec: &CnsVSphereVolumeMigrationSpec, created: bool) {
        let ours = created || self.lock().by_name.get(name).is_some_and(|e| e.ours);
        self.upsert(name, spec, ours);
    }

    /// Forgets an object.
    pub fn remove(&self, name: &str) {
        let mut s = self.lock();
        Self::unlink(&mut s, name);
    }

    /// Takes object `name` out of both maps; returns its shared name.
    fn unlink(s: &mut IndexState, name: &str) -> Option<Arc<str>> {
        let (name, old) = s.by_name.remove_entry(name)?;
        if let Some(path) = old.path {
            if let Some(names) = s.by_path.get_mut(&*path) {
                names.retain(|n| *n != name);
                if names.is_empty()
                    && let Some((key, _)) = s.by_path.remove_entry(&*path)
                {
                    path_intern::release(key);
                }
            }
            path_intern::release(path);
        }
        Some(name)
    }

    /// Forgets every object not in `keep` (after a re-list).
    pub fn retain(&self, keep: &std::collections::HashSet<String>) {
        let gone: Vec<Arc<str>> = self
            .lock()
            .by_name
            .keys()
            .filter(|n| !keep.contains(&***n))
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
            .filter_map(|n| s.by_name.get(n).map(|e| (n, e)))
            .filter(|(_, e)| !e.ours)
            .map(|(n, e)| VolumeId(e.volumeid(n).to_owned()))
            .collect();
        ids.sort();
        ids.dedup();
        ids
    }

    /// The objects named after `id` (its primary and its aliases): one range of the
    /// ordered names, so a full sync over every mapping stays linear.
    pub fn objects_of(&self, id: &VolumeId) -> BTreeMap<String, CnsVSphereVolumeMigrationSpec> {
        let prefix = format!("{}-", id.0);
        let start: Arc<str> = Arc::from(id.0.as_str());
        self.lock()
            .by_name
            .range(start..)
            .take_while(|(n, _)| n.starts_with(&id.0))
            .filter(|(n, _)| ***n == id.0 || is_alias_of(n, &prefix))
            .map(|(n, e)| (n.to_string(), e.spec(n)))
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
            .filter(|n| {
                s.by_name
                    .get(*n)
                    .is_some_and(|e| e.ours && e.volumeid(n) != id.0)
            })
            .map(|n| n.to_string())
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
