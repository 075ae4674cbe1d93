//! Self-test of the vCenter simulator harness (`tests/support/vcsim/`) and its Rust
//! test-support module: start-up line, raw SOAP against the simulator (including the
//! duplicate-registration behaviour volmig guards against), admin endpoints, stats,
//! restart, TLS and the datacenter-in-a-folder inventory.

#[path = "support/vcsim.rs"]
mod vcsim;

use std::time::Duration;

use vcsim::{SUPPORT_USER_AGENT, SessionVia, Vcsim, VcsimOptions, task_state, xml_texts};

const CLUSTER: &str = "volmig-selftest";

/// The datacenter path as it goes into a backing URL's `dcPath` (no leading slash).
fn dc_path(sim: &Vcsim) -> String {
    sim.datacenters[0].trim_start_matches('/').to_string()
}

async fn register(sim: &Vcsim, soap: &vcsim::RawSoap, name: &str, file: &str) -> String {
    soap.create_volume(name, &dc_path(sim), &sim.datastores[0].name, file, CLUSTER)
        .await
}

#[tokio::test]
async fn start_line_describes_the_inventory_and_creates_the_vmdks() {
    let opts = VcsimOptions {
        folders: vec!["a".into(), "b/c".into()],
        ..VcsimOptions::default().vmdks(3)
    };
    let sim = Vcsim::start(opts).await;
    println!("{sim:?}");
    assert!(sim.url.starts_with("https://127.0.0.1:"), "{}", sim.url);
    assert!(sim.url.ends_with("/sdk"), "{}", sim.url);
    assert_eq!(sim.admin, sim.url.replace("/sdk", "/debug"));
    assert_eq!(sim.datacenter, "DC0");
    assert_eq!(sim.datacenters, vec!["/DC0".to_string()]);
    assert_eq!(sim.datastores.len(), 1);
    let ds = &sim.datastores[0];
    assert_eq!(ds.name, "LocalDS_0");
    assert_eq!(ds.inventory_path, "/DC0/datastore/LocalDS_0");
    assert!(ds.dir.is_absolute());
    for folder in ["a", "b/c"] {
        for n in 1..=3 {
            let path = sim.vmdk_path(folder, n);
            let file = sim.vmdk_file(&path).expect("datastore known");
            assert!(file.is_file(), "{path} -> {}", file.display());
        }
        assert!(!ds.dir.join(folder).join("disk-0004.vmdk").exists());
    }
    let cert = std::fs::read_to_string(sim.cert.as_ref().expect("TLS by default")).expect("cert");
    assert!(cert.starts_with("-----BEGIN CERTIFICATE-----"), "{cert}");
    // The admin listing starts empty.
    assert!(sim.volumes().await.is_empty());
}

#[tokio::test]
async fn same_vmdk_registered_twice_gives_two_volumes_and_delete_removes_one() {
    // The default release (6.5) predates `CnsAlreadyRegisteredFault`: every create makes a
    // volume. From 7.0.3 a second create after the first refuses instead (see
    // `from_703_a_registered_disk_is_refused_again_unless_creates_overlap`).
    let sim = Vcsim::start(VcsimOptions::default().vmdks(1)).await;
    let soap = sim.soap().await;
    let path = sim.vmdk_path("kubevols", 1);

    let first = register(&sim, &soap, "volmig-disk-0001", "kubevols/disk-0001.vmdk").await;
    let second = register(&sim, &soap, "volmig-disk-0001", "kubevols/disk-0001.vmdk").await;
    println!("two registrations of {path}: {first}, {second}");
    assert_ne!(
        first, second,
        "the simulator must hand out a new ID per create"
    );

    let volumes = sim.volumes().await;
    assert_eq!(volumes.len(), 2, "{volumes:?}");
    for v in &volumes {
        assert_eq!(v.backing_path, path);
        assert_eq!(v.name, "volmig-disk-0001");
        assert_eq!(v.volume_type, "BLOCK");
        assert_eq!(v.datastore, "LocalDS_0");
        assert_eq!(v.cluster_id, CLUSTER);
        assert!(
            v.backing_disk_url_path
                .contains("/folder/kubevols/disk-0001.vmdk?dcPath=DC0")
        );
        assert!(!v.create_time.is_empty());
    }
    // Oldest first.
    assert_eq!(volumes[0].id, first);
    assert_eq!(
        sim.duplicates().await.get(&path),
        Some(&vec![first.clone(), second.clone()])
    );

    assert!(sim.delete_volume(&first).await);
    assert!(
        !sim.delete_volume(&first).await,
        "deleting twice reports not found"
    );
    let left: Vec<String> = sim.volumes().await.into_iter().map(|v| v.id).collect();
    assert_eq!(left, vec![second]);
    assert!(sim.duplicates().await.is_empty());
    assert!(
        sim.vmdk_file(&path).expect("file").is_file(),
        "the vmdk stays"
    );
}

#[tokio::test]
async fn create_of_a_missing_vmdk_fails_and_registers_nothing() {
    let sim = Vcsim::start(VcsimOptions::default()).await;
    let soap = sim.soap().await;
    let err = soap
        .try_create_volume(
            "x",
            &dc_path(&sim),
            "LocalDS_0",
            "kubevols/none.vmdk",
            CLUSTER,
        )
        .await
        .expect_err("no such file");
    assert!(
        err.contains("CnsFault") && err.contains("was not found"),
        "{err}"
    );
    let err = soap
        .try_create_volume("x", "NoSuchDC", "LocalDS_0", "kubevols/none.vmdk", CLUSTER)
        .await
        .expect_err("no such datacenter");
    assert!(err.contains("datacenter"), "{err}");
    assert!(sim.volumes().await.is_empty());
}

#[tokio::test]
async fn stats_count_calls_per_method_and_peak_concurrency() {
    // The delay only keeps the calls in flight long enough for the poll below to see them;
    // nothing here asserts on durations.
    let sim = Vcsim::start(
        VcsimOptions::default()
            .vmdks(3)
            .delay("CnsCreateVolume", 1500),
    )
    .await;
    let soap = sim.soap().await;
    sim.reset_stats().await;

    let creates: Vec<_> = (1..=3)
        .map(|n| {
            let soap = soap.clone();
            let dc = dc_path(&sim);
            tokio::spawn(async move {
                let file = format!("kubevols/disk-{n:04}.vmdk");
                soap.create_volume(&format!("vol-{n}"), &dc, "LocalDS_0", &file, CLUSTER)
                    .await
            })
        })
        .collect();
    // Wait until the harness sees all three creates in flight at once.
    let mut seen = 0;
    for _ in 0..200 {
        seen = sim
            .stats()
            .await
            .in_flight
            .get("CnsCreateVolume")
            .copied()
            .unwrap_or(0);
        if seen == 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        seen, 3,
        "three delayed creates should be in flight together"
    );
    for c in creates {
        c.await.expect("create task");
    }

    let stats = sim.stats().await;
    println!("{stats:?}");
    assert_eq!(stats.calls("CnsCreateVolume"), 3);
    assert_eq!(stats.max_in_flight("CnsCreateVolume"), 3);
    assert_eq!(stats.calls_by(SUPPORT_USER_AGENT, "CnsCreateVolume"), 3);
    assert_eq!(
        stats.calls("RetrievePropertiesEx"),
        3,
        "one task read per create"
    );
    assert_eq!(stats.calls("Login"), 0, "login happened before the reset");
    assert!(stats.in_flight.is_empty(), "{:?}", stats.in_flight);
    assert_eq!(sim.volumes().await.len(), 3);

    sim.reset_stats().await;
    let stats = sim.stats().await;
    assert!(
        stats.calls.is_empty() && stats.max_in_flight.is_empty(),
        "{stats:?}"
    );
}

#[tokio::test]
async fn wrong_credentials_get_invalid_login_and_no_session_gets_not_authenticated() {
    let opts = VcsimOptions {
        username: "admin@vsphere.local".into(),
        password: "s3cr&t<pw>".into(),
        ..VcsimOptions::default()
    };
    let sim = Vcsim::start(opts).await;
    let err = sim
        .soap_anonymous()
        .login("admin@vsphere.local", "wrong")
        .await
        .err()
        .expect("wrong password rejected");
    assert!(
        err.contains("HTTP 500") && err.contains("InvalidLogin"),
        "{err}"
    );
    let err = sim
        .soap_anonymous()
        .login("user", "s3cr&t<pw>")
        .await
        .err()
        .expect("wrong user rejected");
    assert!(err.contains("InvalidLogin"), "{err}");

    let (status, text) = sim
        .soap_anonymous()
        .call("/vsanHealth", "<CnsQueryAllVolume xmlns=\"urn:vsan\"><_this type=\"CnsVolumeManager\">cns-volume-manager</_this><filter/><selection/></CnsQueryAllVolume>")
        .await;
    assert_eq!(status, 500);
    assert!(text.contains("NotAuthenticated"), "{text}");

    // The right credentials (with XML-special characters) work.
    let soap = sim.soap().await;
    assert!(soap.find_by_inventory_path("/DC0").await.is_some());
}

#[tokio::test]
async fn expired_sessions_get_not_authenticated_and_cns_state_stays() {
    let sim = Vcsim::start(VcsimOptions::default().vmdks(1)).await;
    let soap = sim.soap().await;
    register(&sim, &soap, "v1", "kubevols/disk-0001.vmdk").await;
    assert!(soap.find_by_inventory_path("/DC0").await.is_some());

    assert_eq!(sim.expire_sessions().await, 1);
    let (status, text) = soap
        .call(
            "/vsanHealth",
            "<CnsQueryAllVolume xmlns=\"urn:vsan\"><_this type=\"CnsVolumeManager\">\
             cns-volume-manager</_this><filter/><selection/></CnsQueryAllVolume>",
        )
        .await;
    assert_eq!(status, 500, "{text}");
    assert!(text.contains("NotAuthenticated"), "{text}");
    assert_eq!(sim.expire_sessions().await, 0, "nothing left to expire");

    let soap = sim.soap().await;
    assert!(soap.find_by_inventory_path("/DC0").await.is_some());
    assert_eq!(sim.volumes().await.len(), 1);
}

#[tokio::test]
async fn a_vmdk_created_later_is_visible_to_query_virtual_disk_uuid() {
    let sim = Vcsim::start(VcsimOptions::default()).await;
    let soap = sim.soap().await;
    let dc = soap
        .find_by_inventory_path("/DC0")
        .await
        .expect("datacenter");
    let path = "[LocalDS_0] late/new disk ü.vmdk";

    let err = soap
        .query_disk_uuid(&dc, path)
        .await
        .expect_err("not there yet");
    assert!(err.contains("FileNotFound"), "{err}");

    let file = sim.create_vmdk(path).await;
    assert!(file.is_file());
    assert_eq!(Some(file), sim.vmdk_file(path));
    let uuid = soap
        .query_disk_uuid(&dc, path)
        .await
        .expect("now it exists");
    assert_eq!(uuid.len(), 36, "{uuid}");

    // A file written straight into the datastore directory counts too.
    let direct = sim.datastores[0].dir.join("late/direct.vmdk");
    std::fs::write(&direct, "# Disk DescriptorFile\n").expect("write vmdk");
    soap.query_disk_uuid(&dc, "[LocalDS_0] late/direct.vmdk")
        .await
        .expect("direct file visible");

    // And CNS registers it, with the escaped path in the backing URL.
    let id = register(&sim, &soap, "late", "late/new disk ü.vmdk").await;
    let vols = sim.volumes_for(path).await;
    assert_eq!(vols.len(), 1);
    assert_eq!(vols[0].id, id);
}

#[tokio::test]
async fn restart_forgets_sessions_and_registrations_but_keeps_port_ca_and_files() {
    let mut sim = Vcsim::start(VcsimOptions::default().vmdks(1)).await;
    let soap = sim.soap().await;
    register(&sim, &soap, "v1", "kubevols/disk-0001.vmdk").await;
    assert_eq!(sim.volumes().await.len(), 1);
    let (url, ca) = (
        sim.url.clone(),
        std::fs::read(sim.cert.as_ref().expect("cert")).expect("ca"),
    );
    let dc = soap.find_by_inventory_path("/DC0").await.expect("dc");
    let uuid = soap
        .query_disk_uuid(&dc, &sim.vmdk_path("kubevols", 1))
        .await
        .expect("uuid");

    sim.restart().await;

    assert_eq!(sim.url, url, "same port after restart");
    assert_eq!(
        std::fs::read(sim.cert.as_ref().expect("cert")).expect("ca"),
        ca,
        "same CA"
    );
    assert!(sim.volumes().await.is_empty(), "registrations are gone");
    let (status, text) = soap
        .call("/sdk", "<FindByInventoryPath xmlns=\"urn:vim25\"><_this type=\"SearchIndex\">SearchIndex</_this><inventoryPath>/DC0</inventoryPath></FindByInventoryPath>")
        .await;
    // The old session cookie is unknown now (FindByInventoryPath needs a session).
    assert_eq!(status, 500, "{text}");
    assert!(text.contains("NotAuthenticated"), "{text}");
    let soap = sim.soap().await;
    let dc = soap.find_by_inventory_path("/DC0").await.expect("dc");
    let again = soap
        .query_disk_uuid(&dc, &sim.vmdk_path("kubevols", 1))
        .await
        .expect("vmdk survived");
    assert_eq!(again, uuid, "disk UUID is stable across restarts");

    sim.kill().await;
    assert!(
        tokio::net::TcpStream::connect(sim.host_port())
            .await
            .is_err(),
        "nothing listens while the harness is down"
    );
    sim.start_again().await;
    assert!(sim.volumes().await.is_empty());

    let status = sim.terminate().await;
    assert!(
        status.success(),
        "SIGTERM ends the harness with exit 0, got {status}"
    );
}

#[tokio::test]
async fn datacenter_inside_a_folder_and_plain_http() {
    let opts = VcsimOptions {
        datacenter_folder: Some("Prod".into()),
        plain_http: true,
        ..VcsimOptions::default().vmdks(1)
    };
    let sim = Vcsim::start(opts).await;
    assert!(sim.url.starts_with("http://127.0.0.1:"), "{}", sim.url);
    assert!(sim.cert.is_none());
    assert_eq!(sim.datacenters, vec!["/Prod/DC0".to_string()]);
    assert_eq!(
        sim.datastores[0].inventory_path,
        "/Prod/DC0/datastore/F0/LocalDS_0"
    );
    let soap = sim.soap().await;
    assert!(soap.find_by_inventory_path("/Prod/DC0").await.is_some());
    assert!(soap.find_by_inventory_path("/DC0").await.is_none());
    assert!(
        soap.find_by_inventory_path(&sim.datastores[0].inventory_path)
            .await
            .is_some()
    );
    // dcPath must name the datacenter with its folder.
    register(&sim, &soap, "in-folder", "kubevols/disk-0001.vmdk").await;
    let err = soap
        .try_create_volume("x", "DC0", "LocalDS_0", "kubevols/disk-0001.vmdk", CLUSTER)
        .await
        .expect_err("DC0 alone is not the datacenter path");
    assert!(err.contains("datacenter"), "{err}");
    assert_eq!(sim.volumes().await.len(), 1);
}

#[tokio::test]
async fn already_registered_fault_carries_the_existing_id() {
    let opts = VcsimOptions {
        already_registered_fault: true,
        ..VcsimOptions::default().vmdks(1)
    };
    let sim = Vcsim::start(opts).await;
    let soap = sim.soap().await;
    let id = register(&sim, &soap, "v", "kubevols/disk-0001.vmdk").await;
    let err = soap
        .try_create_volume(
            "v",
            &dc_path(&sim),
            "LocalDS_0",
            "kubevols/disk-0001.vmdk",
            CLUSTER,
        )
        .await
        .expect_err("already registered");
    assert!(err.contains("CnsAlreadyRegisteredFault"), "{err}");
    assert_eq!(
        xml_texts(&err, "id").iter().filter(|i| **i == id).count(),
        1,
        "{err}"
    );
    assert_eq!(sim.volumes().await.len(), 1);
}

/// CNS answers `CnsAlreadyRegisteredFault` (the fault exists since vSphere 7.0 Update 1:
/// the `7.0.3` and `8.0.3` releases) for a disk that is a CNS volume already, named by URL or
/// by its FCD ID (= the volume ID), carrying that volume's ID. Only creates in flight at
/// once both register: the duplicates volmig exists for.
#[tokio::test]
async fn from_703_a_registered_disk_is_refused_again_unless_creates_overlap() {
    let opts = VcsimOptions::default()
        .vmdks(1)
        .vcenter_version("7.0.3")
        .delay("CnsCreateVolume", 300);
    let sim = Vcsim::start(opts).await;
    let soap = sim.soap().await;
    let dc = dc_path(&sim);
    let file = "kubevols/disk-0001.vmdk";
    let (a, b) = tokio::join!(
        soap.try_create_volume("a", &dc, "LocalDS_0", file, CLUSTER),
        soap.try_create_volume("b", &dc, "LocalDS_0", file, CLUSTER)
    );
    let (a, b) = (a.expect("first"), b.expect("overlapping"));
    assert_ne!(a, b, "overlapping creates both register");
    let oldest = sim.volumes().await[0].id.clone();

    let err = soap
        .try_create_volume("c", &dc, "LocalDS_0", file, CLUSTER)
        .await
        .expect_err("by URL: registered already");
    assert!(err.contains("CnsAlreadyRegisteredFault"), "{err}");
    assert!(xml_texts(&err, "id").contains(&oldest), "{err}");
    for id in [&a, &b] {
        let task = soap
            .start_create_volume_by_disk_id("d", id, CLUSTER)
            .await
            .expect("task");
        let err = soap.volume_of_task(&task).await.expect_err("by ID");
        assert!(err.contains("CnsAlreadyRegisteredFault"), "{err}");
        assert!(xml_texts(&err, "id").contains(id), "carries {id}: {err}");
    }
    assert_eq!(sim.volumes().await.len(), 2);
}

/// From 8.0.3 the CSI driver protects an existing volume by registering it again by
/// `backingDiskId` = its ID: CNS sets `keepAfterDeleteVm` and answers
/// `CnsAlreadyRegisteredFault`. Below 8.0.3 the same call sets nothing.
#[tokio::test]
async fn on_803_registering_a_volume_again_by_its_id_sets_keep_after_delete_vm() {
    let sim = Vcsim::start(VcsimOptions::default().vmdks(1).vcenter_version("7.0.3")).await;
    let soap = sim.soap().await;
    let id = register(&sim, &soap, "pvc-driver", "kubevols/disk-0001.vmdk").await;
    let keeps = || async { sim.volumes().await[0].keep_after_delete_vm };
    assert!(!keeps().await, "7.0.3 registration leaves the flag unset");
    for (release, kept) in [("7.0.3", false), ("8.0.3", true)] {
        sim.set_vcenter_version(release).await;
        let task = soap
            .start_create_volume_by_disk_id("pvc-driver", &id, CLUSTER)
            .await
            .expect("task");
        let err = soap.volume_of_task(&task).await.expect_err("registered");
        assert!(err.contains("CnsAlreadyRegisteredFault"), "{err}");
        assert!(xml_texts(&err, "id").contains(&id), "{err}");
        assert_eq!(keeps().await, kept, "{release}");
        let fcds = sim.vslm_objects().await;
        assert!(
            fcds.iter()
                .any(|f| f.id == id && f.keep_after_delete_vm == kept),
            "{release}: {fcds:?}"
        );
    }
    assert_eq!(sim.volumes().await.len(), 1);
}

/// `vslmSetFlagsIgnored`: `VslmSetVStorageObjectControlFlags` answers success and sets
/// nothing, so only reading the flag back tells.
#[tokio::test]
async fn vslm_flags_can_be_made_not_to_stick() {
    let sim = Vcsim::start(VcsimOptions::default().vmdks(1)).await;
    let soap = sim.soap().await;
    let id = register(&sim, &soap, "v", "kubevols/disk-0001.vmdk").await;
    let vslm = soap.session_via(SessionVia::Header);
    for ignored in [true, false] {
        let m = sim
            .patch_modes(serde_json::json!({ "vslmSetFlagsIgnored": ignored }))
            .await;
        assert_eq!(m.vslm_set_flags_ignored, ignored);
        let (status, text) = vslm
            .vslm_set_control_flags(&id, &["keepAfterDeleteVm"])
            .await;
        assert_eq!(status, 200, "{text}");
        let (_, text) = vslm.vslm_retrieve(&id).await;
        let kept = (!ignored).to_string();
        assert_eq!(xml_texts(&text, "keepAfterDeleteVm"), [kept], "{text}");
        assert_eq!(sim.volumes().await[0].keep_after_delete_vm, !ignored);
    }
}

#[tokio::test]
async fn queries_filter_by_name_and_page_with_the_cursor() {
    let sim = Vcsim::start(VcsimOptions::default().vmdks(3)).await;
    let soap = sim.soap().await;
    for n in 1..=3 {
        register(
            &sim,
            &soap,
            &format!("vol-{n}"),
            &format!("kubevols/disk-{n:04}.vmdk"),
        )
        .await;
    }
    let query = |filter: &str| {
        format!(
            "<CnsQueryVolume xmlns=\"urn:vsan\"><_this type=\"CnsVolumeManager\">\
             cns-volume-manager</_this><filter>{filter}</filter></CnsQueryVolume>"
        )
    };
    let (status, text) = soap
        .call("/vsanHealth", &query("<names>vol-2</names>"))
        .await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(xml_texts(&text, "name"), vec!["vol-2".to_string()]);

    let page = "<cursor><offset>0</offset><limit>2</limit></cursor>";
    let (_, text) = soap.call("/vsanHealth", &query(page)).await;
    assert_eq!(
        xml_texts(&text, "name"),
        vec!["vol-1".to_string(), "vol-2".to_string()]
    );
    assert_eq!(xml_texts(&text, "offset"), vec!["2".to_string()]);
    assert_eq!(xml_texts(&text, "totalRecords"), vec!["3".to_string()]);
    let page = "<cursor><offset>2</offset><limit>2</limit></cursor>";
    let (_, text) = soap.call("/vsanHealth", &query(page)).await;
    assert_eq!(xml_texts(&text, "name"), vec!["vol-3".to_string()]);
    assert_eq!(xml_texts(&text, "offset"), vec!["3".to_string()]);
}

#[tokio::test]
async fn upstream_query_mode_ignores_the_name_filter() {
    let opts = VcsimOptions {
        upstream_queries: true,
        ..VcsimOptions::default().vmdks(2)
    };
    let sim = Vcsim::start(opts).await;
    let soap = sim.soap().await;
    register(&sim, &soap, "vol-1", "kubevols/disk-0001.vmdk").await;
    register(&sim, &soap, "vol-2", "kubevols/disk-0002.vmdk").await;
    let (status, text) = soap
        .call(
            "/vsanHealth",
            "<CnsQueryVolume xmlns=\"urn:vsan\"><_this type=\"CnsVolumeManager\">\
             cns-volume-manager</_this><filter><names>vol-2</names></filter></CnsQueryVolume>",
        )
        .await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(xml_texts(&text, "name").len(), 2, "{text}");
}

// ---- Modes for the unknown-outcome, credentials, version, VSLM, RegisterDisk and PBM work.

#[tokio::test]
async fn start_flags_set_every_mode_and_the_admin_endpoint_reports_them() {
    let defaults = Vcsim::start(VcsimOptions::default()).await;
    let m = defaults.modes().await;
    assert_eq!(
        (
            m.cns_task_duration_ms,
            m.drop_create_replies,
            m.fail_task_polls,
            m.fail_task_polls_window_ms
        ),
        (0, 0, 0, 0),
        "{m:?}"
    );
    assert_eq!(
        defaults.vcenter_version().await,
        ("6.5".into(), "6.5.0".into(), "6.5".into()),
        "govmomi's default stays the default"
    );
    drop(defaults);

    let opts = VcsimOptions {
        drop_create_replies: 2,
        fail_task_polls: 3,
        fail_task_polls_window: Some(Duration::from_millis(1500)),
        ..VcsimOptions::default()
            .cns_task_duration(Duration::from_secs(90))
            .vcenter_version("7.0.3")
    };
    let sim = Vcsim::start(opts).await;
    assert_eq!(sim.cns_task_duration().await, Duration::from_secs(90));
    assert_eq!(sim.drop_create_replies().await, 2);
    assert_eq!(sim.fail_task_polls().await, 3);
    assert_eq!(
        sim.fail_task_polls_window().await,
        Duration::from_millis(1500)
    );
    assert_eq!(
        sim.vcenter_version().await,
        ("7.0.3".into(), "7.0.3".into(), "7.0.3.0".into())
    );
    // A partial patch changes only what it names.
    let m = sim
        .patch_modes(serde_json::json!({ "dropCreateReplies": 0 }))
        .await;
    assert_eq!((m.drop_create_replies, m.fail_task_polls), (0, 3));
}

#[tokio::test]
async fn slow_create_tasks_run_first_and_create_the_volume_when_they_complete() {
    let sim = Vcsim::start(
        VcsimOptions::default()
            .vmdks(2)
            .cns_task_duration(Duration::from_millis(1500)),
    )
    .await;
    let soap = sim.soap().await;
    let task = soap
        .start_create_volume(
            "slow",
            &dc_path(&sim),
            "LocalDS_0",
            "kubevols/disk-0001.vmdk",
            CLUSTER,
        )
        .await
        .expect("the task comes back at once");
    let (status, first_poll) = soap.poll_task(&task).await;
    assert_eq!(status, 200, "{first_poll}");
    assert_eq!(
        task_state(&first_poll).as_deref(),
        Some("running"),
        "{first_poll}"
    );
    assert!(
        xml_texts(&first_poll, "id").is_empty(),
        "no result yet: {first_poll}"
    );
    assert!(
        sim.volumes().await.is_empty(),
        "no volume while the task runs"
    );

    let done = soap.wait_task(&task, Duration::from_secs(30)).await;
    assert_eq!(task_state(&done).as_deref(), Some("success"), "{done}");
    let id = xml_texts(&done, "id")
        .first()
        .cloned()
        .expect("volume id in the result");
    let volumes = sim.volumes().await;
    assert_eq!(volumes.len(), 1, "{volumes:?}");
    assert_eq!(volumes[0].id, id);
    assert_eq!(volumes[0].backing_path, sim.vmdk_path("kubevols", 1));

    // Switched off at run time: the next task is complete when its reply arrives.
    sim.set_cns_task_duration(Duration::ZERO).await;
    assert_eq!(sim.cns_task_duration().await, Duration::ZERO);
    let task = soap
        .start_create_volume(
            "fast",
            &dc_path(&sim),
            "LocalDS_0",
            "kubevols/disk-0002.vmdk",
            CLUSTER,
        )
        .await
        .expect("task");
    let text = soap.task_result(&task).await;
    assert_eq!(task_state(&text).as_deref(), Some("success"), "{text}");
    assert_eq!(sim.volumes().await.len(), 2);
}

#[tokio::test]
async fn a_dropped_create_reply_still_creates_the_volume() {
    let sim = Vcsim::start(VcsimOptions::default().vmdks(1)).await;
    let soap = sim.soap().await;
    sim.set_drop_create_replies(1).await;
    assert_eq!(sim.drop_create_replies().await, 1);

    let err = soap
        .start_create_volume(
            "lost",
            &dc_path(&sim),
            "LocalDS_0",
            "kubevols/disk-0001.vmdk",
            CLUSTER,
        )
        .await
        .expect_err("the reply is lost");
    println!("lost reply: {err}");
    assert!(!err.contains("HTTP"), "no HTTP answer at all: {err}");
    assert_eq!(sim.drop_create_replies().await, 0, "one reply dropped");
    let volumes = sim.volumes().await;
    assert_eq!(volumes.len(), 1, "the create ran: {volumes:?}");
    let stats = sim.stats().await;
    assert_eq!(stats.dropped("CnsCreateVolume"), 1, "{stats:?}");
    assert_eq!(stats.calls("CnsCreateVolume"), 1, "{stats:?}");

    // The next create is answered again (and duplicates, as ever).
    let second = register(&sim, &soap, "lost", "kubevols/disk-0001.vmdk").await;
    assert_ne!(second, volumes[0].id);
    assert_eq!(sim.volumes().await.len(), 2);
}

#[tokio::test]
async fn task_polls_fail_with_503_for_a_count_or_a_window_after_each_create() {
    let sim = Vcsim::start(VcsimOptions::default().vmdks(2)).await;
    let soap = sim.soap().await;
    sim.set_fail_task_polls(2).await;
    let task = soap
        .start_create_volume(
            "p1",
            &dc_path(&sim),
            "LocalDS_0",
            "kubevols/disk-0001.vmdk",
            CLUSTER,
        )
        .await
        .expect("create is not a poll");
    for n in 1..=2 {
        let (status, text) = soap.poll_task(&task).await;
        assert_eq!(status, 503, "poll {n}: {text}");
    }
    assert_eq!(sim.fail_task_polls().await, 0);
    assert!(
        soap.find_by_inventory_path("/DC0").await.is_some(),
        "other calls work"
    );
    let (status, text) = soap.poll_task(&task).await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(task_state(&text).as_deref(), Some("success"));
    let stats = sim.stats().await;
    assert_eq!(stats.faults("RetrievePropertiesEx"), 2, "{stats:?}");

    // Window: polls fail while the last create is younger than the window.
    sim.set_fail_task_polls_window(Duration::from_millis(1000))
        .await;
    let task = soap
        .start_create_volume(
            "p2",
            &dc_path(&sim),
            "LocalDS_0",
            "kubevols/disk-0002.vmdk",
            CLUSTER,
        )
        .await
        .expect("task");
    let (status, text) = soap.poll_task(&task).await;
    assert_eq!(status, 503, "{text}");
    tokio::time::sleep(Duration::from_millis(1300)).await;
    let (status, text) = soap.poll_task(&task).await;
    assert_eq!(status, 200, "window over: {text}");
    assert_eq!(task_state(&text).as_deref(), Some("success"));
    assert_eq!(sim.volumes().await.len(), 2, "both creates ran");
}

#[tokio::test]
async fn credentials_change_at_run_time_and_failed_logins_are_counted_per_user_agent() {
    let mut sim = Vcsim::start(VcsimOptions::default()).await;
    let before = sim.soap().await;
    sim.set_credentials("rotated@vsphere.local", "n3w&pw").await;
    assert_eq!(
        sim.credentials().await,
        ("rotated@vsphere.local".into(), "n3w&pw".into())
    );
    sim.reset_stats().await;

    let err = sim
        .soap_anonymous()
        .login("user", "pass")
        .await
        .err()
        .expect("the old password is refused");
    assert!(err.contains("InvalidLogin"), "{err}");
    let after = sim.soap().await; // logs in with the new credentials
    assert!(after.find_by_inventory_path("/DC0").await.is_some());
    assert!(
        before.find_by_inventory_path("/DC0").await.is_some(),
        "a session opened before the rotation stays valid"
    );

    let stats = sim.stats().await;
    assert_eq!(stats.calls_by(SUPPORT_USER_AGENT, "Login"), 2, "{stats:?}");
    assert_eq!(stats.faults_by(SUPPORT_USER_AGENT, "Login"), 1, "{stats:?}");
    assert_eq!(stats.faults("Login"), 1, "{stats:?}");
}

#[tokio::test]
async fn reported_vcenter_version_is_set_by_flag_and_at_run_time() {
    let sim = Vcsim::start(VcsimOptions::default().vmdks(1).vcenter_version("7.0.0")).await;
    let content = sim.soap_anonymous().service_content().await;
    assert_eq!(
        xml_texts(&content, "apiVersion"),
        vec!["7.0.0.0".to_string()],
        "{content}"
    );
    assert_eq!(
        xml_texts(&content, "version"),
        vec!["7.0.0".to_string()],
        "{content}"
    );

    sim.set_vcenter_version("8.0.3").await;
    let content = sim.soap_anonymous().service_content().await;
    assert_eq!(
        xml_texts(&content, "apiVersion"),
        vec!["8.0.3.0".to_string()]
    );
    assert_eq!(xml_texts(&content, "version"), vec!["8.0.3".to_string()]);
    // From 8.0.3 on, registration itself sets keepAfterDeleteVm.
    let soap = sim.soap().await;
    let id = register(&sim, &soap, "v803", "kubevols/disk-0001.vmdk").await;
    let objects = sim.vslm_objects().await;
    assert!(
        objects.iter().any(|o| o.id == id && o.keep_after_delete_vm),
        "{objects:?}"
    );

    sim.set_vcenter_version("6.7.3").await;
    let content = sim.soap_anonymous().service_content().await;
    assert_eq!(xml_texts(&content, "apiVersion"), vec!["6.7.3".to_string()]);
    assert_eq!(xml_texts(&content, "version"), vec!["6.7.0".to_string()]);
}

#[tokio::test]
async fn vslm_sets_and_shows_keep_after_delete_vm_with_cookie_or_header_sessions() {
    let sim = Vcsim::start(VcsimOptions::default().vmdks(1)).await;
    let soap = sim.soap().await;
    let id = register(&sim, &soap, "fcd", "kubevols/disk-0001.vmdk").await;

    let (status, text) = sim.soap_anonymous().vslm_content().await;
    assert_eq!(status, 500, "no session: {text}");
    assert!(text.contains("NotAuthenticated"), "{text}");
    for via in [SessionVia::Cookie, SessionVia::Header] {
        let (status, text) = soap.session_via(via).vslm_content().await;
        assert_eq!(status, 200, "{via:?}: {text}");
        assert!(
            text.contains("<vStorageObjectManager type=\"VslmVStorageObjectManager\">VStorageObjectManager</vStorageObjectManager>"),
            "{text}"
        );
    }

    let vslm = soap.session_via(SessionVia::Header);
    let (status, text) = vslm.vslm_retrieve(&id).await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(
        xml_texts(&text, "keepAfterDeleteVm"),
        vec!["false".to_string()],
        "{text}"
    );
    assert!(
        text.contains("[LocalDS_0] kubevols/disk-0001.vmdk"),
        "{text}"
    );

    let (status, text) = vslm
        .vslm_set_control_flags(&id, &["keepAfterDeleteVm"])
        .await;
    assert_eq!(status, 200, "{text}");
    let (_, text) = vslm.vslm_retrieve(&id).await;
    assert_eq!(
        xml_texts(&text, "keepAfterDeleteVm"),
        vec!["true".to_string()],
        "{text}"
    );
    let objects = sim.vslm_objects().await;
    let obj = objects.iter().find(|o| o.id == id).expect("listed");
    assert!(obj.keep_after_delete_vm, "{obj:?}");
    assert_eq!(obj.control_flags, vec!["keepAfterDeleteVm".to_string()]);
    assert_eq!(obj.source, "CnsCreateVolume");

    let (status, text) = vslm.vslm_retrieve("no-such-fcd").await;
    assert_eq!(status, 500, "{text}");
    assert!(text.contains("NotFound"), "{text}");
    let stats = sim.stats().await;
    assert_eq!(
        stats.calls("VslmSetVStorageObjectControlFlags"),
        1,
        "{stats:?}"
    );
    assert_eq!(stats.calls("VslmRetrieveVStorageObject"), 3, "{stats:?}");
    assert_eq!(stats.calls("RetrieveContent"), 3, "{stats:?}");
}

#[tokio::test]
async fn create_specs_are_recorded_with_metadata_profile_backing_and_user_agent() {
    let sim = Vcsim::start(VcsimOptions::default().vmdks(1)).await;
    let soap = sim.soap().await;
    let url = soap.backing_url(&dc_path(&sim), "LocalDS_0", "kubevols/disk-0001.vmdk");
    let cluster = "<clusterType>KUBERNETES</clusterType><clusterId>c-1</clusterId>\
                   <vSphereUser>user</vSphereUser><clusterFlavor>VANILLA</clusterFlavor>\
                   <clusterDistribution>OpenShift</clusterDistribution>";
    let body = format!(
        "<CnsCreateVolume xmlns=\"urn:vsan\"><_this type=\"CnsVolumeManager\">\
         cns-volume-manager</_this><createSpecs><name>rec-1</name><volumeType>BLOCK\
         </volumeType><metadata><containerCluster>{cluster}</containerCluster>\
         <containerClusterArray>{cluster}</containerClusterArray></metadata>\
         <backingObjectDetails xsi:type=\"CnsBlockBackingDetails\"><backingDiskUrlPath>{}\
         </backingDiskUrlPath></backingObjectDetails><profile \
         xsi:type=\"VirtualMachineDefinedProfileSpec\"><profileId>aa6d5a82-1c88-45da-85d3-3d74b91a5bad\
         </profileId></profile></createSpecs></CnsCreateVolume>",
        vcsim::xml_escape(&url)
    );
    let (status, text) = soap.call("/vsanHealth", &body).await;
    assert_eq!(status, 200, "{text}");
    soap.create_volume(
        "rec-2",
        &dc_path(&sim),
        "LocalDS_0",
        "kubevols/disk-0001.vmdk",
        "c-2",
    )
    .await;

    let creates = sim.creates().await;
    assert_eq!(creates.len(), 2, "{creates:?}");
    let c = &creates[0];
    assert_eq!(
        (c.name.as_str(), c.volume_type.as_str()),
        ("rec-1", "BLOCK")
    );
    let cc = c.container_cluster.clone().expect("containerCluster");
    assert_eq!(
        (
            cc.cluster_type.as_str(),
            cc.cluster_id.as_str(),
            cc.vsphere_user.as_str(),
            cc.cluster_flavor.as_str(),
            cc.cluster_distribution.as_str()
        ),
        ("KUBERNETES", "c-1", "user", "VANILLA", "OpenShift")
    );
    assert_eq!(c.container_cluster_array, vec![cc]);
    assert_eq!(
        c.profile_ids,
        vec!["aa6d5a82-1c88-45da-85d3-3d74b91a5bad".to_string()]
    );
    assert_eq!(c.backing_disk_url_path, url);
    assert_eq!(c.backing_disk_id, "");
    assert_eq!(c.user_agent, SUPPORT_USER_AGENT);
    assert!(!c.time.is_empty());
    let c = &creates[1];
    assert_eq!(c.name, "rec-2");
    assert!(
        c.container_cluster_array.is_empty() && c.profile_ids.is_empty(),
        "{c:?}"
    );
    assert_eq!(
        c.container_cluster.as_ref().map(|x| x.cluster_id.as_str()),
        Some("c-2")
    );

    sim.clear_creates().await;
    assert!(sim.creates().await.is_empty());
}

#[tokio::test]
async fn register_disk_makes_an_fcd_that_cns_registers_by_backing_disk_id() {
    let sim = Vcsim::start(VcsimOptions::default().vmdks(1)).await;
    let soap = sim.soap().await;
    let url = soap.backing_url(&dc_path(&sim), "LocalDS_0", "kubevols/disk-0001.vmdk");
    let fcd = soap
        .register_disk(&url, "fcd-0001")
        .await
        .expect("RegisterDisk");
    let err = soap
        .register_disk(&url, "again")
        .await
        .expect_err("already an FCD");
    assert!(err.contains("InvalidArgument"), "{err}");
    let missing = soap.backing_url(&dc_path(&sim), "LocalDS_0", "kubevols/none.vmdk");
    assert!(soap.register_disk(&missing, "x").await.is_err());

    let task = soap
        .start_create_volume_by_disk_id("by-id", &fcd, CLUSTER)
        .await
        .expect("task");
    let first = soap.volume_of_task(&task).await.expect("registered");
    assert_eq!(first, fcd, "the CNS volume takes the FCD's ID");
    let task = soap
        .start_create_volume_by_disk_id("by-id", &fcd, CLUSTER)
        .await
        .expect("task");
    // Before `CnsAlreadyRegisteredFault` (the default release, 6.5), a second registration
    // of the FCD is a second volume; from 7.0.3 it is refused.
    let second = soap.volume_of_task(&task).await.expect("registered again");
    assert_ne!(second, first, "a second registration is a second volume");

    let path = sim.vmdk_path("kubevols", 1);
    let ids: Vec<String> = sim
        .volumes_for(&path)
        .await
        .into_iter()
        .map(|v| v.id)
        .collect();
    assert_eq!(ids, vec![first.clone(), second]);
    let objects = sim.vslm_objects().await;
    let obj = objects.iter().find(|o| o.id == fcd).expect("FCD listed");
    assert_eq!(
        (obj.source.as_str(), obj.backing_path.as_str()),
        ("RegisterDisk", path.as_str())
    );
    let creates = sim.creates().await;
    assert_eq!(creates[0].backing_disk_id, fcd);

    let task = soap
        .start_create_volume_by_disk_id("nope", "no-such-fcd", CLUSTER)
        .await
        .expect("task");
    let err = soap.volume_of_task(&task).await.expect_err("unknown FCD");
    assert!(err.contains("CnsFault"), "{err}");
}

#[tokio::test]
async fn pbm_resolves_a_default_policy_name_to_its_profile_id() {
    let sim = Vcsim::start(VcsimOptions::default()).await;
    let soap = sim.soap().await;
    assert_eq!(
        soap.pbm_profile_id("vSAN Default Storage Policy")
            .await
            .as_deref(),
        Some("aa6d5a82-1c88-45da-85d3-3d74b91a5bad")
    );
    assert_eq!(
        soap.session_via(SessionVia::Header)
            .pbm_profile_id("vSAN Default Storage Policy")
            .await
            .as_deref(),
        Some("aa6d5a82-1c88-45da-85d3-3d74b91a5bad"),
        "PBM accepts the vcSessionCookie header alone"
    );
    assert_eq!(soap.pbm_profile_id("No Such Policy").await, None);
    assert_eq!(sim.stats().await.calls("PbmQueryProfile"), 3);
}

/// The modes as volmig's own CNS client meets them (its task polls are
/// `RetrievePropertiesEx` on the Task, which the harness fails or slows).
#[tokio::test]
async fn volmig_cns_backend_meets_slow_tasks_failing_polls_and_lost_replies() {
    use volmig::VolumePath;
    use volmig::backend::cns::{CnsBackend, CnsConfig};
    use volmig::backend::{CreateVolumeRequest, VolumeBackend};

    const UA: &str = "volmig-harness-selftest";
    let sim = Vcsim::start(
        VcsimOptions::default()
            .vmdks(3)
            .cns_task_duration(Duration::from_millis(800)),
    )
    .await;
    let mut config = CnsConfig::new(
        sim.url.parse().expect("url"),
        sim.username.as_str(),
        sim.password.as_str(),
    );
    config.ca_file = sim.cert.clone();
    config.request_timeout = Duration::from_secs(10);
    config.user_agent = UA.to_string();
    let backend = CnsBackend::connect(config).await.expect("connect");
    let request = |n: usize| {
        let path = VolumePath::parse(&sim.vmdk_path("kubevols", n)).expect("path");
        CreateVolumeRequest {
            name: path.cns_volume_name(),
            path,
            cluster_id: CLUSTER.to_string(),
            storage_policy_name: None,
            fence: volmig::backend::SendFence::none(),
        }
    };

    // Slow task: the client keeps polling until the task succeeds.
    sim.reset_stats().await;
    let id = backend
        .create_volume(&request(1))
        .await
        .expect("slow create");
    let ids: Vec<String> = sim.volumes().await.into_iter().map(|v| v.id).collect();
    assert_eq!(ids, vec![id.to_string()]);
    let stats = sim.stats().await;
    assert!(
        stats.calls_by(UA, "RetrievePropertiesEx") >= 2,
        "polled while running: {stats:?}"
    );
    let creates = sim.creates().await;
    assert_eq!(creates.last().map(|c| c.user_agent.as_str()), Some(UA));

    // A failing poll: the client's create fails, the volume is still made.
    sim.set_cns_task_duration(Duration::ZERO).await;
    sim.set_fail_task_polls(50).await;
    let err = backend
        .create_volume(&request(2))
        .await
        .expect_err("poll fails");
    println!("failing poll: {err}");
    assert!(err.to_string().contains("503"), "{err}");
    sim.set_fail_task_polls(0).await;
    assert_eq!(
        sim.volumes_for(&sim.vmdk_path("kubevols", 2)).await.len(),
        1
    );

    // A lost reply: the client's create fails, the volume is still made.
    sim.set_drop_create_replies(1).await;
    let err = backend
        .create_volume(&request(3))
        .await
        .expect_err("reply lost");
    println!("lost reply: {err}");
    assert_eq!(
        sim.volumes_for(&sim.vmdk_path("kubevols", 3)).await.len(),
        1
    );
    assert_eq!(sim.stats().await.dropped("CnsCreateVolume"), 1);
}
