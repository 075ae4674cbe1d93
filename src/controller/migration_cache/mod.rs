//! What volmig keeps of VolumeMigrations: one compact record per object (see [`compact`]),
//! a few hundred bytes where kube-runtime's reflector store kept the whole object, its key
//! and copies of its identifiers (docs/design.md §3.1: 100,000 tracked volumes in 128 MiB).
//!
//! Filled by [`watch`] from a kube-runtime watcher; read by the reconciler (an object is
//! rebuilt for each reconcile), the PV watcher, the status writer and full sync.

use std::borrow::Cow;
use std::hash::{BuildHasher, RandomState};
use std::sync::{PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};

use hashbrown::HashTable;

use crate::controller::full_sync::MigrationRecord;
use crate::volume_migration::VolumeMigration;
use crate::volume_path::VolumePath;

mod compact;
pub mod watch;

use compact::CompactMigration;

/// How an object's name is kept. Objects volmig creates are named after their path
/// (`VolumePath::object_name`): their name is not stored, only the 64-bit digest suffix
/// that ends it, which is all the table hashes.
enum Key {
    Named(u64),
    Other(Box<str>),
}

struct Slot {
    key: Key,
    /// The list (`Init` … `InitDone`) that last saw the object; older ones are gone.
    epoch: u32,
    object: CompactMigration,
}

impl Slot {
    fn name(&self) -> Cow<'_, str> {
        match &self.key {
            Key::Other(name) => Cow::Borrowed(name),
            Key::Named(_) => Cow::Owned(self.object.named_after().unwrap_or_default()),
        }
    }

    fn is(&self, name: &str) -> bool {
        match &self.key {
            Key::Other(own) => **own == *name,
            Key::Named(suffix) => {
                digest_suffix(name) == Some(*suffix)
                    && self.object.named_after().is_some_and(|own| own == name)
            }
        }
    }
}

/// The 16 lowercase hex digits after the last `-` of an object name, when it ends so.
fn digest_suffix(name: &str) -> Option<u64> {
    let (_, hex) = name.rsplit_once('-')?;
    let lower_hex = |c: u8| c.is_ascii_digit() || (b'a'..=b'f').contains(&c);
    if hex.len() != 16 || !hex.bytes().all(lower_hex) {
        return None;
    }
    u64::from_str_radix(hex, 16).ok()
}

/// The objects densely in one vector, found through a table of positions: a table of
/// boxed slots cost an allocation (and the allocator's header) per object, made while the
/// start-up list's pages came and went, which left the allocator's arenas fragmented.
#[derive(Default)]
struct State {
    slots: Vec<Slot>,
    /// Positions in `slots`, hashed by the slot's name.
    index: HashTable<usize>,
    hasher: RandomState,
    epoch: u32,
    synced: bool,
}

impl State {
    /// A function of the name alone: by its digest suffix when it has one (so that a
    /// `Named` slot hashes without its name), else by the whole name.
    fn hash_name(&self, name: &str) -> u64 {
        match digest_suffix(name) {
            Some(suffix) => self.hasher.hash_one((0u8, suffix)),
            None => self.hasher.hash_one((1u8, name)),
        }
    }

    fn hash_slot(hasher: &RandomState, slot: &Slot) -> u64 {
        match &slot.key {
            Key::Named(suffix) => hasher.hash_one((0u8, *suffix)),
            Key::Other(name) => match digest_suffix(name) {
                Some(suffix) => hasher.hash_one((0u8, suffix)),
                None => hasher.hash_one((1u8, &**name)),
            },
        }
    }

    /// Where the object `name` (whose [`Self::hash_name`] is `hash`) sits in `slots`.
    fn position(&self, hash: u64, name: &str) -> Option<usize> {
        self.index
            .find(hash, |&i| {
                self.slots.get(i).is_some_and(|slot| slot.is(name))
            })
            .copied()
    }

    fn find(&self, name: &str) -> Option<&Slot> {
        self.position(self.hash_name(name), name)
            .map(|i| &self.slots[i])
    }

    /// Indexes the slot at `position` (already in `slots`).
    fn index_slot(&mut self, hash: u64, position: usize) {
        let Self {
            slots,
            index,
            hasher,
            ..
        } = self;
        index.insert_unique(hash, position, |&i| Self::hash_slot(hasher, &slots[i]));
    }

    /// Indexes every slot afresh.
    fn reindex(&mut self) {
        self.index = HashTable::with_capacity(self.slots.len());
        for i in 0..self.slots.len() {
            let hash = Self::hash_slot(&self.hasher, &self.slots[i]);
            self.index_slot(hash, i);
        }
    }
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
        let key = match digest_suffix(name) {
            Some(suffix) if object.is_named() => Key::Named(suffix),
            _ => Key::Other(name.into()),
        };
        let mut s = self.write();
        let slot = Slot {
            key,
            epoch: s.epoch,
            object,
        };
        let hash = s.hash_name(name);
        match s.position(hash, name) {
            Some(i) => s.slots[i] = slot,
            None => {
                s.slots.push(slot);
                let position = s.slots.len() - 1;
                s.index_slot(hash, position);
            }
        }
    }

    /// Forgets the object `name`.
    pub fn remove(&self, name: &str) {
        let mut s = self.write();
        let hash = s.hash_name(name);
        let State {
            slots,
            index,
            hasher,
            ..
        } = &mut *s;
        let Ok(entry) = index.find_entry(hash, |&i| slots.get(i).is_some_and(|slot| slot.is(name)))
        else {
            return;
        };
        let (gone, _) = entry.remove();
        slots.swap_remove(gone);
        // The last slot moved into the hole: point its entry at its new position.
        let moved_from = slots.len();
        if let Some(moved) = slots.get(gone) {
            let moved_hash = State::hash_slot(hasher, moved);
            if let Some(position) = index.find_mut(moved_hash, |&i| i == moved_from) {
                *position = gone;
            }
        }
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
        s.slots.retain(|slot| slot.epoch == epoch);
        s.slots.shrink_to_fit();
        s.reindex();
        s.synced = true;
    }

    /// True once a full list has been applied.
    pub fn is_synced(&self) -> bool {
        self.read().synced
    }

    /// Number of objects.
    pub fn len(&self) -> usize {
        self.read().slots.len()
    }

    /// True when the cache holds no object.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The object `name` as `strip_for_cache` leaves it (rebuilt: callers own the copy).
    pub fn get(&self, name: &str) -> Option<VolumeMigration> {
        self.read()
            .find(name)
            .map(|slot| slot.object.to_object(name))
    }

    /// The `metadata.generation` of `name`.
    pub fn generation(&self, name: &str) -> Option<i64> {
        self.read()
            .find(name)
            .and_then(|slot| slot.object.generation())
    }

    /// True when the object `name` exists and tracks `path` (its spec path canonicalizes
    /// to it).
    pub fn tracks(&self, name: &str, path: &VolumePath) -> bool {
        self.read()
            .find(name)
            .is_some_and(|slot| slot.object.spec_path.tracks(path))
    }

    /// Every object's name.
    pub fn names(&self) -> Vec<String> {
        self.read()
            .slots
            .iter()
            .map(|slot| slot.name().into_owned())
            .collect()
    }

    /// What full sync needs of every object (see [`MigrationRecord`]).
    pub fn records(&self) -> Vec<MigrationRecord> {
        self.read()
            .slots
            .iter()
            .map(|slot| slot.object.record(&slot.name()))
            .collect()
    }
}

#[cfg(test)]
mod tests;
