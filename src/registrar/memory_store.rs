//! A status store in memory, for tests (feature `testing`): versions every write like the
//! API server does, keeps the history, and can be told to fail or be changed behind the
//! registrar's back (another replica, a hand edit).

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};

use async_trait::async_trait;

use super::status_store::{
    StatusStore, StatusUpdate, StoreError, StoreErrorKind, StoredState, Version, apply,
};
use crate::volume_path::VolumePath;

/// See the module documentation.
#[derive(Default)]
pub struct InMemoryStatusStore {
    inner: Mutex<MemoryState>,
}

#[derive(Default)]
struct MemoryState {
    states: HashMap<VolumePath, StoredState>,
    history: Vec<(VolumePath, StatusUpdate)>,
    fail_next_saves: usize,
    collisions: HashMap<VolumePath, String>,
    next_version: u64,
}

impl MemoryState {
    fn bump(&mut self) -> Version {
        self.next_version += 1;
        Version(self.next_version.to_string())
    }
}

impl InMemoryStatusStore {
    fn state(&self) -> MutexGuard<'_, MemoryState> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The next `n` saves fail with a retryable error (nothing is stored).
    pub fn fail_next_saves(&self, n: usize) {
        self.state().fail_next_saves = n;
    }

    /// The stored state of `path`.
    pub fn get(&self, path: &VolumePath) -> Option<StoredState> {
        self.state().states.get(path).cloned()
    }

    /// Every update saved so far, in order.
    pub fn history(&self) -> Vec<(VolumePath, StatusUpdate)> {
        self.state().history.clone()
    }

    /// Applies `update` as another writer would (unconditionally, not in the history).
    pub fn write_behind(&self, path: &VolumePath, update: &StatusUpdate) {
        let mut inner = self.state();
        let version = inner.bump();
        let entry = inner.states.entry(path.clone()).or_default();
        apply(entry, update);
        entry.version = Some(version);
    }

    /// Creates an empty object for `path` (as the PV watcher does), or replaces the stored
    /// one by an empty one (deleted and recreated by hand).
    pub fn reset(&self, path: &VolumePath) {
        let mut inner = self.state();
        let version = inner.bump();
        inner.states.insert(
            path.clone(),
            StoredState {
                version: Some(version),
                ..StoredState::default()
            },
        );
    }

    /// Makes the object named after `path` track `other` instead (a name collision).
    pub fn collide(&self, path: &VolumePath, other: &str) {
        self.state()
            .collisions
            .insert(path.clone(), other.to_owned());
    }
}

#[async_trait]
impl StatusStore for InMemoryStatusStore {
    async fn load(&self, path: &VolumePath) -> Result<Option<StoredState>, StoreError> {
        let inner = self.state();
        if let Some(found) = inner.collisions.get(path) {
            return Err(StoreError::new(
                path,
                StoreErrorKind::NameCollision {
                    found: found.clone(),
                },
                format!("the object of {path} tracks {found}"),
            ));
        }
        Ok(inner.states.get(path).cloned())
    }

    async fn save(
        &self,
        path: &VolumePath,
        update: &StatusUpdate,
        expect: Option<&Version>,
    ) -> Result<Version, StoreError> {
        let mut inner = self.state();
        if inner.fail_next_saves > 0 {
            inner.fail_next_saves -= 1;
            return Err(StoreError::new(
                path,
                StoreErrorKind::Unavailable,
                "injected failure",
            ));
        }
        if let Some(expect) = expect {
            let current = inner.states.get(path).and_then(|s| s.version.as_ref());
            if current != Some(expect) {
                return Err(StoreError::new(
                    path,
                    StoreErrorKind::Conflict,
                    format!("version {} is stale", expect.0),
                ));
            }
        }
        let version = inner.bump();
        let entry = inner.states.entry(path.clone()).or_default();
        apply(entry, update);
        entry.version = Some(version.clone());
        inner.history.push((path.clone(), update.clone()));
        Ok(version)
    }
}
