//! When the daemon is ready: both caches (VolumeMigrations, PVs) hold their initial lists.

use std::sync::Arc;
use std::time::Duration;

use crate::controller::publish::DriverCache;
use crate::controller::{MigrationCache, PvIndex};

/// Returns once the VolumeMigration cache, the PV index and (when given) the index of the
/// CSI driver's objects are synced.
pub async fn caches_synced(
    cache: Arc<MigrationCache>,
    index: Arc<PvIndex>,
    driver: Option<Arc<DriverCache>>,
) {
    while !cache.is_synced()
        || !index.is_synced()
        || driver
            .as_ref()
            .is_some_and(|d| d.index.is_served() && !d.index.is_synced())
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
