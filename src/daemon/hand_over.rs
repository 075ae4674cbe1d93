//! When volmig may hand the driver syncer's Lease over (`--hold-driver-syncer`, docs/design.md
//! §8.2): every in-tree path a PV names is Registered, and every raw spelling of it maps to
//! that ID in the driver's cache, so the driver's syncer, once it leads, finds every path and
//! registers nothing.

use std::sync::Arc;

use crate::backend::VolumeBackend;
use crate::controller::publish::DriverCache;
use crate::controller::{MigrationCache, PvIndex};
use crate::syncer_lease::HandOverCheck;
use crate::volume_migration::Phase;
use crate::volume_path::VolumePath;

/// What is still missing before the hand-over, counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Missing {
    /// Paths without a Registered VolumeMigration (and ID).
    pub unregistered: usize,
    /// Raw spellings of Registered paths the driver's cache does not map to their ID.
    pub unpublished: usize,
}

/// Whether the driver's cache maps a spelling (`raw`) of a path to an ID.
pub type Published<'a> = &'a dyn Fn(&VolumePath, &str, &str) -> bool;

/// Counts what is missing over `paths` (each with its PVs' raw spellings): `registered`
/// gives a path's ID when its VolumeMigration is Registered, `published` whether the
/// driver maps a spelling to an ID (`None`: publishing is off, nothing to check).
pub fn missing<'a>(
    paths: impl IntoIterator<Item = (&'a VolumePath, &'a [String])>,
    registered: impl Fn(&VolumePath) -> Option<String>,
    published: Option<Published<'_>>,
) -> Missing {
    let mut missing = Missing::default();
    for (path, spellings) in paths {
        let Some(id) = registered(path) else {
            missing.unregistered += 1;
            continue;
        };
        if let Some(published) = published {
            missing.unpublished += spellings
                .iter()
                .filter(|raw| !published(path, raw, &id))
                .count();
        }
    }
    missing
}

/// Why the Lease is never handed over to a vCenter below 7.0 U1.
pub const OLD_VCENTER: &str = "vCenter is older than 7.0 Update 1: its CNS registers a disk a \
     second time as a second volume, and the CSI driver's syncer starts every term with an \
     empty cache and registers what it has not listed yet, so volmig keeps the Lease \
     (docs/design.md §8.2)";

/// The daemon's hand-over check over its caches: not before every cache holds its first
/// list, nor while the driver's CRD (when publishing) is not served, nor to a vCenter that
/// answers a second registration with a second volume (or whose release is not known yet).
pub(super) fn check(
    index: Arc<PvIndex>,
    cache: Arc<MigrationCache>,
    driver: Option<Arc<DriverCache>>,
    backend: Arc<dyn VolumeBackend>,
) -> HandOverCheck {
    Arc::new(move || {
        match backend.refuses_re_registration() {
            Some(true) => {}
            Some(false) => return Err(OLD_VCENTER.to_owned()),
            None => return Err("vCenter's release is not known yet (not connected)".to_owned()),
        }
        if !index.is_synced() || !cache.is_synced() {
            return Err("the PV and VolumeMigration caches are not synced yet".to_owned());
        }
        let driver = driver.as_ref().filter(|d| d.publish);
        if let Some(driver) = driver {
            if !driver.index.is_served() {
                return Err(
                    "the CnsVSphereVolumeMigration CRD is not served: nothing can be published"
                        .to_owned(),
                );
            }
            if !driver.index.is_synced() {
                return Err("the driver's cache objects are not listed yet".to_owned());
            }
        }
        let paths: Vec<(VolumePath, Vec<String>)> = index
            .paths()
            .into_iter()
            .map(|(path, _pvs)| {
                let spellings = index.spellings_for(&path);
                (path, spellings)
            })
            .collect();
        let registered = |path: &VolumePath| {
            let name = path.object_name();
            let vm = cache.get(&name).filter(|_| cache.tracks(&name, path))?;
            let status = vm.status?;
            (status.phase == Some(Phase::Registered))
                .then_some(status.volume_id)
                .flatten()
        };
        let maps = |path: &VolumePath, raw: &str, id: &str| {
            driver.is_some_and(|d| d.index.maps(path, raw, id))
        };
        let published: Option<Published<'_>> = driver.map(|_| &maps as Published<'_>);
        let found = missing(
            paths.iter().map(|(p, s)| (p, s.as_slice())),
            registered,
            published,
        );
        if found == Missing::default() {
            Ok(())
        } else {
            Err(format!(
                "{} of {} paths not Registered, {} spellings not published to the driver's cache",
                found.unregistered,
                paths.len(),
                found.unpublished
            ))
        }
    })
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::backend::memory::InMemoryBackend;

    #[test]
    fn never_to_a_vcenter_that_registers_a_disk_twice() {
        let backend = Arc::new(InMemoryBackend::new());
        let hand_over = |backend: Arc<dyn VolumeBackend>| {
            check(
                Arc::new(PvIndex::default()),
                Arc::new(MigrationCache::default()),
                None,
                backend,
            )()
        };
        backend.set_refuses_re_registration(false);
        assert_eq!(hand_over(backend.clone()), Err(OLD_VCENTER.to_owned()));
        // From 7.0 U1 the other conditions decide (here: nothing listed yet).
        backend.set_refuses_re_registration(true);
        let err = hand_over(backend).unwrap_err();
        assert!(err.contains("not synced"), "{err}");
    }

    fn path(n: u32) -> VolumePath {
        VolumePath::parse(&format!("[ds1] kubevols/disk-{n}.vmdk"))
            .unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn nothing_missing_only_when_every_path_is_registered_and_every_spelling_published() {
        let (a, b) = (path(1), path(2));
        let spellings_a = vec![a.canonical(), "[ds1]  kubevols/disk-1.vmdk".to_owned()];
        let spellings_b = vec![b.canonical()];
        let paths = [(&a, spellings_a.as_slice()), (&b, spellings_b.as_slice())];
        let ids: BTreeMap<VolumePath, String> = [
            (a.clone(), "id-a".to_owned()),
            (b.clone(), "id-b".to_owned()),
        ]
        .into();
        let registered = |p: &VolumePath| ids.get(p).cloned();
        let all = |_: &VolumePath, _: &str, _: &str| true;
        assert_eq!(missing(paths, registered, Some(&all)), Missing::default());

        // One spelling of a maps to another ID in the driver's cache.
        let alias_wrong =
            |p: &VolumePath, raw: &str, id: &str| !(p == &a && raw.contains("  ") && id == "id-a");
        assert_eq!(
            missing(paths, registered, Some(&alias_wrong)),
            Missing {
                unregistered: 0,
                unpublished: 1
            }
        );

        let only_a = |p: &VolumePath| (p == &a).then(|| "id-a".to_owned());
        assert_eq!(
            missing(paths, only_a, Some(&all)),
            Missing {
                unregistered: 1,
                unpublished: 0
            }
        );
        // Publishing off: registration alone counts.
        let none = |_: &VolumePath, _: &str, _: &str| false;
        assert_eq!(missing(paths, registered, None), Missing::default());
        assert_eq!(
            missing(paths, registered, Some(&none)),
            Missing {
                unregistered: 0,
                unpublished: 3
            }
        );
    }
}
