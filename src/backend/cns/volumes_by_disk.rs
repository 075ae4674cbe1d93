//! The look-up of a disk's CNS volumes by backing disk, whatever their names
//! (docs/design.md §4.3): the volumes of the disk's datastore, page by page, keeping those
//! whose backing disk is the path. CNS has no filter by backing path.

use crate::backend::cns::CnsBackend;
use crate::backend::cns::fault::{self, names};
use crate::backend::cns::soap::MoRef;
use crate::backend::{BackendError, CnsVolume, op};
use crate::volume_path::VolumePath;

impl CnsBackend {
    /// Every CNS volume whose backing disk is `path`, whatever its name (docs/design.md
    /// §4.3), from a snapshot of the path's datastore no older than
    /// [`super::super::disk_snapshot::SNAPSHOT_TTL`]: `CnsQueryVolume` filtered by the
    /// datastore (`CnsQueryFilter.datastores`: each datastore of that name in the searched
    /// datacenters), read through every page of the cursor.
    ///
    /// Cost: one call per page of (at most 500) volumes of the datastore, once per
    /// snapshot period and datastore whatever the number of look-ups (concurrent ones wait
    /// for the listing in progress); the snapshot keeps the datastore's volumes that have
    /// a backing disk. A datastore that is not in the inventory holds none.
    pub async fn volumes_backed_by(
        &self,
        path: &VolumePath,
    ) -> Result<Vec<CnsVolume>, BackendError> {
        let what = path.canonical();
        self.inner
            .disks
            .backing(path.datastore(), path, || self.datastore_volumes(path))
            .await
            .map_err(|e| fault::about(e, &format!("volumes backed by {what}")))
    }

    /// Every CNS volume of `path`'s datastore (each datastore of that name), page by page.
    async fn datastore_volumes(&self, path: &VolumePath) -> Result<Vec<CnsVolume>, BackendError> {
        let locations = match self
            .inner
            .inventory
            .resolve_all(&self.inner.client, path.datastore(), op::FIND)
            .await
        {
            Ok(locations) => locations,
            Err(err) if err.fault == names::DATASTORE_NOT_FOUND => return Ok(Vec::new()),
            Err(err) => return Err(err),
        };
        let mut datastores: Vec<MoRef> = Vec::with_capacity(locations.len());
        for location in locations {
            if !datastores.contains(&location.datastore) {
                datastores.push(location.datastore);
            }
        }
        self.query_all(op::FIND, &[], &datastores)
            .await
            .map_err(|e| self.note(e))
    }

    /// The volumes `find_volumes` adds to those its query by volmig's name found
    /// (`by_name`): on a vCenter older than 7.0 Update 1 (see
    /// `VcenterVersion::refuses_re_registration`), whose CNS registers a
    /// disk again instead of answering `CnsAlreadyRegisteredFault`, and only when the query
    /// by name found nothing, the volumes backed by `path` under any name
    /// ([`Self::volumes_backed_by`]); otherwise none, without a call. So the datastore-wide
    /// listing runs on old vCenters only, and at most once per snapshot period and
    /// datastore (docs/design.md §4.3).
    pub async fn volumes_missed_by_name(
        &self,
        path: &VolumePath,
        by_name: &[CnsVolume],
    ) -> Result<Vec<CnsVolume>, BackendError> {
        if !by_name.is_empty() || self.inner.version.refuses_re_registration() {
            return Ok(Vec::new());
        }
        self.volumes_backed_by(path).await
    }
}
