//! When the daemon is ready: both caches (VolumeMigrations, PVs) hold their initial lists.

use std::time::Duration;

use kube::runtime::reflector::Store;

use crate::api::VolumeMigration;
use crate::controller::PvIndex;
use crate::controller::publish::DriverCache;

/// Returns once the VolumeMigration cache, the PV index and (when served) the index of the
/// CSI driver's objects are synced.
pub async fn caches_synced(
    cache: &Store<VolumeMigration>,
    index: &PvIndex,
    driver: Option<&DriverCache>,
) {
    // kube-runtime's readiness signal wakes only its most recent waiter (the controller's),
    // so poll it again periodically instead of waiting once.
    while tokio::time::timeout(Duration::from_millis(100), cache.wait_until_ready())
        .await
        .is_err()
    {}
    while !index.is_synced() || driver.is_some_and(|d| !d.index.is_synced()) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
