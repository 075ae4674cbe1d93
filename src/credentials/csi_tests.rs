use proptest::prelude::*;

use super::*;

/// A `csi-vsphere.conf` as the driver's documentation shows it.
const DRIVER_SAMPLE: &str = r#"
[Global]
cluster-id = "unique-kubernetes-cluster-id"
cluster-distribution = "Openshift"
ca-file = /etc/ssl/global-ca.pem

; the one vCenter
[VirtualCenter "1.2.3.4"]
insecure-flag = "true"
user = "administrator@vsphere.local"
password = "p;a#s\"s\\w"
port = "8443"
datacenters = "dc-1, /folder/dc-2,,"
"#;

#[test]
fn the_driver_sample_is_read() {
    let c = CsiConfig::parse(DRIVER_SAMPLE).unwrap();
    assert_eq!(
        c.cluster_id.as_deref(),
        Some("unique-kubernetes-cluster-id")
    );
    assert_eq!(c.cluster_distribution.as_deref(), Some("Openshift"));
    assert_eq!(c.host, "1.2.3.4");
    assert_eq!(c.port, 8443);
    assert_eq!(c.user.as_deref(), Some("administrator@vsphere.local"));
    assert_eq!(c.password.as_ref().unwrap().expose(), "p;a#s\"s\\w");
    assert_eq!(c.datacenters, ["dc-1", "/folder/dc-2"]);
    assert!(c.insecure);
    assert_eq!(c.ca_file, Some(PathBuf::from("/etc/ssl/global-ca.pem")));
    assert_eq!(c.url().unwrap().as_str(), "https://1.2.3.4:8443/sdk");
    let debug = format!("{c:?}");
    assert!(!debug.contains("p;a#s"), "{debug}");
}

#[test]
fn keys_and_sections_are_case_insensitive_and_comments_are_cut() {
    let c = CsiConfig::parse(
        "# comment\n[GLOBAL]\nCluster-ID = c1 ; trailing\n[virtualcenter \"VC.Example\"]\r\nUser = u # c\nPASSWORD = plain pass  \nInsecure-Flag\n",
    )
    .unwrap();
    assert_eq!(c.cluster_id.as_deref(), Some("c1"));
    assert_eq!(c.host, "VC.Example", "the host keeps its case");
    assert_eq!(c.user.as_deref(), Some("u"));
    assert_eq!(c.password.unwrap().expose(), "plain pass");
    assert!(c.insecure, "a bare key is true");
    assert_eq!(c.port, 443);
}

#[test]
fn virtual_center_values_override_global_ones() {
    let c = CsiConfig::parse(
        "[Global]\nuser = g\npassword = gp\nport = 1\ninsecure-flag = true\nca-file = /g\ndatacenters = gdc\n\
         [VirtualCenter \"vc\"]\nuser = v\nport = 2\ninsecure-flag = false\nca-file = /v\n",
    )
    .unwrap();
    assert_eq!(c.user.as_deref(), Some("v"));
    assert_eq!(c.password.unwrap().expose(), "gp");
    assert_eq!(c.port, 2);
    assert!(!c.insecure);
    assert_eq!(c.ca_file, Some(PathBuf::from("/v")));
    assert_eq!(c.datacenters, ["gdc"]);
}

#[test]
fn ipv6_hosts_get_brackets() {
    let c = CsiConfig::parse("[VirtualCenter \"fd00::1\"]\nuser=u\n").unwrap();
    assert_eq!(c.url().unwrap().as_str(), "https://[fd00::1]/sdk");
}

#[test]
fn exactly_one_vcenter_is_required() {
    let e = CsiConfig::parse("[Global]\ncluster-id = c\n").unwrap_err();
    assert!(e.to_string().contains("no [VirtualCenter"), "{e}");
    let e = CsiConfig::parse("[VirtualCenter \"a\"]\nuser=u\n[VirtualCenter \"b\"]\nuser=u\n")
        .unwrap_err();
    assert!(e.to_string().contains("exactly one vCenter"), "{e}");
    assert!(e.to_string().contains("a, b"), "{e}");
    let e = CsiConfig::parse("[VirtualCenter]\nuser=u\n").unwrap_err();
    assert!(e.to_string().contains("needs the vCenter host"), "{e}");
    // The same host twice is one vCenter (gcfg merges the sections).
    let c = CsiConfig::parse("[VirtualCenter \"a\"]\nuser=u\n[VirtualCenter \"a\"]\npassword=p\n")
        .unwrap();
    assert_eq!(c.user.as_deref(), Some("u"));
    assert_eq!(c.password.unwrap().expose(), "p");
}

#[test]
fn syntax_errors_name_the_line() {
    for (text, line, needle) in [
        ("user = u\n", 1, "before the first"),
        ("[Global]\n\n[VirtualCenter \"vc\n", 3, "unterminated"),
        ("[Global]\nuser = \"open\n", 2, "unterminated"),
        ("[Global]\nuser = a\\q\n", 2, "unknown escape"),
        ("[VirtualCenter \"vc\"]\nport = http\n", 2, "not a TCP port"),
        (
            "[VirtualCenter \"vc\"]\ninsecure-flag = maybe\n",
            2,
            "not a boolean",
        ),
        ("[Global]\n= x\n", 2, "expected `name = value`"),
    ] {
        match CsiConfig::parse(text) {
            Err(CsiConfigError::Syntax { line: l, message }) => {
                assert_eq!(l, line, "{text:?}: {message}");
                assert!(message.contains(needle), "{text:?}: {message}");
            }
            other => panic!("{text:?}: {other:?}"),
        }
    }
}

#[test]
fn continuation_lines_are_joined() {
    let c = CsiConfig::parse("[VirtualCenter \"vc\"]\ndatacenters = a,\\\n b\n").unwrap();
    assert_eq!(c.datacenters, ["a", "b"]);
}

#[test]
fn load_names_the_file() {
    let e = CsiConfig::load(Path::new("/nonexistent/csi-vsphere.conf")).unwrap_err();
    assert!(e.contains("/nonexistent/csi-vsphere.conf"), "{e}");
}

proptest! {
    #[test]
    fn never_panics_on_arbitrary_text(text in "\\PC*") {
        let _ = CsiConfig::parse(&text);
    }

    #[test]
    fn never_panics_on_ini_like_text(
        lines in proptest::collection::vec(
            "(\\[[A-Za-z\" \\\\]{0,12}\\]?|[a-z-]{0,8} ?=? ?[\"\\\\;#a-z \\t]{0,12}|[;#\\\\].*)",
            0..12,
        )
    ) {
        let _ = CsiConfig::parse(&lines.join("\n"));
    }

    #[test]
    fn quoted_values_round_trip(password in "\\PC*", user in "[^\\n]*", host in "[a-z0-9.:-]{1,20}") {
        let text = format!(
            "[Global]\ncluster-id = {}\n[VirtualCenter {}]\nuser = {}\npassword = {} ; note\n",
            quote("id"),
            quote(&host),
            quote(&user),
            quote(&password),
        );
        let c = CsiConfig::parse(&text).unwrap();
        let parsed = c.password.unwrap();
        prop_assert_eq!(parsed.expose(), password.as_str());
        prop_assert_eq!(c.user.unwrap_or_default(), user);
        prop_assert_eq!(c.host, host);
    }
}

/// Fails if `shown` repeats any 3 characters in a row of `secret`.
fn assert_secret_not_shown(shown: &str, secret: &str) {
    let chars: Vec<char> = secret.chars().collect();
    for window in chars.windows(3) {
        let part: String = window.iter().collect();
        assert!(
            !shown.contains(&part),
            "shows {part:?} of the value: {shown}"
        );
    }
}

#[test]
fn syntax_errors_name_line_section_and_key_never_the_value() {
    const SECRET: &str = "Qz7%Wv9&Kx3^Jm";
    let head = "# volmig\n[Global]\ncluster-id = c\n[VirtualCenter \"vc\"]\nuser = u\n";
    // (the damaged line, the key the error must name, what it must say)
    for (line, key, needle) in [
        (format!("password = \"{SECRET}"), "password", "unterminated"),
        (
            format!("password = {SECRET} \"tail"),
            "password",
            "unterminated",
        ),
        (
            "password = \"Qz7%\\qWv9&Kx3^Jm\"".to_owned(),
            "password",
            "unknown escape",
        ),
        (
            "password = Qz7%Wv9\\&Kx3^Jm".to_owned(),
            "password",
            "unknown escape",
        ),
        (
            format!("password = {SECRET}\\"),
            "password",
            "lone backslash",
        ),
        (format!("password {SECRET}"), "password", "expected `=`"),
        (format!("password: {SECRET}"), "password", "expected `=`"),
        (format!("port = {SECRET}"), "port", "not a TCP port"),
        (
            format!("insecure-flag = {SECRET}"),
            "insecure-flag",
            "not a boolean",
        ),
    ] {
        let text = format!("{head}{line}");
        let e = CsiConfig::parse(&text).unwrap_err();
        let shown = e.to_string();
        assert_secret_not_shown(&shown, SECRET);
        assert!(
            matches!(e, CsiConfigError::Syntax { line: 6, .. }),
            "{line:?}: {e:?}"
        );
        assert!(shown.starts_with("line 6: "), "{line:?}: {shown}");
        assert!(shown.contains(needle), "{line:?}: {shown}");
        assert!(shown.contains(key), "names the key: {line:?}: {shown}");
        assert!(
            shown.contains("[VirtualCenter]"),
            "names the section: {shown}"
        );
        assert_secret_not_shown(&shown, SECRET);
        assert!(!shown.contains("\\q") && !shown.contains("\\&"), "{shown}");
        assert_secret_not_shown(&format!("{e:?}"), SECRET);
    }
    // Lines that do not start with a key name: nothing of them is shown.
    for line in [
        SECRET.to_owned(),
        format!("\"{SECRET}\""),
        format!("= {SECRET}"),
        "Qz7!Wv9&Kx3^Jm = x".to_owned(),
    ] {
        let text = format!("{head}{line}\n");
        let e = CsiConfig::parse(&text).unwrap_err();
        let shown = e.to_string();
        assert_secret_not_shown(&shown, SECRET);
        assert!(shown.starts_with("line 6: "), "{line:?}: {shown}");
        assert!(shown.contains("[VirtualCenter]"), "{line:?}: {shown}");
        assert_secret_not_shown(&shown, SECRET);
        assert_secret_not_shown(&format!("{e:?}"), SECRET);
    }
    // Before the first section, a line with `=` names its key, never its value.
    let e = CsiConfig::parse(&format!("password = \"{SECRET}\"\n")).unwrap_err();
    let shown = e.to_string();
    assert!(
        shown.contains("line 1") && shown.contains("password"),
        "{shown}"
    );
    assert_secret_not_shown(&shown, SECRET);
}

#[test]
fn a_host_with_credentials_makes_no_url_and_is_not_shown() {
    for host in ["admin:Qz7%Wv9&Kx@vc", "admin@vc", "Qz7%Wv9&Kx@fd00::1"] {
        let c = CsiConfig::parse(&format!("[VirtualCenter \"{host}\"]\nuser = u\n")).unwrap();
        let e = c.url().unwrap_err().to_string();
        assert!(e.contains("credentials"), "{host}: {e}");
        assert_secret_not_shown(&e, "Qz7%Wv9&Kx");
        assert!(!e.contains("admin"), "{host}: {e}");
    }
    let e = CsiConfig::parse("[VirtualCenter \"a:Qz7%Wv9&Kx@b\"]\n[VirtualCenter \"c\"]\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("exactly one vCenter"), "{e}");
    assert_secret_not_shown(&e, "Qz7%Wv9&Kx");
}
