//! Property tests of the SOAP decoders (`soap.rs`, and the response types of `vim.rs`,
//! `volumes.rs` and `fault.rs` decoded through them): arbitrary bytes and well-formed but
//! wrong XML never panic and give a typed error; hostile XML (deep nesting, entity
//! definitions) is refused; valid envelopes round-trip the fields volmig reads.

use proptest::prelude::*;
use quick_xml::escape::escape;

use super::*;
use crate::backend::ErrorClass;
use crate::backend::cns::backing;
use crate::backend::cns::fault::{classify, from_fault};
use crate::backend::cns::vim::{
    RetrieveResult, ServiceContent, SimpleValue, TaskInfo, UserSession,
};
use crate::backend::cns::volumes::{
    BatchResult, CnsQueryResult, VolumeOutcome, next_offset, volume_outcome,
};

const ENVELOPE_END: &str = "</soapenv:Body></soapenv:Envelope>";

fn wrap(body: &str) -> String {
    format!("{ENVELOPE_START}<soapenv:Body>{body}{ENVELOPE_END}")
}

/// Runs every response decoder volmig has over `xml`; none may panic. Returns whether
/// each was an error, and checks that what decodes can be used without panicking.
fn decode_all(xml: &str) -> [bool; 7] {
    let service = parse_response::<Returnval<ServiceContent>>(xml);
    let session = parse_response::<Returnval<UserSession>>(xml);
    let text = parse_response::<Returnval<String>>(xml);
    let query = parse_response::<Returnval<CnsQueryResult>>(xml);
    if let Ok(Returnval {
        returnval: Some(result),
    }) = &query
    {
        let _ = next_offset(0, result.volumes.len(), result.cursor);
    }
    let query_ok = query.is_ok();
    if let Ok(Returnval {
        returnval: Some(result),
    }) = query
    {
        for volume in result.volumes {
            let _ = volume.into_volume();
        }
    }
    let task = parse_response::<Returnval<RetrieveResult<TaskInfo<BatchResult>>>>(xml);
    if let Ok(Returnval {
        returnval: Some(result),
    }) = &task
    {
        for object in &result.objects {
            for prop in &object.prop_set {
                if let Some(batch) = &prop.val.result {
                    let _ = volume_outcome(batch.volume_results.first());
                }
            }
        }
    }
    let inventory = parse_response::<Returnval<RetrieveResult<SimpleValue>>>(xml);
    let fault = parse_fault(xml);
    if let Some(fault) = &fault {
        let err = from_fault("Test", fault);
        assert_eq!(err.fault, fault.name);
        assert!(!fault.name.is_empty());
    }
    [
        service.is_err(),
        session.is_err(),
        text.is_err(),
        !query_ok,
        task.is_err(),
        inventory.is_err(),
        fault.is_none(),
    ]
}

/// Element names of the SOAP shapes volmig decodes, plus strangers.
const NAMES: &[&str] = &[
    "soapenv:Envelope",
    "Envelope",
    "soapenv:Header",
    "soapenv:Fault",
    "Fault",
    "faultcode",
    "faultstring",
    "detail",
    "returnval",
    "rootFolder",
    "propertyCollector",
    "about",
    "apiVersion",
    "userName",
    "volumes",
    "volumeId",
    "id",
    "cursor",
    "offset",
    "limit",
    "totalRecords",
    "name",
    "backingObjectDetails",
    "backingDiskUrlPath",
    "backingDiskPath",
    "objects",
    "obj",
    "propSet",
    "val",
    "state",
    "result",
    "error",
    "volumeResults",
    "fault",
    "faultMessage",
    "message",
    "reason",
    "file",
    "token",
    "ManagedObjectReference",
    "x",
    "a:b",
    "html",
];

const ATTRS: &[&str] = &[
    "",
    " type=\"Folder\"",
    " xsi:type=\"CnsAlreadyRegisteredFault\"",
    " xmlns=\"urn:vim25\"",
    " xmlns:soapenv=\"http://schemas.xmlsoap.org/soap/envelope/\"",
    " type=\"\"",
];

const TEXTS: &[&str] = &[
    "",
    "0",
    "-1",
    "500",
    "99999999999999999999",
    "1e9",
    "success",
    "error",
    "true",
    "[LocalDS_0] a.vmdk",
    "https://vc/folder/a.vmdk?dcPath=DC0&amp;dsName=ds",
    "https://vc/folder/%ZZ?dsName=",
    "&lt;&gt;&amp;&quot;",
    "é卷🦀",
    "  spaced  ",
    "&#0;",
    "&#xD800;",
    "&#1114112;",
    "<![CDATA[x]]>",
];

#[derive(Debug, Clone)]
enum Node {
    Text(&'static str),
    Element(&'static str, &'static str, Vec<Node>),
}

fn node(names: &'static [&'static str]) -> impl Strategy<Value = Node> {
    let leaf = prop::sample::select(TEXTS).prop_map(Node::Text);
    leaf.prop_recursive(6, 60, 5, move |inner| {
        (
            prop::sample::select(names),
            prop::sample::select(ATTRS),
            prop::collection::vec(inner, 0..5),
        )
            .prop_map(|(name, attrs, children)| Node::Element(name, attrs, children))
    })
}

fn render(node: &Node, out: &mut String) {
    match node {
        Node::Text(text) => out.push_str(text),
        Node::Element(name, attrs, children) => {
            out.push('<');
            out.push_str(name);
            out.push_str(attrs);
            out.push('>');
            for child in children {
                render(child, out);
            }
            out.push_str("</");
            out.push_str(name);
            out.push('>');
        }
    }
}

fn contains_body(node: &Node) -> bool {
    match node {
        Node::Text(_) => false,
        Node::Element(name, _, children) => {
            name.rsplit(':').next() == Some("Body") || children.iter().any(contains_body)
        }
    }
}

/// Text that survives XML escaping and unescaping: no control characters.
fn xml_text() -> impl Strategy<Value = String> {
    prop_oneof!["[A-Za-z0-9._-]{1,20}", "[^\\p{C}]{1,30}"]
}

proptest! {
    #[test]
    fn arbitrary_bytes_are_refused_without_panicking(
        bytes in prop::collection::vec(any::<u8>(), 0..2048),
        envelope_prefix in any::<bool>(),
    ) {
        let mut text = String::from_utf8_lossy(&bytes).into_owned();
        if envelope_prefix {
            text.insert_str(0, &format!("{ENVELOPE_START}<soapenv:Body>"));
        }
        let errors = decode_all(&text);
        prop_assert!(errors[..6].iter().all(|e| *e), "{:?} decoded: {:?}", text, errors);
    }

    #[test]
    fn well_formed_xml_of_the_soap_vocabulary_never_panics(
        tree in node(NAMES),
        wrapped in any::<bool>(),
    ) {
        let mut xml = String::new();
        render(&tree, &mut xml);
        let xml = if wrapped { wrap(&xml) } else { xml };
        decode_all(&xml);
    }

    /// Without a `Body` element nothing decodes: every decoder gives its error.
    #[test]
    fn well_formed_xml_without_a_body_is_malformed(
        tree in node(NAMES).prop_filter("no Body", |t| !contains_body(t)),
    ) {
        let mut xml = String::new();
        render(&tree, &mut xml);
        let errors = decode_all(&xml);
        prop_assert!(errors.iter().all(|e| *e), "{} decoded: {:?}", xml, errors);
        match parse_response::<Returnval<CnsQueryResult>>(&xml) {
            Err(ResponseError::Malformed(message)) => prop_assert!(!message.is_empty()),
            other => prop_assert!(false, "{:?}", other),
        }
    }

    #[test]
    fn query_results_round_trip(
        volumes in prop::collection::vec((xml_text(), xml_text(), prop::option::of(xml_text())), 0..5),
        cursor in (any::<i64>(), any::<i64>(), prop::option::of(any::<i64>())),
    ) {
        let mut body = String::from("<CnsQueryVolumeResponse xmlns=\"urn:vsan\"><returnval>");
        for (id, name, url) in &volumes {
            body.push_str(&format!(
                "<volumes><volumeId><id>{}</id></volumeId><name>{}</name><volumeType>BLOCK</volumeType>",
                escape(id.as_str()),
                escape(name.as_str())
            ));
            if let Some(url) = url {
                body.push_str(&format!(
                    "<backingObjectDetails><backingDiskUrlPath>{}</backingDiskUrlPath></backingObjectDetails>",
                    escape(url.as_str())
                ));
            }
            body.push_str("</volumes>");
        }
        let (offset, limit, total) = cursor;
        body.push_str(&format!("<cursor><offset>{offset}</offset><limit>{limit}</limit>"));
        if let Some(total) = total {
            body.push_str(&format!("<totalRecords>{total}</totalRecords>"));
        }
        body.push_str("</cursor></returnval></CnsQueryVolumeResponse>");
        let xml = wrap(&body);
        let parsed: Returnval<CnsQueryResult> = parse_response(&xml)
            .map_err(|e| TestCaseError::fail(format!("{e:?}\n{xml}")))?;
        let result = parsed.returnval.ok_or_else(|| TestCaseError::fail("no returnval"))?;
        let parsed_cursor = result.cursor.ok_or_else(|| TestCaseError::fail("no cursor"))?;
        prop_assert_eq!(
            (parsed_cursor.offset, parsed_cursor.limit, parsed_cursor.total_records),
            (offset, limit, total)
        );
        prop_assert_eq!(result.volumes.len(), volumes.len());
        for (volume, (id, name, url)) in result.volumes.into_iter().zip(&volumes) {
            let volume = volume.into_volume();
            prop_assert_eq!(&volume.id.0, id);
            prop_assert_eq!(&volume.name, name);
            let expected = url.as_deref().and_then(backing::path_from_backing_url);
            prop_assert_eq!(volume.backing_path, expected);
        }
    }

    #[test]
    fn faults_round_trip(
        kind in "[A-Z][A-Za-z]{0,20}",
        prefix in prop::sample::select(&["", "vim25:", "vim.fault.", "vsan:"][..]),
        faultstring in prop::option::of(xml_text()),
        file in prop::option::of(xml_text()),
        property in prop::option::of(xml_text()),
    ) {
        let mut detail = format!(
            "<{kind}Fault xmlns=\"urn:vim25\" xsi:type=\"{prefix}{kind}\">"
        );
        if let Some(file) = &file {
            detail.push_str(&format!("<file>{}</file>", escape(file.as_str())));
        }
        if let Some(property) = &property {
            detail.push_str(&format!("<invalidProperty>{}</invalidProperty>", escape(property.as_str())));
        }
        detail.push_str(&format!("</{kind}Fault>"));
        let faultstring_xml = faultstring
            .as_deref()
            .map(|s| format!("<faultstring>{}</faultstring>", escape(s)))
            .unwrap_or_default();
        let xml = wrap(&format!(
            "<soapenv:Fault><faultcode>ServerFaultCode</faultcode>{faultstring_xml}<detail>{detail}</detail></soapenv:Fault>"
        ));
        let fault = parse_fault(&xml).ok_or_else(|| TestCaseError::fail(xml.clone()))?;
        prop_assert_eq!(&fault.name, &kind);
        prop_assert_eq!(&fault.data.file, &file);
        prop_assert_eq!(&fault.data.invalid_property, &property);
        if let Some(text) = faultstring.as_deref().map(str::trim).filter(|t| !t.is_empty()) {
            prop_assert!(fault.message.contains(text), "{:?} lacks {:?}", fault.message, text);
        }
        let err = from_fault("Op", &fault);
        prop_assert_eq!(err.class, classify(&kind));
        match parse_response::<Returnval<String>>(&xml) {
            Err(ResponseError::Fault(f)) => prop_assert_eq!(&f.name, &kind),
            other => prop_assert!(false, "{:?}", other),
        }
    }

    #[test]
    fn already_registered_task_results_name_the_volume(id in "[A-Za-z0-9-]{1,40}", reason in xml_text()) {
        let xml = wrap(&format!(
            "<RetrievePropertiesExResponse xmlns=\"urn:vim25\"><returnval><objects>\
             <obj type=\"Task\">task-1</obj><propSet><name>info</name>\
             <val xsi:type=\"TaskInfo\"><key>task-1</key><state>success</state>\
             <result xsi:type=\"CnsVolumeOperationBatchResult\"><volumeResults>\
             <volumeId><id></id></volumeId><fault><fault xsi:type=\"CnsAlreadyRegisteredFault\">\
             <reason>{}</reason><volumeId><id>{id}</id></volumeId></fault></fault>\
             </volumeResults></result></val></propSet></objects></returnval>\
             </RetrievePropertiesExResponse>",
            escape(reason.as_str())
        ));
        let parsed: Returnval<RetrieveResult<TaskInfo<BatchResult>>> = parse_response(&xml)
            .map_err(|e| TestCaseError::fail(format!("{e:?}")))?;
        let mut objects = parsed.returnval.ok_or_else(|| TestCaseError::fail("no returnval"))?.objects;
        prop_assert_eq!(objects.len(), 1);
        let info = objects.remove(0).prop_set.remove(0).val;
        prop_assert_eq!(info.state.as_str(), "success");
        let batch = info.result.unwrap_or_default();
        match volume_outcome(batch.volume_results.first()) {
            VolumeOutcome::AlreadyRegistered(volume, fault) => {
                prop_assert_eq!(volume.0, id);
                prop_assert_eq!(fault.name.as_str(), "CnsAlreadyRegisteredFault");
            }
            other => prop_assert!(false, "{:?}", other),
        }
    }

    /// Only the documented fault names leave the transient class.
    #[test]
    fn unknown_fault_names_are_transient(name in "\\PC{0,40}") {
        let class = classify(&name);
        if class != ErrorClass::Transient {
            prop_assert!(
                name.chars().all(|c| c.is_ascii_alphabetic()),
                "{:?} classified {:?}", name, class
            );
        }
        let fault = Fault::from_data(FaultData { kind: Some(name.clone()), ..FaultData::default() }, None);
        prop_assert!(!fault.name.is_empty());
        prop_assert!(!fault.message.is_empty());
    }
}

#[test]
fn deeply_nested_xml_does_not_overflow_the_stack() {
    for depth in [1_000, 100_000] {
        let inner = format!("{}{}", "<x>".repeat(depth), "</x>".repeat(depth));
        for body in [
            format!("<R><returnval>{inner}</returnval></R>"),
            format!("<R><returnval><volumes>{inner}</volumes></returnval></R>"),
            format!("<soapenv:Fault><detail>{inner}</detail></soapenv:Fault>"),
            inner.clone(),
        ] {
            decode_all(&wrap(&body));
        }
        // Unbalanced: opened and never closed.
        decode_all(&wrap(&"<x>".repeat(depth)));
    }
}

#[test]
fn entity_definitions_are_not_expanded() {
    let laughs = "<?xml version=\"1.0\"?><!DOCTYPE lolz [<!ENTITY lol \"lol\">\
        <!ENTITY lol2 \"&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;\">\
        <!ENTITY lol3 \"&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;\">]>\
        <soapenv:Envelope xmlns:soapenv=\"http://schemas.xmlsoap.org/soap/envelope/\">\
        <soapenv:Body><R><returnval>&lol3;</returnval></R></soapenv:Body></soapenv:Envelope>";
    let external = "<?xml version=\"1.0\"?><!DOCTYPE r [<!ENTITY xxe SYSTEM \"file:///etc/passwd\">]>\
        <soapenv:Envelope xmlns:soapenv=\"http://schemas.xmlsoap.org/soap/envelope/\">\
        <soapenv:Body><R><returnval>&xxe;</returnval></R></soapenv:Body></soapenv:Envelope>";
    for xml in [laughs, external] {
        match parse_response::<Returnval<String>>(xml) {
            Err(ResponseError::Malformed(message)) => assert!(!message.is_empty()),
            Ok(value) => panic!("entity expanded into {value:?}"),
            Err(other) => panic!("{other:?}"),
        }
        assert!(parse_fault(xml).is_none());
    }
}

#[test]
fn a_large_valid_query_page_decodes() {
    let volume = "<volumes><volumeId><id>v</id></volumeId><name>n</name></volumes>";
    let xml = wrap(&format!(
        "<CnsQueryVolumeResponse xmlns=\"urn:vsan\"><returnval>{}<cursor><offset>500</offset>\
         <limit>500</limit></cursor></returnval></CnsQueryVolumeResponse>",
        volume.repeat(10_000)
    ));
    let parsed: Returnval<CnsQueryResult> = parse_response(&xml).unwrap();
    assert_eq!(parsed.returnval.unwrap().volumes.len(), 10_000);
}
