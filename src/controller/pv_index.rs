//! What volmig keeps of PersistentVolumes: only the name → canonical path mapping of
//! in-tree vSphere PVs (not whole objects), so 100k PVs stay cheap. Pods that name a vmdk
//! inline are users of their path too, under keys of their own
//! ([`crate::k8s::inline_volumes`], docs/design.md §8.9).

use std::collections::BTreeMap;
use std::hash::RandomState;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use k8s_openapi::api::core::v1::PersistentVolume;

use super::csi_users::CsiUsers;
use crate::compact_text::{CompactSet, CompactText, NameSet, TextRef};
use crate::k8s::inline_volumes::is_pod_user;
use crate::path_intern::{self, NamesByPath};
use crate::volume_path::{PathError, VolumePath};

/// Annotation set on in-tree PVs handled by the CSI migration.
pub const MIGRATED_TO_ANNOTATION: &str = "pv.kubernetes.io/migrated-to";

/// What one PV says about vSphere.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PvVolume {
    /// An in-tree vSphere PV with a valid path.
    Valid(VolumePath),
    /// An in-tree vSphere PV whose path does not parse.
    Invalid(PathError),
}

/// The in-tree vSphere volume of `pv` and how it spells it, or `None` for any other kind
/// of PV.
pub fn pv_volume(pv: &PersistentVolume) -> Option<(PvVolume, Spelling)> {
    let raw = &pv.spec.as_ref()?.vsphere_volume.as_ref()?.volume_path;
    let created = pv
        .metadata
        .creation_timestamp
        .as_ref()
        .map_or(0, |t| t.0.as_second());
    Some(volume_and_spelling(raw, created))
}

/// How a PV spells its path and when it was created: what the driver's cache is keyed by
/// (docs/design.md §8.1). The raw spelling is kept only when it differs from the canonical one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Spelling {
    /// The raw `volumePath`, when not already canonical.
    pub raw: Option<Box<str>>,
    /// Creation time of the PV (seconds since the epoch; 0 when unknown).
    pub created: i64,
}

/// What a user (a PV, or an inline pod volume) spelling its path `raw` and created at
/// `created` records: the path, and the raw spelling only when it is valid and not
/// canonical.
fn volume_and_spelling(raw: &str, created: i64) -> (PvVolume, Spelling) {
    match VolumePath::parse(raw) {
        Ok(path) => {
            let raw = (path.canonical() != raw).then(|| raw.into());
            (PvVolume::Valid(path), Spelling { raw, created })
        }
        Err(e) => (PvVolume::Invalid(e), Spelling { raw: None, created }),
    }
}

/// What changed when a PV was recorded or removed: paths whose PV lists changed.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct IndexChange {
    /// Paths whose set of PVs changed.
    pub touched: Vec<VolumePath>,
}

/// What the index keeps of one PV. Names are [`CompactText`] (a `pvc-<uuid>` name is 16
/// bytes, no allocation) and paths are shared between both maps (`Arc`), so a PV costs one
/// path and two map slots: the index holds one per in-tree PV, 100k of them in a large
/// cluster. Paths come from [`path_intern`], so other indexes share them too; every handle
/// the index lets go of goes back through [`path_intern::release`].
struct PvEntry {
    volume: Indexed,
    /// The raw `volumePath`, when not already canonical.
    raw: Option<Box<str>>,
    /// Creation time of the PV (seconds since the epoch; 0 when unknown).
    created: i64,
}

enum Indexed {
    Valid(Arc<VolumePath>),
    Invalid(Box<PathError>),
}

impl Indexed {
    fn to_volume(&self) -> PvVolume {
        match self {
            Self::Valid(path) => PvVolume::Valid(VolumePath::clone(path)),
            Self::Invalid(e) => PvVolume::Invalid(PathError::clone(e)),
        }
    }
}

#[derive(Default)]
struct State {
    by_pv: hashbrown::HashMap<CompactText, PvEntry, RandomState>,
    /// The PVs of each valid path (usually one).
    by_path: NamesByPath,
    /// PVs with an invalid path not yet reported with a Warning Event.
    unreported_invalid: BTreeMap<String, PathError>,
    synced: bool,
    /// Inline pod volumes among `by_pv`.
    pod_users: usize,
    /// Pods are watched and their initial list is not indexed yet.
    pods_pending: bool,
}

impl Drop for State {
    fn drop(&mut self) {
        for (_, entry) in self.by_pv.drain() {
            if let Indexed::Valid(path) = entry.volume {
                path_intern::release(path);
            }
        }
    }
}

/// Thread-safe index of in-tree vSphere PVs (and inline pod volumes) by name and by
/// canonical path.
#[derive(Default)]
pub struct PvIndex {
    state: Mutex<State>,
    /// The CSI driver's users of volume IDs (docs/design.md §5.1).
    csi: CsiUsers,
}

impl PvIndex {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The CSI driver's PVs and VolumeAttachments, by the volume ID they use.
    pub fn csi(&self) -> &CsiUsers {
        &self.csi
    }

    /// Records a PV as it is now: its path and how it spells it.
    pub fn upsert_pv(&self, pv: &PersistentVolume) -> IndexChange {
        let Some(name) = pv.metadata.name.as_deref() else {
            return IndexChange::default();
        };
        let (volume, spelling) = pv_volume(pv).unzip();
        self.record(name, volume, spelling)
    }

    /// Records inline pod volume `key` ([`crate::k8s::inline_volumes::pod_user_key`]) spelling
    /// its path `raw`, its pod created at `created` (seconds since the epoch). An invalid
    /// path is kept out of the PV Warning Events (the pod watcher logs it).
    pub fn upsert_pod_volume(&self, key: &str, raw: &str, created: i64) -> IndexChange {
        let (volume, spelling) = volume_and_spelling(raw, created);
        self.record(key, Some(volume), Some(spelling))
    }

    /// The raw spellings of `path` by its users (PVs and inline pod volumes), without
    /// repeats: those no PV spells first, then the others, each oldest first. The first
    /// one gets the driver's object named by the volume ID, the one the CSI driver's stale
    /// clean-up keeps whatever its spelling; the others survive it only where a PV spells
    /// them (docs/design.md §8.1).
    pub fn spellings_for(&self, path: &VolumePath) -> Vec<String> {
        let s = self.lock();
        let mut pvs: Vec<(i64, String, Option<&PvEntry>)> = s
            .by_path
            .get(path)
            .into_iter()
            .flatten()
            .map(|name| {
                let entry = s.by_pv.get(&name.as_ref());
                (entry.map_or(0, |e| e.created), name.to_string(), entry)
            })
            .collect();
        pvs.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
        let mut out: Vec<String> = Vec::with_capacity(pvs.len());
        let mut pv_spelled: Vec<String> = Vec::new();
        for (_, name, entry) in pvs {
            let raw = entry
                .and_then(|e| e.raw.as_deref())
                .map_or_else(|| path.canonical(), str::to_owned);
            if !is_pod_user(&name) && !pv_spelled.contains(&raw) {
                pv_spelled.push(raw.clone());
            }
            if !out.contains(&raw) {
                out.push(raw);
            }
        }
        // Stable: the order by age stays within each group.
        out.sort_by_key(|raw| pv_spelled.contains(raw));
        out
    }

    /// Records what PV `name` says now (`None`: not an in-tree vSphere PV). Keeps the
    /// spelling recorded by [`PvIndex::upsert_pv`].
    pub fn upsert(&self, name: &str, volume: Option<PvVolume>) -> IndexChange {
        self.record(name, volume, None)
    }

    fn record(
        &self,
        name: &str,
        volume: Option<PvVolume>,
        spelling: Option<Spelling>,
    ) -> IndexChange {
        let mut s = self.lock();
        let Some(volume) = volume else {
            return match s.by_pv.remove(&TextRef::new(name)) {
                Some(old) => {
                    s.pod_users -= usize::from(is_pod_user(name));
                    forget(&mut s, name, old.volume)
                }
                None => IndexChange::default(),
            };
        };
        let key = TextRef::new(name);
        if let Some(entry) = s.by_pv.get_mut(&key) {
            if let Some(spelling) = spelling.clone() {
                (entry.raw, entry.created) = (spelling.raw, spelling.created);
            }
            if entry.volume.to_volume() == volume {
                return IndexChange::default();
            }
        }
        let (old, keep, existed) = match s.by_pv.remove(&key) {
            Some(old) => {
                let keep = Spelling {
                    raw: old.raw.clone(),
                    created: old.created,
                };
                (forget(&mut s, name, old.volume), keep, true)
            }
            None => (IndexChange::default(), Spelling::default(), false),
        };
        let key = key.to_owned();
        let Spelling { raw, created } = spelling.unwrap_or(keep);
        let mut change = old;
        let indexed = match volume {
            PvVolume::Valid(path) => {
                let path = path_intern::intern(path);
                s.by_path.link(&path, &key);
                change.touched.push(VolumePath::clone(&path));
                Indexed::Valid(path)
            }
            PvVolume::Invalid(e) => {
                if !is_pod_user(name) {
                    s.unreported_invalid.insert(name.to_string(), e.clone());
                }
                Indexed::Invalid(Box::new(e))
            }
        };
        if is_pod_user(name) && !existed {
            s.pod_users += 1;
        }
        s.by_pv.insert(
            key,
            PvEntry {
                volume: indexed,
                raw,
                created,
            },
        );
        change
    }

    /// PVs with an invalid path that were not reported yet; they count as reported after
    /// this call (the caller publishes one Warning Event each).
    pub fn take_unreported_invalid(&self) -> Vec<(String, PathError)> {
        std::mem::take(&mut self.lock().unreported_invalid)
            .into_iter()
            .collect()
    }

    /// Forgets PV `name`.
    pub fn remove(&self, name: &str) -> IndexChange {
        self.upsert(name, None)
    }

    /// Forgets every PV not in `keep` (after a re-list of PVs; inline pod volumes stay);
    /// returns the touched paths.
    pub fn retain(&self, keep: &NameSet) -> Vec<VolumePath> {
        self.retain_users(keep, false)
    }

    /// Forgets every inline pod volume not in `keep` (after a re-list of pods; PVs stay);
    /// returns the touched paths.
    pub fn retain_pod_volumes(&self, keep: &NameSet) -> Vec<VolumePath> {
        self.retain_users(keep, true)
    }

    fn retain_users(&self, keep: &NameSet, pods: bool) -> Vec<VolumePath> {
        let gone: Vec<String> = self
            .lock()
            .by_pv
            .keys()
            .filter(|name| !keep.contains(*name))
            .map(CompactText::to_string)
            .filter(|name| is_pod_user(name) == pods)
            .collect();
        gone.iter()
            .flat_map(|name| self.remove(name).touched)
            .collect()
    }

    /// Names of the users of `path`, sorted: PV names and inline pod volumes
    /// (`pod/<namespace>/<pod>/<volume>`).
    pub fn pvs_for(&self, path: &VolumePath) -> Vec<String> {
        self.lock()
            .by_path
            .get(path)
            .map(CompactSet::sorted)
            .unwrap_or_default()
    }

    /// Every valid path with its PVs.
    pub fn paths(&self) -> Vec<(VolumePath, Vec<String>)> {
        self.lock()
            .by_path
            .iter()
            .map(|(p, names)| (VolumePath::clone(p), names.sorted()))
            .collect()
    }

    /// Number of in-tree vSphere PVs tracked (valid or not; inline pod volumes not counted).
    pub fn len(&self) -> usize {
        let s = self.lock();
        s.by_pv.len() - s.pod_users
    }

    /// True when user `name` (a PV or an inline pod volume) is indexed.
    pub fn knows(&self, name: &str) -> bool {
        self.lock().by_pv.contains_key(&TextRef::new(name))
    }

    /// Number of inline pod volumes tracked.
    pub fn pod_volumes(&self) -> usize {
        self.lock().pod_users
    }

    /// True when no PV is tracked.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Marks the initial list as complete.
    pub fn set_synced(&self) {
        self.lock().synced = true;
    }

    /// True once the initial list has been indexed (of PVs, of pods when they are
    /// watched, and of VolumeAttachments when they are).
    pub fn is_synced(&self) -> bool {
        let s = self.lock();
        s.synced && !s.pods_pending && self.csi.is_synced()
    }

    /// Pods are watched: the index is not synced until their initial list is indexed too
    /// ([`PvIndex::set_pods_synced`]).
    pub fn expect_pods(&self) {
        self.lock().pods_pending = true;
    }

    /// Marks the initial list of pods as indexed.
    pub fn set_pods_synced(&self) {
        self.lock().pods_pending = false;
    }
}

/// Unlinks PV `name` (already out of `by_pv`) from what it referenced.
fn forget(s: &mut State, name: &str, old: Indexed) -> IndexChange {
    s.unreported_invalid.remove(name);
    match old {
        Indexed::Valid(path) => {
            s.by_path.unlink(&path, TextRef::new(name));
            let touched = vec![VolumePath::clone(&path)];
            path_intern::release(path);
            IndexChange { touched }
        }
        Indexed::Invalid(_) => IndexChange::default(),
    }
}

#[cfg(test)]
#[path = "pv_index_tests.rs"]
mod tests;
