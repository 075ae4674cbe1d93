use super::*;

async fn registered(mem: &InMemoryBackend, raw: &str) -> VolumeId {
    let path: VolumePath = raw.parse().expect("valid test path");
    mem.add_disk(&path);
    mem.create_volume(&CreateVolumeRequest {
        path,
        name: format!("volmig-{raw}"),
        cluster_id: "c".into(),
        storage_policy_name: None,
        fence: crate::backend::SendFence::none(),
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
        mem.protect_from_vm_delete(&id, &SendFence::none())
            .await
            .unwrap(),
        Protection::FlagSet
    );
    assert!(mem.has_keep_flag(&id));
    assert!(mem.is_protected(&id).await.unwrap());
    assert_eq!(mem.calls(op::PROTECT), 1);
    assert_eq!(mem.calls(op::IS_PROTECTED), 2);
    let missing = VolumeId::from("nope");
    let err = mem
        .protect_from_vm_delete(&missing, &SendFence::none())
        .await
        .unwrap_err();
    assert_eq!(err.class, ErrorClass::NotFound);
    let err = mem.is_protected(&missing).await.unwrap_err();
    assert_eq!(err.class, ErrorClass::NotFound);
    mem.inject(op::PROTECT, Fault::Fail(ErrorClass::Transient), 1);
    let err = mem
        .protect_from_vm_delete(&id, &SendFence::none())
        .await
        .unwrap_err();
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
        mem.protect_from_vm_delete(&id, &SendFence::none())
            .await
            .unwrap(),
        Protection::ByRegistration
    );
    assert!(Protection::ByRegistration.is_protected());
    assert_eq!(mem.calls(op::PROTECT), 1);
    mem.delete_volume(&id).await.unwrap();
    assert!(!mem.has_keep_flag(&id));
}

#[tokio::test]
async fn volumes_name_the_cluster_of_their_registration() {
    let mem = InMemoryBackend::new();
    let path: VolumePath = "[ds] c.vmdk".parse().expect("valid test path");
    mem.add_disk(&path);
    let id = mem
        .create_volume(&CreateVolumeRequest {
            path: path.clone(),
            name: path.cns_volume_name(),
            cluster_id: "cluster-b".into(),
            storage_policy_name: None,
            fence: crate::backend::SendFence::none(),
        })
        .await
        .expect("create");
    let listed = mem.list_volumes(None).await.expect("list").volumes;
    let found = mem
        .find_volumes(&path.cns_volume_name(), &path)
        .await
        .expect("find");
    for volumes in [listed, found, mem.volumes()] {
        assert_eq!(volumes.len(), 1);
        assert_eq!(volumes[0].id, id);
        assert_eq!(volumes[0].cluster_ids, ["cluster-b"]);
    }
}

#[tokio::test]
async fn from_803_a_volume_registered_earlier_is_protected_by_registering_it_again() {
    let mem = InMemoryBackend::new();
    // Registered (by the CSI driver) while vCenter was below 8.0.3: no flag.
    let id = registered(&mem, "[ds] d.vmdk").await;
    mem.set_registration_protects(true);
    assert!(!mem.is_protected(&id).await.unwrap(), "read, not assumed");
    let protection = mem
        .protect_from_vm_delete(&id, &SendFence::none())
        .await
        .unwrap();
    assert_eq!(protection, Protection::ByReRegistration);
    assert!(mem.has_keep_flag(&id), "the re-registration set the flag");
    assert!(mem.is_protected(&id).await.unwrap());
}

#[tokio::test]
async fn before_803_a_flag_that_does_not_stick_is_not_protection() {
    let mem = InMemoryBackend::new();
    let id = registered(&mem, "[ds] e.vmdk").await;
    mem.set_flags_ignored(true);
    let protection = mem
        .protect_from_vm_delete(&id, &SendFence::none())
        .await
        .unwrap();
    assert_eq!(protection, Protection::NotKept);
    assert!(!protection.is_protected());
    assert!(!mem.has_keep_flag(&id));
    mem.set_flags_ignored(false);
    assert_eq!(
        mem.protect_from_vm_delete(&id, &SendFence::none())
            .await
            .unwrap(),
        Protection::FlagSet
    );
    assert!(mem.has_keep_flag(&id));
}

#[tokio::test(start_paused = true)]
async fn a_held_task_runs_until_ended_and_its_state_reads_like_vcenters() {
    let mem = std::sync::Arc::new(InMemoryBackend::new());
    let path: VolumePath = "[ds] t.vmdk".parse().expect("valid test path");
    mem.add_disk(&path);
    mem.inject(op::CREATE, Fault::HeldTask(Duration::from_secs(2)), 2);
    let heard = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let sink = heard.clone();
    let request = CreateVolumeRequest {
        path: path.clone(),
        name: "volmig-t".into(),
        cluster_id: "c".into(),
        storage_policy_name: None,
        fence: crate::backend::SendFence::none()
            .with_task_sink(move |task| sink.lock().unwrap().push(task.to_owned())),
    };
    let err = mem.create_volume(&request).await.unwrap_err();
    assert_eq!(err.fault, "TaskTimeout");
    assert!(err.outcome_unknown, "the task was sent and still runs");
    assert_eq!(*heard.lock().unwrap(), ["task-1"]);
    assert_eq!(mem.running_tasks(), ["task-1"]);
    assert_eq!(
        mem.create_task_state("task-1").await.unwrap(),
        TaskState::Running
    );
    assert!(mem.volumes_for(&path).is_empty());
    mem.end_task("task-1", None);
    let TaskState::Succeeded(id) = mem.create_task_state("task-1").await.unwrap() else {
        panic!("the task ended with a volume");
    };
    assert_eq!(mem.volumes_for(&path)[0].id, id);

    // A task ended while its caller follows it answers the caller.
    let ender = {
        let mem = mem.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            mem.end_task("task-2", Some(ErrorClass::Permanent));
        })
    };
    let err = mem.create_volume(&request).await.unwrap_err();
    ender.await.unwrap();
    assert_eq!(
        (err.fault.as_str(), err.outcome_unknown),
        ("CnsFault", false)
    );
    assert!(matches!(
        mem.create_task_state("task-2").await.unwrap(),
        TaskState::Failed(_)
    ));
    mem.forget_task("task-2");
    assert_eq!(
        mem.create_task_state("task-2").await.unwrap(),
        TaskState::Unknown
    );
    assert_eq!(mem.calls(op::TASK_INFO), 4);
}
