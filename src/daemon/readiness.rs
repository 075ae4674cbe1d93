//! When the daemon is ready: both caches (VolumeMigrations, PVs) hold their initial lists.

use std::time::Duration;

use crate::controller::publish::DriverCache;
use crate::controller::{MigrationCache, PvIndex};

/// Returns once the VolumeMigration cache, the PV index and (when served) the index of the
/// CSI driver's objects are synced.
pub async fn caches_synced(cache: &MigrationCache, index: &PvIndex, driver: Option<&DriverCache>) {
    while !cache.is_synced() || !index.is_synced() || driver.is_some_and(|d| !d.index.is_synced()) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
