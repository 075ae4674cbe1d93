//! The exposition: every family's name (under the `volmig_` prefix), help text and unit,
//! and the `process_*` collector, registered once when [`super::Metrics`] is built.

use prometheus_client::registry::Unit;

use super::Inner;

/// Registers every family of `m` in its registry.
pub(super) fn register_all(m: &mut Inner) {
    #[cfg(target_os = "linux")]
    m.registry
        .register_collector(Box::new(super::process::ProcessCollector));
    let r = m.registry.sub_registry_with_prefix("volmig");
    r.register(
        "registrations",
        "Finished registrations of vmdks as CNS volumes, by result",
        m.registrations.clone(),
    );
    r.register_with_unit(
        "registration_duration",
        "Time from the first attempt to the final outcome of a registration",
        Unit::Seconds,
        m.registration_duration.clone(),
    );
    r.register_with_unit(
        "registration_stage",
        "Time of each registration inside the registrar, by stage (waiting for the path's lock, \
         waiting for a backend slot, vCenter calls, status read, write-ahead, result write, other)",
        Unit::Seconds,
        m.registration_stages.clone(),
    );
    r.register(
        "volumes",
        "VolumeMigrations by status phase",
        m.volumes.clone(),
    );
    r.register_with_unit(
        "full_sync_duration",
        "Duration of full-sync passes",
        Unit::Seconds,
        m.full_sync_duration.clone(),
    );
    r.register(
        "dry_run_actions",
        "What the last dry-run pass (volmig run --dry-run) would have done, by source and action",
        m.dry_run_actions.clone(),
    );
    r.register(
        "full_sync_actions",
        "Repairs made by full-sync passes, by action",
        m.full_sync_actions.clone(),
    );
    r.register(
        "full_sync_passes",
        "Full-sync passes, by result (ok: the pass completed)",
        m.full_sync_passes.clone(),
    );
    r.register(
        "duplicate_volumes",
        "vmdks with two or more CNS volumes, as of the last full-sync pass",
        m.duplicate_volumes.clone(),
    );
    r.register(
        "orphan_volumes",
        "volmig-named CNS volumes of this cluster (--cluster-id) that no PV or VolumeMigration references, as of the last full-sync pass",
        m.orphan_volumes.clone(),
    );
    r.register(
        "backend_requests",
        "Calls to the vCenter/CNS backend, by operation and result class",
        m.backend_requests.clone(),
    );
    r.register_with_unit(
        "backend_request_duration",
        "Latency of calls to the vCenter/CNS backend, by operation",
        Unit::Seconds,
        m.backend_duration.clone(),
    );
    r.register(
        "leader",
        "1 while this replica holds the leader Lease, else 0",
        m.leader.clone(),
    );
    r.register(
        "registrar_mode",
        "Who registers in-tree vmdks now, by mode (own: volmig; follow: the CSI driver's syncer \
         leads and volmig adopts; unknown: the syncer's Lease was not read yet): 1 for the \
         current mode, else 0",
        m.registrar_mode.clone(),
    );
    r.register(
        "pvs_tracked",
        "In-tree vSphere PersistentVolumes tracked by the PV watcher",
        m.pvs_tracked.clone(),
    );
    r.register(
        "name_collisions",
        "VolumeMigration objects found under another path's name",
        m.name_collisions.clone(),
    );
    r.register(
        "build_info",
        "Build of the running volmig binary (the value is always 1)",
        m.build_info.clone(),
    );
    r.register(
        "full_sync_last_success_timestamp_seconds",
        "Unix time of the last completed full-sync pass on this replica, 0 before the first",
        m.full_sync_last_success.clone(),
    );
    r.register(
        "driver_objects_missing",
        "Registered volume paths whose CnsVSphereVolumeMigration driver object is missing",
        m.driver_objects_missing.clone(),
    );
    // Counters are registered without `_total`: the encoder appends it.
    r.register(
        "reconcile_failures",
        "Failed reconciles of VolumeMigrations, by reason",
        m.reconcile_failures.clone(),
    );
}
