//! Which CNS volumes back which disk, per datastore, for the look-up by backing disk on
//! vCenters older than 7.0 Update 1 (docs/design.md §4.3). Listing a datastore's volumes
//! for every create would read N²/2 volume records for N new disks; a snapshot is taken at
//! most once per [`SNAPSHOT_TTL`] per datastore, and concurrent look-ups of one datastore
//! wait for the one listing in progress instead of starting their own.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::time::Instant;

use crate::backend::CnsVolume;
use crate::volume_path::VolumePath;

/// How long a datastore's snapshot answers look-ups. A disk registered under a foreign
/// name by another party within this long before volmig's create is not seen (while volmig
/// is the registrar no other registrar should run, §8.7); full sync reports the
/// duplicate (§6.3).
pub const SNAPSHOT_TTL: Duration = Duration::from_secs(30);

struct Snapshot {
    /// When the listing started (freshness is counted from there).
    taken: Instant,
    by_path: HashMap<VolumePath, Vec<CnsVolume>>,
}

type Slot = Arc<tokio::sync::Mutex<Option<Snapshot>>>;

/// Per-datastore snapshots of the volumes by backing disk.
#[derive(Default)]
pub(crate) struct DiskSnapshots {
    slots: Mutex<HashMap<String, Slot>>,
}

impl DiskSnapshots {
    /// The volumes backing `path` on `datastore`, from a snapshot younger than
    /// [`SNAPSHOT_TTL`], else from a new one made with `list` (every volume of the
    /// datastore). A failed listing is not kept: the next look-up lists again.
    pub(crate) async fn backing<E, F, Fut>(
        &self,
        datastore: &str,
        path: &VolumePath,
        list: F,
    ) -> Result<Vec<CnsVolume>, E>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<Vec<CnsVolume>, E>>,
    {
        let slot: Slot = self
            .slots
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(datastore.to_owned())
            .or_default()
            .clone();
        let mut snapshot = slot.lock().await;
        if let Some(fresh) = snapshot
            .as_ref()
            .filter(|s| s.taken.elapsed() < SNAPSHOT_TTL)
        {
            return Ok(fresh.by_path.get(path).cloned().unwrap_or_default());
        }
        let taken = Instant::now();
        let volumes = list().await?;
        let mut by_path: HashMap<VolumePath, Vec<CnsVolume>> = HashMap::new();
        for volume in volumes {
            if let Some(backing) = volume.backing_path.clone() {
                let ids = by_path.entry(backing).or_default();
                if !ids.iter().any(|v| v.id == volume.id) {
                    ids.push(volume);
                }
            }
        }
        let found = by_path.get(path).cloned().unwrap_or_default();
        *snapshot = Some(Snapshot { taken, by_path });
        Ok(found)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::backend::VolumeId;

    fn volume(id: &str, path: &str) -> CnsVolume {
        CnsVolume {
            id: VolumeId(id.to_owned()),
            name: format!("pvc-{id}"),
            backing_path: Some(VolumePath::parse(path).unwrap()),
            created: None,
            cluster_ids: Vec::new(),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn one_listing_answers_every_look_up_until_it_is_old() {
        let snapshots = DiskSnapshots::default();
        let listings = AtomicUsize::new(0);
        let list = || async {
            listings.fetch_add(1, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_secs(1)).await;
            Ok::<_, ()>(vec![volume("a", "[ds] a.vmdk"), volume("b", "[ds] b.vmdk")])
        };
        let a = VolumePath::parse("[ds] a.vmdk").unwrap();
        let b = VolumePath::parse("[ds] b.vmdk").unwrap();
        let c = VolumePath::parse("[ds] c.vmdk").unwrap();
        let (found_a, found_b) = tokio::join!(
            snapshots.backing("ds", &a, list),
            snapshots.backing("ds", &b, list)
        );
        assert_eq!(found_a.unwrap()[0].id.0, "a");
        assert_eq!(found_b.unwrap()[0].id.0, "b");
        assert_eq!(
            listings.load(Ordering::SeqCst),
            1,
            "concurrent look-ups share one"
        );
        assert!(snapshots.backing("ds", &c, list).await.unwrap().is_empty());
        assert_eq!(listings.load(Ordering::SeqCst), 1);
        tokio::time::advance(SNAPSHOT_TTL).await;
        snapshots.backing("ds", &c, list).await.unwrap();
        assert_eq!(
            listings.load(Ordering::SeqCst),
            2,
            "an old snapshot is replaced"
        );
        snapshots.backing("other", &c, list).await.unwrap();
        assert_eq!(
            listings.load(Ordering::SeqCst),
            3,
            "one snapshot per datastore"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_listing_is_not_kept() {
        let snapshots = DiskSnapshots::default();
        let a = VolumePath::parse("[ds] a.vmdk").unwrap();
        let failed = snapshots
            .backing("ds", &a, || async { Err::<Vec<CnsVolume>, _>("503") })
            .await;
        assert_eq!(failed.unwrap_err(), "503");
        let found = snapshots
            .backing("ds", &a, || async {
                Ok::<_, &str>(vec![volume("a", "[ds] a.vmdk")])
            })
            .await
            .unwrap();
        assert_eq!(found.len(), 1);
    }
}
