//! What volmig keeps of VolumeMigrations: one compact record per object (see [`compact`]),
//! a few hundred bytes where kube-runtime's reflector store kept the whole object, its key
//! and copies of its identifiers (issue 14: 100,000 tracked volumes in 128 MiB).
//!
//! Filled by [`watch`] from a kube-runtime watcher; read by the reconciler (an object is
//! rebuilt for each reconcile), the PV watcher, the status writer and full sync.

use std::collections::HashMap;
use std::sync::{PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::api::VolumeMigration;
use crate::controller::full_sync::MigrationRecord;
use crate::volume_path::VolumePath;

mod compact;
pub mod watch;

use compact::CompactMigration;

struct Slot {
    /// The list (`Init` … `InitDone`) that last saw the object; older ones are gone.
    epoch: u32,
    object: CompactMigration,
}

#[derive(Default)]
struct State {
    objects: HashMap<Box<str>, Box<Slot>>,
    epoch: u32,
    synced: bool,
}

/// Thread-safe cache of VolumeMigrations by name.
#[derive(Default)]
pub struct MigrationCache {
    state: RwLock<State>,
}

impl MigrationCache {
    fn read(&self) -> RwLockReadGuard<'_, State> {
        self.state.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> RwLockWriteGuard<'_, State> {
        self.state.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records `vm` as it is now (an object without a name is ignored).
    pub fn apply(&self, vm: &VolumeMigration) {
        let Some(name) = vm.metadata.name.as_deref() else {
            return;
        };
        let object = CompactMigration::new(vm);
        let mut s = self.write();
        let epoch = s.epoch;
        match s.objects.get_mut(name) {
            Some(slot) => **slot = Slot { epoch, object },
            None => {
                s.objects
                    .insert(name.into(), Box::new(Slot { epoch, object }));
            }
        }
    }

    /// Forgets the object `name`.
    pub fn remove(&self, name: &str) {
        self.write().objects.remove(name);
    }

    /// A full list starts: objects it does not [`apply`](Self::apply) are dropped by
    /// [`end_list`](Self::end_list).
    pub fn begin_list(&self) {
        let mut s = self.write();
        s.epoch = s.epoch.wrapping_add(1);
    }

    /// A full list ended: drops what it did not hold and marks the cache synced.
    pub fn end_list(&self) {
        let mut s = self.write();
        let epoch = s.epoch;
        s.objects.retain(|_, slot| slot.epoch == epoch);
        s.objects.shrink_to_fit();
        s.synced = true;
    }

    /// True once a full list has been applied.
    pub fn is_synced(&self) -> bool {
        self.read().synced
    }

    /// Number of objects.
    pub fn len(&self) -> usize {
        self.read().objects.len()
    }

    /// True when the cache holds no object.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The object `name` as `strip_for_cache` leaves it (rebuilt: callers own the copy).
    pub fn get(&self, name: &str) -> Option<VolumeMigration> {
        self.read()
            .objects
            .get(name)
            .map(|slot| slot.object.to_object(name))
    }

    /// The `metadata.generation` of `name`.
    pub fn generation(&self, name: &str) -> Option<i64> {
        self.read()
            .objects
            .get(name)
            .and_then(|slot| slot.object.generation)
    }

    /// True when the object `name` exists and tracks `path` (its spec path canonicalizes
    /// to it).
    pub fn tracks(&self, name: &str, path: &VolumePath) -> bool {
        self.read()
            .objects
            .get(name)
            .is_some_and(|slot| slot.object.spec_path.tracks(path))
    }

    /// Every object's name.
    pub fn names(&self) -> Vec<String> {
        self.read().objects.keys().map(|n| n.to_string()).collect()
    }

    /// What full sync needs of every object (see [`MigrationRecord`]).
    pub fn records(&self) -> Vec<MigrationRecord> {
        self.read()
            .objects
            .iter()
            .map(|(name, slot)| slot.object.record(name))
            .collect()
    }
}

#[cfg(test)]
mod tests;
