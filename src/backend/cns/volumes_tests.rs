//! CNS request serialization, task results and query pages from fixtures.

use super::*;
use crate::backend::cns::soap::{VIM_NS, method_xml, parse_response};
use crate::backend::cns::vim::{RetrieveResult, TaskInfo};
use crate::volume_path::VolumePath;

const CREATE_RESPONSE: &str = include_str!("fixtures/create_volume.xml");
const TASK_CREATE_SUCCESS: &str = include_str!("fixtures/task_create_success.xml");
const TASK_ALREADY_REGISTERED: &str = include_str!("fixtures/task_create_already_registered.xml");
const TASK_DELETE_SUCCESS: &str = include_str!("fixtures/task_delete_success.xml");
const TASK_DELETE_NOT_FOUND: &str = include_str!("fixtures/task_delete_not_found.xml");
const TASK_ERROR: &str = include_str!("fixtures/task_error.xml");
const TASK_RUNNING: &str = include_str!("fixtures/task_running.xml");
const QUERY: &str = include_str!("fixtures/query_volume.xml");

fn task_info(xml: &str) -> TaskInfo<BatchResult> {
    let parsed: Returnval<RetrieveResult<TaskInfo<BatchResult>>> = parse_response(xml).unwrap();
    let mut objects = parsed.returnval.unwrap().objects;
    let mut props = objects.remove(0).prop_set;
    assert_eq!(props[0].name, "info");
    props.remove(0).val
}

fn outcome(xml: &str) -> VolumeOutcome {
    let info = task_info(xml);
    assert_eq!(info.state, "success");
    volume_outcome(info.result.unwrap_or_default().volume_results.first())
}

fn create_xml(
    backing: CnsBlockBackingDetails<'_>,
    profile: Option<&str>,
    distribution: &str,
) -> String {
    let request = CnsCreateVolume {
        this: volume_manager(),
        create_specs: vec![CnsVolumeCreateSpec {
            name: "volmig-abc",
            volume_type: "BLOCK",
            datastores: vec![MoRef::new("Datastore", "datastore-11")],
            metadata: CnsVolumeMetadata::of(CnsContainerCluster::kubernetes(
                "cluster-1",
                "admin@vsphere.local",
                distribution,
            )),
            backing_object_details: backing,
            profile: profile
                .map(VirtualMachineDefinedProfileSpec::new)
                .into_iter()
                .collect(),
        }],
    };
    method_xml(
        "CnsCreateVolume",
        crate::backend::cns::soap::CNS_NS,
        &request,
    )
    .unwrap()
}

const CLUSTER: &str = "<clusterType>KUBERNETES</clusterType><clusterId>cluster-1</clusterId>\
    <vSphereUser>admin@vsphere.local</vSphereUser><clusterFlavor>VANILLA</clusterFlavor>";

#[test]
fn the_create_request_follows_the_wsdl() {
    let xml = create_xml(
        CnsBlockBackingDetails::url("https://vc/folder/a%20b.vmdk?dcPath=DC0&dsName=ds"),
        None,
        "",
    );
    assert_eq!(
        xml,
        format!(
            "<CnsCreateVolume xmlns=\"urn:vsan\"><_this type=\"CnsVolumeManager\">\
             cns-volume-manager</_this><createSpecs><name>volmig-abc</name>\
             <volumeType>BLOCK</volumeType><datastores type=\"Datastore\">datastore-11\
             </datastores><metadata><containerCluster>{CLUSTER}</containerCluster>\
             <containerClusterArray>{CLUSTER}</containerClusterArray></metadata>\
             <backingObjectDetails xsi:type=\"CnsBlockBackingDetails\"><backingDiskUrlPath>\
             https://vc/folder/a%20b.vmdk?dcPath=DC0&amp;dsName=ds</backingDiskUrlPath>\
             </backingObjectDetails></createSpecs></CnsCreateVolume>"
        )
    );
}

#[test]
fn the_create_request_names_a_registered_disk_a_policy_and_a_distribution() {
    let xml = create_xml(
        CnsBlockBackingDetails::disk_id("0c2d3e4f-1111-4b4b-8c8c-000000000042"),
        Some("4d5f673c-536f-11e6-beb8-9e71128cae77"),
        "OpenShift",
    );
    let cluster = format!("{CLUSTER}<clusterDistribution>OpenShift</clusterDistribution>");
    assert!(
        xml.contains(&format!(
            "<metadata><containerCluster>{cluster}</containerCluster><containerClusterArray>\
             {cluster}</containerClusterArray></metadata>"
        )),
        "{xml}"
    );
    assert!(
        xml.ends_with(
            "<backingObjectDetails xsi:type=\"CnsBlockBackingDetails\"><backingDiskId>\
             0c2d3e4f-1111-4b4b-8c8c-000000000042</backingDiskId></backingObjectDetails>\
             <profile xsi:type=\"VirtualMachineDefinedProfileSpec\"><profileId>\
             4d5f673c-536f-11e6-beb8-9e71128cae77</profileId></profile></createSpecs>\
             </CnsCreateVolume>"
        ),
        "{xml}"
    );
    assert!(!xml.contains("backingDiskUrlPath"), "{xml}");
}

#[test]
fn register_disk_request_and_answers() {
    use crate::backend::cns::soap::ResponseError;
    use crate::backend::cns::vim::{RegisterDisk, VStorageObject};
    let manager = MoRef::new("VcenterVStorageObjectManager", "VStorageObjectManager");
    let xml = method_xml(
        "RegisterDisk",
        VIM_NS,
        &RegisterDisk {
            this: &manager,
            path: "https://vc/folder/kubevols/disk-0001.vmdk?dcPath=DC0&dsName=LocalDS_0",
            name: Some("volmig-abc"),
        },
    )
    .unwrap();
    assert_eq!(
        xml,
        "<RegisterDisk xmlns=\"urn:vim25\"><_this type=\"VcenterVStorageObjectManager\">\
         VStorageObjectManager</_this><path>https://vc/folder/kubevols/disk-0001.vmdk?\
         dcPath=DC0&amp;dsName=LocalDS_0</path><name>volmig-abc</name></RegisterDisk>"
    );
    let parsed: Returnval<VStorageObject> =
        parse_response(include_str!("fixtures/register_disk.xml")).unwrap();
    let config = parsed.returnval.unwrap().config;
    assert_eq!(config.id.id, "0c2d3e4f-1111-4b4b-8c8c-000000000042");
    assert_eq!(config.keep_after_delete_vm, Some(false));
    let Err(ResponseError::Fault(fault)) = parse_response::<Returnval<VStorageObject>>(
        include_str!("fixtures/fault_already_exists.xml"),
    ) else {
        panic!("expected a fault");
    };
    let err = crate::backend::cns::fault::from_fault("RegisterDisk", &fault);
    assert_eq!(err.fault, "AlreadyExists", "{err}");
}

#[test]
fn the_service_content_names_the_vstorage_object_manager() {
    use crate::backend::cns::vim::ServiceContent;
    let parsed: Returnval<ServiceContent> =
        parse_response(include_str!("fixtures/service_content_803.xml")).unwrap();
    let content = parsed.returnval.unwrap();
    assert_eq!(
        content.vstorage_object_manager,
        Some(MoRef::new(
            "VcenterVStorageObjectManager",
            "VStorageObjectManager"
        ))
    );
    assert_eq!(content.about.version, "8.0.3");
}

#[test]
fn query_and_delete_requests_follow_the_wsdl() {
    let query = CnsQueryVolume {
        this: volume_manager(),
        filter: CnsQueryFilter {
            volume_ids: Vec::new(),
            names: vec!["volmig-abc"],
            datastores: Vec::new(),
            cursor: CnsCursor {
                offset: 500,
                limit: PAGE_SIZE,
                total_records: None,
            },
        },
    };
    let xml = method_xml("CnsQueryVolume", VIM_NS, &query).unwrap();
    assert!(
        xml.ends_with(
            "<filter><names>volmig-abc</names><cursor><offset>500</offset><limit>500</limit>\
             </cursor></filter></CnsQueryVolume>"
        ),
        "{xml}"
    );
    let delete = CnsDeleteVolume {
        this: volume_manager(),
        volume_ids: vec![CnsVolumeIdXml {
            id: "v-1".to_owned(),
        }],
        delete_disk: false,
    };
    let xml = method_xml("CnsDeleteVolume", VIM_NS, &delete).unwrap();
    assert!(
        xml.ends_with(
            "<volumeIds><id>v-1</id></volumeIds><deleteDisk>false</deleteDisk></CnsDeleteVolume>"
        ),
        "{xml}"
    );
}

#[test]
fn the_create_response_is_a_task() {
    let response: Returnval<MoRef> = parse_response(CREATE_RESPONSE).unwrap();
    assert_eq!(response.returnval, Some(MoRef::new("Task", "task-47")));
}

#[test]
fn a_successful_create_task_carries_the_volume_id() {
    match outcome(TASK_CREATE_SUCCESS) {
        VolumeOutcome::Ok(id) => assert_eq!(id.0, "78f028de-8399-4f3d-866d-d43fb8594990"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn already_registered_adopts_the_id_of_the_fault() {
    match outcome(TASK_ALREADY_REGISTERED) {
        VolumeOutcome::AlreadyRegistered(id, fault) => {
            assert_eq!(id.0, "3f1c0e2a-0000-4000-8000-000000000001");
            assert_eq!(fault.name, "CnsAlreadyRegisteredFault");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn delete_results_distinguish_success_and_not_found() {
    match outcome(TASK_DELETE_SUCCESS) {
        VolumeOutcome::Ok(id) => assert_eq!(id.0, "78f028de-8399-4f3d-866d-d43fb8594990"),
        other => panic!("{other:?}"),
    }
    match outcome(TASK_DELETE_NOT_FOUND) {
        VolumeOutcome::Failed(fault) => {
            let err = delete_error("CnsDeleteVolume", &fault);
            assert_eq!(err.class, ErrorClass::NotFound);
            assert_eq!(err.fault, "NotFound");
            assert!(err.message.contains("not found"), "{err}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_cns_fault_saying_not_found_is_not_found_on_delete_only() {
    let fault = Fault {
        name: "CnsFault".to_owned(),
        message: "The object or item referred to could not be found.".to_owned(),
        data: Default::default(),
    };
    assert_eq!(
        delete_error("CnsDeleteVolume", &fault).class,
        ErrorClass::NotFound
    );
    assert_eq!(
        fault::from_fault("CnsCreateVolume", &fault).class,
        ErrorClass::Transient
    );
}

#[test]
fn a_failed_task_carries_its_fault() {
    let info = task_info(TASK_ERROR);
    assert_eq!(info.state, "error");
    let fault = Fault::from_localized(info.error.unwrap());
    assert_eq!(fault.name, "NoPermission");
    assert_eq!(
        fault.message,
        "Permission to perform this operation was denied.; missing privilege Cns.Searchable"
    );
    assert_eq!(
        fault::from_fault("CnsCreateVolume", &fault).class,
        ErrorClass::Permanent
    );
    assert!(matches!(fault_outcome(fault), VolumeOutcome::Failed(_)));
}

#[test]
fn a_running_task_has_no_result_yet() {
    let info = task_info(TASK_RUNNING);
    assert_eq!(info.state, "running");
    assert!(info.result.is_none() && info.error.is_none());
    assert!(matches!(volume_outcome(None), VolumeOutcome::Missing));
}

#[test]
fn query_results_carry_name_and_backing_path() {
    let response: Returnval<CnsQueryResult> = parse_response(QUERY).unwrap();
    let result = response.returnval.unwrap();
    let cursor = result.cursor.unwrap();
    assert_eq!(
        (cursor.offset, cursor.limit, cursor.total_records),
        (1, 500, Some(1))
    );
    let volumes: Vec<_> = result
        .volumes
        .into_iter()
        .map(CnsVolumeXml::into_volume)
        .collect();
    assert_eq!(volumes.len(), 1);
    assert_eq!(volumes[0].id.0, "78f028de-8399-4f3d-866d-d43fb8594990");
    assert_eq!(
        volumes[0].name,
        "volmig-f81e42d4fb2213a27738a5e5069b6e82ecd78e599f16d87b45cd7782e61e240d"
    );
    assert_eq!(
        volumes[0].backing_path,
        Some(VolumePath::parse("[LocalDS_0] kubevols/disk-0001.vmdk").unwrap())
    );
}

#[test]
fn the_query_by_datastore_names_it_before_the_cursor() {
    let query = CnsQueryVolume {
        this: volume_manager(),
        filter: CnsQueryFilter {
            volume_ids: Vec::new(),
            names: Vec::new(),
            datastores: vec![MoRef::new("Datastore", "datastore-11")],
            cursor: CnsCursor {
                offset: 0,
                limit: PAGE_SIZE,
                total_records: None,
            },
        },
    };
    let xml = method_xml("CnsQueryVolume", VIM_NS, &query).unwrap();
    assert!(
        xml.ends_with(
            "<filter><datastores type=\"Datastore\">datastore-11</datastores><cursor>\
             <offset>0</offset><limit>500</limit></cursor></filter></CnsQueryVolume>"
        ),
        "{xml}"
    );
}

#[test]
fn a_volume_backs_a_disk_by_its_canonical_path() {
    let volume = |xml: &str| {
        let parsed: CnsVolumeXml = quick_xml::de::from_str(xml).unwrap();
        parsed.into_volume()
    };
    let by_url = volume(
        "<v><volumeId><id>a</id></volumeId><name>pvc-1</name><backingObjectDetails>\
         <backingDiskUrlPath>https://vc/folder/kubevols/disk-0001.vmdk?dcPath=DC0&amp;\
         dsName=LocalDS_0</backingDiskUrlPath></backingObjectDetails></v>",
    );
    let disk = VolumePath::parse("[LocalDS_0] kubevols/disk-0001.vmdk").unwrap();
    let spelled = VolumePath::parse("[LocalDS_0] /kubevols//disk-0001.vmdk").unwrap();
    assert_eq!(by_url.backing_path.as_ref(), Some(&disk));
    assert_eq!(
        by_url.backing_path.as_ref(),
        Some(&spelled),
        "canonical paths compare"
    );
    let other = VolumePath::parse("[LocalDS_0] kubevols/disk-0002.vmdk").unwrap();
    assert_ne!(by_url.backing_path.as_ref(), Some(&other));
    let elsewhere = VolumePath::parse("[LocalDS_1] kubevols/disk-0001.vmdk").unwrap();
    assert_ne!(by_url.backing_path.as_ref(), Some(&elsewhere));
    let no_backing = volume("<v><volumeId><id>b</id></volumeId><name>pvc-2</name></v>");
    assert_eq!(no_backing.backing_path, None);
}

#[test]
fn a_volume_without_a_usable_backing_has_no_path() {
    let xml = "<v><volumeId><id>x</id></volumeId><name>n</name><backingObjectDetails>\
               <capacityInMb>10</capacityInMb></backingObjectDetails></v>";
    let volume: CnsVolumeXml = quick_xml::de::from_str(xml).unwrap();
    let volume = volume.into_volume();
    assert_eq!((volume.id.0.as_str(), volume.backing_path), ("x", None));
    let xml = "<v><volumeId><id>y</id></volumeId><backingObjectDetails>\
               <backingDiskPath>[ds1] a/b.vmdk</backingDiskPath></backingObjectDetails></v>";
    let volume: CnsVolumeXml = quick_xml::de::from_str(xml).unwrap();
    assert_eq!(
        volume.into_volume().backing_path,
        Some(VolumePath::parse("[ds1] a/b.vmdk").unwrap())
    );
}

#[test]
fn query_results_carry_the_container_clusters_of_the_metadata() {
    // The simulator's answer names the cluster in `containerCluster` only.
    let response: Returnval<CnsQueryResult> = parse_response(QUERY).unwrap();
    let volume = response.returnval.unwrap().volumes.remove(0).into_volume();
    assert_eq!(volume.cluster_ids, ["cluster-1"]);
    // vCenter 7.0+: `containerClusterArray` lists every cluster using the volume; the
    // deprecated `containerCluster` repeats one of them. Each ID is kept once.
    let xml = "<v xmlns:xsi=\"http://www.w3.org/2001/XMLSchema-instance\"><volumeId><id>x</id>\
               </volumeId><name>volmig-x</name><metadata xsi:type=\"CnsVolumeMetadata\">\
               <containerCluster><clusterType>KUBERNETES</clusterType><clusterId>a</clusterId>\
               <vSphereUser>u</vSphereUser></containerCluster><entityMetadata \
               xsi:type=\"CnsKubernetesEntityMetadata\"><entityName>pv-1</entityName>\
               <clusterId>c</clusterId></entityMetadata><containerClusterArray>\
               <clusterType>KUBERNETES</clusterType><clusterId>b</clusterId></containerClusterArray>\
               <containerClusterArray><clusterType>KUBERNETES</clusterType><clusterId>a\
               </clusterId></containerClusterArray></metadata></v>";
    let volume: CnsVolumeXml = quick_xml::de::from_str(xml).unwrap();
    assert_eq!(volume.into_volume().cluster_ids, ["a", "b"]);
    // No metadata, or a cluster without an ID: no cluster.
    for xml in [
        "<v><volumeId><id>y</id></volumeId><name>volmig-y</name></v>",
        "<v><volumeId><id>z</id></volumeId><metadata><containerCluster><clusterId>\
         </clusterId></containerCluster></metadata></v>",
    ] {
        let volume: CnsVolumeXml = quick_xml::de::from_str(xml).unwrap();
        assert!(volume.into_volume().cluster_ids.is_empty(), "{xml}");
    }
}

#[test]
fn paging_follows_the_cursor_and_stops_when_servers_ignore_it() {
    let cursor = |offset, total| {
        Some(CnsCursor {
            offset,
            limit: PAGE_SIZE,
            total_records: total,
        })
    };
    // A full page with more to come.
    assert_eq!(next_offset(0, 500, cursor(500, Some(1200))), Some(500));
    assert_eq!(next_offset(1000, 200, cursor(1200, Some(1200))), None);
    // No total: a full page means "maybe more", a short page is the last.
    assert_eq!(next_offset(0, 500, cursor(500, None)), Some(500));
    assert_eq!(next_offset(500, 20, cursor(520, None)), None);
    // The simulator's zero cursor, an empty page, a page above the limit, no cursor.
    assert_eq!(next_offset(0, 3, cursor(0, Some(0))), None);
    assert_eq!(next_offset(0, 0, cursor(500, Some(1200))), None);
    assert_eq!(next_offset(0, 900, cursor(900, Some(2000))), None);
    assert_eq!(next_offset(0, 500, None), None);
    // A cursor that does not advance never loops.
    assert_eq!(next_offset(500, 500, cursor(500, Some(2000))), None);
}

#[test]
fn a_registration_again_by_id_sends_what_the_driver_sends() {
    // manager.go `ProtectVolumeFromVMDeletion` (8.0.3+): the queried name, type and
    // container clusters field for field, `backingDiskId` = the ID, nothing else.
    let xml = "<v><volumeId><id>fcd-1</id></volumeId><name>pvc-driver-1</name>\
               <volumeType>BLOCK</volumeType><datastoreUrl>ds:///a</datastoreUrl><metadata>\
               <containerCluster><clusterType>KUBERNETES</clusterType><clusterId>c-1</clusterId>\
               <vSphereUser>u@vsphere.local</vSphereUser><clusterFlavor>VANILLA</clusterFlavor>\
               <clusterDistribution>OpenShift</clusterDistribution></containerCluster>\
               <containerClusterArray><clusterType>KUBERNETES</clusterType><clusterId>c-2\
               </clusterId><vSphereUser>v</vSphereUser></containerClusterArray></metadata>\
               <backingObjectDetails><backingDiskId>fcd-1</backingDiskId></backingObjectDetails></v>";
    let volume: CnsVolumeXml = quick_xml::de::from_str(xml).unwrap();
    let request = CnsCreateVolume {
        this: volume_manager(),
        create_specs: vec![crate::backend::cns::ops::spec_again(&volume)],
    };
    let sent = method_xml(
        "CnsCreateVolume",
        crate::backend::cns::soap::CNS_NS,
        &request,
    );
    assert_eq!(
        sent.unwrap(),
        "<CnsCreateVolume xmlns=\"urn:vsan\"><_this type=\"CnsVolumeManager\">\
         cns-volume-manager</_this><createSpecs><name>pvc-driver-1</name><volumeType>BLOCK\
         </volumeType><metadata><containerCluster><clusterType>KUBERNETES</clusterType>\
         <clusterId>c-1</clusterId><vSphereUser>u@vsphere.local</vSphereUser><clusterFlavor>\
         VANILLA</clusterFlavor><clusterDistribution>OpenShift</clusterDistribution>\
         </containerCluster><containerClusterArray><clusterType>KUBERNETES</clusterType>\
         <clusterId>c-2</clusterId><vSphereUser>v</vSphereUser></containerClusterArray>\
         </metadata><backingObjectDetails xsi:type=\"CnsBlockBackingDetails\"><backingDiskId>\
         fcd-1</backingDiskId></backingObjectDetails></createSpecs></CnsCreateVolume>"
    );
    // No metadata: an empty `containerCluster`, as the driver's Go struct is written.
    let volume: CnsVolumeXml =
        quick_xml::de::from_str("<v><volumeId><id>x</id></volumeId><name>n</name></v>").unwrap();
    let spec = crate::backend::cns::ops::spec_again(&volume);
    let sent = method_xml("S", "urn:vsan", &spec).unwrap();
    assert!(
        sent.contains(
            "<metadata><containerCluster><clusterType/><clusterId/><vSphereUser/>\
                       </containerCluster></metadata>"
        ),
        "{sent}"
    );
}
