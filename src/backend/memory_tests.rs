use super::*;

async fn registered(mem: &InMemoryBackend, raw: &str) -> VolumeId {
    let path: VolumePath = raw.parse().expect("valid test path");
    mem.add_disk(&path);
    mem.create_volume(&CreateVolumeRequest {
        path,
        name: format!("volmig-{raw}"),
        cluster_id: "c".into(),
        storage_policy_name: None,
    })
    .await
    .expect("create")
}

#[test]
fn disk_uuids_are_spelled_as_vcenter_spells_them_and_kept_compact() {
    assert_eq!(
        disk_uuid_as_vcenter_spells_it(0x2a),
        "60 00 C2 90 00 00 00 00-00 00 00 00 00 00 00 2a"
    );
    let uuid = disk_uuid_as_vcenter_spells_it(0xabcd_ef01);
    assert_eq!(uuid, "60 00 C2 90 00 00 00 00-00 00 00 00 ab cd ef 01");
    assert!(matches!(CompactText::new(&uuid), CompactText::DiskUuid(..)));
}

#[tokio::test]
async fn protection_before_803_sets_the_flag_and_counts_calls() {
    let mem = InMemoryBackend::new();
    let id = registered(&mem, "[ds] a.vmdk").await;
    assert!(!mem.has_keep_flag(&id));
    assert!(!mem.is_protected(&id).await.unwrap());
    assert_eq!(
        mem.protect_from_vm_delete(&id).await.unwrap(),
        Protection::FlagSet
    );
    assert!(mem.has_keep_flag(&id));
    assert!(mem.is_protected(&id).await.unwrap());
    assert_eq!(mem.calls(op::PROTECT), 1);
    assert_eq!(mem.calls(op::IS_PROTECTED), 2);
    let missing = VolumeId::from("nope");
    let err = mem.protect_from_vm_delete(&missing).await.unwrap_err();
    assert_eq!(err.class, ErrorClass::NotFound);
    let err = mem.is_protected(&missing).await.unwrap_err();
    assert_eq!(err.class, ErrorClass::NotFound);
    mem.inject(op::PROTECT, Fault::Fail(ErrorClass::Transient), 1);
    let err = mem.protect_from_vm_delete(&id).await.unwrap_err();
    assert_eq!(err.class, ErrorClass::Transient);
    assert_eq!(mem.calls(op::PROTECT), 3);
}

#[tokio::test]
async fn from_803_registration_protects_and_nothing_is_set() {
    let mem = InMemoryBackend::new();
    mem.set_registration_protects(true);
    let id = registered(&mem, "[ds] b.vmdk").await;
    assert!(mem.has_keep_flag(&id), "registration sets the flag");
    assert!(mem.is_protected(&id).await.unwrap());
    assert_eq!(
        mem.protect_from_vm_delete(&id).await.unwrap(),
        Protection::ByRegistration
    );
    assert!(Protection::ByRegistration.is_protected());
    assert_eq!(mem.calls(op::PROTECT), 1);
    mem.delete_volume(&id).await.unwrap();
    assert!(!mem.has_keep_flag(&id));
}
