//! A lock per key whose table entries live only while someone holds or waits for them.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::{Mutex as AsyncMutex, OwnedMutexGuard};

struct Entry {
    lock: Arc<AsyncMutex<()>>,
    /// Holders plus waiters; the entry is removed when this drops to zero.
    users: usize,
}

/// Serializes work per key. Cheap to clone; clones share one table.
pub struct KeyedLock<K> {
    table: Arc<Mutex<HashMap<K, Entry>>>,
}

impl<K> Clone for KeyedLock<K> {
    fn clone(&self) -> Self {
        Self {
            table: Arc::clone(&self.table),
        }
    }
}

impl<K: Eq + Hash + Clone> Default for KeyedLock<K> {
    fn default() -> Self {
        Self {
            table: Arc::new(Mutex::new(HashMap::new())),
        }
    }
}

/// Registration of one user of a key; removes the table entry when the last one leaves,
/// also when a waiter is cancelled before it got the lock.
struct Ticket<K: Eq + Hash> {
    table: Arc<Mutex<HashMap<K, Entry>>>,
    key: K,
}

impl<K: Eq + Hash> Drop for Ticket<K> {
    fn drop(&mut self) {
        let mut table = self.table.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(entry) = table.get_mut(&self.key) {
            entry.users -= 1;
            if entry.users == 0 {
                table.remove(&self.key);
            }
        }
    }
}

/// Holds the lock of one key until dropped.
pub struct KeyGuard<K: Eq + Hash> {
    // Field order matters: the mutex is released before the ticket updates the table.
    _guard: OwnedMutexGuard<()>,
    _ticket: Ticket<K>,
}

impl<K: Eq + Hash + Clone> KeyedLock<K> {
    /// Waits for exclusive use of `key`.
    pub async fn lock(&self, key: &K) -> KeyGuard<K> {
        let lock = {
            let mut table = self.table.lock().unwrap_or_else(PoisonError::into_inner);
            let entry = table.entry(key.clone()).or_insert_with(|| Entry {
                lock: Arc::new(AsyncMutex::new(())),
                users: 0,
            });
            entry.users += 1;
            Arc::clone(&entry.lock)
        };
        let ticket = Ticket {
            table: Arc::clone(&self.table),
            key: key.clone(),
        };
        let guard = lock.lock_owned().await;
        KeyGuard {
            _guard: guard,
            _ticket: ticket,
        }
    }

    /// Number of keys currently held or waited for.
    pub fn len(&self) -> usize {
        self.table
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// True when no key is held or waited for.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    #[tokio::test(start_paused = true)]
    async fn one_holder_per_key_and_table_empties() {
        let locks = KeyedLock::<u32>::default();
        let inside = Arc::new(AtomicUsize::new(0));
        let max_inside = Arc::new(AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for _ in 0..16 {
            let (locks, inside, max_inside) = (locks.clone(), inside.clone(), max_inside.clone());
            tasks.push(tokio::spawn(async move {
                let _g = locks.lock(&7).await;
                let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                max_inside.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(10)).await;
                inside.fetch_sub(1, Ordering::SeqCst);
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
        assert_eq!(max_inside.load(Ordering::SeqCst), 1);
        assert!(locks.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn different_keys_do_not_block_each_other() {
        let locks = KeyedLock::<u32>::default();
        let _a = locks.lock(&1).await;
        let b = tokio::time::timeout(Duration::from_secs(1), locks.lock(&2)).await;
        assert!(b.is_ok(), "key 2 must not wait for key 1");
        assert_eq!(locks.len(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn cancelled_waiter_frees_its_entry() {
        let locks = KeyedLock::<u32>::default();
        let held = locks.lock(&1).await;
        let waiting = tokio::time::timeout(Duration::from_millis(5), locks.lock(&1)).await;
        assert!(waiting.is_err(), "the waiter must still be waiting");
        assert_eq!(locks.len(), 1);
        drop(held);
        assert!(locks.is_empty(), "entry leaked after a cancelled waiter");
    }
}
