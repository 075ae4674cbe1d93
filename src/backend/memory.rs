//! An in-memory backend that behaves like vCenter where it matters: every create returns a
//! new ID, even for a vmdk already registered or being registered. It can add latency,
//! fail calls, or fail *after* creating, and counts calls per operation.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use async_trait::async_trait;

use super::{
    BackendError, CnsVolume, CreateVolumeRequest, ErrorClass, Protection, Result, SendFence,
    TaskState, VolumeBackend, VolumeId, VolumePage, op,
};
use crate::compact_text::{CompactText, UpperDigits};
use crate::volume_path::VolumePath;

/// Page size of [`InMemoryBackend::list_volumes`].
pub const PAGE_SIZE: usize = 500;

/// A scripted failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The call fails with this class and does nothing.
    Fail(ErrorClass),
    /// Create only: the volume is created, but the caller sees a transient error.
    FailAfterCreate,
    /// Create only: the caller sees a transient timeout at once, and the volume appears
    /// only this long afterwards (a vCenter task that outlived its caller).
    LateCreate(Duration),
    /// Create only: vCenter runs the create and the volume appears this long afterwards,
    /// but following its task fails with this class (a poll answered `NotAuthenticated`,
    /// a re-login refused): the caller's error comes after the request was sent.
    LostTask(ErrorClass, Duration),
    /// Create only: vCenter runs the create as a task (`task-N`, told to the request's task
    /// sink) until the test ends it ([`InMemoryBackend::end_task`]); the caller follows it
    /// this long, then sees a `TaskTimeout` after the request was sent.
    HeldTask(Duration),
}

#[derive(Default)]
struct State {
    disks: HashMap<VolumePath, String>,
    volumes: BTreeMap<VolumeId, CnsVolume>,
    next_id: u64,
    calls: HashMap<&'static str, u64>,
    in_flight: HashMap<&'static str, u64>,
    max_in_flight: HashMap<&'static str, u64>,
    faults: HashMap<&'static str, Vec<Fault>>,
    latency: HashMap<&'static str, Duration>,
    clock: i64,
    max_live_per_path: usize,
    /// Creates that complete later ([`Fault::LateCreate`]): due time and request.
    late: Vec<(tokio::time::Instant, CreateVolumeRequest)>,
    /// Tasks of [`Fault::HeldTask`] creates by MoRef value, and how many were made.
    tasks: BTreeMap<String, (CreateVolumeRequest, TaskState)>,
    held_tasks: u64,
    /// Volumes whose disk carries `keepAfterDeleteVm`.
    protected: HashSet<VolumeId>,
    /// Registration sets `keepAfterDeleteVm` (vCenter 8.0.3 and later).
    registration_protects: bool,
    /// Setting `keepAfterDeleteVm` answers success and sets nothing.
    flags_ignored: bool,
    /// Volumes whose own create set the flag (8.0.3+), until protecting them answers.
    fresh: HashSet<VolumeId>,
    /// Queries leave `created` out (as CNS does); only `creation_time` tells.
    hide_created: bool,
    /// Reports a release below 7.0 Update 1 ([`VolumeBackend::refuses_re_registration`]).
    before_7_0_u1: bool,
}

impl State {
    /// `v` as a query reports it.
    fn reported(&self, v: &CnsVolume) -> CnsVolume {
        CnsVolume {
            created: v.created.filter(|_| !self.hide_created),
            ..v.clone()
        }
    }

    /// Registers `request` now and returns the new ID.
    fn register(&mut self, request: &CreateVolumeRequest) -> VolumeId {
        self.next_id += 1;
        self.clock += 1;
        let id = VolumeId(format!("mem-{:08}", self.next_id));
        let volume = CnsVolume {
            id: id.clone(),
            name: request.name.clone(),
            backing_path: Some(request.path.clone()),
            created: jiff::Timestamp::from_second(1_700_000_000 + self.clock).ok(),
            cluster_ids: vec![request.cluster_id.clone()],
        };
        self.volumes.insert(id.clone(), volume);
        if self.registration_protects {
            self.protected.insert(id.clone());
            self.fresh.insert(id.clone());
        }
        let live = self
            .volumes
            .values()
            .filter(|v| v.backing_path.as_ref() == Some(&request.path))
            .count();
        self.max_live_per_path = self.max_live_per_path.max(live);
        id
    }
}

/// In-memory stand-in for vCenter + CNS. Safe to share between tasks.
#[derive(Default)]
pub struct InMemoryBackend {
    state: Mutex<State>,
}

/// Decrements the in-flight count of an operation when the call ends or is cancelled.
struct InFlight<'a> {
    backend: &'a InMemoryBackend,
    op: &'static str,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if let Some(n) = self.backend.lock().in_flight.get_mut(self.op) {
            *n = n.saturating_sub(1);
        }
    }
}

impl InMemoryBackend {
    /// An empty vCenter: no disks, no volumes.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        state.complete_due();
        state
    }

    /// Creates a vmdk (so `disk_uuid` finds it).
    pub fn add_disk(&self, path: &VolumePath) {
        let mut s = self.lock();
        let uuid = disk_uuid_as_vcenter_spells_it(s.disks.len() as u64 + 1);
        s.disks.insert(path.clone(), uuid);
    }

    /// Deletes a vmdk file (its CNS volumes stay, as in vCenter).
    pub fn remove_disk(&self, path: &VolumePath) {
        self.lock().disks.remove(path);
    }

    /// Adds latency to every call of `operation` (see [`op`]).
    pub fn set_latency(&self, operation: &'static str, latency: Duration) {
        self.lock().latency.insert(operation, latency);
    }

    /// The next `n` calls of `operation` hit `fault`.
    pub fn inject(&self, operation: &'static str, fault: Fault, n: usize) {
        let mut s = self.lock();
        let queue = s.faults.entry(operation).or_default();
        queue.extend(std::iter::repeat_n(fault, n));
    }

    /// Calls made so far of `operation`.
    pub fn calls(&self, operation: &str) -> u64 {
        self.lock().calls.get(operation).copied().unwrap_or(0)
    }

    /// Most calls of `operation` that were in flight at once.
    pub fn max_in_flight(&self, operation: &str) -> u64 {
        self.lock()
            .max_in_flight
            .get(operation)
            .copied()
            .unwrap_or(0)
    }

    /// The most registrations one path ever had at the same time (1 when no duplicate
    /// was ever created).
    pub fn max_live_per_path(&self) -> usize {
        self.lock().max_live_per_path
    }

    /// Every registered volume.
    pub fn volumes(&self) -> Vec<CnsVolume> {
        self.lock().volumes.values().cloned().collect()
    }

    /// Registered volumes whose backing disk is `path`.
    pub fn volumes_for(&self, path: &VolumePath) -> Vec<CnsVolume> {
        self.lock()
            .volumes
            .values()
            .filter(|v| v.backing_path.as_ref() == Some(path))
            .cloned()
            .collect()
    }

    /// Gives volume `from` the ID `to`, e.g. to make IDs sort against creation order.
    pub fn rename_volume(&self, from: &VolumeId, to: &VolumeId) {
        let mut s = self.lock();
        if let Some(mut v) = s.volumes.remove(from) {
            v.id = to.clone();
            s.volumes.insert(to.clone(), v);
        }
    }

    /// Makes CNS report `id` without a backing path (as for a volume whose disk it does
    /// not name).
    pub fn clear_backing_path(&self, id: &VolumeId) {
        if let Some(v) = self.lock().volumes.get_mut(id) {
            v.backing_path = None;
        }
    }

    /// Removes a registration behind the registrar's back (vCenter "forgets").
    pub fn forget_volume(&self, id: &VolumeId) {
        self.lock().volumes.remove(id);
    }

    /// Whether the volume's disk carries `keepAfterDeleteVm` (set by a call or by
    /// registration), as vCenter would report it.
    pub fn has_keep_flag(&self, id: &VolumeId) -> bool {
        self.lock().protected.contains(id)
    }

    /// Paths that have two or more registrations.
    pub fn duplicated_paths(&self) -> Vec<VolumePath> {
        let s = self.lock();
        let mut seen = HashSet::new();
        let mut dup = BTreeMap::new();
        for v in s.volumes.values() {
            if let Some(p) = &v.backing_path
                && !seen.insert(p.clone())
            {
                dup.insert(p.clone(), ());
            }
        }
        dup.into_keys().collect()
    }

    /// Counts the call, applies latency and returns a scripted fault if one is due.
    async fn enter(&self, operation: &'static str) -> (InFlight<'_>, Option<Fault>) {
        let (latency, fault) = {
            let mut s = self.lock();
            *s.calls.entry(operation).or_default() += 1;
            let now = {
                let n = s.in_flight.entry(operation).or_default();
                *n += 1;
                *n
            };
            let max = s.max_in_flight.entry(operation).or_default();
            *max = (*max).max(now);
            let fault = s.faults.get_mut(operation).and_then(|q| {
                if q.is_empty() {
                    None
                } else {
                    Some(q.remove(0))
                }
            });
            (s.latency.get(operation).copied(), fault)
        };
        let guard = InFlight {
            backend: self,
            op: operation,
        };
        if let Some(latency) = latency {
            tokio::time::sleep(latency).await;
        }
        (guard, fault)
    }
}

fn injected(class: ErrorClass, operation: &'static str) -> BackendError {
    BackendError::new(class, operation, "InjectedFault", "injected by the test")
}

#[async_trait]
impl VolumeBackend for InMemoryBackend {
    async fn disk_uuid(&self, path: &VolumePath) -> Result<String> {
        let (_g, fault) = self.enter(op::DISK_UUID).await;
        if let Some(Fault::Fail(class)) = fault {
            return Err(injected(class, op::DISK_UUID));
        }
        self.lock().disks.get(path).cloned().ok_or_else(|| {
            BackendError::new(
                ErrorClass::NotFound,
                op::DISK_UUID,
                "FileNotFound",
                format!("File {path} was not found"),
            )
        })
    }

    async fn find_volumes(&self, name: &str, path: &VolumePath) -> Result<Vec<CnsVolume>> {
        let (_g, fault) = self.enter(op::FIND).await;
        if let Some(Fault::Fail(class)) = fault {
            return Err(injected(class, op::FIND));
        }
        let s = self.lock();
        Ok(s.volumes
            .values()
            .filter(|v| v.name == name || v.backing_path.as_ref() == Some(path))
            .map(|v| s.reported(v))
            .collect())
    }

    async fn create_volume(&self, request: &CreateVolumeRequest) -> Result<VolumeId> {
        let (_g, fault) = self.enter(op::CREATE).await;
        if let Some(Fault::Fail(class)) = fault {
            return Err(injected(class, op::CREATE));
        }
        // The latency stands for the preparation (policy, RegisterDisk): the request is
        // sent only now.
        request
            .fence
            .check()
            .map_err(|why| BackendError::called_off(op::CREATE, why))?;
        if let Some(Fault::HeldTask(follow)) = fault {
            let task = self.lock().hold(request);
            request.fence.task_started(&task);
            return self.follow(&task, follow).await;
        }
        let id = {
            let mut s = self.lock();
            if !s.disks.contains_key(&request.path) {
                return Err(BackendError::new(
                    ErrorClass::NotFound,
                    op::CREATE,
                    "FileNotFound",
                    format!("File {} was not found", request.path),
                ));
            }
            if let Some(Fault::LateCreate(after)) = fault {
                s.late
                    .push((tokio::time::Instant::now() + after, request.clone()));
                return Err(BackendError::new(
                    ErrorClass::Transient,
                    op::CREATE,
                    "TaskTimeout",
                    "the create task did not finish in time; it may still complete",
                ));
            }
            if let Some(Fault::LostTask(class, after)) = fault {
                s.late
                    .push((tokio::time::Instant::now() + after, request.clone()));
                return Err(injected(class, op::CREATE).after_send());
            }
            s.register(request)
        };
        if fault == Some(Fault::FailAfterCreate) {
            return Err(BackendError::new(
                ErrorClass::Transient,
                op::CREATE,
                "ConnectionReset",
                "the connection closed before the response arrived",
            ));
        }
        Ok(id)
    }

    async fn create_task_state(&self, task: &str) -> Result<TaskState> {
        self.task_state(task).await
    }

    async fn delete_volume(&self, id: &VolumeId) -> Result<()> {
        let (_g, fault) = self.enter(op::DELETE).await;
        if let Some(Fault::Fail(class)) = fault {
            return Err(injected(class, op::DELETE));
        }
        let mut s = self.lock();
        s.protected.remove(id);
        s.fresh.remove(id);
        match s.volumes.remove(id) {
            Some(_) => Ok(()),
            None => Err(BackendError::new(
                ErrorClass::NotFound,
                op::DELETE,
                "CnsFault",
                format!("volume {id} not found"),
            )),
        }
    }

    async fn list_volumes(&self, cursor: Option<String>) -> Result<VolumePage> {
        let (_g, fault) = self.enter(op::LIST).await;
        if let Some(Fault::Fail(class)) = fault {
            return Err(injected(class, op::LIST));
        }
        let s = self.lock();
        let start = cursor.map_or(std::ops::Bound::Unbounded, |c| {
            std::ops::Bound::Included(VolumeId(c))
        });
        let mut iter = s
            .volumes
            .range((start, std::ops::Bound::Unbounded))
            .map(|(_, v)| s.reported(v))
            .take(PAGE_SIZE + 1);
        let volumes: Vec<CnsVolume> = iter.by_ref().take(PAGE_SIZE).collect();
        let next = iter.next().map(|v| v.id.0);
        Ok(VolumePage { volumes, next })
    }

    fn refuses_re_registration(&self) -> Option<bool> {
        Some(!self.lock().before_7_0_u1)
    }

    async fn protect_from_vm_delete(&self, id: &VolumeId, fence: &SendFence) -> Result<Protection> {
        let (_g, fault) = self.enter(op::PROTECT).await;
        if let Some(Fault::Fail(class)) = fault {
            return Err(injected(class, op::PROTECT));
        }
        let mut s = self.lock();
        if !s.volumes.contains_key(id) {
            return Err(unknown_volume(op::PROTECT, id));
        }
        if s.fresh.remove(id) {
            return Ok(Protection::ByRegistration);
        }
        if s.registration_protects {
            fence
                .check()
                .map_err(|why| BackendError::called_off(op::PROTECT, why))?;
        }
        // From 8.0.3 a registration by ID sets the flag (CNS answers AlreadyRegistered);
        // below, VSLM sets it unless told not to, and it is read back.
        if s.registration_protects || !s.flags_ignored {
            s.protected.insert(id.clone());
        }
        Ok(match (s.registration_protects, s.protected.contains(id)) {
            (true, _) => Protection::ByReRegistration,
            (false, true) => Protection::FlagSet,
            (false, false) => Protection::NotKept,
        })
    }

    async fn creation_time(&self, id: &VolumeId) -> Result<Option<jiff::Timestamp>> {
        let (_g, fault) = self.enter(op::CREATION_TIME).await;
        if let Some(Fault::Fail(class)) = fault {
            return Err(injected(class, op::CREATION_TIME));
        }
        match self.lock().volumes.get(id) {
            Some(v) => Ok(v.created),
            None => Err(unknown_volume(op::CREATION_TIME, id)),
        }
    }

    async fn is_protected(&self, id: &VolumeId) -> Result<bool> {
        let (_g, fault) = self.enter(op::IS_PROTECTED).await;
        if let Some(Fault::Fail(class)) = fault {
            return Err(injected(class, op::IS_PROTECTED));
        }
        let s = self.lock();
        if !s.volumes.contains_key(id) {
            return Err(unknown_volume(op::IS_PROTECTED, id));
        }
        Ok(s.protected.contains(id))
    }
}

fn unknown_volume(operation: &'static str, id: &VolumeId) -> BackendError {
    BackendError::new(
        ErrorClass::NotFound,
        operation,
        "NotFound",
        format!("volume {id} not found"),
    )
}

/// The `n`th disk UUID in the spelling `QueryVirtualDiskUuid` returns on a real vCenter
/// (`60 00 C2 9…`, VMware's prefix, `C2` uppercase as in the vmdk descriptor's `ddb.uuid`).
pub fn disk_uuid_as_vcenter_spells_it(n: u64) -> String {
    /// Hex digit 4 (the `C` of `C2`) is the uppercase one.
    const UPPER_C: UpperDigits = 1 << 4;
    let bytes = (0x6000_c290_u128 << 96 | u128::from(n)).to_be_bytes();
    CompactText::DiskUuid(bytes, UPPER_C).to_string()
}

#[path = "memory_tasks.rs"]
mod tasks;

#[path = "memory_release.rs"]
mod release;

#[cfg(test)]
#[path = "memory_tests.rs"]
mod tests;
