//! What the report advises for each reason (docs/operations.md, "Is every PV covered?"):
//! one line for a human per reason present.

use super::reason;

/// What to do about `reason`: one line for a human.
pub fn action(reason: &str) -> &'static str {
    match reason {
        "DiskNotFound" => {
            "the vmdk is missing from the datastore: restore it (volmig retries at the next \
             full sync) or delete the PV"
        }
        reason::INVALID_VOLUME_PATH | "InvalidPath" => {
            "the PV's spec.vsphereVolume.volumePath is not a valid in-tree path \
             (\"[datastore] folder/file.vmdk\"): fix the PV spec (recreate the PV; the path is \
             immutable)"
        }
        "InvalidLogin" | "NotAuthenticated" => {
            "vCenter rejected volmig's credentials: fix the vCenter credentials (the Secret \
             behind --vc-credentials-file or --csi-config); volmig retries with backoff"
        }
        "BackendRejected" => {
            "vCenter refused the registration for good: give volmig's vCenter user the CNS \
             privileges of the CSI driver's user and check the cluster ID; retried at the next \
             full sync"
        }
        "BackendUnavailable" => {
            "vCenter was unreachable or failed transiently: check the network, URL and TLS \
             settings; volmig retries with backoff (status.nextRetryTime)"
        }
        reason::DUPLICATE_VOLUMES => {
            "vCenter holds more than one CNS volume for the disk; the one in status.volumeID is \
             the mapping: see DuplicateVolumes under \"Troubleshooting\" in docs/operations.md \
             before touching any of them (never unregister one by hand)"
        }
        reason::CLEANED_UP_BY_DRIVER => {
            "only pods spell the path this way and the driver's object named by the volume ID \
             carries another spelling, so the driver's stale clean-up (every 120 min) deletes \
             this spelling's object and volmig writes it again: pods starting in between miss \
             the driver's cache. Spell the path in the pods as a PV does, or give the pod a PV"
        }
        reason::NOT_PUBLISHED => {
            "the vSphere CSI driver's cache object (CnsVSphereVolumeMigration) is missing: \
             volmig publishes it once the path is Registered; check that volmig runs with \
             --publish-driver-cache auto or on and may write cnsvspherevolumemigrations"
        }
        reason::NO_VOLUME_MIGRATION => {
            "volmig has not picked up the PV: check that `volmig run` is running and has a \
             leader (metric volmig_leader, its Lease) and read its log"
        }
        reason::NAME_COLLISION => {
            "the VolumeMigration named after this path tracks another path, so its ID is not \
             used: see \"Troubleshooting\" in docs/operations.md and report it"
        }
        reason::NOT_REGISTERED_YET => {
            "registration is in progress: wait for volmig (status.nextRetryTime); if it stays, \
             read volmig's log"
        }
        _ => "see the message and `kubectl describe volumemigration <name>`",
    }
}
