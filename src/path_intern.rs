//! One shared copy of each canonical volume path for the whole process (docs/design.md §3.1;
//! docs/operations.md, "Sizing memory").
//!
//! The PV index and the driver-cache index each keep an `Arc<VolumePath>` per tracked
//! volume, for the same paths. Taking them from [`intern`] makes both hold the same
//! allocation, so a path (~90 bytes of text plus the `Arc`) is stored once however many
//! structures reference it.
//!
//! A holder gives its handle back with [`release`], which removes the entry once only the
//! interner still holds it. Whether a handle is the last one is decided under the
//! interner's lock, and [`intern`] clones handles only under that lock, so a concurrent
//! `intern` of the same path either gets the entry before it is removed (and keeps it) or
//! creates a new one after: never a handle to an entry that is then forgotten. Handles
//! dropped without [`release`] leave their entry behind until [`sweep`]. Handles must not
//! be downgraded to `Weak`: upgrading one would clone outside the lock.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, LazyLock, Mutex, MutexGuard, PoisonError};

use crate::compact_text::{CompactSet, CompactText, TextRef};
use crate::volume_path::VolumePath;

/// The interned paths. A leaf lock: nothing else is locked or called while it is held, so
/// callers may hold their own locks around [`intern`] and [`release`].
static PATHS: LazyLock<Mutex<HashSet<Arc<VolumePath>>>> = LazyLock::new(Mutex::default);

/// The set of interned paths; the set stays consistent even if a holder panicked (every
/// change to it is a single insert or remove).
fn lock() -> MutexGuard<'static, HashSet<Arc<VolumePath>>> {
    PATHS.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The one shared handle for `path`, created if no one holds it yet. Give it back with
/// [`release`].
pub fn intern(path: VolumePath) -> Arc<VolumePath> {
    let mut paths = lock();
    if let Some(shared) = paths.get(&path) {
        return Arc::clone(shared);
    }
    let shared = Arc::new(path);
    paths.insert(Arc::clone(&shared));
    shared
}

/// Drops the caller's handle, and the interner's entry with it when no one else holds the
/// entry. A handle that is not the interned one (an `Arc` made elsewhere) is just dropped.
pub fn release(path: Arc<VolumePath>) {
    let removed = {
        let mut paths = lock();
        // Two references, the caller's and the set's, and no one else can clone either
        // while the lock is held: this is the last handle.
        let last = Arc::strong_count(&path) == 2
            && paths
                .get(&*path)
                .is_some_and(|entry| Arc::ptr_eq(entry, &path));
        if last { paths.take(&*path) } else { None }
    };
    // The path is freed here, after the lock is released.
    drop((path, removed));
}

/// Removes the entries no one but the interner holds (handles dropped without
/// [`release`]); returns how many.
pub fn sweep() -> usize {
    let removed: Vec<Arc<VolumePath>> = lock()
        .extract_if(|entry| Arc::strong_count(entry) == 1)
        .collect();
    removed.len()
}

/// True when `path` is interned (held, or not yet swept), without taking a handle.
pub fn contains(path: &VolumePath) -> bool {
    lock().contains(path)
}

/// True when `handle` is the interned entry of its path (not an equal `Arc` made elsewhere).
pub fn is_interned(handle: &Arc<VolumePath>) -> bool {
    lock()
        .get(&**handle)
        .is_some_and(|entry| Arc::ptr_eq(entry, handle))
}

/// Number of interned paths, held or not yet swept.
pub fn len() -> usize {
    lock().len()
}

/// True when no path is interned.
pub fn is_empty() -> bool {
    len() == 0
}

/// The names of the objects that reference each path (usually one), keyed by interned
/// handles: what the PV index and the driver-cache index both keep. A path's handle goes
/// back through [`release`] when its last name is unlinked or the map is dropped.
#[derive(Default)]
pub struct NamesByPath(HashMap<Arc<VolumePath>, CompactSet>);

impl NamesByPath {
    /// Adds `name` to the names of `path` (an interned handle, cloned for a new key).
    pub fn link(&mut self, path: &Arc<VolumePath>, name: &CompactText) {
        match self.0.get_mut(&**path) {
            Some(names) => names.insert(name.clone()),
            None => {
                self.0
                    .insert(Arc::clone(path), CompactSet::one(name.clone()));
            }
        }
    }

    /// Takes `name` out of the names of `path`; a path left with none is forgotten.
    pub fn unlink(&mut self, path: &VolumePath, name: TextRef<'_>) {
        if let Some(names) = self.0.get_mut(path)
            && names.remove(name)
            && let Some((key, _)) = self.0.remove_entry(path)
        {
            release(key);
        }
    }

    /// The names of `path`.
    pub fn get(&self, path: &VolumePath) -> Option<&CompactSet> {
        self.0.get(path)
    }

    /// Every path with its names.
    pub fn iter(&self) -> impl Iterator<Item = (&Arc<VolumePath>, &CompactSet)> {
        self.0.iter()
    }

    /// The handle kept for `path` (for tests of the indexes).
    #[cfg(test)]
    pub(crate) fn handle(&self, path: &VolumePath) -> Option<&Arc<VolumePath>> {
        self.0.get_key_value(path).map(|(key, _)| key)
    }
}

impl Drop for NamesByPath {
    fn drop(&mut self) {
        for (path, _) in self.0.drain() {
            release(path);
        }
    }
}

#[cfg(test)]
#[path = "path_intern_tests.rs"]
mod tests;
