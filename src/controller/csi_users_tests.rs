use k8s_openapi::api::core::v1::PersistentVolume;
use k8s_openapi::api::storage::v1::VolumeAttachment;

use super::*;
use crate::compact_text::CompactText;

fn csi_pv(name: &str, driver: &str, handle: &str) -> PersistentVolume {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "spec": {"csi": {"driver": driver, "volumeHandle": handle}}
    }))
    .unwrap()
}

fn attachment(name: &str, attacher: &str, pv: &str) -> VolumeAttachment {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "spec": {"attacher": attacher, "nodeName": "node-1",
                 "source": {"persistentVolumeName": pv}}
    }))
    .unwrap()
}

#[test]
fn a_csi_pv_of_the_driver_uses_its_handle() {
    let users = CsiUsers::default();
    users.upsert_pv(&csi_pv("static-a", CSI_DRIVER, "id-1"));
    users.upsert_pv(&csi_pv("other", "other.csi.example.com", "id-1"));
    assert_eq!(users.users_of("id-1"), ["pv/static-a"]);
    assert!(users.users_of("id-2").is_empty());
    assert_eq!(users.ids_in_use(), HashSet::from(["id-1".to_owned()]));
    users.remove_pv("static-a");
    assert!(users.users_of("id-1").is_empty());
    assert!(users.ids_in_use().is_empty());
}

#[test]
fn an_attachment_keeps_the_volume_in_use_after_its_pv_is_gone() {
    let users = CsiUsers::default();
    users.upsert_pv(&csi_pv("static-a", CSI_DRIVER, "id-1"));
    users.upsert_attachment(&attachment("csi-123", CSI_DRIVER, "static-a"));
    users.upsert_attachment(&attachment("csi-456", "other.csi.example.com", "static-a"));
    assert_eq!(
        users.users_of("id-1"),
        ["pv/static-a", "volumeattachment/csi-123"]
    );
    users.remove_pv("static-a");
    assert_eq!(users.users_of("id-1"), ["volumeattachment/csi-123"]);
    assert_eq!(users.ids_in_use(), HashSet::from(["id-1".to_owned()]));
    users.remove_attachment("csi-123");
    assert!(users.users_of("id-1").is_empty());
    assert!(users.ids_in_use().is_empty());
}

#[test]
fn a_relist_forgets_what_it_no_longer_holds() {
    let users = CsiUsers::default();
    users.upsert_pv(&csi_pv("a", CSI_DRIVER, "id-1"));
    users.upsert_pv(&csi_pv("b", CSI_DRIVER, "id-2"));
    users.upsert_attachment(&attachment("va-b", CSI_DRIVER, "b"));
    let keep: NameSet = [CompactText::new("a")].into_iter().collect();
    users.retain_pvs(&keep);
    assert_eq!(users.users_of("id-2"), ["volumeattachment/va-b"]);
    users.retain_attachments(&NameSet::default());
    assert_eq!(users.ids_in_use(), HashSet::from(["id-1".to_owned()]));
}

#[test]
fn not_synced_while_the_attachments_are_awaited() {
    let users = CsiUsers::default();
    assert!(users.is_synced());
    users.expect_attachments();
    assert!(!users.is_synced());
    users.set_attachments_synced();
    assert!(users.is_synced());
}
