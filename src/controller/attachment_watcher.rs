//! Watches the VolumeAttachments of the vSphere CSI driver: an attachment keeps the volume
//! of its CSI PV in use until it is gone, even after the PV was deleted (docs/design.md
//! §5.1). Kept on every replica in [`super::csi_users::CsiUsers`]; creates nothing.

use std::sync::Arc;

use k8s_openapi::api::storage::v1::VolumeAttachment;
use kube::api::Api;
use tokio_util::sync::CancellationToken;
use tracing::info;

use super::Context;
use super::user_watch::{self, Users};
use crate::compact_text::NameSet;
use crate::volume_path::VolumePath;

/// The VolumeAttachment watcher of one replica.
pub struct AttachmentWatcher {
    /// Shared reconciler context (its index holds the CSI users).
    pub ctx: Arc<Context>,
}

impl AttachmentWatcher {
    /// Watches `attachments` until `shutdown`. Watch errors (a 403 without the
    /// volumeattachments rule included) are retried with backoff; until the first list is
    /// indexed the index is not synced, so no volume is found unused on a partial view.
    pub async fn run(self, attachments: Api<VolumeAttachment>, shutdown: CancellationToken) {
        let ctx = self.ctx.clone();
        user_watch::run(self, ctx, attachments, shutdown).await;
    }
}

impl Users for AttachmentWatcher {
    type Object = VolumeAttachment;
    const WATCH_FAILED: &'static str = "VolumeAttachment watch failed; retrying with backoff";

    async fn listed(&self, attachment: &VolumeAttachment) -> Vec<String> {
        self.ctx.index.csi().upsert_attachment(attachment);
        attachment.metadata.name.iter().cloned().collect()
    }

    fn list_done(&self, seen: &NameSet) {
        let csi = self.ctx.index.csi();
        csi.retain_attachments(seen);
        if !csi.is_synced() {
            info!("VolumeAttachment cache synced");
        }
        csi.set_attachments_synced();
    }

    async fn applied(&self, attachment: &VolumeAttachment) -> Vec<(VolumePath, String)> {
        self.ctx.index.csi().upsert_attachment(attachment);
        Vec::new()
    }

    fn deleted(&self, attachment: &VolumeAttachment) {
        if let Some(name) = &attachment.metadata.name {
            self.ctx.index.csi().remove_attachment(name);
        }
    }
}
