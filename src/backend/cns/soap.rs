//! SOAP 1.1 envelopes: building requests and parsing responses and faults with quick-xml's
//! serde support. Nothing here does I/O.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// Namespace of the vim25 API (`/sdk`).
pub(crate) const VIM_NS: &str = "urn:vim25";
/// Namespace of the CNS API (`/vsanHealth`).
pub(crate) const CNS_NS: &str = "urn:vsan";

/// The deepest element nesting volmig accepts in an answer. Real answers stay far below:
/// envelope, body, response, `returnval`, then a CNS volume's `metadata`/`entityMetadata`/
/// `referredEntity` or a property collector's `objects`/`propSet`/`val` and a fault's
/// cause chain are some 15–25 levels. A deeper document is refused before serde sees it,
/// so no decoder recursion depends on what the server sends.
pub(crate) const MAX_XML_DEPTH: usize = 128;

/// The longest fault message volmig keeps (characters): it ends up in
/// `status.lastError.message` and logs, which a server must not be able to flood.
pub(crate) const MAX_FAULT_MESSAGE_CHARS: usize = 2048;

/// The longest fault type name volmig keeps (characters); real ones are under 50.
pub(crate) const MAX_FAULT_NAME_CHARS: usize = 100;

const ENVELOPE_START: &str = concat!(
    r#"<?xml version="1.0" encoding="UTF-8"?>"#,
    r#"<soapenv:Envelope xmlns:soapenc="http://schemas.xmlsoap.org/soap/encoding/""#,
    r#" xmlns:soapenv="http://schemas.xmlsoap.org/soap/envelope/""#,
    r#" xmlns:xsd="http://www.w3.org/2001/XMLSchema""#,
    r#" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance">"#
);

/// A managed object reference, `<x type="Folder">group-d1</x>`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub(crate) struct MoRef {
    /// The managed object type, e.g. `Datastore`.
    #[serde(rename = "@type")]
    pub kind: String,
    /// The managed object ID, e.g. `datastore-12`.
    #[serde(rename = "$text")]
    pub value: String,
}

impl MoRef {
    /// A reference of `kind` to `value`.
    pub fn new(kind: &str, value: &str) -> Self {
        Self {
            kind: kind.to_owned(),
            value: value.to_owned(),
        }
    }
}

impl std::fmt::Display for MoRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.kind, self.value)
    }
}

/// Serializes one SOAP method call: `<method xmlns="ns">…body fields…</method>`.
pub(crate) fn method_xml<T: Serialize>(
    method: &str,
    namespace: &str,
    body: &T,
) -> Result<String, quick_xml::SeError> {
    let xml = quick_xml::se::to_string_with_root(method, body)?;
    // The serializer writes `<method` first; the namespace goes right after the name.
    let split = 1 + method.len();
    Ok(format!(
        "{} xmlns=\"{}\"{}",
        &xml[..split],
        namespace,
        &xml[split..]
    ))
}

/// Wraps a serialized method call in a SOAP envelope. `session_cookie` adds the
/// `vcSessionCookie` header that the CNS endpoint reads on a real vCenter.
pub(crate) fn envelope(method_xml: &str, session_cookie: Option<&str>) -> String {
    let mut out = String::with_capacity(ENVELOPE_START.len() + method_xml.len() + 160);
    out.push_str(ENVELOPE_START);
    if let Some(cookie) = session_cookie {
        out.push_str("<soapenv:Header><vcSessionCookie>");
        out.push_str(&quick_xml::escape::escape(cookie));
        out.push_str("</vcSessionCookie></soapenv:Header>");
    }
    out.push_str("<soapenv:Body>");
    out.push_str(method_xml);
    out.push_str("</soapenv:Body></soapenv:Envelope>");
    out
}

#[derive(Deserialize)]
struct Envelope<B> {
    #[serde(rename = "Body")]
    body: B,
}

#[derive(Deserialize)]
struct Body<T> {
    #[serde(rename = "$value")]
    content: T,
}

/// The usual shape of a vim25 response element: one optional `returnval`.
#[derive(Debug, Deserialize)]
pub(crate) struct Returnval<T> {
    pub returnval: Option<T>,
}

/// `LocalizableMessage` of `MethodFault.faultMessage`.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct LocalizableMessage {
    pub message: Option<String>,
}

/// A CNS volume ID as it appears in XML, `<volumeId><id>…</id></volumeId>`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct CnsVolumeIdXml {
    pub id: String,
}

/// The fields of a `MethodFault` (any subtype) that volmig reads.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct FaultData {
    /// `xsi:type`, e.g. `InvalidLogin`, `CnsAlreadyRegisteredFault`.
    #[serde(rename = "@type")]
    pub kind: Option<String>,
    #[serde(rename = "faultMessage", default)]
    pub messages: Vec<LocalizableMessage>,
    /// `CnsFault.reason`.
    pub reason: Option<String>,
    /// `CnsAlreadyRegisteredFault.volumeId`.
    #[serde(rename = "volumeId")]
    pub volume_id: Option<CnsVolumeIdXml>,
    /// `FileFault.file`.
    pub file: Option<String>,
    /// `InvalidArgument.invalidProperty`.
    #[serde(rename = "invalidProperty")]
    pub invalid_property: Option<String>,
    /// `NoPermission.privilegeId`.
    #[serde(rename = "privilegeId")]
    pub privilege_id: Option<String>,
}

/// `LocalizedMethodFault`: a fault inside a task result or task error.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct LocalizedMethodFault {
    pub fault: Option<FaultData>,
    #[serde(rename = "localizedMessage")]
    pub localized_message: Option<String>,
}

#[derive(Debug, Deserialize)]
struct SoapFaultXml {
    faultcode: Option<String>,
    faultstring: Option<String>,
    detail: Option<FaultDetailXml>,
}

#[derive(Debug, Deserialize)]
struct FaultDetailXml {
    #[serde(rename = "$value")]
    fault: Option<FaultData>,
}

/// A server fault, reduced to what volmig keeps: the fault type name, a message, and the
/// fault's data.
#[derive(Debug, Clone, Default)]
pub(crate) struct Fault {
    /// The vim/CNS fault type without namespace, e.g. `FileNotFound`.
    pub name: String,
    /// The best human-readable message the server gave.
    pub message: String,
    /// The fault's fields.
    pub data: FaultData,
}

/// Strips a namespace prefix and a vmodl package from a type name:
/// `vim25:InvalidLogin` and `vim.fault.InvalidLogin` both give `InvalidLogin`.
pub(crate) fn bare_type_name(name: &str) -> &str {
    let name = name.rsplit(':').next().unwrap_or(name);
    name.rsplit('.').next().unwrap_or(name).trim()
}

/// A fault type name as the server sent it, reduced to the characters a vmodl type name
/// has (letters, digits, `_`) and [`MAX_FAULT_NAME_CHARS`]; `None` when nothing is left.
fn sanitized_fault_name(name: &str) -> Option<String> {
    let clean: String = bare_type_name(name)
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '_')
        .take(MAX_FAULT_NAME_CHARS)
        .collect();
    (!clean.is_empty()).then_some(clean)
}

/// `message` cut to [`MAX_FAULT_MESSAGE_CHARS`] characters.
fn bounded_message(mut message: String) -> String {
    if let Some((cut, _)) = message.char_indices().nth(MAX_FAULT_MESSAGE_CHARS) {
        message.truncate(cut);
        message.push_str("… (truncated)");
    }
    message
}

impl Fault {
    /// Builds a fault from its data and the surrounding messages. Unknown fault types keep
    /// their (sanitized) name; the message is bounded.
    pub fn from_data(data: FaultData, outer_message: Option<&str>) -> Self {
        let name = data
            .kind
            .as_deref()
            .and_then(sanitized_fault_name)
            .unwrap_or_else(|| "MethodFault".to_owned());
        let mut parts: Vec<String> = Vec::new();
        let mut push = |text: &str, mentions: &str| {
            let text = text.trim();
            if !text.is_empty() && !parts.iter().any(|p| p.contains(mentions.trim())) {
                parts.push(text.to_owned());
            }
        };
        if let Some(outer) = outer_message {
            push(outer, outer);
        }
        if let Some(reason) = data.reason.as_deref() {
            push(reason, reason);
        }
        for message in data.messages.iter().filter_map(|m| m.message.as_deref()) {
            push(message, message);
        }
        if let Some(file) = data.file.as_deref() {
            push(&format!("file {file}"), file);
        }
        if let Some(property) = data.invalid_property.as_deref() {
            push(&format!("invalid property {property}"), property);
        }
        if let Some(privilege) = data.privilege_id.as_deref()
            && name != "NotAuthenticated"
        {
            push(&format!("missing privilege {privilege}"), privilege);
        }
        let message = bounded_message(if parts.is_empty() {
            name.clone()
        } else {
            parts.join("; ")
        });
        Self {
            name,
            message,
            data,
        }
    }

    /// Builds a fault from a `LocalizedMethodFault` of a task or a CNS operation result.
    pub fn from_localized(fault: LocalizedMethodFault) -> Self {
        Self::from_data(
            fault.fault.unwrap_or_default(),
            fault.localized_message.as_deref(),
        )
    }
}

/// Why a SOAP response could not be turned into a value.
#[derive(Debug)]
pub(crate) enum ResponseError {
    /// The server answered with a SOAP fault.
    Fault(Box<Fault>),
    /// The body is not the expected XML.
    Malformed(String),
}

/// Parses a response body into the content of its one body element; a SOAP fault (even
/// with HTTP 200) is returned as [`ResponseError::Fault`].
pub(crate) fn parse_response<T: DeserializeOwned>(xml: &str) -> Result<T, ResponseError> {
    if (xml.contains(":Fault>") || xml.contains("<Fault>"))
        && let Some(fault) = parse_fault(xml)
    {
        return Err(ResponseError::Fault(Box::new(fault)));
    }
    quick_xml::de::from_str::<Envelope<Body<T>>>(xml)
        .map(|envelope| envelope.body.content)
        .map_err(|err| ResponseError::Malformed(err.to_string()))
}

/// Parses a SOAP fault body; `None` when the body is not a fault.
pub(crate) fn parse_fault(xml: &str) -> Option<Fault> {
    let envelope = quick_xml::de::from_str::<Envelope<Body<SoapFaultXml>>>(xml).ok()?;
    let fault = envelope.body.content;
    if fault.faultcode.is_none() && fault.faultstring.is_none() && fault.detail.is_none() {
        return None;
    }
    let data = fault
        .detail
        .and_then(|d| d.fault)
        .unwrap_or_else(|| FaultData {
            // No detail: the fault code (e.g. `ServerFaultCode`) is the best name there is.
            kind: fault.faultcode.clone(),
            ..FaultData::default()
        });
    Some(Fault::from_data(data, fault.faultstring.as_deref()))
}

/// Checks that `xml` is one well-formed document nested at most [`MAX_XML_DEPTH`]
/// elements deep, without building anything: one pass of quick-xml's pull parser, whose
/// memory does not grow with the nesting. Serde decoding runs only after this passed.
pub(crate) fn check_xml(xml: &str) -> Result<(), String> {
    use quick_xml::events::Event;

    let mut reader = quick_xml::Reader::from_str(xml);
    reader.config_mut().check_end_names = true;
    let mut depth = 0usize;
    let mut elements = 0usize;
    loop {
        let position = reader.buffer_position();
        match reader.read_event() {
            Ok(Event::Start(_)) => {
                depth += 1;
                elements += 1;
                if depth > MAX_XML_DEPTH {
                    return Err(format!(
                        "XML nested deeper than {MAX_XML_DEPTH} elements (at byte {position}); \
                         refused"
                    ));
                }
            }
            Ok(Event::End(_)) => depth = depth.saturating_sub(1),
            Ok(Event::Empty(_)) => elements += 1,
            Ok(Event::Eof) => break,
            Ok(_) => {}
            Err(e) => {
                return Err(format!(
                    "malformed XML at byte {}: {}",
                    reader.error_position(),
                    printable(&e.to_string(), 200)
                ));
            }
        }
    }
    if depth > 0 {
        return Err(format!(
            "truncated XML: the document ends with {depth} element(s) still open"
        ));
    }
    if elements == 0 {
        return Err("no XML element in the answer".to_owned());
    }
    Ok(())
}

/// `text` without control characters, cut to `max` characters (for server-chosen strings
/// in messages).
pub(crate) fn printable(text: &str, max: usize) -> String {
    let mut out: String = text.chars().filter(|c| !c.is_control()).take(max).collect();
    if text.chars().filter(|c| !c.is_control()).nth(max).is_some() {
        out.push('…');
    }
    out
}

#[cfg(test)]
#[path = "soap_tests.rs"]
mod tests;

#[cfg(test)]
mod hostile_tests {
    use super::*;

    fn envelope_around(inner: &str) -> String {
        format!(
            r#"<?xml version="1.0"?><soapenv:Envelope xmlns:soapenv="http://schemas.xmlsoap.org/soap/envelope/"><soapenv:Body>{inner}</soapenv:Body></soapenv:Envelope>"#
        )
    }

    #[test]
    fn ten_thousand_nested_elements_are_refused_before_decoding() {
        let deep = format!("{}{}", "<x>".repeat(10_000), "</x>".repeat(10_000));
        let err = check_xml(&envelope_around(&deep)).unwrap_err();
        assert!(err.contains("deeper than 128"), "{err}");
    }

    #[test]
    fn nesting_at_the_limit_is_accepted() {
        // Envelope and Body are two levels.
        let n = MAX_XML_DEPTH - 2;
        let ok = format!("{}{}", "<x>".repeat(n), "</x>".repeat(n));
        assert_eq!(check_xml(&envelope_around(&ok)), Ok(()));
        let over = format!("{}{}", "<x>".repeat(n + 1), "</x>".repeat(n + 1));
        assert!(check_xml(&envelope_around(&over)).is_err());
    }

    #[test]
    fn truncated_garbage_and_empty_documents_are_refused() {
        let full =
            envelope_around("<LoginResponse><returnval><key>k</key></returnval></LoginResponse>");
        assert_eq!(check_xml(&full), Ok(()));
        let truncated = &full[..full.len() - 40];
        let err = check_xml(truncated).unwrap_err();
        assert!(
            err.contains("truncated") || err.contains("malformed"),
            "{err}"
        );
        let err = check_xml("\u{0}\u{ff}<<<</ >>> &&&;").unwrap_err();
        assert!(err.contains("malformed"), "{err}");
        assert!(check_xml("").is_err());
        assert!(check_xml("just text").is_err());
        let err = check_xml("<a><b></a></b>").unwrap_err();
        assert!(err.contains("malformed"), "{err}");
    }

    #[test]
    fn unknown_fault_names_are_kept_sanitized_and_messages_bounded() {
        let fault = |kind: &str, message: &str| {
            Fault::from_data(
                FaultData {
                    kind: Some(kind.to_owned()),
                    ..FaultData::default()
                },
                Some(message),
            )
        };
        assert_eq!(fault("vim25:FutureFault", "m").name, "FutureFault");
        assert_eq!(fault("NotFoundish", "m").name, "NotFoundish");
        assert_eq!(fault("Bad<Name> \n x", "m").name, "BadNamex");
        assert_eq!(fault("<>", "m").name, "MethodFault");
        let long = fault(&"A".repeat(10_000), &"m".repeat(1_000_000));
        assert_eq!(long.name.len(), MAX_FAULT_NAME_CHARS);
        assert!(long.message.chars().count() < MAX_FAULT_MESSAGE_CHARS + 20);
        assert!(long.message.ends_with("(truncated)"));
    }
}

#[cfg(test)]
#[path = "soap_proptests.rs"]
mod proptests;
