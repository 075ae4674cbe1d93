//! Envelope building and response/fault parsing against responses captured from the
//! govmomi simulator (`fixtures/`).

use super::*;
use crate::backend::cns::vim::{Login, ServiceContent, UserSession};

const SERVICE_CONTENT: &str = include_str!("fixtures/service_content.xml");
const LOGIN: &str = include_str!("fixtures/login.xml");
const DISK_UUID: &str = include_str!("fixtures/disk_uuid.xml");
const INVALID_LOGIN: &str = include_str!("fixtures/fault_invalid_login.xml");
const NOT_AUTHENTICATED: &str = include_str!("fixtures/fault_not_authenticated.xml");
const FILE_NOT_FOUND: &str = include_str!("fixtures/fault_file_not_found.xml");

#[test]
fn method_xml_puts_the_namespace_on_the_method_element() {
    let this = MoRef::new("SessionManager", "SessionManager");
    let xml = method_xml(
        "Login",
        VIM_NS,
        &Login {
            this: &this,
            user_name: "a<b",
            password: "p&q\"'",
        },
    )
    .unwrap();
    assert_eq!(
        xml,
        "<Login xmlns=\"urn:vim25\"><_this type=\"SessionManager\">SessionManager</_this>\
         <userName>a&lt;b</userName><password>p&amp;q\"'</password></Login>"
    );
}

#[test]
fn envelope_has_the_session_header_only_when_asked() {
    let plain = envelope("<X/>", None);
    assert!(plain.starts_with("<?xml version=\"1.0\" encoding=\"UTF-8\"?><soapenv:Envelope"));
    assert!(plain.ends_with("<soapenv:Body><X/></soapenv:Body></soapenv:Envelope>"));
    assert!(!plain.contains("Header"));
    let cns = envelope("<X/>", Some("ab<c"));
    assert!(
        cns.contains("<soapenv:Header><vcSessionCookie>ab&lt;c</vcSessionCookie></soapenv:Header>"),
        "{cns}"
    );
}

#[test]
fn service_content_parses() {
    let content: Returnval<ServiceContent> = parse_response(SERVICE_CONTENT).unwrap();
    let content = content.returnval.unwrap();
    assert_eq!(content.root_folder, MoRef::new("Folder", "group-d1"));
    assert_eq!(
        content.property_collector,
        MoRef::new("PropertyCollector", "propertyCollector")
    );
    assert_eq!(
        content.session_manager,
        Some(MoRef::new("SessionManager", "SessionManager"))
    );
    assert_eq!(
        content.virtual_disk_manager,
        Some(MoRef::new("VirtualDiskManager", "virtualDiskManager"))
    );
    assert_eq!(content.about.api_version, "6.5");
    assert_eq!(content.about.api_type, "VirtualCenter");
}

#[test]
fn login_and_disk_uuid_responses_parse() {
    let session: Returnval<UserSession> = parse_response(LOGIN).unwrap();
    assert_eq!(session.returnval.unwrap().user_name, "user");
    let uuid: Returnval<String> = parse_response(DISK_UUID).unwrap();
    assert_eq!(
        uuid.returnval.unwrap(),
        "6381c74c-c8b5-5e56-9467-03907fbbbdd9"
    );
}

#[test]
fn invalid_login_fault() {
    let fault = parse_fault(INVALID_LOGIN).unwrap();
    assert_eq!(fault.name, "InvalidLogin");
    assert_eq!(fault.message, "Login failure");
}

#[test]
fn not_authenticated_fault_without_message_is_named() {
    let fault = parse_fault(NOT_AUTHENTICATED).unwrap();
    assert_eq!(fault.name, "NotAuthenticated");
    assert_eq!(
        fault.message, "NotAuthenticated",
        "no misleading privilege text"
    );
}

#[test]
fn file_not_found_fault_keeps_the_file() {
    let fault = parse_fault(FILE_NOT_FOUND).unwrap();
    assert_eq!(fault.name, "FileNotFound");
    assert_eq!(
        fault.data.file.as_deref(),
        Some("[LocalDS_0] kubevols/nope.vmdk")
    );
    assert_eq!(
        fault.message,
        "File [LocalDS_0] kubevols/nope.vmdk was not found"
    );
}

#[test]
fn a_fault_body_given_to_parse_response_is_a_fault() {
    match parse_response::<Returnval<String>>(FILE_NOT_FOUND) {
        Err(ResponseError::Fault(fault)) => assert_eq!(fault.name, "FileNotFound"),
        other => panic!("expected a fault, got {other:?}"),
    }
}

#[test]
fn a_success_body_is_not_a_fault() {
    assert!(parse_fault(DISK_UUID).is_none());
    assert!(parse_fault(LOGIN).is_none());
}

#[test]
fn garbage_is_malformed() {
    for body in ["", "<html>502 Bad Gateway</html>", "not xml at all"] {
        match parse_response::<Returnval<String>>(body) {
            Err(ResponseError::Malformed(_)) => {}
            other => panic!("{body:?}: expected malformed, got {other:?}"),
        }
        assert!(parse_fault(body).is_none(), "{body:?}");
    }
}

#[test]
fn a_fault_without_detail_is_named_after_its_code() {
    let xml = "<soapenv:Envelope xmlns:soapenv=\"http://schemas.xmlsoap.org/soap/envelope/\">\
               <soapenv:Body><soapenv:Fault><faultcode>soapenv:Server</faultcode>\
               <faultstring>xml.Unmarshal: bad</faultstring></soapenv:Fault></soapenv:Body>\
               </soapenv:Envelope>";
    let fault = parse_fault(xml).unwrap();
    assert_eq!(fault.name, "Server");
    assert_eq!(fault.message, "xml.Unmarshal: bad");
}

#[test]
fn type_names_lose_prefixes_and_packages() {
    assert_eq!(bare_type_name("InvalidLogin"), "InvalidLogin");
    assert_eq!(bare_type_name("vim25:InvalidLogin"), "InvalidLogin");
    assert_eq!(bare_type_name("vim.fault.InvalidLogin"), "InvalidLogin");
}

#[test]
fn localized_faults_combine_all_messages_once() {
    let fault = Fault::from_localized(LocalizedMethodFault {
        fault: Some(FaultData {
            kind: Some("CnsFault".to_owned()),
            reason: Some("disk busy".to_owned()),
            messages: vec![LocalizableMessage {
                message: Some("disk busy".to_owned()),
            }],
            ..FaultData::default()
        }),
        localized_message: Some("CNS: operation failed".to_owned()),
    });
    assert_eq!(fault.name, "CnsFault");
    assert_eq!(fault.message, "CNS: operation failed; disk busy");
}
