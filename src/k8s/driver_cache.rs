//! The vSphere CSI driver's own vmdk → volume-ID cache: cluster-scoped
//! `CnsVSphereVolumeMigration` objects (`cns.vmware.com/v1alpha1`, docs/design.md §8).
//!
//! The driver caches `spec.volumepath` (the raw spelling of the PV) → `spec.volumeid` and
//! registers the vmdk itself on a miss. volmig publishes one object per Registered path
//! and per raw spelling, so that the miss never happens, and adopts from objects the driver
//! wrote earlier.

use std::collections::BTreeMap;
use std::hash::RandomState;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::{CustomResource, CustomResourceExt};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::api::FIELD_MANAGER;
use crate::backend::VolumeId;
use crate::compact_text::{CompactSet, CompactText, TextRef};
use crate::path_intern::{self, NamesByPath};
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
    for name in existing.keys() {
        let ours = *name == id.0 || alias_target(name) == Some(id.0.as_str());
        if ours && !desired.contains_key(name) {
            changes.push(DriverChange::Delete(name.clone()));
        }
    }
    changes
}

/// The ID an alias object (`<id>-<8 hex>`) is named after; `None` for any other name.
fn alias_target(name: &str) -> Option<&str> {
    let (id, suffix) = name.split_at_checked(name.len().checked_sub(9)?)?;
    let hex = suffix.strip_prefix('-')?;
    (!id.is_empty() && hex.bytes().all(|b| b.is_ascii_hexdigit())).then_some(id)
}

/// The driver's objects as volmig needs them: by name, and by canonical path (adoption).
#[derive(Default)]
pub struct DriverIndex {
    inner: Mutex<IndexState>,
}

/// One object, compactly (24 bytes): names are [`CompactText`] (an ID-named object's name
/// is 16 bytes), canonical paths are shared between both maps, and what the usual object
/// does not need sits out of line: the raw path when it is not the canonical one, the ID
/// when it is not the name (a primary object is named after its ID). Paths come from
/// [`path_intern`], shared with the PV index; every handle the index lets go of goes back
/// through [`path_intern::release`].
struct DriverEntry {
    /// The canonical path; `None` when `volumepath` does not parse.
    path: Option<Arc<VolumePath>>,
    unusual: Option<Box<Unusual>>,
    protect: bool,
    /// volmig created it (labelled [`MANAGED_BY`] = `volmig`); else the driver's own.
    ours: bool,
}

/// What few driver objects have.
struct Unusual {
    /// `volumepath` as written, when it is not the canonical path.
    raw: Option<Box<str>>,
    /// `volumeid`, when it is not the object's name.
    volumeid: Option<Box<str>>,
}

impl DriverEntry {
    fn own_volumeid(&self) -> Option<&str> {
        self.unusual.as_ref()?.volumeid.as_deref()
    }

    fn volumeid(&self, name: &CompactText) -> String {
        self.own_volumeid()
            .map_or_else(|| name.to_string(), str::to_owned)
    }

    fn holds(&self, name: &CompactText, id: &str) -> bool {
        match self.own_volumeid() {
            Some(own) => own == id,
            None => name.is(id),
        }
    }

    fn volumepath(&self) -> &str {
        let raw = self.unusual.as_ref().and_then(|u| u.raw.as_deref());
        match (raw, &self.path) {
            (Some(raw), _) => raw,
            (None, Some(path)) => path.as_str(),
            (None, None) => "",
        }
    }

    fn spec(&self, name: &CompactText) -> CnsVSphereVolumeMigrationSpec {
        CnsVSphereVolumeMigrationSpec {
            volumepath: self.volumepath().to_owned(),
            volumeid: self.volumeid(name),
            protectvolumefromvmdelete: self.protect,
        }
    }
}

#[derive(Default)]
struct IndexState {
    by_name: hashbrown::HashMap<CompactText, DriverEntry, RandomState>,
    /// The alias objects (`<id>-<8 hex>`) of each ID that has any.
    aliases: hashbrown::HashMap<CompactText, CompactSet, RandomState>,
    by_path: NamesByPath,
    synced: bool,
}

impl Drop for IndexState {
    fn drop(&mut self) {
        for (_, entry) in self.by_name.drain() {
            if let Some(path) = entry.path {
                path_intern::release(path);
            }
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
        let key = Self::unlink(&mut s, name).unwrap_or_else(|| CompactText::new(name));
        if let Some(path) = &path {
            s.by_path.link(path, &key);
        }
        if let Some(id) = alias_target(name) {
            match s.aliases.get_mut(&TextRef::new(id)) {
                Some(names) => names.insert(key.clone()),
                None => {
                    s.aliases
                        .insert(CompactText::new(id), CompactSet::one(key.clone()));
                }
            }
        }
        let canonical = path.as_ref().is_some_and(|p| p.as_str() == spec.volumepath);
        let unusual = Unusual {
            raw: (!canonical).then(|| spec.volumepath.as_str().into()),
            volumeid: (spec.volumeid != name).then(|| spec.volumeid.as_str().into()),
        };
        let entry = DriverEntry {
            path,
            unusual: (unusual.raw.is_some() || unusual.volumeid.is_some())
                .then(|| Box::new(unusual)),
            protect: spec.protectvolumefromvmdelete,
            ours,
        };
        s.by_name.insert(key, entry);
    }

    /// Records an object volmig just wrote: created by volmig, or an update that keeps
    /// whoever created it.
    pub fn record_written(&self, name: &str, spec: &CnsVSphereVolumeMigrationSpec, created: bool) {
        let ours = created
            || self
                .lock()
                .by_name
                .get(&TextRef::new(name))
                .is_some_and(|e| e.ours);
        self.upsert(name, spec, ours);
    }

    /// Forgets an object.
    pub fn remove(&self, name: &str) {
        let mut s = self.lock();
        Self::unlink(&mut s, name);
    }

    /// Takes object `name` out of every map; returns its key.
    fn unlink(s: &mut IndexState, name: &str) -> Option<CompactText> {
        let (key, old) = s.by_name.remove_entry(&TextRef::new(name))?;
        if let Some(path) = old.path {
            s.by_path.unlink(&path, key.as_ref());
            path_intern::release(path);
        }
        if let Some(id) = alias_target(name) {
            let id = TextRef::new(id);
            if let Some(names) = s.aliases.get_mut(&id)
                && names.remove(key.as_ref())
            {
                s.aliases.remove(&id);
            }
        }
        Some(key)
    }

    /// Forgets every object not in `keep` (after a re-list).
    pub fn retain(&self, keep: &crate::compact_text::NameSet) {
        let gone: Vec<String> = self
            .lock()
            .by_name
            .keys()
            .filter(|n| !keep.contains(*n))
            .map(CompactText::to_string)
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
            .filter_map(|n| s.by_name.get(&n.as_ref()).map(|e| (n, e)))
            .filter(|(_, e)| !e.ours)
            .map(|(n, e)| VolumeId(e.volumeid(n)))
            .collect();
        ids.sort();
        ids.dedup();
        ids
    }

    /// The objects named after `id` (its primary and its aliases): two lookups, so a full
    /// sync over every mapping stays linear.
    pub fn objects_of(&self, id: &VolumeId) -> BTreeMap<String, CnsVSphereVolumeMigrationSpec> {
        let s = self.lock();
        let id = TextRef::new(&id.0);
        let aliases = s.aliases.get(&id).into_iter().flatten();
        s.by_name
            .get_key_value(&id)
            .into_iter()
            .chain(aliases.filter_map(|n| s.by_name.get_key_value(&n.as_ref())))
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
                    .get(&n.as_ref())
                    .is_some_and(|e| e.ours && !e.holds(n, &id.0))
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
