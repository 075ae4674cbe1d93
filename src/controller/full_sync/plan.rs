//! The full-sync join (docs/design.md §6) as a pure function: PVs × VolumeMigrations × CNS
//! volumes, joined by canonical path in hash maps (O(n)), to a list of repairs.

use std::collections::{HashMap, HashSet};

use crate::backend::CnsVolume;
use crate::backend::selection::oldest;
use crate::volume_migration::Phase;
use crate::volume_path::{CNS_NAME_PREFIX, VolumePath};

/// What full sync needs of one VolumeMigration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigrationRecord {
    /// Object name.
    pub name: String,
    /// Its `resourceVersion` (writes decided from this record are conditional on it).
    pub version: Option<String>,
    /// The spec path, when valid and the object is named after it.
    pub path: Option<VolumePath>,
    /// Status phase.
    pub phase: Option<Phase>,
    /// Status volume ID.
    pub volume_id: Option<String>,
    /// Status PV list.
    pub pvs: Vec<String>,
    /// Status duplicate IDs.
    pub duplicates: Vec<String>,
    /// The disk is known to be protected from VM deletion.
    pub protected: bool,
    /// True when a deletion is in progress.
    pub deleting: bool,
}

/// One repair of a pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Repair {
    /// A PV uses a path that has no VolumeMigration.
    CreateMigration(VolumePath),
    /// A used path is not registered (failed, pending or interrupted): register now.
    Retry(VolumePath),
    /// A Registered path whose volume ID is gone from CNS.
    ReRegister {
        /// The path.
        path: VolumePath,
        /// The ID CNS no longer has.
        missing_id: String,
    },
    /// The status PV list is stale.
    SetPvs {
        /// Object name.
        name: String,
        /// The PVs that use the path now.
        pvs: Vec<String>,
        /// The version the list was decided on.
        version: Option<String>,
    },
    /// Two or more CNS volumes for one disk.
    Duplicates {
        /// Object name.
        name: String,
        /// The path.
        path: VolumePath,
        /// The volume kept (the one in status, else the oldest).
        keep: String,
        /// The others.
        others: Vec<String>,
    },
    /// The CSI driver's cache maps the path to another live volume than the status: the
    /// driver's ID wins (pods may be attached with it, docs/design.md §8.2).
    AdoptDriverId {
        /// The path.
        path: VolumePath,
        /// The ID the driver's cache holds.
        driver_id: String,
        /// The ID the status holds (then listed as a duplicate).
        replaced: String,
    },
    /// A Registered status whose volume ID is not this path's CNS volume (gone from CNS,
    /// garbage, or the volume of another disk — e.g. `status.volumeID` edited by hand)
    /// while CNS does hold a volume of this path: restore that one (never create).
    RepairVolumeId {
        /// Object name.
        name: String,
        /// The path.
        path: VolumePath,
        /// The ID the status holds.
        wrong: String,
        /// Why it is wrong.
        why: WrongId,
        /// This path's CNS volume (found by volmig's name, backing path or the driver's
        /// cache).
        right: String,
        /// The version the repair was decided on (the write is conditional on it).
        version: Option<String>,
    },
    /// A Registered status holding the CNS volume of another disk while CNS has no volume
    /// of this path: register this path (adopt-before-create); the other disk's volume is
    /// left alone.
    ReRegisterForeign {
        /// The path.
        path: VolumePath,
        /// The other disk's ID the status holds.
        wrong: String,
        /// The disk that ID belongs to.
        owner: VolumePath,
    },
    /// A Registered volume whose disk is not known to be protected from VM deletion.
    Protect {
        /// The path.
        path: VolumePath,
        /// The stored volume ID.
        volume_id: String,
    },
    /// No PV for two consecutive passes: run the deletion flow.
    DeleteMigration {
        /// Object name.
        name: String,
        /// The path.
        path: VolumePath,
    },
    /// The CSI driver's cache maps the path to a live volume of another disk (a hand-made
    /// or stale object): never adopted; reported.
    ForeignDriverId {
        /// The path.
        path: VolumePath,
        /// The ID the driver's object holds.
        driver_id: String,
        /// The disk that volume backs.
        other_disk: VolumePath,
    },
    /// A volmig-named CNS volume of this cluster alone that nothing references.
    Orphan {
        /// CNS volume ID.
        id: String,
        /// Its backing disk, when CNS reports one.
        path: Option<VolumePath>,
        /// Unregister it (`--gc-orphans`).
        collect: bool,
    },
}

impl Repair {
    /// The path the repair is about, when it names one.
    pub fn path(&self) -> Option<&VolumePath> {
        match self {
            Repair::CreateMigration(path) | Repair::Retry(path) => Some(path),
            Repair::ReRegister { path, .. }
            | Repair::RepairVolumeId { path, .. }
            | Repair::ReRegisterForeign { path, .. }
            | Repair::Duplicates { path, .. }
            | Repair::AdoptDriverId { path, .. }
            | Repair::Protect { path, .. }
            | Repair::ForeignDriverId { path, .. }
            | Repair::DeleteMigration { path, .. } => Some(path),
            Repair::Orphan { path, .. } => path.as_ref(),
            Repair::SetPvs { .. } => None,
        }
    }

    /// A short name of the repair, for spans and logs.
    pub fn kind(&self) -> &'static str {
        match self {
            Repair::CreateMigration(_) => "create_migration",
            Repair::Retry(_) => "retry",
            Repair::ReRegister { .. } => "reregister",
            Repair::RepairVolumeId { .. } => "repair_volume_id",
            Repair::ReRegisterForeign { .. } => "reregister_foreign",
            Repair::SetPvs { .. } => "set_pvs",
            Repair::Duplicates { .. } => "duplicates",
            Repair::AdoptDriverId { .. } => "adopt_driver_id",
            Repair::Protect { .. } => "protect",
            Repair::DeleteMigration { .. } => "delete_migration",
            Repair::ForeignDriverId { .. } => "foreign_driver_id",
            Repair::Orphan { .. } => "orphan",
        }
    }
}

/// Why a status volume ID is not the path's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WrongId {
    /// No CNS volume has that ID.
    NotInCns,
    /// The CNS volume with that ID backs another disk.
    OtherDisk(VolumePath),
}

impl std::fmt::Display for WrongId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WrongId::NotInCns => f.write_str("no CNS volume has that ID"),
            WrongId::OtherDisk(other) => write!(f, "that CNS volume backs {other}"),
        }
    }
}

/// The outcome of planning one pass.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct PassPlan {
    /// Repairs to make, in a stable order.
    pub repairs: Vec<Repair>,
    /// Paths with a VolumeMigration but no PV in this pass (first strike).
    pub absent: HashSet<VolumePath>,
    /// Number of disks with duplicate CNS volumes.
    pub duplicate_disks: usize,
    /// Number of orphaned volmig volumes.
    pub orphans: usize,
}

/// Inputs of one pass.
pub struct PassInputs<'a> {
    /// PVs by path (names sorted).
    pub pvs: &'a HashMap<VolumePath, Vec<String>>,
    /// Every VolumeMigration.
    pub migrations: &'a [MigrationRecord],
    /// Every CNS volume.
    pub volumes: &'a [CnsVolume],
    /// Paths found without PV by the previous pass.
    pub absent_before: &'a HashSet<VolumePath>,
    /// `--gc-orphans`.
    pub gc_orphans: bool,
    /// This cluster's CNS container-cluster ID (`--cluster-id`): only volumes of this
    /// cluster alone can be its orphans.
    pub cluster_id: &'a str,
    /// IDs the CSI driver's cache holds, by canonical path.
    pub driver_ids: &'a HashMap<VolumePath, Vec<String>>,
    /// Volume IDs the CSI driver's PVs and VolumeAttachments use: never orphans
    /// (docs/design.md §5.1).
    pub in_use: &'a HashSet<String>,
}

#[path = "plan_ids.rs"]
mod ids;
use ids::{foreign_driver_ids, live_driver_id, wrong_id};

/// Whether the metadata of `volume` names `cluster_id` and no other cluster. Volume names
/// carry no cluster ID and the listing holds every CNS volume of the vCenter: a volume
/// without cluster metadata, of another cluster or shared with one is never this
/// cluster's orphan (docs/design.md §6.4).
fn of_this_cluster_alone(volume: &CnsVolume, cluster_id: &str) -> bool {
    !volume.cluster_ids.is_empty() && volume.cluster_ids.iter().all(|c| c == cluster_id)
}

fn oldest_of(volumes: &[&CnsVolume]) -> Option<String> {
    let owned: Vec<CnsVolume> = volumes.iter().map(|v| (*v).clone()).collect();
    oldest(&owned).map(|v| v.id.0.clone())
}

/// Plans one pass.
pub fn plan(inputs: &PassInputs<'_>) -> PassPlan {
    let mut out = PassPlan::default();
    let by_path: HashMap<&VolumePath, &MigrationRecord> = inputs
        .migrations
        .iter()
        .filter_map(|m| m.path.as_ref().map(|p| (p, m)))
        .collect();
    // Volumes of one disk: same backing path, or volmig's name for the path (some vCenter
    // versions report no backing path; two volumes carrying one volmig name are
    // duplicates by construction).
    let by_cns_name: HashMap<String, &VolumePath> =
        by_path.keys().map(|p| (p.cns_volume_name(), *p)).collect();
    let driver_path: HashMap<&str, &VolumePath> = inputs
        .driver_ids
        .iter()
        .flat_map(|(p, ids)| ids.iter().map(move |id| (id.as_str(), p)))
        .collect();
    let mut volumes_by_path: HashMap<&VolumePath, Vec<&CnsVolume>> = HashMap::new();
    let mut live_ids: HashSet<&str> = HashSet::with_capacity(inputs.volumes.len());
    // The disk of each live volume, when known.
    let mut disk_of: HashMap<&str, &VolumePath> = HashMap::with_capacity(inputs.volumes.len());
    for v in inputs.volumes {
        live_ids.insert(&v.id.0);
        let disk = v
            .backing_path
            .as_ref()
            .or_else(|| by_cns_name.get(&v.name).copied())
            .or_else(|| driver_path.get(v.id.0.as_str()).copied());
        if let Some(p) = disk {
            volumes_by_path.entry(p).or_default().push(v);
            disk_of.insert(&v.id.0, p);
        }
    }

    // Repairs come out in a stable order (logs and tests): by path, then by object name,
    // then orphans by ID. Sorting the few repairs, not the 100,000 inputs, keeps a steady
    // pass cheap.
    let mut by_pv_path: Vec<(&VolumePath, Repair)> = Vec::new();
    for (path, pvs) in inputs.pvs {
        let mut push = |repair| by_pv_path.push((path, repair));
        let Some(m) = by_path.get(path) else {
            push(Repair::CreateMigration(path.clone()));
            continue;
        };
        if m.deleting {
            continue;
        }
        // The count beyond the listed names is kept by the reconciler (it sees every PV
        // change); a pass compares what it can see in the record.
        if m.pvs != crate::volume_migration::status_pv_names(pvs) {
            push(Repair::SetPvs {
                name: m.name.clone(),
                pvs: pvs.clone(),
                version: m.version.clone(),
            });
        }
        let wrong = match (&m.phase, &m.volume_id) {
            (Some(Phase::Registered), Some(id)) => wrong_id(&live_ids, &disk_of, path, id),
            _ => None,
        };
        match (&m.phase, &m.volume_id) {
            (Some(Phase::Registered), Some(id)) if wrong.is_some() => {
                let own = volumes_by_path.get(path).map(Vec::as_slice).unwrap_or(&[]);
                let right = live_driver_id(inputs, &live_ids, &disk_of, path)
                    .filter(|d| own.iter().any(|v| v.id.0 == *d))
                    .map(str::to_owned)
                    .or_else(|| oldest_of(own));
                push(match (right, wrong) {
                    (Some(right), Some(why)) => Repair::RepairVolumeId {
                        name: m.name.clone(),
                        path: path.clone(),
                        wrong: id.clone(),
                        why,
                        right,
                        version: m.version.clone(),
                    },
                    (None, Some(WrongId::OtherDisk(owner))) => Repair::ReRegisterForeign {
                        path: path.clone(),
                        wrong: id.clone(),
                        owner,
                    },
                    _ => Repair::ReRegister {
                        path: path.clone(),
                        missing_id: id.clone(),
                    },
                });
            }
            (Some(Phase::Registered), Some(id)) => {
                if let Some(driver_id) = live_driver_id(inputs, &live_ids, &disk_of, path)
                    && driver_id != id
                {
                    push(Repair::AdoptDriverId {
                        path: path.clone(),
                        driver_id: driver_id.to_owned(),
                        replaced: id.clone(),
                    });
                } else if !m.protected {
                    push(Repair::Protect {
                        path: path.clone(),
                        volume_id: id.clone(),
                    });
                }
            }
            _ => push(Repair::Retry(path.clone())),
        }
        for (driver_id, other) in foreign_driver_ids(inputs, &live_ids, &disk_of, path) {
            push(Repair::ForeignDriverId {
                path: path.clone(),
                driver_id: driver_id.to_owned(),
                other_disk: other.clone(),
            });
        }
    }
    by_pv_path.sort_by(|a, b| a.0.cmp(b.0));
    out.repairs
        .extend(by_pv_path.into_iter().map(|(_, repair)| repair));

    let mut by_name: Vec<(&str, Repair)> = Vec::new();
    for m in inputs.migrations {
        let Some(path) = &m.path else { continue };
        if let Some(volumes) = volumes_by_path.get(path)
            && volumes.len() >= 2
        {
            out.duplicate_disks += 1;
            let owned: Vec<CnsVolume> = volumes.iter().map(|v| (*v).clone()).collect();
            // The driver's ID wins, then the one in status, then the oldest.
            let keep = live_driver_id(inputs, &live_ids, &disk_of, path)
                .map(str::to_owned)
                .or_else(|| {
                    m.volume_id
                        .clone()
                        .filter(|id| owned.iter().any(|v| v.id.0 == *id))
                })
                .or_else(|| oldest(&owned).map(|v| v.id.0.clone()))
                .unwrap_or_default();
            let mut others: Vec<String> = owned
                .iter()
                .map(|v| v.id.0.clone())
                .filter(|id| *id != keep)
                .collect();
            others.sort();
            if others != m.duplicates {
                by_name.push((
                    &m.name,
                    Repair::Duplicates {
                        name: m.name.clone(),
                        path: path.clone(),
                        keep,
                        others,
                    },
                ));
            }
        }
        if inputs.pvs.contains_key(path) || m.deleting {
            continue;
        }
        if inputs.absent_before.contains(path) {
            by_name.push((
                &m.name,
                Repair::DeleteMigration {
                    name: m.name.clone(),
                    path: path.clone(),
                },
            ));
        } else {
            out.absent.insert(path.clone());
        }
    }
    by_name.sort_by(|a, b| a.0.cmp(b.0));
    out.repairs
        .extend(by_name.into_iter().map(|(_, repair)| repair));

    // Names of paths in use: every migration's (already in `by_cns_name`) and those of
    // PVs without a migration yet.
    let unmigrated_names: HashSet<String> = inputs
        .pvs
        .keys()
        .filter(|p| !by_path.contains_key(p))
        .map(VolumePath::cns_volume_name)
        .collect();
    let known = |name: &String| by_cns_name.contains_key(name) || unmigrated_names.contains(name);
    let mut orphans: Vec<&CnsVolume> = inputs
        .volumes
        .iter()
        .filter(|v| {
            v.name.starts_with(CNS_NAME_PREFIX)
                && of_this_cluster_alone(v, inputs.cluster_id)
                && !known(&v.name)
                && !inputs.in_use.contains(&v.id.0)
        })
        .collect();
    orphans.sort_unstable_by(|a, b| a.id.cmp(&b.id));
    out.orphans = orphans.len();
    out.repairs
        .extend(orphans.into_iter().map(|v| Repair::Orphan {
            id: v.id.0.clone(),
            path: v.backing_path.clone(),
            collect: inputs.gc_orphans,
        }));
    out
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;
