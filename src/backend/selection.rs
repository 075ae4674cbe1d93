//! Which of several CNS volumes for one disk counts (docs/design.md §4.3, §6.3): a rule about
//! volumes, shared by the registrar (adoption) and full sync (duplicates).

use super::CnsVolume;

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
