//! Tests of the directory (`kubernetes.io/basic-auth`) and Secret sources of
//! src/credentials/mod.rs.

use std::time::Duration;

use super::secret::{SecretConf, parse_ref};
use super::*;

#[test]
fn a_basic_auth_directory_is_read_again_when_kubelet_swaps_it() {
    let dir = tempfile::tempdir().unwrap();
    let mount = dir.path().join("mount");
    // As kubelet mounts a Secret: files are links into a `..data` directory that an
    // update replaces at once.
    let publish = |n: u32, user: &str, password: &str| {
        let data = dir.path().join(format!("data-{n}"));
        std::fs::create_dir(&data).unwrap();
        std::fs::write(data.join("username"), user).unwrap();
        std::fs::write(data.join("password"), password).unwrap();
        let link = dir.path().join("next");
        std::os::unix::fs::symlink(&data, &link).unwrap();
        std::fs::rename(&link, mount.join("..data")).unwrap();
    };
    std::fs::create_dir(&mount).unwrap();
    publish(1, "admin@vsphere.local\n", "one\n");
    for key in ["username", "password"] {
        std::os::unix::fs::symlink(format!("..data/{key}"), mount.join(key)).unwrap();
    }
    let source = CredentialSource::File(mount.clone());
    let c = source.load().unwrap();
    assert_eq!(c.username, "admin@vsphere.local");
    assert_eq!(
        c.password.expose(),
        "one",
        "one trailing line break dropped"
    );
    let probe = VersionProbe::new(source.clone(), Duration::from_secs(3600));
    let v1 = probe.current();
    publish(2, "admin@vsphere.local", " two \r\n");
    assert_ne!(probe.current(), v1, "a swapped Secret is seen at once");
    assert_eq!(source.load().unwrap().password.expose(), " two ");
}

#[test]
fn a_directory_without_a_password_file_says_so() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("username"), "u").unwrap();
    let e = CredentialSource::File(dir.path().to_owned())
        .load()
        .unwrap_err();
    assert!(e.to_string().contains("have no password"), "{e}");
    assert_eq!(
        CredentialSource::File(dir.path().to_owned()).version(),
        Version(None)
    );
}

#[test]
fn the_csi_config_secret_is_read_from_memory_at_each_login() {
    let conf = SecretConf::new(
        parse_ref("vmware-system-csi/vsphere-config-secret").unwrap(),
        Some("[VirtualCenter \"vc\"]\nuser = \"admin\"\npassword = \"one\"\n".into()),
    );
    let source = CredentialSource::CsiConfigSecret(conf.clone());
    assert_eq!(source.load().unwrap().password.expose(), "one");
    let v1 = source.version();
    conf.set(Some(
        "[VirtualCenter \"vc\"]\nuser = \"admin\"\npassword = \"two\"\n".into(),
    ));
    assert_ne!(source.version(), v1);
    assert_eq!(source.load().unwrap().password.expose(), "two");
    assert!(
        source
            .describe()
            .contains("vmware-system-csi/vsphere-config-secret")
    );
    conf.set(None);
    let e = source.load().unwrap_err();
    assert!(e.to_string().contains("missing"), "{e}");
    assert!(!format!("{source:?}").contains("two"));
}
