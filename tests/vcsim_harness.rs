//! Self-test of the vCenter simulator harness (`tests/support/vcsim/`) and its Rust
//! test-support module: start-up line, raw SOAP against the simulator (including the
//! duplicate-registration behaviour volmig guards against), admin endpoints, stats,
//! restart, TLS and the datacenter-in-a-folder inventory.

#[path = "support/vcsim.rs"]
mod vcsim;

use std::time::Duration;

use vcsim::{SUPPORT_USER_AGENT, Vcsim, VcsimOptions, xml_texts};

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
