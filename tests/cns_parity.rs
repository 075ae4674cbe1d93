//! Parity of the CNS backend with the vSphere CSI driver (docs/design.md §8.3, §8.4), against
//! the govmomi simulator harness with a switchable reported vCenter version: the create
//! spec as the harness received it (`/debug/cns/creates`), the `keepAfterDeleteVm` flag of
//! every FCD (`/debug/vslm/objects`) and which calls were made (`/debug/stats`). What the
//! simulator holds is always read from its own admin listing, never through the client
//! under test.

#![allow(
    clippy::unwrap_used,
    reason = "test helpers: a failed unwrap is a test failure"
)]

#[path = "support/vcsim.rs"]
mod vcsim;

use std::collections::BTreeSet;
use std::time::Duration;

use volmig::VolumePath;
use volmig::backend::cns::{ApiVersion, CnsBackend, CnsConfig, CnsOptions};
use volmig::backend::{
    CreateVolumeRequest, ErrorClass, Protection, SendFence, VolumeBackend, VolumeId,
};

use vcsim::{SimContainerCluster, Vcsim, VcsimOptions};

const CLUSTER: &str = "cluster-parity";
/// One of govmomi's PBM simulator policies and its profile ID.
const POLICY: &str = "vSAN Default Storage Policy";
const POLICY_ID: &str = "aa6d5a82-1c88-45da-85d3-3d74b91a5bad";

fn config(sim: &Vcsim) -> CnsConfig {
    let mut config = CnsConfig::new(
        sim.url.parse().unwrap(),
        sim.username.as_str(),
        sim.password.as_str(),
    );
    config.ca_file = sim.cert.clone();
    config.request_timeout = Duration::from_secs(30);
    config
}

async fn connect_with(sim: &Vcsim, options: CnsOptions) -> CnsBackend {
    CnsBackend::connect_with(config(sim), options)
        .await
        .unwrap_or_else(|e| panic!("connect to {}: {e}", sim.url))
}

async fn connect(sim: &Vcsim) -> CnsBackend {
    connect_with(sim, CnsOptions::default()).await
}

async fn start(version: &str, vmdks: usize) -> Vcsim {
    Vcsim::start(
        VcsimOptions::default()
            .vmdks(vmdks)
            .vcenter_version(version),
    )
    .await
}

fn request(sim: &Vcsim, n: usize, policy: Option<&str>) -> CreateVolumeRequest {
    let path = VolumePath::parse(&sim.vmdk_path("kubevols", n)).unwrap();
    CreateVolumeRequest {
        name: path.cns_volume_name(),
        path,
        cluster_id: CLUSTER.to_owned(),
        storage_policy_name: policy.map(str::to_owned),
        fence: volmig::backend::SendFence::none(),
    }
}

fn cluster(sim: &Vcsim, distribution: &str) -> SimContainerCluster {
    SimContainerCluster {
        cluster_type: "KUBERNETES".into(),
        cluster_id: CLUSTER.into(),
        vsphere_user: sim.username.clone(),
        cluster_flavor: "VANILLA".into(),
        cluster_distribution: distribution.into(),
    }
}

#[tokio::test]
async fn the_reported_version_is_read_at_connect() {
    let sim = start("6.7.3", 0).await;
    for (release, version, api) in [
        ("6.7.3", ApiVersion::new(6, 7, 0), ApiVersion::new(6, 7, 3)),
        ("6.7U3l", ApiVersion::new(6, 7, 0), ApiVersion::new(6, 7, 3)),
        ("7.0.0", ApiVersion::new(7, 0, 0), ApiVersion::new(7, 0, 0)),
        ("7.0.3", ApiVersion::new(7, 0, 3), ApiVersion::new(7, 0, 3)),
        ("8.0.3", ApiVersion::new(8, 0, 3), ApiVersion::new(8, 0, 3)),
    ] {
        sim.set_vcenter_version(release).await;
        let (_, about_version, about_api) = sim.vcenter_version().await;
        let backend = connect(&sim).await;
        let got = backend.version();
        assert_eq!(got.version_text, about_version, "{release}");
        assert_eq!(got.api_version_text, about_api, "{release}");
        assert_eq!(got.version, Some(version), "{release}");
        assert_eq!(got.api_version, Some(api), "{release}");
        let about_build = sim.modes().await.about_build;
        assert_eq!(got.build_text, about_build, "{release}");
        assert_eq!(got.build, about_build.parse().ok(), "{release}");
        assert_eq!(
            got.registers_disk_first(),
            release == "7.0.0" || release == "6.7U3l",
            "{release}"
        );
        assert_eq!(got.registration_protects(), release == "8.0.3", "{release}");
        backend.logout().await;
    }
}

#[tokio::test]
async fn on_703_every_registered_fcd_gets_keep_after_delete_vm() {
    let sim = start("7.0.3", 3).await;
    let backend = connect(&sim).await;
    let mut ids = BTreeSet::new();
    for n in 1..=3 {
        let id = backend
            .create_volume(&request(&sim, n, None))
            .await
            .unwrap();
        assert!(
            !backend.is_protected(&id).await.unwrap(),
            "7.0.3 registration leaves the flag unset"
        );
        assert_eq!(
            backend
                .protect_from_vm_delete(&id, &SendFence::none())
                .await
                .unwrap(),
            Protection::FlagSet
        );
        assert!(backend.is_protected(&id).await.unwrap());
        ids.insert(id.0);
    }
    // Setting it twice is harmless.
    let first = VolumeId(ids.iter().next().unwrap().clone());
    backend
        .protect_from_vm_delete(&first, &SendFence::none())
        .await
        .unwrap();

    let fcds = sim.vslm_objects().await;
    let fcd_ids: BTreeSet<String> = fcds.iter().map(|f| f.id.clone()).collect();
    assert_eq!(fcd_ids, ids, "one FCD per registered volume: {fcds:?}");
    for fcd in &fcds {
        assert!(fcd.keep_after_delete_vm, "{fcd:?}");
        assert!(
            fcd.control_flags.iter().any(|f| f == "keepAfterDeleteVm"),
            "{fcd:?}"
        );
    }
    let stats = sim.stats().await;
    assert_eq!(stats.calls("VslmSetVStorageObjectControlFlags"), 4);
    assert_eq!(
        stats.calls("RetrieveContent"),
        1,
        "the VSLM service content is read once"
    );
    // The CNS volumes are the harness's, with the IDs the backend returned.
    let volumes: BTreeSet<String> = sim.volumes().await.into_iter().map(|v| v.id).collect();
    assert_eq!(volumes, ids);
}

#[tokio::test]
async fn protecting_an_unknown_volume_is_not_found() {
    let sim = start("7.0.3", 0).await;
    for release in ["7.0.3", "8.0.3"] {
        sim.set_vcenter_version(release).await;
        let backend = connect(&sim).await;
        let missing = VolumeId::from("00000000-0000-0000-0000-000000000000");
        let err = backend
            .protect_from_vm_delete(&missing, &SendFence::none())
            .await
            .unwrap_err();
        assert_eq!(err.class, ErrorClass::NotFound, "{release}: {err}");
        let err = backend.is_protected(&missing).await.unwrap_err();
        assert_eq!(err.class, ErrorClass::NotFound, "{release}: {err}");
    }
    assert!(sim.creates().await.is_empty(), "nothing to register again");
}

/// volmig's own new registration on 8.0.3 sets the flag itself: protecting that volume
/// right after its create makes no call. `is_protected` reads the flag all the same.
#[tokio::test]
async fn on_803_registration_protects_and_no_vslm_call_is_made() {
    let sim = start("8.0.3", 2).await;
    let backend = connect(&sim).await;
    let mut ids = Vec::new();
    for n in 1..=2 {
        let id = backend
            .create_volume(&request(&sim, n, None))
            .await
            .unwrap();
        assert_eq!(
            backend
                .protect_from_vm_delete(&id, &SendFence::none())
                .await
                .unwrap(),
            Protection::ByRegistration
        );
        ids.push(id);
    }
    let stats = sim.stats().await;
    for method in [
        "RetrieveContent",
        "VslmSetVStorageObjectControlFlags",
        "VslmRetrieveVStorageObject",
    ] {
        assert_eq!(stats.calls(method), 0, "{method}: {:?}", stats.calls);
    }
    assert_eq!(stats.calls("CnsCreateVolume"), 2, "no re-registration");
    let fcds = sim.vslm_objects().await;
    assert_eq!(fcds.len(), 2, "{fcds:?}");
    assert!(fcds.iter().all(|f| f.keep_after_delete_vm), "{fcds:?}");
    for id in &ids {
        assert!(backend.is_protected(id).await.unwrap(), "read: {id}");
    }
    assert_eq!(
        sim.stats().await.calls("VslmSetVStorageObjectControlFlags"),
        0
    );
}

/// What the CSI driver's syncer does on a cache miss: a plain `CnsCreateVolume` of vmdk
/// `n` by backing URL, under a name of its own. Returns the volume ID.
async fn driver_registers(sim: &Vcsim, n: usize) -> VolumeId {
    let raw = sim.vmdk_path("kubevols", n);
    let file = raw.split_once("] ").unwrap().1;
    let id = sim
        .soap()
        .await
        .create_volume(
            &format!("pvc-driver-{n}"),
            &sim.datacenter,
            &sim.datastores[0].name,
            file,
            CLUSTER,
        )
        .await;
    VolumeId(id)
}

/// Whether the harness says the disk of volume `id` carries `keepAfterDeleteVm`.
async fn sim_keeps(sim: &Vcsim, id: &VolumeId) -> bool {
    let volumes = sim.volumes().await;
    let volume = volumes.iter().find(|v| v.id == id.0);
    volume
        .unwrap_or_else(|| panic!("no volume {id}: {volumes:?}"))
        .keep_after_delete_vm
}

/// A volume the driver registered before vCenter reached 8.0.3 carries no flag. From
/// 8.0.3 volmig protects it as the driver does: `CnsCreateVolume` by `backingDiskId` = its
/// ID, with the volume's own name, type and container clusters (CNS sets the flag and
/// answers `CnsAlreadyRegisteredFault`), and reports protection only after that call.
#[tokio::test]
async fn on_803_a_volume_registered_earlier_is_protected_by_registering_it_again() {
    let sim = start("7.0.3", 1).await;
    let id = driver_registers(&sim, 1).await;
    assert!(!sim_keeps(&sim, &id).await, "7.0.3 leaves the flag unset");
    sim.set_vcenter_version("8.0.3").await;
    let backend = connect(&sim).await;
    assert!(
        !backend.is_protected(&id).await.unwrap(),
        "the flag is read, not assumed"
    );
    sim.clear_creates().await;
    sim.reset_stats().await;

    let protection = backend
        .protect_from_vm_delete(&id, &SendFence::none())
        .await
        .unwrap();
    assert_eq!(protection, Protection::ByReRegistration);
    assert!(
        sim_keeps(&sim, &id).await,
        "the re-registration set the flag"
    );
    let creates = sim.creates().await;
    assert_eq!(creates.len(), 1, "one re-registration: {creates:?}");
    let spec = &creates[0];
    assert_eq!(
        (
            spec.backing_disk_id.as_str(),
            spec.backing_disk_url_path.as_str()
        ),
        (id.0.as_str(), "")
    );
    assert_eq!(
        (spec.name.as_str(), spec.volume_type.as_str()),
        ("pvc-driver-1", "BLOCK"),
        "the volume's own name and type"
    );
    let cc = spec.container_cluster.clone().expect("containerCluster");
    assert_eq!(
        (cc.cluster_type.as_str(), cc.cluster_id.as_str()),
        ("KUBERNETES", CLUSTER)
    );
    assert_eq!(cc.vsphere_user, sim.username);
    assert!(
        spec.datastores.is_empty() && spec.profile_ids.is_empty(),
        "{spec:?}"
    );
    let stats = sim.stats().await;
    assert_eq!(stats.calls("VslmSetVStorageObjectControlFlags"), 0);
    assert!(backend.is_protected(&id).await.unwrap());
    assert_eq!(sim.volumes().await.len(), 1, "no second volume");
}

/// Below 8.0.3 volmig sets `keepAfterDeleteVm` through VSLM and reads it back: a flag that
/// does not stick is not reported as protection.
#[tokio::test]
async fn below_803_a_flag_that_does_not_stick_is_not_protection() {
    let sim = start("7.0.3", 1).await;
    let backend = connect(&sim).await;
    let id = backend
        .create_volume(&request(&sim, 1, None))
        .await
        .unwrap();
    sim.patch_modes(serde_json::json!({ "vslmSetFlagsIgnored": true }))
        .await;
    let protection = backend
        .protect_from_vm_delete(&id, &SendFence::none())
        .await
        .unwrap();
    assert_eq!(protection, Protection::NotKept);
    assert!(!sim_keeps(&sim, &id).await);
    let stats = sim.stats().await;
    assert_eq!(stats.calls("VslmSetVStorageObjectControlFlags"), 1);
    assert_eq!(stats.calls("VslmRetrieveVStorageObject"), 1, "read back");

    sim.patch_modes(serde_json::json!({ "vslmSetFlagsIgnored": false }))
        .await;
    let protection = backend
        .protect_from_vm_delete(&id, &SendFence::none())
        .await
        .unwrap();
    assert_eq!(protection, Protection::FlagSet);
    assert!(sim_keeps(&sim, &id).await);
}

#[tokio::test]
async fn the_703_create_spec_is_the_drivers_with_url_path_and_policy() {
    let sim = start("7.0.3", 2).await;
    let backend = connect(&sim).await;
    let id = backend
        .create_volume(&request(&sim, 1, Some(POLICY)))
        .await
        .unwrap();
    backend
        .create_volume(&request(&sim, 2, Some(POLICY)))
        .await
        .unwrap();
    let creates = sim.creates().await;
    assert_eq!(creates.len(), 2, "{creates:?}");
    let spec = &creates[0];
    assert_eq!(spec.name, request(&sim, 1, None).name);
    assert_eq!(spec.volume_type, "BLOCK");
    assert_eq!(spec.container_cluster, Some(cluster(&sim, "")));
    assert_eq!(spec.container_cluster_array, vec![cluster(&sim, "")]);
    assert_eq!(spec.profile_ids, vec![POLICY_ID.to_owned()]);
    assert!(
        spec.backing_disk_url_path
            .contains("/folder/kubevols/disk-0001.vmdk?dcPath="),
        "{spec:?}"
    );
    assert_eq!(spec.backing_disk_id, "", "{spec:?}");
    let stats = sim.stats().await;
    assert_eq!(stats.calls("RegisterDisk"), 0);
    assert_eq!(
        stats.calls("PbmQueryProfile"),
        1,
        "the policy ID is cached after the first lookup"
    );
    assert_eq!(stats.calls("PbmRetrieveServiceContent"), 1);
    assert!(sim.volumes().await.iter().any(|v| v.id == id.0));
}

#[tokio::test]
async fn the_700_create_spec_names_a_registered_disk_by_id() {
    let sim = start("7.0.0", 1).await;
    let backend = connect_with(
        &sim,
        CnsOptions {
            cluster_distribution: "OpenShift".into(),
        },
    )
    .await;
    let id = backend
        .create_volume(&request(&sim, 1, Some(POLICY)))
        .await
        .unwrap();
    let creates = sim.creates().await;
    assert_eq!(creates.len(), 1, "{creates:?}");
    let spec = &creates[0];
    assert_eq!(spec.backing_disk_url_path, "", "{spec:?}");
    assert!(!spec.backing_disk_id.is_empty(), "{spec:?}");
    assert_eq!(spec.container_cluster, Some(cluster(&sim, "OpenShift")));
    assert_eq!(
        spec.container_cluster_array,
        vec![cluster(&sim, "OpenShift")]
    );
    assert_eq!(spec.profile_ids, vec![POLICY_ID.to_owned()]);
    let fcds = sim.vslm_objects().await;
    let registered = fcds
        .iter()
        .find(|f| f.id == spec.backing_disk_id)
        .unwrap_or_else(|| panic!("no FCD {} in {fcds:?}", spec.backing_disk_id));
    assert_eq!(registered.source, "RegisterDisk");
    assert_eq!(registered.backing_path, sim.vmdk_path("kubevols", 1));
    assert_eq!(sim.stats().await.calls("RegisterDisk"), 1);
    assert!(sim.volumes().await.iter().any(|v| v.id == id.0));
}

#[tokio::test]
async fn on_673_the_create_spec_uses_the_url_path() {
    let sim = start("6.7.3", 1).await;
    let backend = connect(&sim).await;
    backend
        .create_volume(&request(&sim, 1, None))
        .await
        .unwrap();
    let creates = sim.creates().await;
    assert_eq!(creates.len(), 1);
    assert!(!creates[0].backing_disk_url_path.is_empty(), "{creates:?}");
    assert_eq!(creates[0].backing_disk_id, "");
    assert!(creates[0].profile_ids.is_empty(), "{creates:?}");
    assert_eq!(sim.stats().await.calls("RegisterDisk"), 0);
}

/// 6.7 Update 3l reports the same `about.apiVersion` (6.7.3) as 6.7 Update 3 GA; only its
/// build (17137327) makes the driver, and so volmig, register through `RegisterDisk` and
/// name the disk by `backingDiskId`.
#[tokio::test]
async fn on_673_update_3l_the_create_names_a_registered_disk_by_id() {
    let sim = start("6.7U3l", 1).await;
    let backend = connect(&sim).await;
    assert_eq!(backend.version().build, Some(17_137_327));
    let id = backend
        .create_volume(&request(&sim, 1, None))
        .await
        .unwrap();
    let creates = sim.creates().await;
    assert_eq!(creates.len(), 1, "{creates:?}");
    let spec = &creates[0];
    assert_eq!(spec.backing_disk_url_path, "", "{spec:?}");
    assert!(!spec.backing_disk_id.is_empty(), "{spec:?}");
    let fcds = sim.vslm_objects().await;
    let registered = fcds
        .iter()
        .find(|f| f.id == spec.backing_disk_id)
        .unwrap_or_else(|| panic!("no FCD {} in {fcds:?}", spec.backing_disk_id));
    assert_eq!(registered.source, "RegisterDisk");
    assert_eq!(registered.backing_path, sim.vmdk_path("kubevols", 1));
    assert_eq!(sim.stats().await.calls("RegisterDisk"), 1);
    assert!(sim.volumes().await.iter().any(|v| v.id == id.0));
}

#[tokio::test]
async fn an_unknown_policy_is_a_permanent_error_and_creates_nothing() {
    let sim = start("7.0.3", 1).await;
    let backend = connect(&sim).await;
    let err = backend
        .create_volume(&request(&sim, 1, Some("no-such-policy")))
        .await
        .unwrap_err();
    assert_eq!(err.class, ErrorClass::Permanent, "{err}");
    assert!(err.message.contains("'no-such-policy'"), "{err}");
    assert!(
        err.message.contains(POLICY),
        "lists the known policies: {err}"
    );
    assert!(sim.creates().await.is_empty());
    assert!(sim.volumes().await.is_empty());
}
