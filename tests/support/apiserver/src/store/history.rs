//! The bounded watch-event history: a ring of the most recent changes, with a floor below
//! which a watch or a continue token gets 410 Gone.

use std::collections::VecDeque;
use std::sync::Arc;

use serde_json::Value;

use crate::registry::StorageKey;

/// Watch event types.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// Object created.
    Added,
    /// Object changed.
    Modified,
    /// Object gone.
    Deleted,
}

impl EventType {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One change.
#[derive(Debug, Clone)]
pub struct HistEvent {
    /// The resourceVersion the change produced.
    pub rv: u64,
    /// Which resource it belongs to.
    pub storage: Arc<StorageKey>,
    /// What happened.
    pub kind: EventType,
    /// The object after the change (for deletions: the object as deleted).
    pub obj: Arc<Value>,
    /// The object before the change, if any (selectors need it to turn a MODIFIED that
    /// leaves a selection into a DELETED).
    pub prev: Option<Arc<Value>>,
}

/// The history window.
#[derive(Debug)]
pub struct History {
    ring: VecDeque<HistEvent>,
    cap: usize,
    floor: u64,
    /// The resourceVersion of the last forced compaction: open watches positioned exactly
    /// there may go on (they missed nothing), new watches from there get 410.
    bridge: Option<u64>,
}

/// A watch or continue token from before the history window.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooOld {
    /// The oldest resourceVersion still servable.
    pub floor: u64,
}

impl History {
    /// An empty history keeping at most `cap` events, starting at resourceVersion `floor`.
    pub fn new(cap: usize, floor: u64) -> Self {
        History {
            ring: VecDeque::with_capacity(cap.min(4096)),
            cap: cap.max(1),
            floor,
            bridge: None,
        }
    }

    /// Records an event, evicting the oldest when full.
    pub fn push(&mut self, ev: HistEvent) {
        if self.ring.len() >= self.cap
            && let Some(old) = self.ring.pop_front()
        {
            self.floor = old.rv;
            self.bridge = None;
        }
        self.ring.push_back(ev);
    }

    /// A forced compaction: forgets every event; `old_rv` (the latest version before the
    /// compaction) and everything older become too old to watch from, and `new_rv` (which the
    /// store moves to) is the new floor.
    pub fn compact(&mut self, old_rv: u64, new_rv: u64) {
        self.ring.clear();
        self.floor = self.floor.max(new_rv);
        self.bridge = Some(old_rv);
    }

    /// The oldest resourceVersion from which changes are still known.
    pub fn floor(&self) -> u64 {
        self.floor
    }

    /// Checks that changes after `rv` are all still known.
    pub fn check(&self, rv: u64) -> Result<(), TooOld> {
        if rv < self.floor {
            Err(TooOld { floor: self.floor })
        } else {
            Ok(())
        }
    }

    /// Up to `max` events of `storage` after `rv`, and the resourceVersion scanned up to.
    /// `open` is true for a watch that is already streaming (it may cross a compaction it was
    /// caught up with).
    pub fn since(
        &self,
        rv: u64,
        storage: &StorageKey,
        max: usize,
        open: bool,
    ) -> Result<(Vec<HistEvent>, u64), TooOld> {
        if !(open && self.bridge == Some(rv)) {
            self.check(rv)?;
        }
        let start = self.ring.partition_point(|e| e.rv <= rv);
        let mut out = Vec::new();
        let mut scanned = rv;
        for e in self.ring.iter().skip(start) {
            if out.len() >= max {
                break;
            }
            scanned = e.rv;
            if *e.storage == *storage {
                out.push(e.clone());
            }
        }
        Ok((out, scanned))
    }

    /// Number of events held.
    pub fn len(&self) -> usize {
        self.ring.len()
    }

    /// Whether no events are held.
    pub fn is_empty(&self) -> bool {
        self.ring.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ev(rv: u64, key: &Arc<StorageKey>) -> HistEvent {
        HistEvent {
            rv,
            storage: key.clone(),
            kind: EventType::Added,
            obj: Arc::new(json!({})),
            prev: None,
        }
    }

    #[test]
    fn eviction_raises_the_floor() {
        let pv = Arc::new(StorageKey {
            group: String::new(),
            resource: "persistentvolumes".into(),
        });
        let ns = Arc::new(StorageKey {
            group: String::new(),
            resource: "namespaces".into(),
        });
        let mut h = History::new(3, 10);
        for rv in 11..=14 {
            h.push(ev(rv, if rv % 2 == 0 { &pv } else { &ns }));
        }
        assert_eq!(h.floor(), 11);
        assert_eq!(
            h.since(10, &pv, 100, false).unwrap_err(),
            TooOld { floor: 11 }
        );
        let (evs, scanned) = h.since(11, &pv, 100, false).expect("in window");
        assert_eq!(evs.iter().map(|e| e.rv).collect::<Vec<_>>(), vec![12, 14]);
        assert_eq!(scanned, 14);
        h.compact(14, 15);
        assert!(h.since(13, &pv, 100, true).is_err());
        assert!(
            h.since(14, &pv, 100, false).is_err(),
            "a new watch from before the compaction"
        );
        assert!(
            h.since(14, &pv, 100, true)
                .expect("an open, caught-up watch")
                .0
                .is_empty()
        );
        h.push(ev(16, &pv));
        assert_eq!(h.since(14, &pv, 100, true).expect("open").0.len(), 1);
        assert_eq!(
            h.since(15, &pv, 100, false)
                .expect("new watch from the floor")
                .0
                .len(),
            1
        );
    }
}
