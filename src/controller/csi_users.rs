//! Users of a CNS volume by its ID after cut-over (docs/design.md §5.1): PVs of the vSphere
//! CSI driver whose `volumeHandle` is the ID, and the VolumeAttachments of such PVs (one
//! outlives its PV until the volume is detached). A volume with such a user is in use
//! whatever in-tree PVs are left: volmig never unregisters it, nor counts it as an orphan.
//!
//! Kept apart from the in-tree index ([`super::PvIndex`] holds this beside it): the users
//! are keyed by ID, not by path, and cost nothing in a cluster without CSI PVs.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::{Mutex, MutexGuard, PoisonError};

use k8s_openapi::api::core::v1::PersistentVolume;
use k8s_openapi::api::storage::v1::VolumeAttachment;

use crate::compact_text::{NameSet, TextRef};

/// The vSphere CSI driver's name (`spec.csi.driver` of its PVs, `spec.attacher` of its
/// VolumeAttachments).
pub const CSI_DRIVER: &str = "csi.vsphere.vmware.com";

/// The CNS volume ID a PV of the vSphere CSI driver uses, or `None` for any other PV.
pub fn csi_volume_handle(pv: &PersistentVolume) -> Option<&str> {
    let csi = pv.spec.as_ref()?.csi.as_ref()?;
    (csi.driver == CSI_DRIVER && !csi.volume_handle.is_empty()).then_some(&*csi.volume_handle)
}

/// The PV a VolumeAttachment of the vSphere CSI driver attaches, or `None` for any other.
pub fn attached_pv(attachment: &VolumeAttachment) -> Option<&str> {
    (attachment.spec.attacher == CSI_DRIVER)
        .then_some(attachment.spec.source.persistent_volume_name.as_deref())
        .flatten()
}

#[derive(Default)]
struct State {
    /// CSI PVs by name, with their volume handle; a deleted PV stays while an attachment
    /// names it (`live` false).
    pvs: HashMap<String, Handle>,
    /// VolumeAttachments of the driver by name, with the PV each attaches.
    attachments: HashMap<String, String>,
    /// The attachments are watched and their initial list is not indexed yet.
    attachments_pending: bool,
}

struct Handle {
    id: String,
    live: bool,
}

impl State {
    /// Drops PV `name`'s handle when the PV is gone and no attachment names it.
    fn collect(&mut self, name: &str) {
        let dead = self.pvs.get(name).is_some_and(|h| !h.live);
        if dead && !self.attachments.values().any(|pv| pv == name) {
            self.pvs.remove(name);
        }
    }
}

/// Thread-safe index of the CSI driver's users of CNS volume IDs.
#[derive(Default)]
pub struct CsiUsers {
    state: Mutex<State>,
}

impl CsiUsers {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Records PV `pv` as it is now (any PV: one that is not the driver's is forgotten).
    pub fn upsert_pv(&self, pv: &PersistentVolume) {
        let Some(name) = pv.metadata.name.as_deref() else {
            return;
        };
        match csi_volume_handle(pv) {
            Some(id) => {
                let handle = Handle {
                    id: id.to_owned(),
                    live: true,
                };
                self.lock().pvs.insert(name.to_owned(), handle);
            }
            None => self.remove_pv(name),
        }
    }

    /// Forgets PV `name`; its handle stays while an attachment names it.
    pub fn remove_pv(&self, name: &str) {
        let mut s = self.lock();
        if let Some(handle) = s.pvs.get_mut(name) {
            handle.live = false;
        }
        s.collect(name);
    }

    /// Forgets every PV not in `keep` (after a re-list of PVs).
    pub fn retain_pvs(&self, keep: &NameSet) {
        let gone: Vec<String> = self
            .lock()
            .pvs
            .keys()
            .filter(|name| !keep.contains(&TextRef::new(name)))
            .cloned()
            .collect();
        for name in gone {
            self.remove_pv(&name);
        }
    }

    /// Records VolumeAttachment `attachment` as it is now.
    pub fn upsert_attachment(&self, attachment: &VolumeAttachment) {
        let Some(name) = attachment.metadata.name.as_deref() else {
            return;
        };
        match attached_pv(attachment) {
            Some(pv) => {
                let old = self
                    .lock()
                    .attachments
                    .insert(name.to_owned(), pv.to_owned());
                if let Some(old) = old {
                    self.lock().collect(&old);
                }
            }
            None => self.remove_attachment(name),
        }
    }

    /// Forgets VolumeAttachment `name`.
    pub fn remove_attachment(&self, name: &str) {
        let mut s = self.lock();
        if let Some(pv) = s.attachments.remove(name) {
            s.collect(&pv);
        }
    }

    /// Forgets every attachment not in `keep` (after a re-list of attachments).
    pub fn retain_attachments(&self, keep: &NameSet) {
        let gone: Vec<String> = self
            .lock()
            .attachments
            .keys()
            .filter(|name| !keep.contains(&TextRef::new(name)))
            .cloned()
            .collect();
        for name in gone {
            self.remove_attachment(&name);
        }
    }

    /// The users of volume `id`, sorted: `pv/<name>` for each CSI PV and
    /// `volumeattachment/<name>` for each attachment of one.
    pub fn users_of(&self, id: &str) -> Vec<String> {
        let s = self.lock();
        let mut users: BTreeSet<String> = s
            .pvs
            .iter()
            .filter(|(_, h)| h.live && h.id == id)
            .map(|(name, _)| format!("pv/{name}"))
            .collect();
        users.extend(
            s.attachments
                .iter()
                .filter(|(_, pv)| s.pvs.get(*pv).is_some_and(|h| h.id == id))
                .map(|(name, _)| format!("volumeattachment/{name}")),
        );
        users.into_iter().collect()
    }

    /// Every volume ID with at least one user.
    pub fn ids_in_use(&self) -> HashSet<String> {
        let s = self.lock();
        let attached: HashSet<&str> = s.attachments.values().map(String::as_str).collect();
        s.pvs
            .iter()
            .filter(|(name, h)| h.live || attached.contains(name.as_str()))
            .map(|(_, h)| h.id.clone())
            .collect()
    }

    /// Attachments are watched: not synced until their initial list is indexed.
    pub fn expect_attachments(&self) {
        self.lock().attachments_pending = true;
    }

    /// Marks the initial list of attachments as indexed.
    pub fn set_attachments_synced(&self) {
        self.lock().attachments_pending = false;
    }

    /// False while the initial list of attachments is awaited.
    pub fn is_synced(&self) -> bool {
        !self.lock().attachments_pending
    }
}

#[cfg(test)]
#[path = "csi_users_tests.rs"]
mod tests;
