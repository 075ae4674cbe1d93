//! One cached VolumeMigration in the fewest bytes that still give back exactly the object
//! `strip_for_cache` leaves: identifiers that are UUIDs or decimal numbers are kept as
//! 16-byte values instead of strings, the usual finalizer is a flag, and the fields a
//! Registered object never has sit behind one optional box.

use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::ObjectMeta;

use crate::compact_text::CompactText as Token;
use crate::controller::full_sync::MigrationRecord;
use crate::path_intern;
use crate::volume_migration::{
    FINALIZER, LastError, Phase, RegisteringTask, VolumeMigration, VolumeMigrationSpec,
    VolumeMigrationStatus,
};
use crate::volume_path::VolumePath;

fn token(text: Option<&String>) -> Option<Token> {
    text.map(|t| Token::new(t))
}

fn spell(token: Option<&Token>) -> Option<String> {
    token.map(Token::to_string)
}

/// The spec path. Every object volmig creates spells it canonically and is named after it:
/// those share the process's one copy of the path (`path_intern`) and need no parse or
/// digest to be joined with PVs; any other object keeps its text.
#[derive(Debug)]
pub(super) enum SpecPath {
    Named(SharedPath),
    Other(Box<str>),
}

impl SpecPath {
    fn new(raw: &str, name: &str) -> Self {
        match VolumePath::parse(raw) {
            Ok(path) if path.as_str() == raw && path.object_name() == name => {
                Self::Named(SharedPath(Some(path_intern::intern(path))))
            }
            _ => Self::Other(raw.into()),
        }
    }

    fn text(&self) -> &str {
        match self {
            Self::Named(path) => path.get().map_or("", |p| p.as_str()),
            Self::Other(raw) => raw,
        }
    }

    /// The path, when valid and the object `name` is named after it.
    fn named_path(&self, name: &str) -> Option<VolumePath> {
        match self {
            Self::Named(path) => path.get().map(|p| VolumePath::clone(p)),
            Self::Other(raw) => VolumePath::parse(raw)
                .ok()
                .filter(|p| p.object_name() == name),
        }
    }

    /// The name of objects named after this path, when the object is.
    fn named_after(&self) -> Option<String> {
        match self {
            Self::Named(path) => path.get().map(|p| p.object_name()),
            Self::Other(_) => None,
        }
    }

    /// The spec path canonicalizes to `path`.
    pub(super) fn tracks(&self, path: &VolumePath) -> bool {
        match self {
            Self::Named(shared) => shared.get().is_some_and(|p| **p == *path),
            Self::Other(raw) => VolumePath::parse(raw).is_ok_and(|p| p == *path),
        }
    }
}

/// An interned path, given back to the interner when dropped.
#[derive(Debug)]
pub(super) struct SharedPath(Option<Arc<VolumePath>>);

impl SharedPath {
    fn get(&self) -> Option<&Arc<VolumePath>> {
        self.0.as_ref()
    }
}

impl Drop for SharedPath {
    fn drop(&mut self) {
        if let Some(path) = self.0.take() {
            path_intern::release(path);
        }
    }
}

/// `status.persistentVolumes` as written (order and repeats kept): one name inline, the
/// usual case, or a list.
#[derive(Debug)]
enum PvNames {
    One(Token),
    Many(Box<[Token]>),
}

impl PvNames {
    fn new(pvs: &[String]) -> Self {
        match pvs {
            [one] => Self::One(Token::new(one)),
            many => Self::Many(many.iter().map(|pv| Token::new(pv)).collect()),
        }
    }

    fn spell(&self) -> Vec<String> {
        match self {
            Self::One(pv) => vec![pv.to_string()],
            Self::Many(pvs) => pvs.iter().map(Token::to_string).collect(),
        }
    }
}

/// What few objects have: kept out of line so that a Registered object does not pay for it.
#[derive(Debug, Clone, PartialEq, Default)]
struct Rare {
    namespace: Option<String>,
    /// Finalizers, when not exactly volmig's one.
    finalizers: Option<Vec<String>>,
    deletion_timestamp: Option<Time>,
    deletion_grace_period_seconds: Option<i64>,
    storage_policy_name: Option<String>,
    last_error: Option<LastError>,
    next_retry_time: Option<Time>,
    duplicate_volume_ids: Option<Vec<String>>,
    registering_token: Option<String>,
    registering_task: Option<RegisteringTask>,
    /// The numbers, when one of them does not fit [`Numbers`].
    wide_numbers: Option<WideNumbers>,
    /// The status is present but empty of everything kept inline.
    empty_status: bool,
}

/// `metadata.generation`, `status.persistentVolumeCount`, `status.attempts`,
/// `status.observedGeneration` and `status.registeredTime`, as the API server sent them.
#[derive(Debug, Clone, PartialEq, Default)]
struct WideNumbers {
    generation: Option<i64>,
    pv_count: Option<u64>,
    attempts: Option<u32>,
    observed_generation: Option<i64>,
    registered_time: Option<Time>,
}

/// [`WideNumbers`] in 32 bytes: every count as 4 bytes and the time as whole seconds, with
/// a presence bit each. Objects whose numbers do not fit keep them in [`Rare`].
#[derive(Debug, Clone, Copy, PartialEq, Default)]
struct Numbers {
    registered_second: i64,
    counts: [u32; 4],
    present: u8,
}

impl Numbers {
    const TIME: u8 = 1 << 4;

    fn pack(wide: &WideNumbers) -> Option<Self> {
        let mut numbers = Self::default();
        let counts = [
            wide.generation.map(u32::try_from),
            wide.pv_count.map(u32::try_from),
            wide.attempts.map(Ok),
            wide.observed_generation.map(u32::try_from),
        ];
        for (i, count) in counts.into_iter().enumerate() {
            if let Some(count) = count {
                numbers.counts[i] = count.ok()?;
                numbers.present |= 1 << i;
            }
        }
        if let Some(time) = &wide.registered_time {
            if time.0.subsec_nanosecond() != 0 {
                return None;
            }
            numbers.registered_second = time.0.as_second();
            numbers.present |= Self::TIME;
        }
        Some(numbers)
    }

    fn count(&self, i: usize) -> Option<u32> {
        (self.present & (1 << i) != 0).then_some(self.counts[i])
    }

    fn unpack(&self) -> WideNumbers {
        WideNumbers {
            generation: self.count(0).map(i64::from),
            pv_count: self.count(1).map(u64::from),
            attempts: self.count(2),
            observed_generation: self.count(3).map(i64::from),
            registered_time: (self.present & Self::TIME != 0)
                .then(|| jiff::Timestamp::from_second(self.registered_second).ok())
                .flatten()
                .map(Time),
        }
    }
}

/// The compact form of one stripped VolumeMigration (its name is the cache's key).
#[derive(Debug)]
pub(super) struct CompactMigration {
    uid: Option<Token>,
    resource_version: Option<Token>,
    pub(super) spec_path: SpecPath,
    /// Finalizers are exactly `[FINALIZER]`.
    ours_only: bool,
    phase: Option<Phase>,
    volume_id: Option<Token>,
    disk_uuid: Option<Token>,
    pvs: Option<PvNames>,
    numbers: Numbers,
    protected: Option<bool>,
    rare: Option<Box<Rare>>,
}

impl CompactMigration {
    /// Keeps what `strip_for_cache` keeps of `vm` (conditions, labels, annotations,
    /// managedFields and the like are dropped).
    pub(super) fn new(vm: &VolumeMigration) -> Self {
        let meta = &vm.metadata;
        let name = meta.name.as_deref().unwrap_or_default();
        let status = vm.status.as_ref();
        let ours_only = meta
            .finalizers
            .as_ref()
            .is_some_and(|f| f.len() == 1 && f[0] == FINALIZER);
        let inline_status_empty = status.is_some_and(|s| {
            s.phase.is_none()
                && s.volume_id.is_none()
                && s.disk_uuid.is_none()
                && s.persistent_volumes.is_none()
                && s.persistent_volume_count.is_none()
                && s.attempts.is_none()
                && s.registered_time.is_none()
                && s.protected_from_vm_delete.is_none()
                && s.observed_generation.is_none()
        });
        let rare = Rare {
            namespace: meta.namespace.clone(),
            finalizers: if ours_only {
                None
            } else {
                meta.finalizers.clone()
            },
            deletion_timestamp: meta.deletion_timestamp.clone(),
            deletion_grace_period_seconds: meta.deletion_grace_period_seconds,
            storage_policy_name: vm.spec.storage_policy_name.clone(),
            last_error: status.and_then(|s| s.last_error.clone()),
            next_retry_time: status.and_then(|s| s.next_retry_time.clone()),
            duplicate_volume_ids: status.and_then(|s| s.duplicate_volume_ids.clone()),
            registering_token: status.and_then(|s| s.registering_token.clone()),
            registering_task: status.and_then(|s| s.registering_task.clone()),
            empty_status: inline_status_empty,
            wide_numbers: None,
        };
        let wide = WideNumbers {
            generation: meta.generation,
            pv_count: status.and_then(|s| s.persistent_volume_count),
            attempts: status.and_then(|s| s.attempts),
            observed_generation: status.and_then(|s| s.observed_generation),
            registered_time: status.and_then(|s| s.registered_time.clone()),
        };
        let (numbers, rare) = match Numbers::pack(&wide) {
            Some(numbers) => (numbers, rare),
            None => (
                Numbers::default(),
                Rare {
                    wide_numbers: Some(wide),
                    ..rare
                },
            ),
        };
        Self {
            uid: token(meta.uid.as_ref()),
            resource_version: token(meta.resource_version.as_ref()),
            spec_path: SpecPath::new(&vm.spec.volume_path, name),
            ours_only,
            phase: status.and_then(|s| s.phase),
            volume_id: token(status.and_then(|s| s.volume_id.as_ref())),
            disk_uuid: token(status.and_then(|s| s.disk_uuid.as_ref())),
            pvs: status.and_then(|s| s.persistent_volumes.as_ref().map(|pvs| PvNames::new(pvs))),
            numbers,
            protected: status.and_then(|s| s.protected_from_vm_delete),
            rare: (rare != Rare::default()).then(|| Box::new(rare)),
        }
    }

    /// The object's name when it is named after its spec path (`VolumePath::object_name`),
    /// which is then not stored.
    pub(super) fn named_after(&self) -> Option<String> {
        self.spec_path.named_after()
    }

    /// True when the object is named after its spec path (known since [`Self::new`]; no
    /// digest computed).
    pub(super) fn is_named(&self) -> bool {
        matches!(self.spec_path, SpecPath::Named(_))
    }

    /// The object's numbers, wherever they are kept.
    fn numbers(&self) -> WideNumbers {
        match self.rare.as_deref().and_then(|r| r.wide_numbers.clone()) {
            Some(wide) => wide,
            None => self.numbers.unpack(),
        }
    }

    /// `metadata.generation`.
    pub(super) fn generation(&self) -> Option<i64> {
        self.numbers().generation
    }

    fn rare(&self) -> &Rare {
        static NONE: std::sync::OnceLock<Rare> = std::sync::OnceLock::new();
        self.rare
            .as_deref()
            .unwrap_or_else(|| NONE.get_or_init(Rare::default))
    }

    fn has_status(&self) -> bool {
        self.phase.is_some()
            || self.volume_id.is_some()
            || self.disk_uuid.is_some()
            || self.pvs.is_some()
            || self.protected.is_some()
            || {
                let n = self.numbers();
                n.pv_count.is_some()
                    || n.attempts.is_some()
                    || n.registered_time.is_some()
                    || n.observed_generation.is_some()
            }
            || self.rare.as_deref().is_some_and(|r| {
                r.empty_status
                    || r.last_error.is_some()
                    || r.next_retry_time.is_some()
                    || r.duplicate_volume_ids.is_some()
                    || r.registering_token.is_some()
                    || r.registering_task.is_some()
            })
    }

    /// What full sync needs of the object `name` (the same as
    /// [`record`](crate::controller::full_sync::record) of the rebuilt object).
    pub(super) fn record(&self, name: &str) -> MigrationRecord {
        let mut duplicates = self.rare().duplicate_volume_ids.clone().unwrap_or_default();
        duplicates.sort();
        MigrationRecord {
            name: name.to_owned(),
            version: spell(self.resource_version.as_ref()),
            path: self.spec_path.named_path(name),
            phase: self.phase,
            volume_id: spell(self.volume_id.as_ref()),
            pvs: self.pvs.as_ref().map(PvNames::spell).unwrap_or_default(),
            duplicates,
            protected: self.protected == Some(true),
            deleting: self.rare().deletion_timestamp.is_some(),
        }
    }

    /// The object `strip_for_cache` would have left, rebuilt.
    pub(super) fn to_object(&self, name: &str) -> VolumeMigration {
        let rare = self.rare();
        let numbers = self.numbers();
        let status = self.has_status().then(|| VolumeMigrationStatus {
            phase: self.phase,
            volume_id: spell(self.volume_id.as_ref()),
            disk_uuid: spell(self.disk_uuid.as_ref()),
            persistent_volumes: self.pvs.as_ref().map(PvNames::spell),
            persistent_volume_count: numbers.pv_count,
            attempts: numbers.attempts,
            last_error: rare.last_error.clone(),
            next_retry_time: rare.next_retry_time.clone(),
            registered_time: numbers.registered_time.clone(),
            duplicate_volume_ids: rare.duplicate_volume_ids.clone(),
            registering_token: rare.registering_token.clone(),
            registering_task: rare.registering_task.clone(),
            protected_from_vm_delete: self.protected,
            observed_generation: numbers.observed_generation,
            conditions: None,
        });
        VolumeMigration {
            metadata: ObjectMeta {
                annotations: None,
                creation_timestamp: None,
                deletion_grace_period_seconds: rare.deletion_grace_period_seconds,
                deletion_timestamp: rare.deletion_timestamp.clone(),
                finalizers: if self.ours_only {
                    Some(vec![FINALIZER.to_owned()])
                } else {
                    rare.finalizers.clone()
                },
                generate_name: None,
                generation: numbers.generation,
                labels: None,
                managed_fields: None,
                name: Some(name.to_owned()),
                namespace: rare.namespace.clone(),
                owner_references: None,
                resource_version: spell(self.resource_version.as_ref()),
                self_link: None,
                uid: spell(self.uid.as_ref()),
            },
            spec: VolumeMigrationSpec {
                volume_path: self.spec_path.text().to_owned(),
                storage_policy_name: rare.storage_policy_name.clone(),
            },
            status,
        }
    }
}

#[cfg(test)]
#[path = "compact_tests.rs"]
mod tests;
