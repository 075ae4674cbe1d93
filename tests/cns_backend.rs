//! Acceptance tests of the vSphere CNS backend (docs/design.md §3.2) against a freshly
//! started govmomi vCenter simulator each (`tests/support/vcsim/`). What vCenter holds is
//! always read from the harness's own listing, never through the client under test.

#![allow(
    clippy::unwrap_used,
    reason = "test helpers: a failed unwrap is a test failure"
)]

#[path = "support/vcsim.rs"]
mod vcsim;

use std::collections::BTreeSet;
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::join_all;
use tracing_subscriber::fmt::MakeWriter;
use volmig::VolumePath;
use volmig::backend::cns::{CnsBackend, CnsConfig};
use volmig::backend::{
    BackendError, CreateVolumeRequest, ErrorClass, TaskState, VolumeBackend, VolumeId,
    list_all_volumes,
};
use volmig::registrar::{InMemoryStatusStore, RegisterError, Registrar, RegistrarConfig};

use vcsim::{Vcsim, VcsimOptions};

const CLUSTER: &str = "cluster-1";

/// A backend configuration for `sim`, trusting its CA.
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

async fn connect(sim: &Vcsim) -> CnsBackend {
    CnsBackend::connect(config(sim))
        .await
        .unwrap_or_else(|e| panic!("connect to {}: {e}", sim.url))
}

fn registrar(backend: &CnsBackend, max_concurrent: usize) -> Registrar {
    Registrar::new(
        Arc::new(backend.clone()),
        Arc::new(InMemoryStatusStore::default()),
        RegistrarConfig::new(CLUSTER)
            .with_max_concurrent(max_concurrent)
            .with_rate_limit(None),
    )
}

fn path(raw: &str) -> VolumePath {
    VolumePath::parse(raw).unwrap()
}

fn request(path: &VolumePath) -> CreateVolumeRequest {
    CreateVolumeRequest {
        path: path.clone(),
        name: path.cns_volume_name(),
        cluster_id: CLUSTER.to_owned(),
        storage_policy_name: None,
        fence: volmig::backend::SendFence::none(),
    }
}

/// Captured `tracing` output of the current thread (tests run on a current-thread runtime,
/// so every task of the test logs here).
#[derive(Clone, Default)]
struct LogBuffer(Arc<Mutex<Vec<u8>>>);

impl LogBuffer {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }

    fn install(&self) -> tracing::subscriber::DefaultGuard {
        let subscriber = tracing_subscriber::fmt()
            .with_writer(self.clone())
            .with_max_level(tracing::Level::TRACE)
            .with_ansi(false)
            .finish();
        tracing::subscriber::set_default(subscriber)
    }
}

impl Write for LogBuffer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for LogBuffer {
    type Writer = LogBuffer;

    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

#[tokio::test]
async fn register_creates_one_volume_with_the_expected_name_and_backing_and_adopts_it_later() {
    let sim = Vcsim::start(VcsimOptions::default().vmdks(1)).await;
    let backend = connect(&sim).await;
    let disk = path(&sim.vmdk_path("kubevols", 1));

    let registrar1 = registrar(&backend, 8);
    let first = registrar1.register(&disk).await.unwrap();

    let volumes = sim.volumes().await;
    assert_eq!(volumes.len(), 1, "{volumes:?}");
    let volume = &volumes[0];
    assert_eq!(volume.id, first.volume_id.0);
    assert_eq!(volume.name, disk.cns_volume_name());
    assert_eq!(volume.volume_type, "BLOCK");
    assert_eq!(volume.cluster_id, CLUSTER);
    assert_eq!(volume.backing_path, "[LocalDS_0] kubevols/disk-0001.vmdk");
    assert_eq!(
        volume.backing_disk_url_path,
        format!(
            "https://{}/folder/kubevols/disk-0001.vmdk?dcPath=DC0&dsName=LocalDS_0",
            sim.host_port()
        )
    );

    // Again through the same registrar, and through a fresh one (empty status store, as
    // after a crash between "CNS created it" and "status written"): same ID, one volume.
    let again = registrar1.register(&disk).await.unwrap();
    assert_eq!(again.volume_id, first.volume_id);
    let fresh = registrar(&backend, 8).register(&disk).await.unwrap();
    assert_eq!(fresh.volume_id, first.volume_id);
    assert!(fresh.adopted);
    assert_eq!(sim.volumes().await.len(), 1);
    assert_eq!(sim.stats().await.calls("CnsCreateVolume"), 1);
}

#[tokio::test]
async fn thirty_two_concurrent_registrations_of_one_vmdk_make_one_volume() {
    let sim = Vcsim::start(
        VcsimOptions::default()
            .vmdks(1)
            .delay("CnsCreateVolume", 200),
    )
    .await;
    let backend = connect(&sim).await;
    let disk = path(&sim.vmdk_path("kubevols", 1));
    let registrar = registrar(&backend, 8);

    let results = join_all((0..32).map(|_| registrar.register(&disk))).await;
    let ids: BTreeSet<VolumeId> = results.into_iter().map(|r| r.unwrap().volume_id).collect();
    assert_eq!(ids.len(), 1, "{ids:?}");

    let volumes = sim.volumes_for(&disk.canonical()).await;
    assert_eq!(volumes.len(), 1, "{volumes:?}");
    assert_eq!(Some(&volumes[0].id), ids.iter().next().map(|id| &id.0));
    assert!(sim.duplicates().await.is_empty());
}

#[tokio::test]
async fn thirty_two_concurrent_creates_without_the_registrar_make_duplicates() {
    // Proof that the test above can fail: the backend alone (like vCenter) does not dedupe.
    let sim = Vcsim::start(
        VcsimOptions::default()
            .vmdks(1)
            .delay("CnsCreateVolume", 200),
    )
    .await;
    let backend = connect(&sim).await;
    let disk = path(&sim.vmdk_path("kubevols", 1));
    let req = request(&disk);

    let results = join_all((0..32).map(|_| backend.create_volume(&req))).await;
    let ids: BTreeSet<VolumeId> = results.into_iter().map(|r| r.unwrap()).collect();
    assert_eq!(ids.len(), 32);

    let volumes = sim.volumes_for(&disk.canonical()).await;
    assert_eq!(volumes.len(), 32);
    assert_eq!(
        sim.duplicates().await.get(&disk.canonical()).map(Vec::len),
        Some(32)
    );
    assert!(sim.stats().await.max_in_flight("CnsCreateVolume") > 1);
}

#[tokio::test]
async fn two_hundred_vmdks_with_eight_concurrent_calls() {
    let sim = Vcsim::start(
        VcsimOptions::default()
            .vmdks(200)
            .delay("CnsCreateVolume", 50),
    )
    .await;
    let backend = connect(&sim).await;
    let registrar = registrar(&backend, 8);
    let disks: Vec<VolumePath> = (1..=200)
        .map(|n| path(&sim.vmdk_path("kubevols", n)))
        .collect();

    let results = join_all(disks.iter().map(|d| registrar.register(d))).await;
    let ids: BTreeSet<VolumeId> = results.into_iter().map(|r| r.unwrap().volume_id).collect();
    assert_eq!(ids.len(), 200);

    let volumes = sim.volumes().await;
    assert_eq!(volumes.len(), 200);
    assert!(sim.duplicates().await.is_empty());
    let listed: BTreeSet<String> = volumes.iter().map(|v| v.backing_path.clone()).collect();
    let expected: BTreeSet<String> = disks.iter().map(VolumePath::canonical).collect();
    assert_eq!(listed, expected);
    let listed_ids: BTreeSet<VolumeId> = volumes.iter().map(|v| VolumeId(v.id.clone())).collect();
    assert_eq!(listed_ids, ids);

    let stats = sim.stats().await;
    assert_eq!(stats.calls("CnsCreateVolume"), 200);
    let peak = stats.max_in_flight("CnsCreateVolume");
    assert!(peak <= 8, "{peak} creates were in flight at once");
    assert!(peak >= 2, "the limit was never exercised (peak {peak})");
}

#[tokio::test]
async fn a_vmdk_that_does_not_exist_is_disk_not_found_and_registers_nothing() {
    let sim = Vcsim::start(VcsimOptions::default().vmdks(1)).await;
    let backend = connect(&sim).await;
    let registrar = registrar(&backend, 8);

    for missing in [
        "[LocalDS_0] kubevols/missing.vmdk",
        "[NoSuchDatastore] kubevols/a.vmdk",
    ] {
        let err = registrar.register(&path(missing)).await.unwrap_err();
        assert!(
            matches!(err, RegisterError::DiskNotFound { .. }),
            "{missing}: {err:?}"
        );
        assert_eq!(err.reason(), "DiskNotFound");
        assert!(!err.is_retryable());
    }
    let err = backend
        .disk_uuid(&path("[LocalDS_0] kubevols/missing.vmdk"))
        .await
        .unwrap_err();
    assert_eq!(
        (err.class, err.fault.as_str()),
        (ErrorClass::NotFound, "FileNotFound")
    );
    assert!(
        err.message.contains("[LocalDS_0] kubevols/missing.vmdk"),
        "{err}"
    );

    assert!(sim.volumes().await.is_empty());
    assert_eq!(sim.stats().await.calls("CnsCreateVolume"), 0);
}

#[tokio::test]
async fn unregister_keeps_the_vmdk_removes_the_volume_and_may_be_repeated() {
    let sim = Vcsim::start(VcsimOptions::default().vmdks(1)).await;
    let backend = connect(&sim).await;
    let registrar = registrar(&backend, 8);
    let raw = sim.vmdk_path("kubevols", 1);
    let disk = path(&raw);
    let file = sim.vmdk_file(&raw).unwrap();
    let uuid = backend.disk_uuid(&disk).await.unwrap();

    let id = registrar.register(&disk).await.unwrap().volume_id;
    assert_eq!(sim.volumes().await.len(), 1);

    registrar.unregister(&disk).await.unwrap();
    assert!(sim.volumes().await.is_empty());
    assert!(file.is_file(), "{} was deleted", file.display());
    assert_eq!(backend.disk_uuid(&disk).await.unwrap(), uuid);

    registrar.unregister(&disk).await.unwrap();
    let err = backend.delete_volume(&id).await.unwrap_err();
    assert_eq!(err.class, ErrorClass::NotFound, "{err}");
    assert!(file.is_file());
}

#[tokio::test]
async fn wrong_password_is_a_typed_error_naming_url_and_user_never_the_password() {
    const PASSWORD: &str = "Corr3ct-Horse-Battery";
    const WRONG: &str = "Wr0ng-Staple-Secret";
    let logs = LogBuffer::default();
    let _guard = logs.install();
    let opts = VcsimOptions {
        username: "admin@vsphere.local".to_owned(),
        password: PASSWORD.to_owned(),
        ..VcsimOptions::default().vmdks(1)
    };
    let sim = Vcsim::start(opts).await;

    let mut wrong = config(&sim);
    wrong.password = WRONG.into();
    let err: BackendError = CnsBackend::connect(wrong).await.unwrap_err();
    assert_eq!(err.class, ErrorClass::NotAuthenticated);
    assert_eq!(err.fault, "InvalidLogin");
    let shown = format!("{err} / {err:?}");
    assert!(shown.contains(&sim.url), "{shown}");
    assert!(shown.contains("admin@vsphere.local"), "{shown}");

    // A working login and a few calls, so that the logs have something to leak.
    let backend = connect(&sim).await;
    let disk = path(&sim.vmdk_path("kubevols", 1));
    backend.disk_uuid(&disk).await.unwrap();
    backend.create_volume(&request(&disk)).await.unwrap();
    backend.logout().await;

    let text = logs.text();
    assert!(text.contains("logged in"), "logs were not captured: {text}");
    for secret in [PASSWORD, WRONG] {
        assert!(!shown.contains(secret), "password in the error: {shown}");
        assert!(!text.contains(secret), "password in the logs:\n{text}");
        assert!(!format!("{backend:?}").contains(secret));
    }
}

#[tokio::test]
async fn tls_is_verified_by_default_and_accepts_the_ca_file_or_explicit_insecure() {
    let logs = LogBuffer::default();
    let _guard = logs.install();
    let sim = Vcsim::start(VcsimOptions::default().vmdks(1)).await;
    assert!(sim.url.starts_with("https://"));
    let disk = path(&sim.vmdk_path("kubevols", 1));

    let mut system_roots = config(&sim);
    system_roots.ca_file = None;
    let err = CnsBackend::connect(system_roots).await.unwrap_err();
    assert_eq!(err.fault, "TlsCertificate", "{err}");
    assert!(err.message.contains(&sim.url), "{err}");
    assert_eq!(sim.stats().await.calls("Login"), 0);
    assert!(!logs.text().contains("--vc-insecure"));

    let with_ca = connect(&sim).await;
    with_ca.disk_uuid(&disk).await.unwrap();
    assert!(!logs.text().contains("--vc-insecure"));

    let mut insecure = config(&sim);
    insecure.ca_file = None;
    insecure.insecure = true;
    let backend = CnsBackend::connect(insecure).await.unwrap();
    backend.disk_uuid(&disk).await.unwrap();
    let text = logs.text();
    assert_eq!(text.matches("--vc-insecure").count(), 1, "{text}");
    assert!(text.contains("WARN"), "{text}");
}

/// `thumbprint` of csi-vsphere.conf (docs/design.md §8.5): only the certificate with that
/// SHA-1 is trusted, whatever its issuer; another one is refused naming both thumbprints.
#[tokio::test]
async fn a_thumbprint_pins_the_server_certificate_without_a_ca() {
    let sim = Vcsim::start(VcsimOptions::default().vmdks(1)).await;
    let disk = path(&sim.vmdk_path("kubevols", 1));
    let wrong = "00:11:22:33:44:55:66:77:88:99:AA:BB:CC:DD:EE:FF:00:11:22:33";
    let mut pinned_wrong = config(&sim);
    pinned_wrong.ca_file = None;
    pinned_wrong.thumbprint = Some(wrong.to_owned());
    let err = CnsBackend::connect(pinned_wrong).await.unwrap_err();
    assert_eq!(err.fault, "TlsCertificate", "{err}");
    assert!(err.message.contains("thumbprint mismatch"), "{err}");
    assert!(err.message.contains(wrong), "{err}");
    assert_eq!(
        sim.stats().await.calls("Login"),
        0,
        "no credentials were sent"
    );
    // The server's own thumbprint, as the refusal names it.
    let presented = err
        .message
        .split("the server presented ")
        .nth(1)
        .and_then(|rest| {
            rest.split(|c: char| !(c.is_ascii_hexdigit() || c == ':'))
                .next()
        })
        .filter(|t| t.len() == wrong.len())
        .unwrap_or_else(|| panic!("no presented thumbprint in {err}"))
        .to_owned();
    let mut pinned = config(&sim);
    pinned.ca_file = None;
    pinned.thumbprint = Some(presented.to_lowercase());
    let backend = CnsBackend::connect(pinned).await.unwrap();
    backend.disk_uuid(&disk).await.unwrap();
}

#[tokio::test]
async fn a_datastore_inventory_path_and_a_datacenter_inside_a_folder_resolve() {
    let opts = VcsimOptions {
        datacenter_folder: Some("Prod".to_owned()),
        ..VcsimOptions::default().vmdks(1)
    };
    let sim = Vcsim::start(opts).await;
    assert_eq!(sim.datacenters, vec!["/Prod/DC0".to_owned()]);
    let disk = path("[/Prod/DC0/datastore/LocalDS_0] kubevols/disk-0001.vmdk");

    for datacenters in [vec![], vec!["/Prod/DC0".to_owned()], vec!["DC0".to_owned()]] {
        let mut config = config(&sim);
        config.datacenters = datacenters.clone();
        let backend = CnsBackend::connect(config).await.unwrap();
        backend
            .disk_uuid(&disk)
            .await
            .unwrap_or_else(|e| panic!("{datacenters:?}: {e}"));
    }
    let backend = connect(&sim).await;
    let id = registrar(&backend, 8)
        .register(&disk)
        .await
        .unwrap()
        .volume_id;
    let volumes = sim.volumes().await;
    assert_eq!(volumes.len(), 1);
    assert_eq!(volumes[0].id, id.0);
    assert_eq!(
        volumes[0].backing_path,
        "[LocalDS_0] kubevols/disk-0001.vmdk"
    );
    assert!(
        volumes[0]
            .backing_disk_url_path
            .ends_with("?dcPath=Prod%2FDC0&dsName=LocalDS_0"),
        "{}",
        volumes[0].backing_disk_url_path
    );

    for unknown in ["/DC0", "NoSuchDC"] {
        let mut config = config(&sim);
        config.datacenters = vec![unknown.to_owned()];
        let err = CnsBackend::connect(config).await.unwrap_err();
        assert_eq!(
            (err.class, err.fault.as_str()),
            (ErrorClass::Permanent, "DatacenterNotFound")
        );
        assert!(
            err.message.contains("Prod/DC0"),
            "lists the known ones: {err}"
        );
    }
}

#[tokio::test]
async fn file_names_with_reserved_and_non_ascii_characters_are_escaped() {
    let sim = Vcsim::start(VcsimOptions::default()).await;
    let raw = "[LocalDS_0] my vols/a #1&b=c+d?e%f ü日本.vmdk";
    sim.create_vmdk(raw).await;
    let backend = connect(&sim).await;
    let disk = path(raw);

    let id = registrar(&backend, 8)
        .register(&disk)
        .await
        .unwrap()
        .volume_id;
    let volumes = sim.volumes().await;
    assert_eq!(volumes.len(), 1, "{volumes:?}");
    assert_eq!(volumes[0].id, id.0);
    assert_eq!(volumes[0].backing_path, raw);
    assert_eq!(
        volumes[0].backing_disk_url_path,
        format!(
            "https://{}/folder/my%20vols/a%20%231%26b%3Dc%2Bd%3Fe%25f%20%C3%BC%E6%97%A5%E6%9C%AC.vmdk\
             ?dcPath=DC0&dsName=LocalDS_0",
            sim.host_port()
        )
    );
    let found = backend
        .find_volumes(&disk.cns_volume_name(), &disk)
        .await
        .unwrap();
    assert_eq!(found.len(), 1);
    assert_eq!(found[0].backing_path.as_ref(), Some(&disk));
}

#[tokio::test]
async fn an_expired_session_is_renewed_once_transparently() {
    let mut sim = Vcsim::start(VcsimOptions::default().vmdks(1)).await;
    let backend = connect(&sim).await;
    let disk = path(&sim.vmdk_path("kubevols", 1));
    let uuid = backend.disk_uuid(&disk).await.unwrap();

    // vCenter forgets every session (and registration).
    sim.restart().await;
    assert_eq!(backend.disk_uuid(&disk).await.unwrap(), uuid);
    let stats = sim.stats().await;
    assert_eq!(stats.calls("Login"), 1);
    assert_eq!(
        stats.calls("QueryVirtualDiskUuid"),
        2,
        "one rejected, one retried"
    );

    // After an explicit logout the next call logs in again, too.
    backend.logout().await;
    backend.create_volume(&request(&disk)).await.unwrap();
    assert_eq!(sim.stats().await.calls("Login"), 2);
    assert_eq!(sim.volumes().await.len(), 1);
}

#[tokio::test]
async fn volumes_are_listed_through_every_page() {
    let opts = VcsimOptions {
        page_limit: 7,
        ..VcsimOptions::default().vmdks(20)
    };
    let sim = Vcsim::start(opts).await;
    let backend = connect(&sim).await;
    for n in 1..=20 {
        backend
            .create_volume(&request(&path(&sim.vmdk_path("kubevols", n))))
            .await
            .unwrap();
    }
    sim.reset_stats().await;

    let listed = list_all_volumes(&backend).await.unwrap();
    let listed_ids: BTreeSet<String> = listed.iter().map(|v| v.id.0.clone()).collect();
    let sim_ids: BTreeSet<String> = sim.volumes().await.into_iter().map(|v| v.id).collect();
    assert_eq!(listed.len(), 20);
    assert_eq!(listed_ids, sim_ids);
    assert!(
        sim.stats().await.calls("CnsQueryVolume") >= 3,
        "20 volumes in pages of 7"
    );
    let disk = path(&sim.vmdk_path("kubevols", 13));
    let volume = listed
        .iter()
        .find(|v| v.name == disk.cns_volume_name())
        .unwrap();
    assert_eq!(volume.backing_path.as_ref(), Some(&disk));
}

#[tokio::test]
async fn find_verifies_client_side_when_the_server_ignores_filters() {
    let opts = VcsimOptions {
        upstream_queries: true,
        ..VcsimOptions::default().vmdks(3)
    };
    let sim = Vcsim::start(opts).await;
    let backend = connect(&sim).await;
    let disks: Vec<VolumePath> = (1..=3)
        .map(|n| path(&sim.vmdk_path("kubevols", n)))
        .collect();
    let mut ids = Vec::new();
    for disk in &disks {
        ids.push(backend.create_volume(&request(disk)).await.unwrap());
    }

    let found = backend
        .find_volumes(&disks[1].cns_volume_name(), &disks[1])
        .await
        .unwrap();
    assert_eq!(
        found.iter().map(|v| &v.id).collect::<Vec<_>>(),
        vec![&ids[1]]
    );
    let none = backend
        .find_volumes("volmig-nothing", &path("[LocalDS_0] kubevols/other.vmdk"))
        .await
        .unwrap();
    assert!(none.is_empty(), "{none:?}");
    assert_eq!(list_all_volumes(&backend).await.unwrap().len(), 3);
}

#[tokio::test]
async fn already_registered_fault_adopts_the_existing_volume() {
    let opts = VcsimOptions {
        already_registered_fault: true,
        ..VcsimOptions::default().vmdks(1)
    };
    let sim = Vcsim::start(opts).await;
    let backend = connect(&sim).await;
    let disk = path(&sim.vmdk_path("kubevols", 1));

    let first = backend.create_volume(&request(&disk)).await.unwrap();
    let second = backend.create_volume(&request(&disk)).await.unwrap();
    assert_eq!(first, second);
    let volumes = sim.volumes().await;
    assert_eq!(volumes.len(), 1);
    assert_eq!(volumes[0].id, first.0);
}

#[tokio::test]
async fn duplicates_are_ordered_by_the_fcd_creation_time_not_by_id() {
    // CNS queries report no creation time; VSLM's `createTime` of the FCD gives it.
    let sim = Vcsim::start(VcsimOptions::default().vmdks(1)).await;
    let backend = connect(&sim).await;
    let disk = path(&sim.vmdk_path("kubevols", 1));
    let req = request(&disk);
    let first = backend.create_volume(&req).await.unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    let second = backend.create_volume(&req).await.unwrap();

    let mut found = backend.find_volumes(&req.name, &disk).await.unwrap();
    assert_eq!(found.len(), 2);
    assert!(found.iter().all(|v| v.created.is_none()), "{found:?}");
    volmig::backend::selection::date_volumes_of_one_disk(&backend, &mut found).await;
    let created = |id: &VolumeId| found.iter().find(|v| v.id == *id).unwrap().created;
    let (t1, t2) = (created(&first).unwrap(), created(&second).unwrap());
    assert!(t1 < t2, "{first} created {t1}, {second} created {t2}");
    assert_eq!(
        volmig::backend::selection::oldest(&found).unwrap().id,
        first,
        "the oldest is kept, whichever ID sorts first"
    );
    let unknown = VolumeId::from("00000000-0000-0000-0000-000000000000");
    let err = backend.creation_time(&unknown).await.unwrap_err();
    assert_eq!(err.class, ErrorClass::NotFound, "{err}");
}

/// The create's fence is asked right before each send: the first one, and the one after a
/// re-login when vCenter answered `NotAuthenticated` (docs/design.md §4.9). A fence that
/// says no by then calls the create off: nothing reaches CNS.
#[tokio::test]
async fn the_create_fence_is_asked_again_before_a_send_after_a_re_login() {
    let sim = Vcsim::start(VcsimOptions::default().vmdks(2)).await;
    let backend = connect(&sim).await;
    let asked = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let fenced = |disk: &VolumePath, allow: usize| {
        let asked = asked.clone();
        CreateVolumeRequest {
            fence: volmig::backend::SendFence::new(move || {
                let n = asked.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
                if n <= allow {
                    Ok(())
                } else {
                    Err("no longer the leader".to_owned())
                }
            }),
            ..request(disk)
        }
    };

    // The session is refused once: re-login, fence asked again, sent, created.
    let first = path(&sim.vmdk_path("kubevols", 1));
    sim.fail_calls("CnsCreateVolume", 1, "NotAuthenticated")
        .await;
    backend.create_volume(&fenced(&first, 2)).await.unwrap();
    assert_eq!(sim.injected("CnsCreateVolume").await, 1);
    assert_eq!(asked.load(std::sync::atomic::Ordering::SeqCst), 2);
    assert_eq!(sim.volumes().await.len(), 1);

    // Leadership lost while re-logging in: the second send is called off.
    asked.store(0, std::sync::atomic::Ordering::SeqCst);
    let second = path(&sim.vmdk_path("kubevols", 2));
    sim.fail_calls("CnsCreateVolume", 1, "NotAuthenticated")
        .await;
    let err = backend
        .create_volume(&fenced(&second, 1))
        .await
        .unwrap_err();
    assert!(err.is_called_off(), "{err}");
    assert_eq!(asked.load(std::sync::atomic::Ordering::SeqCst), 2);
    assert_eq!(sim.volumes().await.len(), 1, "nothing created for {second}");
}

/// docs/design.md §4.3: on a vCenter older than 7.0 Update 1 (the default profile, 6.5:
/// no `CnsAlreadyRegisteredFault`) the look-up by backing disk finds the vmdk's volume
/// under a foreign `pvc-…` name, through every page of the vmdk's datastore and of that
/// datastore only; a foreign-named volume of another vmdk on the same datastore, and one of
/// the same file on another datastore, are not found. `volumes_missed_by_name` runs it
/// only when the query by name found nothing, and never from 7.0 Update 1 on.
#[tokio::test]
async fn the_look_up_by_backing_disk_finds_a_foreign_name_on_old_vcenters() {
    let opts = VcsimOptions {
        page_limit: 2,
        datastores: 2,
        ..VcsimOptions::default().vmdks(4)
    };
    let sim = Vcsim::start(opts).await;
    let backend = connect(&sim).await;
    assert!(!backend.version().refuses_re_registration());
    let raw = |n| sim.vmdk_path("kubevols", n);
    let file = |n| raw(n).split_once("] ").unwrap().1.to_owned();
    let (dc, ds0, ds1) = (
        sim.datacenter.clone(),
        sim.datastores[0].name.clone(),
        sim.datastores[1].name.clone(),
    );
    let soap = sim.soap().await;
    // LocalDS_0, by creation: volmig's 1, pvc-other (2), volmig's 3, pvc-target (4), so
    // the target is on the second page of two volumes.
    backend
        .create_volume(&request(&path(&raw(1))))
        .await
        .unwrap();
    let other = soap
        .create_volume("pvc-other", &dc, &ds0, &file(2), CLUSTER)
        .await;
    backend
        .create_volume(&request(&path(&raw(3))))
        .await
        .unwrap();
    let target = soap
        .create_volume("pvc-target", &dc, &ds0, &file(4), CLUSTER)
        .await;
    // The same file name on LocalDS_1, and more volumes there than on LocalDS_0.
    for n in 1..=4 {
        let elsewhere = format!("[{ds1}] {}", file(n));
        sim.create_vmdk(&elsewhere).await;
        soap.create_volume(&format!("pvc-elsewhere-{n}"), &dc, &ds1, &file(n), CLUSTER)
            .await;
    }
    assert_eq!(sim.volumes().await.len(), 8);
    let disk = path(&raw(4));
    let ids = |found: &[volmig::backend::CnsVolume]| {
        found.iter().map(|v| v.id.0.clone()).collect::<Vec<_>>()
    };

    sim.reset_stats().await;
    let found = backend.volumes_backed_by(&disk).await.unwrap();
    assert_eq!(ids(&found), vec![target.clone()], "{found:?}");
    assert_eq!(found[0].name, "pvc-target");
    assert_eq!(
        sim.stats().await.calls("CnsQueryVolume"),
        2,
        "LocalDS_0's 4 volumes in pages of 2; LocalDS_1's are filtered out by CNS"
    );
    let other_disk = backend.volumes_backed_by(&path(&raw(2))).await.unwrap();
    assert_eq!(ids(&other_disk), vec![other]);
    let nothing = backend
        .volumes_backed_by(&path("[LocalDS_0] kubevols/none.vmdk"))
        .await
        .unwrap();
    assert!(nothing.is_empty(), "{nothing:?}");
    let no_datastore = backend
        .volumes_backed_by(&path("[nowhere] kubevols/disk-0004.vmdk"))
        .await
        .unwrap();
    assert!(no_datastore.is_empty(), "{no_datastore:?}");

    // What find_volumes adds: the look-up when the query by name found nothing, else no call.
    let by_name = backend
        .find_volumes(&disk.cns_volume_name(), &disk)
        .await
        .unwrap();
    let added = backend.volumes_missed_by_name(&disk, &[]).await.unwrap();
    assert_eq!(ids(&added), vec![target.clone()]);
    let own = path(&raw(3));
    let own_found = backend
        .find_volumes(&own.cns_volume_name(), &own)
        .await
        .unwrap();
    assert_eq!(own_found.len(), 1);
    sim.reset_stats().await;
    let skipped = backend
        .volumes_missed_by_name(&own, &own_found)
        .await
        .unwrap();
    assert!(skipped.is_empty(), "{skipped:?}");
    assert_eq!(sim.stats().await.calls("CnsQueryVolume"), 0);
    assert!(
        by_name.iter().all(|v| v.id.0 == target),
        "find_volumes keeps only this disk's volumes: {by_name:?}"
    );

    // From 7.0 Update 1 CNS refuses a second registration itself: no look-up, no call.
    sim.set_vcenter_version("7.0.3").await;
    let newer = connect(&sim).await;
    assert!(newer.version().refuses_re_registration());
    sim.reset_stats().await;
    let none = newer.volumes_missed_by_name(&disk, &[]).await.unwrap();
    assert!(none.is_empty(), "{none:?}");
    assert_eq!(sim.stats().await.calls("CnsQueryVolume"), 0);
}

/// docs/design.md §4.4: the create names its task to the request's task sink as soon as
/// vCenter answered with it; the task's state is read by that MoRef as the create reads it
/// (running, then its volume); a task vCenter does not know is `Unknown`.
#[tokio::test]
async fn a_create_task_is_named_and_read_by_its_moref() {
    let sim = Vcsim::start(
        VcsimOptions::default()
            .vmdks(1)
            .cns_task_duration(Duration::from_secs(3)),
    )
    .await;
    let mut short = config(&sim);
    short.task_timeout = Duration::from_millis(500);
    let backend = CnsBackend::connect(short).await.unwrap();
    let p = path(&sim.vmdk_path("kubevols", 1));
    let heard = Arc::new(Mutex::new(Vec::new()));
    let sink = heard.clone();
    let named = CreateVolumeRequest {
        fence: volmig::backend::SendFence::none()
            .with_task_sink(move |task| sink.lock().unwrap().push(task.to_owned())),
        ..request(&p)
    };
    let err = backend.create_volume(&named).await.unwrap_err();
    assert_eq!(
        (err.fault.as_str(), err.outcome_unknown),
        ("TaskTimeout", true),
        "{err}"
    );
    let task = match heard.lock().unwrap().as_slice() {
        [task] => task.clone(),
        other => panic!("one task named: {other:?}"),
    };
    assert_eq!(
        backend.create_task_state(&task).await.unwrap(),
        TaskState::Running
    );
    let mut state = TaskState::Running;
    for _ in 0..50 {
        state = backend.create_task_state(&task).await.unwrap();
        if state != TaskState::Running {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let TaskState::Succeeded(id) = state else {
        panic!("the task ended with its volume: {state:?}");
    };
    let volumes = sim.volumes_for(&p.canonical()).await;
    let ids: Vec<&str> = volumes.iter().map(|v| v.id.as_str()).collect();
    assert_eq!(ids, [id.0.as_str()]);
    assert_eq!(
        backend.create_task_state("task-999999").await.unwrap(),
        TaskState::Unknown,
        "a task vCenter does not know"
    );
}
