use std::collections::BTreeMap;
use std::path::PathBuf;

use super::*;

fn error(operation: &'static str, class: ErrorClass, fault: &str) -> BackendError {
    BackendError::new(class, operation, fault, "the server's message")
}

const URL: &str = "https://vc.example/sdk";

#[test]
fn a_good_connect_passes_tls_login_and_version_naming_the_ca_file() {
    let version = VcenterVersion::from_strings("8.0.3", "8.0.3.0");
    let trust = Trust::CaFile(PathBuf::from("/etc/vc/ca.pem"));
    let (checks, usable) = connect_checks(URL, "admin", &trust, Ok(&version));
    assert!(usable);
    assert!(checks.iter().all(|c| c.ok && !c.warning), "{checks:?}");
    assert!(
        checks[0].detail.contains("/etc/vc/ca.pem"),
        "{}",
        checks[0].detail
    );
    assert!(checks[1].detail.contains("'admin'"));
    assert!(
        checks[2].detail.contains("backingDiskUrlPath"),
        "{}",
        checks[2].detail
    );
    assert!(
        checks[2].detail.contains("by registration"),
        "{}",
        checks[2].detail
    );
}

#[test]
fn a_pinned_thumbprint_is_named_as_the_trust() {
    let version = VcenterVersion::from_strings("8.0.3", "8.0.3.0");
    let trust = Trust::Thumbprint("AF:F2:33".to_owned());
    let (checks, usable) = connect_checks(URL, "admin", &trust, Ok(&version));
    assert!(usable);
    assert!(
        checks[0].detail.contains("pinned by thumbprint AF:F2:33"),
        "{}",
        checks[0].detail
    );
}

#[test]
fn insecure_is_a_warning() {
    let version = VcenterVersion::from_strings("7.0.0", "7.0.0.0");
    let (checks, _) = connect_checks(URL, "u", &Trust::Insecure, Ok(&version));
    assert!(checks[0].ok && checks[0].warning);
    assert!(
        checks[2].detail.contains("RegisterDisk"),
        "{}",
        checks[2].detail
    );
    assert!(checks[2].detail.contains("VSLM"), "{}", checks[2].detail);
}

#[test]
fn an_untrusted_certificate_fails_tls_saying_wrong_ca_and_skips_the_rest() {
    let trust = Trust::CaFile(PathBuf::from("/other-ca.pem"));
    let e = error(
        "RetrieveServiceContent",
        ErrorClass::Transient,
        "TlsCertificate",
    );
    let (checks, usable) = connect_checks(URL, "u", &trust, Err(&e));
    assert!(!usable);
    assert_eq!(checks[0].name, TLS);
    assert!(!checks[0].ok);
    assert!(
        checks[0]
            .fix
            .contains("wrong CA? set --vc-ca-file / vcenter.caBundle")
    );
    assert!(
        checks[0].detail.contains("/other-ca.pem"),
        "{}",
        checks[0].detail
    );
    assert!(
        checks[1..]
            .iter()
            .all(|c| !c.ok && c.detail.starts_with("not checked"))
    );
}

#[test]
fn a_refused_login_passes_tls_and_fails_login_with_invalid_login() {
    let e = error("Login", ErrorClass::NotAuthenticated, "InvalidLogin");
    let (checks, usable) = connect_checks(URL, "u", &Trust::SystemRoots, Err(&e));
    assert!(!usable);
    assert!(checks[0].ok);
    assert!(checks[0].detail.contains("system roots"));
    assert!(!checks[1].ok);
    assert!(
        checks[1]
            .fix
            .starts_with("InvalidLogin: check the credentials Secret")
    );
}

#[test]
fn an_unreachable_vcenter_fails_tls_with_what_to_check() {
    let e = error(
        "RetrieveServiceContent",
        ErrorClass::Transient,
        "ConnectionFailed",
    );
    let (checks, _) = connect_checks(URL, "u", &Trust::SystemRoots, Err(&e));
    assert!(!checks[0].ok);
    assert!(checks[0].fix.contains("--vc-url"), "{}", checks[0].fix);
}

#[test]
fn a_missing_datacenter_after_login_fails_the_version_line() {
    let e = error("Inventory", ErrorClass::Permanent, "DatacenterNotFound");
    let (checks, usable) = connect_checks(URL, "u", &Trust::SystemRoots, Err(&e));
    assert!(!usable);
    assert!(checks[0].ok && checks[1].ok && !checks[2].ok);
    assert!(checks[2].fix.contains("--datacenters"));
}

#[test]
fn cns_passes_on_an_answer_and_fails_on_an_error() {
    assert!(cns_check(Ok(0)).ok);
    let e = error("CnsQueryVolume", ErrorClass::Transient, "CnsFault");
    let failed = cns_check(Err(&e));
    assert!(!failed.ok);
    assert!(failed.detail.contains("CnsFault"));
}

#[test]
fn datastores_fail_naming_the_missing_one() {
    let mut resolved = BTreeMap::new();
    resolved.insert("LocalDS_0".to_owned(), Ok(()));
    resolved.insert(
        "NoSuchDS".to_owned(),
        Err(error("Resolve", ErrorClass::NotFound, "DatastoreNotFound")),
    );
    let check = datastores_check(&resolved, 3, 1);
    assert!(!check.ok);
    assert!(
        check.detail.contains("NoSuchDS (DatastoreNotFound"),
        "{}",
        check.detail
    );
    assert!(!check.detail.contains("LocalDS_0"), "{}", check.detail);
    assert!(check.detail.contains("1 PV(s) with an invalid volumePath"));
    resolved.remove("NoSuchDS");
    let passed = datastores_check(&resolved, 2, 0);
    assert!(passed.ok);
    assert_eq!(passed.detail, "2 in-tree PV(s); 1 found: LocalDS_0");
    assert!(datastores_check(&BTreeMap::new(), 0, 0).ok);
}

#[test]
fn configuration_warnings_turn_a_passed_tls_line_into_a_warning() {
    let passed = Check::pass(TLS, "verified");
    assert_eq!(with_config_warnings(passed.clone(), &[]), passed);
    let warned = with_config_warnings(passed, &["thumbprint is not supported".to_owned()]);
    assert!(warned.ok && warned.warning);
    assert_eq!(warned.detail, "verified; thumbprint is not supported");
    assert!(!warned.fix.is_empty());
    let failed = with_config_warnings(Check::fail(TLS, "x", "y"), &["w".to_owned()]);
    assert!(!failed.ok && !failed.warning);
    assert_eq!(failed.fix, "y");
}

#[test]
fn the_version_line_says_when_volmig_keeps_the_syncer_lease() {
    let keeps = "never hands the CSI driver's syncer Lease over";
    for old in [("7.0.0", "7.0.0.0"), ("6.7.0", "6.7.3")] {
        let check = version_check(&VcenterVersion::from_strings(old.0, old.1));
        assert!(check.detail.contains(keeps), "{old:?}: {}", check.detail);
    }
    for modern in [("7.0.3", "7.0.3.0"), ("8.0.3", "8.0.3.0")] {
        let check = version_check(&VcenterVersion::from_strings(modern.0, modern.1));
        assert!(
            !check.detail.contains(keeps),
            "{modern:?}: {}",
            check.detail
        );
    }
}
