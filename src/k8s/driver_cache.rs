//! The vSphere CSI driver's own vmdk → volume-ID cache: cluster-scoped
//! `CnsVSphereVolumeMigration` objects (`cns.vmware.com/v1alpha1`, docs/design.md §8).
//!
//! The driver caches `spec.volumepath` (the raw spelling of the PV) → `spec.volumeid` and
//! registers the vmdk itself on a miss. volmig publishes one object per Registered path
//! and per raw spelling, so that the miss never happens, and adopts from objects the driver
//! wrote earlier. The driver sees only Add and Delete events: volmig adds and deletes
//! objects, never changes one in place ([`plan_publish`], [`apply_changes`]).

use std::collections::{BTreeMap, BTreeSet};
use std::hash::RandomState;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use kube::api::{Api, DeleteParams, PostParams};

use super::error_class::{KubeErrorClass, classify};
use sha2::{Digest, Sha256};
use tracing::warn;

use crate::backend::VolumeId;
use crate::compact_text::{CompactSet, CompactText, TextRef};
use crate::path_intern::{self, NamesByPath};
use crate::volume_migration::FIELD_MANAGER;
use crate::volume_path::VolumePath;

#[path = "driver_cache_crd.rs"]
mod crd;
#[path = "driver_cache_plan.rs"]
mod plan;
pub use crd::{CnsVSphereVolumeMigration, CnsVSphereVolumeMigrationSpec, crd_served, crd_yaml};
pub use plan::{Conflict, DriverChange, DriverObject, PublishPlan, plan_publish, plan_unpublish};

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
    /// Raw paths whose entry the driver has dropped although an object still carries
    /// them: an object carrying the path was deleted while another one carried it too.
    lost: hashbrown::HashSet<Box<str>, RandomState>,
    synced: bool,
    /// The CRD is not served (as last seen): nothing can be read or written.
    crd_absent: bool,
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

    /// Records an object as it is now (a watch event); `ours` when volmig created it. A
    /// name the index does not hold yet is the driver's Add of its raw path.
    pub fn upsert(&self, name: &str, spec: &CnsVSphereVolumeMigrationSpec, ours: bool) {
        self.put(name, spec, ours, true);
    }

    /// Records an object found in place of one volmig meant to create (409): when its
    /// name is new to the index, its Add may have come before a delete that left its
    /// path lost, so the path stays lost.
    pub fn record_found(&self, name: &str, spec: &CnsVSphereVolumeMigrationSpec, ours: bool) {
        self.put(name, spec, ours, false);
    }

    fn put(&self, name: &str, spec: &CnsVSphereVolumeMigrationSpec, ours: bool, added: bool) {
        // Interned before the old entry lets go of its path: an update that keeps the path
        // does not take it out of the interner only to put it back.
        let path = VolumePath::parse(&spec.volumepath)
            .ok()
            .map(path_intern::intern);
        let mut s = self.lock();
        let key = match Self::unlink(&mut s, name) {
            Some(key) => key,
            None => {
                // A new object: the driver's Add, which gives its path an entry again.
                if added {
                    s.lost.remove(spec.volumepath.as_str());
                }
                CompactText::new(name)
            }
        };
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

    /// Records an object volmig's POST just created: volmig's own when `created` by its
    /// labelled POST; else (a driver's object created again as it was) as the index
    /// knew it, or the driver's.
    pub fn record_written(&self, name: &str, spec: &CnsVSphereVolumeMigrationSpec, created: bool) {
        let ours = created
            || self
                .lock()
                .by_name
                .get(&TextRef::new(name))
                .is_some_and(|e| e.ours);
        self.upsert(name, spec, ours);
    }

    /// Forgets an object (deleted). When another object still carries its raw path, the
    /// driver has dropped that path's entry all the same: the path is marked lost until an
    /// object carrying it is added.
    pub fn remove(&self, name: &str) {
        let mut s = self.lock();
        let Some(entry) = s.by_name.get(&TextRef::new(name)) else {
            return;
        };
        let raw: Box<str> = entry.volumepath().into();
        let shared = entry.path.as_ref().is_some_and(|path| {
            s.by_path.get(path).into_iter().flatten().any(|other| {
                !other.is(name)
                    && s.by_name
                        .get(&other.as_ref())
                        .is_some_and(|e| e.volumepath() == &*raw)
            })
        });
        Self::unlink(&mut s, name);
        if shared {
            s.lost.insert(raw);
        } else {
            s.lost.remove(&raw);
        }
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

    /// Marks the initial list as complete (the CRD is served).
    pub fn set_synced(&self) {
        let mut s = self.lock();
        s.synced = true;
        s.crd_absent = false;
    }

    /// Records whether the CRD is served; returns whether that changed. A CRD that
    /// disappears takes every object with it.
    pub fn set_served(&self, served: bool) -> bool {
        let mut s = self.lock();
        let changed = s.crd_absent == served;
        s.crd_absent = !served;
        if !served {
            s.synced = false;
        }
        changed
    }

    /// True while the CRD is served: volmig may publish.
    pub fn is_served(&self) -> bool {
        !self.lock().crd_absent
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

    /// True when the driver's cache maps `raw` (a spelling of `path`) to `id`: an object
    /// carries exactly that pair and the driver has not dropped the entry for `raw`.
    pub fn maps(&self, path: &VolumePath, raw: &str, id: &str) -> bool {
        let s = self.lock();
        !s.lost.contains(raw)
            && s.by_path
                .get(path)
                .into_iter()
                .flatten()
                .filter_map(|n| s.by_name.get_key_value(&n.as_ref()))
                .any(|(n, e)| e.volumepath() == raw && e.volumeid(n) == id)
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

    /// The objects a plan for `id` at `path` looks at ([`plan_publish`]): every object
    /// whose path is `path` (any spelling, any owner) and the objects named after `id`.
    pub fn objects_for(&self, path: &VolumePath, id: &VolumeId) -> BTreeMap<String, DriverObject> {
        let s = self.lock();
        let named = TextRef::new(&id.0);
        let aliases = s.aliases.get(&named).into_iter().flatten();
        let by_path = s.by_path.get(path).into_iter().flatten();
        let primary = s.by_name.get_key_value(&named).map(|(n, _)| n);
        primary
            .into_iter()
            .chain(aliases)
            .chain(by_path)
            .filter_map(|n| s.by_name.get_key_value(&n.as_ref()))
            .map(|(n, e)| {
                let object = DriverObject {
                    spec: e.spec(n),
                    ours: e.ours,
                };
                (n.to_string(), object)
            })
            .collect()
    }

    /// The raw paths of `objects` whose entry the driver has lost (see [`Self::remove`]).
    pub fn lost_among(&self, objects: &BTreeMap<String, DriverObject>) -> BTreeSet<String> {
        let s = self.lock();
        if s.lost.is_empty() {
            return BTreeSet::new();
        }
        objects
            .values()
            .map(|o| o.spec.volumepath.as_str())
            .filter(|raw| s.lost.contains(*raw))
            .map(str::to_owned)
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

/// Executes `changes` through `api`: every delete first, then every create, each in the
/// order given, so the driver's last event for a path is an Add. Nothing is ever changed
/// in place. `index` records each change as it lands (its watch confirms later), so a plan
/// made after a failure starts from what was done. A create that meets an existing object
/// (409) changes nothing: the object is recorded as it is and as whoever created it (a
/// 409 never makes it volmig's); one with another spec is left alone (logged) for the
/// next plan to see. Stops at the first error; returns how many objects were deleted or
/// created.
pub async fn apply_changes(
    api: &Api<CnsVSphereVolumeMigration>,
    index: &DriverIndex,
    changes: &[DriverChange],
) -> kube::Result<usize> {
    let post = PostParams {
        field_manager: Some(FIELD_MANAGER.to_owned()),
        ..PostParams::default()
    };
    let mut done = 0;
    for change in changes {
        let DriverChange::Delete(name) = change else {
            continue;
        };
        match api.delete(name, &DeleteParams::default()).await {
            Ok(_) => done += 1,
            Err(e) if classify(&e) == KubeErrorClass::Gone => {}
            Err(e) => return Err(e),
        }
        index.remove(name);
    }
    for change in changes {
        let DriverChange::Create(name, object) = change else {
            continue;
        };
        let mut new = CnsVSphereVolumeMigration::new(name, object.spec.clone());
        if object.ours {
            new.metadata.labels = Some([(MANAGED_BY.to_owned(), "volmig".to_owned())].into());
        }
        match api.create(&post, &new).await {
            Ok(_) => {
                index.record_written(name, &object.spec, object.ours);
                done += 1;
            }
            Err(e) if classify(&e) == KubeErrorClass::Conflict => {
                if let Some(found) = api.get_opt(name).await? {
                    if found.spec != object.spec {
                        warn!(object = %name, found = ?found.spec, wanted = ?object.spec,
                            "a CSI driver cache object of this name exists with another spec; \
                             left as it is (never changed in place)");
                    }
                    index.record_found(name, &found.spec, is_ours(&found));
                }
            }
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

#[cfg(test)]
#[path = "driver_cache_fake.rs"]
pub(crate) mod fake;

#[cfg(test)]
#[path = "driver_cache_tests.rs"]
mod tests;
