//! In-memory object storage: one ordered map per resource keyed by (namespace, name), a
//! global resourceVersion, and the bounded watch history.

mod history;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Instant;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::Value;
use tokio::sync::watch;

pub use history::{EventType, HistEvent, History, TooOld};

use crate::meta;
use crate::registry::{Registry, StorageKey};

/// (namespace, name); namespace is "" for cluster-scoped objects.
pub type ObjKey = (String, String);

#[derive(Debug)]
struct Bucket {
    key: Arc<StorageKey>,
    objects: BTreeMap<ObjKey, Arc<Value>>,
    /// When an object of the resource was last stored or removed.
    changed_at: Instant,
}

/// All state behind the server's lock.
#[derive(Debug)]
pub struct Store {
    rv: u64,
    /// Served resources.
    pub registry: Registry,
    buckets: HashMap<StorageKey, Bucket>,
    /// Watch history.
    pub history: History,
    rng: StdRng,
    notify: watch::Sender<u64>,
}

impl Store {
    /// An empty store with the built-in resources.
    pub fn new(history_cap: usize, seed: u64, notify: watch::Sender<u64>) -> Self {
        Store {
            rv: 0,
            registry: Registry::with_builtins(),
            buckets: HashMap::new(),
            history: History::new(history_cap, 0),
            rng: StdRng::seed_from_u64(seed ^ 0x6b75_6265),
            notify,
        }
    }

    /// The current (latest) resourceVersion.
    pub fn rv(&self) -> u64 {
        self.rv
    }

    /// A fresh UID.
    pub fn new_uid(&mut self) -> String {
        let b: [u8; 16] = self.rng.random();
        let h: String = b.iter().map(|x| format!("{x:02x}")).collect();
        format!(
            "{}-{}-4{}-a{}-{}",
            &h[0..8],
            &h[8..12],
            &h[13..16],
            &h[17..20],
            &h[20..32]
        )
    }

    /// Five random characters for `generateName`.
    pub fn name_suffix(&mut self) -> String {
        const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
        (0..5)
            .map(|_| ALPHABET[self.rng.random_range(0..ALPHABET.len())] as char)
            .collect()
    }

    fn bucket(&mut self, sk: &StorageKey) -> &mut Bucket {
        self.buckets.entry(sk.clone()).or_insert_with(|| Bucket {
            key: Arc::new(sk.clone()),
            objects: BTreeMap::new(),
            changed_at: Instant::now(),
        })
    }

    /// The stored object, if any.
    pub fn get(&self, sk: &StorageKey, ns: &str, name: &str) -> Option<&Arc<Value>> {
        self.buckets
            .get(sk)?
            .objects
            .get(&(ns.to_string(), name.to_string()))
    }

    /// Objects of a resource in key order, optionally within one namespace, strictly after
    /// `after`.
    pub fn range<'a>(
        &'a self,
        sk: &StorageKey,
        ns: Option<&'a str>,
        after: Option<&ObjKey>,
    ) -> Box<dyn Iterator<Item = (&'a ObjKey, &'a Arc<Value>)> + 'a> {
        use std::ops::Bound;
        let Some(b) = self.buckets.get(sk) else {
            return Box::new(std::iter::empty());
        };
        let lower = match (after, ns) {
            (Some(a), _) => Bound::Excluded(a.clone()),
            (None, Some(n)) => Bound::Included((n.to_string(), String::new())),
            (None, None) => Bound::Unbounded,
        };
        let iter = b.objects.range((lower, Bound::Unbounded));
        match ns {
            Some(n) => Box::new(iter.take_while(move |(k, _)| k.0 == n)),
            None => Box::new(iter),
        }
    }

    /// When an object of a resource was last stored or removed (None: never).
    pub fn changed_at(&self, sk: &StorageKey) -> Option<Instant> {
        self.buckets.get(sk).map(|b| b.changed_at)
    }

    /// Number of objects of a resource.
    pub fn count(&self, sk: &StorageKey) -> usize {
        self.buckets.get(sk).map_or(0, |b| b.objects.len())
    }

    /// Whether any object lives in namespace `ns`.
    pub fn namespace_in_use(&self, ns: &str) -> bool {
        self.buckets
            .values()
            .any(|b| b.objects.keys().any(|k| k.0 == ns))
    }

    /// Keys of every namespaced object in `ns`, by resource.
    pub fn keys_in_namespace(&self, ns: &str) -> Vec<(StorageKey, String)> {
        let mut out = Vec::new();
        for (sk, b) in &self.buckets {
            for k in b.objects.keys().filter(|k| k.0 == ns) {
                out.push((sk.clone(), k.1.clone()));
            }
        }
        out
    }

    fn record(
        &mut self,
        key: Arc<StorageKey>,
        kind: EventType,
        obj: Arc<Value>,
        prev: Option<Arc<Value>>,
    ) {
        self.history.push(HistEvent {
            rv: self.rv,
            storage: key,
            kind,
            obj,
            prev,
        });
        self.notify.send_replace(self.rv);
    }

    /// Stores `obj` (created or replaced) under a new resourceVersion and records the event.
    pub fn put(&mut self, sk: &StorageKey, mut obj: Value) -> Arc<Value> {
        self.rv += 1;
        let rv = self.rv;
        meta::set_str(&mut obj, "resourceVersion", &rv.to_string());
        let key = (
            meta::namespace(&obj).to_string(),
            meta::name(&obj).to_string(),
        );
        let obj = Arc::new(obj);
        let b = self.bucket(sk);
        let prev = b.objects.insert(key, obj.clone());
        b.changed_at = Instant::now();
        let bkey = b.key.clone();
        let kind = if prev.is_some() {
            EventType::Modified
        } else {
            EventType::Added
        };
        self.record(bkey, kind, obj.clone(), prev);
        obj
    }

    /// Removes an object; the DELETED event carries `last` with a new resourceVersion.
    pub fn remove(&mut self, sk: &StorageKey, ns: &str, name: &str) -> Option<Arc<Value>> {
        let b = self.buckets.get_mut(sk)?;
        let prev = b.objects.remove(&(ns.to_string(), name.to_string()))?;
        b.changed_at = Instant::now();
        let bkey = b.key.clone();
        self.rv += 1;
        let mut last = (*prev).clone();
        meta::set_str(&mut last, "resourceVersion", &self.rv.to_string());
        let last = Arc::new(last);
        self.record(bkey, EventType::Deleted, last.clone(), Some(prev));
        Some(last)
    }

    /// Forces a compaction of the watch history at the current resourceVersion.
    pub fn compact(&mut self) -> u64 {
        let old = self.rv;
        self.rv += 1;
        self.history.compact(old, self.rv);
        self.rv
    }
}
