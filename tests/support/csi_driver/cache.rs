//! The driver's volume-path cache: the informer of `pkg/apis/migration/migration.go` @ bf80902.
//!
//! `GetVolumeMigrationService` (migration.go:160-206) runs a dynamic informer on
//! `cnsvspherevolumemigrations` with `AddFunc` (L170-183: store raw `spec.volumepath` →
//! `spec.volumeid`) and `DeleteFunc` (L184-196: delete the entry of the deleted object's
//! `spec.volumepath`, whichever object carried it) and **no `UpdateFunc`**: a patch or
//! replace is never seen. `GetVolumeID` (L222-229) looks the raw PV path up verbatim.
//! The registration path never stores into the map (L237-251): the cache learns an ID only
//! from the watch.
//!
//! The informer here lists, then watches from the list's resourceVersion; a watch that
//! times out is resumed, a 410 (or any other watch error) makes it relist the way a
//! client-go reflector's `Replace` does: new names are Adds, vanished names are Deletes
//! (of the last object known), names still present are Updates — ignored. (A real
//! relist delivers a vanished object as a `DeletedFinalStateUnknown` tombstone, which the
//! driver's unchecked type assertion at L188 does not expect; the double applies it as a
//! Delete, as the brief asks.)

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use kube::api::{Api, ListParams};
use volmig::k8s::driver_cache::{CnsVSphereVolumeMigration, CnsVSphereVolumeMigrationSpec};

use super::watch::{Change, Watch};

/// What an informer event did to the cache.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CacheEventKind {
    /// `AddFunc`: the object's raw path now maps to its ID.
    Add,
    /// `DeleteFunc`: the object's raw path is no longer cached (whoever carried it).
    Delete,
    /// An update (watch MODIFIED, or an object changed across a relist): no handler, the
    /// cache is unchanged.
    UpdateIgnored,
}

/// One informer event as the cache applied it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CacheEvent {
    /// What the handler did.
    pub kind: CacheEventKind,
    /// The object's name.
    pub name: String,
    /// Its raw `spec.volumepath`.
    pub volumepath: String,
    /// Its `spec.volumeid`.
    pub volumeid: String,
    /// True when the event came from a (re)list rather than a watch event.
    pub from_list: bool,
}

/// The cache and the informer's store (object name → spec), behind one lock.
#[derive(Default, Debug)]
pub struct Cache {
    /// `volumePathToVolumeID`: raw path → volume ID.
    map: BTreeMap<String, String>,
    /// The informer's store: what it last knew of each object.
    store: BTreeMap<String, CnsVSphereVolumeMigrationSpec>,
    /// Every event applied, in order (kept across restarts).
    events: Vec<CacheEvent>,
    /// True once the first list of the current run was applied.
    synced: bool,
}

impl Cache {
    /// `volumePathToVolumeID.Load(raw)` (migration.go:225): exact raw-string match.
    pub fn get(&self, raw: &str) -> Option<String> {
        self.map.get(raw).cloned()
    }

    /// raw path → ID, as cached now.
    pub fn snapshot(&self) -> BTreeMap<String, String> {
        self.map.clone()
    }

    /// Every event applied so far.
    pub fn events(&self) -> Vec<CacheEvent> {
        self.events.clone()
    }

    /// True once the current run's first list was applied.
    pub fn synced(&self) -> bool {
        self.synced
    }

    /// A process restart: the map and store are gone (the event log stays for assertions).
    pub fn forget(&mut self) {
        self.map.clear();
        self.store.clear();
        self.synced = false;
    }

    fn record(
        &mut self,
        kind: CacheEventKind,
        name: &str,
        spec: &CnsVSphereVolumeMigrationSpec,
        from_list: bool,
    ) {
        self.events.push(CacheEvent {
            kind,
            name: name.to_owned(),
            volumepath: spec.volumepath.clone(),
            volumeid: spec.volumeid.clone(),
            from_list,
        });
    }

    /// A watch ADDED (or a relist's new object): `AddFunc`.
    pub fn added(&mut self, name: &str, spec: CnsVSphereVolumeMigrationSpec, from_list: bool) {
        self.map
            .insert(spec.volumepath.clone(), spec.volumeid.clone());
        self.record(CacheEventKind::Add, name, &spec, from_list);
        self.store.insert(name.to_owned(), spec);
    }

    /// A watch MODIFIED: the store follows, the cache does not (no `UpdateFunc`).
    pub fn modified(&mut self, name: &str, spec: CnsVSphereVolumeMigrationSpec, from_list: bool) {
        self.record(CacheEventKind::UpdateIgnored, name, &spec, from_list);
        self.store.insert(name.to_owned(), spec);
    }

    /// A watch DELETED (or a relist's vanished object): `DeleteFunc` removes the entry of
    /// the object's raw path, whichever object carried it (migration.go:193).
    pub fn deleted(&mut self, name: &str, spec: CnsVSphereVolumeMigrationSpec, from_list: bool) {
        self.map.remove(&spec.volumepath);
        self.record(CacheEventKind::Delete, name, &spec, from_list);
        self.store.remove(name);
    }

    /// A (re)list, as a reflector's `Replace` delivers it: Adds for new names, Updates
    /// (ignored) for known ones, Deletes for names no longer listed.
    pub fn replace(&mut self, listed: Vec<(String, CnsVSphereVolumeMigrationSpec)>) {
        let listed: BTreeMap<String, CnsVSphereVolumeMigrationSpec> = listed.into_iter().collect();
        let vanished: Vec<(String, CnsVSphereVolumeMigrationSpec)> = self
            .store
            .iter()
            .filter(|(name, _)| !listed.contains_key(*name))
            .map(|(n, s)| (n.clone(), s.clone()))
            .collect();
        for (name, spec) in listed {
            if self.store.contains_key(&name) {
                self.modified(&name, spec, true);
            } else {
                self.added(&name, spec, true);
            }
        }
        for (name, spec) in vanished {
            self.deleted(&name, spec, true);
        }
        self.synced = true;
    }
}

/// Runs the informer (until its task is aborted): list, watch, relist on a watch error.
pub async fn run_informer(api: Api<CnsVSphereVolumeMigration>, cache: &Mutex<Cache>) {
    loop {
        let params = ListParams::default();
        let list = match api.list(&params).await {
            Ok(list) => list,
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
        };
        let version = list.metadata.resource_version.clone().unwrap_or_default();
        let listed = list
            .items
            .into_iter()
            .map(|o| (o.metadata.name.unwrap_or_default(), o.spec))
            .collect();
        lock(cache).replace(listed);
        let mut watch = Watch::from(&api, version);
        while let Some(change) = watch.next().await {
            let (object, kind) = match change {
                Change::Added(o) => (o, 'A'),
                Change::Modified(o) => (o, 'M'),
                Change::Deleted(o) => (o, 'D'),
            };
            let name = object.metadata.name.unwrap_or_default();
            let mut cache = lock(cache);
            match kind {
                'A' => cache.added(&name, object.spec, false),
                'M' => cache.modified(&name, object.spec, false),
                _ => cache.deleted(&name, object.spec, false),
            }
        }
    }
}

/// Locks a mutex, taking over a poisoned one (a panicking test thread).
pub fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(path: &str, id: &str) -> CnsVSphereVolumeMigrationSpec {
        CnsVSphereVolumeMigrationSpec {
            volumepath: path.into(),
            volumeid: id.into(),
            protectvolumefromvmdelete: false,
        }
    }

    #[test]
    fn a_modification_is_never_seen_and_a_delete_drops_the_path_whoever_carried_it() {
        let mut c = Cache::default();
        c.added("a", spec("[ds] x.vmdk", "1"), false);
        c.modified("a", spec("[ds] x.vmdk", "2"), false);
        assert_eq!(c.get("[ds] x.vmdk").as_deref(), Some("1"));
        c.added("b", spec("[ds] x.vmdk", "1"), false);
        c.deleted("a", spec("[ds] x.vmdk", "2"), false);
        assert_eq!(
            c.get("[ds] x.vmdk"),
            None,
            "b still carries it, but the entry is gone"
        );
        assert_eq!(c.get("[ds]  x.vmdk"), None, "exact raw match only");
    }

    #[test]
    fn a_relist_adds_new_deletes_vanished_and_ignores_changed() {
        let mut c = Cache::default();
        c.replace(vec![
            ("a".into(), spec("p1", "1")),
            ("b".into(), spec("p2", "2")),
        ]);
        c.replace(vec![
            ("a".into(), spec("p1", "9")),
            ("c".into(), spec("p3", "3")),
        ]);
        let snap = c.snapshot();
        assert_eq!(
            snap.get("p1").map(String::as_str),
            Some("1"),
            "changed: ignored"
        );
        assert_eq!(snap.get("p2"), None, "vanished: deleted");
        assert_eq!(snap.get("p3").map(String::as_str), Some("3"), "new: added");
        let kinds: Vec<CacheEventKind> = c.events().into_iter().map(|e| e.kind).collect();
        assert_eq!(
            kinds,
            [
                CacheEventKind::Add,
                CacheEventKind::Add,
                CacheEventKind::UpdateIgnored,
                CacheEventKind::Add,
                CacheEventKind::Delete
            ]
        );
    }
}
