//! Which volume ID a path's status and the CSI driver's cache may name (docs/design.md §6.2,
//! §8.2): live in CNS, and not another disk's.

use super::*;

/// The ID the CSI driver's cache holds for `path` that still exists in CNS and is not
/// known to back another disk (a hand-made or stale object must not move the path to
/// another disk's volume, docs/design.md §8.2); the smallest, for determinism, when it
/// holds several.
pub(super) fn live_driver_id<'a>(
    inputs: &'a PassInputs<'_>,
    live: &HashSet<&str>,
    disk_of: &HashMap<&str, &VolumePath>,
    path: &VolumePath,
) -> Option<&'a str> {
    inputs
        .driver_ids
        .get(path)?
        .iter()
        .filter(|id| live.contains(id.as_str()))
        .filter(|id| disk_of.get(id.as_str()).is_none_or(|disk| *disk == path))
        .map(String::as_str)
        .min()
}

/// The IDs the CSI driver's cache holds for `path` whose live volume backs another disk.
pub(super) fn foreign_driver_ids<'a>(
    inputs: &'a PassInputs<'_>,
    live: &HashSet<&str>,
    disk_of: &HashMap<&str, &'a VolumePath>,
    path: &VolumePath,
) -> Vec<(&'a str, &'a VolumePath)> {
    let Some(ids) = inputs.driver_ids.get(path) else {
        return Vec::new();
    };
    ids.iter()
        .filter(|id| live.contains(id.as_str()))
        .filter_map(|id| Some((id.as_str(), *disk_of.get(id.as_str())?)))
        .filter(|(_, disk)| *disk != path)
        .collect()
}

/// Why the status ID `id` of `path` is not this path's CNS volume, if it is not: no live
/// volume has it, or the live volume with it backs another disk. A live volume whose disk
/// is unknown (no backing path, a foreign name, not in the driver's cache) is given the
/// benefit of the doubt.
pub(super) fn wrong_id(
    live: &HashSet<&str>,
    disk_of: &HashMap<&str, &VolumePath>,
    path: &VolumePath,
    id: &str,
) -> Option<WrongId> {
    if !live.contains(id) {
        return Some(WrongId::NotInCns);
    }
    disk_of
        .get(id)
        .filter(|disk| **disk != path)
        .map(|disk| WrongId::OtherDisk((*disk).clone()))
}
