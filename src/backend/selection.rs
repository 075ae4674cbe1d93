//! Which of several CNS volumes for one disk counts (docs/design.md §4.3, §6.3): a rule about
//! volumes, shared by the registrar (adoption) and full sync (duplicates).

use std::collections::{BTreeSet, HashMap};

use super::{CnsVolume, VolumeBackend};
use crate::volume_path::{CNS_NAME_PREFIX, VolumePath};

/// Picks the volume to adopt among existing CNS volumes for one path: the one carrying
/// volmig's deterministic `name`, else the oldest (then the smallest ID, for determinism).
pub fn choose_adoptee<'a>(volumes: &'a [CnsVolume], name: &str) -> Option<&'a CnsVolume> {
    volumes.iter().min_by(|a, b| {
        let key = |v: &CnsVolume| (v.name != name, v.created.is_none(), v.created, v.id.clone());
        key(a).cmp(&key(b))
    })
}

/// The oldest volume (no creation time sorts last), ignoring names.
pub fn oldest(volumes: &[CnsVolume]) -> Option<&CnsVolume> {
    choose_adoptee(volumes, "")
}

/// Fills in the creation time of volumes that may be duplicates of each other — two or
/// more with one backing disk, or with one volmig name — so that "keep the oldest" keeps
/// the oldest and not merely the smallest ID. CNS queries report no creation time; the
/// backend asks for it one volume at a time, so only these few are asked. A volume whose
/// time cannot be read keeps `None` (it then sorts after dated ones).
pub async fn date_possible_duplicates<B: VolumeBackend + ?Sized>(
    backend: &B,
    volumes: &mut [CnsVolume],
) {
    // The first volume seen per disk and per volmig name; a second one makes both
    // candidates (borrowed keys: this runs over every CNS volume at every pass).
    let mut candidates: BTreeSet<usize> = BTreeSet::new();
    {
        let mut first_of_path: HashMap<&VolumePath, usize> = HashMap::new();
        let mut first_of_name: HashMap<&str, usize> = HashMap::new();
        for (i, v) in volumes.iter().enumerate() {
            if let Some(path) = &v.backing_path {
                let first = *first_of_path.entry(path).or_insert(i);
                if first != i {
                    candidates.extend([first, i]);
                }
            }
            if v.name.starts_with(CNS_NAME_PREFIX) {
                let first = *first_of_name.entry(&v.name).or_insert(i);
                if first != i {
                    candidates.extend([first, i]);
                }
            }
        }
    }
    date(backend, volumes, candidates).await;
}

/// [`date_possible_duplicates`] for volumes known to be of one disk (what a query for
/// one path found): all of them are dated when there are several.
pub async fn date_volumes_of_one_disk<B: VolumeBackend + ?Sized>(
    backend: &B,
    volumes: &mut [CnsVolume],
) {
    if volumes.len() > 1 {
        let all = 0..volumes.len();
        date(backend, volumes, all).await;
    }
}

async fn date<B: VolumeBackend + ?Sized>(
    backend: &B,
    volumes: &mut [CnsVolume],
    candidates: impl IntoIterator<Item = usize>,
) {
    for i in candidates {
        if volumes[i].created.is_some() {
            continue;
        }
        let id = volumes[i].id.clone();
        match backend.creation_time(&id).await {
            Ok(created) => volumes[i].created = created,
            Err(e) => {
                tracing::warn!(volume_id = %id, error = %e, "could not read the creation time of a duplicate CNS volume; ordering it by ID");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::memory::InMemoryBackend;
    use crate::backend::{CreateVolumeRequest, VolumeId, list_all_volumes, op};
    use crate::volume_path::VolumePath;

    fn request(path: &VolumePath) -> CreateVolumeRequest {
        CreateVolumeRequest {
            path: path.clone(),
            name: path.cns_volume_name(),
            cluster_id: "c".into(),
            storage_policy_name: None,
            fence: crate::backend::SendFence::none(),
        }
    }

    #[tokio::test]
    async fn the_oldest_duplicate_wins_over_the_smallest_id() {
        let mem = InMemoryBackend::new();
        let path = VolumePath::parse("[ds] kubevols/a.vmdk").unwrap();
        let single = VolumePath::parse("[ds] kubevols/b.vmdk").unwrap();
        mem.add_disk(&path);
        mem.add_disk(&single);
        let first = mem.create_volume(&request(&path)).await.unwrap();
        let second = mem.create_volume(&request(&path)).await.unwrap();
        mem.create_volume(&request(&single)).await.unwrap();
        // IDs that sort the other way round than the creation order.
        let (older, newer) = (VolumeId::from("zz-older"), VolumeId::from("aa-newer"));
        mem.rename_volume(&first, &older);
        mem.rename_volume(&second, &newer);
        mem.set_queries_report_created(false);

        let mut volumes = list_all_volumes(&mem).await.unwrap();
        assert!(volumes.iter().all(|v| v.created.is_none()));
        let of_path = |vs: &[CnsVolume]| -> Vec<CnsVolume> {
            vs.iter()
                .filter(|v| v.backing_path.as_ref() == Some(&path))
                .cloned()
                .collect()
        };
        assert_eq!(
            oldest(&of_path(&volumes)).unwrap().id,
            newer,
            "undated: smallest ID"
        );

        date_possible_duplicates(&mem, &mut volumes).await;
        assert_eq!(oldest(&of_path(&volumes)).unwrap().id, older);
        // Only the two duplicates were asked; the single volume was not.
        assert_eq!(mem.calls(op::CREATION_TIME), 2);
        let lone = volumes
            .iter()
            .find(|v| v.backing_path.as_ref() == Some(&single))
            .unwrap();
        assert!(lone.created.is_none());
    }
}
