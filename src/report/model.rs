//! The readiness report as data: joins PVs, VolumeMigrations and the vSphere CSI driver's
//! `CnsVSphereVolumeMigration` objects in hash maps (O(n), no per-PV lookups) and decides,
//! per in-tree PV, whether it is ready for CSI migration (docs/design.md §3.2 and §8).
//!
//! Pure: no I/O. [`super::fetch`] reads the inputs, [`super::render`] prints the result.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde::Serialize;

use super::registrar::Registrar;
use crate::volume_migration::{Phase, VolumeMigration};
use crate::volume_path::VolumePath;

pub use super::advice::action;

pub use super::reason;

/// `--require-driver-cache`: must every Registered path also be published to the driver?
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum DriverCacheRequirement {
    /// Required when the `CnsVSphereVolumeMigration` CRD is served.
    #[default]
    Auto,
    /// Always required (a cluster without the CRD is then not ready).
    On,
    /// Never required, and the driver objects are not read.
    Off,
}

/// A `CnsVSphereVolumeMigration` of the vSphere CSI driver, as far as the report needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DriverObject {
    /// `metadata.name`.
    pub name: String,
    /// `spec.volumepath`: the raw path exactly as a PV spells it.
    pub volume_path: String,
    /// `spec.volumeid`.
    pub volume_id: String,
}

/// What was found of the driver's cache objects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DriverCache {
    /// Not read (`--require-driver-cache=off`).
    NotChecked,
    /// The CRD `cnsvspherevolumemigrations.cns.vmware.com` is not served.
    NotServed,
    /// The CRD is served; these objects exist.
    Served(Vec<DriverObject>),
}

/// An in-tree vSphere PV (one with `spec.vsphereVolume`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InTreePv {
    /// `metadata.name`.
    pub name: String,
    /// `spec.vsphereVolume.volumePath`, as written.
    pub volume_path: String,
}

/// Everything the report is computed from.
#[derive(Debug, Clone)]
pub struct Inputs {
    /// The in-tree vSphere PVs.
    pub pvs: Vec<InTreePv>,
    /// How many other PVs (not in-tree vSphere) were seen and ignored.
    pub other_pvs: usize,
    /// Every VolumeMigration.
    pub migrations: Vec<VolumeMigration>,
    /// The driver's cache objects.
    pub driver: DriverCache,
    /// The pods' inline vSphere volumes.
    pub inline: InlineVolumes,
}

/// What was found of the pods' inline vSphere volumes (`spec.volumes[].vsphereVolume`,
/// docs/design.md §8.9): each is a row like a PV, named `pod/<namespace>/<pod>/<volume>`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum InlineVolumes {
    /// Every pod was read; these are the inline volumes (`name` is the pod user key).
    Read(Vec<InTreePv>),
    /// Pods could not be listed (no RBAC for it): inline volumes are not in the report.
    Unreadable(String),
    /// Not read (tests that leave pods out).
    #[default]
    NotChecked,
}

/// One in-tree PV (or inline pod volume) and its readiness.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Row {
    /// PV name, or `pod/<namespace>/<pod>/<volume>` for an inline pod volume.
    pub pv: String,
    /// The raw `spec.vsphereVolume.volumePath`.
    pub volume_path: String,
    /// The canonical path; `None` when the raw path does not parse.
    pub canonical_path: Option<String>,
    /// Why the raw path does not parse.
    pub path_error: Option<String>,
    /// Name of the VolumeMigration of the canonical path (whether it exists or not).
    pub volume_migration: Option<String>,
    /// The VolumeMigration's phase.
    pub phase: Option<Phase>,
    /// The published CNS volume ID.
    #[serde(rename = "volumeID")]
    pub volume_id: Option<String>,
    /// Whether a driver object maps this raw path to this volume ID (`None`: not known,
    /// because the driver cache was not read or its CRD is not served).
    pub driver_object: Option<bool>,
    /// `status.lastError.reason`, or a derived reason (see [`reason`]).
    pub reason: Option<String>,
    /// Detail for a human.
    pub message: String,
    /// Registered (and published, when required).
    pub ready: bool,
}

/// What the report knows about inline pod volumes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InlineSummary {
    /// Inline vSphere volumes of pods (one row each).
    pub count: usize,
    /// Why pods could not be read (then `count` is 0 and they are not in the verdict).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unreadable: Option<String>,
}

/// Counts of PVs seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PvCounts {
    /// Every PV.
    pub total: usize,
    /// In-tree vSphere PVs (one row each).
    pub in_tree: usize,
    /// Other PVs, ignored.
    pub ignored: usize,
}

/// What the report knows about the driver's cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DriverCacheSummary {
    /// Whether the CRD is served (`None`: not checked).
    pub served: Option<bool>,
    /// Whether publication is required for readiness.
    pub required: bool,
    /// How many driver objects exist.
    pub objects: usize,
}

/// Totals over all rows.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Totals {
    /// Rows by phase; rows without a phase count under [`NO_PHASE`].
    pub by_phase: BTreeMap<String, usize>,
    /// Rows by reason; rows without a reason are not counted.
    pub by_reason: BTreeMap<String, usize>,
}

/// The phase label of rows with no VolumeMigration (or an invalid path).
pub const NO_PHASE: &str = "<none>";

/// What to do about one reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Advice {
    /// The reason.
    pub reason: String,
    /// Rows with this reason.
    pub count: usize,
    /// Of those, rows that are not ready.
    pub blocking: usize,
    /// What to do.
    pub action: String,
}

/// The whole report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// Every in-tree PV and inline pod volume is Registered (and published when required).
    pub ready: bool,
    /// PVs seen.
    pub persistent_volumes: PvCounts,
    /// Inline pod volumes seen.
    pub inline_pod_volumes: InlineSummary,
    /// VolumeMigrations seen.
    pub volume_migrations: usize,
    /// Driver cache.
    pub driver_cache: DriverCacheSummary,
    /// Rows that are not ready.
    pub not_ready: usize,
    /// Totals by phase and by reason.
    pub totals: Totals,
    /// One entry per reason present, in reason order.
    pub advice: Vec<Advice>,
    /// Who registers in-tree vmdks (`None`: the driver's syncer Lease was not read).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub registrar: Option<Registrar>,
    /// One row per in-tree PV and per inline pod volume, sorted by name.
    pub rows: Vec<Row>,
}

/// The Phase a VolumeMigration is in, as a label.
pub fn phase_label(phase: Option<Phase>) -> &'static str {
    phase.map_or(NO_PHASE, Phase::as_str)
}

/// Builds the report. `requirement` says whether publication to the driver counts.
pub fn build(inputs: &Inputs, requirement: DriverCacheRequirement) -> Report {
    let served = match &inputs.driver {
        DriverCache::NotChecked => None,
        DriverCache::NotServed => Some(false),
        DriverCache::Served(_) => Some(true),
    };
    let required = match requirement {
        DriverCacheRequirement::On => true,
        DriverCacheRequirement::Off => false,
        DriverCacheRequirement::Auto => served == Some(true),
    };
    let objects: &[DriverObject] = match &inputs.driver {
        DriverCache::Served(objects) => objects,
        DriverCache::NotChecked | DriverCache::NotServed => &[],
    };
    // raw path -> driver objects for it (usually one)
    let mut driver_by_path: HashMap<&str, Vec<&DriverObject>> =
        HashMap::with_capacity(objects.len());
    for object in objects {
        driver_by_path
            .entry(object.volume_path.as_str())
            .or_default()
            .push(object);
    }
    let migrations: HashMap<&str, &VolumeMigration> = inputs
        .migrations
        .iter()
        .filter_map(|vm| vm.metadata.name.as_deref().map(|name| (name, vm)))
        .collect();
    let context = Context {
        pv_spellings: inputs.pvs.iter().map(|p| p.volume_path.as_str()).collect(),
        served,
        required,
        driver_by_path,
        migrations,
    };

    let inline: &[InTreePv] = match &inputs.inline {
        InlineVolumes::Read(volumes) => volumes,
        InlineVolumes::Unreadable(_) | InlineVolumes::NotChecked => &[],
    };
    let mut rows: Vec<Row> = inputs
        .pvs
        .iter()
        .chain(inline)
        .map(|pv| context.row(pv))
        .collect();
    rows.sort_by(|a, b| a.pv.cmp(&b.pv));

    let mut totals = Totals::default();
    let mut advice: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for row in &rows {
        *totals
            .by_phase
            .entry(phase_label(row.phase).to_owned())
            .or_default() += 1;
        if let Some(reason) = &row.reason {
            *totals.by_reason.entry(reason.clone()).or_default() += 1;
            let entry = advice.entry(reason.clone()).or_default();
            entry.0 += 1;
            if !row.ready {
                entry.1 += 1;
            }
        }
    }
    let not_ready = rows.iter().filter(|r| !r.ready).count();
    Report {
        ready: not_ready == 0,
        persistent_volumes: PvCounts {
            total: inputs.pvs.len() + inputs.other_pvs,
            in_tree: inputs.pvs.len(),
            ignored: inputs.other_pvs,
        },
        inline_pod_volumes: InlineSummary {
            count: inline.len(),
            unreadable: match &inputs.inline {
                InlineVolumes::Unreadable(why) => Some(why.clone()),
                InlineVolumes::Read(_) | InlineVolumes::NotChecked => None,
            },
        },
        volume_migrations: inputs.migrations.len(),
        driver_cache: DriverCacheSummary {
            served,
            required,
            objects: objects.len(),
        },
        not_ready,
        totals,
        advice: advice
            .into_iter()
            .map(|(reason, (count, blocking))| Advice {
                action: action(&reason).to_owned(),
                reason,
                count,
                blocking,
            })
            .collect(),
        registrar: None,
        rows,
    }
}

struct Context<'a> {
    /// Raw paths some PV (not a pod) spells: the driver's clean-up keeps their objects.
    pv_spellings: HashSet<&'a str>,
    served: Option<bool>,
    required: bool,
    driver_by_path: HashMap<&'a str, Vec<&'a DriverObject>>,
    migrations: HashMap<&'a str, &'a VolumeMigration>,
}

impl Context<'_> {
    fn row(&self, pv: &InTreePv) -> Row {
        let mut row = Row {
            pv: pv.name.clone(),
            volume_path: pv.volume_path.clone(),
            canonical_path: None,
            path_error: None,
            volume_migration: None,
            phase: None,
            volume_id: None,
            driver_object: None,
            reason: None,
            message: String::new(),
            ready: false,
        };
        let path = match VolumePath::parse(&pv.volume_path) {
            Ok(path) => path,
            Err(e) => {
                row.path_error = Some(e.to_string());
                row.reason = Some(reason::INVALID_VOLUME_PATH.into());
                row.message = e.to_string();
                return row;
            }
        };
        let name = path.object_name();
        row.canonical_path = Some(path.canonical());
        row.volume_migration = Some(name.clone());
        let Some(vm) = self.migrations.get(name.as_str()) else {
            row.reason = Some(reason::NO_VOLUME_MIGRATION.into());
            row.message = format!("no VolumeMigration {name}");
            return row;
        };
        if VolumePath::parse(&vm.spec.volume_path).as_ref() != Ok(&path) {
            row.reason = Some(reason::NAME_COLLISION.into());
            row.message = format!(
                "VolumeMigration {name} tracks {:?}, not this path",
                vm.spec.volume_path
            );
            return row;
        }

        let status = vm.status.clone().unwrap_or_default();
        row.phase = status.phase;
        row.volume_id = status.volume_id.clone();
        let deleting = vm.metadata.deletion_timestamp.is_some();
        let registered =
            status.phase == Some(Phase::Registered) && status.volume_id.is_some() && !deleting;

        let published = match (self.served, &status.volume_id) {
            (Some(true), Some(id)) => Some(self.published(&pv.volume_path, id)),
            (Some(true), None) => Some(false),
            _ => None,
        };
        row.driver_object = published;
        row.ready = registered && (!self.required || published == Some(true));

        let duplicates = status.duplicate_volume_ids.unwrap_or_default();
        if let Some(error) = status.last_error {
            row.reason = Some(error.reason);
            row.message = error.message;
        } else if !registered {
            row.reason = Some(reason::NOT_REGISTERED_YET.into());
            row.message = if deleting {
                format!("VolumeMigration {name} is being deleted")
            } else if status.phase == Some(Phase::Registered) {
                "phase Registered but no volume ID".to_owned()
            } else {
                format!("phase {}", phase_label(status.phase))
            };
        } else if self.required && published != Some(true) {
            row.reason = Some(reason::NOT_PUBLISHED.into());
            row.message = self.not_published_message(&pv.volume_path, &status.volume_id);
        } else if !duplicates.is_empty() {
            row.reason = Some(reason::DUPLICATE_VOLUMES.into());
            row.message = format!("other CNS volumes for this disk: {}", duplicates.join(", "));
        } else if let (Some(true), Some(id)) = (published, &status.volume_id)
            && !self.survives_cleanup(&pv.volume_path, id)
        {
            row.reason = Some(reason::CLEANED_UP_BY_DRIVER.into());
            row.message = format!(
                "no PV spells {:?} and no object named {id} carries it: the driver's stale \
                 clean-up deletes its object every cycle",
                pv.volume_path
            );
        }
        row
    }

    /// Whether the driver's stale clean-up (`cleanupStaleCRDInstances`) keeps the object of
    /// spelling `raw`: a PV spells it, or an object named by the volume ID carries it.
    fn survives_cleanup(&self, raw: &str, id: &str) -> bool {
        self.pv_spellings.contains(raw)
            || self
                .driver_by_path
                .get(raw)
                .is_some_and(|objects| objects.iter().any(|o| o.name == id))
    }

    fn published(&self, raw: &str, id: &str) -> bool {
        self.driver_by_path
            .get(raw)
            .is_some_and(|objects| objects.iter().any(|o| o.volume_id == id))
    }

    fn not_published_message(&self, raw: &str, id: &Option<String>) -> String {
        let id = id.as_deref().unwrap_or_default();
        if self.served != Some(true) {
            return "the CnsVSphereVolumeMigration CRD is not served, so nothing is published"
                .to_owned();
        }
        match self.driver_by_path.get(raw) {
            Some(others) => {
                let held: Vec<String> = others
                    .iter()
                    .map(|o| format!("{} holds {}", o.name, o.volume_id))
                    .collect();
                format!(
                    "driver object for {raw:?} maps it to another volume ID ({}), not {id}",
                    held.join(", ")
                )
            }
            None => {
                format!("no CnsVSphereVolumeMigration with volumepath {raw:?} and volumeid {id}")
            }
        }
    }
}

#[cfg(test)]
#[path = "model_tests/mod.rs"]
mod tests;
