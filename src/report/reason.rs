//! Reasons the report derives itself (besides `status.lastError.reason`, copied as is).

/// The PV's `spec.vsphereVolume.volumePath` does not parse.
pub const INVALID_VOLUME_PATH: &str = "InvalidVolumePath";
/// No VolumeMigration exists for the PV's canonical path.
pub const NO_VOLUME_MIGRATION: &str = "NoVolumeMigration";
/// The VolumeMigration with the path's name tracks another path.
pub const NAME_COLLISION: &str = "NameCollision";
/// Registered, but the driver's cache object for the PV's raw path is missing.
pub const NOT_PUBLISHED: &str = "NotPublished";
/// Other CNS volumes exist for the same disk (`status.duplicateVolumeIDs`).
pub const DUPLICATE_VOLUMES: &str = "DuplicateVolumes";
/// Not Registered and no error recorded: volmig is still working on it.
pub const NOT_REGISTERED_YET: &str = "NotRegisteredYet";
/// Published, but only pods spell the path so and no object named by the volume ID
/// carries it: the driver's stale clean-up deletes it every cycle (docs/design.md §8.1).
pub const CLEANED_UP_BY_DRIVER: &str = "CleanedUpByDriver";
